// A small KServe v2 client (HTTP with the binary-tensor extension, and gRPC):
// what `sampan perf` drives servers with, and what C++ tests can use. It
// speaks only the public protocol, so it works against any KServe v2 server
// (Sampan, Triton).
//
// A Client is one connection and is not thread-safe: load generators make one
// per worker. Requests are prepared once (serialized) and sent many times, so
// the client adds as little as possible to what it measures.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace sampan::client {

struct TensorSpec {
  std::string name;
  std::string datatype;        //!< KServe name: "FP32", "INT64", ...
  std::vector<int64_t> shape;  //!< -1 for variable dims
};

struct ModelInfo {
  std::string name;
  std::vector<std::string> versions;
  std::string platform;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  int64_t max_batch_size = 0;       //!< from the model config; 0 = no batch dimension
  bool sequence = false;            //!< the config has sequence_batching (requests need a sequence ID)
  bool string_sequence_id = false;  //!< its CORRID control takes string IDs (TYPE_STRING)
};

//! A request's place in a sequence (a sequence model's requests: sequence_id, sequence_start,
//! sequence_end parameters).
struct SequenceStep {
  uint64_t id = 0;            //!< the correlation ID (nonzero)
  bool id_is_string = false;  //!< send the ID as its decimal string (models with string IDs)
  bool start = false, end = false;
};

//! One input of a request: raw little-endian row-major bytes.
struct InputData {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::string bytes;
  //! Set to send the tensor through a registered system shared-memory region instead.
  std::string shm_region;
  uint64_t shm_offset = 0;
  uint64_t shm_byte_size = 0;
};

struct OutputData {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::string bytes;
};

//! Cumulative server-side statistics of one model version (statistics extension).
struct ModelStats {
  uint64_t inference_count = 0;
  uint64_t execution_count = 0;
  uint64_t success_count = 0, success_ns = 0;
  uint64_t fail_count = 0, fail_ns = 0;
  uint64_t queue_count = 0, queue_ns = 0;
  uint64_t compute_input_count = 0, compute_input_ns = 0;
  uint64_t compute_infer_count = 0, compute_infer_ns = 0;
  uint64_t compute_output_count = 0, compute_output_ns = 0;
};

//! A request serialized once, sent many times.
class PreparedRequest {
 public:
  virtual ~PreparedRequest() = default;
};

class Client {
 public:
  virtual ~Client() = default;
  virtual Result<bool> ServerReady() = 0;
  virtual Result<ModelInfo> GetModel(const std::string& name, const std::string& version) = 0;
  //! Sums the statistics of every version reported (or the one asked for).
  virtual Result<ModelStats> GetStats(const std::string& name, const std::string& version) = 0;
  virtual Result<std::unique_ptr<PreparedRequest>> Prepare(const std::string& model, const std::string& version,
                                                           const std::vector<InputData>& inputs,
                                                           const std::vector<std::string>& outputs) = 0;
  //! Sends a prepared request; outputs are parsed only when `outputs` is not null.
  //! A server error comes back as a Status carrying the server's message.
  virtual Status Infer(const PreparedRequest& request, std::vector<OutputData>* outputs) = 0;
  //! Infer as one step of a sequence: the prepared request with the step's sequence parameters.
  virtual Status InferStep(const PreparedRequest& request, const SequenceStep& step,
                           std::vector<OutputData>* outputs) = 0;
  //! System shared-memory extension.
  virtual Status RegisterSystemSharedMemory(const std::string& name, const std::string& key, uint64_t byte_size,
                                            uint64_t offset) = 0;
  virtual Status UnregisterSystemSharedMemory(const std::string& name) = 0;
};

//! "host:port" -> host, port (default port when absent).
Status ParseHostPort(const std::string& url, int default_port, std::string* host, int* port);

Result<std::unique_ptr<Client>> MakeHttpClient(const std::string& host, int port);
Result<std::unique_ptr<Client>> MakeGrpcClient(const std::string& host, int port);

//! Bytes per element of a KServe datatype (0 for BYTES/unknown).
size_t DatatypeSize(const std::string& datatype);

}  // namespace sampan::client
