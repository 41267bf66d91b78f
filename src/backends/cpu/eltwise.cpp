// Elementwise float32 kernels: unary activations/math and broadcasting binary
// arithmetic. Binary broadcasting is reduced once, at load, to rows: adjacent
// dims that broadcast the same way are merged, leaving an inner run where each
// operand is contiguous (stride 1) or a repeated scalar (stride 0).
#include <cstring>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec.h"

namespace sampan::cpu {

enum class UnaryOp {
  kRelu,
  kLeakyRelu,
  kSigmoid,
  kTanh,
  kExp,
  kSqrt,
  kNeg,
  kAbs,
  kErf,
  kHardSigmoid,
  kHardSwish,
  kClip,
  kGelu,
  kGeluTanh,
  kReciprocal
};
enum class BinaryOp { kAdd, kSub, kMul, kDiv };

namespace detail {

__attribute__((always_inline)) inline void UnaryRunBody(UnaryOp op, float p0, float p1, const float* x, float* y,
                                                        int64_t n) {
  switch (op) {
    case UnaryOp::kRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
      break;
    case UnaryOp::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= 0.f ? x[i] : p0 * x[i];
      break;
    case UnaryOp::kSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = vec::Sigmoid(x[i]);
      break;
    case UnaryOp::kTanh:
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
      break;
    case UnaryOp::kExp:
      for (int64_t i = 0; i < n; ++i) y[i] = vec::Exp(x[i]);
      break;
    case UnaryOp::kSqrt:
      for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
      break;
    case UnaryOp::kNeg:
      for (int64_t i = 0; i < n; ++i) y[i] = -x[i];
      break;
    case UnaryOp::kAbs:
      for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]);
      break;
    case UnaryOp::kErf:
      for (int64_t i = 0; i < n; ++i) y[i] = std::erf(x[i]);
      break;
    case UnaryOp::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = std::fmax(0.f, std::fmin(1.f, p0 * x[i] + p1));
      break;
    case UnaryOp::kHardSwish:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * std::fmax(0.f, std::fmin(1.f, x[i] / 6.f + 0.5f));
      break;
    case UnaryOp::kClip:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] < p0 ? p0 : (x[i] > p1 ? p1 : x[i]);
      break;
    case UnaryOp::kGelu:
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * 0.70710678118654752f));
      break;
    case UnaryOp::kGeluTanh:
      for (int64_t i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.f + std::tanh(0.7978845608028654f * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
      break;
    case UnaryOp::kReciprocal:
      for (int64_t i = 0; i < n; ++i) y[i] = 1.f / x[i];
      break;
  }
}

template <BinaryOp op>
__attribute__((always_inline)) inline float Apply(float a, float b) {
  if constexpr (op == BinaryOp::kAdd) return a + b;
  if constexpr (op == BinaryOp::kSub) return a - b;
  if constexpr (op == BinaryOp::kMul) return a * b;
  return a / b;
}

template <BinaryOp op>
__attribute__((always_inline)) inline void BinaryRowT(const float* a, int sa, const float* b, int sb, float* y,
                                                      int64_t n) {
  if (sa && sb) {
    for (int64_t i = 0; i < n; ++i) y[i] = Apply<op>(a[i], b[i]);
  } else if (sa) {
    const float bv = *b;
    for (int64_t i = 0; i < n; ++i) y[i] = Apply<op>(a[i], bv);
  } else if (sb) {
    const float av = *a;
    for (int64_t i = 0; i < n; ++i) y[i] = Apply<op>(av, b[i]);
  } else {
    const float v = Apply<op>(*a, *b);
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

__attribute__((always_inline)) inline void BinaryRowBody(BinaryOp op, const float* a, int sa, const float* b, int sb,
                                                         float* y, int64_t n) {
  switch (op) {
    case BinaryOp::kAdd:
      BinaryRowT<BinaryOp::kAdd>(a, sa, b, sb, y, n);
      break;
    case BinaryOp::kSub:
      BinaryRowT<BinaryOp::kSub>(a, sa, b, sb, y, n);
      break;
    case BinaryOp::kMul:
      BinaryRowT<BinaryOp::kMul>(a, sa, b, sb, y, n);
      break;
    case BinaryOp::kDiv:
      BinaryRowT<BinaryOp::kDiv>(a, sa, b, sb, y, n);
      break;
  }
}

// Each compiled for baseline x86-64, AVX2 and AVX-512 (isa.h).
SP_ISA_DISPATCH(void, UnaryRun, (UnaryOp op, float p0, float p1, const float* x, float* y, int64_t n),
                (op, p0, p1, x, y, n))
SP_ISA_DISPATCH(void, BinaryRow, (BinaryOp op, const float* a, int sa, const float* b, int sb, float* y, int64_t n),
                (op, a, sa, b, sb, y, n))

}  // namespace detail

namespace {

// ---- unary -------------------------------------------------------------------

bool ParseUnary(const std::string& op, UnaryOp* out) {
  static const std::pair<const char*, UnaryOp> table[] = {
      {"Relu", UnaryOp::kRelu},
      {"LeakyRelu", UnaryOp::kLeakyRelu},
      {"Sigmoid", UnaryOp::kSigmoid},
      {"Tanh", UnaryOp::kTanh},
      {"Exp", UnaryOp::kExp},
      {"Sqrt", UnaryOp::kSqrt},
      {"Neg", UnaryOp::kNeg},
      {"Abs", UnaryOp::kAbs},
      {"Erf", UnaryOp::kErf},
      {"HardSigmoid", UnaryOp::kHardSigmoid},
      {"HardSwish", UnaryOp::kHardSwish},
      {"Clip", UnaryOp::kClip},
      {"Gelu", UnaryOp::kGelu},
      {"Reciprocal", UnaryOp::kReciprocal},
  };
  for (const auto& [name, u] : table)
    if (op == name) {
      *out = u;
      return true;
    }
  return false;
}

bool AcceptsUnary(const ir::Node& node) {
  UnaryOp u;
  if (!node.domain.empty() || !ParseUnary(node.op_type, &u) || !AllFloat32(node)) return false;
  if (u == UnaryOp::kGelu) {
    const std::string approx = node.attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh") return false;
  }
  return true;
}

class UnaryStep : public Kernel {
 public:
  UnaryStep(UnaryOp op, float p0, float p1, int in, int out, int64_t n)
      : op_(op), p0_(p0), p1_(p1), in_(in), out_(out), n_(n) {}
  Status Bind(const std::vector<void*>& ptrs) override {
    x_ = static_cast<const float*>(ptrs[static_cast<size_t>(in_)]);
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out_)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    ParallelFor(ctx, n_, 16384, [&](int64_t b, int64_t e) { detail::UnaryRun(op_, p0_, p1_, x_ + b, y_ + b, e - b); });
    return Status::Ok();
  }

 private:
  UnaryOp op_;
  float p0_, p1_;
  int in_, out_;
  int64_t n_;
  const float* x_ = nullptr;
  float* y_ = nullptr;
};

Status BuildUnary(ProgramBuilder& b, const ir::Node& node, int64_t opset) {
  UnaryOp op;
  if (!ParseUnary(node.op_type, &op)) return Unsupported("op");
  float p0 = 0.f, p1 = 0.f;
  switch (op) {
    case UnaryOp::kLeakyRelu:
      p0 = node.attr_float("alpha", 0.01f);
      break;
    case UnaryOp::kHardSigmoid:
      p0 = node.attr_float("alpha", 0.2f);
      p1 = node.attr_float("beta", 0.5f);
      break;
    case UnaryOp::kClip: {
      p0 = -INFINITY;
      p1 = INFINITY;
      if (opset < 11) {
        p0 = node.attr_float("min", -INFINITY);
        p1 = node.attr_float("max", INFINITY);
      } else {
        for (size_t k = 1; k <= 2; ++k) {
          const ir::Value* v = node.input(k);
          if (v == nullptr) continue;
          const ValueState& s = b.state(v);
          if (s.known == nullptr || s.known->numel() != 1) return Unsupported("Clip bounds not constant");
          (k == 1 ? p0 : p1) = static_cast<float>(ElementAsDouble(*s.known, 0));
        }
      }
      break;
    }
    case UnaryOp::kGelu:
      if (node.attr_string("approximate", "none") == "tanh") op = UnaryOp::kGeluTanh;
      break;
    default:
      break;
  }
  // Elementwise, so a dense blocked or channels-last input (a convolution's) is taken as it is
  // and the output keeps its layout: no reorder to plain and back. A blocked layout whose
  // channels are padded (24 channels in nChw16c: a ConvTranspose's output) is taken too when
  // op(0) == 0, so the padding stays zero as oneDNN's readers expect: the padding is computed
  // with the rest.
  const dnnl::memory::desc in_md = b.state(node.input(0)).md;
  float zero = 0.f, at_zero = 1.f;
  detail::UnaryRun(op, p0, p1, &zero, &at_zero, 1);
  const bool padded = PaddedChannelBlockedLayout(in_md) && at_zero == 0.f;
  const bool keep_layout = DenseBlockedLayout(in_md) || padded;
  int in = -1;
  if (keep_layout) {
    in = b.AnyInput(node.input(0), nullptr);
  } else {
    SP_ASSIGN_OR_RETURN(in, b.PlainInput(node.input(0)));
  }
  const int out = keep_layout ? b.Output(node.output(0), &in_md) : b.Output(node.output(0));
  const int64_t n =
      padded ? static_cast<int64_t>(in_md.get_size() / sizeof(float)) : NumElements(b.state(node.output(0)).shape);
  b.AddStep(std::make_unique<UnaryStep>(op, p0, p1, in, out, n),
            StrCat(node.op_type, " ", node.name, keep_layout ? " [cpu in layout]" : " [cpu]"));
  return Status::Ok();
}

// ---- binary ------------------------------------------------------------------

bool ParseBinary(const std::string& op, BinaryOp* out) {
  if (op == "Add")
    *out = BinaryOp::kAdd;
  else if (op == "Sub")
    *out = BinaryOp::kSub;
  else if (op == "Mul")
    *out = BinaryOp::kMul;
  else if (op == "Div")
    *out = BinaryOp::kDiv;
  else
    return false;
  return true;
}

bool AcceptsBinary(const ir::Node& node) {
  BinaryOp op;
  return node.domain.empty() && ParseBinary(node.op_type, &op) && AllFloat32(node);
}

class BinaryStep : public Kernel {
 public:
  BinaryOp op;
  int a = -1, bb = -1, y = -1;
  // Collapsed geometry: outer dims (row-major), their strides per operand, inner run.
  std::vector<int64_t> outer, stride_a, stride_b;
  int64_t inner = 1;
  int inner_a = 1, inner_b = 1;
  int64_t rows = 1;

  Status Bind(const std::vector<void*>& ptrs) override {
    pa_ = static_cast<const float*>(ptrs[static_cast<size_t>(a)]);
    pb_ = static_cast<const float*>(ptrs[static_cast<size_t>(bb)]);
    py_ = static_cast<float*>(ptrs[static_cast<size_t>(y)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    if (rows == 1) {
      ParallelFor(ctx, inner, 16384, [&](int64_t s, int64_t e) {
        detail::BinaryRow(op, pa_ + (inner_a ? s : 0), inner_a, pb_ + (inner_b ? s : 0), inner_b, py_ + s, e - s);
      });
      return Status::Ok();
    }
    ParallelFor(ctx, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t s, int64_t e) {
      for (int64_t r = s; r < e; ++r) {
        int64_t rem = r, oa = 0, ob = 0;
        for (size_t d = outer.size(); d-- > 0;) {
          const int64_t i = rem % outer[d];
          rem /= outer[d];
          oa += i * stride_a[d];
          ob += i * stride_b[d];
        }
        detail::BinaryRow(op, pa_ + oa, inner_a, pb_ + ob, inner_b, py_ + r * inner, inner);
      }
    });
    return Status::Ok();
  }

 private:
  const float* pa_ = nullptr;
  const float* pb_ = nullptr;
  float* py_ = nullptr;
};

// Axes of an elementwise walk (outermost first), each with a size and a stride per operand, merged
// from the outside in wherever both operands keep one stride pattern; size-1 axes are dropped.
struct MergedAxes {
  std::vector<int64_t> dims, sa, sb;
};
MergedAxes MergeAxes(const std::vector<int64_t>& size, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb) {
  MergedAxes m;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == 1) continue;
    if (!m.dims.empty() && m.sa.back() == sa[i] * size[i] && m.sb.back() == sb[i] * size[i]) {
      m.dims.back() *= size[i];
      m.sa.back() = sa[i];
      m.sb.back() = sb[i];
      continue;
    }
    m.dims.push_back(size[i]);
    m.sa.push_back(sa[i]);
    m.sb.push_back(sb[i]);
  }
  return m;
}

// A binary op on a dense blocked or channels-last operand (a convolution's output) of the
// output's shape, run in that layout: the other operand is the same layout, or plain and
// broadcast so that it is a scalar or contiguous along the innermost axis (a per-channel
// scale against nChw16c or nhwc, a scalar). False (program untouched) when that does not apply.
template <class StridesOf>
Result<bool> TryBinaryInLayout(ProgramBuilder& b, const ir::Node& node, BinaryOp op, const StridesOf& strides_of) {
  const Shape out = b.state(node.output(0)).shape;
  for (int li = 0; li < 2; ++li) {
    const ValueState& ls = b.state(node.input(li));
    const ValueState& os = b.state(node.input(1 - li));
    if (ls.shape != out || !DenseBlockedLayout(ls.md)) continue;
    // An operand of the full shape in another layout (an upsampled FPN level beside a
    // convolution's output) is converted to this one: one reorder, and the result stays in the
    // layout the next convolution reads, instead of both operands and the result going plain.
    const bool same = os.md == ls.md || os.shape == out;
    const std::vector<PhysicalAxis> axes = PhysicalAxes(ls.md);
    const std::vector<int64_t> plain = strides_of(os.shape);  // per logical dim, 0 where broadcast
    // Per physical axis: the layout operand's memory stride and the other's.
    std::vector<int64_t> size, sl, so;
    int64_t acc = 1;
    for (size_t i = axes.size(); i-- > 0;) {
      size.insert(size.begin(), axes[i].size);
      sl.insert(sl.begin(), acc);
      so.insert(so.begin(), plain[static_cast<size_t>(axes[i].dim)] * axes[i].scale);
      acc *= axes[i].size;
    }
    if (same) so = sl;
    const MergedAxes merged = MergeAxes(size, sl, so);
    const std::vector<int64_t>&dims = merged.dims, &dl = merged.sa, &dor = merged.sb;
    if (dims.empty() || (dor.back() != 0 && dor.back() != 1)) continue;
    auto step = std::make_unique<BinaryStep>();
    step->op = op;
    step->inner = dims.back();
    const std::vector<int64_t>& da = li == 0 ? dl : dor;
    const std::vector<int64_t>& db = li == 0 ? dor : dl;
    step->inner_a = da.back() != 0;
    step->inner_b = db.back() != 0;
    step->outer.assign(dims.begin(), dims.end() - 1);
    step->stride_a.assign(da.begin(), da.end() - 1);
    step->stride_b.assign(db.begin(), db.end() - 1);
    for (int64_t d : step->outer) step->rows *= d;
    const dnnl::memory::desc md = ls.md;
    const int lbuf = b.AnyInput(node.input(li), nullptr);
    int obuf = -1;
    if (same) {
      SP_ASSIGN_OR_RETURN(obuf, b.Input(node.input(1 - li), md));
    } else {
      SP_ASSIGN_OR_RETURN(obuf, b.PlainInput(node.input(1 - li)));
    }
    step->a = li == 0 ? lbuf : obuf;
    step->bb = li == 0 ? obuf : lbuf;
    step->y = b.Output(node.output(0), &md);
    b.AddStep(std::move(step), StrCat(node.op_type, " ", node.name, " [cpu in layout]"));
    return true;
  }
  return false;
}

Status BuildBinary(ProgramBuilder& b, const ir::Node& node, int64_t) {
  BinaryOp op;
  if (!ParseBinary(node.op_type, &op)) return Unsupported("op");
  const Shape out = b.state(node.output(0)).shape;
  const size_t r = out.size();
  auto strides_of = [&](const Shape& s) {
    Shape padded(r - s.size(), 1);
    padded.insert(padded.end(), s.begin(), s.end());
    std::vector<int64_t> st(r, 0);
    int64_t acc = 1;
    for (size_t i = r; i-- > 0;) {
      st[i] = padded[i] == 1 ? 0 : acc;
      acc *= padded[i];
    }
    return st;
  };
  if (NumElements(out) > 0) {
    SP_ASSIGN_OR_RETURN(bool in_layout, TryBinaryInLayout(b, node, op, strides_of));
    if (in_layout) return Status::Ok();
  }
  const std::vector<int64_t> sa = strides_of(b.state(node.input(0)).shape);
  const std::vector<int64_t> sb = strides_of(b.state(node.input(1)).shape);
  const MergedAxes merged = MergeAxes(std::vector<int64_t>(out.begin(), out.end()), sa, sb);
  const std::vector<int64_t>&dims = merged.dims, &da = merged.sa, &db = merged.sb;
  auto step = std::make_unique<BinaryStep>();
  step->op = op;
  if (!dims.empty()) {
    step->inner = dims.back();
    step->inner_a = da.back() != 0;
    step->inner_b = db.back() != 0;
    if ((da.back() != 0 && da.back() != 1) || (db.back() != 0 && db.back() != 1)) return Internal("binary strides");
    step->outer.assign(dims.begin(), dims.end() - 1);
    step->stride_a.assign(da.begin(), da.end() - 1);
    step->stride_b.assign(db.begin(), db.end() - 1);
    for (int64_t d : step->outer) step->rows *= d;
  } else {
    step->inner = 1;
    step->inner_a = step->inner_b = 0;
  }
  if (NumElements(out) == 0) step->rows = 0, step->inner = 0;
  SP_ASSIGN_OR_RETURN(step->a, b.PlainInput(node.input(0)));
  SP_ASSIGN_OR_RETURN(step->bb, b.PlainInput(node.input(1)));
  step->y = b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat(node.op_type, " ", node.name, " [cpu]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kUnaryFamily{"cpu:unary", AcceptsUnary, BuildUnary};
const KernelFamily kBinaryFamily{"cpu:binary", AcceptsBinary, BuildBinary};

}  // namespace sampan::cpu
