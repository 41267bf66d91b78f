#include "runtime/reference_context.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <unordered_set>

#include "ops/run_node.h"
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
  std::map<const ir::Value*, Record> records;               // values allocated through the hook
  std::map<const ir::Value*, const ir::Value*> alias_root;  // value -> value whose memory it uses
  int current = 0;
  reference::Executor::ValueAllocator alloc = [&](const ir::Value* v, DType dtype,
                                                  const Shape& shape) -> Result<Tensor> {
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
  SP_ASSIGN_OR_RETURN(arena->buffer,
                      Tensor::Zeros(DType::kUInt8, {static_cast<int64_t>(std::max<size_t>(layout.total, 1))}));
  for (size_t i = 0; i < values.size(); ++i) arena->slots[values[i]] = Slot{layout.offsets[i], blocks[i].size};
  arena->aliases = alias_root;
  return arena;
}

Result<std::unique_ptr<ReferenceContext::Arena>> ReferenceContext::PlanStatic(PlanWalk walk,
                                                                              std::vector<const ir::Node*> steps) {
  auto arena = std::make_unique<Arena>();
  arena->walk = std::move(walk);
  arena->steps = std::move(steps);
  // Which reference kernels hand back a view of an input is not known before they run:
  // every output owns a slot, and a view of arena memory is copied into it (RunPlanned).
  std::vector<StepMemory> memory;
  for (const ir::Node* node : arena->steps) memory.push_back(StepMemory{node, {}});
  const Lifetimes lifetimes = ComputeLifetimes(*graph_, memory);
  // Graph inputs are the caller's memory; anything the caller receives must not live in the arena.
  std::unordered_set<const ir::Value*> io(graph_->inputs().begin(), graph_->inputs().end());
  io.insert(graph_->outputs().begin(), graph_->outputs().end());
  const ArenaRequest request = ArenaBlocksFor(lifetimes, [&](const ir::Value* v) -> std::optional<size_t> {
    const PlanValue* pv = arena->walk.value(v);
    if (io.count(v) || pv == nullptr) return std::nullopt;
    return DTypeBytes(pv->dtype, NumElements(pv->shape));
  });
  const ArenaLayout layout = PlanArena(request.blocks);
  SP_ASSIGN_OR_RETURN(arena->buffer,
                      Tensor::Zeros(DType::kUInt8, {static_cast<int64_t>(std::max<size_t>(layout.total, 1))}));
  for (size_t i = 0; i < request.values.size(); ++i)
    arena->slots[request.values[i]] = Slot{layout.offsets[i], request.blocks[i].size};
  // After its last use in a step a value is dropped (graph outputs are kept for the caller).
  std::unordered_map<const ir::Value*, size_t> last_use;
  for (size_t s = 0; s < arena->steps.size(); ++s) {
    for (const ir::Value* v : arena->steps[s]->inputs())
      if (v) last_use[v] = s;
    for (const ir::Value* v : arena->steps[s]->outputs())
      if (v) last_use[v] = s;
  }
  const std::unordered_set<const ir::Value*> outputs(graph_->outputs().begin(), graph_->outputs().end());
  arena->drop.assign(arena->steps.size(), {});
  for (const auto& [v, s] : last_use)
    if (!outputs.count(v)) arena->drop[s].push_back(v);
  return arena;
}

Result<std::vector<Tensor>> ReferenceContext::RunPlanned(Arena& arena, const std::map<std::string, Tensor>& inputs) {
  auto* base = static_cast<char*>(arena.buffer.mutable_raw());
  const char* end = base + arena.buffer.numel();
  std::shared_ptr<void> owner(base, [](void*) {});
  auto within = [](const Tensor& t, const char* lo, const char* hi) {
    const char* p = static_cast<const char*>(t.raw());
    return t.nbytes() > 0 && p >= lo && p < hi;
  };
  auto in_folded = [&](const Tensor& t) {
    for (const auto& f : arena.walk.folded) {
      const char* lo = static_cast<const char*>(f->raw());
      if (within(t, lo, lo + f->nbytes())) return true;
    }
    return false;
  };
  std::unordered_map<const ir::Value*, Tensor> live;
  for (const ir::Value* in : graph_->inputs()) live[in] = inputs.at(in->name());
  const int64_t opset = graph_->opset();
  std::vector<const Tensor*> args;
  std::vector<Tensor> outs;
  for (size_t s = 0; s < arena.steps.size(); ++s) {
    const ir::Node& node = *arena.steps[s];
    args.assign(node.num_inputs(), nullptr);
    for (size_t k = 0; k < node.num_inputs(); ++k) {
      const ir::Value* v = node.input(k);
      if (v == nullptr) continue;
      if (auto it = live.find(v); it != live.end()) {
        args[k] = &it->second;
      } else if (const Tensor* known = arena.walk.known(v)) {
        args[k] = known;
      } else {
        return Internal(node.Label(), ": input '", v->name(), "' was not computed");
      }
    }
    ops::OutputAllocator alloc = [&](size_t k, DType dtype, const Shape& shape) -> Result<Tensor> {
      auto it = arena.slots.find(node.output(k));
      const size_t bytes = DTypeBytes(dtype, NumElements(shape));
      if (it == arena.slots.end() || bytes > it->second.bytes) return Tensor::Zeros(dtype, shape);
      void* p = base + it->second.offset;
      std::memset(p, 0, bytes);
      return Tensor::WrapMutable(dtype, shape, owner, p);
    };
    SP_RETURN_IF_ERROR(ops::RunNode(node, opset, args, &outs, &alloc));
    for (size_t k = 0; k < node.num_outputs(); ++k) {
      const ir::Value* v = node.output(k);
      if (v == nullptr || k >= outs.size() || !outs[k].defined()) continue;
      Tensor& t = outs[k];
      auto slot = arena.slots.find(v);
      const bool own_slot = slot != arena.slots.end() && t.raw() == base + slot->second.offset;
      if (!own_slot && within(t, base, end)) {
        // A view of another value's slot, which planning gave no lifetime: copy it into its own.
        if (slot != arena.slots.end() && t.nbytes() <= slot->second.bytes) {
          void* p = base + slot->second.offset;
          std::memcpy(p, t.raw(), t.nbytes());
          t = Tensor::WrapMutable(t.dtype(), t.shape(), owner, p);
        } else {
          t = t.Clone();
        }
      } else if (slot == arena.slots.end() && in_folded(t)) {
        t = t.Clone();  // the caller must not share the plan's folded values
      }
      live[v] = std::move(t);
    }
    for (const ir::Value* v : arena.drop[s]) live.erase(v);
  }
  std::vector<Tensor> results;
  for (const ir::Value* out : graph_->outputs()) {
    if (auto it = live.find(out); it != live.end()) {
      results.push_back(it->second);
    } else if (out->is_constant()) {
      results.push_back(out->data);
    } else if (const Tensor* known = arena.walk.known(out)) {
      results.push_back(known->Clone());
    } else {
      return Internal("graph output '", out->name(), "' was not computed");
    }
  }
  return results;
}

Result<std::vector<Tensor>> ReferenceContext::RunRecorded(Arena& arena, const std::map<std::string, Tensor>& inputs) {
  auto* base = static_cast<char*>(arena.buffer.mutable_raw());
  const char* end = base + arena.buffer.numel();
  std::shared_ptr<void> owner(arena.buffer.mutable_raw(), [](void*) {});
  reference::Executor::ValueAllocator alloc = [&](const ir::Value* v, DType dtype,
                                                  const Shape& shape) -> Result<Tensor> {
    auto it = arena.slots.find(v);
    const size_t bytes = DTypeBytes(dtype, NumElements(shape));
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
  return exec_.Run(inputs, &alloc, &guard);
}

Result<std::vector<Tensor>> ReferenceContext::Run(const std::map<std::string, Tensor>& inputs, Timing* timing) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Shape> key;
  for (const ir::Value* in : graph_->inputs()) {
    auto it = inputs.find(in->name());
    key.push_back(it == inputs.end() ? Shape{-1} : it->second.shape());
  }
  SP_RETURN_IF_ERROR(exec_.ValidateInputs(inputs));
  std::vector<Tensor> outputs;
  bool ran = false;
  auto found = arenas_.find(key);
  if (found == arenas_.end()) {
    // Every node the walk does not fold is a reference-kernel step: lowering always succeeds.
    std::vector<const ir::Node*> steps;
    const LowerFn lower = [&](const LowerRequest& r) {
      steps.push_back(&r.node);
      return Status::Ok();
    };
    SP_ASSIGN_OR_RETURN(PlanWalk walk, WalkPlan(*graph_, ConcreteTypesOf(inputs), lower));
    std::unique_ptr<Arena> arena;
    if (walk.dynamic) {
      SP_ASSIGN_OR_RETURN(arena, RecordAndPlan(inputs, &outputs));
      arena->walk = std::move(walk);
      ran = true;
    } else {
      SP_ASSIGN_OR_RETURN(arena, PlanStatic(std::move(walk), std::move(steps)));
    }
    memory_.Add(MemoryKind::kArena, MemoryPlace::kHost, 0, arena->buffer.nbytes());
    for (const auto& f : arena->walk.folded)
      if (f) memory_.Add(MemoryKind::kFolded, MemoryPlace::kHost, 0, f->nbytes());
    found = arenas_.emplace(key, std::move(arena)).first;
  }
  Arena& arena = *found->second;
  last_arena_bytes_ = static_cast<size_t>(arena.buffer.numel());
  last_walk_ = &arena.walk;
  if (!ran) {
    if (arena.walk.dynamic) {
      SP_ASSIGN_OR_RETURN(outputs, RunRecorded(arena, inputs));
    } else {
      SP_ASSIGN_OR_RETURN(outputs, RunPlanned(arena, inputs));
    }
  }
  if (timing)
    timing->compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return outputs;
}

}  // namespace sampan::runtime
