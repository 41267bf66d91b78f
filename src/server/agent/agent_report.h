// What the agent check answers for one model's backend (issue #22's unequal nodes).
//
// `sampan deploy haproxy` gives each model's backend `balance leastconn` and an agent check that
// sends `model=NAME unit=U\n` (haproxy's `agent-send`). The node answers with its measured
// service rate of that model as the weight:
//
//   weight = instances x rows per busy second of one instance (over the last `window`) / U
//
// haproxy's leastconn sends each request to the server with the fewest connections per unit of
// weight, in-flight / rate, which by Little's law is the time a new request would wait there.
// So every node settles where its expected latency equals the others' (join the shortest expected
// delay): a node 3x slower holds about a third of the rows and runs smaller batches, rather than
// a share that only shrinks with its saturation (the weight before, 100 x (1 - saturation), which
// left a 3x slower node with 8 of 36 requests and a batch that took 3x as long; see
// docs/deploy.md). The rate is measured while busy (rows over compute time), so an idle node
// keeps its weight instead of dropping to nothing, and a node that has not run a batch yet keeps
// the weight haproxy had (`up ready` with no figure).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "server/agent/agent_check.h"
#include "server/core/core.h"

namespace sampan::server {

//! A parsed `agent-send` line: "" (the node as a whole) or "model=NAME [unit=U]".
struct AgentQuery {
  std::string model;  //!< "": the node's reply (AgentReply)
  double unit = 1;    //!< rows per second per weight point
};
//! Words are `key=value`, separated by spaces; an unknown key, a missing model or a unit that is
//! not a positive number is an error naming the word.
Result<AgentQuery> ParseAgentQuery(std::string_view line);

//! A model on this node as the agent sees it, read from the Core for each check.
struct ModelSnapshot {
  bool found = false;    //!< the repository has the model
  bool ready = false;    //!< a version is READY
  uint64_t rows = 0;     //!< rows computed since load (every batch's size, summed)
  uint64_t busy_ns = 0;  //!< instance time computing them (input + infer + output)
  int instances = 1;     //!< instances that compute side by side
};

//! Rows per second of busy instance time over a sliding window, one model.
class ServiceRate {
 public:
  explicit ServiceRate(std::chrono::milliseconds window) : window_(window) {}
  //! Adds the cumulative counters at `now`; returns the rate over the window, or the last rate
  //! measured when nothing ran in the window (nullopt before any). The first sample's estimate is
  //! the counters' own (rows over busy time since load). A counter that went back (a reload)
  //! restarts the window.
  std::optional<double> Update(std::chrono::steady_clock::time_point now, uint64_t rows, uint64_t busy_ns);

 private:
  struct Sample {
    std::chrono::steady_clock::time_point t;
    uint64_t rows, busy_ns;
  };
  std::chrono::milliseconds window_;
  std::vector<Sample> samples_;  // oldest first; the first is at or before now - window
  std::optional<double> last_;
};

//! The haproxy weight of a rate: round(rate / unit), clamped to 1..256 (haproxy's largest; with
//! the generated `weight 100`, "NN%" is a weight of NN).
int RateWeight(double rows_per_s, double unit);
//! The line for one model: `drain` or `down #...` as for the node, `down #model NAME not ready`,
//! `up ready NN%` with NN = RateWeight(instances x rate), or `up ready` while no rate is known.
std::string ModelReply(const AgentState& node, const std::string& model, const ModelSnapshot& snapshot,
                       std::optional<double> rate, double unit);

struct AgentReportOptions {
  std::chrono::milliseconds window{4000};  //!< the service rate's window
  std::string default_backend;             //!< CoreOptions::default_backend (instances per device)
};

//! Answers each agent check from a Core; keeps the rate windows between checks.
class AgentReporter {
 public:
  AgentReporter(const Core& core, AgentReportOptions options) : core_(core), options_(std::move(options)) {}
  //! The reply to one agent connection whose agent-send line was `query` ("" if none).
  std::string Reply(std::string_view query);
  //! The model's figures now (public for the tests).
  ModelSnapshot Snapshot(const std::string& model) const;

 private:
  const Core& core_;
  AgentReportOptions options_;
  std::mutex mu_;
  std::map<std::string, ServiceRate> rates_;
};

}  // namespace sampan::server
