// The REST front end's transport: the listener, and each connection's HTTP/1.1 framing
// (Boost.Beast) over plain TCP or TLS (--http-use-ssl, OpenSSL through Boost.Asio). Routing is
// http_routes.cpp's; http_session.h shows how the two meet.
#include "server/http/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <type_traits>

#include "server/core/log.h"
#include "server/core/tls_files.h"
#include "server/http/http_session.h"

namespace sampan::server {
namespace {

using namespace http;  // NOLINT: this file is the http front end's own

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// One connection. Stream is beast::tcp_stream or TlsStream; everything that differs between the
// two is behind `kTls`.
template <class Stream>
class Session final : public SessionBase {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  template <class... Extra>
  Session(std::shared_ptr<ServerState> server, net::io_context& ioc, bool loopback_peer, tcp::socket socket,
          Extra&... extra)
      : SessionBase(std::move(server), ioc, loopback_peer), stream_(std::move(socket), extra...) {}

  void Run() override {
    net::dispatch(stream_.get_executor(), [self = Self()] {
      if constexpr (kTls) {
        self->Handshake();
      } else {
        self->ReadHeader();
      }
    });
  }

  net::any_io_executor Executor() override { return stream_.get_executor(); }

  void StopIfIdle() override {
    if (!busy_) Close();
  }

 private:
  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }

  // ---- TLS ------------------------------------------------------------------

  // A client that does not finish its handshake in time, speaks plain HTTP, trusts another CA or
  // (mutual TLS) shows no certificate or one the root does not sign is dropped; the server goes on.
  void Handshake() {
    Tcp().expires_after(std::chrono::seconds(server_->options.io_timeout_secs));
    stream_.async_handshake(net::ssl::stream_base::server, [self = Self()](beast::error_code ec) {
      if (ec) {
        beast::error_code ignored;
        const auto peer = self->Tcp().socket().remote_endpoint(ignored);
        LogVerbose(1, "HTTP: TLS handshake with ", peer.address().to_string(), ":", peer.port(),
                   " failed: ", ec.message());
        return self->Close();
      }
      self->ReadHeader();
    });
  }

  // ---- Framing --------------------------------------------------------------

  void ReadHeader() {
    busy_ = false;
    if (server_->stopping) return Close();
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(server_->options.max_body_bytes);
    // Pipelined bytes already buffered mean a request has started: the I/O timeout applies.
    Tcp().expires_after(
        std::chrono::seconds(buffer_.size() ? server_->options.io_timeout_secs : server_->options.idle_timeout_secs));
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = Self()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    busy_ = true;
    received_ = std::chrono::steady_clock::now();
    Tcp().expires_after(std::chrono::seconds(server_->options.io_timeout_secs));  // for the body
    const auto& header = parser_->get();
    keep_alive_ = header.keep_alive();
    if (auto length = parser_->content_length(); length && *length > server_->options.max_body_bytes) {
      return RespondTooLarge(*length);
    }
    if (auto it = header.find(bhttp::field::content_encoding);
        it != header.end() && !beast::iequals(it->value(), "identity")) {
      keep_alive_ = false;  // the body stays unread: this connection cannot carry another request
      unread_input_ = true;
      return RespondError(bhttp::status::bad_request,
                          StrCat("unsupported Content-Encoding '", it->value(), "': send the body uncompressed"));
    }
    if (auto it = header.find(bhttp::field::expect); it != header.end()) {
      if (!beast::iequals(it->value(), "100-continue")) {
        keep_alive_ = false;
        unread_input_ = true;
        return RespondError(bhttp::status::expectation_failed, StrCat("unsupported Expect '", it->value(), "'"));
      }
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      return net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                              [self = Self()](beast::error_code ec, size_t) {
                                if (ec) return self->Close();
                                self->ReadBody();
                              });
    }
    ReadBody();
  }

  void ReadBody() {
    bhttp::async_read(stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
      if (ec) return self->OnReadError(ec);
      self->Tcp().expires_never();  // inference takes what it takes
      self->Route();
    });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || ec == beast::error::timeout || ec == net::ssl::error::stream_truncated ||
        !Tcp().socket().is_open())
      return Close();
    keep_alive_ = false;
    busy_ = true;
    unread_input_ = true;
    if (ec == bhttp::error::body_limit) {
      // Beast stops at the Content-Length field, before the header is done.
      uint64_t length = 0;
      const auto& fields = parser_->get();
      if (auto it = fields.find(bhttp::field::content_length);
          it != fields.end() && ParseSize(std::string_view(it->value().data(), it->value().size()), &length))
        return RespondTooLarge(length);
      return RespondError(bhttp::status::bad_request, StrCat("request body exceeds the server's limit of ",
                                                             server_->options.max_body_bytes, " bytes"));
    }
    if (ec == bhttp::error::header_limit)
      return RespondError(bhttp::status::request_header_fields_too_large,
                          StrCat("request header exceeds ", kHeaderLimit, " bytes"));
    if (ec == bhttp::error::partial_message) return Close();              // the peer hung up mid-request
    if (ec.category() == net::error::get_ssl_category()) return Close();  // a broken TLS record: nothing to answer
    RespondError(bhttp::status::bad_request, StrCat("malformed HTTP request: ", ec.message()));
  }

  void Write() override {
    ++generation_;  // any disconnect watch still pending belongs to the finished request
    res_.keep_alive(keep_alive_ && !server_->stopping);
    res_.prepare_payload();
    Tcp().expires_after(std::chrono::seconds(server_->options.io_timeout_secs));
    bhttp::async_write(stream_, res_, [self = Self()](beast::error_code ec, size_t) {
      self->CompleteTrace();
      if (ec) return self->Close();
      const bool keep = self->res_.keep_alive();
      self->res_ = {};
      if (!keep) return self->CloseGracefully();
      self->ReadHeader();
    });
  }

  // When the peer may still be sending (an oversized body we did not read, pipelined requests),
  // reads and drops that until it closes or the drain times out: closing with unread input would
  // reset the connection and could destroy our answer before the peer reads it. Plain TCP
  // half-closes first; TLS sends its close_notify (and waits for the peer's, bounded) when
  // nothing is left unread.
  void CloseGracefully() {
    beast::error_code ignored;
    const size_t available = Tcp().socket().available(ignored);
    const bool unread = unread_input_ || buffer_.size() != 0 || available != 0;
    Tcp().expires_after(kDrainTimeout);
    if constexpr (kTls) {
      if (unread) return Drain();
      stream_.async_shutdown([self = Self()](beast::error_code) { self->Close(); });
    } else {
      Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
      if (!unread) return Close();
      Drain();
    }
  }

  void Drain() {
    stream_.async_read_some(net::buffer(drain_, sizeof(drain_)), [self = Self()](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      self->Drain();
    });
  }

  void Close() {
    beast::error_code ignored;
    Tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Tcp().socket().close(ignored);
  }

  bool SocketOpen() override { return Tcp().socket().is_open(); }

  // Waits for readability and peeks at the TCP socket: EOF or reset cancels the request, and
  // so does a TLS alert record (a client closing sends close_notify before its FIN); pipelined
  // bytes (any other record) just end the watch.
  void WatchForDisconnect() override {
    if (buffer_.size() > 0) return;
    const uint64_t generation = generation_;
    Tcp().socket().async_wait(tcp::socket::wait_read, [self = Self(), generation](beast::error_code ec) {
      if (ec || generation != self->generation_) return;
      unsigned char c = 0;
      const ssize_t n = ::recv(self->Tcp().socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      constexpr unsigned char kTlsAlert = 21;  // TLS record content type "alert"
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
          (kTls && n == 1 && c == kTlsAlert)) {
        self->cancelled_->store(true);
        self->keep_alive_ = false;
      }
    });
  }

  Stream stream_;
  char drain_[4096];
};

// The TLS context of --http-use-ssl: the PEM files read and checked first (tls_files.h, the
// same checks as gRPC's), TLS 1.2 and later only.
Result<std::unique_ptr<net::ssl::context>> MakeTlsContext(const HttpOptions& o) {
  SP_ASSIGN_OR_RETURN(tls::ServerTlsPem pem,
                      tls::LoadServerTls({o.use_ssl_mutual, o.server_cert, o.server_key, o.root_cert}, "--http"));
  auto ctx = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
  beast::error_code ec;
  ctx->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 | net::ssl::context::no_sslv3 |
                       net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use,
                   ec);
  // Resumed sessions must carry this context's id when client certificates are verified
  // (OpenSSL refuses them otherwise: "session id context uninitialized").
  static constexpr unsigned char kSessionContext[] = "sampan-http";
  if (!ec && SSL_CTX_set_session_id_context(ctx->native_handle(), kSessionContext, sizeof kSessionContext - 1) != 1)
    return Internal("--http-use-ssl: cannot set the TLS session id context");
  if (!ec) ctx->use_certificate_chain(net::buffer(pem.cert_chain), ec);
  if (ec) return InvalidArgument("--http-server-cert '", o.server_cert, "': ", ec.message());
  ctx->use_private_key(net::buffer(pem.key), net::ssl::context::pem, ec);
  if (ec) return InvalidArgument("--http-server-key '", o.server_key, "': ", ec.message());
  if (o.use_ssl_mutual) {
    ctx->add_certificate_authority(net::buffer(pem.root), ec);
    if (ec) return InvalidArgument("--http-root-cert '", o.root_cert, "': ", ec.message());
    ctx->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert, ec);
    if (ec) return Internal("--http-use-ssl-mutual: ", ec.message());
  }
  return ctx;
}

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(Core* core, const HttpOptions& options)
      : state_(std::make_shared<ServerState>(options.threads > 0 ? options.threads : 2)),
        acceptor_(net::make_strand(*state_->iocs[0])) {
    state_->core = core;
    state_->options = options;
  }

  ~HttpServerImpl() override { Stop(); }

  Status Listen() {
    const HttpOptions& o = state_->options;
    if (o.use_ssl || o.use_ssl_mutual) {
      if (o.metrics_only) return InvalidArgument("the metrics listener serves plain HTTP only");
      SP_ASSIGN_OR_RETURN(tls_, MakeTlsContext(o));
    }
    beast::error_code ec;
    auto address = net::ip::make_address(o.address, ec);
    if (ec) return InvalidArgument("HTTP address '", o.address, "' is not an IP address: ", ec.message());
    if (o.port < 0 || o.port > 65535) return InvalidArgument("HTTP port ", o.port, " is out of range");
    tcp::endpoint endpoint(address, static_cast<unsigned short>(o.port));
    const std::string where = StrCat(o.address, ":", o.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return IoError("cannot listen for HTTP on ", where, ": ", ec.message());
    port_ = acceptor_.local_endpoint().port();
    Accept();
    // Each io_context runs until Stop() releases its guard and its connections are done.
    for (auto& ioc : state_->iocs) {
      guards_.push_back(net::make_work_guard(*ioc));
      threads_.emplace_back([ioc = ioc.get()] { ioc->run(); });
    }
    return Status::Ok();
  }

  int port() const override { return port_; }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    state_->stopping = true;
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
    });
    std::vector<std::shared_ptr<SessionBase>> live;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      for (auto& [raw, weak] : state_->sessions)
        if (auto s = weak.lock()) live.push_back(std::move(s));
    }
    // Outside the lock: the last reference may be dropped here, and a
    // session's destructor takes the lock.
    for (auto& s : live) net::post(s->Executor(), [s] { s->StopIfIdle(); });
    live.clear();
    guards_.clear();
    // In-flight requests finish (Core calls back exactly once), then the I/O
    // threads run out of work.
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    state_->blocking.join();
  }

 private:
  void Accept() {
    // Connections go to the I/O threads' io_contexts in turn.
    net::io_context& ioc = *state_->iocs[next_ioc_++ % state_->iocs.size()];
    acceptor_.async_accept(net::make_strand(ioc), [this, &ioc](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        const auto peer = socket.remote_endpoint(ignored);
        const bool loopback = !ignored && IsLoopback(peer.address());
        std::shared_ptr<SessionBase> session;
        try {  // a TLS stream's SSL object can fail to be made (out of memory): that connection only
          if (tls_) {
            session = std::make_shared<Session<TlsStream>>(state_, ioc, loopback, std::move(socket), *tls_);
          } else {
            session = std::make_shared<Session<beast::tcp_stream>>(state_, ioc, loopback, std::move(socket));
          }
        } catch (const std::exception& e) {
          LogWarning("HTTP: a connection was dropped: ", e.what());
          return Accept();
        }
        {
          std::lock_guard<std::mutex> lock(state_->mu);
          state_->sessions.emplace(session.get(), session);
        }
        session->Run();
      }
      Accept();
    });
  }

  std::shared_ptr<ServerState> state_;
  std::unique_ptr<net::ssl::context> tls_;  // --http-use-ssl; outlives every session (Stop() joins first)
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards_;
  size_t next_ioc_ = 0;  // Accept(): where the next connection goes
  std::atomic<bool> stopped_{false};
  int port_ = 0;
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(Core* core, const HttpOptions& options) {
  if (core == nullptr) return InvalidArgument("HttpServer::Start: no Core");
  auto server = std::make_unique<HttpServerImpl>(core, options);
  SP_RETURN_IF_ERROR(server->Listen());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace sampan::server
