// The CUDA backend against the reference kernels: small graphs covering every
// device kernel family (and one host fallback), built for "cuda" and run on
// random inputs, in FP32 (strict, no TF32), FP16 (channels-last convolutions),
// and under CUDA-graph replay.
// Without a GPU (or without the CUDA backend in the build) these tests skip and say why.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cuda/bert_layer.h"
#include "builder/builder.h"
#include "passes/pass_test_util.h"
#include "runtime/backend.h"
#include "runtime/engine.h"

namespace sampan::runtime {
namespace {

using passes::testing::MustParse;

// Skips the test (with the reason) unless this build has the CUDA backend and a device.
#define SKIP_WITHOUT_CUDA()                                                    \
  do {                                                                         \
    const Backend* b = FindBackend("cuda");                                    \
    if (b == nullptr) GTEST_SKIP() << "the CUDA backend is not in this build"; \
    Status st = b->available();                                                \
    if (!st.ok()) GTEST_SKIP() << "needs a GPU: " << st.ToString();            \
  } while (0)

Tensor Random(DType dt, const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> real(-1.f, 1.f);
  Tensor t = Tensor::Alloc(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = real(rng);
  if (dt == DType::kFloat32) return t;
  return *CastTensor(t, dt);
}

double RelL2(const Tensor& got, const Tensor& want) {
  auto g = *CastTensor(got, DType::kFloat64);
  auto w = *CastTensor(want, DType::kFloat64);
  double num = 0, den = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double d = g.data<double>()[i] - w.data<double>()[i];
    if (std::isnan(g.data<double>()[i]) != std::isnan(w.data<double>()[i])) return INFINITY;
    num += d * d;
    den += w.data<double>()[i] * w.data<double>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Case {
  const char* name;
  const char* graph;
  std::map<std::string, Shape> inputs;  // all f32
};

std::vector<Case> Cases() {
  return {
      {"conv_block",
       R"(
        opset 17
        graph g (x: f32[2,8,16,16]) -> (y) {
          w1 = const f32[16,8,3,3] random
          b1 = const f32[16] random
          c1 = Conv(x, w1, b1) {pads=[1,1,1,1], strides=[2,2]}
          r1 = Relu(c1)
          w2 = const f32[16,16,3,3] random
          c2 = Conv(r1, w2) {pads=[1,1,1,1]}
          s = Add(c2, r1)
          r2 = Relu(s)
          p = MaxPool(r2) {kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]}
          a = AveragePool(r2) {kernel_shape=[2,2], strides=[2,2]}
          q = Add(p, a)
          gp = GlobalAveragePool(q)
          f = Flatten(gp)
          wf = const f32[10,16] random
          bf = const f32[10] random
          y = Gemm(f, wf, bf) {transB=1}
        })",
       {{"x", {2, 8, 16, 16}}}},
      {"elementwise",
       R"(
        opset 17
        graph g (x: f32[2,3,4], z: f32[3,1]) -> (y) {
          a = Add(x, z)
          m = Mul(a, x)
          d = Div(m, const_two)
          const_two = const f32[] {2.0}
          s = Sigmoid(d)
          t = Tanh(a)
          e = Erf(t)
          u = Sub(s, e)
          l = LeakyRelu(u) {alpha=0.2}
          c = Clip(l, lo, hi)
          lo = const f32[] {-0.3}
          hi = const f32[] {0.4}
          y = Max(c, a)
        })",
       {{"x", {2, 3, 4}}, {"z", {3, 1}}}},
      {"transformer_bits",
       R"(
        opset 17
        graph g (x: f32[2,4,8,16]) -> (y, s, n, c) {
          w = const f32[16,8] random
          m = MatMul(x, w)
          t = Transpose(m) {perm=[0,2,1,3]}
          s = Softmax(t) {axis=-1}
          sc = const f32[8] random
          bi = const f32[8] random
          n = LayerNormalization(t, sc, bi) {axis=-1, epsilon=1e-5}
          k = Transpose(x) {perm=[0,1,3,2]}
          y = MatMul(x, k)
          starts = const i64[2] {1, 0}
          ends = const i64[2] {3, 5}
          axes = const i64[2] {1, 3}
          sl = Slice(x, starts, ends, axes)
          c = Concat(sl, sl) {axis=2}
        })",
       {{"x", {2, 4, 8, 16}}}},
      {"attention",
       R"(
        opset 17
        graph g (q: f32[2,4,8,16], k: f32[2,4,8,16], v: f32[2,4,8,16], m: f32[2,1,1,8]) -> (y) {
          y = sampan::Attention(q, k, v, m) {scale=0.25}
        })",
       {{"q", {2, 4, 8, 16}}, {"k", {2, 4, 8, 16}}, {"v", {2, 4, 8, 16}}, {"m", {2, 1, 1, 8}}}},
      {"masks",
       R"(
        opset 17
        graph g (x: f32[2,3,4], z: f32[3,1]) -> (y, c, k) {
          lt = Less(x, z)
          gt = Greater(x, z)
          eq = Equal(lt, gt)
          a = And(lt, eq)
          o = Or(gt, a)
          xo = Xor(o, lt)
          n = Not(xo)
          w = Where(n, x, z)
          s = Sqrt(x)
          bad = IsNaN(s)
          zero = const f32[1] {0}
          y = Where(bad, zero, w)
          c = Cast(o) {to=1}
          four = const f32[] {4.0}
          m4 = Mul(x, four)
          i = Cast(m4) {to=7}
          one = const i64[] {1}
          ge = GreaterOrEqual(i, one)
          le = LessOrEqual(i, one)
          ie = Equal(i, one)
          zf = const f32[] {0}
          d = Div(x, zf)
          pinf = IsInf(d) {detect_negative=0}
          b1 = Or(ge, le)
          b2 = Xor(b1, ie)
          b3 = And(b2, pinf)
          k = Cast(b3) {to=1}
        })",
       {{"x", {2, 3, 4}}, {"z", {3, 1}}}},
      // torch's export of scaled_dot_product_attention with a boolean mask (fused into
      // sampan::Attention); about a third of the rows are fully masked and give zeros.
      {"sdpa_export",
       R"(
        opset 17
        graph g (q: f32[2,2,3,8], k: f32[2,2,4,8], v: f32[2,2,4,8], mf: f32[2,1,3,4]) -> (y) {
          half = const f32[] {0.5}
          keep = Greater(mf, half)
          zero = const f32[1] {0}
          ninf = const f32[1] {-inf}
          mask = Where(keep, zero, ninf)
          c = const f32[] {0.59460356}
          qs = Mul(q, c)
          kt = Transpose(k) {perm=[0,1,3,2]}
          kts = Mul(kt, c)
          s = MatMul(qs, kts)
          sm = Add(s, mask)
          p = Softmax(sm) {axis=-1}
          bad = IsNaN(p)
          pg = Where(bad, zero, p)
          y = MatMul(pg, v)
        })",
       {{"q", {2, 2, 3, 8}}, {"k", {2, 2, 4, 8}}, {"v", {2, 2, 4, 8}}, {"mf", {2, 1, 3, 4}}}},
      // In FP16 the activations between these convolutions and pools are stored
      // channels-last: conversions at the edges (x in, y out), a residual in NHWC,
      // NHWC max pooling and global pooling.
      {"channels_last",
       R"(
        opset 17
        graph g (x: f32[2,8,16,16]) -> (y, gp) {
          w1 = const f32[16,8,3,3] random
          c1 = Conv(x, w1) {pads=[1,1,1,1]}
          r1 = Relu(c1)
          p = MaxPool(r1) {kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]}
          w2 = const f32[16,16,1,1] random
          b2 = const f32[16] random
          c2 = Conv(p, w2, b2)
          s = Add(c2, p)
          r2 = Relu(s)
          w3 = const f32[8,16,3,3] random
          y = Conv(r2, w3) {pads=[1,1,1,1], strides=[2,2]}
          g1 = GlobalAveragePool(r2)
          gp = Flatten(g1)
        })",
       {{"x", {2, 8, 16, 16}}}},
      // Broadcasts the 16-byte vector kernels take (an inner dimension that is a multiple of
      // the vector: squeeze-excitation scales, a row bias, a per-row operand, same shapes,
      // unary) and one they do not (inner 6).
      {"vector_broadcasts",
       R"(
        opset 17
        graph g (x: f32[2,8,6,16], s: f32[2,8,1,1], r: f32[2,8,6,16], v: f32[16], c: f32[2,1,6,16], o: f32[2,8,16,1]) -> (y1, y2, y3, y4, y5, y6) {
          y1 = Mul(x, s)
          y2 = Add(x, v)
          y3 = Add(x, r)
          y4 = Sub(c, x)
          y5 = Sigmoid(x)
          t = Transpose(x) {perm=[0,1,3,2]}
          y6 = Div(t, o)
        })",
       {{"x", {2, 8, 6, 16}},
        {"s", {2, 8, 1, 1}},
        {"r", {2, 8, 6, 16}},
        {"v", {16}},
        {"c", {2, 1, 6, 16}},
        {"o", {2, 8, 16, 1}}}},
      // Transposes the shared-memory tile kernel takes (both contiguous dims >= 16, partial
      // tiles at the edges; NCHW -> NHWC) and one it leaves to the element-wise copy.
      {"tiled_transposes",
       R"(
        opset 17
        graph g (x: f32[2,40,33], z: f32[2,24,5,19], q: f32[3,8,20]) -> (y1, y2, y3) {
          y1 = Transpose(x) {perm=[0,2,1]}
          y2 = Transpose(z) {perm=[0,2,3,1]}
          y3 = Transpose(q) {perm=[2,0,1]}
        })",
       {{"x", {2, 40, 33}}, {"z", {2, 24, 5, 19}}, {"q", {3, 8, 20}}}},
      // Concats: rows of odd lengths (element copies), 40 inputs (two launches of 32 and 8),
      // another axis, and (FP16) a channels-last concat of convolutions with its input,
      // then BatchNorm + ReLU (DenseNet's order: sampan::FusedBatchNorm on the device).
      {"concats",
       R"(
        opset 17
        graph g (a: f32[2,3,5], b: f32[2,4,5], c: f32[2,1,5], x: f32[2,8,4,4]) -> (y1, y2, y3, y4) {
          y1 = Concat(a, b, c) {axis=1}
          y2 = Concat(a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a) {axis=1}
          y3 = Concat(a, a) {axis=2}
          w1 = const f32[8,8,1,1] random
          w2 = const f32[16,8,3,3] random
          c1 = Conv(x, w1)
          c2 = Conv(x, w2) {pads=[1,1,1,1]}
          cat = Concat(c1, c2, x) {axis=1}
          bs = const f32[32] random
          bb = const f32[32] random
          bm = const f32[32] {-0.20, -0.19, -0.18, -0.17, -0.16, -0.15, -0.14, -0.13, -0.12, -0.11, -0.10, -0.09, -0.08, -0.07, -0.06, -0.05, -0.04, -0.03, -0.02, -0.01, 0.00, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.10, 0.11}
          bv = const f32[32] {0.50, 0.53, 0.56, 0.59, 0.62, 0.65, 0.68, 0.71, 0.74, 0.77, 0.80, 0.83, 0.86, 0.89, 0.92, 0.95, 0.98, 1.01, 1.04, 1.07, 1.10, 1.13, 1.16, 1.19, 1.22, 1.25, 1.28, 1.31, 1.34, 1.37, 1.40, 1.43}
          bn = BatchNormalization(cat, bs, bb, bm, bv) {epsilon=1e-5}
          r = Relu(bn)
          w3 = const f32[8,32,1,1] random
          y4 = Conv(r, w3)
        })",
       {{"a", {2, 3, 5}}, {"b", {2, 4, 5}}, {"c", {2, 1, 5}}, {"x", {2, 8, 4, 4}}}},
      // Pre-LN residual stream: both sums join their products (fuse_gemm_residual), one
      // through reshapes of a row-wise MatMul; the sums are also read elsewhere.
      {"residual_products",
       R"(
        opset 17
        graph g (x: f32[2,6,16]) -> (y, s2) {
          sc = const f32[16] random
          n1 = LayerNormalization(x, sc) {axis=-1}
          w1 = const f32[16,32] random
          b1 = const f32[32] random
          h = MatMul(n1, w1)
          hb = Add(h, b1)
          r = Relu(hb)
          w2 = const f32[32,16] random
          b2 = const f32[16] random
          o = MatMul(r, w2)
          ob = Add(o, b2)
          s1 = Add(x, ob)
          rows_shape = const i64[2] {12, 16}
          rows = Reshape(s1, rows_shape)
          w3 = const f32[16,16] random
          p = MatMul(rows, w3)
          bs_shape = const i64[3] {2, 6, 16}
          pv = Reshape(p, bs_shape)
          s2 = Add(pv, s1)
          y = LayerNormalization(s2, sc) {axis=-1}
        })",
       {{"x", {2, 6, 16}}}},
      {"host_fallback",
       R"(
        opset 17
        graph g (x: f32[3,5]) -> (y) {
          r = Relu(x)
          ax = const i64[] {1}
          c = CumSum(r, ax)
          y = Sigmoid(c)
        })",
       {{"x", {3, 5}}}},
  };
}

std::map<std::string, Tensor> MakeInputs(const Case& c, uint64_t seed) {
  std::map<std::string, Tensor> in;
  for (const auto& [name, shape] : c.inputs) in[name] = Random(DType::kFloat32, shape, seed++);
  return in;
}

Result<std::vector<Tensor>> RunOn(const Case& c, const std::string& backend, builder::Precision precision, bool graph,
                                  const std::map<std::string, Tensor>& in, int runs = 1) {
  builder::BuildConfig config;
  config.backend = backend;
  config.precision = precision;
  config.allow_tf32 = false;
  config.optimization_level = 1;
  SP_ASSIGN_OR_RETURN(plan::Plan p, builder::Build(MustParse(c.graph), config, nullptr));
  EngineOptions eo;
  eo.use_cuda_graph = graph;
  SP_ASSIGN_OR_RETURN(auto engine, Engine::Create(std::move(p), eo));
  SP_ASSIGN_OR_RETURN(auto ctx, engine->CreateContext());
  std::vector<Tensor> out;
  for (int r = 0; r < runs; ++r) {
    SP_ASSIGN_OR_RETURN(out, ctx->Run(in));
  }
  return out;
}

void Compare(const Case& c, builder::Precision precision, bool graph, double tol) {
  auto in = MakeInputs(c, 7);
  auto want = RunOn(c, "reference", builder::Precision::kFP32, false, in);
  ASSERT_TRUE(want.ok()) << c.name << ": " << want.status().ToString();
  auto got = RunOn(c, "cuda", precision, graph, in, graph ? 3 : 1);
  ASSERT_TRUE(got.ok()) << c.name << ": " << got.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) {
    ASSERT_EQ((*got)[i].shape(), (*want)[i].shape()) << c.name << " output " << i;
    EXPECT_LT(RelL2((*got)[i], (*want)[i]), tol) << c.name << " output " << i;
  }
}

// The cases themselves (valid graphs with the inputs they declare), checked without a GPU.
TEST(CudaBackend, CasesRunOnTheReferenceBackend) {
  for (const Case& c : Cases()) {
    auto out = RunOn(c, "reference", builder::Precision::kFP32, false, MakeInputs(c, 7));
    EXPECT_TRUE(out.ok()) << c.name << ": " << out.status().ToString();
  }
}

TEST(CudaBackend, MatchesReferenceFp32) {
  SKIP_WITHOUT_CUDA();
  for (const Case& c : Cases()) Compare(c, builder::Precision::kFP32, false, 1e-5);
}

TEST(CudaBackend, MatchesReferenceFp16) {
  SKIP_WITHOUT_CUDA();
  // "masks" compares values that FP16 rounding may move across a threshold; FP32 covers it.
  for (const Case& c : Cases())
    if (std::string(c.name) != "masks") Compare(c, builder::Precision::kFP16, false, 1e-2);
}

TEST(CudaBackend, CudaGraphReplayMatchesReference) {
  SKIP_WITHOUT_CUDA();
  for (const Case& c : Cases()) Compare(c, builder::Precision::kFP32, true, 1e-5);
}

TEST(CudaBackend, NewShapesGetTheirOwnBucket) {
  SKIP_WITHOUT_CUDA();
  const char* text = R"(
    opset 17
    graph g (x: f32[N,6]) -> (y) {
      w = const f32[6,4] random
      m = MatMul(x, w)
      y = Softmax(m) {axis=-1}
    })";
  builder::BuildConfig config;
  config.backend = "cuda";
  config.allow_tf32 = false;
  config.profiles = {plan::Profile{{"x", plan::ShapeRange{{1, 6}, {4, 6}, {64, 6}}}}};
  auto p = builder::Build(MustParse(text), config, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  builder::BuildConfig ref_config;
  ref_config.profiles = config.profiles;
  auto rp = builder::Build(MustParse(text), ref_config, nullptr);
  ASSERT_TRUE(rp.ok()) << rp.status().ToString();
  auto e = Engine::Create(std::move(p).value());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto re = Engine::Create(std::move(rp).value());
  ASSERT_TRUE(re.ok());
  auto ctx = (*e)->CreateContext();
  auto rctx = (*re)->CreateContext();
  ASSERT_TRUE(ctx.ok() && rctx.ok());
  for (int64_t n : {1, 5, 64, 5}) {
    std::map<std::string, Tensor> in{{"x", Random(DType::kFloat32, {n, 6}, static_cast<uint64_t>(n))}};
    auto got = (*ctx)->Run(in);
    auto want = (*rctx)->Run(in);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(want.ok());
    EXPECT_LT(RelL2((*got)[0], (*want)[0]), 1e-5) << "batch " << n;
  }
}

TEST(CudaBackend, BadGatherIndexIsAnErrorNotACrash) {
  SKIP_WITHOUT_CUDA();
  Case c{"gather",
         R"(
    opset 17
    graph g (i: i64[3]) -> (y) {
      t = const f32[4,2] random
      y = Gather(t, i) {axis=0}
    })",
         {}};
  builder::BuildConfig config;
  config.backend = "cuda";
  auto p = builder::Build(MustParse(c.graph), config, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto e = Engine::Create(std::move(p).value());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto ctx = (*e)->CreateContext();
  ASSERT_TRUE(ctx.ok());
  auto ok = (*ctx)->Run({{"i", Tensor::FromVector<int64_t>(DType::kInt64, {0, 3, -1}, {3})}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto bad = (*ctx)->Run({{"i", Tensor::FromVector<int64_t>(DType::kInt64, {0, 9, 1}, {3})}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("out of range"), std::string::npos) << bad.status().ToString();
  EXPECT_TRUE((*e)->healthy());
}

// String tensors in and out: numbers on the device, string nodes as host steps whose values
// never leave host memory, every output as the reference backend gives it, run twice (the
// second run reuses the bucket).
TEST(CudaBackend, StringValuesStayOnTheHost) {
  SKIP_WITHOUT_CUDA();
  const char* text = R"(
    opset 17
    graph g (x: f32[3,4], want: string[3]) -> (label, same, score) {
      w = const f32[4,5] random
      logits = MatMul(x, w)
      k = ArgMax(logits) {axis=1, keepdims=0}
      label = Cast(k) {to=8}
      same = Equal(label, want)
      m = Cast(same) {to=1}
      score = Add(m, m)
    })";
  builder::BuildConfig config;
  config.backend = "cuda";
  builder::BuildReport report;
  auto p = builder::Build(MustParse(text), config, &report);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(report.host_nodes.size(), 2u);
  auto e = Engine::Create(std::move(p).value());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto ctx = (*e)->CreateContext();
  ASSERT_TRUE(ctx.ok());
  auto rp = builder::Build(MustParse(text), builder::BuildConfig{}, nullptr);
  ASSERT_TRUE(rp.ok());
  auto re = Engine::Create(std::move(rp).value());
  ASSERT_TRUE(re.ok());
  auto rctx = (*re)->CreateContext();
  ASSERT_TRUE(rctx.ok());
  for (int run = 0; run < 2; ++run) {
    std::map<std::string, Tensor> in{{"x", Random(DType::kFloat32, {3, 4}, 7 + run)},
                                     {"want", Tensor::FromStrings({"0", "4", "2"}, {3})}};
    auto got = (*ctx)->Run(in);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    auto want = (*rctx)->Run(in);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ASSERT_EQ(got->size(), 3u);
    EXPECT_EQ((*got)[0].dtype(), DType::kString);
    for (int i = 0; i < 3; ++i) EXPECT_EQ((*got)[0].strings()[i], (*want)[0].strings()[i]) << "run " << run;
    EXPECT_EQ(std::memcmp((*got)[1].raw(), (*want)[1].raw(), 3), 0) << "run " << run;
    EXPECT_EQ(RelL2((*got)[2], (*want)[2]), 0.0) << "run " << run;
  }
}

// Embedding-style lookups (rows of >= 64 bytes) take the row-wise vector kernel; the
// values, negative indices and the out-of-range error are the same as element-wise.
TEST(CudaBackend, RowGatherMatchesTableRows) {
  SKIP_WITHOUT_CUDA();
  for (const char* type : {"f32", "f16"}) {
    for (int64_t width : {16, 48, 50}) {  // 64/192/200 bytes in f32; 32/96/100 in f16
      const std::string graph = StrCat("opset 17\ngraph g (i: i64[2,3]) -> (y) {\n  t = const ", type, "[7,", width,
                                       "] random\n  y = Gather(t, i) {axis=0}\n}\n");
      auto g = MustParse(graph);
      const Tensor table = g->nodes()[0]->input(0)->data;
      builder::BuildConfig config;
      config.backend = "cuda";
      auto p = builder::Build(std::move(g), config, nullptr);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      auto e = Engine::Create(std::move(p).value());
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      auto ctx = (*e)->CreateContext();
      ASSERT_TRUE(ctx.ok());
      const std::vector<int64_t> idx = {0, 6, -1, 3, 3, -7};
      auto out = (*ctx)->Run({{"i", Tensor::FromVector<int64_t>(DType::kInt64, idx, {2, 3})}});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      const Tensor& y = (*out)[0];
      ASSERT_EQ(y.shape(), (Shape{2, 3, width}));
      const size_t row = static_cast<size_t>(width) * DTypeSize(y.dtype());
      for (size_t r = 0; r < idx.size(); ++r) {
        const int64_t src = idx[r] < 0 ? idx[r] + 7 : idx[r];
        EXPECT_EQ(std::memcmp(static_cast<const char*>(y.raw()) + r * row,
                              static_cast<const char*>(table.raw()) + static_cast<size_t>(src) * row, row),
                  0)
            << type << " width " << width << " row " << r;
      }
      auto bad = (*ctx)->Run({{"i", Tensor::FromVector<int64_t>(DType::kInt64, {0, 1, 2, 7, 4, 5}, {2, 3})}});
      ASSERT_FALSE(bad.ok()) << type << " width " << width;
      EXPECT_NE(bad.status().message().find("out of range"), std::string::npos) << bad.status().ToString();
    }
  }
}

// Mask and attention graphs run entirely on the device (a CUDA graph can be captured).
TEST(CudaBackend, MaskOpsHaveDeviceKernels) {
  SKIP_WITHOUT_CUDA();
  for (const Case& c : Cases()) {
    if (std::string(c.name) != "masks" && std::string(c.name) != "sdpa_export" &&
        std::string(c.name) != "channels_last")
      continue;
    for (auto precision : {builder::Precision::kFP32, builder::Precision::kFP16}) {
      builder::BuildConfig config;
      config.backend = "cuda";
      config.precision = precision;
      builder::BuildReport report;
      auto p = builder::Build(MustParse(c.graph), config, &report);
      ASSERT_TRUE(p.ok()) << c.name << ": " << p.status().ToString();
      EXPECT_EQ(report.kernel_counts.count("host"), 0u) << c.name;
      if (std::string(c.name) == "sdpa_export") {
        EXPECT_EQ(report.kernel_counts["attention"], 1u);
      }
    }
  }
}

TEST(CudaBackend, ImageInputMatchesReference) {
  SKIP_WITHOUT_CUDA();
  Case c{"image_input",
         R"(
    opset 17
    graph g (x: u8[2,6,5,3]) -> (y, f) {
      f = sampan::ImageInput(x) {mean=[10.0, 120.0, 250.0], scale=[0.5, 0.01, 2.0]}
      w = const f32[4,3,3,3] random
      y = Conv(f, w) {pads=[1,1,1,1]}
    })",
         {}};
  Tensor x = Tensor::Alloc(DType::kUInt8, {2, 6, 5, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<uint8_t>()[i] = static_cast<uint8_t>((i * 37) % 256);
  std::map<std::string, Tensor> in{{"x", x}};
  auto want = RunOn(c, "reference", builder::Precision::kFP32, false, in);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  for (auto [precision, tol] :
       {std::pair{builder::Precision::kFP32, 1e-5}, std::pair{builder::Precision::kFP16, 1e-2}}) {
    auto got = RunOn(c, "cuda", precision, true, in, 3);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < want->size(); ++i) EXPECT_LT(RelL2((*got)[i], (*want)[i]), tol) << "output " << i;
  }
}

// The first case built for the GPU with CUDA graphs, one context, its inputs and the reference's
// outputs (the bench hooks' tests).
struct GraphedCase {
  std::map<std::string, Tensor> in;
  std::vector<Tensor> want;
  std::unique_ptr<Context> ctx;
};

void MakeGraphedCase(GraphedCase* g) {
  const std::vector<Case> cases = Cases();
  const Case& c = cases[0];
  g->in = MakeInputs(c, 3);
  auto want = RunOn(c, "reference", builder::Precision::kFP32, false, g->in);
  ASSERT_TRUE(want.ok());
  g->want = std::move(want).value();
  builder::BuildConfig config;
  config.backend = "cuda";
  config.allow_tf32 = false;
  auto p = builder::Build(MustParse(c.graph), config, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EngineOptions eo;
  eo.use_cuda_graph = true;
  auto e = Engine::Create(std::move(p).value(), eo);
  ASSERT_TRUE(e.ok());
  auto ctx = (*e)->CreateContext();
  ASSERT_TRUE(ctx.ok());
  g->ctx = std::move(ctx).value();
}

// The bench hook: with transfers off, Run keeps inputs resident and returns nothing;
// switched back on, results are complete and right.
TEST(CudaBackend, DataTransfersCanBeLeftOut) {
  SKIP_WITHOUT_CUDA();
  GraphedCase g;
  ASSERT_NO_FATAL_FAILURE(MakeGraphedCase(&g));
  auto& in = g.in;
  const std::vector<Tensor>* want = &g.want;
  std::unique_ptr<Context>* ctx = &g.ctx;
  ASSERT_TRUE((*ctx)->SetDataTransfers(false).ok());
  for (int i = 0; i < 3; ++i) {
    auto r = (*ctx)->Run(in);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->empty());
  }
  ASSERT_TRUE((*ctx)->SetDataTransfers(true).ok());
  auto got = (*ctx)->Run(in);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  EXPECT_LT(RelL2((*got)[0], (*want)[0]), 1e-5);
}

// The bench's overlap: with transfers off two runs are in flight on the context's stream
// (CUDA graph replays after the first two runs); each finishes with its own device timing,
// Run afterwards finishes what is in flight and still answers right.
TEST(CudaBackend, OverlappedRunsWithTransfersOff) {
  SKIP_WITHOUT_CUDA();
  GraphedCase g;
  ASSERT_NO_FATAL_FAILURE(MakeGraphedCase(&g));
  auto& in = g.in;
  const std::vector<Tensor>* want = &g.want;
  std::unique_ptr<Context>* ctx = &g.ctx;
  EXPECT_EQ((*ctx)->max_in_flight(), 1) << "transfers on: no overlap (staging would be overwritten)";
  ASSERT_TRUE((*ctx)->SetDataTransfers(false).ok());
  EXPECT_EQ((*ctx)->max_in_flight(), 2);
  for (int i = 0; i < 8; ++i) {  // first runs (eager, capture) drain the stream themselves
    ASSERT_TRUE((*ctx)->Enqueue(in).ok()) << i;
    if (i >= 1) {
      auto t = (*ctx)->Finish();
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_GT(t->compute_ms, 0.0);
    }
  }
  // The graph is captured: two runs are on the stream at once now.
  EXPECT_EQ((*ctx)->Enqueue(in).code(), StatusCode::kOk);
  EXPECT_EQ((*ctx)->Enqueue(in).code(), StatusCode::kFailedPrecondition) << "a third run in flight";
  EXPECT_EQ((*ctx)->SetDataTransfers(true).code(), StatusCode::kFailedPrecondition) << "switched with runs in flight";
  for (int i = 0; i < 2; ++i) {
    auto t = (*ctx)->Finish();
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_GT(t->compute_ms, 0.0);
  }
  EXPECT_FALSE((*ctx)->Finish().ok()) << "nothing left in flight";
  ASSERT_TRUE((*ctx)->Enqueue(in).ok());
  auto drained = (*ctx)->Run(in);  // finishes the one in flight, then runs
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_TRUE(drained->empty());
  ASSERT_TRUE((*ctx)->SetDataTransfers(true).ok());
  auto got = (*ctx)->Run(in);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  EXPECT_LT(RelL2((*got)[0], (*want)[0]), 1e-5);
}

// A BERT encoder layer (tests/backends/cuda/bert_layer.h): built for the GPU it becomes
// FusedMatMuls, one sampan::Attention {layout=bshd} (no transposes left) and one
// sampan::AddLayerNorm.
TEST(CudaBackend, BertLayerRunsFusedInFp16AndBf16) {
  SKIP_WITHOUT_CUDA();
  struct Shape4 {
    int64_t batch, seq, hidden, heads;
  };
  for (const Shape4 s : {Shape4{2, 77, 128, 2}, Shape4{2, 128, 768, 12}}) {
    const std::string text = sampan::testing::BertLayer(s.batch, s.seq, s.hidden, s.heads);
    Case c{"bert_layer", text.c_str(), {{"x", {s.batch, s.seq, s.hidden}}, {"m", {s.batch, 1, 1, s.seq}}}};
    for (auto [precision, tol] :
         {std::pair{builder::Precision::kFP16, 2e-2}, std::pair{builder::Precision::kBF16, 5e-2}}) {
      SCOPED_TRACE(StrCat("seq ", s.seq, " hidden ", s.hidden, " ", builder::PrecisionName(precision)));
      Compare(c, precision, false, tol);
      Compare(c, precision, true, tol);  // CUDA-graph replay
      builder::BuildConfig config;
      config.backend = "cuda";
      config.precision = precision;
      builder::BuildReport report;
      auto p = builder::Build(MustParse(text), config, &report);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(report.kernel_counts.count("transpose"), 0u) << "head transposes folded into the attention";
      EXPECT_EQ(report.kernel_counts.count("host"), 0u);
      EXPECT_EQ(report.kernel_counts["attention"], 1u);
      EXPECT_EQ(report.kernel_counts["layernorm"], 1u);
      size_t add_ln = 0;
      for (const auto& n : p->graph->nodes()) add_ln += n->op_type == "AddLayerNorm";
      EXPECT_EQ(add_ln, 1u) << "residual Add + LayerNormalization fused for the GPU";
    }
  }
}

TEST(CudaBackend, WithoutADeviceSaysSo) {
  const Backend* b = FindBackend("cuda");
  if (b == nullptr) GTEST_SKIP() << "the CUDA backend is not in this build";
  Status st = b->available();
  if (st.ok()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_NE(st.message().find("no CUDA device"), std::string::npos) << st.ToString();
  builder::BuildConfig config;
  config.backend = "cuda";
  auto p = builder::Build(MustParse(Cases()[1].graph), config, nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("no CUDA device"), std::string::npos) << p.status().ToString();
}

}  // namespace
}  // namespace sampan::runtime
