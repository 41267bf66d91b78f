// Backends as the builder sees them: after the passes and precision assignment,
// the backend named in BuildConfig lowers the graph: checks it can run every
// node (listing all it cannot, at once), picks a kernel per node, times
// candidate tactics at each profile's opt shape (bounded by the optimization
// level, reusing the timing cache) and records its choices in plan.choices.
//
// Backend libraries register a BackendBuilder from a static initialiser; the
// reference backend needs none.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "builder/builder.h"
#include "plan/plan.h"

namespace sampan::builder {

struct BackendBuilder {
  std::string name;
  //! The fingerprint recorded in the plan (the build device's).
  std::function<plan::Fingerprint(const BuildConfig& config)> fingerprint;
  //! Lowers plan.graph in place (it may rewrite it) and fills plan.choices[node].tactic.
  //! Adds human-readable lines to report.backend_notes ("Resize: reference kernel").
  std::function<Status(plan::Plan& plan, const BuildConfig& config, BuildReport& report)> lower;
  //! (optional) The capability query alone, without a device: the backend's own rewrites,
  //! then for every node at the plan's shapes whether it gets a device kernel, filling
  //! report.host_nodes (node + reason) and report.kernel_counts. `lower` answers the same
  //! query itself (and fails under config.strict) before it times anything.
  std::function<Status(plan::Plan& plan, const BuildConfig& config, BuildReport& report)> capability;
  //! Runs graphs holding object values (strings, sequences, optionals) on host steps, the
  //! values kept in host memory; the builder refuses such graphs otherwise.
  bool runs_object_types = false;
  //! Has integer kernels for sampan::QConv/QMatMul/com.microsoft::QLinearAdd: Q/DQ models and
  //! --int8 builds become integer products (fuse_quantized). Without it, quantized weights are
  //! folded to float and the products stay float (the Q/DQ on activations still round).
  bool runs_integer_products = false;
  //! Has FP8 kernels for sampan::QMatMul of float8 operands (cuda: cuBLASLt on sm_89+): FP8 Q/DQ
  //! models and --fp8 builds become FP8 products. Without it the float8 weights fold to float.
  bool runs_fp8_products = false;
  //! Runs BF16 layers itself from FP32 tensors (cpu: oneDNN convolutions with BF16 operands and
  //! FP32 results, where the CPU has AVX512-BF16/AMX): precision assignment then leaves a BF16
  //! layer's tensors in FP32 (no casts, no converted weights) and records its precision in
  //! plan.choices[node].precision, which the backend reads. FP16 layers are rewritten as usual.
  bool lowers_bf16 = false;
};

void RegisterBackendBuilder(BackendBuilder builder);
//! nullptr when the backend has no builder in this build.
const BackendBuilder* FindBackendBuilder(const std::string& name);
//! "reference" plus every registered builder, sorted.
std::vector<std::string> BuildableBackends();

}  // namespace sampan::builder

#define SAMPAN_REGISTER_BACKEND_BUILDER_IMPL(id, factory)         \
  namespace {                                                     \
  const bool SP_CONCAT(sp_backend_builder_registered_, id) = [] { \
    ::sampan::builder::RegisterBackendBuilder(factory());         \
    return true;                                                  \
  }();                                                            \
  }
#define SAMPAN_REGISTER_BACKEND_BUILDER(id, factory) SAMPAN_REGISTER_BACKEND_BUILDER_IMPL(id, factory)
