// KServe v2 over gRPC (inference.GRPCInferenceService, proto/grpc_service.proto):
// one channel per client, synchronous unary calls, raw_input_contents (or,
// for inputs in a registered system shared-memory region, the region's name,
// offset and size as tensor parameters, as tritonclient sends them).
#include <grpcpp/grpcpp.h>

#include "client/client.h"
#include "grpc_service.grpc.pb.h"

namespace sampan::client {

namespace {

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  const std::string msg = StrCat(what, ": ", s.error_message());
  switch (s.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
      return NotFound(msg);
    case grpc::StatusCode::INVALID_ARGUMENT:
      return InvalidArgument(msg);
    case grpc::StatusCode::UNAVAILABLE:
      return Unavailable(msg);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return DeadlineExceeded(msg);
    case grpc::StatusCode::CANCELLED:
      return Cancelled(msg);
    case grpc::StatusCode::UNIMPLEMENTED:
      return Unsupported(msg);
    default:
      return Internal(msg);
  }
}

class GrpcPrepared : public PreparedRequest {
 public:
  inference::ModelInferRequest request;
};

class GrpcClient : public Client {
 public:
  GrpcClient(const std::string& host, int port) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    // Each client is its own connection (load generators make one per worker).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(StrCat(host, ":", port), grpc::InsecureChannelCredentials(), args);
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
    target_ = StrCat(host, ":", port);
  }

  Status Connect() {
    if (!channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5)))
      return Unavailable("cannot connect to gRPC server at ", target_);
    return Status::Ok();
  }

  Result<bool> ServerReady() override {
    grpc::ClientContext ctx;
    inference::ServerReadyRequest req;
    inference::ServerReadyResponse res;
    SP_RETURN_IF_ERROR(FromGrpc(stub_->ServerReady(&ctx, req, &res), "ServerReady"));
    return res.ready();
  }

  Result<ModelInfo> GetModel(const std::string& name, const std::string& version) override {
    ModelInfo info;
    {
      grpc::ClientContext ctx;
      inference::ModelMetadataRequest req;
      req.set_name(name);
      req.set_version(version);
      inference::ModelMetadataResponse res;
      SP_RETURN_IF_ERROR(FromGrpc(stub_->ModelMetadata(&ctx, req, &res), "model metadata"));
      info.name = res.name();
      info.platform = res.platform();
      info.versions.assign(res.versions().begin(), res.versions().end());
      for (const auto& t : res.inputs())
        info.inputs.push_back({t.name(), t.datatype(), std::vector<int64_t>(t.shape().begin(), t.shape().end())});
      for (const auto& t : res.outputs())
        info.outputs.push_back({t.name(), t.datatype(), std::vector<int64_t>(t.shape().begin(), t.shape().end())});
    }
    grpc::ClientContext ctx;
    inference::ModelConfigRequest req;
    req.set_name(name);
    req.set_version(version);
    inference::ModelConfigResponse res;
    if (stub_->ModelConfig(&ctx, req, &res).ok()) {
      info.max_batch_size = res.config().max_batch_size();
      info.sequence = res.config().has_sequence_batching();
      for (const auto& ci : res.config().sequence_batching().control_input())
        for (const auto& ctl : ci.control())
          if (ctl.kind() == serverconfig::ModelSequenceBatching::Control::CONTROL_SEQUENCE_CORRID &&
              ctl.data_type() == serverconfig::TYPE_STRING)
            info.string_sequence_id = true;
    }
    return info;
  }

  Result<ModelStats> GetStats(const std::string& name, const std::string& version) override {
    grpc::ClientContext ctx;
    inference::ModelStatisticsRequest req;
    req.set_name(name);
    req.set_version(version);
    inference::ModelStatisticsResponse res;
    SP_RETURN_IF_ERROR(FromGrpc(stub_->ModelStatistics(&ctx, req, &res), "model statistics"));
    ModelStats s;
    for (const auto& m : res.model_stats()) {
      s.inference_count += m.inference_count();
      s.execution_count += m.execution_count();
      const auto& is = m.inference_stats();
      s.success_count += is.success().count();
      s.success_ns += is.success().ns();
      s.fail_count += is.fail().count();
      s.fail_ns += is.fail().ns();
      s.queue_count += is.queue().count();
      s.queue_ns += is.queue().ns();
      s.compute_input_count += is.compute_input().count();
      s.compute_input_ns += is.compute_input().ns();
      s.compute_infer_count += is.compute_infer().count();
      s.compute_infer_ns += is.compute_infer().ns();
      s.compute_output_count += is.compute_output().count();
      s.compute_output_ns += is.compute_output().ns();
    }
    return s;
  }

  Result<std::unique_ptr<PreparedRequest>> Prepare(const std::string& model, const std::string& version,
                                                   const std::vector<InputData>& inputs,
                                                   const std::vector<std::string>& outputs) override {
    auto p = std::make_unique<GrpcPrepared>();
    p->request.set_model_name(model);
    p->request.set_model_version(version);
    for (const auto& in : inputs) {
      auto* t = p->request.add_inputs();
      t->set_name(in.name);
      t->set_datatype(in.datatype);
      for (int64_t d : in.shape) t->add_shape(d);
      if (in.shm_region.empty()) {
        p->request.add_raw_input_contents(in.bytes);
        continue;
      }
      // In shared memory: no raw_input_contents entry for this input.
      auto& params = *t->mutable_parameters();
      params["shared_memory_region"].set_string_param(in.shm_region);
      params["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(in.shm_byte_size));
      if (in.shm_offset != 0) params["shared_memory_offset"].set_int64_param(static_cast<int64_t>(in.shm_offset));
    }
    for (const auto& o : outputs) p->request.add_outputs()->set_name(o);
    return std::unique_ptr<PreparedRequest>(std::move(p));
  }

  Status Infer(const PreparedRequest& request, std::vector<OutputData>* outputs) override {
    return Send(static_cast<const GrpcPrepared&>(request).request, outputs);
  }

  Status InferStep(const PreparedRequest& request, const SequenceStep& step,
                   std::vector<OutputData>* outputs) override {
    inference::ModelInferRequest r = static_cast<const GrpcPrepared&>(request).request;
    auto& params = *r.mutable_parameters();
    // As tritonclient sends them: a number as int64_param, a string ID as string_param.
    if (step.id_is_string)
      params["sequence_id"].set_string_param(std::to_string(step.id));
    else
      params["sequence_id"].set_int64_param(static_cast<int64_t>(step.id));
    params["sequence_start"].set_bool_param(step.start);
    params["sequence_end"].set_bool_param(step.end);
    return Send(r, outputs);
  }

  Status Send(const inference::ModelInferRequest& request, std::vector<OutputData>* outputs) {
    grpc::ClientContext ctx;
    inference::ModelInferResponse res;
    SP_RETURN_IF_ERROR(FromGrpc(stub_->ModelInfer(&ctx, request, &res), "infer"));
    if (!outputs) return Status::Ok();
    outputs->clear();
    for (int i = 0; i < res.outputs_size(); ++i) {
      const auto& o = res.outputs(i);
      OutputData out;
      out.name = o.name();
      out.datatype = o.datatype();
      out.shape.assign(o.shape().begin(), o.shape().end());
      if (i < res.raw_output_contents_size()) out.bytes = res.raw_output_contents(i);
      outputs->push_back(std::move(out));
    }
    return Status::Ok();
  }

  Status RegisterSystemSharedMemory(const std::string& name, const std::string& key, uint64_t byte_size,
                                    uint64_t offset) override {
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name(name);
    req.set_key(key);
    req.set_offset(offset);
    req.set_byte_size(byte_size);
    inference::SystemSharedMemoryRegisterResponse res;
    return FromGrpc(stub_->SystemSharedMemoryRegister(&ctx, req, &res),
                    StrCat("register system shared memory '", name, "'"));
  }
  Status UnregisterSystemSharedMemory(const std::string& name) override {
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryUnregisterRequest req;
    req.set_name(name);
    inference::SystemSharedMemoryUnregisterResponse res;
    return FromGrpc(stub_->SystemSharedMemoryUnregister(&ctx, req, &res),
                    StrCat("unregister system shared memory '", name, "'"));
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::string target_;
};

}  // namespace

Result<std::unique_ptr<Client>> MakeGrpcClient(const std::string& host, int port) {
  auto c = std::make_unique<GrpcClient>(host, port);
  SP_RETURN_IF_ERROR(c->Connect());
  return std::unique_ptr<Client>(std::move(c));
}

}  // namespace sampan::client
