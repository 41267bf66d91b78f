// haproxy's agent check: the reply, and the TCP responder (Boost.Asio, as the HTTP front end's
// transport in src/server/http/http_server.cpp).
//
// Each connection: the line is written at once (haproxy may send its `agent-send` string first
// or not at all; the reply does not depend on it), our side is shut down, and what the agent sends
// is read and dropped until it closes. Reading to the end matters: closing a socket with unread
// bytes makes the kernel answer with a reset, which can discard the line before haproxy reads it.
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
  if (!state.ready) return "down #not ready\n";
  return StrCat("up ready ", AgentWeight(state.saturation), "%\n");
}

AgentState AgentStateOf(const Core& core) {
  AgentState s;
  s.shutting_down = core.ShuttingDown();
  s.ready = core.Ready();
  s.saturation = core.Saturation();
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
  AgentConnection(tcp::socket socket, std::string reply, std::shared_ptr<int> open)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), reply_(std::move(reply)), open_(std::move(open)) {
    ++*open_;
  }
  ~AgentConnection() { --*open_; }

  void Run(std::chrono::milliseconds timeout) {
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->Close();
    });
    net::async_write(socket_, net::buffer(reply_), [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->Close();
      error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_send, ignored);
      self->ReadToEnd();
    });
  }

 private:
  void ReadToEnd() {
    socket_.async_read_some(net::buffer(sink_), [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->Close();  // end of stream (the agent closed), or an error
      self->ReadToEnd();
    });
  }

  void Close() {
    timer_.cancel();
    error_code ignored;
    socket_.close(ignored);
  }

  tcp::socket socket_;
  net::steady_timer timer_;
  std::string reply_;
  std::shared_ptr<int> open_;
  char sink_[512];
};

class AgentCheckServerImpl final : public AgentCheckServer {
 public:
  AgentCheckServerImpl(const AgentCheckOptions& options, std::function<AgentState()> state)
      : options_(options), state_(std::move(state)), acceptor_(std::in_place, *ioc_), retry_(std::in_place, *ioc_) {}
  ~AgentCheckServerImpl() override { Stop(); }

  Status Listen() {
    const AgentCheckOptions& o = options_;
    error_code ec;
    const auto address = net::ip::make_address(o.address, ec);
    if (ec) return InvalidArgument("agent-check address '", o.address, "' is not an IP address: ", ec.message());
    if (o.port < 0 || o.port > 65535) return InvalidArgument("agent-check port ", o.port, " is out of range");
    if (o.timeout.count() <= 0) return InvalidArgument("agent-check timeout must be > 0 ms");
    if (o.max_connections < 1) return InvalidArgument("agent-check max_connections must be >= 1");
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
        std::make_shared<AgentConnection>(std::move(socket), AgentReply(state_()), open_)->Run(options_.timeout);
      }
      Accept();
    });
  }

  AgentCheckOptions options_;
  std::function<AgentState()> state_;
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
                                                                  std::function<AgentState()> state) {
  if (!state) return InvalidArgument("AgentCheckServer::Start: no state function");
  auto server = std::make_unique<AgentCheckServerImpl>(options, std::move(state));
  SP_RETURN_IF_ERROR(server->Listen());
  return std::unique_ptr<AgentCheckServer>(std::move(server));
}

}  // namespace sampan::server
