// `sampan bench`: times a plan the way trtexec does.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <thread>

#include "base/report_util.h"
#include "cli/commands.h"
#include "cli/inputs.h"
#include "cli/shapes.h"
#include "runtime/engine.h"

namespace sampan::cli {

namespace {

struct BenchFlags {
  std::string plan;
  std::string shapes;
  int device = 0;
  int threads = 0;
  double warmup_ms = 200;
  int iterations = 10;
  double duration_s = 3;
  int streams = 1;
  bool cuda_graph = false;
  bool no_data_transfers = false;
  bool no_overlap = false;
  std::string export_times;
  std::string json;
  uint64_t seed = 0;
};

struct Sample {
  double start_ms;  // since the timed phase began
  double latency_ms;
  runtime::Timing timing;
};

struct Stats {
  double min, max, mean, median, p90, p95, p99, stddev;
};
Stats Summarize(const std::vector<double>& v) {
  Stats s{};
  if (v.empty()) return s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  double sq = 0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.stddev = std::sqrt(sq / static_cast<double>(v.size()));
  s.median = NearestRankPercentile(v, 50);
  s.p90 = NearestRankPercentile(v, 90);
  s.p95 = NearestRankPercentile(v, 95);
  s.p99 = NearestRankPercentile(v, 99);
  return s;
}

std::string StatsLine(const Stats& s) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "min = %.5g ms, max = %.5g ms, mean = %.5g ms, median = %.5g ms, percentile(90%%) = %.5g ms, "
                "percentile(95%%) = %.5g ms, percentile(99%%) = %.5g ms",
                s.min, s.max, s.mean, s.median, s.p90, s.p95, s.p99);
  return buf;
}

std::string StatsJson(const Stats& s) {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "{\"min\": %.6g, \"max\": %.6g, \"mean\": %.6g, \"median\": %.6g, \"p90\": %.6g, \"p95\": %.6g, "
                "\"p99\": %.6g, \"stddev\": %.6g}",
                s.min, s.max, s.mean, s.median, s.p90, s.p95, s.p99, s.stddev);
  return buf;
}

Status RunBench(const BenchFlags& f) {
  if (f.plan.empty()) return InvalidArgument("no plan: pass --loadEngine PLAN");
  if (f.iterations < 1) return InvalidArgument("--iterations must be >= 1");
  if (f.streams < 1 || f.streams > 256) return InvalidArgument("--streams must be in 1..256");
  if (f.duration_s < 0 || f.warmup_ms < 0) return InvalidArgument("--duration and --warmUp must be >= 0");
  runtime::EngineOptions eo;
  eo.device = f.device;
  eo.threads = f.threads;
  eo.use_cuda_graph = f.cuda_graph;
  SP_ASSIGN_OR_RETURN(auto engine, runtime::Engine::Load(f.plan, eo));
  const ir::Graph& graph = engine->graph();
  SP_ASSIGN_OR_RETURN(auto shapes, ParseShapeList(f.shapes, "--shapes"));
  // Inputs not given with --shapes run at the first profile's opt shape.
  if (!engine->plan().profiles.empty())
    for (const auto& [name, r] : engine->plan().profiles[0]) shapes.emplace(name, r.opt);
  InputSpec spec;
  spec.random = true;
  spec.seed = f.seed;
  spec.shapes = shapes;
  SP_ASSIGN_OR_RETURN(auto inputs, PrepareInputs(graph, spec));
  const int64_t batch = inputs.empty() || inputs.begin()->second.rank() == 0 ? 1 : inputs.begin()->second.dim(0);
  if (f.cuda_graph && engine->plan().fingerprint.backend != "cuda")
    std::fprintf(stderr, "note: --useCudaGraph has no effect on backend '%s'\n",
                 engine->plan().fingerprint.backend.c_str());

  std::vector<std::unique_ptr<runtime::Context>> contexts;
  for (int s = 0; s < f.streams; ++s) {
    SP_ASSIGN_OR_RETURN(auto ctx, engine->CreateContext());
    if (f.no_data_transfers) SP_RETURN_IF_ERROR(ctx->SetDataTransfers(false));
    contexts.push_back(std::move(ctx));
  }
  // Warm-up: every stream runs until the warm-up time has passed (at least once).
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  std::vector<Status> errors(static_cast<size_t>(f.streams));
  auto warm_start = Clock::now();
  {
    std::vector<std::thread> threads;
    for (int s = 0; s < f.streams; ++s)
      threads.emplace_back([&, s]() {
        do {
          auto r = contexts[static_cast<size_t>(s)]->Run(inputs);
          if (!r.ok()) {
            errors[static_cast<size_t>(s)] = r.status();
            return;
          }
        } while (ms_since(warm_start) < f.warmup_ms);
      });
    for (auto& t : threads) t.join();
  }
  for (const auto& e : errors) SP_RETURN_IF_ERROR(e);

  // Timed phase: at least `iterations` inferences in total and at least `duration`. Runs in
  // flight per stream: what the backend can overlap (the cuda backend with data transfers
  // off: 2), unless --noOverlap.
  const int depth = f.no_overlap ? 1 : contexts.front()->max_in_flight();
  std::vector<std::vector<Sample>> samples(static_cast<size_t>(f.streams));
  std::atomic<int> done{0};
  auto start = Clock::now();
  {
    std::vector<std::thread> threads;
    for (int s = 0; s < f.streams; ++s)
      threads.emplace_back([&, s]() {
        auto& mine = samples[static_cast<size_t>(s)];
        Status& error = errors[static_cast<size_t>(s)];
        runtime::Context& ctx = *contexts[static_cast<size_t>(s)];
        if (depth == 1) {
          while (done.load() < f.iterations || ms_since(start) < f.duration_s * 1000.0) {
            double t0 = ms_since(start);
            auto r = ctx.Run(inputs);
            double t1 = ms_since(start);
            if (!r.ok()) {
              error = r.status();
              return;
            }
            mine.push_back(Sample{t0, t1 - t0, ctx.last_timing()});
            done.fetch_add(1);
          }
          return;
        }
        // Overlapped, as trtexec runs: the next inference is enqueued while the one before
        // computes; a run's latency is its device time (upload + compute + download).
        std::deque<double> started;
        auto finish_one = [&]() {
          auto t = ctx.Finish();
          if (!t.ok()) {
            if (error.ok()) error = t.status();
            return false;
          }
          mine.push_back(Sample{started.front(), t->h2d_ms + t->compute_ms + t->d2h_ms, *t});
          started.pop_front();
          done.fetch_add(1);
          return true;
        };
        while (done.load() + static_cast<int>(started.size()) < f.iterations ||
               ms_since(start) < f.duration_s * 1000.0) {
          if (static_cast<int>(started.size()) == depth && !finish_one()) return;
          started.push_back(ms_since(start));
          if (Status st = ctx.Enqueue(inputs); !st.ok()) {
            error = st;
            started.pop_back();
            break;
          }
        }
        while (!started.empty())
          if (!finish_one()) return;
      });
    for (auto& t : threads) t.join();
  }
  const double wall_ms = ms_since(start);
  for (const auto& e : errors) SP_RETURN_IF_ERROR(e);

  std::vector<Sample> all;
  for (auto& v : samples) all.insert(all.end(), v.begin(), v.end());
  std::vector<double> lat, enq, h2d, comp, d2h;
  for (const Sample& s : all) {
    lat.push_back(s.latency_ms);
    enq.push_back(s.timing.enqueue_ms);
    h2d.push_back(s.timing.h2d_ms);
    comp.push_back(s.timing.compute_ms);
    d2h.push_back(s.timing.d2h_ms);
  }
  const Stats L = Summarize(lat), E = Summarize(enq), H = Summarize(h2d), C = Summarize(comp), D = Summarize(d2h);
  const double qps = static_cast<double>(all.size()) / (wall_ms / 1000.0);
  double compute_total = 0;
  for (double c : comp) compute_total += c;
  const bool has_transfers = H.max > 0 || D.max > 0;

  std::printf("=== Performance summary ===\n");
  std::printf("Plan: %s (backend %s, %d stream%s, batch %lld%s)\n", f.plan.c_str(),
              engine->plan().fingerprint.backend.c_str(), f.streams, f.streams > 1 ? "s" : "",
              static_cast<long long>(batch),
              depth > 1 ? StrCat(", ", depth, " inferences in flight per stream").c_str() : "");
  if (const std::string runs_on = engine->backend_engine().Describe(); !runs_on.empty())
    std::printf("Runs on: %s\n", runs_on.c_str());
  std::printf("Throughput: %.5g qps, %.5g items/s\n", qps, qps * static_cast<double>(batch));
  std::printf("Latency%s: %s\n", depth > 1 ? " (device time of each inference; runs overlapped)" : "",
              StatsLine(L).c_str());
  std::printf("Enqueue Time: %s\n", StatsLine(E).c_str());
  if (has_transfers && !f.no_data_transfers) {
    std::printf("H2D Latency: %s\n", StatsLine(H).c_str());
    std::printf("Compute Time: %s\n", StatsLine(C).c_str());
    std::printf("D2H Latency: %s\n", StatsLine(D).c_str());
  } else {
    std::printf("Compute Time: %s\n", StatsLine(C).c_str());
    if (f.no_data_transfers)
      std::printf("H2D/D2H: left out (--noDataTransfers: inputs stay on the device, outputs are not copied back)\n");
    else
      std::printf("H2D/D2H: none (host backend: inputs and outputs stay in host memory)\n");
  }
  std::printf("Total Host Walltime: %.5g s\n", wall_ms / 1000.0);
  std::printf("Total Compute Time: %.5g s\n", compute_total / 1000.0);
  std::printf("Inferences: %zu\n", all.size());
  const double cv = L.mean > 0 ? L.stddev / L.mean : 0;
  const bool unstable = cv > 0.10 || all.size() < 10;
  if (unstable)
    std::printf(
        "* Warning: results are unstable (latency coefficient of variation %.1f%%, %zu samples): "
        "run longer (--duration) or quiet the machine\n",
        cv * 100.0, all.size());

  if (!f.json.empty()) {
    std::ofstream j(f.json);
    if (!j) return IoError("cannot write '", f.json, "'");
    j << "{\n  \"plan\": " << JsonQuote(f.plan) << ",\n  \"backend\": " << JsonQuote(engine->plan().fingerprint.backend)
      << ",\n  \"runs_on\": " << JsonQuote(engine->backend_engine().Describe()) << ",\n  \"streams\": " << f.streams
      << ",\n  \"in_flight\": " << depth << ",\n  \"batch\": " << batch
      << ",\n  \"data_transfers\": " << (f.no_data_transfers ? "false" : "true")
      << ",\n  \"inferences\": " << all.size() << ",\n  \"walltime_s\": " << wall_ms / 1000.0
      << ",\n  \"throughput_qps\": " << qps << ",\n  \"throughput_items_per_s\": " << qps * static_cast<double>(batch)
      << ",\n  \"latency_ms\": " << StatsJson(L) << ",\n  \"enqueue_ms\": " << StatsJson(E)
      << ",\n  \"h2d_ms\": " << StatsJson(H) << ",\n  \"compute_ms\": " << StatsJson(C)
      << ",\n  \"d2h_ms\": " << StatsJson(D) << ",\n  \"unstable\": " << (unstable ? "true" : "false") << "\n}\n";
  }
  if (!f.export_times.empty()) {
    std::ofstream t(f.export_times);
    if (!t) return IoError("cannot write '", f.export_times, "'");
    t << "[\n";
    for (size_t i = 0; i < all.size(); ++i) {
      const Sample& s = all[i];
      t << "  {\"startMs\": " << s.start_ms << ", \"latencyMs\": " << s.latency_ms
        << ", \"enqueueMs\": " << s.timing.enqueue_ms << ", \"h2dMs\": " << s.timing.h2d_ms
        << ", \"computeMs\": " << s.timing.compute_ms << ", \"d2hMs\": " << s.timing.d2h_ms << "}"
        << (i + 1 < all.size() ? "," : "") << "\n";
    }
    t << "]\n";
  }
  return Status::Ok();
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "Time a plan (trtexec-style performance summary)");
  cmd->add_option("plan", f->plan, "Plan file (same as --loadEngine)");
  cmd->add_option("--loadEngine,--load-engine", f->plan, "Plan file to time");
  cmd->add_option("--shapes", f->shapes, "Input shapes: name:1x3x224x224,... (default: first profile's opt)");
  cmd->add_option("--warmUp,--warm-up", f->warmup_ms, "Warm-up time in ms (default 200)");
  cmd->add_option("--device", f->device, "Device ordinal (cuda)");
  cmd->add_option("--threads", f->threads, "CPU threads per engine (cpu; default: cores available)");
  cmd->add_flag("--noOverlap,--no-overlap", f->no_overlap,
                "Run each inference to the end before enqueuing the next (default: overlap where the backend can, "
                "as trtexec does; the cuda backend overlaps two with --noDataTransfers)");
  cmd->add_option("--iterations", f->iterations, "Minimum number of timed inferences (default 10)");
  cmd->add_option("--duration", f->duration_s, "Minimum timed duration in seconds (default 3)");
  cmd->add_option("--streams", f->streams, "Concurrent contexts, each on its own thread (default 1)");
  cmd->add_flag("--useCudaGraph,--use-cuda-graph", f->cuda_graph, "Capture and replay CUDA graphs (CUDA backend)");
  cmd->add_flag("--noDataTransfers,--no-data-transfers", f->no_data_transfers, "Leave host<->device copies out");
  cmd->add_option("--exportTimes,--export-times", f->export_times, "Write every inference's timing as JSON");
  cmd->add_option("--json", f->json, "Write the summary as JSON");
  cmd->add_option("--seed", f->seed, "Seed for the random inputs");
  cmd->callback([f]() {
    Status st = RunBench(*f);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
      ExitCode() = 1;
    }
  });
}

}  // namespace sampan::cli
