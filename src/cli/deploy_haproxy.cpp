// `sampan deploy haproxy`: an haproxy configuration (2.6, Debian 12's) that puts several `sampan
// serve` nodes behind one gateway (issue #22):
//   - an HTTP/1.1 frontend and a gRPC (h2) frontend;
//   - per model of the repository an HTTP backend whose health check is that model's
//     /v2/models/NAME/ready, so requests for /v2/models/NAME/... go only to nodes that have it
//     READY; everything else (and gRPC, whose model name is inside the message) goes to the nodes
//     whose /v2/health/ready answers 200;
//   - least-connections balancing, weighted by the nodes' own figures where a node has an agent
//     port (HOST:HTTP_PORT:GRPC_PORT:AGENT_PORT, its `sampan serve --agent-port`): a model's
//     backend sends `model=NAME unit=U` (`agent-send`) and reads `up ready NN%` with NN the node's
//     measured rows per second of that model over U (--agent-rate-unit), so that leastconn's
//     in-flight / weight is each node's expected wait and a slower node gets proportionally less
//     (server/agent/agent_report.h); the node-wide backends send an empty line and read a weight
//     from the node's saturation; every backend reads `drain` while the node shuts down and `down`
//     while it is not ready (server/agent/agent_check.h). Every server has `weight 100`, so that
//     NN% of it is NN (1..256): haproxy takes a percentage of the configured weight, and of the
//     default weight 1 anything under 100% would be 0, a drain;
//   - retries on another node (`retry-on`, `option redispatch`) only where the request cannot have
//     started to be answered: the connection failed, the node answered 503 (Sampan sheds and drains
//     with 503 before executing), it closed without a byte or did not answer within the timeout;
//   - passive outlier ejection: `observe layer7`, `error-limit`, `on-error mark-down`.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "base/file_util.h"
#include "base/split.h"
#include "cli/commands.h"
#include "server/repository/repository.h"

namespace sampan::cli {

namespace {

struct HaproxyFlags {
  std::string repository, out;
  std::vector<std::string> nodes;  // HOST:HTTP_PORT:GRPC_PORT[:AGENT_PORT]
  std::string bind = "127.0.0.1";
  int http_port = 8000;
  int grpc_port = 8001;
  int stats_port = -1;
  int check_interval_ms = 1000;
  int fall = 2;
  int rise = 2;
  int timeout_ms = 30000;
  int connect_timeout_ms = 1000;
  int retries = 2;
  int error_limit = 10;
  int maxconn = 4096;
  double agent_rate_unit = 1;  // rows per second per weight point
};

struct Node {
  std::string name, host;
  int http = 0, grpc = 0, agent = 0;  // agent 0: no agent check
};

Result<int> Port(const std::string& text, const std::string& what, const std::string& where) {
  int p = 0;
  size_t used = 0;
  try {
    p = std::stoi(text, &used);
  } catch (...) {
    used = 0;
  }
  if (text.empty() || used != text.size() || p < 1 || p > 65535)
    return InvalidArgument(where, ": ", what, " port '", text, "' is not a number from 1 to 65535");
  return p;
}

Result<Node> ParseNode(const std::string& spec, size_t index) {
  const std::string where = StrCat("--node '", spec, "'");
  // Every field, empty ones included ("HOST:1:2:" has an empty agent port, not none).
  const std::vector<std::string> parts = SplitFields(spec, ':');
  if (parts.size() < 3 || parts.size() > 4 || parts[0].empty())
    return InvalidArgument(where, ": expected HOST:HTTP_PORT:GRPC_PORT[:AGENT_PORT] (an IPv4 address or name)");
  for (char c : parts[0])
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-')
      return InvalidArgument(where, ": host '", parts[0], "' has a character haproxy would misread ('", c, "')");
  Node n;
  n.name = StrCat("node", index);
  n.host = parts[0];
  SP_ASSIGN_OR_RETURN(n.http, Port(parts[1], "HTTP", where));
  SP_ASSIGN_OR_RETURN(n.grpc, Port(parts[2], "gRPC", where));
  if (parts.size() == 4) {
    SP_ASSIGN_OR_RETURN(n.agent, Port(parts[3], "agent", where));
  }
  return n;
}

// Model names go into paths of ACLs and into backend names unquoted.
Status CheckModelName(const std::string& name) {
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      return InvalidArgument("model '", name, "': only letters, digits, '_', '-' and '.' can be routed by name (",
                             "haproxy path ACLs); rename it or route it with the default backend");
  return Status::Ok();
}

// `model`: the backend's model ("" for the node-wide backends), asked of the agent by name.
std::string ServerLine(const Node& n, const HaproxyFlags& f, bool grpc, const std::string& model) {
  std::string s = StrCat("  server ", n.name, " ", n.host, ":", grpc ? n.grpc : n.http);
  if (grpc)
    s += StrCat(" proto h2 check port ", n.http, " check-proto h1");
  else
    s += " check";
  s += StrCat(" inter ", f.check_interval_ms, "ms fall ", f.fall, " rise ", f.rise, " weight 100");
  if (n.agent > 0)
    s += StrCat(" agent-check agent-addr ", n.host, " agent-port ", n.agent, " agent-inter ", f.check_interval_ms,
                "ms agent-send \"", model.empty() ? "" : StrCat("model=", model, " unit=", f.agent_rate_unit), "\\n\"");
  s += StrCat(" observe layer7 error-limit ", f.error_limit, " on-error mark-down\n");
  return s;
}

void BackendHead(std::ostringstream& c, const std::string& name, const std::string& check_path, bool grpc,
                 const HaproxyFlags& f) {
  c << "\nbackend " << name << "\n";
  c << "  balance leastconn\n";
  if (grpc) c << "  mode http\n";
  c << "  option httpchk GET " << check_path << "\n";
  c << "  http-check expect status 200\n";
  c << "  retries " << f.retries << "\n";
  c << "  option redispatch 1\n";
  // Only where the node cannot have begun an answer: a retry never doubles a request whose
  // response started (503 is Sampan's answer before executing: queue full, draining).
  c << "  retry-on conn-failure empty-response response-timeout 503\n";
}

Status WriteHaproxy(const HaproxyFlags& f) {
  if (f.nodes.empty()) return InvalidArgument("--node: give at least one node, HOST:HTTP_PORT:GRPC_PORT[:AGENT_PORT]");
  std::vector<Node> nodes;
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    SP_ASSIGN_OR_RETURN(Node n, ParseNode(f.nodes[i], i));
    nodes.push_back(n);
  }
  for (auto [value, flag] : {std::pair{f.check_interval_ms, "--check-interval-ms"},
                             {f.timeout_ms, "--timeout-ms"},
                             {f.connect_timeout_ms, "--connect-timeout-ms"}})
    if (value < 1) return InvalidArgument(flag, " must be >= 1 (it is ", value, ")");
  if (f.fall < 1 || f.rise < 1) return InvalidArgument("--fall and --rise must be >= 1");
  if (f.retries < 0 || f.retries > 10) return InvalidArgument("--retries must be in 0..10 (it is ", f.retries, ")");
  if (f.error_limit < 1) return InvalidArgument("--error-limit must be >= 1");
  if (f.maxconn < 1) return InvalidArgument("--maxconn must be >= 1");
  if (!(f.agent_rate_unit > 0) || !std::isfinite(f.agent_rate_unit))
    return InvalidArgument("--agent-rate-unit must be a positive number (it is ", f.agent_rate_unit, ")");
  SP_ASSIGN_OR_RETURN(std::vector<std::string> models, server::ListModels(f.repository));
  for (const std::string& m : models) SP_RETURN_IF_ERROR(CheckModelName(m).WithContext(f.repository));

  std::ostringstream c;
  c << "# Written by `sampan deploy haproxy` for " << nodes.size() << " node(s) and the " << models.size()
    << " model(s) of " << f.repository << " (haproxy 2.6).\n";
  // haproxy needs about two descriptors a connection: it refuses to start when maxconn asks for
  // more than the process may open (ulimit -n).
  c << "global\n  maxconn " << f.maxconn << "\n\n";
  c << "defaults\n  mode http\n  option http-keep-alive\n";
  c << "  timeout connect " << f.connect_timeout_ms << "ms\n";
  c << "  timeout client 60s\n";
  c << "  timeout server " << f.timeout_ms << "ms\n";
  c << "  timeout queue " << f.timeout_ms << "ms\n";
  c << "  timeout check " << f.check_interval_ms << "ms\n";
  c << "\nfrontend sampan_http\n  bind " << f.bind << ":" << f.http_port << "\n";
  for (size_t i = 0; i < models.size(); ++i) {
    // Two lines of one ACL are ORed (one line with both would read path_beg as a path to match).
    c << "  acl model_" << i << " path /v2/models/" << models[i] << "\n";
    c << "  acl model_" << i << " path_beg /v2/models/" << models[i] << "/\n";
    c << "  use_backend http_model_" << models[i] << " if model_" << i << "\n";
  }
  c << "  default_backend http_all\n";
  c << "\nfrontend sampan_grpc\n  bind " << f.bind << ":" << f.grpc_port << " proto h2\n";
  c << "  default_backend grpc_all\n";
  if (f.stats_port > 0)
    c << "\nfrontend stats\n  bind " << f.bind << ":" << f.stats_port
      << "\n  stats enable\n  stats uri /stats\n  stats refresh 1s\n";

  for (const std::string& m : models) {
    BackendHead(c, "http_model_" + m, "/v2/models/" + m + "/ready", false, f);
    for (const Node& n : nodes) c << ServerLine(n, f, false, m);
  }
  BackendHead(c, "http_all", "/v2/health/ready", false, f);
  for (const Node& n : nodes) c << ServerLine(n, f, false, "");
  BackendHead(c, "grpc_all", "/v2/health/ready", true, f);
  for (const Node& n : nodes) c << ServerLine(n, f, true, "");

  SP_RETURN_IF_ERROR(WriteFileAtomic(f.out, c.str()));
  std::printf("wrote %s: %zu node(s), %zu model backend(s); check it with `haproxy -c -f %s`\n", f.out.c_str(),
              nodes.size(), models.size(), f.out.c_str());
  return Status::Ok();
}

}  // namespace

void AddDeployHaproxyCommand(CLI::App* deploy) {
  auto f = std::make_shared<HaproxyFlags>();
  auto* cmd = deploy->add_subcommand(
      "haproxy", "An haproxy configuration for several `sampan serve` nodes behind one gateway (HTTP and gRPC)");
  cmd->add_option("--repository,--model-repository", f->repository,
                  "The model repository the nodes serve (one routed backend per model)")
      ->required();
  cmd->add_option("--out", f->out, "The haproxy.cfg to write")->required();
  cmd->add_option("--node", f->nodes,
                  "A node, HOST:HTTP_PORT:GRPC_PORT[:AGENT_PORT] (repeatable; AGENT_PORT: its `serve --agent-port`, "
                  "whose agent check sets its weight)")
      ->required();
  cmd->add_option("--bind", f->bind, "Address the gateway listens on (default 127.0.0.1)");
  cmd->add_option("--http-port", f->http_port, "The gateway's HTTP port (default 8000)");
  cmd->add_option("--grpc-port", f->grpc_port, "The gateway's gRPC (h2) port (default 8001)");
  cmd->add_option("--stats-port", f->stats_port, "haproxy's statistics page on this port, /stats (default: none)");
  cmd->add_option("--check-interval-ms", f->check_interval_ms,
                  "Health and agent check interval (default 1000): a failed node leaves after --fall checks");
  cmd->add_option("--fall", f->fall, "Failed checks that take a node out (default 2)");
  cmd->add_option("--rise", f->rise, "Passed checks that bring it back (default 2)");
  cmd->add_option("--timeout-ms", f->timeout_ms,
                  "How long a node may take to answer before the request is retried on another (default 30000)");
  cmd->add_option("--connect-timeout-ms", f->connect_timeout_ms, "Connection timeout to a node (default 1000)");
  cmd->add_option("--retries", f->retries, "Retries of a request on other nodes (default 2)");
  cmd->add_option("--error-limit", f->error_limit,
                  "Consecutive failed answers (5xx, timeouts) that mark a node down between checks (default 10)");
  cmd->add_option("--agent-rate-unit", f->agent_rate_unit,
                  "Rows per second a weight point stands for in the model backends' agent weights (default 1): "
                  "about the fastest node's rows/s over 200, so weights stay under haproxy's 256");
  cmd->add_option("--maxconn", f->maxconn,
                  "Connections the gateway holds at once (default 4096; haproxy needs ~2 descriptors each)");
  cmd->callback([f] {
    Status st = WriteHaproxy(*f);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      ExitCode() = 1;
    }
  });
}

}  // namespace sampan::cli
