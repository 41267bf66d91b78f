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
#include <fcntl.h>
#include <rapidjson/document.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "base/base64.h"
#include "base/half.h"
#include "base/report_util.h"
#include "base/tensor.h"
#include "cli/commands.h"
#include "client/client.h"

namespace sampan::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct PerfFlags {
  std::string model;
  std::string version;
  std::string url;
  std::string protocol = "http";
  int64_t batch = 1;
  std::string concurrency_range;
  std::string request_rate_range;
  std::string distribution = "constant";
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

// A BYTES element as KServe carries it: a 4-byte little-endian length, then the bytes.
void AppendBytesElement(const std::string& v, std::string* out) {
  const uint32_t n = static_cast<uint32_t>(v.size());
  char len[4];
  std::memcpy(len, &n, 4);
  out->append(len, 4);
  out->append(v);
}

// Fills `bytes` for one tensor with random or zero data of its datatype. BYTES: `string_data`
// when given, else random strings of `string_length` letters and digits (zero: empty strings).
Status FillTensor(const std::string& datatype, int64_t numel, bool random, std::mt19937_64& rng, std::string* bytes,
                  int string_length = 128, const std::string& string_data = "") {
  if (datatype == "BYTES") {
    static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    bytes->clear();
    std::string v;
    for (int64_t i = 0; i < numel; ++i) {
      if (!string_data.empty()) {
        v = string_data;
      } else if (random) {
        v.resize(static_cast<size_t>(string_length));
        for (char& c : v) c = kChars[rng() % (sizeof(kChars) - 1)];
      } else {
        v.clear();
      }
      AppendBytesElement(v, bytes);
    }
    return Status::Ok();
  }
  const size_t esize = client::DatatypeSize(datatype);
  if (esize == 0) return Unsupported("input datatype '", datatype, "' (perf generates numeric tensors only)");
  bytes->assign(static_cast<size_t>(numel) * esize, '\0');
  if (!random) return Status::Ok();
  std::uniform_real_distribution<float> uf(0.f, 1.f);
  std::uniform_int_distribution<int> ui(0, 100);
  char* p = bytes->data();
  for (int64_t i = 0; i < numel; ++i, p += esize) {
    if (datatype == "FP32") {
      float v = uf(rng);
      std::memcpy(p, &v, 4);
    } else if (datatype == "FP64") {
      double v = uf(rng);
      std::memcpy(p, &v, 8);
    } else if (datatype == "FP16") {
      uint16_t v = Half(uf(rng)).bits;
      std::memcpy(p, &v, 2);
    } else if (datatype == "BF16") {
      uint16_t v = BFloat16(uf(rng)).bits;
      std::memcpy(p, &v, 2);
    } else if (datatype == "BOOL") {
      *p = static_cast<char>(ui(rng) & 1);
    } else {
      int64_t v = ui(rng);
      std::memcpy(p, &v, esize);
    }  // little-endian: low bytes of a small value
  }
  return Status::Ok();
}

// perf_analyzer's --input-data JSON: {"data": [{"NAME": [..] | {"content": [..], "shape": [..]}
// | {"b64": "...", "shape": [..]}}, ...]}. "b64" is binary data: one element of a BYTES input (an
// encoded image), or a numeric input's raw little-endian bytes; a BYTES content array may also
// hold {"b64": "..."} elements.
Status LoadJsonInputs(const std::string& path, std::vector<std::vector<client::InputData>>* sets,
                      const std::vector<client::InputData>& templ) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot read --input-data file '", path, "'");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  rapidjson::Document d;
  d.Parse(text.data(), text.size());
  if (d.HasParseError()) return InvalidArgument(path, ": not valid JSON (offset ", d.GetErrorOffset(), ")");
  if (!d.IsObject() || !d.HasMember("data") || !d["data"].IsArray() || d["data"].Empty())
    return InvalidArgument(path, ": want {\"data\": [{\"INPUT\": [values...]}, ...]}");
  size_t idx = 0;
  for (const auto& entry : d["data"].GetArray()) {
    if (!entry.IsObject()) return InvalidArgument(path, ": data[", idx, "] is not an object");
    std::vector<client::InputData> set = templ;
    for (auto& in : set) {
      if (!entry.HasMember(in.name.c_str()))
        return InvalidArgument(path, ": data[", idx, "] has no input '", in.name, "'");
      const rapidjson::Value* values = &entry[in.name.c_str()];
      if (values->IsObject()) {
        if (values->HasMember("shape") && (*values)["shape"].IsArray()) {
          std::vector<int64_t> shape;
          for (const auto& s : (*values)["shape"].GetArray()) {
            if (!s.IsInt64() || s.GetInt64() < 0)
              return InvalidArgument(path, ": data[", idx, "].", in.name, ".shape holds something other than a size");
            shape.push_back(s.GetInt64());
          }
          if (!in.shape.empty() && in.shape.size() == shape.size() + 1) shape.insert(shape.begin(), in.shape[0]);
          in.shape = shape;
        }
        if (values->HasMember("b64")) {
          if (!(*values)["b64"].IsString())
            return InvalidArgument(path, ": data[", idx, "].", in.name, ".b64 is not a string");
          const rapidjson::Value& b = (*values)["b64"];
          auto raw = DecodeBase64(std::string_view(b.GetString(), b.GetStringLength()));
          if (!raw.ok()) return raw.status().WithContext(StrCat(path, ": data[", idx, "].", in.name, ".b64"));
          int64_t numel = 1;
          for (int64_t dd : in.shape) numel *= dd;
          in.bytes.clear();
          if (in.datatype == "BYTES") {
            for (int64_t rep = 0; rep < numel; ++rep) AppendBytesElement(*raw, &in.bytes);
          } else {
            const size_t want = static_cast<size_t>(numel) * client::DatatypeSize(in.datatype);
            if (raw->size() != want)
              return InvalidArgument(path, ": data[", idx, "].", in.name, ".b64 holds ", raw->size(), " bytes; ",
                                     in.datatype, ShapeToString(in.shape), " is ", want);
            in.bytes = std::move(*raw);
          }
          continue;
        }
        if (!values->HasMember("content") || !(*values)["content"].IsArray())
          return InvalidArgument(path, ": data[", idx, "].", in.name, " has no \"content\" array");
        values = &(*values)["content"];
      }
      if (!values->IsArray()) return InvalidArgument(path, ": data[", idx, "].", in.name, " is not an array");
      int64_t numel = 1;
      for (int64_t dd : in.shape) numel *= dd;
      const int64_t per_batch = in.shape.empty() ? 1 : numel / std::max<int64_t>(1, in.shape[0]);
      const int64_t n = static_cast<int64_t>(values->Size());
      if (n == 0 || numel == 0)
        return InvalidArgument(path, ": data[", idx, "].", in.name, " is empty (", n, " values for shape ",
                               ShapeToString(in.shape), ")");
      if (n != numel && n != per_batch)
        return InvalidArgument(path, ": data[", idx, "].", in.name, " has ", n, " values; the shape needs ", per_batch,
                               " per batch item");
      std::string one;
      if (in.datatype == "BYTES") {
        for (const auto& v : values->GetArray()) {
          if (v.IsObject() && v.HasMember("b64") && v["b64"].IsString()) {
            auto raw = DecodeBase64(std::string_view(v["b64"].GetString(), v["b64"].GetStringLength()));
            if (!raw.ok()) return raw.status().WithContext(StrCat(path, ": data[", idx, "].", in.name));
            AppendBytesElement(*raw, &one);
            continue;
          }
          if (!v.IsString())
            return InvalidArgument(path, ": data[", idx, "].", in.name,
                                   " is a BYTES input: give strings (\"text\") or {\"b64\": \"...\"}");
          AppendBytesElement(std::string(v.GetString(), v.GetStringLength()), &one);
        }
        in.bytes.clear();
        for (int64_t rep = 0; rep < numel / n; ++rep) in.bytes += one;
        continue;
      }
      const size_t esize = client::DatatypeSize(in.datatype);
      for (const auto& v : values->GetArray()) {
        if (!v.IsNumber() && !v.IsBool())
          return InvalidArgument(path, ": data[", idx, "].", in.name, " holds a non-number");
        char buf[8] = {};
        const double x = v.IsBool() ? (v.GetBool() ? 1 : 0) : v.GetDouble();
        if (in.datatype == "FP32") {
          float y = static_cast<float>(x);
          std::memcpy(buf, &y, 4);
        } else if (in.datatype == "FP64")
          std::memcpy(buf, &x, 8);
        else if (in.datatype == "FP16") {
          uint16_t y = Half(static_cast<float>(x)).bits;
          std::memcpy(buf, &y, 2);
        } else if (in.datatype == "BF16") {
          uint16_t y = BFloat16(static_cast<float>(x)).bits;
          std::memcpy(buf, &y, 2);
        } else {
          int64_t y = static_cast<int64_t>(x);
          std::memcpy(buf, &y, esize);
        }
        one.append(buf, esize);
      }
      in.bytes.clear();
      for (int64_t rep = 0; rep < numel / n; ++rep) in.bytes += one;
    }
    sets->push_back(std::move(set));
    ++idx;
  }
  return Status::Ok();
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

struct LevelResult {
  double level = 0;       // concurrency or request rate
  double throughput = 0;  // inferences/s
  double request_rate = 0;
  uint64_t requests = 0, errors = 0;
  double avg_us = 0, p50_us = 0, p90_us = 0, p95_us = 0, p99_us = 0;
  double queue_us = 0, compute_input_us = 0, compute_infer_us = 0, compute_output_us = 0, server_us = 0;
  double server_batch = 0;  // inferences per server execution
  bool stable = false;
  std::string first_error;
};

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

  Result<std::unique_ptr<client::Client>> Connect() {
    return f_.protocol == "grpc" ? client::MakeGrpcClient(host_, port_) : client::MakeHttpClient(host_, port_);
  }

  // Runs one load level: `concurrency` closed-loop workers, or an open loop at `rate` requests/s.
  Result<LevelResult> RunLevel(int concurrency, double rate) {
    const bool open_loop = rate > 0;
    // Open loop: each sender has one request in flight, so `rate` requests/s of up to 100 ms each
    // need rate / 10 of them (was rate / 50: a server answering in 50 ms could not be offered
    // more than 20 requests/s a sender, and the schedule fell behind as if the server stalled).
    const int workers =
        open_loop ? std::max(1, std::min(f_.max_threads, static_cast<int>(std::ceil(rate / 10.0)) + 4)) : concurrency;
    struct Worker {
      std::mutex mu;
      std::vector<double> lat_us;
      uint64_t errors = 0;
      std::string first_error;
      std::unique_ptr<client::Client> client;
      std::vector<std::unique_ptr<client::PreparedRequest>> prepared;
      // Sequence models: the worker's sequence in progress (left = its requests still to send).
      client::SequenceStep seq;
      int64_t left = 0;
    };
    std::vector<std::unique_ptr<Worker>> ws;
    for (int i = 0; i < workers; ++i) {
      auto w = std::make_unique<Worker>();
      SP_ASSIGN_OR_RETURN(w->client, Connect());
      for (const auto& set : sets_) {
        SP_ASSIGN_OR_RETURN(auto p, w->client->Prepare(f_.model, f_.version, set, outputs_));
        w->prepared.push_back(std::move(p));
      }
      ws.push_back(std::move(w));
    }
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> next_slot{0};
    const auto t0 = Clock::now() + std::chrono::milliseconds(20);
    // Open-loop schedule: slot k is due at t0 + offsets[k]; Poisson gaps are
    // exponential with mean 1/rate, drawn from one seeded sequence.
    std::vector<double> due_s;
    if (open_loop) {
      const double horizon = (f_.measurement_ms / 1000.0) * (f_.max_trials + 2) + 5;
      std::mt19937_64 rng(f_.seed + 7);
      std::exponential_distribution<double> gap(rate);
      double t = 0;
      while (t < horizon) {
        due_s.push_back(t);
        t += f_.distribution == "poisson" ? gap(rng) : 1.0 / rate;
      }
    }
    std::vector<std::thread> threads;
    for (int i = 0; i < workers; ++i) {
      threads.emplace_back([&, i] {
        Worker& w = *ws[static_cast<size_t>(i)];
        uint64_t n = static_cast<uint64_t>(i);
        while (!stop.load(std::memory_order_relaxed)) {
          Clock::time_point start;
          if (open_loop) {
            const uint64_t k = next_slot.fetch_add(1);
            if (k >= due_s.size()) break;
            start = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(due_s[k]));
            std::this_thread::sleep_until(start);
            if (stop.load(std::memory_order_relaxed)) break;
          } else {
            start = Clock::now();
          }
          const auto& req = *w.prepared[n++ % w.prepared.size()];
          Status st;
          if (ids_.on) {
            if (w.left <= 0) BeginSequence(&w.seq, &w.left, static_cast<uint64_t>(i) + n);
            w.seq.end = w.left == 1;
            st = w.client->InferStep(req, w.seq, nullptr);
            w.seq.start = false;
            // A failed step may have left the server without the sequence: begin a new one.
            w.left = st.ok() ? w.left - 1 : 0;
            if (w.left == 0) EndSequence(w.seq.id);
          } else {
            st = w.client->Infer(req, nullptr);
          }
          const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
          std::lock_guard<std::mutex> lock(w.mu);
          if (st.ok()) {
            w.lat_us.push_back(us);
          } else {
            if (w.errors++ == 0) w.first_error = st.ToString();
          }
        }
        // A sequence cut short by the end of the level is ended at once, by its own worker (one
        // request with sequence_end): its slot frees now, not at the server's idle timeout, and
        // sequences waiting for a slot (more workers than slots) are served before the join.
        if (ids_.on && w.left > 0) {
          w.seq.end = true;
          Status st = w.client->InferStep(*w.prepared[0], w.seq, nullptr);
          if (!st.ok())
            std::fprintf(stderr, "warning: ending sequence %llu at the end of the level: %s\n",
                         static_cast<unsigned long long>(w.seq.id), st.ToString().c_str());
          w.left = 0;
          EndSequence(w.seq.id);
        }
      });
    }
    // Measurement windows.
    auto stats_client = Connect();
    std::vector<LevelResult> windows;
    std::vector<std::vector<double>> window_lat;
    std::vector<client::ModelStats> snaps;
    auto snap = [&]() -> client::ModelStats {
      if (!stats_client.ok()) return {};
      auto s = (*stats_client)->GetStats(f_.model, f_.version);
      return s.ok() ? *s : client::ModelStats{};
    };
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(std::min(1000, f_.measurement_ms / 4)));  // warm-up
    for (auto& w : ws) {
      std::lock_guard<std::mutex> lock(w->mu);
      w->lat_us.clear();
    }
    snaps.push_back(snap());
    LevelResult result;
    result.level = open_loop ? rate : concurrency;
    for (int trial = 0; trial < f_.max_trials; ++trial) {
      const auto w0 = Clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(f_.measurement_ms));
      std::vector<double> lat;
      uint64_t errors = 0;
      std::string first_error;
      for (auto& w : ws) {
        std::lock_guard<std::mutex> lock(w->mu);
        lat.insert(lat.end(), w->lat_us.begin(), w->lat_us.end());
        w->lat_us.clear();
        errors += w->errors;
        if (first_error.empty()) first_error = w->first_error;
        w->errors = 0;
        w->first_error.clear();
      }
      const double secs = std::chrono::duration<double>(Clock::now() - w0).count();
      snaps.push_back(snap());
      LevelResult r = Summarize(lat, secs, errors);
      r.first_error = first_error;
      windows.push_back(r);
      window_lat.push_back(std::move(lat));
      if (Stable(windows)) {
        result.stable = true;
        break;
      }
    }
    stop = true;
    for (auto& t : threads) t.join();
    // The last three windows (or all, if fewer) make the reported figure.
    const size_t n = std::min<size_t>(3, windows.size());
    std::vector<double> lat;
    uint64_t errors = 0;
    double secs = 0;
    for (size_t i = windows.size() - n; i < windows.size(); ++i) {
      lat.insert(lat.end(), window_lat[i].begin(), window_lat[i].end());
      errors += windows[i].errors;
      secs += f_.measurement_ms / 1000.0;
      if (result.first_error.empty()) result.first_error = windows[i].first_error;
    }
    LevelResult r = Summarize(lat, secs, errors);
    r.level = result.level;
    r.stable = result.stable;
    r.first_error = result.first_error;
    // Server-side breakdown over the same windows.
    const client::ModelStats& a = snaps[snaps.size() - 1 - n];
    const client::ModelStats& b = snaps.back();
    auto avg = [](uint64_t ns1, uint64_t ns0, uint64_t c1, uint64_t c0) {
      return c1 > c0 ? static_cast<double>(ns1 - ns0) / static_cast<double>(c1 - c0) / 1000.0 : 0.0;
    };
    r.queue_us = avg(b.queue_ns, a.queue_ns, b.queue_count, a.queue_count);
    r.compute_input_us = avg(b.compute_input_ns, a.compute_input_ns, b.compute_input_count, a.compute_input_count);
    r.compute_infer_us = avg(b.compute_infer_ns, a.compute_infer_ns, b.compute_infer_count, a.compute_infer_count);
    r.compute_output_us = avg(b.compute_output_ns, a.compute_output_ns, b.compute_output_count, a.compute_output_count);
    r.server_us = avg(b.success_ns, a.success_ns, b.success_count, a.success_count);
    if (b.execution_count > a.execution_count)
      r.server_batch = static_cast<double>(b.inference_count - a.inference_count) /
                       static_cast<double>(b.execution_count - a.execution_count);
    return r;
  }

 private:
  // The next sequence of a closed-loop worker: the next ID in the range (wrapping) and a length
  // within --sequence-length-variation of --sequence-length (at least 1).
  // IDs in progress are skipped (RunPerf checked the range holds more IDs than workers).
  void BeginSequence(client::SequenceStep* seq, int64_t* left, uint64_t salt) {
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(id_mu_);
      do {
        id = next_id_;
        next_id_ = next_id_ >= ids_.last ? ids_.first : next_id_ + 1;
      } while (in_progress_.count(id));
      in_progress_.insert(id);
    }
    std::mt19937_64 rng(f_.seed * 1000003 + id * 31 + salt);
    const double spread = f_.sequence_length_variation / 100.0;
    std::uniform_real_distribution<double> u(1.0 - spread, 1.0 + spread);
    const double len = static_cast<double>(f_.sequence_length) * (spread > 0 ? u(rng) : 1.0);
    *left = std::max<int64_t>(1, static_cast<int64_t>(std::llround(len)));
    seq->id = id;
    seq->id_is_string = ids_.strings;
    seq->start = true;
    seq->end = false;
  }

  void EndSequence(uint64_t id) {
    std::lock_guard<std::mutex> lock(id_mu_);
    in_progress_.erase(id);
  }

  LevelResult Summarize(std::vector<double>& lat, double secs, uint64_t errors) const {
    LevelResult r;
    r.requests = lat.size();
    r.errors = errors;
    r.request_rate = secs > 0 ? static_cast<double>(lat.size()) / secs : 0;
    r.throughput = r.request_rate * static_cast<double>(f_.batch);
    if (!lat.empty()) {
      double sum = 0;
      for (double v : lat) sum += v;
      r.avg_us = sum / static_cast<double>(lat.size());
      r.p50_us = NearestRankPercentile(lat, 50);
      r.p90_us = NearestRankPercentile(lat, 90);
      r.p95_us = NearestRankPercentile(lat, 95);
      r.p99_us = NearestRankPercentile(lat, 99);
    }
    return r;
  }

  double StabilityLatency(const LevelResult& r) const {
    switch (f_.percentile) {
      case 50:
        return r.p50_us;
      case 90:
        return r.p90_us;
      case 95:
        return r.p95_us;
      case 99:
        return r.p99_us;
      default:
        return r.avg_us;
    }
  }

  bool Stable(const std::vector<LevelResult>& w) const {
    if (w.size() < 3) return false;
    const double tol = f_.stability / 100.0;
    double tsum = 0, lsum = 0;
    for (size_t i = w.size() - 3; i < w.size(); ++i) {
      tsum += w[i].throughput;
      lsum += StabilityLatency(w[i]);
    }
    const double tmean = tsum / 3, lmean = lsum / 3;
    if (tmean <= 0) return false;
    for (size_t i = w.size() - 3; i < w.size(); ++i) {
      if (std::fabs(w[i].throughput - tmean) > tol * tmean) return false;
      if (lmean > 0 && std::fabs(StabilityLatency(w[i]) - lmean) > tol * lmean) return false;
    }
    return true;
  }

  const PerfFlags& f_;
  std::string host_;
  int port_;
  std::vector<std::vector<client::InputData>> sets_;
  std::vector<std::string> outputs_;
  const SequenceIds ids_;
  std::mutex id_mu_;
  uint64_t next_id_;
  std::set<uint64_t> in_progress_;  //!< IDs of the sequences running now (one per worker at most)
};

std::string JsonStr(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      o += ' ';
      continue;
    }
    o += c;
  }
  return o + "\"";
}

// A latency-vs-throughput chart (p50, p95, p99) as a self-contained SVG.
std::string ChartSvg(const std::vector<LevelResult>& rs, const PerfFlags& f, bool open_loop) {
  const double W = 720, H = 440, L = 80, R = 30, T = 50, B = 60;
  double xmax = 1, ymax = 1;
  for (const auto& r : rs) {
    xmax = std::max(xmax, r.throughput);
    ymax = std::max(ymax, r.p99_us / 1000.0);
  }
  xmax *= 1.1;
  ymax *= 1.15;
  auto X = [&](double v) { return L + v / xmax * (W - L - R); };
  auto Y = [&](double v) { return H - B - v / ymax * (H - T - B); };
  std::string s = StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", W, "\" height=\"", H,
      "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  s += StrCat("<text x=\"", W / 2, "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", f.model, " (", f.protocol,
              ", batch ", f.batch, ", ", open_loop ? "request rate" : "concurrency",
              " sweep): latency vs throughput</text>\n");
  for (int i = 0; i <= 5; ++i) {
    const double xv = xmax * i / 5, yv = ymax * i / 5;
    s += StrCat("<line x1=\"", X(xv), "\" y1=\"", T, "\" x2=\"", X(xv), "\" y2=\"", H - B, "\" stroke=\"#ddd\"/>\n");
    s += StrCat("<line x1=\"", L, "\" y1=\"", Y(yv), "\" x2=\"", W - R, "\" y2=\"", Y(yv), "\" stroke=\"#ddd\"/>\n");
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.0f", xv);
    s += StrCat("<text x=\"", X(xv), "\" y=\"", H - B + 18, "\" text-anchor=\"middle\">", buf, "</text>\n");
    std::snprintf(buf, sizeof(buf), "%.2f", yv);
    s += StrCat("<text x=\"", L - 6, "\" y=\"", Y(yv) + 4, "\" text-anchor=\"end\">", buf, "</text>\n");
  }
  s += StrCat("<text x=\"", (L + W - R) / 2, "\" y=\"", H - 15,
              "\" text-anchor=\"middle\">throughput (inferences/s)</text>\n");
  s += StrCat("<text x=\"18\" y=\"", (T + H - B) / 2, "\" text-anchor=\"middle\" transform=\"rotate(-90 18 ",
              (T + H - B) / 2, ")\">latency (ms)</text>\n");
  struct Series {
    const char* name;
    const char* color;
    double LevelResult::*field;
  };
  const Series series[] = {{"p50", "#1f77b4", &LevelResult::p50_us},
                           {"p95", "#ff7f0e", &LevelResult::p95_us},
                           {"p99", "#d62728", &LevelResult::p99_us}};
  int li = 0;
  for (const auto& se : series) {
    std::string pts;
    for (const auto& r : rs) pts += StrCat(X(r.throughput), ",", Y(r.*se.field / 1000.0), " ");
    s += StrCat("<polyline fill=\"none\" stroke=\"", se.color, "\" stroke-width=\"2\" points=\"", pts, "\"/>\n");
    for (const auto& r : rs)
      s += StrCat("<circle cx=\"", X(r.throughput), "\" cy=\"", Y(r.*se.field / 1000.0), "\" r=\"3\" fill=\"", se.color,
                  "\"/>\n");
    s += StrCat("<rect x=\"", L + 10, "\" y=\"", T + 8 + li * 18, "\" width=\"14\" height=\"4\" fill=\"", se.color,
                "\"/>");
    s += StrCat("<text x=\"", L + 30, "\" y=\"", T + 14 + li * 18, "\">", se.name, "</text>\n");
    ++li;
  }
  return s + "</svg>\n";
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream o(path, std::ios::binary);
  if (!o) return IoError("cannot write '", path, "'");
  o << text;
  if (!o) return IoError("cannot write '", path, "'");
  return Status::Ok();
}

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
  if (!f.concurrency_range.empty() && !f.request_rate_range.empty())
    return InvalidArgument("give either --concurrency-range or --request-rate-range, not both");
  const bool open_loop = !f.request_rate_range.empty();
  SP_ASSIGN_OR_RETURN(Range range, open_loop ? ParseRange(f.request_rate_range, "--request-rate-range")
                                             : ParseRange(f.concurrency_range.empty() ? "1" : f.concurrency_range,
                                                          "--concurrency-range"));
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
  if (open_loop)
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
  std::vector<LevelResult> results;
  bool any_error = false;
  for (double level = range.start; level <= range.end + 1e-9; level += range.step) {
    SP_ASSIGN_OR_RETURN(LevelResult r, driver.RunLevel(open_loop ? 0 : static_cast<int>(level), open_loop ? level : 0));
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

  if (!f.csv.empty()) {
    std::string csv = StrCat(open_loop ? "Request Rate" : "Concurrency",
                             ",Inferences/Second,Server Queue,Server Compute Input,Server Compute Infer,"
                             "Server Compute Output,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,"
                             "Errors\n");
    for (const auto& r : results) {
      char line[512];
      std::snprintf(line, sizeof(line), "%g,%.2f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%llu\n", r.level,
                    r.throughput, r.queue_us, r.compute_input_us, r.compute_infer_us, r.compute_output_us, r.p50_us,
                    r.p90_us, r.p95_us, r.p99_us, r.avg_us, static_cast<unsigned long long>(r.errors));
      csv += line;
    }
    SP_RETURN_IF_ERROR(WriteFile(f.csv, csv));
  }
  if (!f.json.empty()) {
    std::string j =
        StrCat("{\n  \"model\": ", JsonStr(f.model), ",\n  \"protocol\": ", JsonStr(f.protocol),
               ",\n  \"batch_size\": ", f.batch, ",\n  \"mode\": ", JsonStr(open_loop ? "request_rate" : "concurrency"),
               ",\n  \"measurement_interval_ms\": ", f.measurement_ms, ",\n  \"results\": [\n");
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      j += StrCat("    {\"level\": ", r.level, ", \"throughput_infer_per_s\": ", r.throughput,
                  ", \"requests_per_s\": ", r.request_rate, ", \"requests\": ", r.requests, ", \"errors\": ", r.errors,
                  ", \"stable\": ", r.stable ? "true" : "false", ", \"latency_us\": {\"avg\": ", r.avg_us,
                  ", \"p50\": ", r.p50_us, ", \"p90\": ", r.p90_us, ", \"p95\": ", r.p95_us, ", \"p99\": ", r.p99_us,
                  "}, \"server_us\": {\"request\": ", r.server_us, ", \"queue\": ", r.queue_us,
                  ", \"compute_input\": ", r.compute_input_us, ", \"compute_infer\": ", r.compute_infer_us,
                  ", \"compute_output\": ", r.compute_output_us, "}, \"server_avg_batch\": ", r.server_batch, "}",
                  i + 1 < results.size() ? ",\n" : "\n");
    }
    j += "  ]\n}\n";
    SP_RETURN_IF_ERROR(WriteFile(f.json, j));
  }
  if (!f.chart.empty()) SP_RETURN_IF_ERROR(WriteFile(f.chart, ChartSvg(results, f, open_loop)));
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
