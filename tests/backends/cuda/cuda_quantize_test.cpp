// QuantizeLinear / DequantizeLinear on the device (quantize.cu) against the reference kernels
// (ops/quantize.cpp), bit for bit (a NaN matching any NaN only in float outputs): every quantized
// type, per tensor and per axis, saturate on and off, ties, overflow, NaN and inf, channels-last
// storage, misaligned (unvectorized) buffers, scales and zero points in device memory, and whole
// graphs through the builder with constant and graph-input scales. The factory refusals need no
// GPU; the rest skips without one and says why.
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/families.h"
#include "ops/run_node.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;
using testing::Ask;
using testing::DeviceScope;
using testing::ExpectUnsupported;
using testing::Ints;

constexpr DType kF32 = DType::kFloat32, kF16 = DType::kFloat16, kBF16 = DType::kBFloat16, kE4M3 = DType::kFloat8E4M3FN,
                kE5M2 = DType::kFloat8E5M2;
constexpr int64_t kTensor = 99;  // "axis" of a per-tensor case
bool IsF8(DType t) {
  return t == kE4M3 || t == kE5M2;
}
// The channel count of a per-axis case (0: per tensor).
int64_t Channels(const Shape& s, int64_t axis) {
  return axis == kTensor ? 0 : s[static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(s.size()) : axis)];
}

std::string Decl(const std::string& name, DType t, const Shape& s) {
  return name + ": " + DTypeName(t) + "[" + testing::Dims(s) + "]";
}
// One node reading graph inputs x, s and (when z is defined) z.
std::string OneNode(const std::string& op, const Tensor& x, const Tensor& s, const Tensor& z, const std::string& attrs,
                    int opset = 21) {
  std::string g = "opset " + std::to_string(opset) + (op.rfind("sampan::", 0) == 0 ? "\nopset sampan 1" : "") +
                  "\ngraph g (" + Decl("x", x.dtype(), x.shape()) + ", " + Decl("s", s.dtype(), s.shape()) +
                  (z.defined() ? ", " + Decl("z", z.dtype(), z.shape()) : "") + ") -> (y) {\n  y = " + op + "(x, s" +
                  (z.defined() ? ", z)" : ")");
  return g + (attrs.empty() ? "" : " {" + attrs + "}") + "\n}\n";
}

// ch scales (a scalar when ch is 0) of type t; `zero`: channel 3 is 0 (x / 0: inf, 0 / 0: NaN).
Tensor Scales(DType t, int64_t ch, uint64_t seed, bool zero = false) {
  static const float kS[] = {0.5f, 0.1f, 2.f, 0.03f, 0.25f, 3.7f, 0.0625f, 1.f, 0.7f, 8.f};
  Tensor s = Tensor::Alloc(kF32, ch ? Shape{ch} : Shape{});
  for (int64_t i = 0; i < s.numel(); ++i) s.mutable_data<float>()[i] = kS[(seed + i) % 10];
  if (zero && ch > 3) s.mutable_data<float>()[3] = 0.f;
  return t == kF32 ? s : *CastTensor(s, t);
}

// Zero points (or DequantizeLinear inputs) of type t over a good part of its range; float8: +-0
// for zero points, every code for inputs.
Tensor QValues(DType t, const Shape& shape, uint64_t seed, bool zero_point) {
  if (IsF8(t)) {
    Tensor z = Tensor::Alloc(t, shape);
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < z.numel(); ++i)
      static_cast<uint8_t*>(z.mutable_raw())[i] = static_cast<uint8_t>(zero_point ? (rng() & 1) << 7 : rng() & 0xff);
    return z;
  }
  const int64_t lo = t == DType::kInt8    ? -128
                     : t == DType::kInt16 ? -32768
                     : t == DType::kInt32 ? -(int64_t{1} << 31)
                                          : 0;
  const int64_t hi = t == DType::kInt8     ? 128
                     : t == DType::kUInt8  ? 256
                     : t == DType::kInt16  ? 32768
                     : t == DType::kUInt16 ? 65536
                                           : int64_t{1} << 31;
  return zero_point && t != DType::kInt32 && t != DType::kInt8 && t != DType::kUInt8
             ? Ints(t, shape, seed, lo / 32, hi / 32)
             : Ints(t, shape, seed, lo, hi);
}

// QuantizeLinear's x (type t): a cubic spread over `range` quanta of each element's scale (past the
// quantized range), integer ties k + 0.5 and float8 midpoints (exact where the scale is a power
// of two), and specials (+-NaN, +-inf, +-0, the float8 overflow boundaries, huge and tiny).
Tensor QuantInput(DType t, const Shape& shape, const Tensor& scale, int64_t axis, float range, uint64_t seed) {
  static const float kSpecial[] = {NAN,    -NAN,  INFINITY, -INFINITY, 0.f,      -0.f,   448.f,  464.f,
                                   -465.f, 480.f, 57344.f,  61440.f,   -61439.f, 1e-30f, -1e30f, 2.5f};
  const Tensor s = testing::AsF32(scale);
  int64_t inner = 1, len = 1;
  if (axis != kTensor) {
    axis = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
    len = shape[axis];
    for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 7), k(-60, 60), m(0, 15), e(-11, 16);
  Tensor x = Tensor::Alloc(kF32, shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    float sc = s.data<float>()[(i / inner) % len];
    if (sc == 0) sc = 1;
    const float r = u(rng);
    float v = r * r * r * range;
    switch (pick(rng)) {
      case 0:
        v = kSpecial[m(rng)];
        break;
      case 1:
        v = k(rng) + 0.5f;
        break;
      case 2:
        v = std::ldexp((16.f + m(rng)) / 16.f, e(rng)) * (r < 0 ? -1.f : 1.f);
        break;
      default:
        break;
    }
    x.mutable_data<float>()[i] = v * sc;
  }
  return t == kF32 ? x : *CastTensor(x, t);
}

struct Outputs {
  Tensor got, want;
};
// The single node of `text` on the device (MakeKernel; every input in device memory, x and y
// channels-last when `nhwc`, one element off 16-byte alignment when `shift`) and its reference.
Result<Outputs> RunOnDevice(const std::string& text, const std::vector<Tensor>& in, bool nhwc = false,
                            bool shift = false) {
  auto g = MustParse(text);
  const ir::Node& node = *g->nodes().at(0);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : in) ptrs.push_back(t.defined() ? &t : nullptr);
  std::vector<Tensor> want;
  SP_RETURN_IF_ERROR(ops::RunNode(node, g->opset(), ptrs, &want));
  DeviceScope dev;
  if (cudaStreamCreate(&dev.stream) != cudaSuccess) return Internal("cudaStreamCreate");
  std::vector<KernelInput> kin;
  std::vector<const void*> din;
  for (size_t i = 0; i < in.size(); ++i) {
    kin.push_back(in[i].defined() ? KernelInput{true, in[i].dtype(), in[i].shape(), nullptr} : KernelInput{});
    if (!in[i].defined()) {
      din.push_back(nullptr);
      continue;
    }
    const Tensor up = nhwc && i == 0 ? testing::ToNhwc(in[i]) : in[i];
    const size_t off = shift && i == 0 ? DTypeSize(up.dtype()) : 0;
    SP_ASSIGN_OR_RETURN(void* p, dev.Alloc(up.nbytes() + off));
    if (cudaMemcpy(static_cast<char*>(p) + off, up.raw(), up.nbytes(), cudaMemcpyHostToDevice) != cudaSuccess)
      return Internal("upload");
    din.push_back(static_cast<char*>(p) + off);
  }
  KernelOptions opt;
  if (nhwc) {
    opt.in_nhwc = {true};
    opt.out_nhwc = true;
  }
  RunEnv env{dev.stream, nullptr, nullptr, nullptr, 0, nullptr};
  SP_ASSIGN_OR_RETURN(KernelChoice k,
                      MakeKernel(node, g->opset(), kin, {KernelOutput{want[0].dtype(), want[0].shape()}}, opt, env));
  if (!k.kernel || std::string(k.kernel->family()) != "quantize") return Internal("not the quantize kernel");
  const Shape& ws = want[0].shape();
  Tensor got = Tensor::Alloc(want[0].dtype(), nhwc ? Shape{ws[0], ws[2], ws[3], ws[1]} : ws);
  const size_t off = shift ? DTypeSize(got.dtype()) : 0;
  SP_ASSIGN_OR_RETURN(void* out, dev.Alloc(got.nbytes() + off));
  if (cudaMemset(out, 0xff, got.nbytes() + off) != cudaSuccess) return Internal("memset");
  SP_RETURN_IF_ERROR(k.kernel->Run(env, din, {static_cast<char*>(out) + off}));
  cudaError_t err = cudaStreamSynchronize(dev.stream);
  if (err == cudaSuccess)
    err = cudaMemcpy(got.mutable_raw(), static_cast<char*>(out) + off, got.nbytes(), cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) return Internal(node.Label(), ": ", cudaGetErrorString(err));
  return Outputs{nhwc ? testing::FromNhwc(got) : got, want[0]};
}

void ExpectSameBits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const size_t e = DTypeSize(want.dtype());
  const bool fl = IsFloatDType(want.dtype());
  const Tensor gf = fl ? testing::AsF32(got) : got, wf = fl ? testing::AsF32(want) : want;
  int64_t bad = 0, first = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (std::memcmp(static_cast<const char*>(got.raw()) + i * e, static_cast<const char*>(want.raw()) + i * e, e) == 0)
      continue;
    if (fl && std::isnan(gf.data<float>()[i]) && std::isnan(wf.data<float>()[i])) continue;
    if (bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << what << ": first at " << first << ": got " << ElementAsDouble(got, first) << ", want "
                    << ElementAsDouble(want, first);
}

std::string Attrs(int64_t axis, const std::string& more) {
  std::string a = axis == kTensor ? "" : "axis=" + std::to_string(axis);
  return a + (a.empty() || more.empty() ? "" : ", ") + more;
}

struct QCase {
  DType x, s, q;
  int64_t axis;
  int saturate;
  bool zp;
};

TEST(CudaQuantize, EveryOutputTypePerTensorAndPerAxis) {
  SKIP_WITHOUT_GPU();
  const QCase cases[] = {
      {kF32, kF32, DType::kUInt8, kTensor, 1, true},
      {kF32, kF32, DType::kUInt8, kTensor, 1, false},
      {kF32, kF32, DType::kInt8, 1, 1, true},
      {kF16, kF16, DType::kInt8, 1, 1, true},
      {kBF16, kBF16, DType::kUInt16, kTensor, 1, true},
      {kF16, kF32, DType::kInt16, -1, 1, true},
      {kBF16, kBF16, DType::kInt16, 0, 1, true},
      {kF32, kF32, kE4M3, kTensor, 1, false},
      {kF32, kF32, kE4M3, 1, 0, true},
      {kF16, kF16, kE5M2, kTensor, 1, true},
      {kBF16, kF32, kE5M2, 1, 0, false},
      {kF16, kF16, kE4M3, 2, 0, false},
      {kF16, kF16, kE5M2, -1, 0, true},
      {kF16, kBF16, kE4M3, 1, 1, true},
  };
  uint64_t seed = 1;
  for (const Shape& shape : std::vector<Shape>{{2, 6, 5, 7}, {3, 16, 40}, {512, 768}}) {
    for (const QCase& c : cases) {
      if (c.axis != kTensor && c.axis >= static_cast<int64_t>(shape.size())) continue;
      const int64_t ch = Channels(shape, c.axis);
      const Tensor s = Scales(c.s, ch, ++seed, IsF8(c.q));
      const Tensor z = c.zp ? QValues(c.q, ch ? Shape{ch} : Shape{}, seed, true) : Tensor();
      const float range = c.q == DType::kInt8 || c.q == DType::kUInt8 ? 400.f : c.q == kE4M3 ? 700.f : 1e5f;
      const Tensor x = QuantInput(c.x, shape, s, c.axis, range, seed);
      std::string more = "saturate=" + std::to_string(c.saturate);
      if (!c.zp) more += ", output_dtype=" + std::to_string(static_cast<int>(c.q));
      const std::string text = OneNode("QuantizeLinear", x, s, z, Attrs(c.axis, more));
      for (bool shift : {false, true}) {
        const std::string what = text + (shift ? " (misaligned)" : "");
        auto r = RunOnDevice(text, {x, s, z}, false, shift);
        ASSERT_TRUE(r.ok()) << what << r.status().ToString();
        ExpectSameBits(r->got, r->want, what);
        if (shape.size() == 2) break;
      }
    }
  }
}

TEST(CudaDequantize, EveryInputType) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (DType q : {DType::kInt8, DType::kUInt8, DType::kInt16, DType::kUInt16, DType::kInt32, kE4M3, kE5M2}) {
    for (const Shape& shape : std::vector<Shape>{{2, 6, 5, 7}, {64, 96}}) {
      // scale type, axis, zero point, output_dtype (0: the scale's)
      struct V {
        DType s;
        int64_t axis;
        bool zp;
        int out;
      };
      for (const V& v :
           {V{kF32, kTensor, true, 0}, V{kF16, 1, true, 0}, V{kBF16, -1, false, 0}, V{kF32, 1, true, 10}}) {
        const int64_t ch = Channels(shape, v.axis);
        const Tensor s = Scales(v.s, ch, ++seed);
        const Tensor z = v.zp ? QValues(q, ch ? Shape{ch} : Shape{}, seed, true) : Tensor();
        const Tensor x = QValues(q, shape, seed + 7, false);
        const std::string text = OneNode("DequantizeLinear", x, s, z,
                                         Attrs(v.axis, v.out ? "output_dtype=" + std::to_string(v.out) : ""), 23);
        for (bool shift : {false, true}) {
          auto r = RunOnDevice(text, {x, s, z}, false, shift);
          ASSERT_TRUE(r.ok()) << text << r.status().ToString();
          ExpectSameBits(r->got, r->want, text + (shift ? " (misaligned)" : ""));
        }
      }
    }
  }
}

TEST(CudaQuantize, ChannelsLastAndSampanDomain) {
  SKIP_WITHOUT_GPU();
  const Shape shape{2, 8, 5, 3};
  for (int64_t axis : {int64_t{1}, int64_t{2}, int64_t{-1}, kTensor}) {
    const int64_t ch = Channels(shape, axis);
    const Tensor s = Scales(kF16, ch, static_cast<uint64_t>(axis + 5));
    const Tensor z = QValues(DType::kInt8, ch ? Shape{ch} : Shape{}, 9, true);
    const Tensor x = QuantInput(kF16, shape, s, axis, 400.f, 11);
    const std::string qt = OneNode("QuantizeLinear", x, s, z, Attrs(axis, ""));
    auto q = RunOnDevice(qt, {x, s, z}, /*nhwc=*/true);
    ASSERT_TRUE(q.ok()) << qt << q.status().ToString();
    ExpectSameBits(q->got, q->want, qt + " (channels-last)");
    const std::string dt = OneNode("DequantizeLinear", q->want, s, z, Attrs(axis, ""));
    auto d = RunOnDevice(dt, {q->want, s, z}, /*nhwc=*/true);
    ASSERT_TRUE(d.ok()) << dt << d.status().ToString();
    ExpectSameBits(d->got, d->want, dt + " (channels-last)");
    // sampan:: nodes take float8 whatever the model's opset.
    const std::string ft =
        OneNode("sampan::QuantizeLinear", x, s, Tensor(), Attrs(axis, "output_dtype=17, saturate=0"), 17);
    auto f = RunOnDevice(ft, {x, s, Tensor()}, /*nhwc=*/true);
    ASSERT_TRUE(f.ok()) << ft << f.status().ToString();
    ExpectSameBits(f->got, f->want, ft + " (channels-last)");
  }
}

// Literal "{v0, v1, ...}" of a tensor's values.
std::string Literal(const Tensor& t) {
  std::ostringstream os;
  os.precision(9);
  for (int64_t i = 0; i < t.numel(); ++i) os << (i ? ", " : "{") << ElementAsDouble(t, i);
  return os.str() + "}";
}

TEST(CudaQuantize, ThroughTheBuilderWithConstantAndGraphInputScales) {
  SKIP_WITHOUT_GPU();
  const Tensor s = Scales(kF16, 16, 3), z = QValues(DType::kInt8, {16}, 4, true), t = Scales(kF32, 0, 6);
  const Tensor x = QuantInput(kF16, {4, 16, 24}, s, 1, 400.f, 5);
  const std::string body =
      "  q = QuantizeLinear(x, s, z) {axis=1}\n  y = DequantizeLinear(q, s, z) {axis=1}\n"
      "  f8 = QuantizeLinear(x, t) {output_dtype=17, saturate=0}\n  f = DequantizeLinear(f8, t)\n}\n";
  const std::string consts = "opset 21\ngraph g (x: f16[4,16,24]) -> (q, y, f8, f) {\n  s = const f16[16] " +
                             Literal(s) + "\n  z = const i8[16] " + Literal(z) + "\n  t = const f32[] " + Literal(t) +
                             "\n" + body;
  const std::string inputs =
      "opset 21\ngraph g (x: f16[4,16,24], s: f16[16], z: i8[16], t: f32[]) -> (q, y, f8, f) {\n" + body;
  for (const std::string& text : {consts, inputs}) {
    std::map<std::string, Tensor> in{{"x", x}};
    if (text == inputs) in.insert({{"s", s}, {"z", z}, {"t", t}});
    auto want = testing::BuildAndRun(text, "reference", builder::Precision::kFP32, in);
    ASSERT_TRUE(want.ok()) << text << want.status().ToString();
    for (bool cuda_graph : {false, true}) {
      size_t host = 0;
      auto got =
          testing::BuildAndRun(text, "cuda", builder::Precision::kFP32, in, cuda_graph, cuda_graph ? 2 : 1, &host);
      ASSERT_TRUE(got.ok()) << text << got.status().ToString();
      EXPECT_EQ(host, 0u) << text << ": nodes left on the host";
      ASSERT_EQ(got->size(), want->size());
      for (size_t i = 0; i < want->size(); ++i)
        ExpectSameBits((*got)[i], (*want)[i], text + " output " + std::to_string(i));
    }
  }
}

// ---------------------------------------------------------------- refusals (no GPU needed)

TEST(CudaQuantizeFactories, SayWhyTheyDecline) {
  auto q = [](const std::string& in, const std::string& node, int opset = 21) {
    return "opset " + std::to_string(opset) + "\ngraph g (" + in + ") -> (y) {\n  y = " + node + "\n}\n";
  };
  const std::string ok = q("x: f32[4,6], s: f32[6], z: u8[6]", "QuantizeLinear(x, s, z) {axis=-1}");
  EXPECT_TRUE(Ask(MakeQuantize, ok).ok());
  ExpectUnsupported(Ask(MakeQuantize, q("x: f32[4,6], s: f32[4,3]", "QuantizeLinear(x, s) {axis=1, block_size=2}")),
                    "blocked");
  ExpectUnsupported(Ask(MakeQuantize, q("x: f32[4,6], s: f32[]", "QuantizeLinear(x, s) {output_dtype=18}")),
                    "quantized type f8e4m3fnuz");
  ExpectUnsupported(Ask(MakeQuantize, q("x: f64[4,6], s: f32[]", "QuantizeLinear(x, s)")), "input of type f64");
  ExpectUnsupported(Ask(MakeQuantize, q("x: f32[4,6], s: f32[]", "QuantizeLinear(x, s) {precision=11}")), "precision");
  ExpectUnsupported(Ask(MakeDequantize, q("x: f8e5m2fnuz[4,6], s: f32[]", "DequantizeLinear(x, s)")),
                    "input of type f8e5m2fnuz");
  ExpectUnsupported(Ask(MakeDequantize, q("x: u8[4,6], s: f8e8m0[]", "DequantizeLinear(x, s) {output_dtype=1}", 24)),
                    "scale of type");
  KernelOptions one_side;
  one_side.in_nhwc = {true};
  ExpectUnsupported(Ask(MakeQuantize, q("x: f16[2,4,3,3], s: f16[4]", "QuantizeLinear(x, s)"), one_side), "layout");
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
