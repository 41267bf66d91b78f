// The REST front end's routing: each KServe v2 endpoint (and Triton's extensions: repository,
// statistics, logging; shared memory is http_shared_memory.cpp's) checked and translated into one Core call. The
// transport underneath is http_server.cpp's Session<S> (http_session.h).
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "server/core/log.h"
#include "server/core/secret.h"
#include "server/http/http_session.h"

namespace sampan::server::http {
namespace {

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// The session whose Infer() is calling Core::Infer on this thread (its answer, when it comes
// before the call returns, is taken there).
thread_local const SessionBase* t_inline_session = nullptr;

}  // namespace

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

//! Triton's mapping of error codes to HTTP statuses (http_server.cc, HttpCodeFromError).
bhttp::status HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return bhttp::status::ok;
    case StatusCode::kNotFound:
      return bhttp::status::not_found;
    case StatusCode::kInternal:
    case StatusCode::kIoError:
      return bhttp::status::internal_server_error;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:    // Triton reports queue timeouts as UNAVAILABLE
    case StatusCode::kFailedPrecondition:  // e.g. load/unload while model control is off (Triton: UNAVAILABLE)
      return bhttp::status::service_unavailable;
    case StatusCode::kUnsupported:
      return bhttp::status::not_implemented;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kCancelled:
      return bhttp::status::bad_request;
  }
  return bhttp::status::bad_request;
}

bool IsLoopback(const net::ip::address& a) {
  if (a.is_loopback()) return true;
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    return net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6()).is_loopback();
  return false;
}

SessionBase::~SessionBase() {
  std::lock_guard<std::mutex> lock(server_->mu);
  server_->sessions.erase(this);
}

void SessionBase::RespondTooLarge(uint64_t length) {
  keep_alive_ = false;
  unread_input_ = true;
  RespondError(bhttp::status::bad_request, StrCat("request body of ", length, " bytes exceeds the server's limit of ",
                                                  server_->options.max_body_bytes, " bytes"));
}

void SessionBase::Route() {
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
    return RespondError(bhttp::status::too_many_requests, RateLimitMessage(rate));
  }
  if (path == "/v2") {
    if (method != bhttp::verb::get) return MethodNotAllowed();
    ServerMetadata md = server_->core->GetServerMetadata();
    if (server_->options.enable_shared_memory) {
      md.extensions.push_back("system_shared_memory");
      if (SharedMemoryRegistry::CudaBuilt()) md.extensions.push_back("cuda_shared_memory");
    }
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
  if (path == "/v2/trace/setting") return TraceSetting("", method);
  if (path == "/v2/models/stats") {
    if (method != bhttp::verb::get) return MethodNotAllowed();
    return Stats("", "");
  }
  constexpr std::string_view kModels = "/v2/models/";
  if (path.substr(0, kModels.size()) == kModels) return RouteModel(path.substr(kModels.size()), method);
  constexpr std::string_view kShm = "/v2/systemsharedmemory";
  if (path.substr(0, kShm.size()) == kShm && (path.size() == kShm.size() || path[kShm.size()] == '/'))
    return RouteSharedMemory(path.substr(kShm.size()), method, SharedMemoryKind::kSystem);
  constexpr std::string_view kCudaShm = "/v2/cudasharedmemory";
  if (path.substr(0, kCudaShm.size()) == kCudaShm && (path.size() == kCudaShm.size() || path[kCudaShm.size()] == '/'))
    return RouteSharedMemory(path.substr(kCudaShm.size()), method, SharedMemoryKind::kCuda);
  constexpr std::string_view kRepository = "/v2/repository/";
  if (path.substr(0, kRepository.size()) == kRepository)
    return RouteRepository(path.substr(kRepository.size()), method);
  RespondError(bhttp::status::not_found, "Not Found");
}

// Triton's logging API: GET answers the settings; POST changes those its JSON object names
// (all or nothing) and answers them all. Changing them is model control's business: loopback
// clients (unless remote control is allowed) and the token when one is set.
void SessionBase::Logging(bhttp::verb method) {
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
    if (v.kind == LogSettingValue::Kind::kBool)
      w.Bool(v.b);
    else if (v.kind == LogSettingValue::Kind::kUint)
      w.Uint64(v.u);
    else
      w.String(v.s.c_str(), static_cast<rapidjson::SizeType>(v.s.size()));
  }
  w.EndObject();
  RespondJson(std::string(sb.GetString(), sb.GetSize()));
}

// Which restricted-API category a path belongs to (Triton's grouping); none for paths that
// are not endpoints (they answer 404 whatever the headers).
std::optional<ApiCategory> SessionBase::CategoryOf(std::string_view path) {
  auto starts = [&](std::string_view prefix) {
    return path.substr(0, prefix.size()) == prefix && (path.size() == prefix.size() || path[prefix.size()] == '/');
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
  // {m}/trace/setting has as many segments as {m}/versions/{v}: named before the count decides.
  constexpr std::string_view kTraceSetting = "/trace/setting";
  if (rest.size() > kTraceSetting.size() && rest.substr(rest.size() - kTraceSetting.size()) == kTraceSetting)
    return ApiCategory::kTrace;
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
bool SessionBase::AuthorizeRestricted(std::string_view path) {
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

// Splits "a/b/c" into at most `max` segments; false on an empty segment or more.
bool SessionBase::Split(std::string_view path, std::string_view* segs, size_t max, size_t* count) {
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
void SessionBase::RouteModel(std::string_view rest, bhttp::verb method) {
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
  if (i == 1 && n == 3 && segs[1] == "trace" && segs[2] == "setting") return TraceSetting(model, method);
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

void SessionBase::Stats(const std::string& model, const std::string& version) {
  auto stats = server_->core->Statistics(model, version);
  if (!stats.ok()) return RespondStatus(stats.status());
  RespondJson(http::StatisticsJson(*stats));
}

// Triton's trace settings: GET answers the effective settings (the model's, or the server's);
// POST changes those its JSON object names (a string, a list of strings, or null to clear a
// model's own value), all or nothing, and answers them all. Changing them is model control's
// business, as the log settings are.
void SessionBase::TraceSetting(const std::string& model, bhttp::verb method) {
  if (method != bhttp::verb::get && method != bhttp::verb::post) return MethodNotAllowed();
  if (!model.empty()) {
    auto ready = server_->core->ModelReady(model, "");
    if (!ready.ok()) return RespondStatus(ready.status());
  }
  Tracer& tracer = server_->core->tracer();
  TraceSettingValues values;
  if (method == bhttp::verb::post) {
    if (!AuthorizeModelControl()) return;
    auto doc = BodyJson();
    if (!doc.ok()) return RespondStatus(doc.status());
    TraceSettingUpdate update;
    for (auto it = doc->MemberBegin(); it != doc->MemberEnd(); ++it) {
      const std::string name(it->name.GetString(), it->name.GetStringLength());
      auto& slot = update[name];
      const auto& v = it->value;
      if (v.IsNull()) continue;  // cleared
      slot.emplace();
      if (v.IsString()) {
        slot->emplace_back(v.GetString(), v.GetStringLength());
      } else if (v.IsInt64()) {
        slot->push_back(std::to_string(v.GetInt64()));
      } else if (v.IsArray()) {
        for (const auto& e : v.GetArray()) {
          if (!e.IsString())
            return RespondError(bhttp::status::bad_request,
                                StrCat("trace setting '", name, "': a list holds strings only"));
          slot->emplace_back(e.GetString(), e.GetStringLength());
        }
      } else {
        return RespondError(bhttp::status::bad_request,
                            StrCat("trace setting '", name, "' must be a string, a list of strings or null"));
      }
    }
    auto updated = tracer.Update(model, update);
    if (!updated.ok()) return RespondStatus(updated.status());
    values = std::move(updated).value();
  } else {
    values = tracer.Get(model);
  }
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartObject();
  for (const auto& [name, list] : values) {
    w.Key(name.c_str());
    if (name == "trace_level") {
      w.StartArray();
      for (const std::string& l : list) w.String(l.c_str(), static_cast<rapidjson::SizeType>(l.size()));
      w.EndArray();
    } else {
      const std::string one = list.empty() ? std::string() : list[0];
      w.String(one.c_str(), static_cast<rapidjson::SizeType>(one.size()));
    }
  }
  w.EndObject();
  RespondJson(std::string(sb.GetString(), sb.GetSize()));
}

// The request body as a JSON object (an empty body is an empty object).
Result<rapidjson::Document> SessionBase::BodyJson() {
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
void SessionBase::RouteRepository(std::string_view rest, bhttp::verb method) {
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
          return RespondError(bhttp::status::bad_request,
                              "load parameter 'config' must be a string (the config as JSON)");
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
  net::post(server_->blocking, [self = shared_from_this(), work = TrackedExecutor(), model = std::move(model), load,
                                dependents, config = std::move(config)]() mutable {
    Status s =
        load ? self->server_->core->LoadModel(model, config) : self->server_->core->UnloadModel(model, dependents);
    auto strand = self->Executor();
    net::post(strand, [self = std::move(self), s = std::move(s), work = std::move(work)]() {
      if (!s.ok()) return self->RespondStatus(s);
      self->Respond(bhttp::status::ok, std::string());
    });
  });
}

// Loopback-only unless allowed, and the bearer token when one is set.
bool SessionBase::AuthorizeModelControl() {
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

void SessionBase::Infer(std::string model, std::string version) {
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
  Status s =
      http::ParseInferRequest(body.data, body.size, json_size, body.storage, model, version, &request, &format_, Shm());
  if (!s.ok()) return RespondStatus(s);
  if (!cancelled_) cancelled_ = std::make_shared<std::atomic<bool>>(false);
  cancelled_->store(false);
  request.cancelled = cancelled_;
  request.received = received_;
  request.protocol = "http";
  trace_ = server_->core->tracer().Sample(request.model_name, request.id, "http");
  if (trace_) {
    trace_->Record("HTTP_RECV_START", received_);
    trace_->Record("HTTP_RECV_END", std::chrono::steady_clock::now());
    request.trace = trace_;
  }
  parser_.reset();  // the request (and its body) now belongs to `request`
  // Core may answer before Infer returns, on this thread (a short model run inline: scheduler.h,
  // "Inline runs"; or a refusal): that answer is kept and sent below, without a post to the strand.
  inline_answer_.reset();
  t_inline_session = this;
  // Otherwise Core calls back on its own thread. `state` keeps the io_context alive until
  // this callback is destroyed: once the posted handler has run, the server may
  // stop and drop its reference while this thread is still unwinding the
  // callback, whose strand executor belongs to that io_context (a
  // heap-use-after-free under ASan, HttpServerTest.KeepAlive... in CI).
  server_->core->Infer(std::move(request), [self = shared_from_this(), state = server_,
                                            work = TrackedExecutor()](Result<InferResponse> result) mutable {
    if (t_inline_session == self.get()) {  // inside Core::Infer below, on the strand
      self->inline_answer_.emplace(std::move(result));
      return;
    }
    auto strand = self->Executor();
    net::post(strand, [self = std::move(self), result = std::move(result), work = std::move(work)]() mutable {
      self->OnInferDone(std::move(result));
    });
  });
  t_inline_session = nullptr;
  if (inline_answer_) {
    Result<InferResponse> result = std::move(*inline_answer_);
    inline_answer_.reset();
    return OnInferDone(std::move(result));
  }
  WatchForDisconnect();
}

void SessionBase::OnInferDone(Result<InferResponse> result) {
  if (!SocketOpen()) {  // the client left; nobody to answer
    CompleteTrace();
    return;
  }
  if (trace_) trace_->Record("HTTP_SEND_START", std::chrono::steady_clock::now());
  if (!result.ok()) return RespondStatus(result.status());  // a shed request: 503 with Retry-After (Respond)
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

}  // namespace sampan::server::http
