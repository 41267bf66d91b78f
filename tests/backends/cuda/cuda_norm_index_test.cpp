// CUDA channel normalizations (norm.cu: BatchNormalization, InstanceNormalization,
// GroupNormalization) and the strided-copy data movers (split_kernel.cpp: Split, Tile,
// DepthToSpace, SpaceToDepth) against the reference backend, as small graphs built for
// "cuda" and run eagerly and under CUDA-graph replay. FP32 within 1e-5 relative L2 (no
// TF32), FP16 within 1e-2; integer outputs must match exactly. The indexed ops are in
// cuda_index_ops_test.cpp. The factory refusals (of both files' families) need no GPU;
// everything else skips without one and says why.
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/index_kernel.h"
#include "backends/cuda/norm_kernel.h"
#include "backends/cuda/split_kernel.h"

namespace sampan::cuda {
namespace {

using builder::Precision;
using passes::testing::MustParse;
using testing::Ask;
using testing::Dims;
using testing::ExpectMatchesReference;
using testing::ExpectUnsupported;
using testing::Ints;
using testing::Random;

constexpr double kF32Tol = 1e-5, kF16Tol = 1e-2;

// A literal constant body "{v0, v1, ...}" of n values in [lo, hi) (BatchNorm variances must be positive).
std::string Literal(int64_t n, uint64_t seed, float lo, float hi) {
  const Tensor t = Random(DType::kFloat32, {n}, seed, lo, hi);
  std::ostringstream os;
  os.precision(9);
  os << "{";
  for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << t.data<float>()[i];
  return os.str() + "}";
}

// Scale, bias, mean and positive variance constants p_s, p_b, p_m, p_v of c channels.
std::string BnParams(int64_t c, uint64_t seed) {
  std::ostringstream g;
  const std::string n = std::to_string(c);
  g << "  p_s = const f32[" << n << "] " << Literal(c, seed, 0.5f, 1.5f) << "\n"
    << "  p_b = const f32[" << n << "] " << Literal(c, seed + 1, -1.f, 1.f) << "\n"
    << "  p_m = const f32[" << n << "] " << Literal(c, seed + 2, -0.5f, 0.5f) << "\n"
    << "  p_v = const f32[" << n << "] " << Literal(c, seed + 3, 0.2f, 2.f) << "\n";
  return g.str();
}

std::map<std::string, Tensor> X(const Shape& s, uint64_t seed = 7) {
  return {{"x", Random(DType::kFloat32, s, seed, -2.f, 2.f)}};
}

// ---------------------------------------------------------------- normalizations

TEST(CudaNorm, BatchNormEveryRankFp32AndFp16) {
  SKIP_WITHOUT_GPU();
  for (const Shape& s : std::vector<Shape>{{4, 16}, {2, 6, 9}, {2, 6, 5, 7}, {2, 16, 8, 8}, {2, 4, 3, 3, 3}}) {
    const std::string g = "opset 15\ngraph g (x: f32[" + Dims(s) + "]) -> (y) {\n" + BnParams(s[1], 3) +
                          "  y = BatchNormalization(x, p_s, p_b, p_m, p_v) {epsilon=0.001}\n}\n";
    ExpectMatchesReference("batchnorm " + Dims(s), g, X(s), Precision::kFP32, kF32Tol);
    ExpectMatchesReference("batchnorm fp16 " + Dims(s), g, X(s), Precision::kFP16, kF16Tol);
  }
}

// DenseNet's transition: BatchNorm after a Concat (nothing to fold it into), then ReLU and
// a convolution; in FP16 the convolutions around it run channels-last.
TEST(CudaNorm, BatchNormAfterConcat) {
  SKIP_WITHOUT_GPU();
  const std::string g =
      "opset 15\ngraph g (x: f32[2,8,12,12]) -> (y) {\n"
      "  w1 = const f32[16,8,3,3] random\n  w2 = const f32[8,8,1,1] random\n"
      "  w3 = const f32[8,24,1,1] random\n" +
      BnParams(24, 11) +
      "  a = Conv(x, w1) {pads=[1,1,1,1]}\n  b = Conv(x, w2)\n"
      "  c = Concat(a, b) {axis=1}\n"
      "  n = BatchNormalization(c, p_s, p_b, p_m, p_v)\n"
      "  r = Relu(n)\n  y = Conv(r, w3)\n}\n";
  ExpectMatchesReference("densenet fp32", g, X({2, 8, 12, 12}), Precision::kFP32, kF32Tol);
  ExpectMatchesReference("densenet fp16", g, X({2, 8, 12, 12}), Precision::kFP16, kF16Tol);
}

TEST(CudaNorm, InstanceNorm3dAnd4d) {
  SKIP_WITHOUT_GPU();
  for (const Shape& s : std::vector<Shape>{{2, 3, 10}, {2, 4, 6, 6}, {3, 5, 7, 3}, {1, 2, 128, 128}}) {
    const std::string c = std::to_string(s[1]);
    const std::string g = "opset 17\ngraph g (x: f32[" + Dims(s) + "]) -> (y) {\n  s = const f32[" + c +
                          "] random\n  b = const f32[" + c + "] random\n" +
                          "  y = InstanceNormalization(x, s, b) {epsilon=0.01}\n}\n";
    ExpectMatchesReference("instancenorm " + Dims(s), g, X(s), Precision::kFP32, kF32Tol);
    ExpectMatchesReference("instancenorm fp16 " + Dims(s), g, X(s), Precision::kFP16, kF16Tol);
  }
  // A large mean next to a small spread: the statistics are two-pass, not E[x^2] - E[x]^2.
  const std::string g =
      "opset 17\ngraph g (x: f32[2,4,64,64]) -> (y) {\n  s = const f32[4] random\n"
      "  b = const f32[4] random\n  y = InstanceNormalization(x, s, b)\n}\n";
  ExpectMatchesReference("instancenorm offset", g, {{"x", Random(DType::kFloat32, {2, 4, 64, 64}, 5, 999.f, 1001.f)}},
                         Precision::kFP32, 1e-4);
}

TEST(CudaNorm, GroupNormOpset18PerGroupAnd21PerChannel) {
  SKIP_WITHOUT_GPU();
  struct G {
    int opset;
    Shape x;
    int64_t groups;
  };
  for (const G& c : std::vector<G>{{18, {2, 4, 5, 5}, 2},
                                   {18, {2, 6, 7}, 3},
                                   {21, {2, 6, 7}, 3},
                                   {21, {2, 8, 9, 9}, 4},
                                   {21, {1, 32, 64, 64}, 8},
                                   {18, {2, 6, 4, 4}, 6}}) {
    const int64_t params = c.opset < 21 ? c.groups : c.x[1];
    const std::string p = std::to_string(params);
    const std::string g = "opset " + std::to_string(c.opset) + "\ngraph g (x: f32[" + Dims(c.x) + "]) -> (y) {\n" +
                          "  s = const f32[" + p + "] random\n  b = const f32[" + p + "] random\n" +
                          "  y = GroupNormalization(x, s, b) {num_groups=" + std::to_string(c.groups) + "}\n}\n";
    const std::string name = "groupnorm opset " + std::to_string(c.opset) + " " + Dims(c.x);
    ExpectMatchesReference(name, g, X(c.x), Precision::kFP32, kF32Tol);
    ExpectMatchesReference(name + " fp16", g, X(c.x), Precision::kFP16, kF16Tol);
  }
}

// ---------------------------------------------------------------- split / tile / depth-space

TEST(CudaCopyOps, SplitEveryForm) {
  SKIP_WITHOUT_GPU();
  ExpectMatchesReference("split input", R"(opset 13
    graph g (x: f32[4,10]) -> (a, b, c) {
      sp = const i64[3] {2, 3, 5}
      a, b, c = Split(x, sp) {axis=1}
    })",
                         X({4, 10}), Precision::kFP32, kF32Tol);
  ExpectMatchesReference("split num_outputs uneven", R"(opset 18
    graph g (x: f32[7,3,2]) -> (a, b, c) {
      a, b, c = Split(x) {axis=0, num_outputs=3}
    })",
                         X({7, 3, 2}), Precision::kFP16, kF16Tol);
  ExpectMatchesReference("split attribute", R"(opset 11
    graph g (x: f32[2,6,4]) -> (a, b, c) {
      a, b, c = Split(x) {axis=-2, split=[1, 2, 3]}
    })",
                         X({2, 6, 4}), Precision::kFP32, kF32Tol);
  ExpectMatchesReference("split even int64", R"(opset 13
    graph g (x: i64[3,8]) -> (a, b) {
      a, b = Split(x) {axis=1}
    })",
                         {{"x", Ints(DType::kInt64, {3, 8}, 1, -50, 50)}}, Precision::kFP32, 0);
}

TEST(CudaCopyOps, TileAndDepthSpace) {
  SKIP_WITHOUT_GPU();
  struct T {
    Shape x, reps;
  };
  // The last one splits into more dims than a strided copy has: the modulo kernel.
  for (const T& t : std::vector<T>{
           {{2, 3}, {2, 2}}, {{2, 3, 4}, {1, 3, 2}}, {{1, 768}, {16, 1}}, {{2, 3, 2, 3, 2}, {2, 2, 3, 2, 2}}}) {
    const std::string g = "opset 13\ngraph g (x: f32[" + Dims(t.x) + "]) -> (y) {\n  r = const i64[" +
                          std::to_string(t.reps.size()) + "] {" + Dims(t.reps) + "}\n  y = Tile(x, r)\n}\n";
    ExpectMatchesReference("tile " + Dims(t.x) + " x " + Dims(t.reps), g, X(t.x), Precision::kFP32, kF32Tol);
  }
  ExpectMatchesReference("tile int32", R"(opset 13
    graph g (x: i32[2,3]) -> (y) {
      r = const i64[2] {3, 2}
      y = Tile(x, r)
    })",
                         {{"x", Ints(DType::kInt32, {2, 3}, 2, -9, 9)}}, Precision::kFP32, 0);
  for (const char* mode : {"DCR", "CRD"})
    for (int64_t b : {2, 3}) {
      const Shape s{2, 2 * b * b, 3, 2};
      const std::string g = "opset 13\ngraph g (x: f32[" + Dims(s) +
                            "]) -> (y) {\n  y = DepthToSpace(x) {blocksize=" + std::to_string(b) + ", mode=\"" + mode +
                            "\"}\n}\n";
      ExpectMatchesReference(std::string("depthtospace ") + mode + " " + std::to_string(b), g, X(s), Precision::kFP32,
                             kF32Tol);
      ExpectMatchesReference(std::string("depthtospace fp16 ") + mode, g, X(s), Precision::kFP16, kF16Tol);
    }
  for (int64_t b : {2, 3}) {
    const Shape s{2, 3, 2 * b, 3 * b};
    const std::string g = "opset 13\ngraph g (x: f32[" + Dims(s) +
                          "]) -> (y) {\n  y = SpaceToDepth(x) {blocksize=" + std::to_string(b) + "}\n}\n";
    ExpectMatchesReference("spacetodepth " + std::to_string(b), g, X(s), Precision::kFP32, kF32Tol);
  }
}

// ---------------------------------------------------------------- refusals (no GPU needed)

TEST(CudaNormIndexFactories, SayWhyTheyDecline) {
  const std::string bn = R"(opset 15
    graph g (x: f32[2,4,3,3], s: f32[4], b: f32[4], m: f32[4], v: f32[4]) -> (y, rm, rv) {
      y, rm, rv = BatchNormalization(x, s, b, m, v) {training_mode=1}
    })";
  ExpectUnsupported(Ask(MakeBatchNorm, bn), "training_mode");
  const std::string bn_inf = R"(opset 15
    graph g (x: f32[2,4,3,3], s: f32[4], b: f32[4], m: f32[4], v: f32[4]) -> (y) {
      y = BatchNormalization(x, s, b, m, v)
    })";
  ASSERT_TRUE(Ask(MakeBatchNorm, bn_inf).ok());
  KernelOptions half;
  half.in_nhwc = {true};
  ExpectUnsupported(Ask(MakeBatchNorm, bn_inf, half), "layout");
  KernelOptions both = half;
  both.out_nhwc = true;
  EXPECT_TRUE(Ask(MakeBatchNorm, bn_inf, both).ok()) << "channels-last in and out is an element-wise walk";
  ExpectUnsupported(Ask(MakeInstanceNorm, R"(opset 17
    graph g (x: f32[2,4,3,3], s: f32[4], b: f32[4]) -> (y) { y = InstanceNormalization(x, s, b) })",
                        both),
                    "layout");
  ExpectUnsupported(Ask(MakeScatterElements, R"(opset 18
    graph g (x: u8[4,5], i: i64[2,5], u: u8[2,5]) -> (y) { y = ScatterElements(x, i, u) {reduction="add"} })"),
                    "reduction 'add' on u8");
  ExpectUnsupported(Ask(MakeTopK, R"(opset 11
    graph g (x: u8[4,5]) -> (v, i) {
      kk = const i64[1] {2}
      v, i = TopK(x, kk)
    })"),
                    "TopK of u8");
  EXPECT_TRUE(Ask(MakeSplit, R"(opset 18
    graph g (x: f32[7,3]) -> (a, b, c) { a, b, c = Split(x) {num_outputs=3} })")
                  .ok());
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
