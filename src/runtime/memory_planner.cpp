#include "runtime/memory_planner.h"

#include <algorithm>
#include <numeric>

namespace sampan::runtime {

ArenaLayout PlanArena(const std::vector<ArenaBlock>& blocks, size_t alignment) {
  ArenaLayout layout;
  layout.offsets.assign(blocks.size(), 0);
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return blocks[a].size > blocks[b].size; });
  auto align = [&](size_t v) { return (v + alignment - 1) / alignment * alignment; };
  std::vector<size_t> placed;  // indices already given an offset
  for (size_t idx : order) {
    const ArenaBlock& b = blocks[idx];
    // Intervals [offset, offset+size) of placed blocks alive at the same time, sorted by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed) {
      const ArenaBlock& o = blocks[p];
      if (o.last < b.first || b.last < o.first) continue;
      busy.emplace_back(layout.offsets[p], layout.offsets[p] + align(o.size));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + align(b.size) <= lo) break;
      offset = std::max(offset, hi);
    }
    layout.offsets[idx] = offset;
    layout.total = std::max(layout.total, offset + align(b.size));
    placed.push_back(idx);
  }
  return layout;
}

}  // namespace sampan::runtime
