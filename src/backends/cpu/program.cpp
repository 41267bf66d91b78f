#include "backends/cpu/program.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "ops/control_flow.h"
#include "ops/run_node.h"
#include "runtime/memory_planner.h"
#include "runtime/plan_walk.h"

namespace sampan::cpu {

namespace {
constexpr int kUnset = INT_MIN;
}  // namespace

dnnl::memory::data_type DnnlType(DType dtype) {
  using dt = dnnl::memory::data_type;
  switch (dtype) {
    case DType::kFloat32:
      return dt::f32;
    case DType::kBFloat16:
      return dt::bf16;
    case DType::kFloat16:
      return dt::f16;
    case DType::kInt32:
      return dt::s32;
    case DType::kInt8:
      return dt::s8;
    case DType::kUInt8:
      return dt::u8;
    default:
      return dt::undef;
  }
}

dnnl::memory::desc PlainDesc(DType dtype, const Shape& shape) {
  dnnl::memory::dims dims(shape.begin(), shape.end());
  if (dims.empty()) dims.push_back(1);
  dnnl::memory::dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<int64_t>(dims[i], 1);
  // Types oneDNN has no name for are described as bytes of the same size (only their size matters then).
  auto t = DnnlType(dtype);
  if (t == dnnl::memory::data_type::undef && DTypeSize(dtype) == 0) {  // packed: a row of bytes
    return dnnl::memory::desc({static_cast<int64_t>(std::max<size_t>(DTypeBytes(dtype, NumElements(shape)), 1))},
                              dnnl::memory::data_type::u8, dnnl::memory::dims{1});
  }
  if (t == dnnl::memory::data_type::undef) {
    const size_t sz = DTypeSize(dtype);
    dims.back() *= static_cast<int64_t>(sz);
    for (auto& s : strides) s *= static_cast<int64_t>(sz);
    strides.back() = 1;
    t = dnnl::memory::data_type::u8;
  }
  return dnnl::memory::desc(dims, t, strides);
}

bool ValueState::plain() const {
  return md == PlainDesc(dtype, shape);
}

// ---- weight cache ------------------------------------------------------------

void WeightCache::Keep(const Tensor& t) {
  if (t.raw() != nullptr) kept_.emplace(t.raw(), t);
}

Result<dnnl::memory> WeightCache::Get(const dnnl::engine& eng, const Tensor& src_tensor,
                                      const dnnl::memory::desc& plain, const dnnl::memory::desc& want) {
  std::lock_guard<std::mutex> lock(mu_);
  Keep(src_tensor);
  const void* src = src_tensor.raw();
  auto& list = entries_[src];
  for (auto& [md, mem] : list)
    if (md == want) return mem;
  try {
    dnnl::memory from(plain, eng, const_cast<void*>(src));
    dnnl::memory to(want, eng);  // owned by oneDNN, lives as long as the cache
    dnnl::stream s(eng);
    dnnl::reorder(from, to).execute(s, from, to);
    s.wait();
    list.emplace_back(want, to);
    bytes_ += want.get_size();
    return to;
  } catch (const dnnl::error& e) {
    return Internal("oneDNN weight reorder failed: ", e.what());
  }
}

std::shared_ptr<const void> WeightCache::Derived(
    const Tensor& src, const std::string& kind,
    const std::function<std::pair<std::shared_ptr<const void>, size_t>()>& make,
    const std::vector<const Tensor*>& also) {
  std::lock_guard<std::mutex> lock(mu_);
  Keep(src);
  for (const Tensor* t : also)
    if (t) Keep(*t);
  auto& slot = derived_[{src.raw(), kind}];
  if (!slot) {
    auto [obj, size] = make();
    slot = std::move(obj);
    bytes_ += size;
  }
  return slot;
}

size_t WeightCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

// ---- builder -----------------------------------------------------------------

bool ProgramBuilder::has_state(const ir::Value* v) const {
  return v->is_constant() || prog_.values_.count(v) != 0;
}

ValueState& ProgramBuilder::mutable_state(const ir::Value* v) {
  auto it = prog_.values_.find(v);
  if (it != prog_.values_.end()) return it->second;
  ValueState& s = prog_.values_[v];
  if (v->is_constant()) {  // weights: fixed buffers in the plan's memory
    s.dtype = v->data.dtype();
    s.shape = v->data.shape();
    s.md = PlainDesc(s.dtype, s.shape);
    s.known = &v->data;
    s.buffer = IsObjectDType(v->data.dtype()) ? NewObjectBuffer(&v->data) : NewBuffer(v->data.nbytes(), v->data.raw());
  }
  return s;
}

const ValueState& ProgramBuilder::state(const ir::Value* v) const {
  return const_cast<ProgramBuilder*>(this)->mutable_state(v);
}

int ProgramBuilder::NewBuffer(size_t bytes, const void* fixed) {
  Buffer buf;
  buf.bytes = bytes;
  buf.first = kUnset;
  buf.last = kUnset;
  buf.fixed = fixed;
  prog_.buffers_.push_back(buf);
  return static_cast<int>(prog_.buffers_.size()) - 1;
}

int ProgramBuilder::NewObjectBuffer(const Tensor* init) {
  prog_.objects_.push_back(std::make_unique<Tensor>(init ? *init : Tensor()));
  const int id = NewBuffer(0, prog_.objects_.back().get());
  prog_.buffers_[static_cast<size_t>(id)].object = true;
  return id;
}

int ProgramBuilder::Constant(const Tensor& t) {
  prog_.constants_.push_back(std::make_unique<Tensor>(t));
  const Tensor& kept = *prog_.constants_.back();
  const int id = IsObjectDType(kept.dtype()) ? NewObjectBuffer(&kept) : NewBuffer(kept.nbytes(), kept.raw());
  Use(id);
  return id;
}

int ProgramBuilder::AnyInput(const ir::Value* v, dnnl::memory::desc* md) {
  ValueState& s = mutable_state(v);
  if (md) *md = s.md;
  Use(s.buffer);
  return s.buffer;
}

Result<int> ProgramBuilder::Input(const ir::Value* v, const dnnl::memory::desc& md) {
  ValueState& s = mutable_state(v);
  if (s.md == md) {
    Use(s.buffer);
    return s.buffer;
  }
  for (const auto& [m, buf] : s.converted)
    if (m == md) {
      Use(buf);
      return buf;
    }
  // Convert once; later consumers asking for the same layout share the copy.
  std::vector<int> held;
  held.swap(pending_);
  const int dst = NewBuffer(md.get_size());
  const int src = s.buffer;
  const dnnl::memory::desc src_md = s.md;
  s.converted.emplace_back(md, dst);
  SP_RETURN_IF_ERROR(AddReorderStep(*this, src, src_md, dst, md, StrCat("reorder ", v->name())));
  pending_ = std::move(held);
  Use(dst);
  return dst;
}

Result<int> ProgramBuilder::PlainInput(const ir::Value* v) {
  const ValueState& s = state(v);
  return Input(v, PlainDesc(s.dtype, s.shape));
}

int ProgramBuilder::Output(const ir::Value* v, const dnnl::memory::desc* md) {
  ValueState& s = mutable_state(v);
  s.md = md ? *md : PlainDesc(s.dtype, s.shape);
  s.buffer = IsObjectDType(s.dtype) ? NewObjectBuffer() : NewBuffer(s.md.get_size());
  Use(s.buffer);
  return s.buffer;
}

Status ProgramBuilder::AliasOutput(const ir::Value* out, const ir::Value* in) {
  SP_ASSIGN_OR_RETURN(int buf, PlainInput(in));
  ValueState& s = mutable_state(out);
  s.md = PlainDesc(s.dtype, s.shape);
  s.buffer = buf;
  return Status::Ok();
}

void ProgramBuilder::ViewOutput(const ir::Value* out, int buffer, const dnnl::memory::desc& md) {
  ValueState& s = mutable_state(out);
  s.md = md;
  s.buffer = buffer;
  Use(buffer);
}

bool ProgramBuilder::LastUse(const ir::Value* v, const ir::Node& node) const {
  auto it = prog_.values_.find(v);
  if (it == prog_.values_.end() || it->second.buffer < 0 || it->second.known) return false;
  const int buf = it->second.buffer;
  if (prog_.buffers_[static_cast<size_t>(buf)].fixed) return false;
  // Every value stored in this buffer (v, views of it, what it is a view of, layout
  // copies) must be dead once `node` has read it.
  auto dead = [&](const ir::Value* u) {
    if (u->is_constant() || graph_io_.count(u) != 0) return false;
    for (const auto& [user, slot] : u->uses()) {
      (void)slot;
      if (user != &node && built_.count(user) == 0) return false;
    }
    return true;
  };
  for (const auto& [u, s] : prog_.values_) {
    bool shares = s.buffer == buf;
    for (const auto& [md, cb] : s.converted) shares |= cb == buf;
    if (shares && !dead(u)) return false;
  }
  return true;
}

int ProgramBuilder::Scratch(size_t bytes) {
  const int id = NewBuffer(bytes);
  Use(id);
  return id;
}

void ProgramBuilder::AddStep(std::unique_ptr<Kernel> kernel, std::string label) {
  const int idx = static_cast<int>(prog_.steps_.size());
  for (int id : pending_) {
    Buffer& buf = prog_.buffers_[static_cast<size_t>(id)];
    if (buf.first == kUnset) buf.first = idx;
    buf.last = std::max(buf.last, idx);
  }
  pending_.clear();
  prog_.steps_.push_back(std::move(kernel));
  prog_.labels_.push_back(std::move(label));
}

// ---- reference step ------------------------------------------------------------

namespace {

class ReferenceStep : public Kernel {
 public:
  ReferenceStep(const ir::Node& node, int64_t opset) : node_(node), opset_(opset) {}
  struct Slot {
    int buffer = -1;
    DType dtype = DType::kUndefined;
    Shape shape;
  };
  std::vector<Slot> ins, outs;

  Status Bind(const std::vector<void*>& ptrs) override {
    // String values: their buffer is a Tensor object, read and replaced as a whole.
    auto object = [&](const Slot& s) {
      return s.buffer >= 0 && IsObjectDType(s.dtype) ? static_cast<Tensor*>(ptrs[static_cast<size_t>(s.buffer)])
                                                     : nullptr;
    };
    in_objects_.clear();
    out_objects_.clear();
    for (const Slot& s : ins) in_objects_.push_back(object(s));
    for (const Slot& s : outs) out_objects_.push_back(object(s));
    auto wrap = [&](const Slot& s) {
      if (s.buffer < 0 || IsObjectDType(s.dtype)) return Tensor();
      void* p = ptrs[static_cast<size_t>(s.buffer)];
      return Tensor::WrapMutable(s.dtype, s.shape, std::shared_ptr<void>(p, [](void*) {}), p);
    };
    in_tensors_.clear();
    out_tensors_.clear();
    for (const Slot& s : ins) in_tensors_.push_back(wrap(s));
    for (const Slot& s : outs) out_tensors_.push_back(wrap(s));
    args_.clear();
    for (size_t k = 0; k < in_tensors_.size(); ++k)
      args_.push_back(in_objects_[k] ? in_objects_[k] : in_tensors_[k].defined() ? &in_tensors_[k] : nullptr);
    return Status::Ok();
  }

  Status Run(const RunCtx& ctx) override {
    // A control-flow node's subgraphs run on this backend's kernels (subgraph_executor.h).
    ops::ScopedSubgraphExecutor subgraphs(ctx.subgraphs);
    for (Tensor& t : out_tensors_)
      if (t.defined()) std::memset(t.mutable_raw(), 0, t.nbytes());
    ops::OutputAllocator alloc = [&](size_t k, DType dtype, const Shape& shape) -> Result<Tensor> {
      if (k < out_tensors_.size() && out_tensors_[k].defined() && out_tensors_[k].dtype() == dtype &&
          out_tensors_[k].shape() == shape)
        return out_tensors_[k];
      return Tensor::Zeros(dtype, shape);
    };
    std::vector<Tensor> results;
    SP_RETURN_IF_ERROR(ops::RunNode(node_, opset_, args_, &results, &alloc));
    for (size_t k = 0; k < out_tensors_.size() && k < results.size(); ++k) {
      if (out_objects_[k] != nullptr) {
        *out_objects_[k] = std::move(results[k]);
        continue;
      }
      Tensor& want = out_tensors_[k];
      if (!want.defined() || !results[k].defined() || results[k].raw() == want.raw()) continue;
      if (results[k].nbytes() != want.nbytes() || results[k].dtype() != want.dtype())
        return Internal(node_.Label(), ": output ", k, " is ", results[k].Describe(), ", planned ", want.Describe());
      std::memcpy(want.mutable_raw(), results[k].raw(), want.nbytes());
    }
    return Status::Ok();
  }

 private:
  const ir::Node& node_;
  int64_t opset_;
  std::vector<Tensor> in_tensors_, out_tensors_;
  std::vector<Tensor*> in_objects_, out_objects_;  //!< per slot: the object of a string value, else nullptr
  std::vector<const Tensor*> args_;
};

}  // namespace

Status BuildReferenceStep(ProgramBuilder& b, const ir::Node& node, int64_t opset) {
  auto step = std::make_unique<ReferenceStep>(node, opset);
  for (size_t k = 0; k < node.num_inputs(); ++k) {
    ReferenceStep::Slot s;
    if (const ir::Value* v = node.input(k)) {
      SP_ASSIGN_OR_RETURN(s.buffer, b.PlainInput(v));
      s.dtype = b.state(v).dtype;
      s.shape = b.state(v).shape;
    }
    step->ins.push_back(s);
  }
  for (size_t k = 0; k < node.num_outputs(); ++k) {
    ReferenceStep::Slot s;
    if (const ir::Value* v = node.output(k)) {
      s.buffer = b.Output(v);
      s.dtype = b.state(v).dtype;
      s.shape = b.state(v).shape;
    }
    step->outs.push_back(s);
  }
  b.AddStep(std::move(step), StrCat(node.op_type, " ", node.name, " [reference]"));
  return Status::Ok();
}

// ---- prepare -----------------------------------------------------------------

bool ProgramBuilder::RunsBf16(const std::string& node) const {
  if (options_ == nullptr || options_->bf16_nodes == nullptr || !options_->bf16_nodes->count(node)) return false;
  return static_cast<int>(ActiveIsa()) >= static_cast<int>(Isa::kAvx512Bf16);
}

bool ProgramBuilder::OnlyBf16ConvsRead(const ir::Value* v) const {
  if (graph_io_.count(v) != 0 || v->uses().empty()) return false;
  for (const auto& [user, slot] : v->uses()) {
    const bool conv =
        user->domain.empty() ? user->op_type == "Conv" : user->domain == "sampan" && user->op_type == "FusedConv";
    if (!conv || slot != 0 || !RunsBf16(user->name)) return false;
  }
  return true;
}

int ProgramBuilder::RecordedAlgo(const std::string& node) const {
  if (options_ == nullptr || options_->algos == nullptr) return -1;
  auto it = options_->algos->find(node);
  return it == options_->algos->end() ? -1 : it->second;
}

void ProgramBuilder::NoteAlgo(const std::string& node, int algo) {
  if (options_ != nullptr && options_->chosen_algos != nullptr) (*options_->chosen_algos)[node] = algo;
}

void ProgramBuilder::NoteAlgoTiming(const std::string& key, const std::string& line) {
  if (options_ != nullptr && options_->algo_notes != nullptr) (*options_->algo_notes)[key] = line;
}

Result<std::unique_ptr<Program>> Program::Prepare(const ir::Graph& graph, const std::map<std::string, Tensor>& inputs,
                                                  const dnnl::engine& eng, WeightCache& weights,
                                                  const PrepareOptions& options) {
  auto prog = std::make_unique<Program>();
  ProgramBuilder b(*prog, eng, weights, options.threads, &options);
  for (const ir::Value* v : graph.inputs()) b.graph_io_.insert(v);
  for (const ir::Value* v : graph.outputs()) b.graph_io_.insert(v);
  for (const ir::Value* in : graph.inputs()) {
    auto it = inputs.find(in->name());
    if (it == inputs.end()) return InvalidArgument("missing input '", in->name(), "'");
    ValueState& s = b.mutable_state(in);
    s.dtype = it->second.dtype();
    s.shape = it->second.shape();
    s.md = PlainDesc(s.dtype, s.shape);
    s.buffer = IsObjectDType(it->second.dtype()) ? b.NewObjectBuffer() : b.NewBuffer(it->second.nbytes());
    prog->buffers_[static_cast<size_t>(s.buffer)].first = 0;
    prog->buffers_[static_cast<size_t>(s.buffer)].last = 0;
    prog->inputs_.emplace_back(in->name(), s.buffer);
  }
  // A value the walk folded becomes a constant of the program, in a fixed buffer.
  auto adopt_known = [&](const ir::Value* v, const Tensor& known) {
    prog->constants_.push_back(std::make_unique<Tensor>(known));
    const Tensor& kept = *prog->constants_.back();
    ValueState& s = b.mutable_state(v);
    s.dtype = kept.dtype();
    s.shape = kept.shape();
    s.md = PlainDesc(s.dtype, s.shape);
    s.known = &kept;
    s.buffer = IsObjectDType(kept.dtype()) ? b.NewObjectBuffer(&kept) : b.NewBuffer(kept.nbytes(), kept.raw());
  };
  // Shapes, folding and data-dependent shapes come from the shared walk; this backend
  // lowers each remaining node: its kernel family, else the reference kernel.
  const auto& nodes = graph.nodes();
  size_t built = 0;
  auto enter = [&](const runtime::LowerRequest& r) {
    // Nodes are lowered in order: every node before this one (folded ones included) has run when it runs.
    while (built <= r.index) b.built_.insert(nodes[built++].get());
    for (size_t k = 0; k < r.inputs.size(); ++k) {
      const ir::Value* v = r.node.input(k);
      if (v != nullptr && r.inputs[k]->known != nullptr && !b.has_state(v)) adopt_known(v, *r.inputs[k]->known);
    }
    // Kernels read the concrete output shapes from the program state (the graph is shared, never changed).
    for (size_t k = 0; k < r.outputs.size(); ++k)
      if (const ir::Value* v = r.node.output(k)) {
        ValueState& s = b.mutable_state(v);
        s.dtype = r.outputs[k]->dtype;
        s.shape = r.outputs[k]->shape;
        s.md = PlainDesc(s.dtype, s.shape);
      }
  };
  auto lower = [&](const runtime::LowerRequest& r) -> Status {
    enter(r);
    const ir::Node& node = r.node;
    const KernelFamily* family = nullptr;
    if (options.tactics) {
      auto t = options.tactics->find(node.name);
      if (t != options.tactics->end() && !t->second.empty())
        family = FindFamily(t->second);
      else
        family = ChooseFamily(node);
    } else {
      family = ChooseFamily(node);
    }
    // Unnamed nodes share one key in plan.choices: trust a recorded tactic only if it fits the node.
    if (family != nullptr && !family->accepts(node)) family = ChooseFamily(node);
    if (TouchesStrings(node)) return Unsupported(node.Label(), ": string tensors run on the reference kernel");
    if (family == nullptr) return Unsupported(node.Label(), ": no kernel family of the cpu backend takes it");
    return family->build(b, node, r.opset);
  };
  auto reference = [&](const runtime::LowerRequest& r) { return BuildReferenceStep(b, r.node, r.opset); };
  SP_ASSIGN_OR_RETURN(runtime::PlanWalk walk,
                      runtime::WalkPlan(graph, runtime::ConcreteTypesOf(inputs), lower, reference));
  prog->walked_ = walk.nodes;
  if (walk.dynamic) {
    prog->dynamic_ = true;
    return prog;
  }
  for (const ir::Value* out : graph.outputs())
    if (!b.has_state(out))
      if (const Tensor* known = walk.known(out)) adopt_known(out, *known);
  // Outputs leave the arena row-major.
  for (const ir::Value* out : graph.outputs()) {
    if (!b.has_state(out)) return Internal("graph output '", out->name(), "' was not computed");
    const ValueState& s = b.state(out);
    if (s.known) {
      prog->outputs_.push_back({out, -1});
      continue;
    }
    SP_ASSIGN_OR_RETURN(int buf, b.PlainInput(out));
    b.pending_.clear();
    prog->buffers_[static_cast<size_t>(buf)].last = INT_MAX;
    prog->outputs_.push_back({out, buf});
  }
  for (const auto& [name, buf] : prog->inputs_) {
    (void)name;
    Buffer& in = prog->buffers_[static_cast<size_t>(buf)];
    in.first = 0;
    in.last = std::max(in.last, 0);
  }
  // Arena: every non-fixed buffer, by lifetime.
  const int end = static_cast<int>(prog->steps_.size());
  std::vector<runtime::ArenaBlock> blocks;
  std::vector<int> ids;
  for (size_t i = 0; i < prog->buffers_.size(); ++i) {
    const Buffer& buf = prog->buffers_[i];
    if (buf.fixed) continue;
    const int first = buf.first == kUnset ? 0 : std::max(buf.first, 0);
    const int last = buf.last == kUnset ? first : std::min(buf.last, end);
    blocks.push_back(runtime::ArenaBlock{std::max<size_t>(buf.bytes, 1), first, std::max(first, last)});
    ids.push_back(static_cast<int>(i));
  }
  runtime::ArenaLayout layout = runtime::PlanArena(blocks, 64);
  prog->arena_bytes_ = layout.total;
  SP_ASSIGN_OR_RETURN(prog->arena_,
                      Tensor::Zeros(DType::kUInt8, {static_cast<int64_t>(std::max<size_t>(layout.total, 64))}));
  auto* base = static_cast<char*>(prog->arena_.mutable_raw());
  prog->ptrs_.assign(prog->buffers_.size(), nullptr);
  for (size_t i = 0; i < prog->buffers_.size(); ++i)
    if (prog->buffers_[i].fixed) prog->ptrs_[i] = const_cast<void*>(prog->buffers_[i].fixed);
  for (size_t k = 0; k < ids.size(); ++k) prog->ptrs_[static_cast<size_t>(ids[k])] = base + layout.offsets[k];
  for (auto& step : prog->steps_) SP_RETURN_IF_ERROR(step->Bind(prog->ptrs_));
  std::set<const void*> plan_data;
  for (const auto& n : graph.nodes())
    for (const ir::Value* v : n->inputs())
      if (v != nullptr && v->is_constant()) plan_data.insert(v->data.raw());
  std::set<const void*> counted;
  for (const auto& c : prog->constants_)
    if (c->defined() && !plan_data.count(c->raw()) && counted.insert(c->raw()).second)
      prog->folded_bytes_ += c->nbytes();
  if (const char* p = std::getenv("SAMPAN_CPU_PROFILE"); p != nullptr && p[0] == '1') {
    prog->profile_ = true;
    prog->step_ms_.assign(prog->steps_.size(), 0.0);
  }
  return prog;
}

Status Program::CopyInputs(const std::map<std::string, Tensor>& inputs) {
  for (const auto& [name, buf] : inputs_) {
    auto it = inputs.find(name);
    if (it == inputs.end()) return InvalidArgument("missing input '", name, "'");
    if (buffers_[static_cast<size_t>(buf)].object) {
      if (!IsObjectDType(it->second.dtype()))
        return InvalidArgument("input '", name, "' must be a ", DTypeName(it->second.dtype()));
      *static_cast<Tensor*>(ptrs_[static_cast<size_t>(buf)]) = it->second;
      continue;
    }
    if (it->second.nbytes() != buffers_[static_cast<size_t>(buf)].bytes)
      return InvalidArgument("input '", name, "' has ", it->second.nbytes(), " bytes, the program expects ",
                             buffers_[static_cast<size_t>(buf)].bytes);
    if (it->second.nbytes() > 0) std::memcpy(ptrs_[static_cast<size_t>(buf)], it->second.raw(), it->second.nbytes());
  }
  return Status::Ok();
}

Program::~Program() {
  if (!profile_ || profiled_runs_ == 0) return;
  // Diagnostics only (SAMPAN_CPU_PROFILE=1): per-step mean time, slowest first.
  std::vector<size_t> order(step_ms_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return step_ms_[a] > step_ms_[b]; });
  const double total = std::accumulate(step_ms_.begin(), step_ms_.end(), 0.0);
  std::fprintf(stderr, "cpu profile: %zu steps, %lld runs, %.3f ms/run\n", step_ms_.size(),
               static_cast<long long>(profiled_runs_), total / static_cast<double>(profiled_runs_));
  for (size_t i : order) {
    const double ms = step_ms_[i] / static_cast<double>(profiled_runs_);
    std::fprintf(stderr, "%9.3f ms %5.1f%%  %s\n", ms, 100.0 * step_ms_[i] / std::max(total, 1e-9), labels_[i].c_str());
  }
}

Status Program::RunSteps(const RunCtx& ctx) {
  // OpenMP's team size is per calling thread: this engine's setting applies to
  // oneDNN and our kernels on this thread only, not to other engines' threads.
  omp_set_num_threads(ctx.threads);
  if (profile_) {
    ++profiled_runs_;
    for (size_t i = 0; i < steps_.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Status st = steps_[i]->Run(ctx);
      if (!st.ok()) return st.WithContext(labels_[i]);
      step_ms_[i] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    return Status::Ok();
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    Status st = steps_[i]->Run(ctx);
    if (!st.ok()) return st.WithContext(labels_[i]);
  }
  return Status::Ok();
}

Status Program::Execute(const std::map<std::string, Tensor>& inputs, const RunCtx& ctx) {
  SP_RETURN_IF_ERROR(CopyInputs(inputs));
  return RunSteps(ctx);
}

Result<std::vector<Tensor>> Program::CollectOutputs() const {
  std::vector<Tensor> results;
  results.reserve(outputs_.size());
  for (const Out& o : outputs_) {
    const ValueState& s = values_.at(o.value);
    if (o.buffer < 0) {
      results.push_back(s.known->Clone());
      continue;
    }
    if (buffers_[static_cast<size_t>(o.buffer)].object) {
      results.push_back(*static_cast<const Tensor*>(ptrs_[static_cast<size_t>(o.buffer)]));
      continue;
    }
    Tensor t = Tensor::Alloc(s.dtype, s.shape);
    if (t.nbytes() > 0) std::memcpy(t.mutable_raw(), ptrs_[static_cast<size_t>(o.buffer)], t.nbytes());
    results.push_back(std::move(t));
  }
  return results;
}

}  // namespace sampan::cpu
