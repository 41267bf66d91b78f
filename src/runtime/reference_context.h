// The reference backend's context: runs the graph with the ops/ kernels, and
// keeps intermediate tensors in one arena per input-shape signature.
//
// Shapes known at planning time (the usual case): the signature is planned by the
// shared walk (plan_walk.h) — shape arithmetic folded once, every other node a
// reference-kernel step — and the arena is laid out from the steps' lifetimes
// before the first run. Shapes that depend on data (NonZero feeding a Reshape):
// the first run with those shapes records its allocations and the arena is
// planned from what it measured.
#pragma once

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backends/reference/executor.h"
#include "runtime/engine.h"
#include "runtime/plan_walk.h"

namespace sampan::runtime {

class ReferenceContext : public ContextImpl {
 public:
  explicit ReferenceContext(std::shared_ptr<const ir::Graph> graph);
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, Timing* timing) override;
  //! Every signature's arena and folded values, in host memory (thread-safe).
  MemoryReport MemoryUsage() const override { return memory_.Snapshot(); }
  //! Arena bytes for the most recent shape signature (0 before a planned run).
  size_t arena_bytes() const { return last_arena_bytes_; }
  //! The planning walk of the most recent shape signature: how it treated each node (up to
  //! the first data-dependent shape, when there is one).
  const PlanWalk* last_walk() const { return last_walk_; }

 private:
  struct Slot {
    size_t offset;
    size_t bytes;
  };
  struct Arena {
    //! Static shapes: the walk (folded values) and the nodes run per inference, in order.
    PlanWalk walk;
    std::vector<const ir::Node*> steps;
    std::vector<std::vector<const ir::Value*>> drop;  //!< per step: values no later step needs
    //! Data-dependent shapes: views seen on the recorded run, value -> owner.
    std::map<const ir::Value*, const ir::Value*> aliases;
    std::unordered_map<const ir::Value*, Slot> slots;
    Tensor buffer;  //!< u8[total]
  };
  //! Steps, lifetimes and arena for a walk that found every shape static.
  Result<std::unique_ptr<Arena>> PlanStatic(PlanWalk walk, std::vector<const ir::Node*> steps);
  Result<std::vector<Tensor>> RunPlanned(Arena& arena, const std::map<std::string, Tensor>& inputs);
  Result<std::unique_ptr<Arena>> RecordAndPlan(const std::map<std::string, Tensor>& inputs,
                                               std::vector<Tensor>* outputs);
  Result<std::vector<Tensor>> RunRecorded(Arena& arena, const std::map<std::string, Tensor>& inputs);

  std::shared_ptr<const ir::Graph> graph_;
  reference::Executor exec_;
  std::map<std::vector<Shape>, std::unique_ptr<Arena>> arenas_;
  std::map<const ir::Value*, int> last_read_;  //!< value -> index of its last reading node
  size_t last_arena_bytes_ = 0;
  const PlanWalk* last_walk_ = nullptr;
  MemoryTally memory_;
};

}  // namespace sampan::runtime
