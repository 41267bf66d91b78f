// KServe v2 REST front end (Boost.Beast): protocol translation only; every
// request ends in a server::Core call (docs/architecture.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/core/core.h"
#include "server/core/rate_limit.h"
#include "server/core/restricted_api.h"

namespace sampan::server {

struct HttpOptions {
  std::string address = "0.0.0.0";
  int port = 8000;                        //!< 0 = pick a free port (see HttpServer::port())
  int threads = 0;                        //!< I/O threads; 0 = 2
  uint64_t max_body_bytes = 64ull << 20;  //!< larger bodies get 400 with a message
  //! Serve only /metrics (the --metrics-port listener) instead of the KServe API.
  bool metrics_only = false;
  //! Repository load/unload (state-changing) endpoints: accepted only from
  //! loopback peers unless this is set.
  bool allow_remote_model_control = false;
  //! When set, state-changing endpoints require "Authorization: Bearer <token>".
  std::string model_control_token;
  //! Shared memory extensions (/v2/systemsharedmemory, /v2/cudasharedmemory); off unless enabled.
  bool enable_shared_memory = false;
  //! A keep-alive connection with no request for this long is closed.
  int idle_timeout_secs = 75;
  //! Once a request has started, its header and body must arrive (and later the
  //! response be taken) within this long, so slow or stuck clients cannot hold
  //! connections forever. Inference time itself is not limited by it.
  int io_timeout_secs = 60;
  //! --http-restricted-api: endpoint categories that need a header KEY: VALUE (403 otherwise).
  RestrictedApis restricted;
  //! --rate-limit-per-connection: requests per second a keep-alive connection may send (health
  //! checks aside; a burst of max(1, rate)); over it: 429 with Retry-After. 0 = no limit.
  double rate_limit_per_connection = 0;
  //! TLS (--http-use-ssl, --http-server-cert/-key; PEM files): the KServe listener speaks HTTPS
  //! only. With use_ssl_mutual, clients must present a certificate that root_cert verifies. The
  //! metrics listener stays plain HTTP (metrics_only ignores these: serve refuses them there).
  bool use_ssl = false;
  bool use_ssl_mutual = false;
  std::string server_cert, server_key, root_cert;
};

class HttpServer {
 public:
  virtual ~HttpServer() = default;
  //! Binds and starts serving on background threads. `core` must outlive the server.
  static Result<std::unique_ptr<HttpServer>> Start(Core* core, const HttpOptions& options);
  virtual int port() const = 0;
  //! Stops accepting, closes idle keep-alive connections, lets in-flight responses finish.
  virtual void Stop() = 0;
};

}  // namespace sampan::server
