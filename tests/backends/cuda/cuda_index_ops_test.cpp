// CUDA indexed ops (index_ops.cu, pattern_ops.cu, topk.cu: GatherElements, GatherND,
// ScatterElements, ScatterND, OneHot, Trilu, Range, TopK) against the reference backend,
// as small graphs built for "cuda" and run eagerly and under CUDA-graph replay. FP32
// within 1e-5 relative L2, FP16 within 1e-2; integer outputs (indices, gathered ints)
// must match exactly. Scatter inputs repeat an index only for reductions whose result
// does not depend on the order of the updates. TopK inputs lie on a grid (ties, exact
// in FP16). Without a GPU these tests skip and say why (the factory refusals are in
// cuda_norm_index_test.cpp).
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"

namespace sampan::cuda {
namespace {

using builder::Precision;
using passes::testing::MustParse;
using testing::Dims;
using testing::ExpectMatchesReference;
using testing::Ints;
using testing::Random;

constexpr double kF32Tol = 1e-5, kF16Tol = 1e-2;

// Floats on a grid of `step` in [lo, hi): ties for TopK, exact in FP16.
Tensor Grid(const Shape& s, uint64_t seed, float step, float lo = -4.f, float hi = 4.f) {
  Tensor t = Random(DType::kFloat32, s, seed, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = std::floor(t.data<float>()[i] / step) * step;
  return t;
}

std::map<std::string, Tensor> X(const Shape& s, uint64_t seed = 7) {
  return {{"x", Random(DType::kFloat32, s, seed, -2.f, 2.f)}};
}

// ---------------------------------------------------------------- gathers and scatters

TEST(CudaIndexOps, GatherElementsAndGatherND) {
  SKIP_WITHOUT_GPU();
  ExpectMatchesReference("gatherelements axis 0", R"(opset 13
    graph g (x: f32[3,4], i: i64[2,4]) -> (y) { y = GatherElements(x, i) {axis=0} })",
                         {{"x", Random(DType::kFloat32, {3, 4}, 1)}, {"i", Ints(DType::kInt64, {2, 4}, 2, -3, 3)}},
                         Precision::kFP32, kF32Tol);
  ExpectMatchesReference(
      "gatherelements axis -1 int32 indices", R"(opset 13
    graph g (x: f32[2,3,5], i: i32[2,2,7]) -> (y) { y = GatherElements(x, i) {axis=-1} })",
      {{"x", Random(DType::kFloat32, {2, 3, 5}, 1)}, {"i", Ints(DType::kInt32, {2, 2, 7}, 2, -5, 5)}}, Precision::kFP16,
      kF16Tol);
  ExpectMatchesReference("gathernd", R"(opset 13
    graph g (x: f32[3,4,5], i: i64[2,2]) -> (y) { y = GatherND(x, i) })",
                         {{"x", Random(DType::kFloat32, {3, 4, 5}, 1)}, {"i", Ints(DType::kInt64, {2, 2}, 2, -3, 3)}},
                         Precision::kFP32, kF32Tol);
  ExpectMatchesReference(
      "gathernd batch_dims=1", R"(opset 13
    graph g (x: f32[2,3,4], i: i64[2,5,1]) -> (y) { y = GatherND(x, i) {batch_dims=1} })",
      {{"x", Random(DType::kFloat32, {2, 3, 4}, 1)}, {"i", Ints(DType::kInt64, {2, 5, 1}, 2, -3, 3)}}, Precision::kFP32,
      kF32Tol);
  ExpectMatchesReference(
      "gathernd full tuples of int64", R"(opset 13
    graph g (x: i64[3,4,5], i: i64[2,3,3]) -> (y) { y = GatherND(x, i) })",
      {{"x", Ints(DType::kInt64, {3, 4, 5}, 1, -99, 99)}, {"i", Ints(DType::kInt64, {2, 3, 3}, 2, -3, 3)}},
      Precision::kFP32, 0);
}

TEST(CudaIndexOps, ScatterElementsEveryReduction) {
  SKIP_WITHOUT_GPU();
  // No repeats for none and mul (order-dependent); repeats for add, max and min.
  const Tensor unique = Tensor::FromVector<int64_t>(DType::kInt64, {0, 3, -1, 2, 1, 1, 2, 0, -4, 3}, {2, 5});
  const Tensor repeats = Ints(DType::kInt64, {6, 5}, 2, -4, 4);
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    const bool dup = std::string(red) == "add" || std::string(red) == "max" || std::string(red) == "min";
    const Shape is = dup ? Shape{6, 5} : Shape{2, 5};
    const std::string g = "opset 18\ngraph g (x: f32[4,5], i: i64[" + Dims(is) + "], u: f32[" + Dims(is) +
                          "]) -> (y) {\n  y = ScatterElements(x, i, u) {axis=0, reduction=\"" + red + "\"}\n}\n";
    const std::map<std::string, Tensor> in{{"x", Random(DType::kFloat32, {4, 5}, 1)},
                                           {"i", dup ? repeats : unique},
                                           {"u", Random(DType::kFloat32, is, 3)}};
    ExpectMatchesReference(std::string("scatterelements ") + red, g, in, Precision::kFP32, kF32Tol);
    ExpectMatchesReference(std::string("scatterelements fp16 ") + red, g, in, Precision::kFP16, kF16Tol);
  }
  ExpectMatchesReference("scatterelements int64 add axis 1", R"(opset 18
    graph g (x: i64[4,5], i: i32[4,7], u: i64[4,7]) -> (y) { y = ScatterElements(x, i, u) {axis=1, reduction="add"} })",
                         {{"x", Ints(DType::kInt64, {4, 5}, 1, -9, 9)},
                          {"i", Ints(DType::kInt32, {4, 7}, 2, -5, 5)},
                          {"u", Ints(DType::kInt64, {4, 7}, 3, -9, 9)}},
                         Precision::kFP32, 0);
}

TEST(CudaIndexOps, ScatterNDEveryReduction) {
  SKIP_WITHOUT_GPU();
  const Tensor unique = Tensor::FromVector<int64_t>(DType::kInt64, {4, 0, -3}, {3, 1});
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    const bool dup = std::string(red) == "add";  // repeats only where the order cannot matter
    const Shape is = dup ? Shape{8, 1} : Shape{3, 1};
    const Shape us = dup ? Shape{8, 6} : Shape{3, 6};
    const std::string g = "opset 18\ngraph g (x: f32[5,6], i: i64[" + Dims(is) + "], u: f32[" + Dims(us) +
                          "]) -> (y) {\n  y = ScatterND(x, i, u) {reduction=\"" + red + "\"}\n}\n";
    const std::map<std::string, Tensor> in{{"x", Random(DType::kFloat32, {5, 6}, 1)},
                                           {"i", dup ? Ints(DType::kInt64, is, 2, -5, 5) : unique},
                                           {"u", Random(DType::kFloat32, us, 3)}};
    ExpectMatchesReference(std::string("scatternd ") + red, g, in, Precision::kFP32, kF32Tol);
    ExpectMatchesReference(std::string("scatternd fp16 ") + red, g, in, Precision::kFP16, kF16Tol);
  }
  ExpectMatchesReference("scatternd full tuples", R"(opset 16
    graph g (x: f32[4,4,3], u: f32[2,3]) -> (y) {
      i = const i64[2,2] {0, 1, 3, -1}
      y = ScatterND(x, i, u)
    })",
                         {{"x", Random(DType::kFloat32, {4, 4, 3}, 1)}, {"u", Random(DType::kFloat32, {2, 3}, 2)}},
                         Precision::kFP32, kF32Tol);
}

// Out-of-range indices are an error of the run, as for Gather, and leave the engine healthy.
TEST(CudaIndexOps, BadIndicesAreAnErrorNotACrash) {
  SKIP_WITHOUT_GPU();
  const std::string g = R"(opset 16
    graph g (x: f32[3,4], i: i64[2,4], j: i64[2,1], u: f32[2,4]) -> (y, z) {
      y = GatherElements(x, i) {axis=0}
      z = ScatterND(x, j, u)
    })";
  const std::map<std::string, Tensor> ok{{"x", Random(DType::kFloat32, {3, 4}, 1)},
                                         {"i", Ints(DType::kInt64, {2, 4}, 2, -3, 3)},
                                         {"j", Tensor::FromVector<int64_t>(DType::kInt64, {2, -3}, {2, 1})},
                                         {"u", Random(DType::kFloat32, {2, 4}, 3)}};
  ASSERT_TRUE(testing::BuildAndRun(g, "cuda", Precision::kFP32, ok).ok());
  for (const char* which : {"i", "j"}) {
    auto in = ok;
    in[which] = which[0] == 'i' ? Ints(DType::kInt64, {2, 4}, 2, 3, 9)
                                : Tensor::FromVector<int64_t>(DType::kInt64, {0, 7}, {2, 1});
    auto bad = testing::BuildAndRun(g, "cuda", Precision::kFP32, in);
    ASSERT_FALSE(bad.ok()) << which;
    EXPECT_NE(bad.status().message().find("out of range"), std::string::npos) << bad.status().ToString();
  }
}

// ---------------------------------------------------------------- one-hot, trilu, range, topk

TEST(CudaIndexOps, OneHotAndTrilu) {
  SKIP_WITHOUT_GPU();
  for (int axis : {-1, 0, 1}) {
    const std::string g =
        "opset 11\ngraph g (i: i64[2,3]) -> (y) {\n  d = const i64[] {5}\n"
        "  v = const f32[2] {-0.5, 2.0}\n  y = OneHot(i, d, v) {axis=" +
        std::to_string(axis) + "}\n}\n";
    // Indices in [-7, 7): some count from the end, some are out of range (a row of off values).
    ExpectMatchesReference("onehot axis " + std::to_string(axis), g, {{"i", Ints(DType::kInt64, {2, 3}, 1, -7, 7)}},
                           Precision::kFP32, kF32Tol);
  }
  ExpectMatchesReference("onehot int32 indices int64 values", R"(opset 11
    graph g (i: i32[4]) -> (y) {
      d = const i64[] {4}
      v = const i64[2] {-1, 7}
      y = OneHot(i, d, v) {axis=0}
    })",
                         {{"i", Ints(DType::kInt32, {4}, 3, -5, 5)}}, Precision::kFP32, 0);
  for (const char* upper : {"1", "0"})
    for (int k : {-1, 0, 2}) {
      const std::string g = "opset 14\ngraph g (x: f32[2,4,5]) -> (y) {\n  k = const i64[] {" + std::to_string(k) +
                            "}\n  y = Trilu(x, k) {upper=" + upper + "}\n}\n";
      ExpectMatchesReference(std::string("trilu upper=") + upper + " k=" + std::to_string(k), g, X({2, 4, 5}),
                             Precision::kFP32, kF32Tol);
    }
  // k computed on the device (a graph input): the kernel reads it there.
  ExpectMatchesReference(
      "trilu device k", R"(opset 14
    graph g (x: f32[6,6], k: i64[]) -> (y) { y = Trilu(x, k) {upper=0} })",
      {{"x", Random(DType::kFloat32, {6, 6}, 1)}, {"k", Tensor::FromVector<int64_t>(DType::kInt64, {2}, {})}},
      Precision::kFP16, kF16Tol);
}

// Range runs on the device when its bounds are known only at run time and its output is too
// large to fold (here: the length of a dynamic input).
TEST(CudaIndexOps, RangeFromARuntimeLength) {
  SKIP_WITHOUT_GPU();
  const char* text = R"(opset 11
    graph g (x: f32[N]) -> (a, b) {
      sh = Shape(x)
      z = const i64[] {0}
      n = Gather(sh, z) {axis=0}
      s = const i64[] {-3}
      d = const i64[] {2}
      a = Range(s, n, d)
      nf = Cast(n) {to=1}
      sf = const f32[] {0.25}
      df = const f32[] {1.5}
      b = Range(sf, nf, df)
    })";
  builder::BuildConfig config, ref_config;
  config.backend = "cuda";
  config.allow_tf32 = false;
  config.profiles = {plan::Profile{{"x", plan::ShapeRange{{1}, {150000}, {300000}}}}};
  ref_config.profiles = config.profiles;
  auto p = builder::Build(MustParse(text), config, nullptr);
  auto rp = builder::Build(MustParse(text), ref_config, nullptr);
  ASSERT_TRUE(p.ok() && rp.ok()) << p.status().ToString() << " " << rp.status().ToString();
  auto e = runtime::Engine::Create(std::move(p).value());
  auto re = runtime::Engine::Create(std::move(rp).value());
  ASSERT_TRUE(e.ok() && re.ok());
  auto ctx = (*e)->CreateContext();
  auto rctx = (*re)->CreateContext();
  ASSERT_TRUE(ctx.ok() && rctx.ok());
  for (int64_t n : {150000, 200001}) {
    std::map<std::string, Tensor> in{{"x", Random(DType::kFloat32, {n}, 1)}};
    auto got = (*ctx)->Run(in);
    auto want = (*rctx)->Run(in);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ASSERT_EQ((*got)[0].shape(), (*want)[0].shape());
    EXPECT_EQ(0, std::memcmp((*got)[0].raw(), (*want)[0].raw(), (*want)[0].nbytes())) << "int64 range, n " << n;
    EXPECT_LT(testing::RelL2((*got)[1], (*want)[1]), kF32Tol) << "f32 range, n " << n;
  }
}

TEST(CudaIndexOps, TopKWithTies) {
  SKIP_WITHOUT_GPU();
  struct K {
    Shape x;
    int64_t k;
    std::string attrs;
    float step;  // grid of values: small steps in few values make ties
  };
  // Rows of up to 4096 sort in one block; longer ones keep each tile's best (5000, 50257),
  // or with a large k sort the whole row through the workspace (5000, k=3000).
  for (const K& c : std::vector<K>{{{3, 20}, 5, "", 0.01f},
                                   {{4, 33}, 10, "{largest=0}", 0.5f},
                                   {{4, 33}, 10, "", 0.5f},
                                   {{17, 3, 2}, 4, "{axis=0}", 0.25f},
                                   {{2, 64}, 64, "{largest=0, sorted=0}", 0.125f},
                                   {{3, 5000}, 50, "", 0.125f},
                                   {{2, 50257}, 40, "", 0.0625f},
                                   {{3, 5000}, 3000, "{largest=0}", 0.125f}}) {
    const std::string g = "opset 11\ngraph g (x: f32[" + Dims(c.x) + "]) -> (v, i) {\n  kk = const i64[1] {" +
                          std::to_string(c.k) + "}\n  v, i = TopK(x, kk) " + c.attrs + "\n}\n";
    const std::string name = "topk " + Dims(c.x) + " k=" + std::to_string(c.k) + " " + c.attrs;
    const std::map<std::string, Tensor> in{{"x", Grid(c.x, 5, c.step)}};
    ExpectMatchesReference(name, g, in, Precision::kFP32, kF32Tol);
    ExpectMatchesReference(name + " fp16", g, in, Precision::kFP16, kF16Tol);  // grid values are exact in fp16
  }
  ExpectMatchesReference("topk int64", R"(opset 11
    graph g (x: i64[4,3000]) -> (v, i) {
      kk = const i64[1] {100}
      v, i = TopK(x, kk) {largest=0}
    })",
                         {{"x", Ints(DType::kInt64, {4, 3000}, 5, -20, 20)}}, Precision::kFP32, 0);
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
