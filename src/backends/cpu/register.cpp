// Registers the "cpu" backend with the runtime and the builder.
//
// Lowering (builder side) records, per node, the kernel family that will run
// it ("onednn:conv", "cpu:eltwise", ... or "reference") in plan.choices, and
// lists the ops left on the reference kernel for `sampan build --verbose`.
#include <map>

#include "backends/cpu/cpu_engine.h"
#include "backends/cpu/kernels.h"
#include "builder/backend_builder.h"
#include "runtime/backend.h"

namespace sampan::cpu {
namespace {

runtime::Backend MakeCpuBackend() {
  runtime::Backend b;
  b.name = "cpu";
  b.available = [] {
    try {
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      (void)eng;
    } catch (const dnnl::error& e) {
      return Unavailable("oneDNN has no CPU engine: ", e.what());
    }
    return Status::Ok();
  };
  b.fingerprint = [](int) { return plan::CurrentFingerprint("cpu"); };
  b.create = [](const plan::Plan& plan,
                const runtime::EngineOptions& options) -> Result<std::unique_ptr<runtime::BackendEngine>> {
    SP_ASSIGN_OR_RETURN(auto engine, CpuEngine::Create(plan, options));
    return std::unique_ptr<runtime::BackendEngine>(std::move(engine));
  };
  return b;
}

Status Lower(plan::Plan& plan, const builder::BuildConfig&, builder::BuildReport& report) {
  std::map<std::string, std::vector<std::string>> on_reference;  // op type -> node names
  for (const auto& node : plan.graph->nodes()) {
    const KernelFamily* f = ChooseFamily(*node);
    const std::string tactic = f ? f->tactic : kReferenceTactic;
    plan.choices[node->name].tactic = plan::Tactic{tactic};
    ++report.kernel_counts[tactic];
    if (!f) on_reference[(node->domain.empty() ? "" : node->domain + "::") + node->op_type].push_back(node->name);
  }
  for (const auto& [op, names] : on_reference) {
    std::string list;
    for (size_t i = 0; i < names.size() && i < 5; ++i) list += (i ? ", " : "") + names[i];
    if (names.size() > 5) list += ", ...";
    report.backend_notes.push_back(StrCat(op, ": reference kernel (", names.size(), " node", names.size() == 1 ? "" : "s",
                                          ": ", list, ")"));
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
  b.runs_object_types = true;  // string values live in object buffers and run as reference steps
  return b;
}

}  // namespace
}  // namespace sampan::cpu

SAMPAN_REGISTER_BACKEND(cpu, ::sampan::cpu::MakeCpuBackend)
SAMPAN_REGISTER_BACKEND_BUILDER(cpu, ::sampan::cpu::MakeCpuBuilder)
