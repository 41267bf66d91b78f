// The REST front end's connections, inside src/server/http (not an interface of its own):
//
//   SessionBase   one client connection's request: routing of the KServe v2 endpoints and the
//                 translation of each into one Core call (http_routes.cpp; the shared-memory
//                 extensions in http_shared_memory.cpp). It knows nothing of
//                 the transport; it answers through Write().
//   Session<S>    the transport (http_server.cpp): HTTP/1.1 framing with Boost.Beast over a plain
//                 TCP stream or a TLS stream (--http-use-ssl), time-outs, graceful close, and
//                 noticing a client that leaves while its request runs.
//
// Each connection runs on its own strand and handles one request at a time: read header, read
// body, answer, then read the next (pipelined requests wait in the read buffer, so answers stay
// in order). Core::Infer answers on a scheduler thread; the answer is posted back to the
// session's strand. Blocking repository calls (load/unload) run on a small pool, never on an
// I/O thread.
#pragma once

#include <rapidjson/document.h>

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/core/rate_limit.h"
#include "server/http/http_body.h"
#include "server/http/http_infer.h"
#include "server/http/http_json.h"
#include "server/http/http_server.h"

namespace sampan::server::http {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

using Request = bhttp::request<RequestBody>;
using Response = bhttp::response<ReplyBody>;

// How long a connection that is being closed may keep sending before it is cut.
inline constexpr auto kDrainTimeout = std::chrono::seconds(5);
inline constexpr uint32_t kHeaderLimit = 64 * 1024;

//! Triton's mapping of error codes to HTTP statuses (http_server.cc, HttpCodeFromError).
bhttp::status HttpStatusFor(StatusCode code);
bool IsLoopback(const net::ip::address& a);
//! Percent-decodes one URL path segment; false if it is malformed or empty.
bool DecodeSegment(std::string_view in, std::string* out);

class SessionBase;

// What sessions share: the Core, the options, the session registry.
struct ServerState {
  Core* core = nullptr;
  HttpOptions options;
  // One io_context per I/O thread, each run by its thread alone (the listener is on the first):
  // a connection lives on one, so its reads, writes and answers never hand over to another
  // thread (as nginx's workers; a shared io_context woke a second thread for most handlers).
  std::vector<std::unique_ptr<net::io_context>> iocs;
  net::thread_pool blocking{4};  // model loads (one model's loads are serialised in Core; others run side by side)
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions;

  explicit ServerState(int threads) {
    for (int i = 0; i < threads; ++i) iocs.push_back(std::make_unique<net::io_context>(1));
  }
};

class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase();
  //! Starts the connection (the TLS handshake first, then the first request).
  virtual void Run() = 0;
  //! The connection's strand.
  virtual net::any_io_executor Executor() = 0;
  //! Called on Stop(): closes the connection now unless a request is in progress.
  virtual void StopIfIdle() = 0;

 protected:
  SessionBase(std::shared_ptr<ServerState> server, net::io_context& ioc, bool loopback_peer)
      : server_(std::move(server)), ioc_(&ioc), loopback_peer_(loopback_peer) {}
  //! An executor that keeps this connection's io_context running while a copy exists.
  auto TrackedExecutor() { return net::require(ioc_->get_executor(), net::execution::outstanding_work.tracked); }

  // ---- The transport (Session<S>) ----------------------------------------
  //! Sends res_, then reads the next request or closes as res_'s keep-alive says.
  virtual void Write() = 0;
  virtual bool SocketOpen() = 0;
  //! While Core works on a request nothing reads the socket: this notices the client leaving.
  virtual void WatchForDisconnect() = 0;

  // ---- Answers --------------------------------------------------------------
  //! Every answer leaves through here. A 503 (shed, unloading, not ready, queue timeout) and the
  //! per-connection rate limit's 429 carry `Retry-After: 1`, which gateways and clients back off on.
  void Respond(bhttp::status status, std::string body, std::string_view content_type = "application/json") {
    res_ = Response(status, 11);
    if (status == bhttp::status::service_unavailable || status == bhttp::status::too_many_requests)
      res_.set(bhttp::field::retry_after, "1");
    res_.set(bhttp::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    res_.body().head = std::move(body);
    Write();
  }
  void RespondError(bhttp::status status, std::string_view message) { Respond(status, ErrorJson(message)); }
  void RespondStatus(const Status& s) { RespondError(HttpStatusFor(s.code()), s.message()); }
  void RespondJson(std::string json) { Respond(bhttp::status::ok, std::move(json)); }
  void MethodNotAllowed() { RespondError(bhttp::status::method_not_allowed, "Method Not Allowed"); }
  void RespondTooLarge(uint64_t length);

  // ---- Routing (http_routes.cpp) --------------------------------------------
  void Route();
  void Logging(bhttp::verb method);
  static std::optional<ApiCategory> CategoryOf(std::string_view path);
  bool AuthorizeRestricted(std::string_view path);
  //! /v2/systemsharedmemory... or /v2/cudasharedmemory... (`rest`: what follows; http_shared_memory.cpp).
  void RouteSharedMemory(std::string_view rest, bhttp::verb method, SharedMemoryKind kind);
  void RegisterSharedMemory(const std::string& region, SharedMemoryKind kind);
  static bool Split(std::string_view path, std::string_view* segs, size_t max, size_t* count);
  void RouteModel(std::string_view rest, bhttp::verb method);
  void Stats(const std::string& model, const std::string& version);
  //! GET/POST /v2/trace/setting (model "") and /v2/models/{model}/trace/setting.
  void TraceSetting(const std::string& model, bhttp::verb method);
  //! The request's trace is over: HTTP_SEND_END, then to the tracer.
  void CompleteTrace() {
    if (!trace_) return;
    trace_->Record("HTTP_SEND_END", std::chrono::steady_clock::now());
    trace_->Complete();
    trace_.reset();
  }
  Result<rapidjson::Document> BodyJson();
  void RouteRepository(std::string_view rest, bhttp::verb method);
  bool AuthorizeModelControl();
  void Infer(std::string model, std::string version);
  void OnInferDone(Result<InferResponse> result);
  //! The shared memory registry (system and CUDA regions) when the extensions are enabled, else nullptr.
  const SharedMemoryRegistry* Shm() const {
    return server_->options.enable_shared_memory ? &server_->core->system_shared_memory() : nullptr;
  }

  // Shared, so that a session outliving the server (a Core holding on to a callback) still
  // finds its io_context and registry. A base member, so it is released after the derived
  // session's stream: the socket deregisters from that io_context first.
  std::shared_ptr<ServerState> server_;
  net::io_context* ioc_;  // the one this connection lives on (one of server_->iocs)
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<RequestBody>> parser_;
  Response res_;
  OutputFormat format_;
  std::shared_ptr<std::atomic<bool>> cancelled_;
  std::chrono::steady_clock::time_point received_;
  uint64_t generation_ = 0;
  bool keep_alive_ = true;
  bool unread_input_ = false;  //!< answered before the whole request was read
  bool busy_ = false;
  bool loopback_peer_ = false;
  TokenBucket bucket_;                                  // --rate-limit-per-connection: this connection's requests
  std::shared_ptr<RequestTrace> trace_;                 // the request in progress, when the tracer sampled it
  std::optional<Result<InferResponse>> inline_answer_;  // Infer(): Core answered on this thread
};

}  // namespace sampan::server::http
