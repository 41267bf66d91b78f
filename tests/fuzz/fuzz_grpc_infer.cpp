// A KServe v2 gRPC ModelInferRequest as the gRPC front end receives it: the
// protobuf bytes parsed, then InferRequestFromProto with the system
// shared-memory extension on; for a request it accepts, every input holds
// exactly its datatype's and shape's bytes, and a response echoing the inputs
// converts back.
#include "fuzz_util.h"
#include "proto_mutator.h"
#include "server/grpc/grpc_convert.h"
#include "shm_fixture.h"

using namespace sampan;

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return fuzz::MutateSerialized<inference::ModelInferRequest>(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto msg = std::make_shared<inference::ModelInferRequest>();
  if (!msg->ParseFromArray(data, static_cast<int>(size))) return 0;  // not protobuf: gRPC refuses it before us
  std::vector<server::SharedMemoryOutput> shm_outputs;
  auto request = server::InferRequestFromProto(msg, fuzz::FuzzSharedMemory(), &shm_outputs);
  if (!request.ok()) {
    fuzz::ExpectExplained(request.status(), "InferRequestFromProto");
    return 0;
  }
  fuzz::Reached("accepted");
  server::InferResponse response;
  response.model_name = request->model_name;
  for (const server::InferTensor& in : request->inputs) {
    fuzz::CheckAcceptedInput(in);
    response.outputs.push_back(in);
  }
  inference::ModelInferResponse out;
  fuzz::ExpectExplained(server::InferResponseToProto(response, &out, shm_outputs), "InferResponseToProto");
  return 0;
}
