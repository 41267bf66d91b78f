// The REST front end: connections and HTTP/1.1 framing (Boost.Beast), routing
// of the KServe v2 endpoints, and the translation of each into one Core call.
//
// Each connection is a Session on its own strand. A session handles one
// request at a time: read header, read body, answer, then read the next
// (pipelined requests wait in the read buffer, so answers stay in order).
// Core::Infer answers on a scheduler thread; the answer is posted back to the
// session's strand. Blocking repository calls (load/unload) run on a small
// pool, never on an I/O thread.
#include "server/http/http_server.h"

#include <sys/socket.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "server/core/log.h"
#include "server/core/secret.h"
#include "server/http/http_body.h"
#include "server/http/http_infer.h"
#include "server/http/http_json.h"

namespace sampan::server {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using http::ReplyBody;
using http::RequestBody;

using Request = bhttp::request<RequestBody>;
using Response = bhttp::response<ReplyBody>;

// How long a connection that is being closed may keep sending before it is cut.
constexpr auto kDrainTimeout = std::chrono::seconds(5);
constexpr uint32_t kHeaderLimit = 64 * 1024;

//! Triton's mapping of error codes to HTTP statuses (http_server.cc, HttpCodeFromError).
bhttp::status HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return bhttp::status::ok;
    case StatusCode::kNotFound: return bhttp::status::not_found;
    case StatusCode::kInternal:
    case StatusCode::kIoError: return bhttp::status::internal_server_error;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:  // Triton reports queue timeouts as UNAVAILABLE
    case StatusCode::kFailedPrecondition:  // e.g. load/unload while model control is off (Triton: UNAVAILABLE)
      return bhttp::status::service_unavailable;
    case StatusCode::kUnsupported: return bhttp::status::not_implemented;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kCancelled: return bhttp::status::bad_request;
  }
  return bhttp::status::bad_request;
}

bool IsLoopback(const net::ip::address& a) {
  if (a.is_loopback()) return true;
  if (a.is_v6() && a.to_v6().is_v4_mapped()) return net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6()).is_loopback();
  return false;
}

// Percent-decodes one URL path segment; false if it is malformed.
bool DecodeSegment(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return !out->empty();
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

class Session;

// What sessions share: the Core, the options, the session registry.
struct ServerState {
  Core* core = nullptr;
  HttpOptions options;
  net::io_context ioc;
  net::thread_pool blocking{4};  // model loads (one model's loads are serialised in Core; others run side by side)
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;

  explicit ServerState(int threads) : ioc(threads) {}
  //! An executor that keeps ioc.run() from returning while a copy exists.
  auto TrackedExecutor() { return net::require(ioc.get_executor(), net::execution::outstanding_work.tracked); }
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<ServerState> server)
      : server_(std::move(server)), stream_(std::move(socket)) {
    beast::error_code ec;
    auto peer = stream_.socket().remote_endpoint(ec);
    loopback_peer_ = !ec && IsLoopback(peer.address());
  }

  ~Session() {
    std::lock_guard<std::mutex> lock(server_->mu);
    server_->sessions.erase(this);
  }

  void Run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
  }

  net::any_io_executor Executor() { return stream_.get_executor(); }

  //! Called on Stop(): closes the connection now unless a request is in progress.
  void StopIfIdle() {
    if (!busy_) Close();
  }

 private:
  // ---- Framing ------------------------------------------------------------

  void ReadHeader() {
    busy_ = false;
    if (server_->stopping) return Close();
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(server_->options.max_body_bytes);
    // Pipelined bytes already buffered mean a request has started: the I/O timeout applies.
    stream_.expires_after(std::chrono::seconds(buffer_.size() ? server_->options.io_timeout_secs
                                                              : server_->options.idle_timeout_secs));
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    busy_ = true;
    received_ = std::chrono::steady_clock::now();
    stream_.expires_after(std::chrono::seconds(server_->options.io_timeout_secs));  // for the body
    const auto& header = parser_->get();
    keep_alive_ = header.keep_alive();
    if (auto length = parser_->content_length(); length && *length > server_->options.max_body_bytes) {
      return RespondTooLarge(*length);
    }
    if (auto it = header.find(bhttp::field::content_encoding);
        it != header.end() && !beast::iequals(it->value(), "identity")) {
      keep_alive_ = false;  // the body stays unread: this connection cannot carry another request
      unread_input_ = true;
      return RespondError(bhttp::status::bad_request,
                          StrCat("unsupported Content-Encoding '", it->value(), "': send the body uncompressed"));
    }
    if (auto it = header.find(bhttp::field::expect); it != header.end()) {
      if (!beast::iequals(it->value(), "100-continue")) {
        keep_alive_ = false;
        unread_input_ = true;
        return RespondError(bhttp::status::expectation_failed, StrCat("unsupported Expect '", it->value(), "'"));
      }
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      return net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                              [self = shared_from_this()](beast::error_code ec, size_t) {
                                if (ec) return self->Close();
                                self->ReadBody();
                              });
    }
    ReadBody();
  }

  void ReadBody() {
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->OnReadError(ec);
                        self->stream_.expires_never();  // inference takes what it takes
                        self->Route();
                      });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || ec == beast::error::timeout || !stream_.socket().is_open())
      return Close();
    keep_alive_ = false;
    busy_ = true;
    unread_input_ = true;
    if (ec == bhttp::error::body_limit) {
      // Beast stops at the Content-Length field, before the header is done.
      uint64_t length = 0;
      const auto& fields = parser_->get();
      if (auto it = fields.find(bhttp::field::content_length);
          it != fields.end() && http::ParseSize(std::string_view(it->value().data(), it->value().size()), &length))
        return RespondTooLarge(length);
      return RespondError(bhttp::status::bad_request,
                          StrCat("request body exceeds the server's limit of ", server_->options.max_body_bytes,
                                 " bytes"));
    }
    if (ec == bhttp::error::header_limit)
      return RespondError(bhttp::status::request_header_fields_too_large,
                          StrCat("request header exceeds ", kHeaderLimit, " bytes"));
    if (ec == bhttp::error::partial_message) return Close();  // the peer hung up mid-request
    RespondError(bhttp::status::bad_request, StrCat("malformed HTTP request: ", ec.message()));
  }

  void RespondTooLarge(uint64_t length) {
    keep_alive_ = false;
    unread_input_ = true;
    RespondError(bhttp::status::bad_request,
                 StrCat("request body of ", length, " bytes exceeds the server's limit of ",
                        server_->options.max_body_bytes, " bytes"));
  }

  void Respond(bhttp::status status, std::string body, std::string_view content_type = "application/json") {
    res_ = Response(status, 11);
    res_.set(bhttp::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    res_.body().head = std::move(body);
    Write();
  }

  void RespondError(bhttp::status status, std::string_view message) { Respond(status, http::ErrorJson(message)); }
  void RespondStatus(const Status& s) { RespondError(HttpStatusFor(s.code()), s.message()); }
  void RespondJson(std::string json) { Respond(bhttp::status::ok, std::move(json)); }

  void Write() {
    ++generation_;  // any disconnect watch still pending belongs to the finished request
    res_.keep_alive(keep_alive_ && !server_->stopping);
    res_.prepare_payload();
    stream_.expires_after(std::chrono::seconds(server_->options.io_timeout_secs));
    bhttp::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      const bool keep = self->res_.keep_alive();
      self->res_ = {};
      if (!keep) return self->CloseGracefully();
      self->ReadHeader();
    });
  }

  // Half-closes. When the peer may still be sending (an oversized body we
  // did not read, pipelined requests), reads and drops that until it closes
  // or the drain times out: closing with unread input would reset the
  // connection and could destroy our answer before the peer reads it.
  void CloseGracefully() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    const size_t available = stream_.socket().available(ignored);
    if (!unread_input_ && buffer_.size() == 0 && available == 0) return Close();
    stream_.expires_after(kDrainTimeout);
    Drain();
  }

  void Drain() {
    stream_.async_read_some(net::buffer(drain_, sizeof(drain_)),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->Close();
                              self->Drain();
                            });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  // ---- Routing ------------------------------------------------------------

  void Route() {
    const Request& req = parser_->get();
    std::string_view target(req.target().data(), req.target().size());
    std::string_view path = target.substr(0, target.find('?'));
    const bhttp::verb method = req.method();

    if (server_->options.metrics_only) {
      if (path != "/metrics") return RespondError(bhttp::status::not_found, "Not Found");
      if (method != bhttp::verb::get) return MethodNotAllowed();
      return Respond(bhttp::status::ok, server_->core->RenderMetrics(), "text/plain; version=0.0.4; charset=utf-8");
    }
    if (!server_->options.restricted.empty() && !AuthorizeRestricted(path)) return;
    if (const double rate = server_->options.rate_limit_per_connection;
        rate > 0 && path.substr(0, 11) != "/v2/health/" && !bucket_.Admit(rate, TokenBucket::Clock::now())) {
      res_ = Response(bhttp::status::too_many_requests, 11);
      res_.set(bhttp::field::retry_after, "1");
      res_.set(bhttp::field::content_type, "application/json");
      res_.body().head = http::ErrorJson(RateLimitMessage(rate));
      return Write();
    }
    if (path == "/v2") {
      if (method != bhttp::verb::get) return MethodNotAllowed();
      ServerMetadata md = server_->core->GetServerMetadata();
      if (server_->options.enable_shared_memory) md.extensions.push_back("system_shared_memory");
      return RespondJson(http::ServerMetadataJson(md));
    }
    if (path == "/v2/health/live" || path == "/v2/health/ready") {
      if (method != bhttp::verb::get) return MethodNotAllowed();
      const bool live = path == "/v2/health/live";
      const bool ok = live ? server_->core->Live() : server_->core->Ready();
      // Triton answers 200 or 400; the body says why for people reading it.
      if (ok) return Respond(bhttp::status::ok, std::string());
      return RespondError(bhttp::status::bad_request, live ? "server is not live" : "server is not ready");
    }
    if (path == "/v2/logging") return Logging(method);
    if (path == "/v2/models/stats") {
      if (method != bhttp::verb::get) return MethodNotAllowed();
      return Stats("", "");
    }
    constexpr std::string_view kModels = "/v2/models/";
    if (path.substr(0, kModels.size()) == kModels) return RouteModel(path.substr(kModels.size()), method);
    constexpr std::string_view kShm = "/v2/systemsharedmemory";
    if (path.substr(0, kShm.size()) == kShm && (path.size() == kShm.size() || path[kShm.size()] == '/'))
      return RouteSharedMemory(path.substr(kShm.size()), method);
    constexpr std::string_view kRepository = "/v2/repository/";
    if (path.substr(0, kRepository.size()) == kRepository)
      return RouteRepository(path.substr(kRepository.size()), method);
    RespondError(bhttp::status::not_found, "Not Found");
  }

  // Triton's logging API: GET answers the settings; POST changes those its JSON object names
  // (all or nothing) and answers them all. Changing them is model control's business: loopback
  // clients (unless remote control is allowed) and the token when one is set.
  void Logging(bhttp::verb method) {
    if (method != bhttp::verb::get && method != bhttp::verb::post) return MethodNotAllowed();
    if (method == bhttp::verb::post) {
      if (!AuthorizeModelControl()) return;
      auto doc = BodyJson();
      if (!doc.ok()) return RespondStatus(doc.status());
      LogSettings s = Log::Get().settings();
      for (auto it = doc->MemberBegin(); it != doc->MemberEnd(); ++it) {
        const std::string name(it->name.GetString(), it->name.GetStringLength());
        LogSettingValue v;
        if (it->value.IsBool()) {
          v.kind = LogSettingValue::Kind::kBool;
          v.b = it->value.GetBool();
        } else if (it->value.IsUint64()) {
          v.kind = LogSettingValue::Kind::kUint;
          v.u = it->value.GetUint64();
        } else if (it->value.IsString()) {
          v.kind = LogSettingValue::Kind::kString;
          v.s.assign(it->value.GetString(), it->value.GetStringLength());
        } else {
          return RespondError(bhttp::status::bad_request,
                              StrCat("log setting '", name, "' must be a boolean, a non-negative integer or a string"));
        }
        if (Status st = ApplyLogSetting(s, name, v); !st.ok()) return RespondStatus(st);
      }
      if (Status st = Log::Get().Update(s); !st.ok()) return RespondStatus(st);
    }
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    w.StartObject();
    for (const auto& [name, v] : LogSettingValues(Log::Get().settings())) {
      w.Key(name.c_str());
      if (v.kind == LogSettingValue::Kind::kBool) w.Bool(v.b);
      else if (v.kind == LogSettingValue::Kind::kUint) w.Uint64(v.u);
      else w.String(v.s.c_str(), static_cast<rapidjson::SizeType>(v.s.size()));
    }
    w.EndObject();
    RespondJson(std::string(sb.GetString(), sb.GetSize()));
  }

  // Which restricted-API category a path belongs to (Triton's grouping); none for paths that
  // are not endpoints (they answer 404 whatever the headers).
  static std::optional<ApiCategory> CategoryOf(std::string_view path) {
    auto starts = [&](std::string_view prefix) {
      return path.substr(0, prefix.size()) == prefix &&
             (path.size() == prefix.size() || path[prefix.size()] == '/');
    };
    if (path == "/v2") return ApiCategory::kMetadata;
    if (starts("/v2/health")) return ApiCategory::kHealth;
    if (path == "/v2/models/stats") return ApiCategory::kStatistics;
    if (starts("/v2/systemsharedmemory") || starts("/v2/cudasharedmemory")) return ApiCategory::kSharedMemory;
    if (starts("/v2/repository")) return ApiCategory::kModelRepository;
    if (starts("/v2/logging")) return ApiCategory::kLogging;
    if (starts("/v2/trace")) return ApiCategory::kTrace;
    constexpr std::string_view kModels = "/v2/models/";
    if (path.substr(0, kModels.size()) != kModels) return std::nullopt;
    // {m} | {m}/versions/{v}: metadata; otherwise the last segment names the endpoint.
    std::string_view rest = path.substr(kModels.size());
    size_t segments = rest.empty() ? 0 : 1 + static_cast<size_t>(std::count(rest.begin(), rest.end(), '/'));
    if (segments == 1 || segments == 3) return ApiCategory::kMetadata;
    const std::string_view last = rest.substr(rest.rfind('/') + 1);
    if (last == "infer" || last == "generate" || last == "generate_stream") return ApiCategory::kInference;
    if (last == "ready") return ApiCategory::kHealth;
    if (last == "config") return ApiCategory::kModelConfig;
    if (last == "stats") return ApiCategory::kStatistics;
    if (last == "trace") return ApiCategory::kTrace;
    return std::nullopt;
  }

  // --http-restricted-api: 403 naming the header when the path's category is restricted and the
  // request lacks the header or its value.
  bool AuthorizeRestricted(std::string_view path) {
    const auto category = CategoryOf(path);
    if (!category) return true;
    const RestrictedApis::Rule* rule = server_->options.restricted.Find(*category);
    if (rule == nullptr) return true;
    const auto& fields = parser_->get();
    auto it = fields.find(beast::string_view(rule->key.data(), rule->key.size()));
    std::optional<std::string_view> given;
    if (it != fields.end()) given = std::string_view(it->value().data(), it->value().size());
    if (RestrictedApis::Matches(*rule, given)) return true;
    RespondError(bhttp::status::forbidden, StrCat("This API is restricted, expecting header '", rule->key, "'"));
    return false;
  }

  // The registry when the extension is enabled, else nullptr.
  const SharedMemoryRegistry* Shm() const {
    return server_->options.enable_shared_memory ? &server_->core->system_shared_memory() : nullptr;
  }

  // "" | /region/{name}, then /status (GET) | /register | /unregister (POST).
  void RouteSharedMemory(std::string_view rest, bhttp::verb method) {
    if (!server_->options.enable_shared_memory)
      return RespondError(bhttp::status::bad_request,
                          "the system shared memory extension is not enabled on this server (start sampan serve "
                          "with --enable-shared-memory)");
    if (!rest.empty() && rest[0] == '/') rest.remove_prefix(1);
    std::string_view segs[3];
    size_t n = 0;
    if (!Split(rest, segs, 3, &n)) return RespondError(bhttp::status::not_found, "Not Found");
    std::string region;
    std::string_view action;
    if (n == 1) {
      action = segs[0];
    } else if (n == 3 && segs[0] == "region") {
      if (!DecodeSegment(segs[1], &region)) return RespondError(bhttp::status::bad_request, "malformed region name");
      action = segs[2];
    } else {
      return RespondError(bhttp::status::not_found, "Not Found");
    }
    SharedMemoryRegistry& shm = server_->core->system_shared_memory();
    if (action == "status") {
      if (method != bhttp::verb::get) return MethodNotAllowed();
      auto regions = shm.Regions(region);
      if (!regions.ok()) return RespondStatus(regions.status());
      rapidjson::StringBuffer sb;
      rapidjson::Writer<rapidjson::StringBuffer> w(sb);
      w.StartArray();
      for (const auto& r : *regions) {
        w.StartObject();
        w.Key("name");
        w.String(r.name.c_str());
        w.Key("key");
        w.String(r.key.c_str());
        w.Key("offset");
        w.Uint64(r.offset);
        w.Key("byte_size");
        w.Uint64(r.byte_size);
        w.EndObject();
      }
      w.EndArray();
      return RespondJson(std::string(sb.GetString(), sb.GetSize()));
    }
    if (action != "register" && action != "unregister") return RespondError(bhttp::status::not_found, "Not Found");
    if (method != bhttp::verb::post) return MethodNotAllowed();
    // Mapping the server's shared memory is a local affair: loopback (and the token) only.
    if (!loopback_peer_)
      return RespondError(bhttp::status::forbidden, "system shared memory can be registered only by loopback clients");
    if (!AuthorizeModelControl()) return;
    if (action == "unregister") {
      Status st = shm.Unregister(region);
      if (!st.ok()) return RespondStatus(st);
      return Respond(bhttp::status::ok, std::string());
    }
    if (region.empty()) return RespondError(bhttp::status::not_found, "Not Found");
    auto doc = BodyJson();
    if (!doc.ok()) return RespondStatus(doc.status());
    auto key = doc->FindMember("key");
    auto size = doc->FindMember("byte_size");
    auto offset = doc->FindMember("offset");
    if (key == doc->MemberEnd() || !key->value.IsString())
      return RespondError(bhttp::status::bad_request, "register: 'key' (a string) is required");
    if (size == doc->MemberEnd() || !size->value.IsUint64())
      return RespondError(bhttp::status::bad_request, "register: 'byte_size' (a non-negative integer) is required");
    if (offset != doc->MemberEnd() && !offset->value.IsUint64())
      return RespondError(bhttp::status::bad_request, "register: 'offset' must be a non-negative integer");
    Status st = shm.Register(region, key->value.GetString(), offset == doc->MemberEnd() ? 0 : offset->value.GetUint64(),
                             size->value.GetUint64());
    if (!st.ok()) return RespondStatus(st);
    Respond(bhttp::status::ok, std::string());
  }

  void MethodNotAllowed() { RespondError(bhttp::status::method_not_allowed, "Method Not Allowed"); }

  // Splits "a/b/c" into at most `max` segments; false on an empty segment or more.
  static bool Split(std::string_view path, std::string_view* segs, size_t max, size_t* count) {
    *count = 0;
    while (!path.empty()) {
      if (*count == max) return false;
      size_t slash = path.find('/');
      std::string_view seg = path.substr(0, slash);
      if (seg.empty()) return false;
      segs[(*count)++] = seg;
      if (slash == std::string_view::npos) break;
      path.remove_prefix(slash + 1);
      if (path.empty()) return false;  // trailing slash
    }
    return *count > 0;
  }

  // {m}[/versions/{v}][/ready|config|stats|infer]
  void RouteModel(std::string_view rest, bhttp::verb method) {
    std::string_view segs[4];
    size_t n = 0;
    if (!Split(rest, segs, 4, &n)) return RespondError(bhttp::status::not_found, "Not Found");
    std::string model, version;
    if (!DecodeSegment(segs[0], &model)) return RespondError(bhttp::status::bad_request, "malformed model name in URL");
    size_t i = 1;
    if (n >= 3 && segs[1] == "versions") {
      if (!AllDigits(segs[2])) return RespondError(bhttp::status::not_found, "Not Found");
      version.assign(segs[2]);
      i = 3;
    }
    std::string_view action = i < n ? segs[i] : std::string_view();
    if (i + (action.empty() ? 0 : 1) != n) return RespondError(bhttp::status::not_found, "Not Found");
    Core* core = server_->core;
    if (action == "infer") {
      if (method != bhttp::verb::post) return MethodNotAllowed();
      return Infer(std::move(model), std::move(version));
    }
    if (method != bhttp::verb::get) return MethodNotAllowed();
    if (action.empty()) {
      auto md = core->GetModelMetadata(model, version);
      if (!md.ok()) return RespondStatus(md.status());
      return RespondJson(http::ModelMetadataJson(*md));
    }
    if (action == "ready") {
      // As Triton: 200 when ready, 400 otherwise (unknown models included).
      auto ready = core->ModelReady(model, version);
      if (ready.ok() && *ready) return Respond(bhttp::status::ok, std::string());
      return RespondError(bhttp::status::bad_request,
                          ready.ok() ? StrCat("model '", model, "' is not ready") : ready.status().message());
    }
    if (action == "config") {
      auto config = core->GetModelConfig(model, version);
      if (!config.ok()) return RespondStatus(config.status());
      return RespondJson(http::ModelConfigJson(*config));
    }
    if (action == "stats") return Stats(model, version);
    RespondError(bhttp::status::not_found, "Not Found");
  }

  void Stats(const std::string& model, const std::string& version) {
    auto stats = server_->core->Statistics(model, version);
    if (!stats.ok()) return RespondStatus(stats.status());
    RespondJson(http::StatisticsJson(*stats));
  }

  // The request body as a JSON object (an empty body is an empty object).
  Result<rapidjson::Document> BodyJson() {
    rapidjson::Document doc;
    const auto& body = parser_->get().body();
    if (body.size == 0) {
      doc.SetObject();
      return doc;
    }
    doc.Parse<rapidjson::kParseIterativeFlag>(body.data, body.size);
    if (doc.HasParseError()) return InvalidArgument("malformed JSON in request body at byte ", doc.GetErrorOffset());
    if (!doc.IsObject()) return InvalidArgument("request body must be a JSON object");
    return doc;
  }

  // index | models/{m}/load | models/{m}/unload
  void RouteRepository(std::string_view rest, bhttp::verb method) {
    std::string_view segs[3];
    size_t n = 0;
    if (!Split(rest, segs, 3, &n)) return RespondError(bhttp::status::not_found, "Not Found");
    if (n == 1 && segs[0] == "index") {
      if (method != bhttp::verb::post) return MethodNotAllowed();
      auto doc = BodyJson();
      if (!doc.ok()) return RespondStatus(doc.status());
      bool ready_only = false;
      if (auto it = doc->FindMember("ready"); it != doc->MemberEnd()) {
        if (!it->value.IsBool()) return RespondError(bhttp::status::bad_request, "'ready' must be a boolean");
        ready_only = it->value.GetBool();
      }
      return RespondJson(http::RepositoryIndexJson(server_->core->RepositoryIndex(ready_only)));
    }
    if (n != 3 || segs[0] != "models" || (segs[2] != "load" && segs[2] != "unload"))
      return RespondError(bhttp::status::not_found, "Not Found");
    if (method != bhttp::verb::post) return MethodNotAllowed();
    std::string model;
    if (!DecodeSegment(segs[1], &model)) return RespondError(bhttp::status::bad_request, "malformed model name in URL");
    if (!AuthorizeModelControl()) return;
    const bool load = segs[2] == "load";
    auto doc = BodyJson();
    if (!doc.ok()) return RespondStatus(doc.status());
    bool dependents = false;
    std::string config;
    if (auto it = doc->FindMember("parameters"); it != doc->MemberEnd()) {
      if (!it->value.IsObject()) return RespondError(bhttp::status::bad_request, "'parameters' must be an object");
      for (auto p = it->value.MemberBegin(); p != it->value.MemberEnd(); ++p) {
        std::string_view key(p->name.GetString(), p->name.GetStringLength());
        if (!load && key == "unload_dependents" && p->value.IsBool()) {
          dependents = p->value.GetBool();  // an ensemble's composing models go with it
          continue;
        }
        if (load && key == "config") {  // overrides the repository's config.pbtxt (Triton's JSON form)
          if (!p->value.IsString())
            return RespondError(bhttp::status::bad_request, "load parameter 'config' must be a string (the config as JSON)");
          config.assign(p->value.GetString(), p->value.GetStringLength());
          continue;
        }
        return RespondError(bhttp::status::not_implemented,
                            StrCat(load ? "load" : "unload", " parameter '", key,
                                   "' is not supported (model files load from the repository; a load may "
                                   "give only 'config')"));
      }
    }
    // Loading builds an engine and can take seconds: off the I/O threads.
    net::post(server_->blocking, [self = shared_from_this(), work = server_->TrackedExecutor(),
                                  model = std::move(model), load, dependents, config = std::move(config)]() mutable {
      Status s = load ? self->server_->core->LoadModel(model, config) : self->server_->core->UnloadModel(model, dependents);
      auto strand = self->stream_.get_executor();
      net::post(strand, [self = std::move(self), s = std::move(s), work = std::move(work)]() {
        if (!s.ok()) return self->RespondStatus(s);
        self->Respond(bhttp::status::ok, std::string());
      });
    });
  }

  // Loopback-only unless allowed, and the bearer token when one is set.
  bool AuthorizeModelControl() {
    const HttpOptions& o = server_->options;
    if (!o.allow_remote_model_control && !loopback_peer_) {
      RespondError(bhttp::status::forbidden,
                   "model control is accepted only from loopback clients (start the server with remote model "
                   "control allowed to change this)");
      return false;
    }
    if (o.model_control_token.empty()) return true;
    const auto& header = parser_->get();
    auto it = header.find(bhttp::field::authorization);
    const beast::string_view kBearer = "Bearer ";
    if (it == header.end() || it->value().size() < kBearer.size() ||
        !beast::iequals(it->value().substr(0, kBearer.size()), kBearer)) {
      res_ = Response(bhttp::status::unauthorized, 11);
      res_.set(bhttp::field::www_authenticate, "Bearer");
      res_.set(bhttp::field::content_type, "application/json");
      res_.body().head = http::ErrorJson("model control requires 'Authorization: Bearer <token>'");
      Write();
      return false;
    }
    std::string_view token(it->value().data() + kBearer.size(), it->value().size() - kBearer.size());
    if (!SecretEquals(token, o.model_control_token)) {
      RespondError(bhttp::status::forbidden, "model control token is not valid");
      return false;
    }
    return true;
  }

  // ---- Inference ----------------------------------------------------------

  void Infer(std::string model, std::string version) {
    const Request& req = parser_->get();
    const RequestBody::value_type& body = req.body();
    uint64_t json_size = body.size;
    if (auto it = req.find(http::kInferHeaderLength); it != req.end()) {
      if (!http::ParseSize(std::string_view(it->value().data(), it->value().size()), &json_size))
        return RespondError(bhttp::status::bad_request,
                            StrCat("header ", http::kInferHeaderLength, ": '", it->value(), "' is not a byte count"));
    }
    InferRequest request;
    format_ = http::OutputFormat();
    Status s = http::ParseInferRequest(body.data, body.size, json_size, body.storage, model, version, &request,
                                       &format_, Shm());
    if (!s.ok()) return RespondStatus(s);
    if (!cancelled_) cancelled_ = std::make_shared<std::atomic<bool>>(false);
    cancelled_->store(false);
    request.cancelled = cancelled_;
    request.received = received_;
    request.protocol = "http";
    parser_.reset();  // the request (and its body) now belongs to `request`
    WatchForDisconnect();
    // Core calls back on its own thread. `state` keeps the io_context alive until
    // this callback is destroyed: once the posted handler has run, the server may
    // stop and drop its reference while this thread is still unwinding the
    // callback, whose strand executor belongs to that io_context (a
    // heap-use-after-free under ASan, HttpServerTest.KeepAlive... in CI).
    server_->core->Infer(std::move(request), [self = shared_from_this(), state = server_,
                                              work = server_->TrackedExecutor()](Result<InferResponse> result) mutable {
      auto strand = self->stream_.get_executor();
      net::post(strand, [self = std::move(self), result = std::move(result), work = std::move(work)]() mutable {
        self->OnInferDone(std::move(result));
      });
    });
  }

  void OnInferDone(Result<InferResponse> result) {
    if (!stream_.socket().is_open()) return;  // the client left; nobody to answer
    if (!result.ok()) return RespondStatus(result.status());
    auto built = http::BuildInferReply(*result, format_, Shm());
    if (!built.ok()) return RespondStatus(built.status());
    http::InferReply reply = std::move(built).value();
    res_ = Response(bhttp::status::ok, 11);
    if (!reply.binary.empty()) {
      res_.set(http::kInferHeaderLength, std::to_string(reply.json.size()));
      res_.set(bhttp::field::content_type, "application/octet-stream");
    } else {
      res_.set(bhttp::field::content_type, "application/json");
    }
    res_.body().head = std::move(reply.json);
    res_.body().tensors = std::move(reply.binary);
    Write();
  }

  // While Core works on a request nothing reads the socket, so a client that
  // hangs up would go unnoticed: wait for readability and peek. EOF or reset
  // cancels the request; pipelined bytes just end the watch.
  void WatchForDisconnect() {
    if (buffer_.size() > 0) return;
    const uint64_t generation = generation_;
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), generation](beast::error_code ec) {
      if (ec || generation != self->generation_) return;
      char c;
      const ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        self->cancelled_->store(true);
        self->keep_alive_ = false;
      }
    });
  }

  // Shared, so that a Session outliving the server (a Core holding on to a
  // callback) still finds its io_context and registry. Declared before stream_,
  // so it is released after: the socket deregisters from that io_context.
  std::shared_ptr<ServerState> server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<RequestBody>> parser_;
  Response res_;
  http::OutputFormat format_;
  std::shared_ptr<std::atomic<bool>> cancelled_;
  std::chrono::steady_clock::time_point received_;
  uint64_t generation_ = 0;
  bool keep_alive_ = true;
  bool unread_input_ = false;  //!< answered before the whole request was read
  bool busy_ = false;
  bool loopback_peer_ = false;
  TokenBucket bucket_;  // --rate-limit-per-connection: this connection's requests
  char drain_[4096];
};

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(Core* core, const HttpOptions& options)
      : state_(std::make_shared<ServerState>(options.threads > 0 ? options.threads : 2)),
        acceptor_(net::make_strand(state_->ioc)) {
    state_->core = core;
    state_->options = options;
  }

  ~HttpServerImpl() override { Stop(); }

  Status Listen() {
    const HttpOptions& o = state_->options;
    beast::error_code ec;
    auto address = net::ip::make_address(o.address, ec);
    if (ec) return InvalidArgument("HTTP address '", o.address, "' is not an IP address: ", ec.message());
    if (o.port < 0 || o.port > 65535) return InvalidArgument("HTTP port ", o.port, " is out of range");
    tcp::endpoint endpoint(address, static_cast<unsigned short>(o.port));
    const std::string where = StrCat(o.address, ":", o.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return IoError("cannot listen for HTTP on ", where, ": ", ec.message());
    port_ = acceptor_.local_endpoint().port();
    Accept();
    const int threads = o.threads > 0 ? o.threads : 2;
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { state_->ioc.run(); });
    return Status::Ok();
  }

  int port() const override { return port_; }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    state_->stopping = true;
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
    });
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      for (auto& [raw, weak] : state_->sessions)
        if (auto s = weak.lock()) live.push_back(std::move(s));
    }
    // Outside the lock: the last reference may be dropped here, and a
    // Session's destructor takes the lock.
    for (auto& s : live) net::post(s->Executor(), [s] { s->StopIfIdle(); });
    live.clear();
    // In-flight requests finish (Core calls back exactly once), then the I/O
    // threads run out of work.
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    state_->blocking.join();
  }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(state_->ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        auto session = std::make_shared<Session>(std::move(socket), state_);
        {
          std::lock_guard<std::mutex> lock(state_->mu);
          state_->sessions.emplace(session.get(), session);
        }
        session->Run();
      }
      Accept();
    });
  }

  std::shared_ptr<ServerState> state_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopped_{false};
  int port_ = 0;
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(Core* core, const HttpOptions& options) {
  if (core == nullptr) return InvalidArgument("HttpServer::Start: no Core");
  auto server = std::make_unique<HttpServerImpl>(core, options);
  SP_RETURN_IF_ERROR(server->Listen());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace sampan::server
