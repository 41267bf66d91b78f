// haproxy's agent check (`server ... agent-check agent-port N`, haproxy 2.6 configuration manual
// 5.2): haproxy connects to a TCP port, sends its `agent-send` string if it has one, reads one
// ASCII line ending in "\n" and closes. `sampan serve --agent-port N` answers it, so a gateway
// balances on each node's own figures (issue #22). The `agent-send` line says what is asked
// (agent_report.h): `model=NAME unit=U` for one model's backend, nothing (or an empty line) for
// the node as a whole.
//
//   up ready NN%       serving. For a model: NN from the node's measured service rate of that
//                      model (agent_report.h); for the node: from its saturation (AgentWeight).
//                      A percentage of the server's configured weight (100: NN% is a weight of
//                      NN). `up` and `ready` undo an earlier `down` or `drain`.
//   drain              shutting down (SIGTERM/SIGINT): weight 0, so haproxy sends no new requests
//                      while those in flight finish; the node stays UP for them.
//   down #not ready    /v2/health/ready would answer not ready (strict readiness: a model that
//                      should serve does not, or a GPU health rule tripped). haproxy marks the
//                      node DOWN at once, as its HTTP check on /v2/health/ready would after `fall`
//                      checks, and keeps it DOWN until the agent says `up` again (the HTTP check
//                      must pass too). `drain` would keep sending persistent sessions to a node
//                      that cannot answer them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "server/core/core.h"

namespace sampan::server {

//! What the agent reports, read afresh for each connection.
struct AgentState {
  bool shutting_down = false;
  bool ready = true;
  double saturation = 0;  //!< Core::Saturation(): 0 idle, 1 at what the instances complete in time
  std::string reason;     //!< Core::NotReadyReason(): a GPU health rule tripped
};

//! The weight haproxy gets, in percent: round(100 * (1 - min(saturation, 1))), at least 1 (a
//! saturated node still takes a share: weight 0 is `drain`'s). NaN counts as saturated.
int AgentWeight(double saturation);
//! The line answered, "\n" included: "up ready 88%\n", "drain\n", "down #not ready\n" (with the
//! reason when there is one: "down #not ready: GPU 0 (GPU-...): XID 79 (...)\n").
std::string AgentReply(const AgentState& state);
//! The Core's state as the agent reports it.
AgentState AgentStateOf(const Core& core);

struct AgentCheckOptions {
  std::string address = "127.0.0.1";
  int port = 0;  //!< 0 = pick a free port (see AgentCheckServer::port())
  //! A connection is closed this long after it was accepted, whether or not the agent read its
  //! line and closed its side.
  std::chrono::milliseconds timeout{2000};
  //! Connections open at once; more are closed on accept, unanswered.
  int max_connections = 64;
  //! How long to wait for the `agent-send` line (haproxy sends it on connecting); after it, the
  //! connection is answered as one that sent nothing.
  std::chrono::milliseconds query_timeout{100};
  //! The longest `agent-send` line read; a longer one is answered as it was cut.
  size_t max_query = 256;
};

//! The responder: one thread, its own io_context (Boost.Asio), nothing that blocks.
class AgentCheckServer {
 public:
  virtual ~AgentCheckServer() = default;
  //! Binds and answers each connection with reply(its agent-send line, "" if none came, without
  //! the "\n"). `reply` runs on the responder's thread and must stay callable until Stop().
  static Result<std::unique_ptr<AgentCheckServer>> Start(const AgentCheckOptions& options,
                                                         std::function<std::string(std::string_view)> reply);
  virtual int port() const = 0;
  //! Stops at once: open connections are closed, nothing is waited for.
  virtual void Stop() = 0;
};

}  // namespace sampan::server
