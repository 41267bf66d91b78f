// `sampan perf`: load generator and report for a running KServe v2 server
// (Sampan or Triton), with perf_analyzer's flag names where they exist.
//
// Two load modes:
//   * closed loop (--concurrency-range): N workers, each with its own
//     connection, send the next request as soon as the previous one returns;
//   * open loop (--request-rate-range): requests are due at fixed or Poisson
//     intervals; latency is measured from the time a request was DUE, not
//     from when a free worker got to send it, so a stalled server shows up as
//     latency instead of silently lowering the offered load (no coordinated
//     omission).
// Each load level is measured in windows of --measurement-interval ms until
// three consecutive windows agree within --stability-percentage (throughput
// and the --percentile latency, or the average), as perf_analyzer does.
//
// This file: the flags, their checks against the model, the inputs put in shared memory, and
// the sweep over load levels. The rest is in perf_driver.cpp (the load engine),
// perf_inputs.cpp (request data) and perf_report.cpp (CSV, JSON and SVG reports); perf.h
// holds what they share.
#include "cli/perf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "client/client.h"

namespace sampan::cli {

namespace {

// --request-intervals: microseconds between requests, one a line (blank lines and # comments
// skipped). Returns the gaps in seconds and sets *peak_rate to the most requests/s of any 100 ms.
Result<std::vector<double>> ReadIntervals(const std::string& path, double* peak_rate) {
  std::ifstream in(path);
  if (!in) return IoError("--request-intervals: cannot read '", path, "'");
  std::vector<double> gaps;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    char* end = nullptr;
    const double us = std::strtod(line.c_str() + b, &end);
    if (end == line.c_str() + b ||
        line.find_first_not_of(" \t\r", static_cast<size_t>(end - line.c_str())) != std::string::npos)
      return InvalidArgument("--request-intervals ", path, ":", n, ": '", line, "' is not a number of microseconds");
    if (!(us >= 0) || !std::isfinite(us) || us > 60e6)
      return InvalidArgument("--request-intervals ", path, ":", n, ": ", line,
                             " us is outside 0..60,000,000 (one minute)");
    gaps.push_back(us / 1e6);
  }
  double total = 0;
  for (double g : gaps) total += g;
  if (gaps.empty() || total <= 0)
    return InvalidArgument("--request-intervals ", path, ": no intervals, or all zero (give microseconds, one a line)");
  // The busiest 100 ms of one pass (sizes the sender pool).
  double peak = 0, t = 0;
  size_t lo = 0;
  std::vector<double> at;
  for (double g : gaps) at.push_back(t), t += g;
  for (size_t hi = 0; hi < at.size(); ++hi) {
    while (at[hi] - at[lo] > 0.1) ++lo;
    peak = std::max(peak, static_cast<double>(hi - lo + 1) / 0.1);
  }
  *peak_rate = std::max(peak, static_cast<double>(gaps.size()) / total);
  return gaps;
}

struct Range {
  double start, end, step;
};

Result<Range> ParseRange(const std::string& text, const std::string& flag) {
  Range r{0, 0, 1};
  std::vector<double> parts;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t colon = text.find(':', pos);
    std::string part = text.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    char* end = nullptr;
    double v = std::strtod(part.c_str(), &end);
    if (part.empty() || *end != '\0' || !(v > 0))
      return InvalidArgument(flag, " '", text, "': want START[:END[:STEP]] with positive numbers");
    parts.push_back(v);
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  if (parts.size() > 3) return InvalidArgument(flag, " '", text, "': want START[:END[:STEP]]");
  r.start = parts[0];
  r.end = parts.size() > 1 ? parts[1] : r.start;
  r.step = parts.size() > 2 ? parts[2] : 1;
  if (r.end < r.start) return InvalidArgument(flag, " '", text, "': END is below START");
  return r;
}

// --sequence-id-range START[:END]: positive integers, END >= START (END absent: no upper bound).
Result<std::pair<uint64_t, uint64_t>> ParseIdRange(const std::string& text) {
  auto number = [&](const std::string& part) -> Result<uint64_t> {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(part.c_str(), &end, 10);
    if (part.empty() || part[0] == '-' || *end != '\0' || errno == ERANGE || v == 0)
      return InvalidArgument("--sequence-id-range '", text, "': want START[:END] with positive integers");
    return static_cast<uint64_t>(v);
  };
  const size_t colon = text.find(':');
  SP_ASSIGN_OR_RETURN(uint64_t first, number(text.substr(0, colon)));
  uint64_t last = UINT64_MAX;
  if (colon != std::string::npos) {
    SP_ASSIGN_OR_RETURN(last, number(text.substr(colon + 1)));
    if (last < first) return InvalidArgument("--sequence-id-range '", text, "': END is below START");
  }
  return std::make_pair(first, last);
}

// --shape NAME:D1,D2,... (perf_analyzer's form; the batch dimension excluded).
Result<std::map<std::string, std::vector<int64_t>>> ParseShapes(const std::vector<std::string>& args) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& a : args) {
    auto colon = a.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return InvalidArgument("--shape '", a, "': want NAME:D1,D2,... (without the batch dimension)");
    std::vector<int64_t> dims;
    std::string rest = a.substr(colon + 1);
    size_t pos = 0;
    while (pos <= rest.size()) {
      size_t comma = rest.find_first_of(",x", pos);
      std::string d = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      char* end = nullptr;
      long long v = std::strtoll(d.c_str(), &end, 10);
      if (d.empty() || *end != '\0' || v < 1)
        return InvalidArgument("--shape '", a, "': dimension '", d, "' is not a positive integer");
      dims.push_back(v);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    out[a.substr(0, colon)] = dims;
  }
  return out;
}

// A POSIX shared-memory region holding every input of one request, registered
// with the server (system shared-memory extension).
struct ShmRegion {
  std::string name, key;
  void* base = nullptr;
  size_t size = 0;
  ~ShmRegion() {
    if (base) munmap(base, size);
    if (!key.empty()) shm_unlink(key.c_str());
  }
};

Status RunPerf(const PerfFlags& f) {
  if (f.model.empty()) return InvalidArgument("-m MODEL is required");
  if (f.protocol != "http" && f.protocol != "grpc")
    return InvalidArgument("-i must be http or grpc (got '", f.protocol, "')");
  if (f.batch < 1) return InvalidArgument("-b must be >= 1");
  if (f.measurement_ms < 100) return InvalidArgument("--measurement-interval must be >= 100 ms");
  if (f.stability <= 0) return InvalidArgument("--stability-percentage must be > 0");
  if (f.max_trials < 3) return InvalidArgument("--max-trials must be >= 3");
  if (f.percentile != 0 && f.percentile != 50 && f.percentile != 90 && f.percentile != 95 && f.percentile != 99)
    return InvalidArgument("--percentile must be 50, 90, 95 or 99");
  if (f.distribution != "constant" && f.distribution != "poisson")
    return InvalidArgument("--request-distribution must be constant or poisson");
  if (f.shared_memory != "none" && f.shared_memory != "system")
    return InvalidArgument("--shared-memory must be none or system (cuda is not supported)");
  if (!f.concurrency_range.empty() + !f.request_rate_range.empty() + !f.request_intervals.empty() > 1)
    return InvalidArgument("give one of --concurrency-range, --request-rate-range and --request-intervals");
  const bool open_loop = !f.request_rate_range.empty() || !f.request_intervals.empty();
  std::vector<double> intervals;
  double trace_mean_rate = 0, trace_peak_rate = 0;
  if (!f.request_intervals.empty()) {
    SP_ASSIGN_OR_RETURN(intervals, ReadIntervals(f.request_intervals, &trace_peak_rate));
    double total = 0;
    for (double g : intervals) total += g;
    trace_mean_rate = static_cast<double>(intervals.size()) / total;
  }
  Range range;
  if (!intervals.empty()) {
    range = {trace_mean_rate, trace_mean_rate, 1};  // one level: the trace (reported at its mean rate)
  } else {
    SP_ASSIGN_OR_RETURN(
        range, open_loop ? ParseRange(f.request_rate_range, "--request-rate-range")
                         : ParseRange(f.concurrency_range.empty() ? "1" : f.concurrency_range, "--concurrency-range"));
  }
  std::string host;
  int port = 0;
  SP_RETURN_IF_ERROR(
      client::ParseHostPort(f.url.empty() ? "localhost" : f.url, f.protocol == "grpc" ? 8001 : 8000, &host, &port));
  SP_ASSIGN_OR_RETURN(auto probe,
                      f.protocol == "grpc" ? client::MakeGrpcClient(host, port) : client::MakeHttpClient(host, port));
  SP_ASSIGN_OR_RETURN(client::ModelInfo info, probe->GetModel(f.model, f.version));
  if (info.max_batch_size == 0 && f.batch > 1)
    return InvalidArgument("model '", f.model, "' does not support batching (max_batch_size 0); use -b 1");
  if (info.max_batch_size > 0 && f.batch > info.max_batch_size)
    return InvalidArgument("-b ", f.batch, " exceeds model '", f.model, "' max_batch_size ", info.max_batch_size);
  Driver::SequenceIds ids;
  if (info.sequence) {
    if (f.batch != 1)
      return InvalidArgument("model '", f.model,
                             "' is a sequence model: each request is one step of one sequence, "
                             "use -b 1");
    if (open_loop)
      return Unsupported("model '", f.model,
                         "' is a sequence model: --request-rate-range would interleave a "
                         "sequence's steps over several connections; use --concurrency-range (each worker runs its "
                         "own sequences)");
    if (f.sequence_length < 1) return InvalidArgument("--sequence-length must be >= 1");
    if (!(f.sequence_length_variation >= 0 && f.sequence_length_variation < 100))
      return InvalidArgument("--sequence-length-variation must be a percentage in [0, 100)");
    SP_ASSIGN_OR_RETURN(auto id_range, ParseIdRange(f.sequence_id_range));
    if (id_range.second - id_range.first < static_cast<uint64_t>(range.end) - 1)
      return InvalidArgument("--sequence-id-range '", f.sequence_id_range, "' holds ",
                             id_range.second - id_range.first + 1, " IDs, fewer than the ", range.end,
                             " sequences in progress at once at the highest concurrency");
    ids.on = true;
    ids.strings = info.string_sequence_id;
    ids.first = id_range.first;
    ids.last = id_range.second;
  }
  SP_ASSIGN_OR_RETURN(auto shapes, ParseShapes(f.shapes));
  for (const auto& [name, dims] : shapes) {
    bool found = false;
    for (const auto& in : info.inputs) found |= in.name == name;
    if (!found) return InvalidArgument("--shape names '", name, "', which is not an input of model '", f.model, "'");
  }
  std::vector<client::InputData> templ;
  std::mt19937_64 rng(f.seed);
  for (const auto& in : info.inputs) {
    client::InputData d;
    d.name = in.name;
    d.datatype = in.datatype;
    std::vector<int64_t> dims = in.shape;
    if (info.max_batch_size > 0 && !dims.empty()) dims.erase(dims.begin());
    auto it = shapes.find(in.name);
    if (it != shapes.end()) {
      if (it->second.size() != dims.size())
        return InvalidArgument("--shape ", in.name, " has ", it->second.size(), " dims; the model's input has ",
                               dims.size(), " (batch dimension excluded)");
      for (size_t i = 0; i < dims.size(); ++i)
        if (dims[i] != -1 && dims[i] != it->second[i])
          return InvalidArgument("--shape ", in.name, ": dim ", i, " must be ", dims[i], " for this model");
      dims = it->second;
    }
    for (int64_t v : dims)
      if (v < 0)
        return InvalidArgument("input '", in.name, "' has a variable dimension: give it with --shape ", in.name,
                               ":D1,D2,...");
    if (info.max_batch_size > 0) dims.insert(dims.begin(), f.batch);
    d.shape = dims;
    int64_t numel = 1;
    for (int64_t v : dims) numel *= v;
    if (f.input_data == "random" || f.input_data == "zero")
      SP_RETURN_IF_ERROR(
          FillTensor(in.datatype, numel, f.input_data == "random", rng, &d.bytes, f.string_length, f.string_data));
    templ.push_back(std::move(d));
  }
  std::vector<std::vector<client::InputData>> sets;
  if (f.input_data == "random" || f.input_data == "zero")
    sets.push_back(templ);
  else
    SP_RETURN_IF_ERROR(LoadJsonInputs(f.input_data, &sets, templ));

  // System shared memory: every input of every data set in one region per set.
  std::vector<std::unique_ptr<ShmRegion>> regions;
  if (f.shared_memory == "system") {
    for (size_t si = 0; si < sets.size(); ++si) {
      auto r = std::make_unique<ShmRegion>();
      r->name = StrCat("sampan_perf_", getpid(), "_", si);
      r->key = "/" + r->name;
      for (const auto& in : sets[si]) r->size += in.bytes.size();
      const int fd = shm_open(r->key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
      if (fd < 0) return IoError("shm_open '", r->key, "': ", std::strerror(errno));
      const bool sized = ftruncate(fd, static_cast<off_t>(r->size)) == 0;
      r->base = sized ? mmap(nullptr, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
      close(fd);
      if (r->base == MAP_FAILED) {
        r->base = nullptr;
        return IoError("cannot map shared memory '", r->key, "'");
      }
      uint64_t off = 0;
      for (auto& in : sets[si]) {
        std::memcpy(static_cast<char*>(r->base) + off, in.bytes.data(), in.bytes.size());
        in.shm_region = r->name;
        in.shm_offset = off;
        in.shm_byte_size = in.bytes.size();
        off += in.bytes.size();
        in.bytes.clear();
      }
      SP_RETURN_IF_ERROR(probe->RegisterSystemSharedMemory(r->name, r->key, r->size, 0));
      regions.push_back(std::move(r));
    }
  }
  std::vector<std::string> outputs;
  for (const auto& o : info.outputs) outputs.push_back(o.name);

  std::printf("*** Measurement Settings ***\n  Model: %s%s  Protocol: %s  Server: %s:%d\n  Batch size: %lld\n",
              f.model.c_str(), f.version.empty() ? "" : (" version " + f.version).c_str(), f.protocol.c_str(),
              host.c_str(), port, static_cast<long long>(f.batch));
  std::printf("  Measurement window: %d msec, stability %.0f%%, up to %d windows per level%s\n", f.measurement_ms,
              f.stability, f.max_trials, f.shared_memory == "system" ? ", inputs in system shared memory" : "");
  if (!intervals.empty())
    std::printf(
        "  Request intervals: %s (%zu gaps, mean %.1f requests/s, busiest 100 ms %.1f/s; latency measured "
        "from each request's due time)\n",
        f.request_intervals.c_str(), intervals.size(), trace_mean_rate, trace_peak_rate);
  else if (open_loop)
    std::printf("  Request rate: %s (%s arrivals; latency measured from each request's due time)\n",
                f.request_rate_range.c_str(), f.distribution.c_str());
  std::fflush(stdout);

  if (ids.on)
    std::printf("  Sequences: about %lld requests each (+-%.0f%%), IDs %llu..%llu%s, one in progress per worker\n",
                static_cast<long long>(f.sequence_length), f.sequence_length_variation,
                static_cast<unsigned long long>(ids.first), static_cast<unsigned long long>(ids.last),
                ids.strings ? " (sent as strings)" : "");
  std::fflush(stdout);
  Driver driver(f, host, port, std::move(sets), outputs, ids);
  if (!intervals.empty()) driver.set_intervals(intervals);
  std::vector<LevelResult> results;
  bool any_error = false;
  for (double level = range.start; level <= range.end + 1e-9; level += range.step) {
    // A trace sizes the senders for its busiest 100 ms.
    const double rate = !intervals.empty() ? trace_peak_rate : level;
    SP_ASSIGN_OR_RETURN(LevelResult r, driver.RunLevel(open_loop ? 0 : static_cast<int>(level), open_loop ? rate : 0));
    r.level = level;
    std::printf("\n%s: %g, throughput: %.2f infer/sec, latency %.0f usec%s\n",
                open_loop ? "Request Rate" : "Concurrency", level, r.throughput, r.avg_us,
                r.stable ? "" : "  (UNSTABLE: windows did not converge)");
    std::printf("  Client: requests %llu, errors %llu, p50 %.0f us, p90 %.0f us, p95 %.0f us, p99 %.0f us\n",
                static_cast<unsigned long long>(r.requests), static_cast<unsigned long long>(r.errors), r.p50_us,
                r.p90_us, r.p95_us, r.p99_us);
    std::printf(
        "  Server: request %.0f us = queue %.0f + compute input %.0f + infer %.0f + output %.0f (us); "
        "avg batch %.2f\n",
        r.server_us, r.queue_us, r.compute_input_us, r.compute_infer_us, r.compute_output_us, r.server_batch);
    if (r.errors) {
      any_error = true;
      std::printf("  first error: %s\n", r.first_error.c_str());
    }
    std::fflush(stdout);
    results.push_back(r);
  }
  for (const auto& r : regions) (void)probe->UnregisterSystemSharedMemory(r->name);

  SP_RETURN_IF_ERROR(WritePerfReports(results, f, open_loop));
  if (any_error) return Unavailable("some requests failed (see 'first error' above)");
  return Status::Ok();
}

}  // namespace

void AddPerfCommand(CLI::App& app) {
  auto f = std::make_shared<PerfFlags>();
  CLI::App* cmd = app.add_subcommand("perf", "Load generator and latency/throughput report for a KServe v2 server");
  cmd->add_option("-m,--model-name", f->model, "Model to load-test")->required();
  cmd->add_option("-x,--model-version", f->version, "Model version (default: the server's choice)");
  cmd->add_option("-u,--url", f->url, "Server HOST:PORT (default localhost:8000 for http, :8001 for grpc)");
  cmd->add_option("-i,--protocol", f->protocol, "http or grpc");
  cmd->add_option("-b,--batch-size", f->batch, "Batch size of each request (default 1)");
  cmd->add_option("--concurrency-range", f->concurrency_range, "Closed loop: START[:END[:STEP]] outstanding requests");
  cmd->add_option("--request-rate-range", f->request_rate_range, "Open loop: START[:END[:STEP]] requests/s");
  cmd->add_option("--request-distribution", f->distribution, "Open-loop arrivals: constant or poisson");
  cmd->add_option("--request-intervals", f->request_intervals,
                  "Open loop: a file of microseconds between requests, one a line, used in turn (a trace)");
  cmd->add_option("--shape", f->shapes, "Shape of a variable input: NAME:D1,D2,... without batch (repeatable)");
  cmd->add_option("--input-data", f->input_data, "random, zero, or a perf_analyzer-style JSON file");
  cmd->add_option("--string-length", f->string_length, "Characters of each random BYTES element (perf_analyzer's flag)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--string-data", f->string_data,
                  "Every BYTES element of the generated inputs is this string (perf_analyzer's flag)");
  cmd->add_option("-p,--measurement-interval", f->measurement_ms, "Window length in ms (default 5000)");
  cmd->add_option("-s,--stability-percentage", f->stability, "Windows agree within this % (default 10)");
  cmd->add_option("-r,--max-trials", f->max_trials, "Windows per level before giving up on stability (default 10)");
  cmd->add_option("--percentile", f->percentile, "Latency percentile used for stability (50/90/95/99; default avg)");
  cmd->add_option("--shared-memory", f->shared_memory, "none or system: inputs through system shared memory");
  cmd->add_option("-f,--latency-report-file", f->csv, "Write the results as CSV");
  cmd->add_option("--json", f->json, "Write the results as JSON");
  cmd->add_option("--chart", f->chart, "Write a latency-vs-throughput chart (SVG)");
  cmd->add_option("--max-threads", f->max_threads, "Open loop: most sender threads (default 64)");
  cmd->add_option("--seed", f->seed, "Seed for random inputs and Poisson arrivals");
  cmd->add_option("--sequence-length", f->sequence_length,
                  "Sequence models: requests per sequence (default 20; the first starts it, the last ends it)");
  cmd->add_option("--sequence-length-variation", f->sequence_length_variation,
                  "Sequence models: lengths vary by up to this percent (default 20)");
  cmd->add_option("--sequence-id-range", f->sequence_id_range,
                  "Sequence models: START[:END] correlation IDs, used in turn (default 1 and up)");
  cmd->callback([f]() {
    Status st = RunPerf(*f);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
      ExitCode() = 1;
    }
  });
}

}  // namespace sampan::cli
