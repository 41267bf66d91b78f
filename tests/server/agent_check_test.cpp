// haproxy's agent check (server/agent/agent_check.h): the weight a saturation gives, the line for
// each state, and the responder over a real loopback socket: the agent's `agent-send` line handed
// to the reply (or "" when none comes in time), one line then the end of the stream, the
// connection cap, the timeout and a prompt Stop(). agent_report_test.cpp covers the per-model
// replies; CoreTest.AgentCheck* (core_test.cpp) read a real Core.
#include "server/agent/agent_check.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace sampan::server {
namespace {

using namespace std::chrono_literals;

TEST(AgentCheckReply, WeightFromSaturation) {
  EXPECT_EQ(AgentWeight(0), 100);
  EXPECT_EQ(AgentWeight(0.125), 88);  // 87.5 rounds up
  EXPECT_EQ(AgentWeight(0.25), 75);
  EXPECT_EQ(AgentWeight(0.5), 50);
  EXPECT_EQ(AgentWeight(0.994), 1);
  EXPECT_EQ(AgentWeight(0.999), 1);  // never 0: that is drain's
  EXPECT_EQ(AgentWeight(1), 1);
  EXPECT_EQ(AgentWeight(7.5), 1);  // over capacity
  EXPECT_EQ(AgentWeight(-0.5), 100);
  EXPECT_EQ(AgentWeight(std::numeric_limits<double>::infinity()), 1);
  EXPECT_EQ(AgentWeight(std::nan("")), 1);
}

TEST(AgentCheckReply, Lines) {
  AgentState s;
  EXPECT_EQ(AgentReply(s), "up ready 100%\n");
  s.saturation = 0.3;
  EXPECT_EQ(AgentReply(s), "up ready 70%\n");
  s.ready = false;
  EXPECT_EQ(AgentReply(s), "down #not ready\n");
  s.shutting_down = true;  // a draining server is not ready either: drain wins
  EXPECT_EQ(AgentReply(s), "drain\n");
  s.ready = true;
  EXPECT_EQ(AgentReply(s), "drain\n");
}

// A plain POSIX client, as haproxy is one.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{5, 0};  // a test that fails must not hang
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  void Send(const std::string& s) { ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size())); }
  void ShutdownSend() { ::shutdown(fd_, SHUT_WR); }
  // Up to the first "\n" (one byte at a time: nothing after it is taken).
  std::string ReadLine() {
    std::string out;
    char c = 0;
    while (out.empty() || out.back() != '\n') {
      if (::recv(fd_, &c, 1, 0) != 1) return out + "<end>";
      out += c;
    }
    return out;
  }
  // Everything until the server ends the stream; "<timeout>" if it does not within 5 s.
  std::string ReadToEnd() {
    std::string out;
    char buf[256];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return out;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? out + "<timeout>" : out + "<error>";
      out.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

class AgentCheckServerTest : public ::testing::Test {
 protected:
  void Start(AgentCheckOptions o = {}) {
    auto started = AgentCheckServer::Start(o, [this](std::string_view query) {
      std::lock_guard<std::mutex> lock(mu_);
      ++asked_;
      queries_.emplace_back(query);
      std::string line = AgentReply(state_);
      if (!query.empty()) line.insert(line.size() - 1, StrCat(" #", query));
      return line;
    });
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server_ = std::move(started).value();
    ASSERT_GT(server_->port(), 0);
  }
  void Set(AgentState s) {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = s;
  }
  int asked() {
    std::lock_guard<std::mutex> lock(mu_);
    return asked_;
  }
  std::vector<std::string> queries() {
    std::lock_guard<std::mutex> lock(mu_);
    return queries_;
  }

  std::mutex mu_;
  AgentState state_;
  int asked_ = 0;
  std::vector<std::string> queries_;
  std::unique_ptr<AgentCheckServer> server_;
};

TEST_F(AgentCheckServerTest, AnswersOneLineAConnectionFromTheStateThen) {
  Start();
  {
    Client c(server_->port());
    ASSERT_TRUE(c.connected());
    EXPECT_EQ(c.ReadToEnd(), "up ready 100%\n");
  }
  Set({false, true, 0.5, ""});
  {
    Client c(server_->port());
    EXPECT_EQ(c.ReadToEnd(), "up ready 50%\n");
  }
  Set({true, false, 0.5, ""});
  {
    Client c(server_->port());
    EXPECT_EQ(c.ReadToEnd(), "drain\n");
  }
  Set({false, false, 0, ""});
  {
    Client c(server_->port());
    EXPECT_EQ(c.ReadToEnd(), "down #not ready\n");
  }
  EXPECT_EQ(asked(), 4);
}

TEST_F(AgentCheckServerTest, TheAgentSendLineIsHandedToTheReply) {
  Start();
  Set({false, true, 0.25, ""});
  {
    Client c(server_->port());
    c.Send("model=m unit=2\n");
    EXPECT_EQ(c.ReadToEnd(), "up ready 75% #model=m unit=2\n");
  }
  {
    // In pieces, with "\r\n": the line is what comes before it.
    Client c(server_->port());
    c.Send("model=");
    std::this_thread::sleep_for(10ms);
    c.Send("q\r\nmore");
    EXPECT_EQ(c.ReadToEnd(), "up ready 75% #model=q\n");
  }
  {
    // The end of the stream ends the line too.
    Client c(server_->port());
    c.Send("model=e");
    c.ShutdownSend();
    EXPECT_EQ(c.ReadToEnd(), "up ready 75% #model=e\n");
  }
  // More from the agent after the line is read and dropped; the server still closes cleanly.
  Client d(server_->port());
  d.Send("\n");
  EXPECT_EQ(d.ReadToEnd(), "up ready 75%\n");
  d.Send(std::string(4096, 'x'));
  EXPECT_EQ(queries(), (std::vector<std::string>{"model=m unit=2", "model=q", "model=e", ""}));
}

TEST_F(AgentCheckServerTest, NoLineInTimeIsAnsweredAsAnEmptyOneAndLongLinesAreCut) {
  AgentCheckOptions o;
  o.query_timeout = 50ms;
  o.max_query = 8;
  Start(o);
  {
    Client c(server_->port());
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(c.ReadLine(), "up ready 100%\n");
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(waited, 45ms);
    EXPECT_LT(waited, 2s);
    // A line sent after the answer is read and dropped (the read the timer left pending ends here).
    c.Send("late\n");
    EXPECT_EQ(c.ReadToEnd(), "");
  }
  {
    Client c(server_->port());
    c.Send(std::string(600, 'y'));
    EXPECT_EQ(c.ReadToEnd(), "up ready 100% #yyyyyyyy\n");
  }
  EXPECT_EQ(queries(), (std::vector<std::string>{"", "yyyyyyyy"}));
}

TEST_F(AgentCheckServerTest, ConnectionsOverTheCapAreClosedAndTheTimeoutFreesThem) {
  AgentCheckOptions o;
  o.timeout = 300ms;
  o.max_connections = 1;
  Start(o);
  // `a` reads its line but never closes: it holds the one slot until the timeout.
  Client a(server_->port());
  EXPECT_EQ(a.ReadLine(), "up ready 100%\n");
  {
    Client b(server_->port());
    EXPECT_EQ(b.ReadToEnd(), "");  // closed on accept, unanswered
  }
  std::this_thread::sleep_for(400ms);  // past a's timeout
  {
    Client c(server_->port());
    EXPECT_EQ(c.ReadToEnd(), "up ready 100%\n");
  }
  EXPECT_EQ(a.ReadToEnd(), "");  // the server ended the stream after the line
}

TEST_F(AgentCheckServerTest, StopIsPromptWithConnectionsOpen) {
  AgentCheckOptions o;
  o.timeout = 60s;
  Start(o);
  const int port = server_->port();
  // Two agents that read their line and stay: each connection waits for its agent to close.
  Client a(port), b(port);
  EXPECT_EQ(a.ReadLine(), "up ready 100%\n");
  EXPECT_EQ(b.ReadLine(), "up ready 100%\n");
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(a.ReadToEnd(), "");
  EXPECT_EQ(b.ReadToEnd(), "");
  Client c(port);
  EXPECT_FALSE(c.connected());
  server_->Stop();  // twice is harmless
}

TEST(AgentCheckServerStart, BadAddressAndTakenPortAreNamed) {
  auto state = [](std::string_view) { return AgentReply(AgentState{}); };
  AgentCheckOptions o;
  o.address = "localhost";
  auto r = AgentCheckServer::Start(o, state);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'localhost' is not an IP address"), std::string::npos) << r.status().message();

  o.address = "127.0.0.1";
  o.port = 70000;
  r = AgentCheckServer::Start(o, state);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("70000"), std::string::npos) << r.status().message();

  o.port = 0;
  auto first = AgentCheckServer::Start(o, state);
  ASSERT_TRUE(first.ok());
  o.port = first.value()->port();
  r = AgentCheckServer::Start(o, state);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(StrCat("cannot listen for haproxy's agent check on 127.0.0.1:", o.port)),
            std::string::npos)
      << r.status().message();
  EXPECT_FALSE(AgentCheckServer::Start(AgentCheckOptions{}, nullptr).ok());
}

}  // namespace
}  // namespace sampan::server
