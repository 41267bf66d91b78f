// Element-wise ops (binary_arith, unary_math, activations, compare_logic,
// variadic, where): symbolic shape inference, error cases and numerics that the
// ONNX conformance cases do not cover.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/elementwise_util.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

using ir::Dim;
using ir::TensorType;

struct OneNode {
  ir::Graph g;
  ir::Node* node = nullptr;
};

// A graph with one node of `op` whose inputs are graph inputs of the given types.
std::unique_ptr<OneNode> MakeGraph(const std::string& op, const std::vector<TensorType>& inputs,
                                   std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 17) {
  auto m = std::make_unique<OneNode>();
  m->g.opsets[""] = opset;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ir::Value* v = m->g.AddValue("in" + std::to_string(i), inputs[i]).value();
    m->g.inputs().push_back(v);
    ins.push_back(v);
  }
  ir::Value* out = m->g.AddValue("out").value();
  m->g.outputs().push_back(out);
  m->node = m->g.AddNode(op, ins, {out}, "n").value();
  m->node->attrs = std::move(attrs);
  return m;
}

Result<TensorType> InferOne(const std::string& op, const std::vector<TensorType>& inputs,
                            std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 17) {
  auto m = MakeGraph(op, inputs, std::move(attrs), opset);
  SP_RETURN_IF_ERROR(InferTypes(m->g));
  return m->g.FindValue("out")->type;
}

Result<Tensor> RunOne(const std::string& op, const std::vector<Tensor>& inputs,
                      std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 17) {
  std::vector<TensorType> types;
  for (const Tensor& t : inputs) types.push_back(TensorType::Static(t.dtype(), t.shape()));
  auto m = MakeGraph(op, types, std::move(attrs), opset);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, opset, ptrs, &outs));
  return outs.at(0);
}

TensorType T(DType dt, std::vector<Dim> dims) {
  return TensorType{dt, std::move(dims)};
}
Dim K(int64_t v) {
  return Dim::Known(v);
}
Dim S(const char* s) {
  return Dim::Symbol(s);
}

template <class E>
std::vector<E> Values(const Tensor& t) {
  return std::vector<E>(t.data<E>(), t.data<E>() + t.numel());
}

TEST(ElementwiseInfer, BroadcastKeepsSymbols) {
  auto t = InferOne("Add", {T(DType::kFloat32, {S("N"), K(3), K(1)}), T(DType::kFloat32, {K(1), K(4)})});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), "f32[N,3,4]");

  auto eq = InferOne("Equal", {T(DType::kInt64, {S("B"), K(5)}), T(DType::kInt64, {K(5)})});
  ASSERT_TRUE(eq.ok()) << eq.status().ToString();
  EXPECT_EQ(eq->dtype, DType::kBool);
  EXPECT_EQ(eq->ToString(), "bool[B,5]");

  auto w = InferOne("Where",
                    {T(DType::kBool, {S("N"), K(1)}), T(DType::kFloat16, {K(1), K(7)}), T(DType::kFloat16, {K(1)})});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->ToString(), "f16[N,7]");

  auto mx = InferOne("Max", {T(DType::kInt32, {K(2), K(1)}), T(DType::kInt32, {K(3)}), T(DType::kInt32, {})});
  ASSERT_TRUE(mx.ok()) << mx.status().ToString();
  EXPECT_EQ(mx->ToString(), "i32[2,3]");
}

TEST(ElementwiseInfer, UnaryKeepsSymbolsAndDType) {
  auto r = InferOne("Relu", {T(DType::kBFloat16, {S("N"), Dim::Unknown()})});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->dtype, DType::kBFloat16);
  ASSERT_TRUE(r->dims.has_value());
  EXPECT_EQ((*r->dims)[0], S("N"));

  auto isnan = InferOne("IsNaN", {T(DType::kFloat32, {S("N")})});
  ASSERT_TRUE(isnan.ok());
  EXPECT_EQ(isnan->ToString(), "bool[N]");

  auto unknown_rank = InferOne("Pow", {TensorType{DType::kFloat32, std::nullopt}, T(DType::kInt64, {K(3)})});
  ASSERT_TRUE(unknown_rank.ok());
  EXPECT_EQ(unknown_rank->dtype, DType::kFloat32);
  EXPECT_FALSE(unknown_rank->has_rank());
}

TEST(ElementwiseInfer, Errors) {
  auto bad_bcast = InferOne("Mul", {T(DType::kFloat32, {K(3)}), T(DType::kFloat32, {K(4)})});
  EXPECT_EQ(bad_bcast.status().code(), StatusCode::kInvalidArgument);

  auto no_dir = InferOne("BitShift", {T(DType::kUInt8, {K(3)}), T(DType::kUInt8, {K(3)})});
  EXPECT_EQ(no_dir.status().code(), StatusCode::kInvalidArgument);
  auto bad_dir = InferOne("BitShift", {T(DType::kUInt8, {K(3)}), T(DType::kUInt8, {K(3)})},
                          {{"direction", ir::Attribute::String("UP")}});
  EXPECT_EQ(bad_dir.status().code(), StatusCode::kInvalidArgument);

  auto float_mod = InferOne("Mod", {T(DType::kFloat32, {K(3)}), T(DType::kFloat32, {K(3)})});
  EXPECT_EQ(float_mod.status().code(), StatusCode::kInvalidArgument);

  auto gelu = InferOne("Gelu", {T(DType::kFloat32, {K(3)})}, {{"approximate", ir::Attribute::String("erf")}}, 20);
  EXPECT_EQ(gelu.status().code(), StatusCode::kInvalidArgument);

  auto clip = InferOne("Clip", {T(DType::kFloat32, {K(3)}), T(DType::kFloat32, {K(2)})}, {}, 13);
  EXPECT_EQ(clip.status().code(), StatusCode::kInvalidArgument);

  auto mixed = InferOne("Add", {T(DType::kFloat32, {K(3)}), T(DType::kInt32, {K(3)})});
  EXPECT_EQ(mixed.status().code(), StatusCode::kInvalidArgument);

  auto where_cond =
      InferOne("Where", {T(DType::kFloat32, {K(3)}), T(DType::kFloat32, {K(3)}), T(DType::kFloat32, {K(3)})});
  EXPECT_EQ(where_cond.status().code(), StatusCode::kInvalidArgument);

  // Valid ONNX types the kernels do not implement are Unsupported, not errors.
  auto exp_int = InferOne("Exp", {T(DType::kInt32, {K(3)})});
  EXPECT_EQ(exp_int.status().code(), StatusCode::kUnsupported);
}

TEST(ElementwiseRun, ModSignFollowsDivisor) {
  Tensor a = Tensor::FromVector<int32_t>(DType::kInt32, {-7, 7, -7, 7, 5}, {5});
  Tensor b = Tensor::FromVector<int32_t>(DType::kInt32, {3, -3, -3, 3, 0}, {5});
  auto y = RunOne("Mod", {a, b});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Values<int32_t>(*y), (std::vector<int32_t>{2, -2, -1, 1, 0}));
  auto f = RunOne("Mod", {a, b}, {{"fmod", ir::Attribute::Int(1)}});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(Values<int32_t>(*f), (std::vector<int32_t>{-1, 1, -1, 1, 0}));
}

TEST(ElementwiseRun, PowMixedTypes) {
  Tensor base = Tensor::FromVector<float>(DType::kFloat32, {2.f, -3.f, 0.5f}, {3});
  Tensor e = Tensor::FromVector<int64_t>(DType::kInt64, {10, 3, 2}, {3});
  auto y = RunOne("Pow", {base, e});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->dtype(), DType::kFloat32);
  EXPECT_EQ(Values<float>(*y), (std::vector<float>{1024.f, -27.f, 0.25f}));

  Tensor ib = Tensor::FromVector<int64_t>(DType::kInt64, {3, -2, 2}, {3});
  Tensor ie = Tensor::FromVector<int64_t>(DType::kInt64, {39, 5, -1}, {3});
  auto iy = RunOne("Pow", {ib, ie});
  ASSERT_TRUE(iy.ok());
  EXPECT_EQ(Values<int64_t>(*iy), (std::vector<int64_t>{4052555153018976267LL, -32, 0}));
}

TEST(ElementwiseRun, RoundHalfToEven) {
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f}, {6});
  auto y = RunOne("Round", {x});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(Values<float>(*y), (std::vector<float>{0.f, 2.f, 2.f, -0.f, -2.f, 2.f}));
}

TEST(ElementwiseRun, ClipIntegerAndMinAboveMax) {
  Tensor x = Tensor::FromVector<int8_t>(DType::kInt8, {-128, -5, 0, 5, 127}, {5});
  Tensor lo = Tensor::FromVector<int8_t>(DType::kInt8, {-4}, {});
  Tensor hi = Tensor::FromVector<int8_t>(DType::kInt8, {4}, {});
  auto y = RunOne("Clip", {x, lo, hi}, {}, 13);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Values<int8_t>(*y), (std::vector<int8_t>{-4, -4, 0, 4, 4}));
  auto swapped = RunOne("Clip", {x, hi, lo}, {}, 13);  // min > max: everything becomes max
  ASSERT_TRUE(swapped.ok());
  EXPECT_EQ(Values<int8_t>(*swapped), (std::vector<int8_t>{-4, -4, -4, -4, -4}));

  Tensor f = Tensor::FromVector<float>(DType::kFloat32, {-2.f, 0.5f, 3.f}, {3});
  auto old = RunOne("Clip", {f}, {{"min", ir::Attribute::Float(0.f)}, {"max", ir::Attribute::Float(1.f)}}, 6);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(Values<float>(*old), (std::vector<float>{0.f, 0.5f, 1.f}));
}

TEST(ElementwiseRun, MaxPropagatesNaNAndMeanBroadcasts) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = Tensor::FromVector<float>(DType::kFloat32, {1.f, nan, 3.f}, {3});
  Tensor b = Tensor::FromVector<float>(DType::kFloat32, {2.f}, {1});
  auto y = RunOne("Max", {a, b});
  ASSERT_TRUE(y.ok());
  auto v = Values<float>(*y);
  EXPECT_EQ(v[0], 2.f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 3.f);

  Tensor c = Tensor::FromVector<float>(DType::kFloat32, {0.f, 3.f}, {2, 1});
  auto m = RunOne("Mean", {c, b, a});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->shape(), (Shape{2, 3}));
  auto mv = Values<float>(*m);
  EXPECT_FLOAT_EQ(mv[0], 1.f);
  EXPECT_FLOAT_EQ(mv[5], 8.f / 3.f);
}

TEST(ElementwiseRun, IntegerOverflowWraps) {
  Tensor a = Tensor::FromVector<int32_t>(DType::kInt32, {std::numeric_limits<int32_t>::max()}, {1});
  Tensor b = Tensor::FromVector<int32_t>(DType::kInt32, {1}, {1});
  auto y = RunOne("Add", {a, b});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(Values<int32_t>(*y)[0], std::numeric_limits<int32_t>::min());
  Tensor u = Tensor::FromVector<uint16_t>(DType::kUInt16, {65535}, {1});
  auto sq = RunOne("Mul", {u, u});
  ASSERT_TRUE(sq.ok());
  EXPECT_EQ(Values<uint16_t>(*sq)[0], 1);
}

// The block broadcast walk must agree with the per-element ForEachBroadcast.
TEST(ElementwiseRun, BlockBroadcastMatchesElementWalk) {
  const std::vector<std::array<Shape, 3>> cases = {
      {Shape{2, 3, 4, 5}, Shape{1, 3, 1, 1}, Shape{2, 3, 4, 5}},
      {Shape{2, 1, 3}, Shape{4, 1}, Shape{}},
      {Shape{1}, Shape{3, 1, 2}, Shape{2}},
      {Shape{0, 3}, Shape{3}, Shape{1, 1}},
      {Shape{5, 1, 1}, Shape{1, 6, 1}, Shape{1, 1, 7}},
  };
  for (const auto& ins : cases) {
    const Shape out = BroadcastShapes({ins[0], ins[1], ins[2]});
    const int64_t n = NumElements(out);
    std::vector<std::array<int64_t, 3>> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), {-1, -1, -1});
    ForEachBroadcast<3>(out, ins, [&](int64_t i, const std::array<int64_t, 3>& o) { want[i] = o; });
    ForEachBroadcastBlock<3>(
        out, ins, [&](int64_t o, const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& step, int64_t cnt) {
          for (int64_t j = 0; j < cnt; ++j)
            for (size_t k = 0; k < 3; ++k) got[o + j][k] = off[k] + j * step[k];
        });
    EXPECT_EQ(got, want) << ShapeToString(out);
  }
}

TEST(ElementwiseRun, WhereAndBitShift) {
  Tensor c = Tensor::FromVector<int>(DType::kBool, {1, 0}, {2, 1});
  Tensor x = Tensor::FromVector<int64_t>(DType::kInt64, {1, 2, 3}, {3});
  Tensor z = Tensor::FromVector<int64_t>(DType::kInt64, {-1}, {});
  auto y = RunOne("Where", {c, x, z});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Values<int64_t>(*y), (std::vector<int64_t>{1, 2, 3, -1, -1, -1}));

  Tensor v = Tensor::FromVector<uint8_t>(DType::kUInt8, {1, 255, 16}, {3});
  Tensor s = Tensor::FromVector<uint8_t>(DType::kUInt8, {7, 1, 9}, {3});
  auto l = RunOne("BitShift", {v, s}, {{"direction", ir::Attribute::String("LEFT")}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(Values<uint8_t>(*l), (std::vector<uint8_t>{128, 254, 0}));
}

}  // namespace
}  // namespace sampan::ops
