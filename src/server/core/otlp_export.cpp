#include "server/core/otlp_export.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/report_util.h"
#include "server/core/log.h"

namespace sampan::server {
namespace {

constexpr size_t kMaxQueuedSpans = 8192;
constexpr size_t kBatchSpans = 256;
constexpr auto kInterval = std::chrono::seconds(1);
constexpr int kSendTimeoutSecs = 5;

// Closes the descriptor on every path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<OtlpEndpoint> ParseOtlpUrl(const std::string& url) {
  std::string_view rest(url);
  if (const size_t scheme = rest.find("://"); scheme != std::string_view::npos) {
    if (rest.substr(0, scheme) != "http")
      return InvalidArgument("OTLP collector URL '", url,
                             "': only http:// is supported (a local collector or sidecar)");
    rest.remove_prefix(scheme + 3);
  }
  const size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  OtlpEndpoint e;
  e.path = slash == std::string_view::npos ? "/v1/traces" : std::string(rest.substr(slash));
  if (hostport.empty()) return InvalidArgument("OTLP collector URL '", url, "' names no host");
  if (hostport.front() == '[') {  // [v6]:port
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) return InvalidArgument("OTLP collector URL '", url, "': unclosed '['");
    e.host = std::string(hostport.substr(1, close - 1));
    hostport.remove_prefix(close + 1);
    if (!hostport.empty() && hostport.front() != ':')
      return InvalidArgument("OTLP collector URL '", url, "': expected ':' after ']'");
    e.port = hostport.empty() ? "4318" : std::string(hostport.substr(1));
  } else {
    const size_t colon = hostport.rfind(':');
    e.host = std::string(hostport.substr(0, colon));
    e.port = colon == std::string_view::npos ? "4318" : std::string(hostport.substr(colon + 1));
  }
  if (e.host.empty()) return InvalidArgument("OTLP collector URL '", url, "' names no host");
  if (e.port.empty() || e.port.size() > 5 || e.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(e.port) == 0 || std::stoi(e.port) > 65535)
    return InvalidArgument("OTLP collector URL '", url, "': port '", e.port, "' is not a port number");
  return e;
}

OtlpExporter::OtlpExporter(OtlpEndpoint endpoint, std::vector<std::pair<std::string, std::string>> resource)
    : endpoint_(std::move(endpoint)) {
  bool has_service = false;
  resource_json_ = "{\"attributes\":[";
  for (size_t i = 0; i < resource.size(); ++i) {
    has_service = has_service || resource[i].first == "service.name";
    resource_json_ += StrCat(i ? "," : "", "{\"key\":", JsonQuote(resource[i].first),
                             ",\"value\":{\"stringValue\":", JsonQuote(resource[i].second), "}}");
  }
  if (!has_service)
    resource_json_ +=
        StrCat(resource.empty() ? "" : ",", "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"sampan\"}}");
  resource_json_ += "]}";
  thread_ = std::thread([this] { Run(); });
}

OtlpExporter::~OtlpExporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void OtlpExporter::Add(std::string spans, size_t count) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_spans_ + count > kMaxQueuedSpans) {
      dropped_ += count;
      return;
    }
    queue_.push_back(std::move(spans));
    queued_spans_ += count;
    wake = queued_spans_ >= kBatchSpans;
  }
  if (wake) cv_.notify_all();
}

void OtlpExporter::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = ++flush_asked_;
  cv_.notify_all();
  flushed_.wait_for(lock, std::chrono::seconds(2 * kSendTimeoutSecs), [&] { return flush_done_ >= ticket || stop_; });
}

uint64_t OtlpExporter::sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}

uint64_t OtlpExporter::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void OtlpExporter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, kInterval, [&] { return stop_ || queued_spans_ >= kBatchSpans || flush_asked_ > flush_done_; });
    const uint64_t flush_ticket = flush_asked_;
    std::vector<std::string> batch;
    batch.swap(queue_);
    const size_t spans = queued_spans_;
    queued_spans_ = 0;
    const bool stopping = stop_;
    lock.unlock();
    if (!batch.empty()) {
      std::string body = StrCat("{\"resourceSpans\":[{\"resource\":", resource_json_,
                                ",\"scopeSpans\":[{\"scope\":{\"name\":\"sampan\",\"version\":", JsonQuote(Version()),
                                "},\"spans\":[");
      for (size_t i = 0; i < batch.size(); ++i) body += StrCat(i ? "," : "", batch[i]);
      body += "]}]}]}";
      Status st = Post(body);
      lock.lock();
      if (st.ok()) {
        sent_ += spans;
      } else {
        dropped_ += spans;
        const auto now = std::chrono::steady_clock::now();
        if (now - last_warning_ > std::chrono::minutes(1)) {
          last_warning_ = now;
          LogWarning("trace: ", spans, " spans not sent to the OpenTelemetry collector (", dropped_,
                     " dropped so far): ", st.message());
        }
      }
    } else {
      lock.lock();
    }
    flush_done_ = std::max(flush_done_, flush_ticket);
    flushed_.notify_all();
    if (stopping && queue_.empty()) return;
  }
}

// One HTTP/1.1 POST with its own connection; the answer must be 2xx.
Status OtlpExporter::Post(const std::string& body) {
  const std::string where = StrCat("http://", endpoint_.host, ":", endpoint_.port, endpoint_.path);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(endpoint_.host.c_str(), endpoint_.port.c_str(), &hints, &found); rc != 0)
    return Unavailable(where, ": ", gai_strerror(rc));
  Fd sock;
  std::string connect_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    Fd s;
    s.fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s.fd < 0) continue;
    timeval tv{kSendTimeoutSecs, 0};
    ::setsockopt(s.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(s.fd, a->ai_addr, a->ai_addrlen) == 0) {
      std::swap(sock.fd, s.fd);
      break;
    }
    connect_error = std::strerror(errno);
  }
  ::freeaddrinfo(found);
  if (sock.fd < 0) return Unavailable(where, ": cannot connect: ", connect_error);
  const std::string request = StrCat(
      "POST ", endpoint_.path, " HTTP/1.1\r\nHost: ", endpoint_.host, ":", endpoint_.port,
      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  for (size_t off = 0; off < request.size();) {
    const ssize_t n = ::send(sock.fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return Unavailable(where, ": send failed: ", n < 0 ? std::strerror(errno) : "connection closed");
    off += static_cast<size_t>(n);
  }
  char head[256];
  size_t got = 0;
  while (got < sizeof head - 1) {  // the status line is all we need
    const ssize_t n = ::recv(sock.fd, head + got, sizeof head - 1 - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
    if (std::memchr(head, '\n', got) != nullptr) break;
  }
  head[got] = '\0';
  const std::string_view status_line(head, std::strcspn(head, "\r\n"));
  if (status_line.size() < 12 || status_line.substr(0, 5) != "HTTP/") return Unavailable(where, ": no HTTP answer");
  const std::string_view code = status_line.substr(status_line.find(' ') + 1, 3);
  if (code.empty() || code[0] != '2') return Unavailable(where, " answered '", status_line, "'");
  return Status::Ok();
}

}  // namespace sampan::server
