// Sends finished traces to an OpenTelemetry collector: OTLP/HTTP with the JSON encoding
// (POST {"resourceSpans": ...} to e.g. http://127.0.0.1:4318/v1/traces), from a thread of its own
// so no request waits on the collector. Spans queue up to a bound (more are dropped and counted)
// and go out every second or every 256 spans; a collector that fails is named in a warning (once
// a minute at most) and its batch dropped. Debian has no maintained OpenTelemetry C++ package,
// so the protocol is written here: plain http:// URLs (a local collector or sidecar).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sampan::server {

struct OtlpEndpoint {
  std::string host, port, path;  //!< from http://HOST[:PORT]/PATH (port 4318 by default)
};
//! Parses a collector URL ("http://localhost:4318/v1/traces", or without the scheme as Triton's
//! examples give it); https and other schemes are refused by name.
Result<OtlpEndpoint> ParseOtlpUrl(const std::string& url);

class OtlpExporter {
 public:
  OtlpExporter(OtlpEndpoint endpoint, std::vector<std::pair<std::string, std::string>> resource);
  ~OtlpExporter();  //!< sends what is queued (bounded by the send time-out), then stops
  //! Queues one trace's spans (a comma-separated list of span objects).
  void Add(std::string spans, size_t count);
  //! Sends what is queued now and waits for it (bounded).
  void Flush();
  uint64_t sent() const;
  uint64_t dropped() const;

 private:
  void Run();
  Status Post(const std::string& body);

  OtlpEndpoint endpoint_;
  std::string resource_json_;
  mutable std::mutex mu_;
  std::condition_variable cv_, flushed_;
  std::vector<std::string> queue_;
  size_t queued_spans_ = 0;
  uint64_t sent_ = 0, dropped_ = 0, flush_asked_ = 0, flush_done_ = 0;
  bool stop_ = false;
  std::chrono::steady_clock::time_point last_warning_{};
  std::thread thread_;
};

}  // namespace sampan::server
