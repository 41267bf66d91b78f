// The gRPC peer of bench/frontend/run.sh: the least a KServe v2 gRPC server can do for the
// benchmark's model (add16: INPUT0 -> OUTPUT0, FP32 [batch, 16]). It answers ModelInfer with
// a fixed response of the size Sampan's has (OUTPUT0, [1, 16], 64 raw bytes) without looking
// at the inputs, and ModelMetadata/ModelConfig as Sampan does, so that `sampan perf -i grpc`
// drives both the same way. Same gRPC (the Debian 1.51 the build uses), same callback API and
// the same message allocator idea as src/server/grpc: the difference is Sampan's own work.
//
//   sampan_grpc_echo [PORT]     (0 or none: any free port; prints "gRPC 127.0.0.1:PORT")
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "grpc_service.grpc.pb.h"

namespace {

using ::grpc::CallbackServerContext;
using ::grpc::ServerUnaryReactor;

ServerUnaryReactor* Ok(CallbackServerContext* ctx) {
  ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(::grpc::Status::OK);
  return r;
}

class EchoService final : public inference::GRPCInferenceService::CallbackService {
 public:
  EchoService() {
    auto* out = reply_.add_outputs();
    reply_.set_model_name("add16");
    reply_.set_model_version("1");
    out->set_name("OUTPUT0");
    out->set_datatype("FP32");
    out->add_shape(1);
    out->add_shape(16);
    reply_.add_raw_output_contents(std::string(64, '\0'));
  }

  ServerUnaryReactor* ServerLive(CallbackServerContext* ctx, const inference::ServerLiveRequest*,
                                 inference::ServerLiveResponse* res) override {
    res->set_live(true);
    return Ok(ctx);
  }
  ServerUnaryReactor* ServerReady(CallbackServerContext* ctx, const inference::ServerReadyRequest*,
                                  inference::ServerReadyResponse* res) override {
    res->set_ready(true);
    return Ok(ctx);
  }
  ServerUnaryReactor* ModelMetadata(CallbackServerContext* ctx, const inference::ModelMetadataRequest*,
                                    inference::ModelMetadataResponse* res) override {
    res->set_name("add16");
    res->set_platform("onnxruntime_onnx");
    res->add_versions("1");
    for (auto* t : {res->add_inputs(), res->add_outputs()}) {
      t->set_datatype("FP32");
      t->add_shape(-1);
      t->add_shape(16);
    }
    res->mutable_inputs(0)->set_name("INPUT0");
    res->mutable_outputs(0)->set_name("OUTPUT0");
    return Ok(ctx);
  }
  ServerUnaryReactor* ModelConfig(CallbackServerContext* ctx, const inference::ModelConfigRequest*,
                                  inference::ModelConfigResponse* res) override {
    res->mutable_config()->set_name("add16");
    res->mutable_config()->set_max_batch_size(64);
    return Ok(ctx);
  }
  ServerUnaryReactor* ModelInfer(CallbackServerContext* ctx, const inference::ModelInferRequest* req,
                                 inference::ModelInferResponse* res) override {
    *res = reply_;
    res->set_id(req->id());
    return Ok(ctx);
  }

 private:
  inference::ModelInferResponse reply_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string port = argc > 1 ? argv[1] : "0";
  EchoService service;
  ::grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort("127.0.0.1:" + port, ::grpc::InsecureServerCredentials(), &bound);
  builder.SetMaxReceiveMessageSize(-1);
  builder.RegisterService(&service);
  std::unique_ptr<::grpc::Server> server = builder.BuildAndStart();
  if (!server || bound == 0) {
    std::fprintf(stderr, "sampan_grpc_echo: cannot listen on 127.0.0.1:%s\n", port.c_str());
    return 1;
  }
  std::printf("gRPC 127.0.0.1:%d\n", bound);
  std::fflush(stdout);
  server->Wait();
  return 0;
}
