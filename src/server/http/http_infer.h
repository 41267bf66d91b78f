// KServe v2 inference over REST: the request body (JSON, or JSON followed by
// raw tensors under the binary tensor data extension) to a server::InferRequest,
// and a server::InferResponse back to a body.
//
// Binary inputs are not copied: their InferTensor wraps the request body,
// which the request's `keepalive` owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/core/core.h"

namespace sampan::server::http {

//! How the client wants the outputs sent back.
struct OutputFormat {
  bool default_binary = false;  //!< request parameter binary_data_output
  //! Outputs named in the request with an explicit binary_data flag.
  std::vector<std::pair<std::string, bool>> explicit_binary;
  bool Binary(const std::string& name) const;
  //! Outputs to be written into system shared memory instead of the body.
  struct ShmTarget {
    std::string region;
    uint64_t offset = 0;
    uint64_t byte_size = 0;
  };
  std::vector<std::pair<std::string, ShmTarget>> shm;
};

//! `body[0, size)` is the request body; its first `json_size` bytes are the
//! JSON inference header (`json_size == size` without the binary extension),
//! the rest holds the binary inputs in the order they appear in "inputs".
//! `owner` keeps `body` alive; binary inputs wrap it. `model_name` and
//! `model_version` come from the URL. Errors are kInvalidArgument (or
//! kUnsupported for valid requests using features not served) and say which
//! input or field is wrong.
//! `shm` is the server's system shared-memory registry, or nullptr when the
//! extension is not enabled (requests naming a region are then kUnsupported).
Status ParseInferRequest(const char* body, size_t size, size_t json_size, std::shared_ptr<void> owner,
                         const std::string& model_name, const std::string& model_version, InferRequest* request,
                         OutputFormat* format, const SharedMemoryRegistry* shm = nullptr);

//! A response body: the JSON part, then the binary outputs in order (each a
//! contiguous tensor, sent without copying).
struct InferReply {
  std::string json;
  std::vector<Tensor> binary;
  size_t binary_bytes = 0;
};

//! Outputs with a shared-memory target are copied into their region (an error
//! when one does not fit); the others go into the body.
Result<InferReply> BuildInferReply(const InferResponse& response, const OutputFormat& format,
                                   const SharedMemoryRegistry* shm = nullptr);

}  // namespace sampan::server::http
