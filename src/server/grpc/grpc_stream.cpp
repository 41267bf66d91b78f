#include "server/grpc/grpc_stream.h"

#include <utility>
#include <vector>

#include "base/tensor_rows.h"
#include "server/grpc/grpc_convert.h"

namespace sampan::server {

namespace {

// Clients of decoupled models ask for a marker on each request's last
// response. A model that is not decoupled answers each request exactly once, so
// the one response is the final one; a decoupled model's rows are each a
// response, followed by an empty one that carries the marker.
constexpr const char* kWantFinalFlag = "triton_enable_empty_final_response";
constexpr const char* kFinalFlag = "triton_final_response";

bool WantsFinalFlag(const inference::ModelInferRequest& req) {
  auto it = req.parameters().find(kWantFinalFlag);
  return it != req.parameters().end() && it->second.bool_param();
}

void MarkFinal(const inference::ModelInferRequest& req, inference::ModelInferResponse* out) {
  if (WantsFinalFlag(req)) (*out->mutable_parameters())[kFinalFlag].set_bool_param(true);
}

std::unique_ptr<inference::ModelStreamInferResponse> ErrorResponse(const inference::ModelInferRequest& req,
                                                                   const Status& status) {
  auto r = std::make_unique<inference::ModelStreamInferResponse>();
  r->set_error_message(status.message());
  // The id lets a client that reads the raw stream tell which request failed.
  auto* ir = r->mutable_infer_response();
  ir->set_model_name(req.model_name());
  ir->set_model_version(req.model_version());
  ir->set_id(req.id());
  MarkFinal(req, ir);
  return r;
}

// A decoupled model's answer as its responses: row k of every output (leading dimension 1
// kept) in response k; then, when the client asked for it, an empty final response.
Result<std::vector<std::unique_ptr<inference::ModelStreamInferResponse>>> DecoupledResponses(
    const inference::ModelInferRequest& req, const InferResponse& answer, const std::vector<SharedMemoryOutput>& shm) {
  if (!shm.empty())
    return InvalidArgument("model '", answer.model_name,
                           "' is decoupled: its outputs stream as responses and cannot "
                           "be written to shared memory");
  int64_t rows = 0;
  for (size_t i = 0; i < answer.outputs.size(); ++i) {
    const InferTensor& t = answer.outputs[i];
    if (t.shape.empty())
      return Internal("model '", answer.model_name, "': decoupled output '", t.name, "' is a scalar");
    if (i == 0) rows = t.shape[0];
    if (t.shape[0] != rows)
      return Internal("model '", answer.model_name, "': decoupled outputs '", answer.outputs[0].name, "' and '", t.name,
                      "' have ", rows, " and ", t.shape[0], " rows");
  }
  std::vector<std::unique_ptr<inference::ModelStreamInferResponse>> out;
  const bool final_flag = WantsFinalFlag(req);
  for (int64_t k = 0; k < rows; ++k) {
    InferResponse part;
    part.model_name = answer.model_name;
    part.model_version = answer.model_version;
    part.id = answer.id;
    part.parameters = answer.parameters;
    for (const InferTensor& t : answer.outputs) {
      InferTensor row{t.name, t.dtype, t.shape, RowSlice(t.data, k, 1)};
      row.shape[0] = 1;
      part.outputs.push_back(std::move(row));
    }
    auto r = std::make_unique<inference::ModelStreamInferResponse>();
    SP_RETURN_IF_ERROR(InferResponseToProto(part, r->mutable_infer_response(), {}));
    if (final_flag) (*r->mutable_infer_response()->mutable_parameters())[kFinalFlag].set_bool_param(false);
    out.push_back(std::move(r));
  }
  if (final_flag) {
    auto r = std::make_unique<inference::ModelStreamInferResponse>();
    auto* ir = r->mutable_infer_response();
    ir->set_model_name(answer.model_name);
    ir->set_model_version(answer.model_version);
    ir->set_id(answer.id);
    (*ir->mutable_parameters())[kFinalFlag].set_bool_param(true);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

void StreamRegistry::StopAll() {
  std::vector<StreamInferReactor*> idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // A reactor's OnDone waits on mu_ to remove itself, so none is deleted
    // while this loop holds it.
    for (StreamInferReactor* r : open_) {
      if (r->Stop()) idle.push_back(r);
    }
  }
  // Outside mu_ (Finish may lead to OnDone, which takes it). An idle reactor
  // stays alive until its Finish: it has no other way to reach OnDone.
  for (StreamInferReactor* r : idle)
    r->Finish(::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
}

bool StreamRegistry::Add(StreamInferReactor* r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return false;
  open_.insert(r);
  return true;
}

void StreamRegistry::Remove(StreamInferReactor* r) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(r);
}

StreamInferReactor::StreamInferReactor(Core* core, StreamRegistry* registry, const SharedMemoryRegistry* shm,
                                       PeerRateLimiter* limiter, std::string peer)
    : core_(core), registry_(registry), shm_(shm), limiter_(limiter), peer_(std::move(peer)) {
  if (!registry_->Add(this)) {
    registry_ = nullptr;
    Finish(::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
    return;
  }
  StartNextRead();
}

bool StreamInferReactor::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  reads_done_ = true;  // the pending read ends (ok=false) when the stream finishes
  return TakeFinishLocked();
}

void StreamInferReactor::StartNextRead() {
  next_ = std::make_shared<inference::ModelInferRequest>();
  StartRead(next_.get());
}

void StreamInferReactor::OnReadDone(bool ok) {
  if (!ok) {  // half-close by the client, or the stream broke (or is finishing)
    bool finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads_done_ = true;
      finish = TakeFinishLocked();
    }
    if (finish) Finish(FinalStatus());
    return;
  }
  const auto received = std::chrono::steady_clock::now();
  std::shared_ptr<inference::ModelInferRequest> msg = std::move(next_);
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Stop() ends reads while one may still be pending: a message that arrives after
    // the stream began to finish gets no answer (a write after Finish breaks the
    // reactor contract; with nothing written yet gRPC aborts on the second
    // SEND_INITIAL_METADATA).
    if (finishing_) return;
    ++in_flight_;  // before the next read, so a half-close cannot finish the stream under us
    stopping = stopping_;
  }
  if (stopping) {  // read before the server began to stop: answered, and no more reads
    Send(ErrorResponse(*msg, Unavailable("the server is shutting down")));
    return;
  }
  // The next message's OnReadDone waits on order_mu_ until this request is queued
  // (Core::Infer does not wait for the inference): requests keep the stream's order.
  std::lock_guard<std::mutex> order(order_mu_);
  StartNextRead();
  if (limiter_ != nullptr && !limiter_->Admit(peer_)) {  // this request only: the stream stays open
    Send(ErrorResponse(*msg, Unavailable(RateLimitMessage(limiter_->rate()))));
    return;
  }

  std::vector<SharedMemoryOutput> shm_outputs;
  Result<InferRequest> request = InferRequestFromProto(msg, shm_, &shm_outputs);
  if (!request.ok()) {
    Send(ErrorResponse(*msg, request.status()));
    return;
  }
  request->parameters.erase(kWantFinalFlag);  // a stream protocol matter, not the model's
  request->cancelled = cancelled_;
  request->received = received;
  request->protocol = "grpc-stream";
  // A streamed answer is traced until it is queued for writing (GRPC_SEND_START).
  std::shared_ptr<RequestTrace> trace = core_->tracer().Sample(request->model_name, request->id, "grpc-stream");
  if (trace) {
    trace->Record("GRPC_WAITREAD_END", received);
    request->trace = trace;
  }
  core_->Infer(std::move(request).value(),
               [this, msg, shm_outputs = std::move(shm_outputs), trace](Result<InferResponse> result) {
                 if (trace) {
                   trace->Record("GRPC_SEND_START", std::chrono::steady_clock::now());
                   trace->Complete();
                 }
                 if (!result.ok()) {
                   Send(ErrorResponse(*msg, result.status()));
                   return;
                 }
                 if (result->decoupled) {
                   auto parts = DecoupledResponses(*msg, *result, shm_outputs);
                   if (!parts.ok()) {
                     Send(ErrorResponse(*msg, parts.status()));
                     return;
                   }
                   SendAll(std::move(parts).value());
                   return;
                 }
                 auto r = std::make_unique<inference::ModelStreamInferResponse>();
                 if (Status s = InferResponseToProto(*result, r->mutable_infer_response(), shm_outputs); !s.ok()) {
                   Send(ErrorResponse(*msg, s));
                   return;
                 }
                 MarkFinal(*msg, r->mutable_infer_response());
                 Send(std::move(r));
               });
}

void StreamInferReactor::Send(std::unique_ptr<inference::ModelStreamInferResponse> response) {
  std::vector<std::unique_ptr<inference::ModelStreamInferResponse>> one;
  one.push_back(std::move(response));
  SendAll(std::move(one));
}

void StreamInferReactor::SendAll(std::vector<std::unique_ptr<inference::ModelStreamInferResponse>> responses) {
  const inference::ModelStreamInferResponse* to_write = nullptr;
  bool finish = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    if (!broken_ && !responses.empty()) {
      for (auto& r : responses) writes_.push_back(std::move(r));
      if (!writing_) {
        writing_ = true;
        to_write = writes_.front().get();
      }
    }
    if (to_write == nullptr) finish = TakeFinishLocked();
  }
  // Outside the lock: gRPC may run reactions inline, and after Finish `this`
  // may be gone at any moment.
  if (to_write != nullptr) StartWrite(to_write);
  if (finish) Finish(FinalStatus());
}

void StreamInferReactor::OnWriteDone(bool ok) {
  const inference::ModelStreamInferResponse* to_write = nullptr;
  bool finish = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writes_.pop_front();
    if (!ok) {
      // The client is gone: stop writing, let Core drop what has not run.
      broken_ = true;
      writes_.clear();
      cancelled_->store(true);
    }
    if (!broken_ && !writes_.empty()) {
      to_write = writes_.front().get();
    } else {
      writing_ = false;
      finish = TakeFinishLocked();
    }
  }
  if (to_write != nullptr) StartWrite(to_write);
  if (finish) Finish(FinalStatus());
}

bool StreamInferReactor::TakeFinishLocked() {
  if (finishing_ || !reads_done_ || in_flight_ > 0 || writing_) return false;
  finishing_ = true;
  return true;
}

void StreamInferReactor::OnCancel() {
  cancelled_->store(true);
}

::grpc::Status StreamInferReactor::FinalStatus() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_ ? ::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "the server is shutting down")
                   : ::grpc::Status::OK;
}

void StreamInferReactor::OnDone() {
  if (registry_ != nullptr) registry_->Remove(this);
  delete this;
}

}  // namespace sampan::server
