// Subgraphs for the control-flow ops (If, Loop, Scan): inference over a subgraph at the
// types the node binds to its inputs, and running it with the reference kernels. A
// subgraph reads enclosing values through its captures (ir/graph.h), bound here to the
// node's trailing inputs.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"
#include "ops/op.h"

namespace sampan::ops {

//! What inference found for one subgraph output.
struct SubgraphOutput {
  DType dtype = DType::kUndefined;
  std::optional<ir::Dims> dims;  //!< nullopt: rank unknown
  std::optional<Tensor> value;   //!< known value (small, computed from known inputs)
};

//! Infers `graph`'s output types with its inputs bound to `inputs` (an input given with an
//! undefined dtype takes the subgraph's declared type) and its captures to `captures`.
//! Errors name the node inside the subgraph and start with `where` ("If 'if1' then_branch").
Result<std::vector<SubgraphOutput>> InferSubgraph(const ir::Graph& graph, int64_t opset,
                                                  const std::vector<InferInput>& inputs,
                                                  const std::vector<InferInput>& captures, const std::string& where);

//! A backend's way of running a subgraph on its own kernels (the CPU backend: a compiled
//! program per subgraph and input shapes). Made current for a thread with
//! ScopedSubgraphExecutor around the run of a node or graph; every subgraph run below it, at
//! any depth, is offered to it first.
class SubgraphExecutor {
 public:
  virtual ~SubgraphExecutor() = default;
  //! Runs `graph` with its inputs and captures bound (outputs in graph output order) and
  //! returns true, or returns false, having done nothing, when it does not take this run
  //! (the reference kernels run it then). Errors start with `where`.
  virtual Result<bool> TryRun(const ir::Graph& graph, int64_t opset, const std::vector<const Tensor*>& inputs,
                              const std::vector<const Tensor*>& captures, std::vector<Tensor>* outputs,
                              const std::string& where) = 0;
};

//! Makes `executor` (nullptr: none) current on this thread until destroyed (nests; restores the
//! previous one).
class ScopedSubgraphExecutor {
 public:
  explicit ScopedSubgraphExecutor(SubgraphExecutor* executor);
  ~ScopedSubgraphExecutor();
  ScopedSubgraphExecutor(const ScopedSubgraphExecutor&) = delete;
  ScopedSubgraphExecutor& operator=(const ScopedSubgraphExecutor&) = delete;

 private:
  SubgraphExecutor* previous_;
};

//! Runs a subgraph, as many times as its node needs (a Loop or Scan iteration each): with the
//! current SubgraphExecutor when there is one and it takes the run, else with the reference
//! kernels, for which what does not change between runs (which step last reads each value)
//! is worked out once.
class SubgraphRunner {
 public:
  //! `where` starts every error ("Loop 'l' body"); `graph` must outlive the runner.
  SubgraphRunner(const ir::Graph& graph, int64_t opset, std::string where);
  //! Inputs bound to `inputs`, captures to `captures` (same lengths as the graph's); outputs in
  //! graph output order (a pass-through output shares storage).
  Status Run(const std::vector<const Tensor*>& inputs, const std::vector<const Tensor*>& captures,
             std::vector<Tensor>* outputs) const;

 private:
  const ir::Graph& graph_;
  int64_t opset_;
  std::string where_;
  std::unordered_map<const ir::Value*, size_t> last_reader_;  //!< value -> last step reading it
};

//! Annotates the values inside `graph`'s subgraphs (any depth) with types: each capture takes
//! the type of the enclosing value it is bound to, then the subgraph is inferred
//! (ops::InferTypes). The annotations serve passes and printing; inference that fails inside a
//! subgraph (a branch specialised for shapes the condition rules out) leaves it partly typed.
//! Running the node never relies on them (InferSubgraph infers at the node's own types).
void AnnotateSubgraphTypes(ir::Graph& graph);

//! The InferInputs of a node's captures (its trailing inputs).
std::vector<InferInput> CaptureInputs(const InferContext& ctx);
//! The tensors of a node's captures (its trailing inputs).
std::vector<const Tensor*> CaptureTensors(const KernelContext& ctx);

//! Dims both agree on, the others unknown; nullopt (unknown rank) when the ranks differ.
std::optional<ir::Dims> MergeDims(const std::optional<ir::Dims>& a, const std::optional<ir::Dims>& b);

//! Stores `value` as output k: copied into the memory already allocated there when it has the
//! same type and shape (planned memory), else the output takes it.
void SetKernelOutput(KernelContext& ctx, size_t k, Tensor value);

}  // namespace sampan::ops
