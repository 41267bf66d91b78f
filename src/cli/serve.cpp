// `sampan serve`: the inference server. Flags follow tritonserver's names.
//
// Start-up: the Core loads the repository, then each listener starts and
// prints one line ("HTTP KServe v2 on 0.0.0.0:8000"), then "ready".
// SIGTERM/SIGINT: readiness goes false and new requests are refused at once;
// requests in flight get --exit-timeout-secs to finish (haproxy's agent check,
// --agent-port, answers `drain` meanwhile); then the listeners stop and the
// process exits 0 (1 when requests were still running).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "plan/signature.h"
#include "server/agent/agent_check.h"
#include "server/agent/agent_report.h"
#include "server/core/core.h"
#include "server/core/gpu_placement.h"
#include "server/core/log.h"
#include "server/core/response_cache.h"
#include "server/core/restricted_api.h"
#include "server/core/tls_files.h"
#if SAMPAN_HAVE_HTTP
#include "server/http/http_server.h"
#endif
#if SAMPAN_HAVE_GRPC
#include "server/grpc/grpc_server.h"
#endif

namespace sampan::cli {

namespace {

struct ServeFlags {
  std::string repository;
  int http_port = 8000;
  int grpc_port = 8001;
  int metrics_port = 8002;
  std::string http_address = "0.0.0.0";
  std::string grpc_address = "0.0.0.0";
  std::string metrics_address = "0.0.0.0";
  int agent_port = -1;        // -1: no agent-check listener
  std::string agent_address;  // "": --http-address
  std::string control_mode = "none";
  std::string gpus;  // --gpus: CUDA_VISIBLE_DEVICES from NVML indices / GPU and MIG UUIDs
  int poll_secs = 15;
  std::vector<std::string> load_models;
  bool strict_readiness = true;
  int exit_timeout_secs = 30;
  int log_verbose = 0;
  bool log_info = true, log_warning = true, log_error = true, log_access = false;
  std::string log_file, log_format = "default";
  std::string backend;
  int threads = 0;
  int http_threads = 0;
  int grpc_threads = 0;
  bool allow_remote_model_control = false;
  bool enable_shared_memory = false;
  int http_idle_timeout_secs = 75;
  int http_io_timeout_secs = 60;
  std::string model_control_token;
  std::string cache_config;
  std::vector<std::string> plan_trust;
  std::vector<std::string> trace_config;
  std::vector<std::string> http_restricted_api, grpc_restricted_protocol;
  bool grpc_use_ssl = false, grpc_use_ssl_mutual = false;
  std::string grpc_server_cert, grpc_server_key, grpc_root_cert;
  bool http_use_ssl = false, http_use_ssl_mutual = false;
  std::string http_server_cert, http_server_key, http_root_cert;
  int64_t max_request_elements = 0;
  std::vector<std::string> gpu_health_rules;
  int gpu_health_interval_ms = 1000;
  std::vector<std::string> model_health_rules;
  double rate_limit_per_connection = 0;
  std::string rate_limit = "off";
  std::vector<std::string> rate_limit_resources;
  int model_load_threads = 4;
};

// --rate-limit and --rate-limit-resource (Triton's flags) as the core's options.
Result<server::RateLimiterOptions> RateLimiterFlags(const ServeFlags& f) {
  server::RateLimiterOptions o;
  if (f.rate_limit != "off" && f.rate_limit != "execution_count")
    return InvalidArgument("--rate-limit=", f.rate_limit, ": expected off or execution_count");
  o.execution_count = f.rate_limit == "execution_count";
  for (const std::string& v : f.rate_limit_resources) {
    SP_ASSIGN_OR_RETURN(server::RateLimitResource r, server::ParseRateLimitResource(v));
    o.resources.push_back(std::move(r));
  }
  if (!o.execution_count && !o.resources.empty())
    return InvalidArgument("--rate-limit-resource=", f.rate_limit_resources[0],
                           ": resources apply only with --rate-limit=execution_count (the rate limiter is off)");
  return o;
}

Status CheckPort(const char* flag, int port) {
  if (port < -1 || port > 65535) return InvalidArgument(flag, " ", port, ": expected 0..65535, or -1 to disable");
  return Status::Ok();
}

// NVML's GPUs and MIG devices, and the devices CUDA will show this process, in the log;
// --gpus sets CUDA_VISIBLE_DEVICES first (nothing has started CUDA yet). Without NVML (no
// driver, no GPU) there is nothing to show, and --gpus cannot be resolved.
Status PlaceGpus(const std::string& gpus) {
  auto nvml = server::metrics::GpuMonitor::OpenOrError();
  if (!nvml.ok()) {
    if (gpus.empty()) return Status::Ok();
    return nvml.status().WithContext("--gpus needs NVML to resolve its entries");
  }
  const std::vector<server::metrics::GpuInfo> inventory = (*nvml)->Inventory();
  if (!gpus.empty()) {
    SP_ASSIGN_OR_RETURN(const std::string value, server::VisibleDevicesFor(inventory, gpus));
    if (const char* old = std::getenv("CUDA_VISIBLE_DEVICES"))
      server::LogWarning("--gpus replaces CUDA_VISIBLE_DEVICES=", old);
    setenv("CUDA_VISIBLE_DEVICES", value.c_str(), 1);
  }
  server::LogInfo("GPUs (NVML, ", (*nvml)->library(), "):");
  for (const std::string& line : server::GpuInventoryLines(inventory)) server::LogInfo("  ", line);
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  const server::GpuPlacement p =
      server::ResolveVisibleGpus(inventory, env ? std::optional<std::string>(env) : std::nullopt);
  server::LogInfo("CUDA devices of this process",
                  env ? StrCat(" (CUDA_VISIBLE_DEVICES=", env, gpus.empty() ? "" : ", from --gpus", ")") : "", ":",
                  p.visible.empty() ? " none" : "");
  for (const server::VisibleGpu& v : p.visible) server::LogInfo("  ", v.ordinal, ": ", v.uuid, ", ", v.description);
  for (const std::string& note : p.notes) server::LogWarning(note);
  return Status::Ok();
}

Status Serve(const ServeFlags& f) {
  if (f.repository.empty()) return InvalidArgument("--model-repository is required");
  SP_RETURN_IF_ERROR(CheckPort("--http-port", f.http_port));
  SP_RETURN_IF_ERROR(CheckPort("--grpc-port", f.grpc_port));
  SP_RETURN_IF_ERROR(CheckPort("--metrics-port", f.metrics_port));
  SP_RETURN_IF_ERROR(CheckPort("--agent-port", f.agent_port));
  if (f.agent_port < 0 && !f.agent_address.empty())
    return InvalidArgument("--agent-address is given but the agent check is off (no --agent-port)");
  if (f.poll_secs < 1) return InvalidArgument("--repository-poll-secs must be >= 1 (got ", f.poll_secs, ")");
  if (f.exit_timeout_secs < 0) return InvalidArgument("--exit-timeout-secs must be >= 0");
  if (f.threads < 0) return InvalidArgument("--threads must be >= 0");
  if (f.log_verbose < 0) return InvalidArgument("--log-verbose must be >= 0, got ", f.log_verbose);
  {
    server::LogSettings ls;
    ls.file = f.log_file;
    ls.info = f.log_info;
    ls.warning = f.log_warning;
    ls.error = f.log_error;
    ls.verbose_level = static_cast<uint32_t>(f.log_verbose);
    ls.format = f.log_format;
    ls.access = f.log_access;
    if (Status st = server::Log::Get().Update(ls); !st.ok()) return st.WithContext("--log-file/--log-format");
  }
  if (f.model_load_threads < 1)
    return InvalidArgument("--model-load-thread-count must be >= 1, got ", f.model_load_threads);
  if (f.max_request_elements < 0)
    return InvalidArgument("--max-request-elements must be >= 0 (0: no limit), got ", f.max_request_elements);
  if (!(f.rate_limit_per_connection >= 0) || !std::isfinite(f.rate_limit_per_connection))
    return InvalidArgument("--rate-limit-per-connection must be >= 0 requests/s (0: no limit), got ",
                           f.rate_limit_per_connection);
  if (!f.load_models.empty() && f.control_mode != "explicit")
    std::fprintf(stderr,
                 "note: --load-model applies to --model-control-mode explicit; every model is loaded in "
                 "mode %s\n",
                 f.control_mode.c_str());
  // Front-end options for a front end that is off would be accepted and do nothing: refused.
  SP_ASSIGN_OR_RETURN(const server::RestrictedApis http_restricted,
                      server::RestrictedApis::Parse(f.http_restricted_api, "--http-restricted-api"));
  SP_ASSIGN_OR_RETURN(const server::RestrictedApis grpc_restricted,
                      server::RestrictedApis::Parse(f.grpc_restricted_protocol, "--grpc-restricted-protocol"));
  if (f.http_port < 0 && !http_restricted.empty())
    return InvalidArgument("--http-restricted-api is given but HTTP is off (--http-port -1)");
  const bool tls_files = !f.grpc_server_cert.empty() || !f.grpc_server_key.empty() || !f.grpc_root_cert.empty();
  if (f.grpc_port < 0 && (!grpc_restricted.empty() || f.grpc_use_ssl || f.grpc_use_ssl_mutual || tls_files))
    return InvalidArgument(
        "gRPC options (--grpc-restricted-protocol, --grpc-use-ssl...) are given but gRPC is off "
        "(--grpc-port -1)");
  if (tls_files && !f.grpc_use_ssl && !f.grpc_use_ssl_mutual)
    return InvalidArgument(
        "--grpc-server-cert/--grpc-server-key/--grpc-root-cert are given without --grpc-use-ssl "
        "(gRPC would listen without TLS)");
  // The certificate files are read and checked now, before any model loads.
  if (f.grpc_use_ssl || f.grpc_use_ssl_mutual)
    SP_RETURN_IF_ERROR(server::tls::LoadServerTls(
                           {f.grpc_use_ssl_mutual, f.grpc_server_cert, f.grpc_server_key, f.grpc_root_cert}, "--grpc")
                           .status());
  const bool http_tls = f.http_use_ssl || f.http_use_ssl_mutual;
  const bool http_tls_files = !f.http_server_cert.empty() || !f.http_server_key.empty() || !f.http_root_cert.empty();
  if (f.http_port < 0 && (http_tls || http_tls_files))
    return InvalidArgument("HTTP TLS options (--http-use-ssl...) are given but HTTP is off (--http-port -1)");
  if (http_tls_files && !http_tls)
    return InvalidArgument(
        "--http-server-cert/--http-server-key/--http-root-cert are given without --http-use-ssl "
        "(HTTP would listen without TLS)");
  if (http_tls)
    SP_RETURN_IF_ERROR(server::tls::LoadServerTls(
                           {f.http_use_ssl_mutual, f.http_server_cert, f.http_server_key, f.http_root_cert}, "--http")
                           .status());
#if !SAMPAN_HAVE_HTTP
  if (f.http_port >= 0 || f.metrics_port >= 0)
    return Unsupported(
        "this build of sampan has no HTTP front end (src/server/http); pass --http-port -1 "
        "--metrics-port -1");
#endif
#if !SAMPAN_HAVE_GRPC
  if (f.grpc_port >= 0)
    return Unsupported("this build of sampan has no gRPC front end (src/server/grpc); pass --grpc-port -1");
#endif

  SP_RETURN_IF_ERROR(PlaceGpus(f.gpus));

  // Signals are taken synchronously by this thread (sigwait); every thread
  // started from here on inherits the mask, so none of them is interrupted.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  server::CoreOptions co;
  co.repository = f.repository;
  co.control_mode = f.control_mode == "poll"       ? server::CoreOptions::ControlMode::kPoll
                    : f.control_mode == "explicit" ? server::CoreOptions::ControlMode::kExplicit
                                                   : server::CoreOptions::ControlMode::kNone;
  co.poll_secs = f.poll_secs;
  co.startup_models = f.load_models;
  co.strict_readiness = f.strict_readiness;
  co.default_backend = f.backend;
  co.threads_per_instance = f.threads;
  co.max_request_elements = f.max_request_elements;
  co.model_load_threads = f.model_load_threads;
  co.gpu_health_rules = f.gpu_health_rules;
  co.gpu_health_interval_ms = f.gpu_health_interval_ms;
  co.model_health_rules = f.model_health_rules;
  SP_ASSIGN_OR_RETURN(co.rate_limiter, RateLimiterFlags(f));
  if (!f.plan_trust.empty()) {
    auto keys = plan::LoadTrustedKeys(f.plan_trust);
    if (!keys.ok()) return keys.status().WithContext("--plan-trust");
    co.plan_trust = std::make_shared<const std::vector<plan::TrustedKey>>(std::move(keys).value());
  }
  if (!f.cache_config.empty()) {
    SP_ASSIGN_OR_RETURN(co.response_cache_bytes, server::ParseCacheConfig(f.cache_config));
  }
  server::TraceConfig trace;
  for (const std::string& v : f.trace_config) SP_RETURN_IF_ERROR(server::ParseTraceConfig(v, &trace));
  SP_ASSIGN_OR_RETURN(std::unique_ptr<server::Core> core, server::Core::Start(co));
  SP_RETURN_IF_ERROR(core->tracer().Configure(trace));

#if SAMPAN_HAVE_HTTP
  std::unique_ptr<server::HttpServer> http, metrics;
  if (f.http_port >= 0) {
    server::HttpOptions ho;
    ho.address = f.http_address;
    ho.port = f.http_port;
    // Triton's default is 8 HTTP threads; a 2-core machine gets 2 (more would only add switches).
    // Two was the default everywhere before: on a 16-core GPU host two threads then read, parse
    // and answer every request of every model, and requests queue there unseen by the scheduler.
    ho.threads =
        f.http_threads > 0 ? f.http_threads : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
    ho.allow_remote_model_control = f.allow_remote_model_control;
    ho.enable_shared_memory = f.enable_shared_memory;
    ho.idle_timeout_secs = f.http_idle_timeout_secs;
    ho.io_timeout_secs = f.http_io_timeout_secs;
    ho.model_control_token = f.model_control_token;
    ho.restricted = http_restricted;
    ho.rate_limit_per_connection = f.rate_limit_per_connection;
    ho.use_ssl = f.http_use_ssl;
    ho.use_ssl_mutual = f.http_use_ssl_mutual;
    ho.server_cert = f.http_server_cert;
    ho.server_key = f.http_server_key;
    ho.root_cert = f.http_root_cert;
    auto started = server::HttpServer::Start(core.get(), ho);
    if (!started.ok()) return started.status().WithContext(StrCat("HTTP on ", f.http_address, ":", f.http_port));
    http = std::move(started).value();
    std::printf("HTTP KServe v2 on %s:%d\n", f.http_address.c_str(), http->port());
    if (ho.use_ssl || ho.use_ssl_mutual)
      std::printf("HTTP speaks TLS only (https://)%s\n",
                  ho.use_ssl_mutual ? ", and clients must show a certificate --http-root-cert verifies" : "");
    std::fflush(stdout);
  }
#endif
#if SAMPAN_HAVE_GRPC
  std::unique_ptr<server::GrpcServer> grpc;
  if (f.grpc_port >= 0) {
    server::GrpcOptions go;
    go.address = f.grpc_address;
    go.port = f.grpc_port;
    go.threads = f.grpc_threads;
    go.allow_remote_model_control = f.allow_remote_model_control;
    go.enable_shared_memory = f.enable_shared_memory;
    go.model_control_token = f.model_control_token;
    go.restricted = grpc_restricted;
    go.rate_limit_per_connection = f.rate_limit_per_connection;
    go.use_ssl = f.grpc_use_ssl;
    go.use_ssl_mutual = f.grpc_use_ssl_mutual;
    go.server_cert = f.grpc_server_cert;
    go.server_key = f.grpc_server_key;
    go.root_cert = f.grpc_root_cert;
    auto started = server::GrpcServer::Start(core.get(), go);
    if (!started.ok()) return started.status().WithContext(StrCat("gRPC on ", f.grpc_address, ":", f.grpc_port));
    grpc = std::move(started).value();
    std::printf("gRPC KServe v2 on %s:%d\n", f.grpc_address.c_str(), grpc->port());
    std::fflush(stdout);
  }
#endif
#if SAMPAN_HAVE_HTTP
  if (f.metrics_port >= 0) {
    server::HttpOptions mo;
    mo.address = f.metrics_address;
    mo.port = f.metrics_port;
    mo.threads = 1;
    mo.metrics_only = true;
    auto started = server::HttpServer::Start(core.get(), mo);
    if (!started.ok())
      return started.status().WithContext(StrCat("metrics on ", f.metrics_address, ":", f.metrics_port));
    metrics = std::move(started).value();
    std::printf("Metrics on %s:%d/metrics\n", f.metrics_address.c_str(), metrics->port());
    std::fflush(stdout);
  }
#endif
  // haproxy's agent check, last: it answers `up` only once every listener it vouches for is open.
  std::unique_ptr<server::AgentReporter> reporter;
  std::unique_ptr<server::AgentCheckServer> agent;
  if (f.agent_port >= 0) {
    reporter = std::make_unique<server::AgentReporter>(*core, server::AgentReportOptions{.default_backend = f.backend});
    server::AgentCheckOptions ao;
    ao.address = f.agent_address.empty() ? f.http_address : f.agent_address;
    ao.port = f.agent_port;
    auto started =
        server::AgentCheckServer::Start(ao, [r = reporter.get()](std::string_view q) { return r->Reply(q); });
    if (!started.ok())
      return started.status().WithContext(StrCat("--agent-address ", ao.address, " --agent-port ", f.agent_port));
    agent = std::move(started).value();
    std::printf("Agent check on %s:%d\n", ao.address.c_str(), agent->port());
    std::fflush(stdout);
  }
  std::printf("ready\n");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::printf("received %s: shutting down (exit timeout %d s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
              f.exit_timeout_secs);
  std::fflush(stdout);
  const bool drained = core->Shutdown(std::chrono::seconds(f.exit_timeout_secs));
  if (!drained) {
    // Before the front ends stop: their Stop waits for every request in flight to be
    // answered, which is what did not happen in time.
    std::fprintf(stderr, "error: requests were still running after --exit-timeout-secs %d; exiting anyway\n",
                 f.exit_timeout_secs);
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(1);  // nor wait for them in the Core's destructor
  }
#if SAMPAN_HAVE_GRPC
  if (grpc) grpc->Stop();
#endif
#if SAMPAN_HAVE_HTTP
  if (http) http->Stop();
  if (metrics) metrics->Stop();
#endif
  if (agent) agent->Stop();
  core->tracer().Flush();  // log_frequency 0: the trace file is written now
  core.reset();
  std::printf("stopped\n");
  std::fflush(stdout);
  return Status::Ok();
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model repository over KServe v2 HTTP/gRPC (Triton-compatible)");
  cmd->add_option("--model-repository,--model-store", f->repository, "Model repository directory (Triton layout)")
      ->required();
  cmd->add_option("--http-port", f->http_port, "HTTP port (0 = any free port, -1 = off)")->capture_default_str();
  cmd->add_option("--grpc-port", f->grpc_port, "gRPC port (0 = any free port, -1 = off)")->capture_default_str();
  cmd->add_option("--metrics-port", f->metrics_port, "Prometheus /metrics port (0 = any free port, -1 = off)")
      ->capture_default_str();
  cmd->add_option("--http-address", f->http_address, "HTTP listen address")->capture_default_str();
  cmd->add_option("--grpc-address", f->grpc_address, "gRPC listen address")->capture_default_str();
  cmd->add_option("--metrics-address", f->metrics_address, "Metrics listen address")->capture_default_str();
  cmd->add_option("--agent-port", f->agent_port,
                  "Answer haproxy's agent check on this port: 'up ready NN%' (for a model's backend, agent-send "
                  "'model=NAME unit=U': NN = its measured rows/s over U; for the node: from the saturation), "
                  "'drain' while shutting down, 'down' when not ready (0 = any free port; -1 = off, the default)");
  cmd->add_option("--agent-address", f->agent_address, "Agent-check listen address (default: --http-address)");
  cmd->add_option("--gpu-health-rule", f->gpu_health_rules,
                  "A GPU health rule that makes the server not ready (it drains) while it trips, read through NVML "
                  "(repeatable; each replaces its default): xid=LIST|none, ecc-dbe=N, ecc-sbe=N, retired-pages=N, "
                  "retired-pending=on|off, remap-failure=on|off, remap-pending=on|off, temperature=C, "
                  "throttle=NAMES|none, memory-growth-mib=N (0 = off); 'off' clears them all, 'default' restores "
                  "the defaults");
  cmd->add_option("--model-health-rule", f->model_health_rules,
                  "A model health rule that makes the server not ready (it drains) while it trips (repeatable; "
                  "each replaces its setting): error-rate=PCT (a model's failed requests over all its requests in "
                  "the window, at or above PCT percent; 0 = off, the default), window-s=N (10), min-requests=N "
                  "(20); failed = the run failed (not a bad request, a shed or refused one); 'off' or 'default'");
  cmd->add_option("--gpu-health-interval-ms", f->gpu_health_interval_ms,
                  "How often the GPU health rules read NVML (0 = never: no GPU health)")
      ->capture_default_str();
  cmd->add_option("--gpus", f->gpus,
                  "The GPUs or the MIG device to serve on, comma-separated: NVML indices (nvidia-smi's), GPU-UUIDs "
                  "or one MIG-UUID, whole or a unique prefix; sets CUDA_VISIBLE_DEVICES (instance_group's gpus: "
                  "[...] then count among these). A process uses one MIG device: one server per MIG device");
  cmd->add_option("--model-control-mode", f->control_mode, "none | poll | explicit")
      ->check(CLI::IsMember({"none", "poll", "explicit"}))
      ->capture_default_str();
  cmd->add_option("--repository-poll-secs", f->poll_secs, "Seconds between repository scans in poll mode")
      ->capture_default_str();
  cmd->add_option("--load-model", f->load_models, "Model to load at start in explicit mode (repeatable; * = all)");
  cmd->add_option("--strict-readiness", f->strict_readiness, "Ready only when every model is ready (true|false)")
      ->capture_default_str();
  cmd->add_option("--exit-timeout-secs", f->exit_timeout_secs, "Time in-flight requests get on shutdown")
      ->capture_default_str();
  cmd->add_option("--log-verbose", f->log_verbose, "Verbose logging level (0 = off)")->capture_default_str();
  cmd->add_option("--log-info", f->log_info, "Log info lines (true/false)")->capture_default_str();
  cmd->add_option("--log-warning", f->log_warning, "Log warnings (true/false)")->capture_default_str();
  cmd->add_option("--log-error", f->log_error, "Log errors (true/false)")->capture_default_str();
  cmd->add_option("--log-file", f->log_file, "Append the log to this file (default: stderr)");
  cmd->add_option("--log-format", f->log_format,
                  "default ([serve] ...), ISO8601 (UTC timestamp and level first) or json (one object per line)")
      ->capture_default_str();
  cmd->add_option("--log-access", f->log_access,
                  "An info line per inference request: protocol, model, version, outcome, microseconds (true/false)")
      ->capture_default_str();
  cmd->add_option("--backend", f->backend,
                  "Backend for models whose config does not choose one (default: cuda with a GPU, else cpu)");
  cmd->add_option("--threads", f->threads, "CPU threads per model instance (0 = cores / instances)");
  cmd->add_option("--http-thread-count", f->http_threads, "HTTP I/O threads (0 = as many as cores, from 2 to 8)");
  cmd->add_option("--grpc-thread-count", f->grpc_threads,
                  "Threads for blocking gRPC repository calls (load/unload); 0 = 2");
  cmd->add_option("--http-idle-timeout-secs", f->http_idle_timeout_secs,
                  "Close keep-alive HTTP connections idle this long (default 75)")
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--http-io-timeout-secs", f->http_io_timeout_secs,
                  "Time a client has to send a request / take a response (default 60)")
      ->check(CLI::Range(1, 86400));
  cmd->add_flag("--enable-shared-memory", f->enable_shared_memory,
                "Serve the system and CUDA shared-memory extensions (HTTP /v2/systemsharedmemory and "
                "/v2/cudasharedmemory, gRPC SystemSharedMemory* and CudaSharedMemory*; only loopback clients "
                "register regions; CUDA regions need a build with CUDA)");
  cmd->add_flag("--allow-remote-model-control", f->allow_remote_model_control,
                "Accept model load/unload from non-loopback clients");
  cmd->add_option("--trace-config", f->trace_config,
                  "Triton's trace settings, repeatable: level=OFF|TIMESTAMPS, rate=N (one request in N), "
                  "count=N (-1: no limit), mode=triton|opentelemetry, triton,file=PATH, triton,log-frequency=N, "
                  "opentelemetry,url=http://HOST:4318/v1/traces, opentelemetry,resource=KEY=VALUE");
  cmd->add_option("--plan-trust", f->plan_trust,
                  "Ed25519 public key (PEM) whose signed plans this server loads (repeatable): a model's plan "
                  "file that is unsigned, signed by another key or changed after signing fails to load");
  cmd->add_option("--cache-config", f->cache_config,
                  "Response cache for models whose config sets response_cache { enable: true }: local,size=BYTES "
                  "(one LRU for the server)");
  cmd->add_option("--model-control-token", f->model_control_token,
                  "Require 'Authorization: Bearer TOKEN' for model load/unload");
  cmd->add_option("--http-restricted-api", f->http_restricted_api,
                  "API[,API...]:KEY=VALUE (repeatable): those HTTP endpoints answer 403 unless the request has the "
                  "header KEY: VALUE. APIs: health, metadata, inference, shared-memory, model-config, "
                  "model-repository, statistics, trace, logging");
  cmd->add_option("--grpc-restricted-protocol", f->grpc_restricted_protocol,
                  "API[,API...]:KEY=VALUE (repeatable): those gRPC calls answer UNAVAILABLE unless they carry the "
                  "metadata triton-grpc-protocol-KEY: VALUE (APIs as --http-restricted-api)");
  cmd->add_option("--model-load-thread-count", f->model_load_threads,
                  "Models loaded at once at start-up (explicit loads of different models always run in parallel; "
                  "one model's loads and unloads are serialised)")
      ->capture_default_str();
  cmd->add_option("--max-request-elements", f->max_request_elements,
                  "Refuse a request whose inputs hold more elements than this, before it reaches a model (0: no "
                  "limit; bodies over 64 MiB are refused in any case)")
      ->capture_default_str();
  cmd->add_option("--rate-limit-per-connection", f->rate_limit_per_connection,
                  "Requests per second one client connection may send (a burst of max(1, N)); more: HTTP 429 "
                  "with Retry-After, gRPC RESOURCE_EXHAUSTED. Health checks are not counted. 0: no limit")
      ->capture_default_str();
  cmd->add_option("--rate-limit", f->rate_limit,
                  "off|execution_count (Triton's rate limiter). execution_count: an instance starts an execution "
                  "only when the resources its instance group's rate_limiter declares are free, across all models; "
                  "waiting instances take turns by priority (a weight: lower runs more often). off: every instance "
                  "runs as soon as it is free, and rate_limiter in config.pbtxt is validated but has no effect")
      ->capture_default_str();
  cmd->add_option("--rate-limit-resource", f->rate_limit_resources,
                  "<name>:<count>[:<device>] (repeatable): how many of a resource the server has, on that device "
                  "or, without one, on every device (a global resource has one pool; its device is ignored). "
                  "Default: the most any one instance declares. A model needing more than this fails to load");
  cmd->add_flag("--grpc-use-ssl", f->grpc_use_ssl, "Serve gRPC over TLS (--grpc-server-cert, --grpc-server-key)");
  cmd->add_flag("--grpc-use-ssl-mutual", f->grpc_use_ssl_mutual,
                "Mutual TLS: gRPC clients must present a certificate that --grpc-root-cert verifies");
  cmd->add_option("--grpc-server-cert", f->grpc_server_cert, "The gRPC server's certificate chain (PEM)");
  cmd->add_option("--grpc-server-key", f->grpc_server_key, "The gRPC server's private key (PEM, unencrypted)");
  cmd->add_option("--grpc-root-cert", f->grpc_root_cert, "CA certificates (PEM) that verify client certificates");
  cmd->add_flag("--http-use-ssl", f->http_use_ssl,
                "Serve the KServe HTTP API over TLS, https:// (--http-server-cert, --http-server-key)");
  cmd->add_flag("--http-use-ssl-mutual", f->http_use_ssl_mutual,
                "Mutual TLS: HTTP clients must present a certificate that --http-root-cert verifies");
  cmd->add_option("--http-server-cert", f->http_server_cert, "The HTTP server's certificate chain (PEM)");
  cmd->add_option("--http-server-key", f->http_server_key, "The HTTP server's private key (PEM, unencrypted)");
  cmd->add_option("--http-root-cert", f->http_root_cert, "CA certificates (PEM) that verify HTTP client certificates");
  cmd->callback([f]() {
    Status st = Serve(*f);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
      ExitCode() = 1;
    }
  });
}

}  // namespace sampan::cli
