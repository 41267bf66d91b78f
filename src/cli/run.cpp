// `sampan run MODEL.onnx`: run a model once and show/save its outputs.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/npy.h"
#include "builder/builder.h"
#include "cli/commands.h"
#include "cli/inputs.h"
#include "onnx/importer.h"
#include "passes/pass.h"
#include "plan/plan.h"
#include "runtime/engine.h"

namespace sampan::cli {

namespace {

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;
  std::vector<std::string> shapes;
  bool random_inputs = false;
  uint64_t seed = 0;
  std::string output_dir;
  std::string backend;  //!< "" = the plan's own backend, or reference for an ONNX model
  int device = 0;
  int threads = 0;
  bool optimize = false;
  std::vector<std::string> disabled_passes;
  bool verbose = false;
};

std::string Summarize(const Tensor& t) {
  if (t.numel() == 0) return "empty";
  if (t.is_string()) {
    std::string s = "first [";
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 6); ++i) {
      const std::string& e = t.strings()[i];
      s += StrCat(i ? ", " : "", "\"", e.size() > 40 ? e.substr(0, 40) + "..." : e, "\"");
    }
    return s + (t.numel() > 6 ? ", ...]" : "]");
  }
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  int64_t nan = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = ElementAsDouble(t, i);
    if (std::isnan(v)) {
      ++nan;
      continue;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  std::string s = StrCat("min ", lo, "  max ", hi, "  mean ", sum / static_cast<double>(t.numel() - nan));
  if (nan) s += StrCat("  NaN x", nan);
  s += "  first [";
  for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 6); ++i) s += StrCat(i ? ", " : "", ElementAsDouble(t, i));
  return s + (t.numel() > 6 ? ", ...]" : "]");
}

// --verbose: each pass (ran or skipped, time, nodes before and after), then every rewrite.
void PrintPasses(const std::vector<passes::PassStats>& stats, const std::vector<passes::Rewrite>& rewrites) {
  for (const auto& s : stats)
    std::printf("  pass %-24s %s %7.2f ms  %zu -> %zu nodes\n", s.name.c_str(), s.enabled ? "ran    " : "skipped", s.ms,
                s.nodes_before, s.nodes_after);
  for (const auto& r : rewrites) std::printf("  [%s] %s\n", r.pass.c_str(), r.description.c_str());
}

Status RunModel(const RunOptions& given) {
  RunOptions opt = given;
  const bool is_plan = plan::LooksLikePlan(opt.model);
  if (opt.backend.empty()) opt.backend = "reference";
  if (!runtime::FindBackend(opt.backend)) {
    std::string names;
    for (const auto& n : runtime::BackendNames()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgument("--backend '", opt.backend, "' is not in this build (available: ", names, ")");
  }
  runtime::EngineOptions eo;
  eo.device = opt.device;
  eo.threads = opt.threads;
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<runtime::Engine> engine;
  if (is_plan) {
    if (opt.optimize) return InvalidArgument("--optimize applies to ONNX models; a plan is already optimized");
    if (opt.verbose)
      return InvalidArgument(
          "--verbose reports the passes of a build; a plan is already built (see sampan build --verbose)");
    SP_ASSIGN_OR_RETURN(engine, runtime::Engine::Load(opt.model, eo));
    // A plan runs on the backend it was built for; a different --backend is a mistake, not a choice.
    const std::string built =
        engine->plan().fingerprint.backend.empty() ? "reference" : engine->plan().fingerprint.backend;
    if (!given.backend.empty() && given.backend != built)
      return InvalidArgument("--backend ", given.backend, ": the plan '", opt.model, "' was built for backend '", built,
                             "' (build it again with --backend ", given.backend, ")");
    opt.backend = built;
  } else if (opt.backend != "reference") {
    // Optimized backends run what `sampan build` makes (passes, precision, lowering), so
    // --optimize is what they do anyway.
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> graph, onnx_import::ImportModelFile(opt.model));
    builder::BuildConfig config;
    config.backend = opt.backend;
    config.device = opt.device;
    config.source_model = opt.model;
    config.disabled_passes.insert(opt.disabled_passes.begin(), opt.disabled_passes.end());
    const size_t before = graph->nodes().size();
    builder::BuildReport report;
    SP_ASSIGN_OR_RETURN(plan::Plan p, builder::Build(std::move(graph), config, &report));
    if (opt.verbose) {
      std::printf("optimized: %zu -> %zu nodes\n", before, p.graph->nodes().size());
      PrintPasses(report.passes, report.rewrites);
    }
    SP_ASSIGN_OR_RETURN(engine, runtime::Engine::Create(std::move(p), eo));
  } else {
    if (opt.verbose && !opt.optimize)
      return InvalidArgument("--verbose reports the optimization passes: with --backend reference, add --optimize");
    SP_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> graph, onnx_import::ImportModelFile(opt.model));
    if (opt.optimize) {
      passes::PassManagerOptions pm_opts;
      pm_opts.disabled.insert(opt.disabled_passes.begin(), opt.disabled_passes.end());
      passes::PassManager pm(pm_opts);
      const size_t before = graph->nodes().size();
      SP_RETURN_IF_ERROR(pm.Run(*graph));
      std::printf("optimized: %zu -> %zu nodes\n", before, graph->nodes().size());
      if (opt.verbose) PrintPasses(pm.stats(), pm.context().rewrites);
    }
    plan::Plan p;
    p.graph = std::move(graph);
    p.fingerprint = plan::CurrentFingerprint(opt.backend);
    SP_ASSIGN_OR_RETURN(engine, runtime::Engine::Create(std::move(p), eo));
  }
  auto t1 = std::chrono::steady_clock::now();
  InputSpec spec;
  SP_ASSIGN_OR_RETURN(spec.files, ParseFileArgs(opt.inputs));
  SP_ASSIGN_OR_RETURN(spec.shapes, ParseShapeArgs(opt.shapes));
  spec.random = opt.random_inputs;
  spec.seed = opt.seed;
  SP_ASSIGN_OR_RETURN(auto inputs, PrepareInputs(engine->graph(), spec));
  SP_ASSIGN_OR_RETURN(auto context, engine->CreateContext());
  auto t2 = std::chrono::steady_clock::now();
  SP_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, context->Run(inputs));
  auto t3 = std::chrono::steady_clock::now();
  const ir::Graph* shared = &engine->graph();

  if (!opt.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.output_dir, ec);
    if (ec) return IoError("cannot create output directory '", opt.output_dir, "': ", ec.message());
  }
  for (const auto& [name, t] : inputs) std::printf("input  %-24s %s\n", name.c_str(), t.Describe().c_str());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = shared->outputs()[i]->name();
    std::printf("output %-24s %s  %s\n", name.c_str(), outputs[i].Describe().c_str(), Summarize(outputs[i]).c_str());
    if (!opt.output_dir.empty()) {
      std::string safe = name;
      for (char& c : safe)
        if (c == '/' || c == '\\' || c == ':') c = '_';
      SP_RETURN_IF_ERROR(WriteNpy((std::filesystem::path(opt.output_dir) / (safe + ".npy")).string(), outputs[i]));
    }
  }
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::printf("load %.1f ms, run %.1f ms (backend %s)\n", ms(t0, t1), ms(t2, t3), opt.backend.c_str());
  if (!opt.output_dir.empty()) std::printf("outputs written to %s\n", opt.output_dir.c_str());
  return Status::Ok();
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model once and print (and optionally save) its outputs");
  cmd->add_option("model", opt->model, "Model file (.onnx) or plan (from sampan build)")->required();
  cmd->add_option("--input", opt->inputs, "Input tensor from a .npy file: NAME=FILE.npy (repeatable)");
  cmd->add_flag("--random-inputs", opt->random_inputs, "Fill inputs not given with --input with random data");
  cmd->add_option("--shape", opt->shapes, "Shape for a random input: NAME=1x3x224x224 (repeatable)");
  cmd->add_option("--seed", opt->seed, "Seed for --random-inputs");
  cmd->add_option("--output-dir", opt->output_dir, "Write each output as OUTPUT_NAME.npy here");
  cmd->add_option("--backend", opt->backend,
                  "Backend: reference (ONNX as imported), cpu or cuda (an ONNX model is built for it first)");
  cmd->add_option("--device", opt->device, "Device ordinal (cuda)");
  cmd->add_option("--threads", opt->threads, "CPU threads (cpu; default: cores available)");
  cmd->add_flag("--optimize", opt->optimize,
                "Run the graph optimization passes before executing (cpu and cuda always do)");
  cmd->add_option("--disable-pass", opt->disabled_passes, "Skip an optimization pass by name (repeatable)");
  cmd->add_flag("--verbose", opt->verbose,
                "Report each pass and every rewrite it made (cpu and cuda; reference with --optimize)");
  cmd->callback([opt]() {
    Status st = RunModel(*opt);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
      ExitCode() = 1;
    }
  });
}

}  // namespace sampan::cli
