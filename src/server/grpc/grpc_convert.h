// Translation between the KServe v2 gRPC messages (proto/grpc_service.proto)
// and server::Core's types. Pure functions: no network, no Core calls, so
// every protocol rule is testable on its own.
#pragma once

#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grpc_service.pb.h"
#include "server/core/core.h"

namespace sampan::server {

//! The gRPC status Triton's front end would send for `status`
//! (kInvalidArgument -> INVALID_ARGUMENT, kNotFound -> NOT_FOUND,
//! kUnavailable -> UNAVAILABLE, kUnsupported -> UNIMPLEMENTED, ...).
::grpc::Status ToGrpcStatus(const Status& status);

//! An output the client asked to be written into a shared-memory region,
//! system or CUDA (output parameters shared_memory_region / _byte_size / _offset).
struct SharedMemoryOutput {
  std::string name;  //!< the output tensor
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;  //!< room the client gave; the output must fit
  //! [offset, offset + byte_size) of the region, resolved when the request
  //! was read; its keepalive keeps the mapping (or the opened CUDA handle)
  //! valid until the response.
  SharedMemoryView view;
};

//! Builds a Core request from `msg`. Inputs sent as raw_input_contents are
//! wrapped, not copied: the returned request's keepalive holds `msg`.
//! Inputs sent as typed InferTensorContents are converted (one copy).
//! Inputs in system shared memory (parameters shared_memory_region,
//! shared_memory_byte_size, optional shared_memory_offset: int64 or uint64)
//! wrap the region's mapping, not copied; inputs in CUDA shared memory are
//! copied from the device to a host tensor. raw_input_contents then has entries
//! only for the other inputs, in order (as Triton). Outputs to be written
//! into shared memory are returned in `shm_outputs`.
//! `shm` is the server's registry, or nullptr when the extension is off
//! (tensors naming a region are then kUnsupported); `shm_outputs` must be
//! given with it.
//! Errors (kInvalidArgument / kUnsupported) name the input or output, the
//! parameter or region, and what was expected. Model-level checks (input
//! names, shapes against the model) are Core's.
Result<InferRequest> InferRequestFromProto(std::shared_ptr<const inference::ModelInferRequest> msg,
                                           const SharedMemoryRegistry* shm = nullptr,
                                           std::vector<SharedMemoryOutput>* shm_outputs = nullptr);

//! Fills `out` from `response`: one raw_output_contents entry per output, in
//! order. An output named in `shm_outputs` is copied into its region (host to
//! device for a CUDA region, on the calling thread) and gets
//! an empty raw_output_contents entry (as Triton, so entries stay aligned with
//! outputs) and parameters naming the region, its byte size and offset.
//! Error (kInvalidArgument) when such an output does not fit its region; a
//! failed device copy is kInternal.
Status InferResponseToProto(const InferResponse& response, inference::ModelInferResponse* out,
                            const std::vector<SharedMemoryOutput>& shm_outputs = {});

void ModelMetadataToProto(const ModelMetadata& metadata, inference::ModelMetadataResponse* out);
void ModelStatsToProto(const ModelStats& stats, inference::ModelStatistics* out);

//! True when a peer string of grpc::ServerContext::peer() is this machine:
//! "ipv4:127.x.x.x:port", "ipv6:[::1]:port", "ipv6:[::ffff:127.x.x.x]:port" or a Unix socket.
bool IsLoopbackPeer(std::string_view peer);

//! Checks "authorization: Bearer <token>" against `token` in constant time
//! (so the comparison does not leak how much of a guess was right).
bool BearerTokenMatches(std::string_view authorization, std::string_view token);

}  // namespace sampan::server
