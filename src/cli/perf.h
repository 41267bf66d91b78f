// `sampan perf`: what its files share. perf.cpp parses and checks the flags against the
// model and runs the sweep over load levels; perf_driver.cpp is the load engine (closed and
// open loop, measurement windows, stability); perf_inputs.cpp makes the request data (random,
// zero or perf_analyzer's --input-data JSON); perf_report.cpp writes the CSV, JSON and SVG
// reports.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "client/client.h"

namespace sampan::cli {

struct PerfFlags {
  std::string model;
  std::string version;
  std::string url;
  std::string protocol = "http";
  int64_t batch = 1;
  std::string concurrency_range;
  std::string request_rate_range;
  std::string distribution = "constant";
  //! perf_analyzer's --request-intervals: a file of gaps between requests in microseconds, one a
  //! line, used in turn and from the start again (an open loop, e.g. a bursty trace).
  std::string request_intervals;
  std::vector<std::string> shapes;
  std::string input_data = "random";
  int string_length = 128;  //!< random BYTES elements: characters each (perf_analyzer's --string-length)
  std::string string_data;  //!< BYTES elements: this string (perf_analyzer's --string-data)
  int measurement_ms = 5000;
  double stability = 10;
  int max_trials = 10;
  int percentile = 0;
  std::string shared_memory = "none";
  std::string csv;
  std::string json;
  std::string chart;
  int max_threads = 64;
  uint64_t seed = 0;
  // Sequence models (perf_analyzer's names): each closed-loop worker runs its own sequences of
  // about this many requests, the first with sequence_start, the last with sequence_end.
  int64_t sequence_length = 20;
  double sequence_length_variation = 20;  //!< percent: lengths drawn within length * (1 +- this)
  std::string sequence_id_range = "1";    //!< START[:END]: the correlation IDs used, in turn
};

//! One load level measured: the client's view of the last windows and the server's breakdown.
struct LevelResult {
  double level = 0;       // concurrency or request rate
  double throughput = 0;  // inferences/s
  double request_rate = 0;
  uint64_t requests = 0, errors = 0;
  double avg_us = 0, p50_us = 0, p90_us = 0, p95_us = 0, p99_us = 0;
  //! The p99 with every failed request counted as infinitely late (+inf once 1% failed): what a
  //! latency SLO sees when a server sheds (p99_us is over the successful requests only).
  double p99_failed_as_late_us = 0;
  double queue_us = 0, compute_input_us = 0, compute_infer_us = 0, compute_output_us = 0, server_us = 0;
  double server_batch = 0;  // inferences per server execution
  bool stable = false;
  std::string first_error;
};

//! The load engine (perf_driver.cpp): one connection per worker, requests prepared once per data set.
class Driver {
 public:
  //! Sequence models: the correlation IDs [first, last] handed out in turn, and whether the
  //! model takes them as strings.
  struct SequenceIds {
    bool on = false;
    bool strings = false;
    uint64_t first = 1, last = 1;
  };

  Driver(const PerfFlags& f, std::string host, int port, std::vector<std::vector<client::InputData>> sets,
         std::vector<std::string> outputs, SequenceIds ids)
      : f_(f),
        host_(std::move(host)),
        port_(port),
        sets_(std::move(sets)),
        outputs_(std::move(outputs)),
        ids_(ids),
        next_id_(ids.first) {}

  Result<std::unique_ptr<client::Client>> Connect();

  //! Runs one load level: `concurrency` closed-loop workers, or an open loop at `rate` requests/s
  //! (arrivals from --request-distribution, or from the intervals when set_intervals gave some).
  Result<LevelResult> RunLevel(int concurrency, double rate);
  //! --request-intervals: gaps between arrivals, in seconds, used in turn.
  void set_intervals(std::vector<double> gaps_s) { intervals_s_ = std::move(gaps_s); }

 private:
  //! The next sequence of a closed-loop worker: the next ID in the range (wrapping) and a length
  //! within --sequence-length-variation of --sequence-length (at least 1).
  //! IDs in progress are skipped (RunPerf checked the range holds more IDs than workers).
  void BeginSequence(client::SequenceStep* seq, int64_t* left, uint64_t salt);
  void EndSequence(uint64_t id);
  LevelResult Summarize(std::vector<double>& lat, double secs, uint64_t errors) const;
  //! The latency --percentile names (the average without it): what the windows must agree on.
  double StabilityLatency(const LevelResult& r) const;
  //! The last three windows agree within --stability-percentage in throughput and latency.
  bool Stable(const std::vector<LevelResult>& w) const;

  const PerfFlags& f_;
  std::string host_;
  int port_;
  std::vector<std::vector<client::InputData>> sets_;
  std::vector<std::string> outputs_;
  const SequenceIds ids_;
  std::mutex id_mu_;
  uint64_t next_id_;
  std::set<uint64_t> in_progress_;  //!< IDs of the sequences running now (one per worker at most)
  std::vector<double> intervals_s_;
};

//! Fills `bytes` for one tensor with random or zero data of its datatype. BYTES: `string_data`
//! when given, else random strings of `string_length` letters and digits (zero: empty strings).
Status FillTensor(const std::string& datatype, int64_t numel, bool random, std::mt19937_64& rng, std::string* bytes,
                  int string_length = 128, const std::string& string_data = "");

//! perf_analyzer's --input-data JSON: {"data": [{"NAME": [..] | {"content": [..], "shape": [..]}
//! | {"b64": "...", "shape": [..]}}, ...]}. "b64" is binary data: one element of a BYTES input (an
//! encoded image), or a numeric input's raw little-endian bytes; a BYTES content array may also
//! hold {"b64": "..."} elements.
//! Each data set starts as a copy of `templ` (names, datatypes, shapes).
Status LoadJsonInputs(const std::string& path, std::vector<std::vector<client::InputData>>* sets,
                      const std::vector<client::InputData>& templ);

//! Writes the results to the files the flags name (-f CSV, --json, --chart SVG), each only when given.
Status WritePerfReports(const std::vector<LevelResult>& results, const PerfFlags& f, bool open_loop);

}  // namespace sampan::cli
