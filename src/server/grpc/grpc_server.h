// KServe v2 gRPC front end: inference.GRPCInferenceService (proto/grpc_service.proto),
// protocol translation only; every call ends in a server::Core call.
//
// Built on gRPC's callback API: handlers never block a gRPC thread. ModelInfer
// finishes from Core's callback (a scheduler thread); ModelStreamInfer writes
// each response as it completes, in completion order; the calls that block in
// Core (model load/unload) run on a small pool of their own (`threads`).
//
// Also serves the standard health service (grpc.health.v1.Health, for
// Kubernetes' gRPC probes): SERVING while Core::Ready(), NOT_SERVING otherwise
// and once stopping.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/core/core.h"
#include "server/core/restricted_api.h"

namespace sampan::server {

struct GrpcOptions {
  std::string address = "0.0.0.0";
  int port = 8001;  //!< 0 = pick a free port (see GrpcServer::port())
  int threads = 0;  //!< threads running blocking repository calls (load/unload); 0 = 2
  uint64_t max_message_bytes = 64ull << 20;
  bool allow_remote_model_control = false;  //!< as HttpOptions
  std::string model_control_token;          //!< "authorization: Bearer <token>" metadata
  //! Serve the system and CUDA shared-memory extensions (the registry is Core's,
  //! shared with HTTP); off: their RPCs and tensors naming a region are UNIMPLEMENTED.
  bool enable_shared_memory = false;
  //! --grpc-restricted-protocol: call categories that need "triton-grpc-protocol-KEY: VALUE"
  //! metadata (UNAVAILABLE otherwise, as Triton).
  RestrictedApis restricted;
  //! TLS (Triton's --grpc-use-ssl, --grpc-server-cert/-key, --grpc-root-cert): PEM files. With
  //! use_ssl_mutual, clients must present a certificate that root_cert verifies.
  //! --rate-limit-per-connection: requests per second one client connection (peer) may send,
  //! health calls aside; over it: RESOURCE_EXHAUSTED (a stream's request: an error response). 0 = off.
  double rate_limit_per_connection = 0;
  bool use_ssl = false;
  bool use_ssl_mutual = false;
  std::string server_cert, server_key, root_cert;
};

class GrpcServer {
 public:
  virtual ~GrpcServer() = default;
  //! Binds and starts serving. `core` must outlive the server. Fails (kIoError)
  //! when the address cannot be bound.
  static Result<std::unique_ptr<GrpcServer>> Start(Core* core, const GrpcOptions& options);
  virtual int port() const = 0;
  //! Stops accepting calls and waits for in-flight ones (which Core completes
  //! or cancels); idempotent, also done by the destructor.
  virtual void Stop() = 0;
};

}  // namespace sampan::server
