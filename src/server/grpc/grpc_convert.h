// Translation between the KServe v2 gRPC messages (proto/grpc_service.proto)
// and server::Core's types. Pure functions: no network, no Core calls, so
// every protocol rule is testable on its own.
#pragma once

#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "grpc_service.pb.h"
#include "server/core/core.h"

namespace sampan::server {

//! The gRPC status Triton's front end would send for `status`
//! (kInvalidArgument -> INVALID_ARGUMENT, kNotFound -> NOT_FOUND,
//! kUnavailable -> UNAVAILABLE, kUnsupported -> UNIMPLEMENTED, ...).
::grpc::Status ToGrpcStatus(const Status& status);

//! Builds a Core request from `msg`. Inputs sent as raw_input_contents are
//! wrapped, not copied: the returned request's keepalive holds `msg`.
//! Inputs sent as typed InferTensorContents are converted (one copy).
//! Errors (kInvalidArgument / kUnsupported) name the input or parameter and
//! what was expected. Model-level checks (input names, shapes against the
//! model) are Core's.
Result<InferRequest> InferRequestFromProto(std::shared_ptr<const inference::ModelInferRequest> msg);

//! Fills `out` from `response`: one raw_output_contents entry per output, in order.
void InferResponseToProto(const InferResponse& response, inference::ModelInferResponse* out);

void ModelMetadataToProto(const ModelMetadata& metadata, inference::ModelMetadataResponse* out);
void ModelStatsToProto(const ModelStats& stats, inference::ModelStatistics* out);

//! True when a peer string of grpc::ServerContext::peer() is this machine:
//! "ipv4:127.x.x.x:port", "ipv6:[::1]:port", "ipv6:[::ffff:127.x.x.x]:port" or a Unix socket.
bool IsLoopbackPeer(std::string_view peer);

//! Checks "authorization: Bearer <token>" against `token` in constant time
//! (so the comparison does not leak how much of a guess was right).
bool BearerTokenMatches(std::string_view authorization, std::string_view token);

}  // namespace sampan::server
