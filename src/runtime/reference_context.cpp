#include "runtime/reference_context.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "runtime/memory_planner.h"

namespace sampan::runtime {

ReferenceContext::ReferenceContext(std::shared_ptr<const ir::Graph> graph) : graph_(graph), exec_(graph) {
  const auto& nodes = graph_->nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const ir::Value* v : nodes[i]->inputs())
      if (v) last_read_[v] = static_cast<int>(i);
}

Result<std::unique_ptr<ReferenceContext::Arena>> ReferenceContext::RecordAndPlan(
    const std::map<std::string, Tensor>& inputs, std::vector<Tensor>* outputs) {
  struct Record {
    const void* ptr = nullptr;
    size_t bytes = 0;
    int first = 0;
  };
  std::map<const ir::Value*, Record> records;   // values allocated through the hook
  std::map<const ir::Value*, const ir::Value*> alias_root;  // value -> value whose memory it uses
  int current = 0;
  reference::Executor::ValueAllocator alloc = [&](const ir::Value* v, DType dtype, const Shape& shape) -> Result<Tensor> {
    SP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(dtype, shape));
    records[v] = Record{t.raw(), t.nbytes(), current};
    return t;
  };
  // Kernels may hand back a view of an input (Reshape, Identity...) instead of
  // the memory offered: such outputs live in their source's slot.
  auto find_owner = [&](const void* p) -> const ir::Value* {
    for (const auto& [v, r] : records)
      if (r.bytes > 0 && p >= r.ptr && p < static_cast<const char*>(r.ptr) + r.bytes) return v;
    return nullptr;
  };
  reference::Executor::NodeObserver observe = [&](size_t i, const ir::Node& node, std::vector<Tensor>& outs) {
    current = static_cast<int>(i) + 1;
    for (size_t k = 0; k < outs.size(); ++k) {
      const ir::Value* v = node.output(k);
      if (v == nullptr || !outs[k].defined()) continue;
      auto rec = records.find(v);
      if (rec != records.end() && rec->second.ptr == outs[k].raw()) continue;
      if (rec != records.end()) records.erase(rec);  // the offered memory went unused
      if (const ir::Value* owner = find_owner(outs[k].raw())) {
        while (alias_root.count(owner)) owner = alias_root[owner];
        alias_root[v] = owner;
      }
    }
  };
  // `current` is the index of the node being run when the hook allocates.
  SP_ASSIGN_OR_RETURN(*outputs, exec_.Run(inputs, &alloc, &observe));

  // Lifetimes: from the producing node to the last reader of the value or of any alias of it.
  std::map<const ir::Value*, int> last;
  for (const auto& [v, r] : records) {
    auto it = last_read_.find(v);
    last[v] = std::max(r.first, it == last_read_.end() ? r.first : it->second);
  }
  std::set<const ir::Value*> excluded;
  for (const auto& [v, root] : alias_root) {
    if (!last.count(root)) continue;
    auto it = last_read_.find(v);
    if (it != last_read_.end()) last[root] = std::max(last[root], it->second);
  }
  // Anything the caller receives must not live in the arena.
  for (const ir::Value* out : graph_->outputs()) {
    excluded.insert(out);
    auto a = alias_root.find(out);
    if (a != alias_root.end()) excluded.insert(a->second);
  }
  std::vector<const ir::Value*> values;
  std::vector<ArenaBlock> blocks;
  for (const auto& [v, r] : records) {
    if (excluded.count(v)) continue;
    values.push_back(v);
    blocks.push_back(ArenaBlock{r.bytes, r.first, last[v]});
  }
  ArenaLayout layout = PlanArena(blocks);
  auto arena = std::make_unique<Arena>();
  SP_ASSIGN_OR_RETURN(arena->buffer, Tensor::Zeros(DType::kUInt8, {static_cast<int64_t>(std::max<size_t>(layout.total, 1))}));
  for (size_t i = 0; i < values.size(); ++i) arena->slots[values[i]] = Slot{layout.offsets[i], blocks[i].size};
  arena->aliases = alias_root;
  return arena;
}

Result<std::vector<Tensor>> ReferenceContext::Run(const std::map<std::string, Tensor>& inputs, Timing* timing) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Shape> key;
  for (const ir::Value* in : graph_->inputs()) {
    auto it = inputs.find(in->name());
    key.push_back(it == inputs.end() ? Shape{-1} : it->second.shape());
  }
  std::vector<Tensor> outputs;
  auto found = arenas_.find(key);
  if (found == arenas_.end()) {
    SP_RETURN_IF_ERROR(exec_.ValidateInputs(inputs));
    SP_ASSIGN_OR_RETURN(auto arena, RecordAndPlan(inputs, &outputs));
    last_arena_bytes_ = static_cast<size_t>(arena->buffer.numel());
    arenas_.emplace(key, std::move(arena));
  } else {
    Arena& arena = *found->second;
    last_arena_bytes_ = static_cast<size_t>(arena.buffer.numel());
    auto* base = static_cast<char*>(arena.buffer.mutable_raw());
    const char* end = base + arena.buffer.numel();
    std::shared_ptr<void> owner(arena.buffer.mutable_raw(), [](void*) {});
    reference::Executor::ValueAllocator alloc = [&](const ir::Value* v, DType dtype, const Shape& shape) -> Result<Tensor> {
      auto it = arena.slots.find(v);
      const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
      // Data-dependent shapes may outgrow the slot planned for them: heap then.
      if (it == arena.slots.end() || bytes > it->second.bytes) return Tensor::Zeros(dtype, shape);
      void* p = base + it->second.offset;
      std::memset(p, 0, bytes);
      return Tensor::WrapMutable(dtype, shape, owner, p);
    };
    // A view of arena memory that planning did not see would outlive its slot: copy it out.
    reference::Executor::NodeObserver guard = [&](size_t, const ir::Node& node, std::vector<Tensor>& outs) {
      for (size_t k = 0; k < outs.size(); ++k) {
        const ir::Value* v = node.output(k);
        if (v == nullptr || !outs[k].defined()) continue;
        const char* p = static_cast<const char*>(outs[k].raw());
        if (p < base || p >= end) continue;
        auto slot = arena.slots.find(v);
        if (slot != arena.slots.end() && p == base + slot->second.offset) continue;
        if (arena.aliases.count(v)) continue;
        outs[k] = outs[k].Clone();
      }
    };
    SP_ASSIGN_OR_RETURN(outputs, exec_.Run(inputs, &alloc, &guard));
  }
  timing->compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return outputs;
}

}  // namespace sampan::runtime
