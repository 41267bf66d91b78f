#include "server/grpc/grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <climits>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "grpc_service.grpc.pb.h"
#include "server/core/log.h"
#include "server/core/tls_files.h"
#include "server/grpc/grpc_convert.h"
#include "server/grpc/grpc_stream.h"

namespace sampan::server {

namespace {

using ::grpc::CallbackServerContext;
using ::grpc::ServerUnaryReactor;

// A fixed pool of threads for the calls that block in Core (model load and
// unload take seconds), so no gRPC thread waits on them.
class BlockingPool {
 public:
  explicit BlockingPool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~BlockingPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  void Run(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  // Drains the queue before stopping: every queued call must still Finish.
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// ModelInfer's request lives in a shared_ptr, so the input tensors Core gets
// can wrap its raw bytes and keep it alive for as long as Core holds them
// (which may be past the end of the RPC).
class InferMessages final : public ::grpc::MessageHolder<inference::ModelInferRequest, inference::ModelInferResponse> {
 public:
  InferMessages() {
    set_request(request_.get());
    set_response(&response_);
  }
  void Release() override { delete this; }
  const std::shared_ptr<inference::ModelInferRequest>& shared_request() const { return request_; }

 private:
  std::shared_ptr<inference::ModelInferRequest> request_ = std::make_shared<inference::ModelInferRequest>();
  inference::ModelInferResponse response_;
};

class InferAllocator final
    : public ::grpc::MessageAllocator<inference::ModelInferRequest, inference::ModelInferResponse> {
 public:
  ::grpc::MessageHolder<inference::ModelInferRequest, inference::ModelInferResponse>* AllocateMessages() override {
    return new InferMessages();
  }
};

// A unary reactor that records client cancellation (or an expired deadline)
// in the flag Core's scheduler checks before running a request.
class InferReactor final : public ServerUnaryReactor {
 public:
  void OnCancel() override { cancelled->store(true); }
  void OnDone() override {
    if (trace) {  // the answer has gone out (or the call ended without one)
      trace->Record("GRPC_SEND_END", std::chrono::steady_clock::now());
      trace->Complete();
    }
    delete this;
  }
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<RequestTrace> trace;  // when the tracer sampled the request
};

// A stream refused before it starts (a restricted protocol): finishes at once with `status`.
class RefusedStream final
    : public ::grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse> {
 public:
  explicit RefusedStream(const ::grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

ServerUnaryReactor* Done(CallbackServerContext* ctx, const ::grpc::Status& status) {
  ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(status);
  return r;
}
ServerUnaryReactor* Done(CallbackServerContext* ctx, const Status& status) {
  return Done(ctx, ToGrpcStatus(status));
}

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  //! Ends the open streams (see StreamRegistry::StopAll).
  void StopStreams() { streams_.StopAll(); }

  InferenceService(Core* core, const GrpcOptions& options)
      : core_(core),
        options_(options),
        shm_(options.enable_shared_memory ? &core->system_shared_memory() : nullptr),
        pool_(options.threads > 0 ? options.threads : 2),
        limiter_(options.rate_limit_per_connection) {
    SetMessageAllocatorFor_ModelInfer(&allocator_);
  }

  ServerUnaryReactor* ServerLive(CallbackServerContext* ctx, const inference::ServerLiveRequest*,
                                 inference::ServerLiveResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kHealth); !s.ok()) return Done(ctx, s);
    resp->set_live(core_->Live());
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* ServerReady(CallbackServerContext* ctx, const inference::ServerReadyRequest*,
                                  inference::ServerReadyResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kHealth); !s.ok()) return Done(ctx, s);
    resp->set_ready(core_->Ready());
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* ModelReady(CallbackServerContext* ctx, const inference::ModelReadyRequest* req,
                                 inference::ModelReadyResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kHealth); !s.ok()) return Done(ctx, s);
    Result<bool> ready = core_->ModelReady(req->name(), req->version());
    // As Triton: an unknown model or version is simply not ready (no error).
    if (!ready.ok() && ready.status().code() == StatusCode::kNotFound) ready = false;
    if (!ready.ok()) return Done(ctx, ready.status());
    resp->set_ready(*ready);
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* ServerMetadata(CallbackServerContext* ctx, const inference::ServerMetadataRequest*,
                                     inference::ServerMetadataResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kMetadata); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    const server::ServerMetadata md = core_->GetServerMetadata();
    resp->set_name(md.name);
    resp->set_version(md.version);
    for (const auto& e : md.extensions) resp->add_extensions(e);
    if (shm_ != nullptr) {
      resp->add_extensions("system_shared_memory");
      if (SharedMemoryRegistry::CudaBuilt()) resp->add_extensions("cuda_shared_memory");
    }
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* ModelMetadata(CallbackServerContext* ctx, const inference::ModelMetadataRequest* req,
                                    inference::ModelMetadataResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kMetadata); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    Result<server::ModelMetadata> md = core_->GetModelMetadata(req->name(), req->version());
    if (!md.ok()) return Done(ctx, md.status());
    ModelMetadataToProto(*md, resp);
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* ModelConfig(CallbackServerContext* ctx, const inference::ModelConfigRequest* req,
                                  inference::ModelConfigResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kModelConfig); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    Result<server::ModelConfig> config = core_->GetModelConfig(req->name(), req->version());
    if (!config.ok()) return Done(ctx, config.status());
    *resp->mutable_config() = std::move(config).value();
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* ModelInfer(CallbackServerContext* ctx, const inference::ModelInferRequest*,
                                 inference::ModelInferResponse* resp) override {
    const auto received = std::chrono::steady_clock::now();
    auto* reactor = new InferReactor();
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kInference); !s.ok()) {
      reactor->Finish(s);
      return reactor;
    }
    if (::grpc::Status s = Admit(ctx); !s.ok()) {
      reactor->Finish(s);
      return reactor;
    }
    auto* messages = static_cast<InferMessages*>(ctx->GetRpcAllocatorState());
    std::vector<SharedMemoryOutput> shm_outputs;
    Result<InferRequest> request = InferRequestFromProto(messages->shared_request(), shm_, &shm_outputs);
    if (!request.ok()) {
      reactor->Finish(ToGrpcStatus(request.status()));
      return reactor;
    }
    request->cancelled = reactor->cancelled;
    request->received = received;
    request->protocol = "grpc";
    if ((reactor->trace = core_->tracer().Sample(request->model_name, request->id, "grpc"))) {
      reactor->trace->Record("GRPC_WAITREAD_END", received);  // the message was read when the call began
      request->trace = reactor->trace;
    }
    // The response message lives until OnDone, which comes only after Finish.
    core_->Infer(std::move(request).value(),
                 [reactor, resp, shm_outputs = std::move(shm_outputs)](Result<InferResponse> result) {
                   if (reactor->trace) reactor->trace->Record("GRPC_SEND_START", std::chrono::steady_clock::now());
                   if (!result.ok()) {
                     reactor->Finish(ToGrpcStatus(result.status()));
                     return;
                   }
                   reactor->Finish(ToGrpcStatus(InferResponseToProto(*result, resp, shm_outputs)));
                 });
    return reactor;
  }

  ::grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>* ModelStreamInfer(
      CallbackServerContext* ctx) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kInference); !s.ok()) return new RefusedStream(s);
    return new StreamInferReactor(core_, &streams_, shm_, limiter_.enabled() ? &limiter_ : nullptr, ctx->peer());
  }

  ServerUnaryReactor* ModelStatistics(CallbackServerContext* ctx, const inference::ModelStatisticsRequest* req,
                                      inference::ModelStatisticsResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kStatistics); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    Result<std::vector<ModelStats>> stats = core_->Statistics(req->name(), req->version());
    if (!stats.ok()) return Done(ctx, stats.status());
    for (const ModelStats& s : *stats) ModelStatsToProto(s, resp->add_model_stats());
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* RepositoryIndex(CallbackServerContext* ctx, const inference::RepositoryIndexRequest* req,
                                      inference::RepositoryIndexResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kModelRepository); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    for (const RepositoryEntry& e : core_->RepositoryIndex(req->ready())) {
      auto* m = resp->add_models();
      m->set_name(e.name);
      m->set_version(e.version);
      m->set_state(ModelStateName(e.state));
      m->set_reason(e.reason);
    }
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* RepositoryModelLoad(CallbackServerContext* ctx, const inference::RepositoryModelLoadRequest* req,
                                          inference::RepositoryModelLoadResponse*) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kModelRepository); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = CheckModelControl(ctx, "model load"); !s.ok()) return Done(ctx, s);
    if (req->model_name().empty()) return Done(ctx, InvalidArgument("RepositoryModelLoadRequest.model_name is empty"));
    std::string config;
    for (const auto& [key, value] : req->parameters()) {
      // `config` overrides the repository's config.pbtxt; model files sent with the request
      // (`file:...`) are not supported, and are refused rather than ignored.
      if (key != "config")
        return Done(ctx, Unsupported("load parameter '", key,
                                     "' is not supported: model files load from the repository (only 'config' "
                                     "may be given)"));
      if (value.parameter_choice_case() != inference::ModelRepositoryParameter::kStringParam)
        return Done(ctx, InvalidArgument("load parameter 'config' must be a string (the config as JSON)"));
      config = value.string_param();
    }
    auto* reactor = ctx->DefaultReactor();
    pool_.Run([this, reactor, name = req->model_name(), config = std::move(config)] {
      reactor->Finish(ToGrpcStatus(core_->LoadModel(name, config)));
    });
    return reactor;
  }

  ServerUnaryReactor* RepositoryModelUnload(CallbackServerContext* ctx,
                                            const inference::RepositoryModelUnloadRequest* req,
                                            inference::RepositoryModelUnloadResponse*) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kModelRepository); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = CheckModelControl(ctx, "model unload"); !s.ok()) return Done(ctx, s);
    if (req->model_name().empty())
      return Done(ctx, InvalidArgument("RepositoryModelUnloadRequest.model_name is empty"));
    bool dependents = false;
    for (const auto& [key, value] : req->parameters()) {
      if (key != "unload_dependents") return Done(ctx, Unsupported("unload parameter '", key, "' is not supported"));
      if (value.parameter_choice_case() != inference::ModelRepositoryParameter::kBoolParam)
        return Done(ctx, InvalidArgument("unload parameter 'unload_dependents' must be a bool"));
      dependents = value.bool_param();
    }
    auto* reactor = ctx->DefaultReactor();
    pool_.Run([this, reactor, name = req->model_name(), dependents] {
      reactor->Finish(ToGrpcStatus(core_->UnloadModel(name, dependents)));
    });
    return reactor;
  }

  // ---- System shared-memory extension ----

  ServerUnaryReactor* SystemSharedMemoryStatus(CallbackServerContext* ctx,
                                               const inference::SystemSharedMemoryStatusRequest* req,
                                               inference::SystemSharedMemoryStatusResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kSharedMemory); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    if (shm_ == nullptr) return Done(ctx, SharedMemoryOff("system"));
    Result<std::vector<SharedMemoryRegionInfo>> regions = shm_->Regions(req->name(), SharedMemoryKind::kSystem);
    if (!regions.ok()) return Done(ctx, regions.status());
    for (const SharedMemoryRegionInfo& r : *regions) {
      auto& s = (*resp->mutable_regions())[r.name];
      s.set_name(r.name);
      s.set_key(r.key);
      s.set_offset(r.offset);
      s.set_byte_size(r.byte_size);
    }
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* SystemSharedMemoryRegister(CallbackServerContext* ctx,
                                                 const inference::SystemSharedMemoryRegisterRequest* req,
                                                 inference::SystemSharedMemoryRegisterResponse*) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kSharedMemory); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    if (shm_ == nullptr) return Done(ctx, SharedMemoryOff("system"));
    if (::grpc::Status s = CheckSharedMemoryControl(ctx, "system shared memory register"); !s.ok()) return Done(ctx, s);
    // Register maps the object (a system call or two): quick enough to run here.
    return Done(ctx, core_->system_shared_memory().Register(req->name(), req->key(), req->offset(), req->byte_size()));
  }

  ServerUnaryReactor* SystemSharedMemoryUnregister(CallbackServerContext* ctx,
                                                   const inference::SystemSharedMemoryUnregisterRequest* req,
                                                   inference::SystemSharedMemoryUnregisterResponse*) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kSharedMemory); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    if (shm_ == nullptr) return Done(ctx, SharedMemoryOff("system"));
    if (::grpc::Status s = CheckSharedMemoryControl(ctx, "system shared memory unregister"); !s.ok())
      return Done(ctx, s);
    return Done(ctx, core_->system_shared_memory().Unregister(req->name(), SharedMemoryKind::kSystem));
  }

  // ---- CUDA shared-memory extension ----

  ServerUnaryReactor* CudaSharedMemoryStatus(CallbackServerContext* ctx,
                                             const inference::CudaSharedMemoryStatusRequest* req,
                                             inference::CudaSharedMemoryStatusResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kSharedMemory); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    if (shm_ == nullptr) return Done(ctx, SharedMemoryOff("CUDA"));
    Result<std::vector<SharedMemoryRegionInfo>> regions = shm_->Regions(req->name(), SharedMemoryKind::kCuda);
    if (!regions.ok()) return Done(ctx, regions.status());
    for (const SharedMemoryRegionInfo& r : *regions) {
      auto& s = (*resp->mutable_regions())[r.name];
      s.set_name(r.name);
      s.set_device_id(static_cast<uint64_t>(r.device_id));
      s.set_byte_size(r.byte_size);
    }
    return Done(ctx, Status::Ok());
  }

  ServerUnaryReactor* CudaSharedMemoryRegister(CallbackServerContext* ctx,
                                               const inference::CudaSharedMemoryRegisterRequest* req,
                                               inference::CudaSharedMemoryRegisterResponse*) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kSharedMemory); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    if (shm_ == nullptr) return Done(ctx, SharedMemoryOff("CUDA"));
    // A CUDA IPC handle opens only in a process of the machine that made it.
    if (::grpc::Status s = CheckSharedMemoryControl(ctx, "CUDA shared memory register"); !s.ok()) return Done(ctx, s);
    // Opening the handle can make the device's CUDA context (a second or so): on the pool, as
    // model loads, not on gRPC's callback thread.
    auto* reactor = ctx->DefaultReactor();
    pool_.Run([this, reactor, name = req->name(), handle = req->raw_handle(), device = req->device_id(),
               bytes = req->byte_size()] {
      reactor->Finish(ToGrpcStatus(core_->system_shared_memory().RegisterCuda(name, handle, device, bytes)));
    });
    return reactor;
  }

  ServerUnaryReactor* CudaSharedMemoryUnregister(CallbackServerContext* ctx,
                                                 const inference::CudaSharedMemoryUnregisterRequest* req,
                                                 inference::CudaSharedMemoryUnregisterResponse*) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kSharedMemory); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    if (shm_ == nullptr) return Done(ctx, SharedMemoryOff("CUDA"));
    if (::grpc::Status s = CheckSharedMemoryControl(ctx, "CUDA shared memory unregister"); !s.ok()) return Done(ctx, s);
    return Done(ctx, core_->system_shared_memory().Unregister(req->name(), SharedMemoryKind::kCuda));
  }

  ServerUnaryReactor* LogSettings(CallbackServerContext* ctx, const inference::LogSettingsRequest* req,
                                  inference::LogSettingsResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kLogging); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    if (!req->settings().empty()) {
      // Changing where and what the server logs is model control's business (as over HTTP).
      if (::grpc::Status s = CheckModelControl(ctx, "changing the log settings"); !s.ok()) return Done(ctx, s);
      server::LogSettings settings = Log::Get().settings();
      for (const auto& [name, value] : req->settings()) {
        LogSettingValue v;
        switch (value.parameter_choice_case()) {
          case inference::LogSettingsRequest::SettingValue::kBoolParam:
            v.kind = LogSettingValue::Kind::kBool;
            v.b = value.bool_param();
            break;
          case inference::LogSettingsRequest::SettingValue::kUint32Param:
            v.kind = LogSettingValue::Kind::kUint;
            v.u = value.uint32_param();
            break;
          case inference::LogSettingsRequest::SettingValue::kStringParam:
            v.kind = LogSettingValue::Kind::kString;
            v.s = value.string_param();
            break;
          default:
            return Done(ctx, InvalidArgument("log setting '", name, "' has no value"));
        }
        if (Status st = ApplyLogSetting(settings, name, v); !st.ok()) return Done(ctx, st);
      }
      if (Status st = Log::Get().Update(settings); !st.ok()) return Done(ctx, st);
    }
    auto* out = resp->mutable_settings();
    for (const auto& [name, v] : LogSettingValues(Log::Get().settings())) {
      auto& slot = (*out)[name];
      if (v.kind == LogSettingValue::Kind::kBool)
        slot.set_bool_param(v.b);
      else if (v.kind == LogSettingValue::Kind::kUint)
        slot.set_uint32_param(static_cast<uint32_t>(v.u));
      else
        slot.set_string_param(v.s);
    }
    return Done(ctx, Status::Ok());
  }

  // As HTTP's /v2/trace/setting: changes are model control's business, all or nothing.
  ServerUnaryReactor* TraceSetting(CallbackServerContext* ctx, const inference::TraceSettingRequest* req,
                                   inference::TraceSettingResponse* resp) override {
    if (::grpc::Status s = Restricted(ctx, ApiCategory::kTrace); !s.ok()) return Done(ctx, s);
    if (::grpc::Status s = Admit(ctx); !s.ok()) return Done(ctx, s);
    const std::string& model = req->model_name();
    if (!model.empty()) {
      if (auto ready = core_->ModelReady(model, ""); !ready.ok()) return Done(ctx, ready.status());
    }
    TraceSettingValues values;
    if (!req->settings().empty()) {
      if (::grpc::Status s = CheckModelControl(ctx, "changing the trace settings"); !s.ok()) return Done(ctx, s);
      TraceSettingUpdate update;
      for (const auto& [name, value] : req->settings()) {
        auto& slot = update[name];
        if (value.value().empty()) continue;  // cleared
        slot.emplace(value.value().begin(), value.value().end());
      }
      auto updated = core_->tracer().Update(model, update);
      if (!updated.ok()) return Done(ctx, updated.status());
      values = std::move(updated).value();
    } else {
      values = core_->tracer().Get(model);
    }
    auto* out = resp->mutable_settings();
    for (const auto& [name, list] : values) {
      auto& slot = (*out)[name];
      for (const std::string& v : list) slot.add_value(v);
    }
    return Done(ctx, Status::Ok());
  }

 private:
  static Status SharedMemoryOff(const char* kind) {
    return Unsupported("the ", kind,
                       " shared memory extension is not enabled on this server (start sampan serve with "
                       "--enable-shared-memory)");
  }

  // Model control changes what the server serves: loopback peers only unless
  // allowed, and the bearer token when one is configured.
  ::grpc::Status CheckModelControl(CallbackServerContext* ctx, const char* what) const {
    if (!options_.allow_remote_model_control && !IsLoopbackPeer(ctx->peer()))
      return {::grpc::StatusCode::PERMISSION_DENIED,
              StrCat(what, " is accepted only from this machine (peer ", ctx->peer(),
                     "); start the server with remote model control allowed to permit it")};
    return CheckToken(ctx, what);
  }

  // A region is mapped from this machine's shared memory, so only a client on
  // this machine can mean one: loopback peers always (whatever remote model
  // control allows), and the model control token when one is configured.
  ::grpc::Status CheckSharedMemoryControl(CallbackServerContext* ctx, const char* what) const {
    if (!IsLoopbackPeer(ctx->peer()))
      return {::grpc::StatusCode::PERMISSION_DENIED,
              StrCat(what, " is accepted only from this machine (peer ", ctx->peer(),
                     "): the region must be in this machine's shared memory")};
    return CheckToken(ctx, what);
  }

  // --grpc-restricted-protocol: as Triton, UNAVAILABLE naming the metadata key when the call's
  // category is restricted and the call lacks "triton-grpc-protocol-KEY: VALUE".
  ::grpc::Status Restricted(CallbackServerContext* ctx, ApiCategory category) const {
    const RestrictedApis::Rule* rule = options_.restricted.Find(category);
    if (rule == nullptr) return ::grpc::Status::OK;
    const std::string key = "triton-grpc-protocol-" + rule->key;
    const auto& md = ctx->client_metadata();
    auto it = md.find(key);
    std::optional<std::string_view> given;
    if (it != md.end()) given = std::string_view(it->second.data(), it->second.size());
    if (RestrictedApis::Matches(*rule, given)) return ::grpc::Status::OK;
    return {::grpc::StatusCode::UNAVAILABLE, StrCat("This protocol is restricted, expecting header '", key, "'")};
  }

  // --rate-limit-per-connection, by the call's peer (its TCP connection).
  ::grpc::Status Admit(CallbackServerContext* ctx) {
    if (!limiter_.enabled() || limiter_.Admit(ctx->peer())) return ::grpc::Status::OK;
    return {::grpc::StatusCode::RESOURCE_EXHAUSTED, RateLimitMessage(limiter_.rate())};
  }

  ::grpc::Status CheckToken(CallbackServerContext* ctx, const char* what) const {
    if (!options_.model_control_token.empty()) {
      const auto& md = ctx->client_metadata();
      auto it = md.find("authorization");
      const std::string_view given =
          it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
      if (!BearerTokenMatches(given, options_.model_control_token))
        return {::grpc::StatusCode::UNAUTHENTICATED,
                StrCat(what,
                       " requires 'authorization: Bearer <token>' metadata with the server's model "
                       "control token",
                       it == md.end() ? " (none was sent)" : " (the one sent does not match)")};
    }
    return ::grpc::Status::OK;
  }

  Core* core_;
  GrpcOptions options_;
  const SharedMemoryRegistry* shm_;  //!< nullptr: the extension is off
  InferAllocator allocator_;
  StreamRegistry streams_;
  BlockingPool pool_;
  PeerRateLimiter limiter_;
};

// The standard health service (grpc.health.v1.Health, what Kubernetes' gRPC
// probes call) answers for the server as a whole ("") and for the inference
// service by name: SERVING while Core is ready, NOT_SERVING otherwise.
constexpr const char* kInferenceServiceName = "inference.GRPCInferenceService";
// How often readiness is copied into the health service; Watch streams see a
// change within this time, and probes (every few seconds) never see it stale.
constexpr std::chrono::milliseconds kHealthRefresh{200};

// The server's TLS credentials from PEM files, each checked first (readable, a certificate or
// key, the key the certificate's, not expired) so a mistake is named rather than left to gRPC's
// "cannot listen".
Result<std::shared_ptr<::grpc::ServerCredentials>> TlsCredentials(const GrpcOptions& o) {
  SP_ASSIGN_OR_RETURN(tls::ServerTlsPem pem,
                      tls::LoadServerTls({o.use_ssl_mutual, o.server_cert, o.server_key, o.root_cert}, "--grpc"));
  ::grpc::SslServerCredentialsOptions ssl(o.use_ssl_mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                           : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_root_certs = std::move(pem.root);
  ssl.pem_key_cert_pairs.push_back({std::move(pem.key), std::move(pem.cert_chain)});
  return ::grpc::SslServerCredentials(ssl);
}

class GrpcServerImpl final : public GrpcServer {
 public:
  GrpcServerImpl(Core* core, const GrpcOptions& options) : core_(core), service_(core, options) {}
  ~GrpcServerImpl() override { Stop(); }

  Status Init(const GrpcOptions& options) {
    // A process-wide switch of gRPC (read when a server is built): Sampan's
    // gRPC servers all serve health.
    static std::once_flag enable_health;
    std::call_once(enable_health, [] { ::grpc::EnableDefaultHealthCheckService(true); });
    std::string host = options.address.empty() ? "0.0.0.0" : options.address;
    if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";  // IPv6 literal
    const std::string address = StrCat(host, ":", options.port);
    const int max_bytes = static_cast<int>(std::min<uint64_t>(options.max_message_bytes, INT_MAX));

    std::shared_ptr<::grpc::ServerCredentials> credentials = ::grpc::InsecureServerCredentials();
    if (options.use_ssl || options.use_ssl_mutual) {
      SP_ASSIGN_OR_RETURN(credentials, TlsCredentials(options));
    }
    ::grpc::ServerBuilder builder;
    builder.AddListeningPort(address, credentials, &port_);
    builder.RegisterService(&service_);
    builder.SetMaxReceiveMessageSize(max_bytes);
    builder.SetMaxSendMessageSize(max_bytes);
    // gRPC sets SO_REUSEPORT by default, which lets a second server bind a busy
    // port and silently split its traffic; a busy port must be an error.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0)
      return IoError("gRPC: cannot listen on ", address, " (address in use, or not an address of this machine?)");
    health_ = server_->GetHealthCheckService();
    if (health_ == nullptr) return Internal("gRPC: the health checking service is not available");
    const bool serving = core_->Ready();
    SetServing(serving);
    health_thread_ = std::thread([this, serving] { RefreshHealth(serving); });
    return Status::Ok();
  }

  int port() const override { return port_; }

  void Stop() override {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (server_ == nullptr) return;
    if (health_thread_.joinable()) {
      {
        std::lock_guard<std::mutex> hl(health_mu_);
        health_stop_ = true;
      }
      health_cv_.notify_all();
      health_thread_.join();
    }
    // NOT_SERVING from now on (probes fail while in-flight calls drain).
    if (health_ != nullptr) health_->Shutdown();
    // Open streams end as soon as their responses in flight are written; new
    // calls are refused at once; in-flight ones get a few seconds to end before
    // gRPC cancels them (their cancelled flags tell Core to drop them).
    service_.StopStreams();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_.reset();
  }

 private:
  void SetServing(bool serving) {
    health_->SetServingStatus("", serving);
    health_->SetServingStatus(kInferenceServiceName, serving);
  }

  // Copies Core's readiness into the health service (only changes: a Watch
  // stream gets a message per change) until Stop. `serving`: the status set last.
  void RefreshHealth(bool serving) {
    std::unique_lock<std::mutex> lock(health_mu_);
    while (!health_cv_.wait_for(lock, kHealthRefresh, [this] { return health_stop_; })) {
      const bool now = core_->Ready();
      if (now != serving) {
        serving = now;
        SetServing(serving);
      }
    }
  }

  Core* core_;
  InferenceService service_;
  std::unique_ptr<::grpc::Server> server_;
  ::grpc::HealthCheckServiceInterface* health_ = nullptr;  //!< owned by server_
  std::thread health_thread_;
  std::mutex health_mu_;
  std::condition_variable health_cv_;
  bool health_stop_ = false;
  int port_ = 0;
  std::mutex stop_mu_;
};

}  // namespace

Result<std::unique_ptr<GrpcServer>> GrpcServer::Start(Core* core, const GrpcOptions& options) {
  if (core == nullptr) return InvalidArgument("GrpcServer::Start: core is null");
  auto server = std::make_unique<GrpcServerImpl>(core, options);
  SP_RETURN_IF_ERROR(server->Init(options));
  return std::unique_ptr<GrpcServer>(std::move(server));
}

}  // namespace sampan::server
