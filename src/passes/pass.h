// Graph passes and the pass manager. A pass is one file with a name; the
// manager runs the passes in the one order written in pass_manager.cpp (kPipeline),
// can switch each off by name, times each, and verifies the graph after each.
//
// Adding a pass: create src/passes/<name>.cpp with a function
//   Result<bool> RunMyPass(ir::Graph&, PassContext&)   // true if it changed the graph
// register it: SAMPAN_REGISTER_PASS("my_pass", RunMyPass);
// and put its name in kPipeline (pass_manager.cpp) where it must run. A registered pass
// missing from the list, a listed name nobody registers, or a name registered twice stops
// the program at start-up with a message saying which.
//
// A backend's own lowering rewrites (e.g. the cuda backend's Q/K/V packing) are passes too:
// registered with SAMPAN_REGISTER_TARGET_PASS("cuda", "fuse_qkv", RunFuseQkv) in the backend's
// files, listed in kLowering (pass_manager.cpp), and run by that backend's builder through
// PassManager::RunLowering after the shared pipeline and quantization. They are switched off,
// timed and verified like the others.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace sampan::plan {
struct Plan;
}

namespace sampan::passes {

//! One rewrite a pass made, for `sampan build --verbose`.
struct Rewrite {
  std::string pass;
  std::string description;  //!< e.g. "folded BatchNormalization 'bn1' into Conv 'conv1'"
};

struct PassContext {
  std::vector<Rewrite> rewrites;
  std::string current_pass;
  //! The target runs integer products (fuse_quantized makes them; otherwise it only folds the
  //! quantized weights to float). From PassManagerOptions.
  bool integer_products = true;
  //! The target runs FP8 products (sampan::QMatMul of float8 e4m3fn/e5m2 operands: cuBLASLt on
  //! Hopper). From PassManagerOptions.
  bool fp8_products = true;
  //! Lowering passes only (RunLowering): the plan whose graph they rewrite (its per-node
  //! choices follow the nodes a pass merges) and the device's compute capability major
  //! (the capability query without a device passes the sm_90 plans are built for).
  plan::Plan* plan = nullptr;
  int cc_major = 0;
  //! Passes the user disabled (PassManagerOptions::disabled): a pass that can do another's
  //! rewrite on the way (fold_conv_affine folding a BatchNormalization) leaves it then.
  std::set<std::string> disabled;
  void Record(std::string description) { rewrites.push_back({current_pass, std::move(description)}); }
};

using PassFn = Result<bool> (*)(ir::Graph&, PassContext&);

struct PassDef {
  std::string name;
  PassFn run = nullptr;
  //! Empty: the shared pipeline (kPipeline). Otherwise the backend whose lowering runs it
  //! (kLowering); such a pass runs on the top-level graph only.
  std::string target;
};

//! Called by SAMPAN_REGISTER_PASS; a name registered twice aborts the program.
bool RegisterPass(PassDef def);
//! The passes in pipeline order (kPipeline). Aborts when the list and the registered passes
//! disagree (a programming error, caught by every test run).
std::vector<const PassDef*> AllPasses();
//! `target`'s lowering passes in their order (kLowering); empty when that backend is not linked.
std::vector<const PassDef*> LoweringPasses(const std::string& target);
const PassDef* FindPass(const std::string& name);

struct PassStats {
  std::string name;
  bool enabled = true;
  bool changed = false;
  double ms = 0;
  size_t nodes_before = 0;
  size_t nodes_after = 0;
};

struct PassManagerOptions {
  std::set<std::string> disabled;  //!< pass names to skip
  //! Called after each pass that ran (for --dump-ir); receives the pass name.
  std::function<void(const std::string&, const ir::Graph&)> after_pass;
  bool verify = true;  //!< ir::Verify + type inference after each pass
  //! Passes run after the pipeline (tests: a pass that breaks graphs on purpose).
  std::vector<PassDef> extra_passes;
  //! PassContext::integer_products.
  bool integer_products = true;
  //! PassContext::fp8_products.
  bool fp8_products = true;
};

class PassManager {
 public:
  explicit PassManager(PassManagerOptions options) : options_(std::move(options)) {}
  //! Checks every disabled name exists (a typo is an error that lists the valid names).
  Status Validate() const;
  //! Runs the pipeline; an error names the pass that failed or broke the graph.
  Status Run(ir::Graph& graph);
  //! Runs `target`'s lowering passes on `graph` (the graph of `plan`, which they see as
  //! PassContext::plan, with ::cc_major), with the same switches, timing and verification
  //! as Run, on the top-level graph only.
  Status RunLowering(ir::Graph& graph, plan::Plan* plan, const std::string& target, int cc_major);
  const std::vector<PassStats>& stats() const { return stats_; }
  const PassContext& context() const { return ctx_; }

 private:
  Status RunPasses(const std::vector<const PassDef*>& passes, ir::Graph& graph, bool inside_subgraphs);
  PassManagerOptions options_;
  std::vector<PassStats> stats_;
  PassContext ctx_;
};

//! Replaces a node's outputs by constants and removes the node.
Status ReplaceWithConstants(ir::Graph& graph, ir::Node* node, const std::vector<Tensor>& values);
//! True when v is read by exactly one node and is not a graph output.
bool HasSingleUse(const ir::Graph& graph, const ir::Value* v);
bool IsGraphOutput(const ir::Graph& graph, const ir::Value* v);

}  // namespace sampan::passes

#define SAMPAN_REGISTER_PASS(name, fn)                                           \
  static const bool SP_CONCAT(sp_registered_pass__, __LINE__) [[maybe_unused]] = \
      ::sampan::passes::RegisterPass(::sampan::passes::PassDef{name, fn, ""})
#define SAMPAN_REGISTER_TARGET_PASS(target, name, fn)                            \
  static const bool SP_CONCAT(sp_registered_pass__, __LINE__) [[maybe_unused]] = \
      ::sampan::passes::RegisterPass(::sampan::passes::PassDef{name, fn, target})

namespace sampan::passes {
//! Whether uses of `from` can be pointed at `to` while keeping the graph's
//! interface names: false when `from` is a graph output and `to` is a graph
//! input or already an output.
bool CanForward(const ir::Graph& graph, const ir::Value* from, const ir::Value* to);
//! Points every use of `from` at `to`; if `from` was a graph output, `to` takes
//! over its name so the model's output names do not change.
Status ForwardValue(ir::Graph& graph, ir::Value* from, ir::Value* to);
}  // namespace sampan::passes
