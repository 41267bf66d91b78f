// sampan::QPointwise (ops/quantized_pointwise.h) on the CPU: one pass over the output, in chunks
// of kChunk elements, in the layout the first activation input is stored in (a convolution's
// nChw16c/nhwc u8, or plain): per chunk the quantized inputs are dequantized into registers, the
// program runs op by op over the chunk (vectorised loops; Sigmoid and Exp as the CPU's unary
// kernels compute them), intermediate roundings included, and the result is quantized. Constants
// are scalars or one value per channel; the channel of each element comes from the layout's
// physical axes (a row of the innermost axis has one channel, or consecutive ones).
#include "ops/quantized_pointwise.h"

#include <cmath>
#include <cstring>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec.h"

namespace sampan::cpu {
namespace {

using ops::PwOp;

constexpr int64_t kChunk = 256;
constexpr int kMaxRegs = 40;

struct Instr {
  PwOp op;
  int lhs, rhs;
  float p0, p1;
  float fq_s = 0;                          //!< 0: no rounding
  float fq_inv = 0;                        //!< 1 / fq_s
  float fq_lo = 0, fq_hi = 0, fq_nan = 0;  //!< integer range less the zero point; NaN's integer (-zp)
};

// Register r of a chunk: kChunk values at regs + r * kChunk, or one value there (scalar[r]).
struct ChunkArgs {
  const Instr* instrs;
  int n_in, n_instr;
  float* regs;
  const bool* scalar;
  int64_t len;
};

// x / s rounded half to even and saturated to [lo, hi] (integers), or `nan` for a NaN quotient.
// The quotient is x / s correctly rounded, as the reference's division gives it, without a
// division: q0 = x * (1/s), the residual r = x - q0 * s (exact in an FMA), q = q0 + r * (1/s)
// (Markstein's theorem: with 1/s correctly rounded and q0 within an ulp, q is x / s correctly
// rounded). Where the residual is not finite (x infinite), q0 stands.
__attribute__((always_inline)) inline float RoundRel(float x, float s, float inv, float lo, float hi, float nan) {
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23: adding and taking it away rounds half to even
  const float q0 = x * inv;
  const float r = __builtin_fmaf(-q0, s, x);
  const float q1 = __builtin_fmaf(r, inv, q0);
  const float q = r - r == 0.f ? q1 : q0;
  float c = q < lo ? lo : q;
  c = c > hi ? hi : c;
  const float v = (c + kMagic) - kMagic;
  return q == q ? v : nan;
}

template <int kSa, int kSb, class F>
__attribute__((always_inline)) inline void Loop2(const float* a, const float* b, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i * kSa], b[i * kSb]);
}

template <class F>
__attribute__((always_inline)) inline void Binary(const float* a, bool sa, const float* b, bool sb, float* y, int64_t n,
                                                  F f) {
  if (!sa && !sb)
    Loop2<1, 1>(a, b, y, n, f);
  else if (!sa)
    Loop2<1, 0>(a, b, y, n, f);
  else if (!sb)
    Loop2<0, 1>(a, b, y, n, f);
  else
    Loop2<0, 0>(a, b, y, n, f);
}

template <class F>
__attribute__((always_inline)) inline void Unary(const float* a, bool sa, float* y, int64_t n, F f) {
  if (sa) {
    const float v = f(a[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i]);
  }
}

__attribute__((always_inline)) inline void RunChunkBody(const ChunkArgs& c) {
  const int64_t n = c.len;
  for (int j = 0; j < c.n_instr; ++j) {
    const Instr& in = c.instrs[j];
    const float* a = c.regs + in.lhs * kChunk;
    const bool sa = c.scalar[in.lhs];
    const float* b = in.rhs >= 0 ? c.regs + in.rhs * kChunk : a;
    const bool sb = in.rhs >= 0 ? c.scalar[in.rhs] : sa;
    float* y = c.regs + (c.n_in + j) * kChunk;
    const float p0 = in.p0, p1 = in.p1;
    switch (in.op) {
      case PwOp::kAdd:
        Binary(a, sa, b, sb, y, n, [](float x, float z) { return x + z; });
        break;
      case PwOp::kSub:
        Binary(a, sa, b, sb, y, n, [](float x, float z) { return x - z; });
        break;
      case PwOp::kMul:
        Binary(a, sa, b, sb, y, n, [](float x, float z) { return x * z; });
        break;
      case PwOp::kDiv:
        Binary(a, sa, b, sb, y, n, [](float x, float z) { return x / z; });
        break;
      case PwOp::kPow:
        Binary(a, sa, b, sb, y, n, [](float x, float z) { return std::pow(x, z); });
        break;
      case PwOp::kRelu:
        Unary(a, sa, y, n, [](float x) { return x < 0.f ? 0.f : x; });
        break;
      case PwOp::kSigmoid:
        Unary(a, sa, y, n, [](float x) { return vec::Sigmoid(x); });
        break;
      case PwOp::kTanh:
        Unary(a, sa, y, n, [](float x) { return std::tanh(x); });
        break;
      case PwOp::kNeg:
        Unary(a, sa, y, n, [](float x) { return -x; });
        break;
      case PwOp::kAbs:
        Unary(a, sa, y, n, [](float x) { return std::fabs(x); });
        break;
      case PwOp::kSqrt:
        Unary(a, sa, y, n, [](float x) { return std::sqrt(x); });
        break;
      case PwOp::kExp:
        Unary(a, sa, y, n, [](float x) { return vec::Exp(x); });
        break;
      case PwOp::kHardSwish:
        Unary(a, sa, y, n, [](float x) { return x * std::fmax(0.f, std::fmin(1.f, x / 6.f + 0.5f)); });
        break;
      case PwOp::kHardSigmoid:
        Unary(a, sa, y, n, [=](float x) { return std::fmax(0.f, std::fmin(1.f, p0 * x + p1)); });
        break;
      case PwOp::kClip:
        Unary(a, sa, y, n, [=](float x) { return std::fmin(std::fmax(x, p0), p1); });
        break;
      case PwOp::kLeakyRelu:
        Unary(a, sa, y, n, [=](float x) { return x >= 0.f ? x : p0 * x; });
        break;
    }
    if (in.fq_s > 0) {
      const float s = in.fq_s, inv = in.fq_inv, lo = in.fq_lo, hi = in.fq_hi, nan = in.fq_nan;
      for (int64_t i = 0; i < n; ++i) y[i] = RoundRel(y[i], s, inv, lo, hi, nan) * s;
    }
  }
}

template <class T>
__attribute__((always_inline)) inline void DequantizeBody(const T* q, float s, float zp, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = (static_cast<float>(q[i]) - zp) * s;
}
__attribute__((always_inline)) inline void DequantizeChunkBody(const void* q, bool u8, float s, float zp, float* x,
                                                               int64_t n) {
  if (u8)
    DequantizeBody(static_cast<const uint8_t*>(q), s, zp, x, n);
  else
    DequantizeBody(static_cast<const int8_t*>(q), s, zp, x, n);
}

template <class T>
__attribute__((always_inline)) inline void QuantizeBody(const float* x, float s, float inv, float lo, float hi,
                                                        float zp, T* y, int64_t n) {
  // NaN: stored 0, as the reference kernel does (the relative integer -zp).
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(static_cast<int32_t>(RoundRel(x[i], s, inv, lo, hi, -zp) + zp));
}
__attribute__((always_inline)) inline void QuantizeChunkBody(const float* x, float s, float inv, float lo, float hi,
                                                             float zp, bool u8, void* y, int64_t n) {
  if (u8)
    QuantizeBody(x, s, inv, lo, hi, zp, static_cast<uint8_t*>(y), n);
  else
    QuantizeBody(x, s, inv, lo, hi, zp, static_cast<int8_t*>(y), n);
}

SP_ISA_DISPATCH(void, RunChunk, (const ChunkArgs& c), (c))
SP_ISA_DISPATCH(void, DequantizeChunk, (const void* q, bool u8, float s, float zp, float* x, int64_t n),
                (q, u8, s, zp, x, n))
SP_ISA_DISPATCH(void, QuantizeChunk,
                (const float* x, float s, float inv, float lo, float hi, float zp, bool u8, void* y, int64_t n),
                (x, s, inv, lo, hi, zp, u8, y, n))

// One input of the step.
struct In {
  enum Kind { kQuantized, kFloat, kScalar, kPerChannel } kind = kFloat;
  int buffer = -1;  // kQuantized, kFloat
  const void* ptr = nullptr;
  bool u8 = true;
  float scale = 0, zp = 0;
  float value = 0;              // kScalar
  std::vector<float> channels;  // kPerChannel
};

// The channel of each row of the innermost physical axis: sum over the outer axes that index
// channels of ((row / divisor) % size) * scale; within the row, + i * inner_scale.
struct ChannelMap {
  struct Axis {
    int64_t divisor, size, scale;
  };
  std::vector<Axis> outer;
  int64_t inner = 1;        // elements per row
  int64_t inner_scale = 0;  // channel step along a row (0 or 1)
  int64_t RowChannel(int64_t row) const {
    int64_t c = 0;
    for (const Axis& a : outer) c += ((row / a.divisor) % a.size) * a.scale;
    return c;
  }
};

class QPointwiseStep : public Kernel {
 public:
  std::vector<In> inputs;
  std::vector<Instr> instrs;
  ChannelMap channels;
  int y_buffer = -1;
  bool y_u8 = true;
  float y_scale = 1, y_lo = 0, y_hi = 255, y_zp = 0;
  int64_t count = 0;

  Status Bind(const std::vector<void*>& ptrs) override {
    for (In& in : inputs)
      if (in.buffer >= 0) in.ptr = ptrs[static_cast<size_t>(in.buffer)];
    y_ = ptrs[static_cast<size_t>(y_buffer)];
    return Status::Ok();
  }

  Status Run(const RunCtx& ctx) override {
    ParallelFor(ctx, (count + kChunk - 1) / kChunk, 8, [&](int64_t cb, int64_t ce) {
      alignas(64) float regs[kMaxRegs * kChunk];
      bool scalar[kMaxRegs] = {};
      for (int64_t chunk = cb; chunk < ce; ++chunk) {
        const int64_t start = chunk * kChunk, len = std::min(kChunk, count - start);
        for (size_t i = 0; i < inputs.size(); ++i) {
          const In& in = inputs[i];
          float* r = regs + i * kChunk;
          switch (in.kind) {
            case In::kQuantized:
              DequantizeChunk(static_cast<const char*>(in.ptr) + start, in.u8, in.scale, in.zp, r, len);
              break;
            case In::kFloat:
              std::memcpy(r, static_cast<const float*>(in.ptr) + start, len * sizeof(float));
              break;
            case In::kScalar:
              r[0] = in.value;
              scalar[i] = true;
              break;
            case In::kPerChannel:
              FillChannels(in.channels, start, len, r);
              break;
          }
        }
        ChunkArgs args{
            instrs.data(), static_cast<int>(inputs.size()), static_cast<int>(instrs.size()), regs, scalar, len};
        RunChunk(args);
        QuantizeChunk(regs + (inputs.size() + instrs.size() - 1) * kChunk, y_scale, 1.f / y_scale, y_lo, y_hi, y_zp,
                      y_u8, static_cast<char*>(y_) + start, len);
      }
    });
    return Status::Ok();
  }

 private:
  // Per-channel values of elements [start, start + len).
  void FillChannels(const std::vector<float>& v, int64_t start, int64_t len, float* r) const {
    const int64_t inner = channels.inner;
    int64_t row = start / inner, i = start % inner;
    for (int64_t k = 0; k < len;) {
      const int64_t base = channels.RowChannel(row);
      const int64_t take = std::min(inner - i, len - k);
      if (channels.inner_scale == 0) {
        const float c = v[static_cast<size_t>(base)];
        for (int64_t t = 0; t < take; ++t) r[k + t] = c;
      } else {
        std::memcpy(r + k, v.data() + base + i, static_cast<size_t>(take) * sizeof(float));
      }
      k += take;
      i = 0;
      ++row;
    }
  }
  void* y_ = nullptr;
};

bool AcceptsQPointwise(const ir::Node& node) {
  if (node.domain != "sampan" || node.op_type != "QPointwise" || node.num_outputs() != 1) return false;
  auto p = ops::ReadPwProgram(node, node.num_inputs());
  return p.ok() && p->inputs.size() + p->instrs.size() <= static_cast<size_t>(kMaxRegs);
}

// The integer range of a quantized type less the zero point.
void RelRange(bool u8, int32_t zp, float* lo, float* hi) {
  *lo = static_cast<float>(u8 ? 0 : -128) - static_cast<float>(zp);
  *hi = static_cast<float>(u8 ? 255 : 127) - static_cast<float>(zp);
}

// A dense layout whose element order QPointwise can walk: plain row-major, or a dense blocked /
// channels-last one (DenseBlockedLayout, asked of the same layout as f32).
bool Walkable(const dnnl::memory::desc& md, bool* plain) {
  dnnl::memory::desc f = md;
  f.data.data_type = dnnl_f32;
  if (DenseBlockedLayout(f)) {
    *plain = false;
    return true;
  }
  dnnl::memory::dims strides;
  if (!StridedLayout(f, &strides)) return false;
  int64_t acc = 1;
  for (int i = f.data.ndims; i-- > 0;) {
    if (f.data.dims[i] != 1 && strides[static_cast<size_t>(i)] != acc) return false;
    acc *= f.data.dims[i];
  }
  *plain = true;
  return true;
}

Status BuildQPointwise(ProgramBuilder& b, const ir::Node& node, int64_t) {
  SP_ASSIGN_OR_RETURN(ops::PwProgram p, ops::ReadPwProgram(node, node.num_inputs()));
  const Shape out = b.state(node.output(0)).shape;
  const int64_t count = NumElements(out);
  // The layout: the first activation input's, when it can be walked; else plain.
  dnnl::memory::desc md;
  bool have_md = false, plain = true;
  for (size_t i = 0; i < node.num_inputs() && !have_md; ++i) {
    const ir::Value* v = node.input(i);
    if (v->is_constant()) continue;
    if (b.state(v).shape != out) return Unsupported("an input of another shape than the output (broadcast)");
    dnnl::memory::desc m;
    b.AnyInput(v, &m);
    if (m.data.ndims == static_cast<int>(out.size()) && Walkable(m, &plain)) {
      md = m;
      have_md = true;
    }
  }
  const DType ytype = p.y_u8 ? DType::kUInt8 : DType::kInt8;
  auto with_type = [](dnnl::memory::desc m, DType t) {
    m.data.data_type = static_cast<dnnl_data_type_t>(DnnlType(t));
    return m;
  };
  auto step = std::make_unique<QPointwiseStep>();
  // Physical axes of the walk (plain: the logical dims in order).
  std::vector<PhysicalAxis> axes;
  if (have_md && !plain) {
    axes = PhysicalAxes(md);
  } else {
    for (size_t d = 0; d < out.size(); ++d) axes.push_back(PhysicalAxis{out[d], static_cast<int>(d), 1});
  }
  if (axes.empty()) axes.push_back(PhysicalAxis{1, -1, 1});  // a scalar
  step->channels.inner = axes.back().size;
  step->channels.inner_scale = axes.back().dim == 1 ? axes.back().scale : 0;
  int64_t divisor = 1;
  for (size_t k = axes.size() - 1; k-- > 0;) {
    if (axes[k].dim == 1) step->channels.outer.push_back({divisor, axes[k].size, axes[k].scale});
    divisor *= axes[k].size;
  }
  for (size_t i = 0; i < node.num_inputs(); ++i) {
    const ir::Value* v = node.input(i);
    In in;
    if (v->is_constant()) {
      const Tensor& t = v->data;
      if (t.dtype() != DType::kFloat32) return Unsupported("a constant input of type ", DTypeName(t.dtype()));
      if (t.numel() == 1) {
        in.kind = In::kScalar;
        in.value = t.data<float>()[0];
      } else {
        if (out.size() < 2 || t.numel() != out[1]) return Unsupported("a constant that is not per channel");
        for (size_t d = 0; d < t.shape().size(); ++d)
          if (t.shape()[d] != 1 && t.shape()[d] != out[1]) return Unsupported("a constant that is not per channel");
        in.kind = In::kPerChannel;
        in.channels.assign(t.data<float>(), t.data<float>() + t.numel());
      }
    } else {
      if (b.state(v).shape != out) return Unsupported("an input of another shape than the output (broadcast)");
      const DType t = b.state(v).dtype;
      if (p.inputs[i].scale > 0) {
        in.kind = In::kQuantized;
        in.u8 = t == DType::kUInt8;
        in.scale = p.inputs[i].scale;
        in.zp = static_cast<float>(p.inputs[i].zero_point);
      } else {
        in.kind = In::kFloat;
      }
      if (have_md) {
        SP_ASSIGN_OR_RETURN(in.buffer, b.Input(v, with_type(md, t)));
      } else {
        SP_ASSIGN_OR_RETURN(in.buffer, b.PlainInput(v));
      }
    }
    step->inputs.push_back(std::move(in));
  }
  for (const auto& pi : p.instrs) {
    Instr in{pi.op, pi.lhs, pi.rhs, pi.p0, pi.p1};
    if (pi.fq_scale > 0) {
      in.fq_s = pi.fq_scale;
      in.fq_inv = 1.f / pi.fq_scale;
      RelRange(pi.fq_u8, pi.fq_zp, &in.fq_lo, &in.fq_hi);
      in.fq_nan = -static_cast<float>(pi.fq_zp);
    }
    step->instrs.push_back(in);
  }
  step->y_u8 = p.y_u8;
  step->y_scale = p.y_scale;
  step->y_zp = static_cast<float>(p.y_zp);
  RelRange(p.y_u8, p.y_zp, &step->y_lo, &step->y_hi);
  step->count = count;
  if (have_md) {
    const dnnl::memory::desc out_md = with_type(md, ytype);
    step->y_buffer = b.Output(node.output(0), &out_md);
  } else {
    step->y_buffer = b.Output(node.output(0));
  }
  const std::string where = have_md && !plain ? " in layout" : "";
  b.AddStep(std::move(step), StrCat("QPointwise ", node.name, " [cpu", where, ", ", p.instrs.size(), " ops]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kQPointwiseFamily{"cpu:qpointwise", AcceptsQPointwise, BuildQPointwise};

}  // namespace sampan::cpu
