// `sampan build`: ONNX -> optimized plan file. Accepts trtexec's flag names.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "builder/builder.h"
#include "cli/commands.h"
#include "cli/shapes.h"
#include "ir/text.h"
#include "onnx/importer.h"
#include "plan/signature.h"

namespace sampan::cli {

namespace {

struct BuildFlags {
  std::string onnx;
  std::string save;
  std::string sign;  //!< Ed25519 private key (PEM) to sign the plan with
  bool fp16 = false, bf16 = false, no_tf32 = false;
  std::string precision;
  std::vector<std::string> layer_precision;
  std::string min_shapes, opt_shapes, max_shapes;
  std::vector<std::string> profiles;
  std::string workspace;  //!< MiB: "N" or trtexec's "workspace:N"
  std::string timing_cache;
  std::string backend = "reference";
  std::vector<std::string> sim_profiles;
  std::string input_format;
  std::string mean, std_dev;
  int device = 0;
  int optimization_level = 3;
  bool verbose = false;
  bool portable = false;
  bool strict = false;
  bool dry_run = false;
  std::vector<std::string> disabled_passes;
  std::vector<std::string> dump_ir;
  // Implicit INT8.
  bool int8 = false;
  bool fp8 = false;
  std::string calib_data, calib_method, calib_cache;
  int calib_batches = 0;
  std::string accuracy_data, accuracy_metric;
  double accuracy_bound = std::nan("");
};

// One status line rewritten in place on a terminal; plain lines otherwise.
class Progress {
 public:
  Progress() : tty_(::isatty(STDERR_FILENO) == 1) {}
  void Update(const std::string& line) {
    if (tty_) {
      std::fprintf(stderr, "\r\033[K[build] %s", line.c_str());
    } else {
      std::fprintf(stderr, "[build] %s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  void Done() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool tty_;
};

Status RunBuild(const BuildFlags& f) {
  auto t0 = std::chrono::steady_clock::now();
  if (f.onnx.empty()) return InvalidArgument("no model: pass --onnx MODEL.onnx");
  if (f.save.empty() && !f.dry_run) return InvalidArgument("no output: pass --saveEngine PLAN (or --dry-run)");
  if (!f.sign.empty()) {
    if (f.dry_run) return InvalidArgument("--sign writes a signed plan: it does not go with --dry-run");
    SP_RETURN_IF_ERROR(plan::CheckSigningKey(f.sign).WithContext("--sign"));
  }
  builder::BuildConfig config;
  config.backend = f.backend;
  config.sim_profiles = f.sim_profiles;
  config.source_model = std::filesystem::path(f.onnx).filename().string();
  if (f.fp16 && f.bf16) return InvalidArgument("--fp16 and --bf16 are exclusive");
  std::string precision = !f.precision.empty() ? f.precision : f.fp16 ? "fp16" : f.bf16 ? "bf16" : "fp32";
  // --precision int8 is --int8; the layers it leaves keep --fp16/--bf16 or fp32. --precision fp8 is
  // --fp8, whose other layers run in FP16 unless --bf16 says otherwise (TensorRT's --fp8 --fp16).
  config.calibration.int8 = f.int8 || precision == "int8";
  config.calibration.fp8 = f.fp8 || precision == "fp8";
  if (precision == "int8") precision = f.fp16 ? "fp16" : f.bf16 ? "bf16" : "fp32";
  if (config.calibration.fp8 && (precision == "fp8" || (f.precision.empty() && !f.fp16 && !f.bf16)))
    precision = f.bf16 ? "bf16" : "fp16";
  SP_ASSIGN_OR_RETURN(config.precision, builder::ParsePrecision(precision));
  const bool quantize = config.calibration.quantize();
  if (!quantize && (!f.calib_data.empty() || !f.calib_cache.empty() || !f.calib_method.empty() || f.calib_batches != 0))
    return InvalidArgument("--calibData, --calib, --calibMethod and --calibBatches need --int8 or --fp8");
  // FP8 keeps the whole range (amax) unless a method is named: its 3 mantissa bits, not clipping,
  // carry the precision.
  if (config.calibration.fp8 && f.calib_method.empty()) config.calibration.method = builder::CalibMethod::kMinMax;
  config.calibration.data_dir = f.calib_data;
  config.calibration.cache_file = f.calib_cache;
  config.calibration.max_batches = f.calib_batches;
  if (f.calib_batches < 0) return InvalidArgument("--calibBatches must be >= 0, got ", f.calib_batches);
  if (!f.calib_method.empty()) SP_RETURN_IF_ERROR(builder::ParseCalibMethod(f.calib_method, &config.calibration));
  if (!quantize && (!f.accuracy_data.empty() || !f.accuracy_metric.empty() || f.accuracy_bound == f.accuracy_bound))
    return InvalidArgument("--accuracyData, --accuracyMetric and --accuracyBound need --int8 or --fp8");
  if (!f.accuracy_data.empty() != (f.accuracy_bound == f.accuracy_bound))
    return InvalidArgument("--accuracyData and --accuracyBound go together");
  config.calibration.accuracy_dir = f.accuracy_data;
  config.calibration.accuracy_bound = f.accuracy_bound;
  if (!f.accuracy_metric.empty()) {
    if (f.accuracy_metric != "cosine" && f.accuracy_metric != "rel_l2" && f.accuracy_metric != "top1")
      return InvalidArgument("--accuracyMetric '", f.accuracy_metric, "' is not one of cosine, rel_l2, top1");
    config.calibration.accuracy_metric = f.accuracy_metric;
  }
  config.allow_tf32 = !f.no_tf32;
  // trtexec's form: one flag with a comma-separated list (NAME:precision,NAME:precision).
  for (const auto& arg : f.layer_precision)
    for (const std::string& lp : Split(arg, ',')) {
      SP_ASSIGN_OR_RETURN(auto parsed, builder::ParseLayerPrecision(lp));
      config.layer_precision.push_back(parsed);
    }
  SP_ASSIGN_OR_RETURN(config.profiles, ParseProfiles(f.min_shapes, f.opt_shapes, f.max_shapes, f.profiles));
  config.disabled_passes.insert(f.disabled_passes.begin(), f.disabled_passes.end());
  if (!f.input_format.empty() || !f.mean.empty() || !f.std_dev.empty()) {
    // --input-format [NAME:]uint8-nhwc --mean R,G,B --std R,G,B
    builder::InputFormat fmt;
    std::string spec = f.input_format.empty() ? "uint8-nhwc" : f.input_format;
    if (auto colon = spec.rfind(':'); colon != std::string::npos) {
      fmt.input = spec.substr(0, colon);
      spec = spec.substr(colon + 1);
    }
    if (spec != "uint8-nhwc")
      return InvalidArgument("--input-format '", f.input_format, "': the format must be uint8-nhwc");
    auto floats = [](const std::string& text, const char* flag) -> Result<std::vector<float>> {
      std::vector<float> v;
      size_t pos = 0;
      while (!text.empty() && pos <= text.size()) {
        size_t comma = text.find(',', pos);
        std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        char* end = nullptr;
        const float x = std::strtof(item.c_str(), &end);
        if (item.empty() || *end != '\0') return InvalidArgument(flag, " '", text, "': '", item, "' is not a number");
        v.push_back(x);
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
      return v;
    };
    SP_ASSIGN_OR_RETURN(fmt.mean, floats(f.mean, "--mean"));
    SP_ASSIGN_OR_RETURN(fmt.std, floats(f.std_dev, "--std"));
    config.input_formats.push_back(fmt);
  }
  double workspace_mib = 0;
  if (!f.workspace.empty()) {
    std::string text = f.workspace;
    if (text.rfind("workspace:", 0) == 0) text = text.substr(10);
    char* end = nullptr;
    workspace_mib = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(workspace_mib >= 0) || workspace_mib > 1e9)
      return InvalidArgument("--workspace '", f.workspace,
                             "': a size in MiB >= 0, as N or workspace:N (the one memory pool Sampan has)");
  }
  config.workspace_bytes = static_cast<uint64_t>(workspace_mib * 1024 * 1024);
  config.timing_cache_file = f.timing_cache;
  // Only the cuda backend times tactics: the others say so for the flags that steer timing.
  if (f.backend != "cuda") {
    const char* why = f.backend == "reference" ? "has one kernel per op"
                      : f.backend == "sim"     ? "simulates a GPU from recorded latencies"
                                               : "chooses its kernels by shape and CPU ISA";
    if (!f.timing_cache.empty())
      std::fprintf(stderr,
                   "note: backend '%s' %s, so there are no tactics to time; --timingCacheFile is not read "
                   "or written\n",
                   f.backend.c_str(), why);
    if (f.optimization_level != 3)
      std::fprintf(stderr,
                   "note: backend '%s' %s, so there are no tactics to time; --builderOptimizationLevel has "
                   "no effect\n",
                   f.backend.c_str(), why);
    if (workspace_mib > 0)
      std::fprintf(stderr, "note: backend '%s' has no device workspace; --workspace has no effect\n",
                   f.backend.c_str());
  }
  config.portable = f.portable;
  config.device = f.device;
  config.optimization_level = f.optimization_level;
  config.strict = f.strict;
  config.dry_run = f.dry_run;
  std::set<std::string> dump(f.dump_ir.begin(), f.dump_ir.end());
  for (const auto& d : dump)
    if (d != "all" && d != "input" && d != "assign_precision" && passes::FindPass(d) == nullptr)
      return InvalidArgument("--dump-ir '", d, "': not a pass name (or 'all', 'input', 'assign_precision')");

  Progress progress;
  config.progress = [&](const std::string& line) { progress.Update(line); };
  config.after_pass = [&](const std::string& name, const ir::Graph& g) {
    if (dump.count("all") || dump.count(name)) {
      progress.Done();
      std::printf("=== IR after %s ===\n%s\n", name.c_str(), ir::PrintGraph(g).c_str());
    }
  };
  progress.Update("importing " + f.onnx);
  SP_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> graph, onnx_import::ImportModelFile(f.onnx));
  if (dump.count("input")) {
    progress.Done();
    std::printf("=== IR as imported ===\n%s\n", ir::PrintGraph(*graph).c_str());
  }
  builder::BuildReport report;
  SP_ASSIGN_OR_RETURN(plan::Plan plan, builder::Build(std::move(graph), config, &report));
  std::error_code ec;
  uintmax_t size = 0;
  if (!f.dry_run) {
    progress.Update("writing " + f.save);
    if (f.sign.empty()) {
      SP_RETURN_IF_ERROR(plan::WritePlan(plan, f.save));
    } else {
      SP_ASSIGN_OR_RETURN(std::string bytes, plan::SerializePlan(plan));
      SP_ASSIGN_OR_RETURN(std::string signed_bytes, plan::SignPlan(bytes, f.sign));
      SP_RETURN_IF_ERROR(plan::WritePlanBytes(signed_bytes, f.save));
    }
    size = std::filesystem::file_size(f.save, ec);
  }
  progress.Done();
  const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::printf("=== Build summary ===\n");
  std::printf("model:      %s\n", f.onnx.c_str());
  std::printf("backend:    %s\n", config.backend.c_str());
  std::printf("nodes:      %zu -> %zu\n", report.nodes_before, report.nodes_after);
  std::map<std::string, int> per_pass;
  for (const auto& r : report.rewrites) ++per_pass[r.pass];
  std::printf("rewrites:  ");
  if (per_pass.empty()) std::printf(" none");
  for (const auto& [pass, n] : per_pass) std::printf(" %s=%d", pass.c_str(), n);
  std::printf("\nprecision: ");
  for (const auto& [p, n] : report.precision_counts) std::printf(" %s=%zu", p.c_str(), n);
  std::printf(" (layers)\n");
  if (!report.kernel_counts.empty()) {
    std::printf("kernels:   ");
    for (const auto& [k, n] : report.kernel_counts) std::printf(" %s=%zu", k.c_str(), n);
    std::printf("\n");
  }
  if (report.capability_checked) {
    std::printf("host nodes: %zu%s\n", report.host_nodes.size(),
                report.host_nodes.empty() ? " (every node has a device kernel or is folded shape arithmetic)" : "");
    for (const auto& h : report.host_nodes) {
      // Reasons from the kernel factories start with the node's label: print it once.
      std::string why = h.reason;
      if (why.rfind(h.node + ": ", 0) == 0) why = why.substr(h.node.size() + 2);
      std::printf("  %-56s %s\n", h.node.c_str(), why.c_str());
    }
  }
  if (report.int8) {
    const builder::QuantizationReport& q = report.quantization;
    std::printf("%s:       %zu layers quantized, %zu left in float; calibration %s on %lld samples; cache %s%s\n",
                config.calibration.fp8 ? "fp8 " : "int8", q.quantized.size(), q.skipped.size(), q.method.c_str(),
                static_cast<long long>(q.samples), q.cache_hash.c_str(),
                q.cache_read      ? " (read)"
                : q.cache_written ? StrCat(" (written to ", config.calibration.cache_file, ")").c_str()
                                  : "");
    if (f.verbose)
      for (const auto& s : q.skipped) std::printf("  float: %s\n", s.c_str());
    if (!q.metric.empty()) {
      std::printf("accuracy:   %s = %.6g (bound %g) with %zu layer%s back in float by the gate\n", q.metric.c_str(),
                  q.accuracy, q.bound, q.fell_back.size(), q.fell_back.size() == 1 ? "" : "s");
      for (const auto& [n, fig] : q.evaluations) std::printf("  %zu in float: %s = %.6g\n", n, q.metric.c_str(), fig);
      // Each layer's own quantization error (relative L2 of its output), largest first.
      auto order = q.layer_errors;
      std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      const size_t shown = f.verbose ? order.size() : std::min<size_t>(order.size(), 5);
      std::printf("layer quantization error (relative L2 of each layer's output, %s):\n",
                  f.verbose ? "all" : "largest 5; --verbose lists all");
      for (size_t i = 0; i < shown; ++i) {
        const bool back = std::find(q.fell_back.begin(), q.fell_back.end(), order[i].first) != q.fell_back.end();
        std::printf("  %-48s %.4g%s\n", order[i].first.c_str(), order[i].second, back ? "  (float)" : "");
      }
    }
  }
  if (report.tuning_ms > 0) std::printf("tuning:     %.1f ms\n", report.tuning_ms);
  if (!config.profiles.empty()) std::printf("profiles:   %zu\n", config.profiles.size());
  if (f.dry_run)
    std::printf("plan:       none written (--dry-run)\n");
  else
    std::printf("plan:       %s (%.2f MiB)\n", f.save.c_str(), static_cast<double>(size) / (1024.0 * 1024.0));
  if (!f.sign.empty()) std::printf("signed:     Ed25519, key %s\n", f.sign.c_str());
  std::printf("build time: %.1f ms\n", total_ms);
  if (f.verbose) {
    std::printf("--- passes ---\n");
    for (const auto& s : report.passes)
      std::printf("  %-24s %-8s %8.2f ms  %zu -> %zu nodes\n", s.name.c_str(), s.enabled ? "ran" : "disabled", s.ms,
                  s.nodes_before, s.nodes_after);
    std::printf("--- rewrites ---\n");
    for (const auto& r : report.rewrites) std::printf("  [%s] %s\n", r.pass.c_str(), r.description.c_str());
    std::printf("--- layers ---\n");
    for (const auto& n : plan.graph->nodes()) {
      auto c = plan.choices.find(n->name);
      std::printf("  %-48s %-22s %-5s %s\n", n->name.c_str(),
                  (n->domain.empty() ? n->op_type : n->domain + "::" + n->op_type).c_str(),
                  c == plan.choices.end() ? "-" : c->second.precision.c_str(),
                  c == plan.choices.end() ? "" : c->second.tactic.ToString().c_str());
    }
    if (!report.backend_notes.empty()) {
      std::printf("--- backend ---\n");
      for (const auto& line : report.backend_notes) std::printf("  %s\n", line.c_str());
    }
  }
  return Status::Ok();
}

}  // namespace

void AddBuildCommand(CLI::App& app) {
  auto f = std::make_shared<BuildFlags>();
  CLI::App* cmd = app.add_subcommand("build", "Compile an ONNX model into an optimized plan file");
  cmd->add_option("model", f->onnx, "ONNX model (same as --onnx)");
  cmd->add_option("--onnx", f->onnx, "ONNX model to build");
  cmd->add_option("--saveEngine,--save-engine,-o", f->save, "Where to write the plan");
  cmd->add_option("--sign", f->sign,
                  "Sign the plan with this Ed25519 private key (PEM; `openssl genpkey -algorithm ed25519`): "
                  "`sampan serve --plan-trust` then refuses plans not signed by a trusted key");
  cmd->add_flag("--fp16", f->fp16, "Allow FP16 layers");
  cmd->add_flag("--bf16", f->bf16, "Allow BF16 layers");
  cmd->add_flag("--noTF32,--no-tf32", f->no_tf32, "Disable TF32 for FP32 layers");
  cmd->add_option("--precision", f->precision,
                  "Default layer precision: fp32, tf32, fp16, bf16; int8 = --int8, fp8 = --fp8");
  cmd->add_flag("--int8", f->int8,
                "Quantize Conv/MatMul/Gemm layers to INT8 by calibration (--calibData or a matching --calib cache); "
                "other layers keep --fp16/--bf16 or fp32");
  cmd->add_flag("--fp8", f->fp8,
                "Quantize MatMul/Gemm layers to FP8 (e4m3, per-tensor scales, minmax calibration unless --calibMethod) "
                "by calibration; cuda backend on sm_89+ (cuBLASLt FP8); other layers FP16 unless --bf16");
  cmd->add_option("--calibData", f->calib_data,
                  "Directory of calibration samples, INPUT.K.npy (one per graph input per sample, K = 0, 1, ...)");
  cmd->add_option("--calibMethod", f->calib_method,
                  "Activation threshold: entropy (default, TensorRT's KL divergence), minmax, percentile[=99.99]");
  cmd->add_option("--calibBatches", f->calib_batches, "Use at most N calibration samples (default: all)");
  cmd->add_option("--accuracyData", f->accuracy_data,
                  "Held-out samples (INPUT.K.npy) for the INT8 accuracy gate against the float graph");
  cmd->add_option("--accuracyMetric", f->accuracy_metric,
                  "Gate metric: cosine (default; worst sample), rel_l2 (worst sample), top1 (agreement share)");
  cmd->add_option("--accuracyBound", f->accuracy_bound,
                  "Gate bound: cosine/top1 at least X, rel_l2 at most X; missed: layers back to float, largest own "
                  "error first (--strict: refuse)");
  cmd->add_option(
      "--calib", f->calib_cache,
      "Calibration cache: read instead of calibrating when it matches the graph, written after calibrating");
  cmd->add_option("--layer-precision,--layerPrecisions", f->layer_precision,
                  "Per-layer override NAME_GLOB:precision, or a comma-separated list of them (repeatable; later wins)");
  cmd->add_option("--minShapes,--min-shapes", f->min_shapes, "Profile minimum shapes: name:1x3x224x224,...");
  cmd->add_option("--optShapes,--opt-shapes", f->opt_shapes, "Profile optimum shapes");
  cmd->add_option("--maxShapes,--max-shapes", f->max_shapes, "Profile maximum shapes");
  cmd->add_option("--profile", f->profiles, "Another profile: name:MIN/OPT/MAX,... (repeatable)");
  cmd->add_option("--workspace,--memPoolSize", f->workspace,
                  "Device scratch limit per layer in MiB, N or workspace:N (cuda: tactics needing more are not "
                  "chosen; 0 = no limit)");
  cmd->add_option("--timingCacheFile,--timing-cache-file", f->timing_cache, "Tactic timing cache (read and updated)");
  cmd->add_option("--backend", f->backend,
                  "Backend: reference, cpu, cuda, or sim, a SIMULATED GPU for cluster rehearsals (those in this "
                  "build)");
  cmd->add_option("--sim-profile", f->sim_profiles,
                  "--backend sim: a `sampan bench --json` file of the GPU plan to simulate, one per batch size "
                  "(repeatable); the plan waits their latency instead of computing");
  cmd->add_option("--input-format", f->input_format,
                  "[INPUT:]uint8-nhwc: take raw 8-bit HWC images for a float NCHW input, normalised on the device");
  cmd->add_option("--mean", f->mean,
                  "With --input-format: per-channel mean in pixel units, e.g. 123.675,116.28,103.53");
  cmd->add_option("--std", f->std_dev, "With --input-format: per-channel std in pixel units, e.g. 58.395,57.12,57.375");
  cmd->add_option("--device", f->device, "Device ordinal to build and tune on (cuda)");
  cmd->add_option("--builderOptimizationLevel,--optimization-level", f->optimization_level,
                  "Builder effort 0..5 (cuda): 0 takes the libraries' heuristic choice untimed; 1..5 time every "
                  "candidate, 3 + 4 x level runs each (default 3)")
      ->check(CLI::Range(0, 5));
  cmd->add_flag("--portable", f->portable,
                "Do not bind the plan to this device: it loads on any machine with its backend, with the tactics "
                "chosen here (not re-tuned)");
  cmd->add_flag("--strict", f->strict, "Refuse the build when any node would run on the host (device backends)");
  cmd->add_flag("--dry-run", f->dry_run,
                "Run the passes and the backend's capability query only: print the nodes left on the host and why, "
                "write no plan (no device needed)");
  cmd->add_option("--disable-pass", f->disabled_passes, "Skip an optimization pass by name (repeatable)");
  cmd->add_option("--dump-ir", f->dump_ir, "Print the IR after a pass (name, 'input', or 'all'; repeatable)");
  cmd->add_flag("--verbose,-v", f->verbose, "Report every pass, rewrite and layer");
  cmd->callback([f]() {
    Status st = RunBuild(*f);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
      ExitCode() = 1;
    }
  });
}

}  // namespace sampan::cli
