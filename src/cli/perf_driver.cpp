// `sampan perf`'s load engine: closed-loop workers or an open-loop schedule, each level
// measured in windows until three agree (perf_analyzer's stability rule), with the server's own
// time breakdown from its statistics over the same windows. Sequence models: each worker runs
// its own sequences, one correlation ID at a time.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>

#include "base/report_util.h"
#include "cli/perf.h"

namespace sampan::cli {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Result<std::unique_ptr<client::Client>> Driver::Connect() {
  return f_.protocol == "grpc" ? client::MakeGrpcClient(host_, port_) : client::MakeHttpClient(host_, port_);
}

Result<LevelResult> Driver::RunLevel(int concurrency, double rate) {
  const bool open_loop = rate > 0;
  // Open loop: each sender has one request in flight, so `rate` requests/s of up to 500 ms each
  // need rate / 2 of them (was rate / 10: a server answering in 500 ms under overload could not
  // be offered more than 2 requests/s a sender, and the schedule fell behind as if the server
  // stalled); --max-threads caps them.
  const int workers =
      open_loop ? std::max(1, std::min(f_.max_threads, static_cast<int>(std::ceil(rate / 2.0)) + 4)) : concurrency;
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
    size_t k = 0;
    while (t < horizon) {
      due_s.push_back(t);
      if (!intervals_s_.empty())
        t += intervals_s_[k++ % intervals_s_.size()];
      else
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

void Driver::BeginSequence(client::SequenceStep* seq, int64_t* left, uint64_t salt) {
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

void Driver::EndSequence(uint64_t id) {
  std::lock_guard<std::mutex> lock(id_mu_);
  in_progress_.erase(id);
}

LevelResult Driver::Summarize(std::vector<double>& lat, double secs, uint64_t errors) const {
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
  // Nearest rank over successes and failures, failures ranked last (infinitely late).
  const uint64_t all = lat.size() + errors;
  const auto rank = static_cast<uint64_t>(std::ceil(0.99 * static_cast<double>(all)));
  if (all == 0)
    r.p99_failed_as_late_us = 0;
  else if (rank > lat.size())
    r.p99_failed_as_late_us = std::numeric_limits<double>::infinity();
  else {
    const auto k = static_cast<std::ptrdiff_t>(std::max<uint64_t>(rank, 1) - 1);
    std::nth_element(lat.begin(), lat.begin() + k, lat.end());
    r.p99_failed_as_late_us = lat[static_cast<size_t>(k)];
  }
  return r;
}

double Driver::StabilityLatency(const LevelResult& r) const {
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

bool Driver::Stable(const std::vector<LevelResult>& w) const {
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

}  // namespace sampan::cli
