#include "builder/builder.h"

#include <chrono>
#include <ctime>
#include <set>

#include "base/report_util.h"
#include "builder/backend_builder.h"
#include "ops/run_node.h"

namespace sampan::builder {

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFP32:
      return "fp32";
    case Precision::kTF32:
      return "tf32";
    case Precision::kFP16:
      return "fp16";
    case Precision::kBF16:
      return "bf16";
  }
  return "?";
}

Result<Precision> ParsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFP32;
  if (name == "tf32") return Precision::kTF32;
  if (name == "fp16") return Precision::kFP16;
  if (name == "bf16") return Precision::kBF16;
  if (name == "int8")
    return InvalidArgument(
        "int8 is not a float layer precision: quantize with --int8 --calibData DIR (implicit), or "
        "build a model holding QuantizeLinear/DequantizeLinear nodes (explicit)");
  if (name == "fp8")
    return InvalidArgument(
        "fp8 is not a float layer precision: quantize with --fp8 --calibData DIR (implicit), or "
        "build a model holding float8 QuantizeLinear/DequantizeLinear nodes (explicit)");
  return InvalidArgument("unknown precision '", name, "' (use fp32, tf32, fp16 or bf16)");
}

Result<LayerPrecision> ParseLayerPrecision(const std::string& arg) {
  size_t colon = arg.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return InvalidArgument("--layer-precision '", arg, "' must look like NAME_GLOB:fp32");
  SP_ASSIGN_OR_RETURN(Precision p, ParsePrecision(arg.substr(colon + 1)));
  return LayerPrecision{arg.substr(0, colon), p};
}

bool GlobMatch(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Status ApplyProfiles(ir::Graph& graph, const std::vector<plan::Profile>& profiles) {
  for (size_t p = 0; p < profiles.size(); ++p) {
    for (const auto& [name, r] : profiles[p]) {
      const std::string what = StrCat("profile ", p, ", input '", name, "'");
      ir::Value* v = graph.FindValue(name);
      if (v == nullptr || std::find(graph.inputs().begin(), graph.inputs().end(), v) == graph.inputs().end())
        return InvalidArgument(what, ": the model has no input of that name");
      if (r.min.size() != r.opt.size() || r.opt.size() != r.max.size())
        return InvalidArgument(what, ": min/opt/max shapes must have the same rank");
      if (v->type.dims && v->type.dims->size() != r.min.size())
        return InvalidArgument(what, ": rank ", r.min.size(), " does not match the input's ", v->type.ToString());
      for (size_t d = 0; d < r.min.size(); ++d) {
        if (!(r.min[d] >= 0 && r.min[d] <= r.opt[d] && r.opt[d] <= r.max[d]))
          return InvalidArgument(what, ": dimension ", d, " needs 0 <= min <= opt <= max, got ", r.min[d], "/",
                                 r.opt[d], "/", r.max[d]);
        if (v->type.dims && (*v->type.dims)[d].known() &&
            (r.min[d] != (*v->type.dims)[d].value || r.max[d] != (*v->type.dims)[d].value))
          return InvalidArgument(what, ": dimension ", d, " is fixed to ", (*v->type.dims)[d].value, " in the model (",
                                 v->type.ToString(), ")");
      }
    }
    for (const ir::Value* in : graph.inputs()) {
      if (in->type.is_static() || profiles[p].count(in->name())) continue;
      return InvalidArgument("profile ", p, " gives no shape for dynamic input '", in->name(), "' (",
                             in->type.ToString(), ")");
    }
  }
  // A single profile that pins an input to one shape makes that input static,
  // which lets constant folding collapse its shape arithmetic.
  if (profiles.size() == 1) {
    for (const auto& [name, r] : profiles[0]) {
      if (r.min != r.max) continue;
      ir::Value* v = graph.FindValue(name);
      v->type = ir::TensorType::Static(v->type.dtype, r.min);
    }
  }
  return Status::Ok();
}

Status ApplyInputFormats(ir::Graph& graph, const std::vector<InputFormat>& formats) {
  for (const InputFormat& f : formats) {
    std::vector<ir::Value*> targets;
    if (f.input.empty()) {
      for (ir::Value* v : graph.inputs())
        if (v->type.dtype == DType::kFloat32 && v->type.dims && v->type.dims->size() == 4) targets.push_back(v);
      if (targets.empty())
        return InvalidArgument("--input-format: the model has no float input of rank 4 (NCHW image)");
    } else {
      ir::Value* v = graph.FindValue(f.input);
      bool is_input = false;
      for (ir::Value* in : graph.inputs()) is_input |= in == v;
      if (!v || !is_input) return InvalidArgument("--input-format: '", f.input, "' is not an input of the model");
      targets.push_back(v);
    }
    for (ir::Value* v : targets) {
      const std::string name = v->name();
      if (v->type.dtype != DType::kFloat32 || !v->type.dims || v->type.dims->size() != 4)
        return InvalidArgument("--input-format: input '", name, "' must be float32 [N, C, H, W] (it is ",
                               v->type.ToString(), ")");
      const ir::Dims& d = *v->type.dims;
      size_t channels = f.mean.size() ? f.mean.size() : f.std.size();
      if (d[1].known()) {
        if (channels && static_cast<int64_t>(channels) != d[1].value)
          return InvalidArgument("--input-format: input '", name, "' has ", d[1].value,
                                 " channels but --mean/--std give ", channels);
        channels = static_cast<size_t>(d[1].value);
      }
      if (channels == 0)
        return InvalidArgument("--input-format: input '", name, "' has an unknown channel count: give --mean");
      if (!f.mean.empty() && !f.std.empty() && f.mean.size() != f.std.size())
        return InvalidArgument("--mean has ", f.mean.size(), " values but --std has ", f.std.size());
      std::vector<float> mean = f.mean.empty() ? std::vector<float>(channels, 0.f) : f.mean;
      std::vector<float> scale(channels, 1.f);
      for (size_t c = 0; c < channels && !f.std.empty(); ++c) {
        if (!(f.std[c] > 0)) return InvalidArgument("--std values must be > 0 (got ", f.std[c], ")");
        scale[c] = 1.f / f.std[c];
      }
      SP_RETURN_IF_ERROR(graph.RenameValue(v, graph.FreshName(name + "_normalized")));
      SP_ASSIGN_OR_RETURN(ir::Value * raw,
                          graph.AddValue(name, ir::TensorType{DType::kUInt8, ir::Dims{d[0], d[2], d[3], d[1]}}));
      SP_ASSIGN_OR_RETURN(ir::Node * node,
                          graph.AddNode("ImageInput", {raw}, {v}, graph.FreshName(name + "_image_input")));
      node->domain = "sampan";
      node->attrs["mean"] = ir::Attribute::Floats(mean);
      node->attrs["scale"] = ir::Attribute::Floats(scale);
      node->attrs["layout"] = ir::Attribute::String("NCHW");
      for (ir::Value*& in : graph.inputs())
        if (in == v) in = raw;
    }
  }
  if (!formats.empty()) {
    if (graph.opsets.find("sampan") == graph.opsets.end()) graph.opsets["sampan"] = 1;
    SP_RETURN_IF_ERROR(graph.TopologicalSort());
  }
  return Status::Ok();
}

Status CheckStrict(const BuildConfig& config, const BuildReport& report) {
  if (!config.strict || report.host_nodes.empty()) return Status::Ok();
  std::string lines;
  for (const HostNode& h : report.host_nodes) lines += StrCat("\n  ", h.node, ": ", h.reason);
  return Unsupported("--strict: backend '", config.backend, "' would run ", report.host_nodes.size(),
                     " node(s) on the host:", lines);
}

Result<plan::Plan> Build(std::unique_ptr<ir::Graph> graph, const BuildConfig& config, BuildReport* report) {
  auto t0 = std::chrono::steady_clock::now();
  BuildReport local;
  BuildReport& rep = report ? *report : local;
  const BackendBuilder* backend = nullptr;
  if (config.backend != "reference") {
    backend = FindBackendBuilder(config.backend);
    if (!backend) {
      std::string names;
      for (const auto& n : BuildableBackends()) names += (names.empty() ? "" : ", ") + n;
      return Unsupported("backend '", config.backend, "' is not in this build (available: ", names, ")");
    }
  }
  if (!config.sim_profiles.empty() && config.backend != "sim")
    return InvalidArgument("--sim-profile is for --backend sim (a simulated GPU); this build is for backend '",
                           config.backend, "'");
  SP_RETURN_IF_ERROR(ApplyInputFormats(*graph, config.input_formats));
  SP_RETURN_IF_ERROR(ApplyProfiles(*graph, config.profiles));
  SP_RETURN_IF_ERROR(ops::InferTypes(*graph));
  if (backend != nullptr && !backend->runs_object_types) {
    // String tensors hold objects, not bytes: this backend's memory cannot hold them.
    std::vector<std::string> strings;
    for (const ir::Value* v : graph->values())
      if (IsObjectDType(v->type.dtype)) strings.push_back("'" + v->name() + "'");
    if (!strings.empty())
      return Unsupported("the ", config.backend, " backend does not run string tensors, sequences or optionals (",
                         strings.size(), " such value", strings.size() > 1 ? "s" : "", ", first ", strings.front(),
                         "); build this model with --backend reference");
  }
  rep.nodes_before = graph->nodes().size();

  passes::PassManagerOptions pm_opts;
  pm_opts.disabled = config.disabled_passes;
  // Integer products only for targets with integer kernels (reference: its kernels run them).
  pm_opts.integer_products = backend == nullptr || backend->runs_integer_products;
  pm_opts.fp8_products = backend == nullptr || backend->runs_fp8_products;
  pm_opts.after_pass = [&](const std::string& name, const ir::Graph& g) {
    if (config.progress) config.progress(StrCat("pass ", name, " (", g.nodes().size(), " nodes)"));
    if (config.after_pass) config.after_pass(name, g);
  };
  passes::PassManager pm(pm_opts);
  SP_RETURN_IF_ERROR(pm.Run(*graph));
  rep.passes = pm.stats();
  rep.rewrites = pm.context().rewrites;
  // Plan choices (precision, kernel, tactic) are keyed by node name: make every
  // name present and unique (passes may create nodes with colliding names).
  {
    std::set<std::string> seen;
    for (const auto& n : graph->nodes()) {
      if (!n->name.empty() && seen.insert(n->name).second) continue;
      const std::string base = n->name.empty() ? n->op_type : n->name;
      for (int k = 1;; ++k) {
        std::string candidate = StrCat(base, "_", k);
        if (seen.insert(candidate).second) {
          n->name = candidate;
          break;
        }
      }
    }
  }
  if (config.calibration.int8 && config.calibration.fp8)
    return InvalidArgument("--int8 and --fp8 are exclusive (one quantized format per build)");
  if (config.calibration.int8 && backend != nullptr && !backend->runs_integer_products)
    return Unsupported("--int8: backend '", config.backend,
                       "' has no INT8 kernels yet (they run on the cpu and "
                       "reference backends; issue #16)");
  if (config.calibration.fp8 && backend != nullptr && !backend->runs_fp8_products)
    return Unsupported("--fp8: backend '", config.backend,
                       "' has no FP8 kernels (FP8 products run on the cuda "
                       "backend, sm_89 and newer, and on the reference backend)");
  if (config.calibration.quantize()) {
    // Implicit quantization: Q/DQ around the products of the optimized graph, then the same
    // fusion a Q/DQ model gets.
    if (config.progress)
      config.progress(StrCat(config.calibration.fp8 ? "fp8" : "int8", ": choosing layers and calibrating"));
    SP_ASSIGN_OR_RETURN(rep.quantization, QuantizeGraph(*graph, config));
    rep.int8 = true;
    if (!config.disabled_passes.count("fuse_quantized")) {
      passes::PassManagerOptions q_opts;
      for (const passes::PassDef* p : passes::AllPasses())
        if (p->name != "fuse_quantized") q_opts.disabled.insert(p->name);
      q_opts.after_pass = pm_opts.after_pass;
      q_opts.integer_products = pm_opts.integer_products;
      q_opts.fp8_products = pm_opts.fp8_products;
      passes::PassManager qpm(q_opts);
      SP_RETURN_IF_ERROR(qpm.Run(*graph));
      for (const auto& st : qpm.stats())
        if (st.enabled) rep.passes.push_back(st);
      for (const auto& r : qpm.context().rewrites) rep.rewrites.push_back(r);
    }
  }

  if (config.progress) config.progress("assigning precision");
  SP_ASSIGN_OR_RETURN(auto precisions, AssignPrecision(*graph, config, backend != nullptr && backend->lowers_bf16));
  graph->RemoveUnusedValues();  // weights replaced by their converted copies
  SP_RETURN_IF_ERROR(graph->TopologicalSort());
  SP_RETURN_IF_ERROR(ir::Verify(*graph));
  SP_RETURN_IF_ERROR(ops::InferTypes(*graph));
  if (config.after_pass) config.after_pass("assign_precision", *graph);
  rep.nodes_after = graph->nodes().size();

  plan::Plan plan;
  plan.builder_version = StrCat("sampan ", Version());
  plan.source_model = config.source_model;
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  plan.created_utc = buf;
  plan.fingerprint =
      backend && backend->fingerprint ? backend->fingerprint(config) : plan::CurrentFingerprint(config.backend);
  plan.options.precision = PrecisionName(config.precision);
  for (const auto& lp : config.layer_precision)
    plan.options.layer_precision.push_back(StrCat(lp.pattern, ":", PrecisionName(lp.precision)));
  plan.options.disabled_passes.assign(config.disabled_passes.begin(), config.disabled_passes.end());
  plan.options.workspace_bytes = config.workspace_bytes;
  plan.options.portable = config.portable;
  if (rep.int8) {
    const QuantizationReport& q = rep.quantization;
    plan.options.quantization = StrCat(config.calibration.fp8 ? "fp8" : "int8", " calibration=", q.method,
                                       " samples=", q.samples, " cache=", q.cache_hash, " layers=", q.quantized.size());
    if (!q.metric.empty())
      plan.options.quantization +=
          StrCat(" accuracy=", q.metric, ":", q.accuracy, " bound=", q.bound, " float_by_gate=", q.fell_back.size());
  }
  plan.profiles = config.profiles;
  for (const auto& [name, p] : precisions) {
    plan.choices[name].precision = PrecisionName(p);
    ++rep.precision_counts[PrecisionName(p)];
  }
  for (const auto& r : rep.rewrites) plan.rewrites.push_back(StrCat(r.pass, ": ", r.description));
  plan.graph = std::shared_ptr<ir::Graph>(std::move(graph));
  // --strict with an INT8 accuracy gate means "no fallback to float" (calibrate.h) on any backend.
  const bool gated = config.calibration.quantize() && !config.calibration.accuracy_dir.empty();
  if ((config.dry_run || (config.strict && !gated)) && !(backend && backend->capability))
    return InvalidArgument(config.strict ? "--strict" : "--dry-run", ": backend '", config.backend,
                           "' has no capability query (it runs every node on the host by design); use --backend cuda");
  if (config.dry_run) {
    if (config.progress) config.progress(StrCat("capability query of backend ", config.backend));
    SP_RETURN_IF_ERROR(backend->capability(plan, config, rep));
    SP_RETURN_IF_ERROR(CheckStrict(config, rep));
  } else if (backend && backend->lower) {
    if (config.progress) config.progress(StrCat("lowering for backend ", config.backend));
    SP_RETURN_IF_ERROR(backend->lower(plan, config, rep));
    SP_RETURN_IF_ERROR(CheckStrict(config, rep));
  }
  rep.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return plan;
}

}  // namespace sampan::builder
