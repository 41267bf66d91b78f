// A KServe v2 HTTP inference request body (JSON header plus the binary-tensor
// extension), as the HTTP front end receives it: ParseInferRequest with the
// system shared-memory extension on; for a request it accepts, every input
// holds exactly the bytes its datatype and shape need, and a reply echoing the
// inputs as outputs builds in the format the request asked for.
//
// Input layout: the first 4 bytes (little-endian) give the JSON header's
// length (the Inference-Header-Content-Length header), clamped to the body;
// the rest is the body. Under 4 bytes: all JSON.
#include <cstring>

#include "fuzz_util.h"
#include "server/http/http_infer.h"
#include "shm_fixture.h"

using namespace sampan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t json_size;
  std::string body;
  if (size < 4) {
    body.assign(reinterpret_cast<const char*>(data), size);
    json_size = size;
  } else {
    uint32_t n;
    std::memcpy(&n, data, 4);
    body.assign(reinterpret_cast<const char*>(data) + 4, size - 4);
    json_size = std::min<size_t>(n, body.size());
  }
  auto owner = std::make_shared<std::string>(std::move(body));
  server::InferRequest request;
  server::http::OutputFormat format;
  const Status s = server::http::ParseInferRequest(owner->data(), owner->size(), json_size, owner, "m", "", &request,
                                                   &format, fuzz::FuzzSharedMemory());
  if (!s.ok()) {
    fuzz::ExpectExplained(s, "ParseInferRequest");
    return 0;
  }
  fuzz::Reached("accepted");
  server::InferResponse response;
  response.model_name = "m";
  response.id = request.id;
  for (const server::InferTensor& in : request.inputs) {
    fuzz::CheckAcceptedInput(in);
    response.outputs.push_back(in);
  }
  auto reply = server::http::BuildInferReply(response, format, fuzz::FuzzSharedMemory());
  if (!reply.ok()) fuzz::ExpectExplained(reply.status(), "BuildInferReply");
  return 0;
}
