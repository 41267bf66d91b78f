// Shape/data-movement ops: value propagation through shape arithmetic,
// symbolic dims, error handling and a few numeric checks.
#include <gtest/gtest.h>

#include "ir/graph.h"
#include "ops/op.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

using ir::Attribute;
using ir::Dim;
using ir::TensorType;

Tensor I64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector(DType::kInt64, v, Shape{n});
}

Tensor F32(std::vector<float> v, Shape shape) {
  return Tensor::FromVector(DType::kFloat32, v, std::move(shape));
}

class ShapeOpsGraph : public ::testing::Test {
 protected:
  ir::Graph g;
  void SetUp() override { g.opsets[""] = 17; }
  ir::Value* Input(const std::string& name, TensorType t) {
    ir::Value* v = *g.AddValue(name, std::move(t));
    g.inputs().push_back(v);
    return v;
  }
  ir::Value* Const(const std::string& name, Tensor t) { return *g.AddConstant(name, std::move(t)); }
  ir::Node* Node(const std::string& op, std::vector<ir::Value*> in, size_t n_out = 1) {
    std::vector<ir::Value*> outs;
    for (size_t i = 0; i < n_out; ++i) outs.push_back(*g.AddValue(""));
    return *g.AddNode(op, in, outs);
  }
  static TensorType Sym(std::vector<Dim> d) { return TensorType{DType::kFloat32, std::move(d)}; }
};

TEST_F(ShapeOpsGraph, StaticShapeGatherConcatReshapeIsFullyStatic) {
  if (FindOp("", "Gather") == nullptr) GTEST_SKIP() << "Gather is not registered in this build";
  ir::Value* x = Input("x", TensorType::Static(DType::kFloat32, {2, 3, 4}));
  ir::Node* shape = Node("Shape", {x});
  ir::Node* gather = Node("Gather", {shape->output(0), Const("idx", I64({0}))});
  gather->attrs["axis"] = Attribute::Int(0);
  ir::Node* concat = Node("Concat", {gather->output(0), Const("minus1", I64({-1}))});
  concat->attrs["axis"] = Attribute::Int(0);
  ir::Node* reshape = Node("Reshape", {x, concat->output(0)});
  g.outputs().push_back(reshape->output(0));
  Status st = InferTypes(g);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(shape->output(0)->type.ToString(), "i64[3]");
  EXPECT_EQ(concat->output(0)->type.ToString(), "i64[2]");
  const TensorType& t = reshape->output(0)->type;
  ASSERT_TRUE(t.is_static()) << t.ToString();
  EXPECT_EQ(t.static_shape(), (Shape{2, 12}));
}

TEST_F(ShapeOpsGraph, SymbolicBatchDimPropagates) {
  ir::Value* x = Input("x", Sym({Dim::Symbol("N"), Dim::Known(3), Dim::Known(4)}));
  // Shape(x)[1:] is known even though the batch is symbolic.
  ir::Node* tail = Node("Shape", {x});
  tail->attrs["start"] = Attribute::Int(1);
  ir::Node* target = Node("Concat", {Const("m1", I64({-1})), tail->output(0)});
  target->attrs["axis"] = Attribute::Int(0);
  ir::Node* back = Node("Reshape", {x, target->output(0)});               // [N,3,4]
  ir::Node* flat = Node("Reshape", {x, Const("zero_m1", I64({0, -1}))});  // [N,12]
  ir::Node* flatten = Node("Flatten", {x});                               // [N,12]
  ir::Node* tr = Node("Transpose", {x});                                  // [4,3,N]
  ir::Node* unsq = Node("Unsqueeze", {x, Const("ax", I64({1}))});         // [N,1,3,4]
  ir::Node* sl =
      Node("Slice", {x, Const("s", I64({0, 1})), Const("e", I64({INT64_MAX, 3})), Const("a", I64({0, 2}))});  // [N,3,2]
  ir::Node* full = Node("Shape", {x});                                 // i64[3], no value
  ir::Node* dyn = Node("Reshape", {x, full->output(0)});               // rank 3, dims unknown
  ir::Node* ex = Node("Expand", {x, Const("es", I64({2, 1, 1, 1}))});  // [2,N,3,4]
  for (ir::Node* n : {back, flat, flatten, tr, unsq, sl, dyn, ex}) g.outputs().push_back(n->output(0));
  Status st = InferTypes(g);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(tail->output(0)->type.ToString(), "i64[2]");
  EXPECT_EQ(back->output(0)->type.ToString(), "f32[N,3,4]");
  EXPECT_EQ(flat->output(0)->type.ToString(), "f32[N,12]");
  EXPECT_EQ(flatten->output(0)->type.ToString(), "f32[N,12]");
  EXPECT_EQ(tr->output(0)->type.ToString(), "f32[4,3,N]");
  EXPECT_EQ(unsq->output(0)->type.ToString(), "f32[N,1,3,4]");
  EXPECT_EQ(sl->output(0)->type.ToString(), "f32[N,3,2]");
  EXPECT_EQ(full->output(0)->type.ToString(), "i64[3]");
  ASSERT_TRUE(dyn->output(0)->type.has_rank());
  EXPECT_EQ(dyn->output(0)->type.dims->size(), 3u);
  EXPECT_EQ(ex->output(0)->type.ToString(), "f32[2,N,3,4]");
}

TEST_F(ShapeOpsGraph, ConcatWithoutAxisIsInvalidArgument) {
  ir::Value* x = Input("x", TensorType::Static(DType::kFloat32, {2, 3}));
  ir::Node* n = Node("Concat", {x, x});
  g.outputs().push_back(n->output(0));
  Status st = InferTypes(g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("axis"), std::string::npos) << st.message();
}

TEST_F(ShapeOpsGraph, BadArgumentsAreInvalidArgument) {
  ir::Value* x = Input("x", TensorType::Static(DType::kFloat32, {2, 3}));
  ir::Node* tr = Node("Transpose", {x});
  tr->attrs["perm"] = Attribute::Ints({0, 0});
  g.outputs().push_back(tr->output(0));
  EXPECT_EQ(InferTypes(g).code(), StatusCode::kInvalidArgument);
  tr->attrs["perm"] = Attribute::Ints({0, 5});
  EXPECT_EQ(InferTypes(g).code(), StatusCode::kInvalidArgument);
  tr->attrs["perm"] = Attribute::Ints({1, 0});
  ASSERT_TRUE(InferTypes(g).ok());

  ir::Node* rs = Node("Reshape", {x, Const("bad", I64({-1, -1}))});
  g.outputs().push_back(rs->output(0));
  EXPECT_EQ(InferTypes(g).code(), StatusCode::kInvalidArgument);
}

TEST_F(ShapeOpsGraph, MoreBadArguments) {
  ir::Value* x = Input("x", TensorType::Static(DType::kFloat32, {2, 3}));
  struct Case {
    const char* op;
    std::vector<ir::Value*> in;
    std::map<std::string, Attribute> attrs;
    size_t n_out = 1;
  };
  std::vector<Case> cases = {
      {"Reshape", {x, Const("r7", I64({7}))}, {}},
      {"Squeeze", {x, Const("sq", I64({0}))}, {}},                                 // dim 0 is 2, not 1
      {"Unsqueeze", {x, Const("uq", I64({1, 1}))}, {}},                            // repeated axis
      {"Split", {x, Const("sp", I64({1, 1}))}, {{"axis", Attribute::Int(1)}}, 2},  // 1+1 != 3
      {"Slice", {x, Const("ss", I64({0})), Const("se", I64({1})), Const("sa", I64({0})), Const("st", I64({0}))}, {}},
      {"Flatten", {x}, {{"axis", Attribute::Int(3)}}},
      {"Expand", {x, Const("ex", I64({4, 4}))}, {}},
      {"Cast", {x}, {}},  // missing 'to'
  };
  for (auto& c : cases) {
    ir::Graph g2;
    g2.opsets[""] = 18;
    ir::Value* x2 = *g2.AddValue("x", TensorType::Static(DType::kFloat32, {2, 3}));
    g2.inputs().push_back(x2);
    std::vector<ir::Value*> in{x2};
    for (size_t i = 1; i < c.in.size(); ++i) in.push_back(*g2.AddConstant(c.in[i]->name(), c.in[i]->data));
    std::vector<ir::Value*> outs;
    for (size_t i = 0; i < c.n_out; ++i) outs.push_back(*g2.AddValue(""));
    ir::Node* n = *g2.AddNode(c.op, in, outs);
    n->attrs = c.attrs;
    for (auto* o : outs) g2.outputs().push_back(o);
    Status st = InferTypes(g2);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.op << ": " << st.ToString();
  }
}

TEST_F(ShapeOpsGraph, UnsupportedCastsAreUnsupported) {
  ir::Value* x = Input("x", TensorType::Static(DType::kFloat32, {2}));
  ir::Node* n = Node("Cast", {x});
  n->attrs["to"] = Attribute::Int(static_cast<int64_t>(DType::kComplex128));
  g.outputs().push_back(n->output(0));
  EXPECT_EQ(InferTypes(g).code(), StatusCode::kUnsupported);
  n->attrs["to"] = Attribute::Int(static_cast<int64_t>(DType::kComplex64));
  EXPECT_EQ(InferTypes(g).code(), StatusCode::kUnsupported);
  n->attrs["to"] = Attribute::Int(static_cast<int64_t>(DType::kFloat8E4M3FN));  // Cast-19 and later
  EXPECT_EQ(InferTypes(g).code(), StatusCode::kInvalidArgument);
  n->attrs["to"] = Attribute::Int(static_cast<int64_t>(DType::kFloat16));
  EXPECT_TRUE(InferTypes(g).ok());
}

// Numeric checks via RunNode.
class ShapeOpsRun : public ShapeOpsGraph {
 protected:
  std::vector<Tensor> Run(ir::Node* n, std::vector<const Tensor*> in, int64_t opset = 18) {
    std::vector<Tensor> outs;
    Status st = RunNode(*n, opset, in, &outs);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return outs;
  }
  static std::vector<float> Floats(const Tensor& t) {
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  }
};

TEST_F(ShapeOpsRun, TransposeSliceExpandSplit) {
  Tensor x = F32({0, 1, 2, 3, 4, 5}, {2, 3});
  ir::Value* xv = Input("x", TensorType::Static(DType::kFloat32, {2, 3}));

  auto tr = Run(Node("Transpose", {xv}), {&x});
  EXPECT_EQ(tr[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(Floats(tr[0]), (std::vector<float>{0, 3, 1, 4, 2, 5}));

  // x[::-1, -1:0:-2] -> rows 1,0 and column 2 only
  Tensor s = I64({-1, -1}), e = I64({INT64_MIN, 0}), st = I64({-1, -2});
  ir::Node* sl = Node("Slice", {xv, Const("s", s), Const("e", e), nullptr, Const("st", st)});
  auto sr = Run(sl, {&x, &s, &e, nullptr, &st});
  EXPECT_EQ(sr[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(Floats(sr[0]), (std::vector<float>{5, 2}));

  Tensor shp = I64({2, 2, 3});
  auto er = Run(Node("Expand", {xv, Const("shp", shp)}), {&x, &shp});
  EXPECT_EQ(er[0].shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(Floats(er[0]), (std::vector<float>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));

  // Opset 18 uneven split: 3 columns into 2 outputs -> 2 + 1.
  ir::Node* sp = Node("Split", {xv}, 2);
  sp->attrs["axis"] = Attribute::Int(1);
  sp->attrs["num_outputs"] = Attribute::Int(2);
  auto spr = Run(sp, {&x});
  EXPECT_EQ(spr[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(spr[1].shape(), (Shape{2, 1}));
  EXPECT_EQ(Floats(spr[0]), (std::vector<float>{0, 1, 3, 4}));
  EXPECT_EQ(Floats(spr[1]), (std::vector<float>{2, 5}));

  ir::Node* cc = Node("Concat", {xv, xv});
  cc->attrs["axis"] = Attribute::Int(-1);
  auto cr = Run(cc, {&x, &x});
  EXPECT_EQ(cr[0].shape(), (Shape{2, 6}));
  EXPECT_EQ(Floats(cr[0]), (std::vector<float>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
}

TEST_F(ShapeOpsRun, RangeAndConstantOfShape) {
  Tensor a = Tensor::FromVector(DType::kInt32, std::vector<int32_t>{10}, Shape{});
  Tensor b = Tensor::FromVector(DType::kInt32, std::vector<int32_t>{1}, Shape{});
  Tensor c = Tensor::FromVector(DType::kInt32, std::vector<int32_t>{-3}, Shape{});
  ir::Value* av = Input("a", TensorType::Static(DType::kInt32, {}));
  auto r = Run(Node("Range", {av, av, av}), {&a, &b, &c});
  ASSERT_EQ(r[0].shape(), (Shape{3}));
  EXPECT_EQ(r[0].data<int32_t>()[0], 10);
  EXPECT_EQ(r[0].data<int32_t>()[2], 4);

  Tensor shp = I64({2, 0});
  ir::Node* cs = Node("ConstantOfShape", {Const("shp", shp)});
  cs->attrs["value"] = Attribute::OfTensor(Tensor::FromVector(DType::kInt64, std::vector<int64_t>{7}, Shape{1}));
  auto cr = Run(cs, {&shp});
  EXPECT_EQ(cr[0].dtype(), DType::kInt64);
  EXPECT_EQ(cr[0].shape(), (Shape{2, 0}));
}

}  // namespace
}  // namespace sampan::ops
