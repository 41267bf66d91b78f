// Graph passes and the pass manager. A pass is one file with a name; the
// manager runs the registered passes in a fixed order, can switch each off by
// name, times each, and verifies the graph after each.
//
// Adding a pass: create src/passes/<name>.cpp with a function
//   Result<bool> RunMyPass(ir::Graph&, PassContext&)   // true if it changed the graph
// and register it: SAMPAN_REGISTER_PASS("my_pass", 350, RunMyPass);
// The number is the pass's place in the pipeline (lower runs first).
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace sampan::passes {

//! One rewrite a pass made, for `sampan build --verbose`.
struct Rewrite {
  std::string pass;
  std::string description;  //!< e.g. "folded BatchNormalization 'bn1' into Conv 'conv1'"
};

struct PassContext {
  std::vector<Rewrite> rewrites;
  std::string current_pass;
  void Record(std::string description) { rewrites.push_back({current_pass, std::move(description)}); }
};

using PassFn = Result<bool> (*)(ir::Graph&, PassContext&);

struct PassDef {
  std::string name;
  int order = 0;
  PassFn run = nullptr;
};

bool RegisterPass(PassDef def);
//! Registered passes in pipeline order.
std::vector<const PassDef*> AllPasses();
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
};

class PassManager {
 public:
  explicit PassManager(PassManagerOptions options) : options_(std::move(options)) {}
  //! Checks every disabled name exists (a typo is an error that lists the valid names).
  Status Validate() const;
  //! Runs the pipeline; an error names the pass that failed or broke the graph.
  Status Run(ir::Graph& graph);
  const std::vector<PassStats>& stats() const { return stats_; }
  const PassContext& context() const { return ctx_; }

 private:
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

#define SAMPAN_REGISTER_PASS(name, order, fn)                                  \
  static const bool SP_CONCAT(sp_registered_pass__, __LINE__) [[maybe_unused]] = \
      ::sampan::passes::RegisterPass(::sampan::passes::PassDef{name, order, fn})

namespace sampan::passes {
//! Whether uses of `from` can be pointed at `to` while keeping the graph's
//! interface names: false when `from` is a graph output and `to` is a graph
//! input or already an output.
bool CanForward(const ir::Graph& graph, const ir::Value* from, const ir::Value* to);
//! Points every use of `from` at `to`; if `from` was a graph output, `to` takes
//! over its name so the model's output names do not change.
Status ForwardValue(ir::Graph& graph, ir::Value* from, ir::Value* to);
}  // namespace sampan::passes
