// Layout and indexing ops, for any element type (they move bytes):
//   views (Reshape, Flatten, Squeeze, Unsqueeze, Identity): no step at all, the
//   output shares the input's buffer; Transpose, Concat, Slice, Split, Gather
//   copy through precomputed strides; Cast converts int/bool to float.
#include <cstring>

#include "backends/cpu/kernels.h"

namespace sampan::cpu {
namespace {

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// Generic strided copy: out (row-major, `shape`) <- in at offset + sum(i_d * in_strides[d]) (elements).
// The innermost dim is copied as a run when its input stride is 1.
struct StridedCopy {
  Shape shape;
  std::vector<int64_t> in_strides;
  int64_t in_offset = 0;
  size_t esize = 4;

  void Simplify() {  // merge dims that are contiguous in the input too
    Shape s;
    std::vector<int64_t> st;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 1) continue;
      if (!s.empty() && st.back() == in_strides[i] * shape[i]) {
        s.back() *= shape[i];
        st.back() = in_strides[i];
        continue;
      }
      s.push_back(shape[i]);
      st.push_back(in_strides[i]);
    }
    if (s.empty()) {
      s.push_back(1);
      st.push_back(1);
    }
    shape = s;
    in_strides = st;
  }

  void Run(const RunCtx& ctx, const char* in, char* out) const {
    const int64_t inner = shape.back(), is = in_strides.back();
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
    ParallelFor(ctx, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t rem = r, off = in_offset;
        for (size_t d = shape.size() - 1; d-- > 0;) {
          off += (rem % shape[d]) * in_strides[d];
          rem /= shape[d];
        }
        const char* src = in + off * static_cast<int64_t>(esize);
        char* dst = out + r * inner * static_cast<int64_t>(esize);
        if (is == 1) {
          std::memcpy(dst, src, static_cast<size_t>(inner) * esize);
        } else {
          switch (esize) {
            case 1:
              CopyElems<uint8_t>(src, is, dst, inner);
              break;
            case 2:
              CopyElems<uint16_t>(src, is, dst, inner);
              break;
            case 4:
              CopyElems<uint32_t>(src, is, dst, inner);
              break;
            case 8:
              CopyElems<uint64_t>(src, is, dst, inner);
              break;
            default:
              for (int64_t i = 0; i < inner; ++i)
                std::memcpy(dst + i * static_cast<int64_t>(esize), src + i * is * static_cast<int64_t>(esize), esize);
          }
        }
      }
    });
  }
  template <class T>
  static void CopyElems(const char* src, int64_t stride, char* dst, int64_t n) {
    const T* s = reinterpret_cast<const T*>(src);
    T* d = reinterpret_cast<T*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = s[i * stride];
  }
};

class CopyStep : public Kernel {
 public:
  int in = -1, out = -1;
  StridedCopy copy;
  Status Bind(const std::vector<void*>& ptrs) override {
    in_ = static_cast<const char*>(ptrs[static_cast<size_t>(in)]);
    out_ = static_cast<char*>(ptrs[static_cast<size_t>(out)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    if (NumElements(copy.shape) > 0) copy.Run(ctx, in_, out_);
    return Status::Ok();
  }

 private:
  const char* in_ = nullptr;
  char* out_ = nullptr;
};

bool Storable(const ir::Node& node) {
  for (const ir::Value* v : node.outputs())
    if (v && (v->type.dtype == DType::kUndefined || v->type.dtype == DType::kString)) return false;
  return true;
}

// ---- views -------------------------------------------------------------------

bool AcceptsView(const ir::Node& node) {
  if (!node.domain.empty() || !Storable(node)) return false;
  const std::string& op = node.op_type;
  if (op == "Dropout") return node.num_outputs() == 1 || node.output(1) == nullptr;
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity";
}

Status BuildView(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const ValueState& in = b.state(node.input(0));
  const ValueState& out = b.state(node.output(0));
  if (node.op_type == "Dropout") {
    if (node.input(2) &&
        (b.state(node.input(2)).known == nullptr || ElementAsDouble(*b.state(node.input(2)).known, 0) != 0))
      return Unsupported("training mode");
  }
  if (in.dtype != out.dtype || NumElements(in.shape) != NumElements(out.shape)) return Unsupported("not a view");
  return b.AliasOutput(node.output(0), node.input(0));
}

// ---- transpose ---------------------------------------------------------------

bool AcceptsTranspose(const ir::Node& node) {
  return node.domain.empty() && node.op_type == "Transpose" && Storable(node);
}

Status BuildTranspose(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const ValueState& in = b.state(node.input(0));
  const size_t r = in.shape.size();
  std::vector<int64_t> perm = node.attr_ints("perm");
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
  if (perm.size() != r) return Unsupported("perm");
  std::vector<int64_t> norm(r);
  for (size_t i = 0; i < r; ++i) {
    norm[i] = perm[i] < 0 ? perm[i] + static_cast<int64_t>(r) : perm[i];
    if (norm[i] < 0 || norm[i] >= static_cast<int64_t>(r)) return Unsupported("perm");
  }
  // float32: no copy, the output is the input seen through permuted strides. Kernels
  // that take strided operands (matmul, attention) read it in place; the others get
  // one row-major copy (a oneDNN reorder) made when they first ask for it.
  dnnl::memory::dims in_strides;
  if (in.dtype == DType::kFloat32 && r > 0 && NumElements(in.shape) > 0 && StridedLayout(in.md, &in_strides)) {
    dnnl::memory::dims od, os;
    for (size_t i = 0; i < r; ++i) {
      od.push_back(in.shape[static_cast<size_t>(norm[i])]);
      os.push_back(in_strides[static_cast<size_t>(norm[i])]);
    }
    b.ViewOutput(node.output(0), b.AnyInput(node.input(0), nullptr),
                 dnnl::memory::desc(od, dnnl::memory::data_type::f32, os));
    return Status::Ok();
  }
  const std::vector<int64_t> st = Strides(in.shape);
  auto step = std::make_unique<CopyStep>();
  step->copy.esize = DTypeSize(in.dtype);
  for (size_t i = 0; i < r; ++i) {
    const int64_t p = perm[i] < 0 ? perm[i] + static_cast<int64_t>(r) : perm[i];
    if (p < 0 || p >= static_cast<int64_t>(r)) return Unsupported("perm");
    step->copy.shape.push_back(in.shape[static_cast<size_t>(p)]);
    step->copy.in_strides.push_back(st[static_cast<size_t>(p)]);
  }
  step->copy.Simplify();
  SP_ASSIGN_OR_RETURN(step->in, b.PlainInput(node.input(0)));
  step->out = b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat("Transpose ", node.name, " [cpu]"));
  return Status::Ok();
}

// ---- slice -------------------------------------------------------------------

bool AcceptsSlice(const ir::Node& node) {
  return node.domain.empty() && node.op_type == "Slice" && Storable(node);
}

Status BuildSlice(ProgramBuilder& b, const ir::Node& node, int64_t opset) {
  const ValueState& in = b.state(node.input(0));
  const size_t r = in.shape.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset < 10) {
    starts = node.attr_ints("starts");
    ends = node.attr_ints("ends");
    axes = node.attr_ints("axes");
  } else {
    auto read = [&](size_t k, std::vector<int64_t>* out) -> Status {
      const ir::Value* v = node.input(k);
      if (v == nullptr) return Status::Ok();
      const ValueState& s = b.state(v);
      if (s.known == nullptr) return Unsupported("slice parameters not constant");
      SP_ASSIGN_OR_RETURN(*out, ToInt64Vector(*s.known, "slice parameter"));
      return Status::Ok();
    };
    SP_RETURN_IF_ERROR(read(1, &starts));
    SP_RETURN_IF_ERROR(read(2, &ends));
    SP_RETURN_IF_ERROR(read(3, &axes));
    SP_RETURN_IF_ERROR(read(4, &steps));
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return Unsupported("slice parameters");
  std::vector<int64_t> begin(r, 0), step(r, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + static_cast<int64_t>(r) : axes[i];
    if (a < 0 || a >= static_cast<int64_t>(r) || steps[i] == 0) return Unsupported("slice axis");
    const int64_t dim = in.shape[static_cast<size_t>(a)];
    if (dim == 0) return Unsupported("empty axis");
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    begin[static_cast<size_t>(a)] = s;
    step[static_cast<size_t>(a)] = steps[i];
  }
  const Shape out = b.state(node.output(0)).shape;
  const std::vector<int64_t> st = Strides(in.shape);
  auto k = std::make_unique<CopyStep>();
  k->copy.esize = DTypeSize(in.dtype);
  k->copy.shape = out;
  for (size_t d = 0; d < r; ++d) {
    k->copy.in_offset += begin[d] * st[d];
    k->copy.in_strides.push_back(step[d] * st[d]);
  }
  if (r == 0) return Unsupported("rank 0");
  k->copy.Simplify();
  SP_ASSIGN_OR_RETURN(k->in, b.PlainInput(node.input(0)));
  k->out = b.Output(node.output(0));
  b.AddStep(std::move(k), StrCat("Slice ", node.name, " [cpu]"));
  return Status::Ok();
}

// ---- concat / split ----------------------------------------------------------

bool AcceptsConcat(const ir::Node& node) {
  return node.domain.empty() && node.op_type == "Concat" && Storable(node);
}

class ConcatStep : public Kernel {
 public:
  std::vector<int> ins;
  std::vector<int64_t> block;  // bytes per outer row, per input
  int out = -1;
  int64_t outer = 1, row = 0;
  Status Bind(const std::vector<void*>& ptrs) override {
    in_.clear();
    for (int i : ins) in_.push_back(static_cast<const char*>(ptrs[static_cast<size_t>(i)]));
    out_ = static_cast<char*>(ptrs[static_cast<size_t>(out)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    ParallelFor(ctx, outer, std::max<int64_t>(1, 131072 / std::max<int64_t>(row, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        char* dst = out_ + o * row;
        for (size_t i = 0; i < in_.size(); ++i) {
          std::memcpy(dst, in_[i] + o * block[i], static_cast<size_t>(block[i]));
          dst += block[i];
        }
      }
    });
    return Status::Ok();
  }

 private:
  std::vector<const char*> in_;
  char* out_ = nullptr;
};

// The layout a Concat runs in: a convolution's blocked or channels-last output among the
// inputs is kept (the others are converted to it), when every input has it without padding
// (channels a multiple of the block) and the result's readers take it; else plain.
std::optional<dnnl::memory::desc> ConcatLayout(const ProgramBuilder& b, const ir::Node& node, const Shape& out) {
  if (out.size() < 3 || b.state(node.output(0)).dtype != DType::kFloat32 ||
      !ReadersTakeBlockedLayout(b, node.output(0)))
    return std::nullopt;
  for (const ir::Value* v : node.inputs()) {
    const dnnl::memory::desc& md = b.state(v).md;
    if (!DenseBlockedLayout(md)) continue;
    std::optional<dnnl::memory::desc> out_md = DenseLayoutLike(md, out);
    if (!out_md) continue;
    bool all = true;
    for (const ir::Value* u : node.inputs()) all = all && DenseLayoutLike(md, b.state(u).shape).has_value();
    if (all) return out_md;
  }
  return std::nullopt;
}

Status BuildConcat(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const Shape out = b.state(node.output(0)).shape;
  const int64_t r = static_cast<int64_t>(out.size());
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return Unsupported("axis");
  for (const ir::Value* v : node.inputs()) {
    if (v == nullptr) return Unsupported("missing input");
    if (static_cast<int64_t>(b.state(v).shape.size()) != r) return Unsupported("rank");
  }
  const size_t esize = DTypeSize(b.state(node.output(0)).dtype);
  const std::optional<dnnl::memory::desc> layout = ConcatLayout(b, node, out);
  // In memory order, every input is `outer` runs (one per index of the physical axes outside
  // the concatenated one) that follow each other in the output: the physical axes outside it are
  // the logical dims before it (plain) or, blocked, those whose memory stride is larger.
  auto step = std::make_unique<ConcatStep>();
  if (layout) {  // every dim > 0 (DenseLayoutLike)
    for (const PhysicalAxis& a : PhysicalAxes(*layout)) {
      if (a.dim == axis) break;
      step->outer *= a.size;
    }
  } else {
    for (size_t i = 0; i < static_cast<size_t>(axis); ++i) step->outer *= out[i];
  }
  int64_t inner = 1;
  for (size_t i = static_cast<size_t>(axis) + 1; i < out.size(); ++i) inner *= out[i];
  for (const ir::Value* v : node.inputs()) {
    const Shape& s = b.state(v).shape;
    step->block.push_back((layout ? NumElements(s) / step->outer : s[static_cast<size_t>(axis)] * inner) *
                          static_cast<int64_t>(esize));
    step->row += step->block.back();
  }
  for (const ir::Value* v : node.inputs()) {
    int id = -1;
    if (layout) {
      SP_ASSIGN_OR_RETURN(id, b.Input(v, *DenseLayoutLike(*layout, b.state(v).shape)));
    } else {
      SP_ASSIGN_OR_RETURN(id, b.PlainInput(v));
    }
    step->ins.push_back(id);
  }
  step->out = layout ? b.Output(node.output(0), &*layout) : b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat("Concat ", node.name, layout ? " [cpu in layout]" : " [cpu]"));
  return Status::Ok();
}

bool AcceptsSplit(const ir::Node& node) {
  return node.domain.empty() && node.op_type == "Split" && Storable(node);
}

Status BuildSplit(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const Shape in = b.state(node.input(0)).shape;
  const int64_t r = static_cast<int64_t>(in.size());
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return Unsupported("axis");
  const std::vector<int64_t> st = Strides(in);
  // Each output is a slice of the input along `axis`; the sizes come from the inferred output shapes.
  std::vector<std::unique_ptr<CopyStep>> steps;
  int64_t offset = 0;
  for (const ir::Value* o : node.outputs()) {
    if (o == nullptr) return Unsupported("omitted output");
    const Shape os = b.state(o).shape;
    auto k = std::make_unique<CopyStep>();
    k->copy.esize = DTypeSize(b.state(node.input(0)).dtype);
    k->copy.shape = os;
    k->copy.in_strides = st;
    k->copy.in_offset = offset * st[static_cast<size_t>(axis)];
    k->copy.Simplify();
    offset += os[static_cast<size_t>(axis)];
    steps.push_back(std::move(k));
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    SP_ASSIGN_OR_RETURN(steps[i]->in, b.PlainInput(node.input(0)));
    steps[i]->out = b.Output(node.output(i));
    b.AddStep(std::move(steps[i]), StrCat("Split ", node.name, ":", i, " [cpu]"));
  }
  return Status::Ok();
}

// ---- gather ------------------------------------------------------------------

bool AcceptsGather(const ir::Node& node) {
  if (!node.domain.empty() || node.op_type != "Gather" || !Storable(node)) return false;
  const ir::Value* idx = node.input(1);
  return idx && (idx->type.dtype == DType::kInt64 || idx->type.dtype == DType::kInt32);
}

class GatherStep : public Kernel {
 public:
  int data = -1, indices = -1, out = -1;
  int64_t outer = 1, axis_dim = 0, inner_bytes = 0, count = 0;
  bool idx64 = true;
  std::string label;
  Status Bind(const std::vector<void*>& ptrs) override {
    d_ = static_cast<const char*>(ptrs[static_cast<size_t>(data)]);
    i_ = ptrs[static_cast<size_t>(indices)];
    y_ = static_cast<char*>(ptrs[static_cast<size_t>(out)]);
    return Status::Ok();
  }
  Status Run(const RunCtx&) override {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < count; ++j) {
        int64_t ix = idx64 ? static_cast<const int64_t*>(i_)[j] : static_cast<const int32_t*>(i_)[j];
        if (ix < 0) ix += axis_dim;
        if (ix < 0 || ix >= axis_dim)
          return OutOfRange(label, ": index ",
                            idx64 ? static_cast<const int64_t*>(i_)[j] : static_cast<const int32_t*>(i_)[j],
                            " is out of range [", -axis_dim, ", ", axis_dim, ")");
        std::memcpy(y_ + (o * count + j) * inner_bytes, d_ + (o * axis_dim + ix) * inner_bytes,
                    static_cast<size_t>(inner_bytes));
      }
    return Status::Ok();
  }

 private:
  const char* d_ = nullptr;
  const void* i_ = nullptr;
  char* y_ = nullptr;
};

Status BuildGather(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const ValueState& ds = b.state(node.input(0));
  const int64_t r = static_cast<int64_t>(ds.shape.size());
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return Unsupported("axis");
  auto step = std::make_unique<GatherStep>();
  for (size_t i = 0; i < static_cast<size_t>(axis); ++i) step->outer *= ds.shape[i];
  step->axis_dim = ds.shape[static_cast<size_t>(axis)];
  int64_t inner = 1;
  for (size_t i = static_cast<size_t>(axis) + 1; i < ds.shape.size(); ++i) inner *= ds.shape[i];
  step->inner_bytes = inner * static_cast<int64_t>(DTypeSize(ds.dtype));
  step->count = NumElements(b.state(node.input(1)).shape);
  step->idx64 = b.state(node.input(1)).dtype == DType::kInt64;
  step->label = node.Label();
  SP_ASSIGN_OR_RETURN(step->data, b.PlainInput(node.input(0)));
  SP_ASSIGN_OR_RETURN(step->indices, b.PlainInput(node.input(1)));
  step->out = b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat("Gather ", node.name, " [cpu]"));
  return Status::Ok();
}

// ---- cast (integers / bool -> float) ----------------------------------------

bool AcceptsCast(const ir::Node& node) {
  if (!node.domain.empty() || node.op_type != "Cast" || !node.input(0) || !node.output(0)) return false;
  const DType from = node.input(0)->type.dtype, to = node.output(0)->type.dtype;
  return to == DType::kFloat32 &&
         (from == DType::kInt64 || from == DType::kInt32 || from == DType::kBool || from == DType::kFloat32);
}

class CastStep : public Kernel {
 public:
  int in = -1, out = -1;
  DType from = DType::kFloat32;
  int64_t n = 0;
  Status Bind(const std::vector<void*>& ptrs) override {
    x_ = ptrs[static_cast<size_t>(in)];
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out)]);
    return Status::Ok();
  }
  Status Run(const RunCtx&) override {
    switch (from) {
      case DType::kInt64:
        Convert(static_cast<const int64_t*>(x_));
        break;
      case DType::kInt32:
        Convert(static_cast<const int32_t*>(x_));
        break;
      case DType::kBool:
        Convert(static_cast<const bool*>(x_));
        break;
      default:
        Convert(static_cast<const float*>(x_));
        break;
    }
    return Status::Ok();
  }

 private:
  template <class T>
  void Convert(const T* x) {
    for (int64_t i = 0; i < n; ++i) y_[i] = static_cast<float>(x[i]);
  }
  const void* x_ = nullptr;
  float* y_ = nullptr;
};

Status BuildCast(ProgramBuilder& b, const ir::Node& node, int64_t) {
  auto step = std::make_unique<CastStep>();
  step->from = b.state(node.input(0)).dtype;
  step->n = NumElements(b.state(node.input(0)).shape);
  SP_ASSIGN_OR_RETURN(step->in, b.PlainInput(node.input(0)));
  step->out = b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat("Cast ", node.name, " [cpu]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kViewFamily{"cpu:view", AcceptsView, BuildView};
const KernelFamily kTransposeFamily{"cpu:transpose", AcceptsTranspose, BuildTranspose};
const KernelFamily kConcatFamily{"cpu:concat", AcceptsConcat, BuildConcat};
const KernelFamily kSliceFamily{"cpu:slice", AcceptsSlice, BuildSlice};
const KernelFamily kSplitFamily{"cpu:split", AcceptsSplit, BuildSplit};
const KernelFamily kGatherFamily{"cpu:gather", AcceptsGather, BuildGather};
const KernelFamily kCastFamily{"cpu:cast", AcceptsCast, BuildCast};

}  // namespace sampan::cpu
