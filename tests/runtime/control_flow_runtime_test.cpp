// Control-flow nodes in the planning walk, the lifetimes, the reference context (static and
// data-dependent shapes) and the CPU backend (which runs them with the reference executor).
#include <gtest/gtest.h>

#include "backends/cpu/cpu_test_util.h"
#include "backends/reference/executor.h"
#include "runtime/plan_walk.h"
#include "runtime/reference_context.h"

namespace sampan::runtime {
namespace {

using cpu::testing::Parse;

Tensor F32(std::vector<float> v, Shape shape) {
  return Tensor::FromVector<float>(DType::kFloat32, v, shape);
}
Tensor Bool(bool v) {
  return Tensor::FromVector<bool>(DType::kBool, {v}, {});
}
Tensor I64(int64_t v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, {v}, {});
}

// `a` is read only inside the branches; `b` by the last node.
const char* kCapture = R"(
opset 17
graph g (c: bool[], x: f32[4]) -> (y, z) {
  a = Relu(x) @relu
  b = Neg(x) @neg
  y = If(c) {then_branch = graph t () -> (p) { p = Add(a, a) }, else_branch = graph e () -> (q) { q = Sigmoid(a) }} @pick
  z = Abs(b) @abs
}
)";

TEST(ControlFlowRuntime, LifetimesCountReadsFromSubgraphs) {
  auto g = Parse(kCapture);
  std::vector<StepMemory> steps;
  for (const auto& n : g->nodes()) steps.push_back(StepMemory{n.get(), {}});
  ASSERT_EQ(g->nodes()[2]->op_type, "If");
  const Lifetimes l = ComputeLifetimes(*g, steps);
  int found = 0;
  for (const ValueLifetime& v : l.owners) {
    if (v.value->name() != "a") continue;
    ++found;
    EXPECT_EQ(v.last, 2) << "a must live until the If that reads it in its branches";
  }
  EXPECT_EQ(found, 1);
}

TEST(ControlFlowRuntime, ReferenceContextMatchesTheExecutor) {
  std::shared_ptr<const ir::Graph> g = Parse(kCapture);
  ReferenceContext ctx(g);
  reference::Executor exec(g);
  for (bool c : {true, false, true}) {
    std::map<std::string, Tensor> in = {{"c", Bool(c)}, {"x", F32({1, -2, 3, -4}, {4})}};
    auto ours = ctx.Run(in, nullptr);
    auto want = exec.Run(in);
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    ASSERT_TRUE(want.ok());
    for (size_t i = 0; i < want->size(); ++i)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ((*ours)[i].data<float>()[k], (*want)[i].data<float>()[k]);
  }
  // Static shapes: the If is a planned step, `a` kept for it.
  ASSERT_NE(ctx.last_walk(), nullptr);
  EXPECT_FALSE(ctx.last_walk()->dynamic);
}

const char* kLoop = R"(
opset 17
graph g (m: i64[], x: f32[2]) -> (y, s) {
  w = Relu(x)
  y, s = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], acc: f32[2]) -> (c, acc2, acc2) {
    acc2 = Add(acc, w)
  }}
}
)";

TEST(ControlFlowRuntime, LoopWithADataDependentTripCountRunsInEveryBackend) {
  std::shared_ptr<const ir::Graph> g = Parse(kLoop);
  ReferenceContext ctx(g);
  auto engine = cpu::testing::CpuEngineFor(kLoop);
  ASSERT_NE(engine, nullptr);
  auto cpu_ctx = engine->CreateContext();
  ASSERT_TRUE(cpu_ctx.ok()) << cpu_ctx.status().ToString();
  for (int64_t m : {3, 0, 5}) {
    std::map<std::string, Tensor> in = {{"m", I64(m)}, {"x", F32({1, -1}, {2})}};
    for (int pass = 0; pass < 2; ++pass) {  // the second run reuses the plan of the first
      auto ref = ctx.Run(in, nullptr);
      ASSERT_TRUE(ref.ok()) << ref.status().ToString();
      auto cpu = (*cpu_ctx)->Run(in);
      ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
      ASSERT_EQ((*ref)[1].shape(), (Shape{m, 2}));
      EXPECT_EQ((*ref)[0].data<float>()[0], 1.f + static_cast<float>(m));
      EXPECT_EQ((*ref)[0].data<float>()[1], -1.f);
      for (size_t i = 0; i < 2; ++i) {
        ASSERT_EQ((*cpu)[i].shape(), (*ref)[i].shape());
        for (int64_t k = 0; k < (*ref)[i].numel(); ++k)
          EXPECT_EQ((*cpu)[i].data<float>()[k], (*ref)[i].data<float>()[k]);
      }
    }
  }
  // The walk stops at the Loop: its scan output's length is known only by running it.
  ASSERT_NE(ctx.last_walk(), nullptr);
  EXPECT_TRUE(ctx.last_walk()->dynamic);
}

TEST(ControlFlowRuntime, CpuBackendHandsControlFlowToTheReferenceExecutor) {
  auto engine = cpu::testing::CpuEngineFor(kCapture);
  ASSERT_NE(engine, nullptr);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  auto out = (*ctx)->Run({{"c", Bool(false)}, {"x", F32({1, -2, 3, -4}, {4})}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_FLOAT_EQ((*out)[0].data<float>()[0], 1.f / (1.f + std::exp(-1.f)));
  EXPECT_FLOAT_EQ((*out)[0].data<float>()[1], 0.5f);
  EXPECT_EQ((*out)[1].data<float>()[1], 2.f);
}

}  // namespace
}  // namespace sampan::runtime
