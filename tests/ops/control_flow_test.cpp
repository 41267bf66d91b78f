// If, Loop and Scan: inference from the subgraphs (and its errors), and runs through the
// reference executor with enclosing values visible to the subgraphs.
#include <gtest/gtest.h>

#include <memory>

#include "backends/reference/executor.h"
#include "ir/text.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

std::shared_ptr<ir::Graph> Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return nullptr;
  std::shared_ptr<ir::Graph> graph = std::move(g).value();
  EXPECT_TRUE(ir::Verify(*graph).ok()) << ir::Verify(*graph).ToString();
  return graph;
}

// The error InferTypes gives, "" when it succeeds.
std::string InferError(const std::string& text) {
  auto g = Parse(text);
  if (!g) return "parse failed";
  Status st = InferTypes(*g);
  return st.ok() ? "" : st.ToString();
}

Result<std::vector<Tensor>> RunGraph(const std::shared_ptr<ir::Graph>& g, const std::map<std::string, Tensor>& inputs) {
  SP_RETURN_IF_ERROR(InferTypes(*g));
  reference::Executor exec(g);
  return exec.Run(inputs);
}

Tensor F32(std::vector<float> v, Shape shape) {
  return Tensor::FromVector<float>(DType::kFloat32, v, shape);
}
Tensor I64(int64_t v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, {v}, {});
}
Tensor Bool(bool v) {
  return Tensor::FromVector<bool>(DType::kBool, {v}, {});
}
std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

const char* kIf = R"(
opset 17
graph g (c: bool[], x: f32[2]) -> (y) {
  k = const f32[2] {1, 2}
  y = If(c) {then_branch = graph t () -> (a) { a = Add(x, k) },
             else_branch = graph e () -> (n) { n = Neg(x) }}
}
)";

TEST(ControlFlow, IfRunsTheBranchTheConditionPicks) {
  auto g = Parse(kIf);
  ASSERT_TRUE(g);
  auto yes = RunGraph(g, {{"c", Bool(true)}, {"x", F32({3, 4}, {2})}});
  ASSERT_TRUE(yes.ok()) << yes.status().ToString();
  EXPECT_EQ(Values((*yes)[0]), (std::vector<float>{4, 6}));
  auto no = RunGraph(g, {{"c", Bool(false)}, {"x", F32({3, 4}, {2})}});
  ASSERT_TRUE(no.ok()) << no.status().ToString();
  EXPECT_EQ(Values((*no)[0]), (std::vector<float>{-3, -4}));
  EXPECT_EQ(g->FindValue("y")->type.ToString(), "f32[2]");
}

TEST(ControlFlow, IfBranchesOfDifferentTypesAreAnErrorNamingTheNode) {
  const std::string err = InferError(R"(
opset 17
graph g (c: bool[], x: f32[2]) -> (y) {
  y = If(c) {then_branch = graph t () -> (a) { a = Neg(x) },
             else_branch = graph e () -> (b) { b = Cast(x) {to = 7} }} @pick
}
)");
  EXPECT_NE(err.find("If 'pick'"), std::string::npos) << err;
  EXPECT_NE(err.find("f32 from then_branch but i64 from else_branch"), std::string::npos) << err;
}

TEST(ControlFlow, IfBranchShapesThatDisagreeGiveUnknownDims) {
  auto g = Parse(R"(
opset 17
graph g (c: bool[], x: f32[2,3]) -> (y) {
  y = If(c) {then_branch = graph t () -> (a) { a = Neg(x) },
             else_branch = graph e () -> (b) { b = Transpose(x) }}
}
)");
  ASSERT_TRUE(g);
  ASSERT_TRUE(InferTypes(*g).ok());
  EXPECT_EQ(g->FindValue("y")->type.ToString(), "f32[?,?]");
  auto r = RunGraph(g, {{"c", Bool(false)}, {"x", F32({1, 2, 3, 4, 5, 6}, {2, 3})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{3, 2}));
}

const char* kLoop = R"(
opset 17
graph g (m: i64[], x: f32[2]) -> (y, s, its) {
  w = const f32[2] {0.5, -1}
  y, s, its = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], acc: f32[2]) -> (c, acc2, t, i) {
    acc2 = Add(acc, w)
    t = ReduceSum(acc2) {keepdims = 0}
  }}
}
)";

TEST(ControlFlow, LoopCarriesValuesAndStacksScanOutputs) {
  auto g = Parse(kLoop);
  ASSERT_TRUE(g);
  auto r = RunGraph(g, {{"m", I64(3)}, {"x", F32({1, 2}, {2})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values((*r)[0]), (std::vector<float>{2.5f, -1}));
  EXPECT_EQ(Values((*r)[1]), (std::vector<float>{2.5f, 2, 1.5f}));
  ASSERT_EQ((*r)[2].shape(), (Shape{3}));
  EXPECT_EQ((*r)[2].data<int64_t>()[2], 2);  // iteration_num handed on as a scan output
  EXPECT_EQ(g->FindValue("y")->type.ToString(), "f32[2]");
  EXPECT_EQ(g->FindValue("s")->type.ToString(), "f32[?]");
}

TEST(ControlFlow, LoopWithZeroTripsKeepsInitialValues) {
  auto g = Parse(kLoop);
  ASSERT_TRUE(g);
  auto r = RunGraph(g, {{"m", I64(0)}, {"x", F32({1, 2}, {2})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values((*r)[0]), (std::vector<float>{1, 2}));
  EXPECT_EQ((*r)[1].shape(), (Shape{0}));
}

TEST(ControlFlow, LoopStopsWhenTheBodySaysSo) {
  // while (sum < 10) x = x * 2; trip count dynamic, no M.
  auto g = Parse(R"(
opset 17
graph g (x: f32[2]) -> (y, trace) {
  ten = const f32[] {10}
  go = const bool[] {1}
  y, trace = Loop(_, go, x) {body = graph b (i: i64[], c: bool[], v: f32[2]) -> (more, v2, total) {
    v2 = Add(v, v)
    total = ReduceSum(v2) {keepdims = 0}
    more = Less(total, ten)
  }}
}
)");
  ASSERT_TRUE(g);
  auto r = RunGraph(g, {{"x", F32({0.5f, 0.25f}, {2})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values((*r)[0]), (std::vector<float>{8, 4}));
  EXPECT_EQ(Values((*r)[1]), (std::vector<float>{1.5f, 3, 6, 12}));
}

TEST(ControlFlow, LoopWhoseShapeGrowsHasUnknownDims) {
  auto g = Parse(R"(
opset 17
graph g (m: i64[], x: f32[1]) -> (y) {
  y = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], v: f32[?]) -> (c, v2) {
    v2 = Concat(v, x) {axis = 0}
  }}
}
)");
  ASSERT_TRUE(g);
  ASSERT_TRUE(InferTypes(*g).ok());
  EXPECT_EQ(g->FindValue("y")->type.ToString(), "f32[?]");
  auto r = RunGraph(g, {{"m", I64(4)}, {"x", F32({7}, {1})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values((*r)[0]), (std::vector<float>{7, 7, 7, 7, 7}));
}

TEST(ControlFlow, LoopBodyWithTheWrongArityIsAnError) {
  const std::string err = InferError(R"(
opset 17
graph g (m: i64[], x: f32[2]) -> (y) {
  y = Loop(m, _, x) {body = graph b (i: i64[], v: f32[2]) -> (c, v) { c = Cast(i) {to = 9} }} @lp
}
)");
  EXPECT_NE(err.find("Loop 'lp': body takes 2 inputs, expected 2 + 1"), std::string::npos) << err;
}

TEST(ControlFlow, LoopCarriedTypeChangeIsAnError) {
  const std::string err = InferError(R"(
opset 17
graph g (m: i64[], x: f32[2]) -> (y) {
  y = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], v: f32[2]) -> (c, v2) { v2 = Cast(v) {to = 7} }} @lp
}
)");
  EXPECT_NE(err.find("Loop 'lp': loop-carried value 0 enters the body as f32 but the body yields i64"),
            std::string::npos)
      << err;
}

const char* kScan = R"(
opset 16
graph g (s0: f32[3], x: f32[3,4]) -> (s, y) {
  k = const f32[] {0.5}
  s, y = Scan(s0, x) {body = graph b (st: f32[3], xs: f32[3]) -> (st2, out) {
    st2 = Add(st, xs)
    out = Mul(st2, k)
  }, num_scan_inputs = 1, scan_input_axes = [-1], scan_input_directions = [1], scan_output_axes = [1],
     scan_output_directions = [1]}
}
)";

TEST(ControlFlow, ScanWithAxesAndDirections) {
  auto g = Parse(kScan);
  ASSERT_TRUE(g);
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i);
  auto r = RunGraph(g, {{"s0", F32({0, 0, 0}, {3})}, {"x", F32(x, {3, 4})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Columns from the last; outputs written from the last column back (same values as onnxruntime).
  EXPECT_EQ(Values((*r)[0]), (std::vector<float>{6, 22, 38}));
  EXPECT_EQ(Values((*r)[1]), (std::vector<float>{3, 3, 2.5f, 1.5f, 11, 9, 6.5f, 3.5f, 19, 15, 10.5f, 5.5f}));
  EXPECT_EQ(g->FindValue("y")->type.ToString(), "f32[3,4]");
}

TEST(ControlFlow, ScanAxesThatDoNotFitAreAnError) {
  const std::string err = InferError(R"(
opset 16
graph g (s0: f32[3], x: f32[3,4], z: f32[5,3]) -> (s) {
  s = Scan(s0, x, z) {body = graph b (st: f32[3], xs: f32[3], zs: f32[3]) -> (st2) { st2 = Add(st, xs) },
                      num_scan_inputs = 2, scan_input_axes = [1, 0]} @sc
}
)");
  EXPECT_NE(err.find("Scan 'sc': scan input 1 has 5 slices along axis 0 but an earlier scan input has 4"),
            std::string::npos)
      << err;
  const std::string err2 = InferError(R"(
opset 16
graph g (s0: f32[3], x: f32[3,4]) -> (s) {
  s = Scan(s0, x) {body = graph b (st: f32[3], xs: f32[3]) -> (st2) { st2 = Add(st, xs) },
                   num_scan_inputs = 1, scan_input_axes = [2]} @sc
}
)");
  EXPECT_NE(err2.find("Scan 'sc': scan_input_axes 0 is 2 but the tensor has rank 2"), std::string::npos) << err2;
  const std::string err3 = InferError(R"(
opset 16
graph g (s0: f32[3], x: f32[3,4]) -> (s) {
  s = Scan(s0, x) {body = graph b (st: f32[3], xs: f32[3]) -> (st2) { st2 = Add(st, xs) },
                   num_scan_inputs = 1, scan_input_axes = [0, 1]} @sc
}
)");
  EXPECT_NE(err3.find("attribute 'scan_input_axes' has 2 entries, expected 1"), std::string::npos) << err3;
}

TEST(ControlFlow, ScanWithNoSlicesAndAnOmittedScanOutput) {
  // The node keeps only the state; the scan input has no slices: the state passes through.
  auto g = Parse(R"(
opset 16
graph g (s0: f32[3], x: f32[3,0]) -> (s) {
  s = Scan(s0, x) {body = graph b (st: f32[3], xs: f32[3]) -> (st2, out) {
    st2 = Add(st, xs)
    out = Neg(st2)
  }, num_scan_inputs = 1, scan_input_axes = [1]}
}
)");
  ASSERT_TRUE(g);
  auto r = RunGraph(g, {{"s0", F32({1, 2, 3}, {3})}, {"x", F32({}, {3, 0})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values((*r)[0]), (std::vector<float>{1, 2, 3}));
}

TEST(ControlFlow, Scan8BatchesAndHonoursSequenceLengths) {
  auto g = Parse(R"(
opset 8
graph g (lens: i32[2], s0: f32[2,1], x: f32[2,3,1]) -> (s, y) {
  s, y = Scan(lens, s0, x) {body = graph b (st: f32[1], xs: f32[1]) -> (st2, out) {
    st2 = Add(st, xs)
    out = Identity(st2)
  }, num_scan_inputs = 1}
}
)");
  ASSERT_TRUE(g);
  auto lens = Tensor::FromVector<int32_t>(DType::kInt32, {3, 2}, {2});
  auto r = RunGraph(g, {{"lens", lens}, {"s0", F32({0, 10}, {2, 1})}, {"x", F32({1, 2, 3, 4, 5, 6}, {2, 3, 1})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values((*r)[0]), (std::vector<float>{6, 19}));
  EXPECT_EQ(Values((*r)[1]), (std::vector<float>{1, 3, 6, 14, 19, 0}));
}

TEST(ControlFlow, UnregisteredOpInsideASubgraphIsUnsupported) {
  auto g = Parse(R"(
opset 17
graph g (c: bool[], x: f32[2]) -> (y) {
  y = If(c) {then_branch = graph t () -> (a) { a = NoSuchOp(x) }, else_branch = graph e () -> (b) { b = Neg(x) }}
}
)");
  ASSERT_TRUE(g);
  Status st = InferTypes(*g);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.ToString();
  EXPECT_NE(st.message().find("NoSuchOp"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace sampan::ops
