// Registers the "cpu" backend with the runtime and the builder.
//
// Lowering (builder side) records, per node, the kernel family that will run
// it ("onednn:conv", "cpu:eltwise", ... or "reference") in plan.choices, and
// lists the ops left on the reference kernel for `sampan build --verbose`.
#include <map>
#include <set>

#include "backends/cpu/cpu_engine.h"
#include "backends/cpu/factor_residual_scale.h"
#include "backends/cpu/fuse_add_layer_norm.h"
#include "backends/cpu/fuse_conv_output_affine.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/product_algo.h"
#include "backends/cpu/threads.h"
#include "builder/backend_builder.h"
#include "runtime/backend.h"

namespace sampan::cpu {
namespace {

runtime::Backend MakeCpuBackend() {
  runtime::Backend b;
  b.name = "cpu";
  b.available = [] {
    SP_RETURN_IF_ERROR(CheckIsa());
    SP_RETURN_IF_ERROR(ApplyIsaToOneDnn());
    try {
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      (void)eng;
    } catch (const dnnl::error& e) {
      return Unavailable("oneDNN has no CPU engine: ", e.what());
    }
    return Status::Ok();
  };
  b.fingerprint = [](int) { return plan::CurrentFingerprint("cpu"); };
  b.describe = [] {
    std::string s = StrCat("instruction set levels: ", IsaNamesUpTo(HostIsa()), "\n");
    if (Status st = CheckIsa(); !st.ok()) return s + "error: " + st.message() + "\n";
    return s + StrCat("runs: ", IsaSummary(), "\nthreads: ", AvailableCores(), "\n");
  };
  b.create = [](const plan::Plan& plan,
                const runtime::EngineOptions& options) -> Result<std::unique_ptr<runtime::BackendEngine>> {
    SP_ASSIGN_OR_RETURN(auto engine, CpuEngine::Create(plan, options));
    return std::unique_ptr<runtime::BackendEngine>(std::move(engine));
  };
  return b;
}

// What RecordAlgorithms recorded.
struct Recorded {
  size_t convs = 0, packed = 0, onednn = 0;  //!< convolutions; products on each algorithm
  std::vector<std::string> notes;            //!< per product shape: the times and the choice
};

// Times the convolution algorithms (Winograd F(2x2)/F(4x4) against oneDNN's direct kernel) and
// the product algorithms (the packed GEMM against oneDNN's matmul, product_algo.h) by preparing
// the plan once, at its static input shapes or profile 0's opt shapes, and records each choice
// in plan.choices[].tactic.algo: a loaded plan takes them without timing, so every process
// running it computes the same bits. Records nothing when the shapes are unknown.
Result<Recorded> RecordAlgorithms(plan::Plan& plan, const std::map<std::string, std::string>& families) {
  std::map<std::string, Tensor> inputs;
  for (const ir::Value* in : plan.graph->inputs()) {
    Shape shape;
    if (in->type.is_static()) {
      shape = in->type.static_shape();
    } else if (!plan.profiles.empty() && plan.profiles[0].count(in->name())) {
      shape = plan.profiles[0].at(in->name()).opt;
    } else {
      return Recorded{};
    }
    if (IsObjectDType(in->type.dtype)) return Recorded{};
    SP_ASSIGN_OR_RETURN(inputs[in->name()], Tensor::Zeros(in->type.dtype, shape));
  }
  SP_RETURN_IF_ERROR(ApplyIsaToOneDnn());
  dnnl::engine eng;
  try {
    eng = dnnl::engine(dnnl::engine::kind::cpu, 0);
  } catch (const dnnl::error& err) {
    return Unavailable("oneDNN has no CPU engine: ", err.what());
  }
  WeightCache weights;
  std::map<std::string, int> chosen;
  std::map<std::string, std::string> notes;
  std::set<std::string> bf16;
  for (const auto& [node, choice] : plan.choices)
    if (choice.precision == "bf16") bf16.insert(node);
  PrepareOptions po;
  po.tactics = &families;
  po.bf16_nodes = &bf16;
  po.chosen_algos = &chosen;
  po.algo_notes = &notes;
  po.threads = AvailableCores();  // what an engine uses by default
  auto prog = Program::Prepare(*plan.graph, inputs, eng, weights, po);
  if (!prog.ok()) return prog.status();
  Recorded r;
  for (const auto& [node, algo] : chosen) {
    plan.choices[node].tactic.algo = algo;
    auto f = families.find(node);
    const bool product = f != families.end() && (f->second == kMatMulFamily.tactic || f->second == kGemmFamily.tactic);
    if (!product)
      ++r.convs;
    else if (algo == static_cast<int>(ProductAlgo::kOneDnnMatMul))
      ++r.onednn;
    else
      ++r.packed;
  }
  for (const auto& [key, line] : notes) r.notes.push_back(line);
  return r;
}

Status Lower(plan::Plan& plan, const builder::BuildConfig&, builder::BuildReport& report) {
  SP_RETURN_IF_ERROR(CheckIsa());
  SP_RETURN_IF_ERROR(ApplyIsaToOneDnn());
  SP_ASSIGN_OR_RETURN(auto rewrites, FactorResidualScale(plan));
  for (auto rewrite : {FuseConvOutputAffine, FuseAddLayerNorm}) {
    SP_ASSIGN_OR_RETURN(auto more, rewrite(plan));
    rewrites.insert(rewrites.end(), more.begin(), more.end());
  }
  for (const std::string& f : rewrites) report.rewrites.push_back({"cpu lowering", f});
  for (const std::string& f : rewrites) plan.rewrites.push_back("cpu lowering: " + f);
  report.backend_notes.push_back(StrCat("cpu: ", IsaSummary(),
                                        " (picked again wherever the plan is loaded; "
                                        "SAMPAN_CPU_ISA caps it)"));
  std::map<std::string, std::vector<std::string>> on_reference;  // op type -> node names
  std::map<std::string, std::string> families;
  for (const auto& node : plan.graph->nodes()) {
    const KernelFamily* f = ChooseFamily(*node);
    const std::string tactic = f ? f->tactic : kReferenceTactic;
    plan.choices[node->name].tactic = plan::Tactic{tactic};
    families[node->name] = tactic;
    ++report.kernel_counts[tactic];
    if (!f) on_reference[(node->domain.empty() ? "" : node->domain + "::") + node->op_type].push_back(node->name);
  }
  // Best effort: zeros are not valid inputs of every model (a shape given as an input); the
  // plan then records nothing and each load times its convolutions and products itself.
  auto recorded = RecordAlgorithms(plan, families);
  if (!recorded.ok()) {
    report.backend_notes.push_back(
        StrCat("cpu: convolution and product algorithms not recorded (preparing the plan on zero inputs "
               "failed: ",
               recorded.status().message(), "); they are timed at load"));
  } else {
    if (recorded->convs > 0)
      report.backend_notes.push_back(StrCat("cpu: ", recorded->convs,
                                            " convolution algorithms timed and recorded in the plan "
                                            "(Winograd or direct; a loaded plan runs them without timing)"));
    if (recorded->packed + recorded->onednn > 0)
      report.backend_notes.push_back(
          StrCat("cpu: ", recorded->packed + recorded->onednn, " products by constant weights recorded in the plan: ",
                 recorded->packed, " on the packed GEMM (algo=0), ", recorded->onednn,
                 " on oneDNN's matmul (algo=1); a loaded plan runs them without timing, SAMPAN_CPU_PACKED_GEMM=1/0 "
                 "forces one"));
    for (const std::string& line : recorded->notes) report.backend_notes.push_back("cpu: product " + line);
  }
  size_t bf16_layers = 0, bf16_convs = 0;
  for (const auto& node : plan.graph->nodes()) {
    auto it = plan.choices.find(node->name);
    if (it == plan.choices.end() || it->second.precision != "bf16") continue;
    ++bf16_layers;
    if (node->op_type == "Conv" || node->op_type == "FusedConv") ++bf16_convs;
  }
  if (bf16_layers > 0) {
    const bool here = static_cast<int>(ActiveIsa()) >= static_cast<int>(Isa::kAvx512Bf16);
    report.backend_notes.push_back(
        StrCat("cpu: BF16 precision: ", bf16_convs, " of ", bf16_layers,
               " BF16 layers are convolutions, which multiply BF16 "
               "operands into FP32 results (oneDNN, AVX512-BF16 or AMX) on a CPU that has them",
               here ? "" : StrCat(" (this one runs them in FP32: instruction set ", IsaName(ActiveIsa()), ")"),
               "; the other layers compute in FP32"));
  }
  for (const auto& [op, names] : on_reference) {
    std::string list;
    for (size_t i = 0; i < names.size() && i < 5; ++i) list += (i ? ", " : "") + names[i];
    if (names.size() > 5) list += ", ...";
    report.backend_notes.push_back(
        StrCat(op, ": reference kernel (", names.size(), " node", names.size() == 1 ? "" : "s", ": ", list, ")"));
  }
  report.backend_notes.push_back(
      "nodes whose inputs are all constant for given input shapes are evaluated once per shape, not per inference; "
      "kernels fall back to the reference kernel at load when a shape or attribute is outside what they cover");
  return Status::Ok();
}

builder::BackendBuilder MakeCpuBuilder() {
  builder::BackendBuilder b;
  b.name = "cpu";
  b.fingerprint = [](const builder::BuildConfig&) { return plan::CurrentFingerprint("cpu"); };
  b.lower = Lower;
  b.runs_object_types = true;      // string values live in object buffers and run as reference steps
  b.runs_integer_products = true;  // oneDNN int8 convolution/matmul (onednn_quant.cpp)
  b.lowers_bf16 = true;            // BF16 convolutions from FP32 tensors (onednn_conv.cpp)
  return b;
}

}  // namespace
}  // namespace sampan::cpu

SAMPAN_REGISTER_BACKEND(cpu, ::sampan::cpu::MakeCpuBackend)
SAMPAN_REGISTER_BACKEND_BUILDER(cpu, ::sampan::cpu::MakeCpuBuilder)
