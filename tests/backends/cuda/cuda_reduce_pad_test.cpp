// The CUDA reductions (reduce_kernel.cpp: Reduce*, ArgMax/ArgMin), Pad (pad_kernel.cpp)
// and CumSum (cumsum_kernel.cpp) against the reference kernels: one-node graphs over many
// shapes, so every kernel shape runs (rows by a thread, a few lanes, a warp or a block;
// strided rows; columns; rows and columns split into partial results; reduced axes
// permuted first; Pad's per-element and per-row kernels; scans split into chunks), in
// FP32 (1e-5) and FP16 (1e-2), eager and under CUDA-graph replay.
// Without a GPU (or without the CUDA backend in the build) these tests skip and say why.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_test_util.h"

namespace sampan::cuda {
namespace {

using builder::Precision;
using testing::ExpectMatchesReference;
using testing::Random;

using Axes = std::optional<std::vector<int64_t>>;  // nullopt: no axes given

template <class T>
std::string Join(const std::vector<T>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += StrCat(i ? "," : "", v[i]);
  return s;
}

std::string AxesName(const Axes& axes) {
  return axes ? StrCat("{", Join(*axes), "}") : std::string("none");
}

// y = op(x) in the opset's form: axes an attribute before opset 13 (ReduceSum) / 18 (the
// others), a constant input from then on.
std::string ReduceGraph(const std::string& op, int64_t opset, const std::string& xtype, const Shape& x,
                        const Axes& axes, int keepdims, int noop = -1) {
  const bool input_form = opset >= (op == "ReduceSum" ? 13 : 18);
  std::string attrs = StrCat("keepdims=", keepdims);
  if (noop >= 0) attrs += StrCat(", noop_with_empty_axes=", noop);
  std::string consts, args = "x";
  if (axes && input_form) {
    consts = axes->empty() ? std::string("  axes = const i64[0]\n")
                           : StrCat("  axes = const i64[", axes->size(), "] {", Join(*axes), "}\n");
    args += ", axes";
  } else if (axes && !axes->empty()) {
    attrs += StrCat(", axes=[", Join(*axes), "]");
  }
  return StrCat("opset ", opset, "\ngraph g (x: ", xtype, "[", Join(x), "]) -> (y) {\n", consts, "  y = ", op, "(",
                args, ") {", attrs, "}\n}\n");
}

// Inputs each op is well-defined on: positive for ReduceLogSum, near 1 for ReduceProd. In
// FP16 the values shrink with the element count so that sums of magnitudes stay finite
// (f16 ends at 65504).
Tensor InputFor(const std::string& op, const Shape& shape, uint64_t seed, Precision precision) {
  const float s = precision == Precision::kFP16 ? std::min(1.f, 20000.f / static_cast<float>(NumElements(shape))) : 1.f;
  if (op == "ReduceLogSum") return Random(DType::kFloat32, shape, seed, 0.1f * s, s);
  if (op == "ReduceProd") return Random(DType::kFloat32, shape, seed, 0.5f, 1.5f);
  return Random(DType::kFloat32, shape, seed, -s, s);
}

// Small integers with many repeats: ties for ArgMax/ArgMin, exact in f16.
Tensor Ties(DType dt, const Shape& shape, uint64_t seed, int levels = 5) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(-levels / 2, levels - 1 - levels / 2);
  std::vector<int64_t> v(static_cast<size_t>(NumElements(shape)));
  for (auto& e : v) e = u(rng);
  return Tensor::FromVector<int64_t>(dt, v, shape);
}

const std::vector<std::string>& ReduceOps() {
  static const std::vector<std::string> k = {"ReduceSum",    "ReduceMean",     "ReduceMax", "ReduceMin",
                                             "ReduceProd",   "ReduceL1",       "ReduceL2",  "ReduceSumSquare",
                                             "ReduceLogSum", "ReduceLogSumExp"};
  return k;
}

struct AxesCase {
  Shape x;
  Axes axes;
};

// Last, first, middle, non-adjacent (permuted first), all (no axes), negative and size-1
// axes; rows short enough for a thread, a few lanes or a warp.
const std::vector<AxesCase>& SmallCases() {
  static const std::vector<AxesCase> k = {
      {{4, 6, 8}, std::vector<int64_t>{-1}},
      {{4, 6, 8}, std::vector<int64_t>{0}},
      {{4, 6, 8}, std::vector<int64_t>{1}},
      {{4, 6, 8}, std::vector<int64_t>{0, 2}},
      {{4, 6, 8}, std::nullopt},
      {{2, 3, 5, 7}, std::vector<int64_t>{1, 3}},
      {{2, 3, 5, 7}, std::vector<int64_t>{0, 2, 3}},
      {{2, 3, 5, 7}, std::vector<int64_t>{-2, -1}},
      {{2, 1, 5, 1}, std::vector<int64_t>{1, 3}},
      {{2, 1, 5, 1}, std::vector<int64_t>{0, 3}},
      {{64, 5}, std::vector<int64_t>{1}},
      {{5, 33}, std::vector<int64_t>{1}},
      {{300, 100}, std::vector<int64_t>{-1}},
      {{3, 70, 2}, std::vector<int64_t>{1}},
      {{7}, std::vector<int64_t>{0}},
  };
  return k;
}

// Long rows (a block per row, split into partials), rows not a multiple of the 16-byte pack,
// strided rows (small inner, few columns), long columns (split), the spatial mean of an
// image, large permuted reductions.
const std::vector<AxesCase>& LargeCases() {
  static const std::vector<AxesCase> k = {
      {{2, 4096}, std::vector<int64_t>{-1}},
      {{3, 4099}, std::vector<int64_t>{1}},
      {{1, 50000}, std::vector<int64_t>{1}},
      {{1, 1 << 20}, std::vector<int64_t>{1}},
      {{1, 4096, 8}, std::vector<int64_t>{1}},
      {{4, 100000, 4}, std::vector<int64_t>{1}},
      {{1, 20000, 64}, std::vector<int64_t>{1}},
      {{2000, 1000}, std::vector<int64_t>{0}},
      {{1, 3, 224, 224}, std::vector<int64_t>{2, 3}},
      {{8, 64, 32}, std::vector<int64_t>{0, 2}},
      {{2, 40, 3000}, std::nullopt},
  };
  return k;
}

void RunReduceCases(const std::vector<AxesCase>& cases, Precision precision, double tol, bool skip_prod) {
  uint64_t seed = 1;
  for (const std::string& op : ReduceOps()) {
    if (skip_prod && op == "ReduceProd") continue;
    for (const AxesCase& c : cases) {
      for (int keepdims : {1, 0}) {
        const std::string graph = ReduceGraph(op, 18, "f32", c.x, c.axes, keepdims);
        const std::string name = StrCat(op, " x[", Join(c.x), "] axes ", AxesName(c.axes), " keepdims ", keepdims);
        ExpectMatchesReference(name, graph, {{"x", InputFor(op, c.x, seed++, precision)}}, precision, tol);
      }
    }
  }
}

TEST(CudaReduce, AllOpsSmallShapesFp32) {
  SKIP_WITHOUT_GPU();
  RunReduceCases(SmallCases(), Precision::kFP32, 1e-5, false);
}

TEST(CudaReduce, AllOpsSmallShapesFp16) {
  SKIP_WITHOUT_GPU();
  RunReduceCases(SmallCases(), Precision::kFP16, 1e-2, false);
}

// ReduceProd of thousands of elements ends in underflow, where a relative error means
// nothing; it runs on the small shapes only.
TEST(CudaReduce, AllOpsLargeShapesFp32) {
  SKIP_WITHOUT_GPU();
  RunReduceCases(LargeCases(), Precision::kFP32, 1e-5, true);
}

TEST(CudaReduce, AllOpsLargeShapesFp16) {
  SKIP_WITHOUT_GPU();
  RunReduceCases(LargeCases(), Precision::kFP16, 1e-2, true);
}

// The attribute forms (ReduceSum before opset 13, the others before 18) and ReduceSum's
// input form at opset 13.
TEST(CudaReduce, AxesAttributeAndInputForms) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  const Shape x{3, 4, 5};
  for (const std::string& op : ReduceOps()) {
    for (const Axes& axes : {Axes(std::vector<int64_t>{1}), Axes(std::vector<int64_t>{0, 2}), Axes()}) {
      for (int64_t opset : {11, 13}) {
        ExpectMatchesReference(StrCat(op, " opset ", opset, " axes ", AxesName(axes)),
                               ReduceGraph(op, opset, "f32", x, axes, 1),
                               {{"x", InputFor(op, x, seed++, Precision::kFP32)}}, Precision::kFP32, 1e-5);
      }
    }
  }
}

// Empty axes: reduce everything, or (noop_with_empty_axes=1) pass the input through.
TEST(CudaReduce, EmptyAxes) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 200;
  const Shape x{3, 4, 5};
  for (const std::string& op : ReduceOps()) {
    for (int noop : {0, 1}) {
      for (bool with_input : {true, false}) {
        const Axes axes = with_input ? Axes(std::vector<int64_t>{}) : Axes();
        ExpectMatchesReference(StrCat(op, " empty axes noop ", noop, with_input ? " (empty input)" : " (no input)"),
                               ReduceGraph(op, 18, "f32", x, axes, 1, noop),
                               {{"x", InputFor(op, x, seed++, Precision::kFP32)}}, Precision::kFP32, 1e-5);
      }
    }
  }
}

// r == 0: the identities (sum 0, product 1, mean NaN...). Max/Min/LogSum(Exp) give +-inf,
// which a relative error cannot compare, so they stay out.
TEST(CudaReduce, EmptyReductionGivesIdentities) {
  SKIP_WITHOUT_GPU();
  const Shape x{3, 0, 4};
  for (const std::string op : {"ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare"}) {
    ExpectMatchesReference(StrCat(op, " over an empty axis"), ReduceGraph(op, 18, "f32", x, std::vector<int64_t>{1}, 1),
                           {{"x", Random(DType::kFloat32, x, 3)}}, Precision::kFP32, 1e-5);
  }
}

// NaN wins in ReduceMax/ReduceMin (and spreads through sums), as in the reference.
TEST(CudaReduce, NanPropagates) {
  SKIP_WITHOUT_GPU();
  const Shape x{4, 300};
  Tensor t = Random(DType::kFloat32, x, 5);
  t.mutable_data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  t.mutable_data<float>()[2 * 300 + 299] = std::numeric_limits<float>::quiet_NaN();
  for (const std::string op : {"ReduceMax", "ReduceMin", "ReduceSum", "ReduceLogSumExp"}) {
    for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0}}) {
      ExpectMatchesReference(StrCat(op, " with NaN axes ", Join(axes)), ReduceGraph(op, 18, "f32", x, axes, 1),
                             {{"x", t}}, Precision::kFP32, 1e-5);
    }
  }
}

// Integer reductions are exact (sums and products wrap like the reference's).
TEST(CudaReduce, IntegerTypes) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 300;
  const std::vector<AxesCase> cases = {
      {{4, 6}, std::vector<int64_t>{1}}, {{4, 6}, std::vector<int64_t>{0}},    {{3, 4, 5}, std::vector<int64_t>{0, 2}},
      {{2, 3, 4}, std::nullopt},         {{2, 5000}, std::vector<int64_t>{1}}, {{1, 3000, 3}, std::vector<int64_t>{1}}};
  for (DType dt : {DType::kInt32, DType::kInt64}) {
    const std::string type = dt == DType::kInt32 ? "i32" : "i64";
    for (const std::string op :
         {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1", "ReduceSumSquare"}) {
      for (const AxesCase& c : cases) {
        // Products: few factors of magnitude <= 2, so no overflow hides a difference.
        const bool prod = op == "ReduceProd";
        if (prod && NumElements(c.x) > 64) continue;
        ExpectMatchesReference(StrCat(op, " ", type, " x[", Join(c.x), "] axes ", AxesName(c.axes)),
                               ReduceGraph(op, 18, type, c.x, c.axes, 0),
                               {{"x", Ties(dt, c.x, seed++, prod ? 5 : 201)}}, Precision::kFP32, 0);
      }
    }
  }
}

// ---------------------------------------------------------------- ArgMax / ArgMin

std::string ArgGraph(const std::string& op, int64_t opset, const std::string& xtype, const Shape& x, int64_t axis,
                     int keepdims, int last) {
  return StrCat("opset ", opset, "\ngraph g (x: ", xtype, "[", Join(x), "]) -> (y) {\n  y = ", op, "(x) {axis=", axis,
                ", keepdims=", keepdims, opset >= 12 ? StrCat(", select_last_index=", last) : std::string(), "}\n}\n");
}

using ArgCase = std::pair<Shape, int64_t>;  // shape, axis

TEST(CudaArgReduce, RandomAndTiesFp32) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 400;
  const std::vector<ArgCase> cases = {{{4, 6, 8}, 0},  {{4, 6, 8}, 1},    {{4, 6, 8}, 2},     {{4, 6, 8}, -1},
                                      {{300, 100}, 1}, {{64, 5}, 1},      {{3, 33}, 1},       {{2, 4096}, 1},
                                      {{1, 50000}, 1}, {{1, 3000, 4}, 1}, {{2, 70000, 3}, 1}, {{1, 20000, 64}, 1},
                                      {{7}, 0}};
  for (const std::string op : {"ArgMax", "ArgMin"}) {
    for (const auto& [x, axis] : cases) {
      for (int keepdims : {1, 0}) {
        for (int last : {0, 1}) {
          const std::string graph = ArgGraph(op, 13, "f32", x, axis, keepdims, last);
          const std::string name = StrCat(op, " x[", Join(x), "] axis ", axis, " keepdims ", keepdims, " last ", last);
          ExpectMatchesReference(name + " random", graph, {{"x", Random(DType::kFloat32, x, seed++)}}, Precision::kFP32,
                                 0);
          ExpectMatchesReference(name + " ties", graph, {{"x", Ties(DType::kFloat32, x, seed++)}}, Precision::kFP32, 0);
        }
      }
    }
  }
}

// Small integers are exact in f16: the same indices after the precision cast.
TEST(CudaArgReduce, TiesFp16) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 500;
  for (const std::string op : {"ArgMax", "ArgMin"}) {
    for (const auto& [x, axis] : std::vector<ArgCase>{{{4, 6, 8}, 1}, {{2, 4096}, 1}, {{1, 3000, 4}, 1}}) {
      for (int last : {0, 1}) {
        ExpectMatchesReference(StrCat(op, " f16 ties x[", Join(x), "] last ", last),
                               ArgGraph(op, 13, "f32", x, axis, 1, last), {{"x", Ties(DType::kFloat32, x, seed++)}},
                               Precision::kFP16, 0);
      }
    }
  }
}

TEST(CudaArgReduce, IntegerTypesAndOldOpset) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 600;
  for (const std::string type : {"i32", "i64"}) {
    for (const std::string op : {"ArgMax", "ArgMin"}) {
      for (const auto& [x, axis] : std::vector<ArgCase>{{{5, 9}, 1}, {{5, 9}, 0}, {{2, 5000}, -1}}) {
        for (int last : {0, 1}) {
          ExpectMatchesReference(StrCat(op, " ", type, " x[", Join(x), "] axis ", axis, " last ", last),
                                 ArgGraph(op, 13, type, x, axis, 1, last),
                                 {{"x", Ties(type == "i32" ? DType::kInt32 : DType::kInt64, x, seed++)}},
                                 Precision::kFP32, 0);
        }
      }
    }
  }
  // Opset 11: no select_last_index, the first of equal extremes.
  ExpectMatchesReference("ArgMax opset 11", ArgGraph("ArgMax", 11, "f32", {6, 7}, 1, 0, 0),
                         {{"x", Ties(DType::kFloat32, {6, 7}, 7)}}, Precision::kFP32, 0);
}

// The first NaN is the extreme (NumPy), with or without select_last_index.
TEST(CudaArgReduce, NanIsTheExtreme) {
  SKIP_WITHOUT_GPU();
  const Shape x{3, 20000};
  Tensor t = Ties(DType::kFloat32, x, 9);
  float* p = t.mutable_data<float>();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  p[5] = p[15000] = nan;   // row 0: two NaNs (in different splits)
  p[20000 + 19999] = nan;  // row 1: the last element
  for (const std::string op : {"ArgMax", "ArgMin"}) {
    for (int last : {0, 1}) {
      for (int64_t axis : {0, 1}) {
        ExpectMatchesReference(StrCat(op, " NaN axis ", axis, " last ", last),
                               ArgGraph(op, 13, "f32", x, axis, 1, last), {{"x", t}}, Precision::kFP32, 0);
      }
    }
  }
}

// ---------------------------------------------------------------- Pad

// Pad in the opset's form: attributes before 11, then const inputs (the constant as f32,
// axes from 18).
std::string PadGraph(int64_t opset, const Shape& x, const std::vector<int64_t>& pads, const std::string& mode,
                     std::optional<float> value = std::nullopt, const Axes& axes = std::nullopt) {
  std::string body;
  if (opset < 11) {
    body = StrCat("  y = Pad(x) {mode=\"", mode, "\", pads=[", Join(pads), "]",
                  value ? StrCat(", value=", std::to_string(*value)) : std::string(), "}\n");
  } else {
    body = StrCat("  pads = const i64[", pads.size(), "] {", Join(pads), "}\n");
    std::string args = "x, pads";
    if (value) {
      body += StrCat("  cv = const f32[] {", std::to_string(*value), "}\n");
      args += ", cv";
    } else if (axes) {
      args += ", _";
    }
    if (axes) {
      body += StrCat("  axes = const i64[", axes->size(), "] {", Join(*axes), "}\n");
      args += ", axes";
    }
    body += StrCat("  y = Pad(", args, ") {mode=\"", mode, "\"}\n");
  }
  return StrCat("opset ", opset, "\ngraph g (x: f32[", Join(x), "]) -> (y) {\n", body, "}\n");
}

struct PadCase {
  Shape x;
  std::vector<int64_t> pads;  // begins then ends
};

// Positive, negative (cropping) and mixed pads on rank 1..5, some wider than the axis (reflect
// and wrap then keep bouncing / wrapping, as the reference does); the last three have rows of
// at least a warp (the per-row kernel).
const std::vector<PadCase>& PadCases() {
  static const std::vector<PadCase> k = {
      {{9}, {2, 3}},
      {{5, 7}, {1, 2, 3, 4}},
      {{5, 7}, {-1, 0, 0, -2}},
      {{5, 7}, {2, -3, -1, 4}},
      {{3, 4, 6}, {0, 1, 2, 0, 3, 1}},
      {{3, 4, 6}, {1, -1, -2, 1, 2, 3}},
      {{2, 3, 5, 6}, {0, 0, 1, 2, 0, 0, 2, 1}},
      {{2, 3, 5, 6}, {1, 2, -1, -2, 0, 1, 2, 3}},
      {{2, 3, 5, 6}, {0, 0, 4, 5, 0, 0, 4, 5}},
      {{2, 3, 2, 4, 5}, {0, 1, 0, 0, 1, 0, 1, 0, 3, 2}},
      {{64, 40, 50}, {0, 2, 3, 0, 3, 4}},
      {{32, 40, 70}, {0, -2, -3, 1, 3, -4}},
      {{16, 40, 70}, {0, 45, 80, 0, 41, 75}},
  };
  return k;
}

void RunPadCases(Precision precision, double tol) {
  uint64_t seed = 700;
  for (const std::string mode : {"constant", "reflect", "edge", "wrap"}) {
    for (const PadCase& c : PadCases()) {
      const std::optional<float> value = mode == "constant" ? std::optional<float>(0.75f) : std::nullopt;
      ExpectMatchesReference(StrCat("Pad ", mode, " x[", Join(c.x), "] pads ", Join(c.pads)),
                             PadGraph(18, c.x, c.pads, mode, value), {{"x", Random(DType::kFloat32, c.x, seed++)}},
                             precision, tol);
    }
  }
}

TEST(CudaPad, AllModesFp32) {
  SKIP_WITHOUT_GPU();
  RunPadCases(Precision::kFP32, 1e-5);
}

TEST(CudaPad, AllModesFp16) {
  SKIP_WITHOUT_GPU();
  RunPadCases(Precision::kFP16, 1e-2);
}

// Opset 2 attributes, opset 11 inputs without a constant (zeros), opset 18 axes (negative too).
TEST(CudaPad, OpsetForms) {
  SKIP_WITHOUT_GPU();
  const Shape x{2, 3, 5, 6};
  const std::map<std::string, Tensor> in{{"x", Random(DType::kFloat32, x, 11)}};
  const struct {
    const char* name;
    std::string graph;
  } cases[] = {
      {"opset 2 constant", PadGraph(2, x, {0, 1, 2, 0, 0, 1, 0, 2}, "constant", 1.5f)},
      {"opset 2 reflect", PadGraph(2, x, {0, 0, 2, 1, 0, 0, 1, 3}, "reflect")},
      {"opset 11 zeros", PadGraph(11, x, {0, 1, 2, -1, 1, 0, -2, 3}, "constant")},
      {"opset 18 axes edge", PadGraph(18, x, {1, 2, 3, -1}, "edge", std::nullopt, std::vector<int64_t>{1, -1})},
      {"opset 18 axes constant", PadGraph(18, x, {2, 1, 0, 3}, "constant", -2.f, std::vector<int64_t>{3, 2})},
      {"opset 18 axes wrap", PadGraph(18, x, {7, 1, 0, 8}, "wrap", std::nullopt, std::vector<int64_t>{3, 2})},
  };
  for (const auto& c : cases) ExpectMatchesReference(StrCat("Pad ", c.name), c.graph, in, Precision::kFP32, 1e-5);
}

// Integer data moves as bytes; the constant is the element type's.
TEST(CudaPad, IntegerData) {
  SKIP_WITHOUT_GPU();
  const Shape x{3, 4};
  for (const std::string mode : {"constant", "reflect", "edge", "wrap"}) {
    const std::string graph = StrCat("opset 18\ngraph g (x: i64[3,4]) -> (y) {\n  pads = const i64[4] {1, 2, 2, 1}\n",
                                     "  cv = const i64[] {-7}\n  y = Pad(x, pads, cv) {mode=\"", mode, "\"}\n}\n");
    ExpectMatchesReference(StrCat("Pad i64 ", mode), graph, {{"x", Ties(DType::kInt64, x, 13, 1000)}}, Precision::kFP32,
                           0);
  }
}

// Between two FP16 convolutions the activation may be stored channels-last; Pad keeps it so
// (pads permuted to [N, H, W, C] memory) or converts, and either way matches the reference.
TEST(CudaPad, BetweenConvolutionsFp16) {
  SKIP_WITHOUT_GPU();
  for (const std::string mode : {"constant", "reflect", "edge", "wrap"}) {
    for (const std::string pads : {"0, 0, 1, 2, 0, 0, 2, 1", "0, 0, -1, 1, 0, 0, 2, -2"}) {
      const std::string graph = StrCat(R"(
        opset 17
        graph g (x: f32[2,8,16,16]) -> (y) {
          w1 = const f32[16,8,3,3] random
          c1 = Conv(x, w1) {pads=[1,1,1,1]}
          r1 = Relu(c1)
          pads = const i64[8] {)",
                                       pads, R"(}
          cv = const f32[] {0.25}
          p = Pad(r1, pads, cv) {mode=")",
                                       mode, R"("}
          w2 = const f32[8,16,3,3] random
          y = Conv(p, w2)
        })");
      ExpectMatchesReference(StrCat("Conv-Pad-Conv ", mode, " pads ", pads), graph,
                             {{"x", Random(DType::kFloat32, {2, 8, 16, 16}, 17)}}, Precision::kFP16, 1e-2);
    }
  }
}

// ---------------------------------------------------------------- CumSum

std::string CumSumGraph(const std::string& xtype, const Shape& x, int64_t axis, int exclusive, int reverse) {
  return StrCat("opset 14\ngraph g (x: ", xtype, "[", Join(x), "]) -> (y) {\n  ax = const i64[] {", axis,
                "}\n  y = CumSum(x, ax) {exclusive=", exclusive, ", reverse=", reverse, "}\n}\n");
}

// Columns, short rows (a thread each), rows of a few warp tiles, long rows of many block
// tiles, few long rows and few long columns (split into chunks with carries).
const std::vector<ArgCase>& CumSumCases() {
  static const std::vector<ArgCase> k = {{{3, 5}, 1},      {{3, 5}, 0},       {{2, 7, 3}, 1}, {{2, 7, 3}, -1},
                                         {{4, 300}, 1},    {{2, 3, 600}, -1}, {{2, 5000}, 1}, {{1, 3000, 2}, 1},
                                         {{4, 128000}, 1}, {{3000, 64}, 0},   {{11}, 0}};
  return k;
}

void RunCumSumCases(Precision precision, double tol) {
  uint64_t seed = 800;
  for (const auto& [x, axis] : CumSumCases()) {
    for (int exclusive : {0, 1}) {
      for (int reverse : {0, 1}) {
        ExpectMatchesReference(
            StrCat("CumSum x[", Join(x), "] axis ", axis, " exclusive ", exclusive, " reverse ", reverse),
            CumSumGraph("f32", x, axis, exclusive, reverse), {{"x", Random(DType::kFloat32, x, seed++)}}, precision,
            tol);
      }
    }
  }
}

TEST(CudaCumSum, Fp32) {
  SKIP_WITHOUT_GPU();
  RunCumSumCases(Precision::kFP32, 1e-5);
}

TEST(CudaCumSum, Fp16) {
  SKIP_WITHOUT_GPU();
  RunCumSumCases(Precision::kFP16, 1e-2);
}

TEST(CudaCumSum, IntegerTypes) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 900;
  for (const std::string type : {"i32", "i64"}) {
    for (const auto& [x, axis] : CumSumCases()) {
      for (int exclusive : {0, 1}) {
        for (int reverse : {0, 1}) {
          ExpectMatchesReference(
              StrCat("CumSum ", type, " x[", Join(x), "] axis ", axis, " exclusive ", exclusive, " reverse ", reverse),
              CumSumGraph(type, x, axis, exclusive, reverse),
              {{"x", Ties(type == "i32" ? DType::kInt32 : DType::kInt64, x, seed++, 2001)}}, Precision::kFP32, 0);
        }
      }
    }
  }
}

// Global pooling of a channels-last activation with few channels over many pixels (an
// early squeeze-excitation block's pool): the pixels are split over grid rows and the
// fp32 partials combined. Behind a depthwise convolution (our kernel) with SiLU, as in
// MobileNet/EfficientNet blocks, and a 3-channel first layer.
TEST(CudaPool, GlobalPoolsOfChannelsLastActivations) {
  SKIP_WITHOUT_GPU();
  const char* graph = R"(
    opset 17
    graph g (x: f32[2,3,96,80]) -> (avg, mx, tail) {
      w1 = const f32[16,3,3,3] random
      b1 = const f32[16] random
      c1 = Conv(x, w1, b1) {pads=[1,1,1,1]}
      r1 = Relu(c1)
      wd = const f32[16,1,5,5] random
      bd = const f32[16] random
      d = Conv(r1, wd, bd) {pads=[2,2,2,2], group=16}
      s = Sigmoid(d)
      u = Mul(d, s)
      avg = GlobalAveragePool(u)
      mx = GlobalMaxPool(u)
      wl = const f32[24,16,1,1] random
      cl = Conv(u, wl)
      tail = GlobalAveragePool(cl)
    })";
  uint64_t seed = 900;
  for (Precision p : {Precision::kFP32, Precision::kFP16})
    ExpectMatchesReference(StrCat("global pools, ", p == Precision::kFP16 ? "fp16" : "fp32"), graph,
                           {{"x", Random(DType::kFloat32, {2, 3, 96, 80}, seed++)}}, p,
                           p == Precision::kFP16 ? 5e-3 : 1e-4);
}

}  // namespace
}  // namespace sampan::cuda
