// The planning walk every backend goes through, once per set of input shapes.
//
// Given the graph (topologically ordered) and concrete graph-input types, the walk
// visits each node in order and
//   - infers its concrete output types (ops/ inference, with every value the host
//     knows: weights and values folded earlier);
//   - folds it on the host when inference gave all its output values, or when its
//     inputs are all known, it is deterministic (ops::IsNondeterministic) and its
//     outputs hold at most ops::kMaxShapeFoldElements elements (shape arithmetic);
//   - stops with `dynamic` set when an output shape depends on data computed at
//     run time (NonZero feeding a Reshape): the caller takes its dynamic path;
//   - otherwise asks the backend to lower it at these shapes. The backend answers
//     Ok (it made a step), kUnsupported (no kernel here: the walk records why and
//     hands the node to the fallback, e.g. a host kernel) or an error (the walk
//     stops with it).
// A backend therefore supplies only "lower this node at these shapes". Memory is
// planned after the walk from the steps the backend made: ComputeLifetimes gives
// each memory-owning value its [first, last] step interval, ArenaBlocksFor turns
// them into blocks for PlanArena (memory_planner.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"
#include "runtime/memory_planner.h"

namespace sampan::runtime {

//! A graph input's concrete type for one walk.
struct ConcreteType {
  DType dtype = DType::kUndefined;
  Shape shape;
};

//! The types of concrete input tensors, by name.
std::map<std::string, ConcreteType> ConcreteTypesOf(const std::map<std::string, Tensor>& inputs);

//! A value as planning sees it.
struct PlanValue {
  DType dtype = DType::kUndefined;
  Shape shape;
  //! Its contents when the host knows them: a constant's data or a folded value (owned by the
  //! walk); nullptr for values computed at run time.
  const Tensor* known = nullptr;
};

//! One node to lower at concrete shapes.
struct LowerRequest {
  const ir::Node& node;
  size_t index;  //!< position of `node` in graph.nodes()
  int64_t opset;
  std::vector<const PlanValue*> inputs;   //!< per input; nullptr for an omitted optional input
  std::vector<const PlanValue*> outputs;  //!< per output (inferred types, known == nullptr); nullptr if omitted
};

//! Lowers one node: Ok = a step was made; kUnsupported = no kernel at these shapes (the
//! message says why); any other error stops the walk.
using LowerFn = std::function<Status(const LowerRequest&)>;

enum class NodeFate {
  kFolded,       //!< computed while planning; no run-time step
  kLowered,      //!< the backend's lowering made a step
  kUnsupported,  //!< the lowering answered kUnsupported; the fallback (if any) made a step
};

const char* NodeFateName(NodeFate fate);  //!< "folded", "lowered", "unsupported"

struct WalkedNode {
  const ir::Node* node = nullptr;
  NodeFate fate = NodeFate::kLowered;
  std::string reason;  //!< kUnsupported: the lowering's message
};

//! What one walk found. Move-only: PlanValue::known points into it.
struct PlanWalk {
  //! A node's output shape depends on data computed at run time: the walk stopped before it.
  bool dynamic = false;
  const ir::Node* dynamic_node = nullptr;
  std::string dynamic_reason;  //!< names the node and the output
  //! Every node walked, in graph order (the dynamic node and those after it excluded).
  std::vector<WalkedNode> nodes;
  //! Graph inputs, constants read by a node, and every output of a walked node.
  std::unordered_map<const ir::Value*, PlanValue> values;
  std::vector<std::unique_ptr<Tensor>> folded;  //!< storage of the folded values

  //! nullptr when the walk did not reach `v`.
  const PlanValue* value(const ir::Value* v) const;
  //! The known contents of `v` (constant or folded), nullptr otherwise.
  const Tensor* known(const ir::Value* v) const;
  size_t count(NodeFate fate) const;
};

//! Walks `graph` at the concrete input types `inputs` (every graph input by name). `lower`
//! is called for each node that is neither folded nor dynamic; `fallback` (optional) for
//! each node `lower` answered kUnsupported (a fallback's failure stops the walk).
//! Errors (inference failing, an input missing) name the node and what is wrong.
Result<PlanWalk> WalkPlan(const ir::Graph& graph, const std::map<std::string, ConcreteType>& inputs,
                          const LowerFn& lower, const LowerFn& fallback = nullptr);

// ---- lifetimes -----------------------------------------------------------------

//! One run-time step for lifetime analysis: the node it runs, and which outputs reuse
//! an input's memory instead of owning their own.
struct StepMemory {
  const ir::Node* node = nullptr;
  //! Per output: index of the input whose memory it is a view of, -1 (or absent): owns memory.
  std::vector<int> view_of;
};

//! [first, last] step indices (inclusive) during which a value's memory is in use.
//! Step i runs at time i; graph inputs are written before step 0 (time 0); the end of
//! the run is time steps.size().
struct ValueLifetime {
  const ir::Value* value = nullptr;
  int first = 0;
  int last = 0;
};

struct Lifetimes {
  //! Memory-owning values: graph inputs (in graph order), then step outputs (in step order).
  std::vector<ValueLifetime> owners;
  //! Every view -> the value owning its memory (chains resolved). A view of a value no step
  //! writes (constant, folded) maps to that value, which has no lifetime.
  std::unordered_map<const ir::Value*, const ir::Value*> root;
  //! The value owning `v`'s memory (`v` itself unless it is a view).
  const ir::Value* RootOf(const ir::Value* v) const;
};

//! Each owner lives from the step writing it to the last step reading it or any view of
//! it; graph inputs, and owners of graph outputs (directly or through views), to the end.
Lifetimes ComputeLifetimes(const ir::Graph& graph, const std::vector<StepMemory>& steps);

//! Owners placed in an arena, as blocks for PlanArena: blocks[i] is values[i].
struct ArenaRequest {
  std::vector<const ir::Value*> values;
  std::vector<ArenaBlock> blocks;
};

//! The owners `bytes` gives a size for (nullopt: kept out of the arena, e.g. graph outputs).
ArenaRequest ArenaBlocksFor(const Lifetimes& lifetimes,
                            const std::function<std::optional<size_t>(const ir::Value*)>& bytes);

}  // namespace sampan::runtime
