// The reference backend's context: runs the graph with the ops/ kernels, and
// keeps intermediate tensors in one arena per input-shape signature, planned
// from tensor lifetimes measured on the first run with those shapes.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backends/reference/executor.h"
#include "runtime/engine.h"

namespace sampan::runtime {

class ReferenceContext : public ContextImpl {
 public:
  explicit ReferenceContext(std::shared_ptr<const ir::Graph> graph);
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, Timing* timing) override;
  //! Arena bytes for the most recent shape signature (0 before a planned run).
  size_t arena_bytes() const { return last_arena_bytes_; }

 private:
  struct Slot {
    size_t offset;
    size_t bytes;
  };
  struct Arena {
    std::map<const ir::Value*, Slot> slots;
    std::map<const ir::Value*, const ir::Value*> aliases;  //!< views seen when planning: value -> owner
    Tensor buffer;  //!< u8[total]
  };
  Result<std::unique_ptr<Arena>> RecordAndPlan(const std::map<std::string, Tensor>& inputs,
                                               std::vector<Tensor>* outputs);

  std::shared_ptr<const ir::Graph> graph_;
  reference::Executor exec_;
  std::map<std::vector<Shape>, std::unique_ptr<Arena>> arenas_;
  std::map<const ir::Value*, int> last_read_;  //!< value -> index of its last reading node
  size_t last_arena_bytes_ = 0;
};

}  // namespace sampan::runtime
