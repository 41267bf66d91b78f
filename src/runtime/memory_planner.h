// Liveness-based arena planning: tensors whose lifetimes do not overlap share
// memory. Greedy by size (largest first, lowest fitting offset), the strategy
// TFLite's arena planner and ONNX Runtime's memory patterns use.
#pragma once

#include <cstddef>
#include <vector>

namespace sampan::runtime {

struct ArenaBlock {
  size_t size = 0;  //!< bytes
  int first = 0;    //!< index of the step that writes it
  int last = 0;     //!< index of the last step that reads it (>= first)
};

struct ArenaLayout {
  std::vector<size_t> offsets;  //!< one per block, multiples of the alignment
  size_t total = 0;             //!< arena size in bytes
};

ArenaLayout PlanArena(const std::vector<ArenaBlock>& blocks, size_t alignment = 64);

}  // namespace sampan::runtime
