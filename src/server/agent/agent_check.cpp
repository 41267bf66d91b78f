// haproxy's agent check: the reply, and the TCP responder (Boost.Asio, as the HTTP front end's
// transport in src/server/http/http_server.cpp).
//
// Each connection: the `agent-send` line is read (up to "\n", the end of the stream, max_query
// bytes or query_timeout, whichever comes first), the reply to it is written, our side is shut
// down, and whatever else the agent sends is read and dropped until it closes. Reading to the end
// matters: closing a socket with unread bytes makes the kernel answer with a reset, which can
// discard the line before haproxy reads it.
#include "server/agent/agent_check.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cmath>
#include <optional>
#include <thread>

#include "server/core/log.h"

namespace sampan::server {

int AgentWeight(double saturation) {
  if (std::isnan(saturation)) return 1;
  const double load = std::clamp(saturation, 0.0, 1.0);
  return static_cast<int>(std::clamp(std::lround(100 * (1 - load)), 1L, 100L));
}

std::string AgentReply(const AgentState& state) {
  if (state.shutting_down) return "drain\n";
  if (!state.ready) return state.reason.empty() ? "down #not ready\n" : StrCat("down #not ready: ", state.reason, "\n");
  return StrCat("up ready ", AgentWeight(state.saturation), "%\n");
}

AgentState AgentStateOf(const Core& core) {
  AgentState s;
  s.shutting_down = core.ShuttingDown();
  s.ready = core.Ready();
  s.saturation = core.Saturation();
  if (!s.ready) s.reason = core.NotReadyReason();
  return s;
}

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

// One agent connection, on the responder's thread only. `open` counts the live ones; it is
// shared so that connections destroyed with the io_context (after Stop) still find it.
class AgentConnection : public std::enable_shared_from_this<AgentConnection> {
 public:
  using Reply = std::function<std::string(std::string_view)>;
  AgentConnection(tcp::socket socket, const Reply* reply, const AgentCheckOptions* options, std::shared_ptr<int> open)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        query_timer_(socket_.get_executor()),
        reply_fn_(reply),
        options_(options),
        open_(std::move(open)) {
    ++*open_;
  }
  ~AgentConnection() { --*open_; }

  void Run() {
    timer_.expires_after(options_->timeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->Close();
    });
    query_timer_.expires_after(options_->query_timeout);
    query_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->Answer();
    });
    ReadQuery();
  }

 private:
  void ReadQuery() {
    reading_ = true;
    socket_.async_read_some(net::buffer(sink_), [self = shared_from_this()](error_code ec, size_t n) {
      self->reading_ = false;
      if (self->answered_) {  // the query timer answered meanwhile
        if (self->written_) self->ReadToEnd();
        return;
      }
      if (!ec) {
        self->query_.append(self->sink_, n);
        const size_t nl = self->query_.find('\n');
        if (nl == std::string::npos && self->query_.size() < self->options_->max_query) return self->ReadQuery();
        if (nl != std::string::npos) self->query_.resize(nl);
      }
      self->Answer();  // the line, the end of the stream or an error: answer what came
    });
  }

  void Answer() {
    if (answered_) return;
    answered_ = true;
    query_timer_.cancel();
    if (query_.size() > options_->max_query) query_.resize(options_->max_query);
    if (!query_.empty() && query_.back() == '\r') query_.pop_back();
    reply_ = (*reply_fn_)(query_);
    net::async_write(socket_, net::buffer(reply_), [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->Close();
      self->written_ = true;
      error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_send, ignored);
      self->ReadToEnd();
    });
  }

  // Once answered: one read at a time (a read ReadQuery left pending, when the query timer
  // answered, goes on here when it ends).
  void ReadToEnd() {
    if (reading_) return;
    reading_ = true;
    socket_.async_read_some(net::buffer(sink_), [self = shared_from_this()](error_code ec, size_t) {
      self->reading_ = false;
      if (ec) return self->Close();  // end of stream (the agent closed), or an error
      self->ReadToEnd();
    });
  }

  void Close() {
    timer_.cancel();
    query_timer_.cancel();
    error_code ignored;
    socket_.close(ignored);
  }

  tcp::socket socket_;
  net::steady_timer timer_, query_timer_;
  const Reply* reply_fn_;
  const AgentCheckOptions* options_;
  std::shared_ptr<int> open_;
  std::string query_, reply_;
  bool answered_ = false, written_ = false, reading_ = false;
  char sink_[512];
};

class AgentCheckServerImpl final : public AgentCheckServer {
 public:
  AgentCheckServerImpl(const AgentCheckOptions& options, std::function<std::string(std::string_view)> reply)
      : options_(options), reply_(std::move(reply)), acceptor_(std::in_place, *ioc_), retry_(std::in_place, *ioc_) {}
  ~AgentCheckServerImpl() override { Stop(); }

  Status Listen() {
    const AgentCheckOptions& o = options_;
    error_code ec;
    const auto address = net::ip::make_address(o.address, ec);
    if (ec) return InvalidArgument("agent-check address '", o.address, "' is not an IP address: ", ec.message());
    if (o.port < 0 || o.port > 65535) return InvalidArgument("agent-check port ", o.port, " is out of range");
    if (o.timeout.count() <= 0) return InvalidArgument("agent-check timeout must be > 0 ms");
    if (o.max_connections < 1) return InvalidArgument("agent-check max_connections must be >= 1");
    if (o.query_timeout.count() < 0) return InvalidArgument("agent-check query_timeout must be >= 0 ms");
    if (o.max_query < 1) return InvalidArgument("agent-check max_query must be >= 1");
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(o.port));
    acceptor_->open(endpoint.protocol(), ec);
    if (!ec) acceptor_->set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_->bind(endpoint, ec);
    if (!ec) acceptor_->listen(net::socket_base::max_listen_connections, ec);
    if (ec) return IoError("cannot listen for haproxy's agent check on ", o.address, ":", o.port, ": ", ec.message());
    port_ = acceptor_->local_endpoint().port();
    Accept();
    thread_ = std::thread([this] { ioc_->run(); });
    return Status::Ok();
  }

  int port() const override { return port_; }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    ioc_->stop();
    if (thread_.joinable()) thread_.join();
    // The listener closes, then the io_context goes with the handlers left: their connections
    // close with them.
    acceptor_.reset();
    retry_.reset();
    ioc_.reset();
  }

 private:
  void Accept() {
    acceptor_->async_accept([this](error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor_->is_open()) return;
      if (ec) {
        // Out of descriptors and the like: try again shortly instead of spinning.
        LogVerbose(1, "agent check: accept failed: ", ec.message());
        retry_->expires_after(std::chrono::milliseconds(100));
        retry_->async_wait([this](error_code wait_ec) {
          if (!wait_ec) Accept();
        });
        return;
      }
      if (*open_ >= options_.max_connections) {
        error_code ignored;
        socket.close(ignored);
      } else {
        std::make_shared<AgentConnection>(std::move(socket), &reply_, &options_, open_)->Run();
      }
      Accept();
    });
  }

  AgentCheckOptions options_;
  std::function<std::string(std::string_view)> reply_;
  // Destroyed in Stop(), the I/O objects before their io_context.
  std::unique_ptr<net::io_context> ioc_ = std::make_unique<net::io_context>(1);
  std::optional<tcp::acceptor> acceptor_;
  std::optional<net::steady_timer> retry_;
  std::shared_ptr<int> open_ = std::make_shared<int>(0);
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  int port_ = 0;
};

}  // namespace

Result<std::unique_ptr<AgentCheckServer>> AgentCheckServer::Start(const AgentCheckOptions& options,
                                                                  std::function<std::string(std::string_view)> reply) {
  if (!reply) return InvalidArgument("AgentCheckServer::Start: no reply function");
  auto server = std::make_unique<AgentCheckServerImpl>(options, std::move(reply));
  SP_RETURN_IF_ERROR(server->Listen());
  return std::unique_ptr<AgentCheckServer>(std::move(server));
}

}  // namespace sampan::server
