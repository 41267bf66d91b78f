// Control-flow nodes on the CPU backend: their subgraphs (If branches, Loop and Scan bodies,
// nested ones too) run as CPU programs (backends/cpu/subgraph_executor.h), compiled once per
// input signature, and give what the reference executor gives; subgraphs whose shapes keep
// changing go back to the reference kernels and still give the same answers.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_test_util.h"
#include "backends/cpu/subgraph_executor.h"

namespace sampan::cpu {
namespace {

using testing::CpuEngineFor;
using testing::Mismatch;
using testing::Parse;
using testing::RandomTensor;

std::vector<Tensor> Reference(const std::string& text, const std::map<std::string, Tensor>& inputs) {
  reference::Executor exec(std::shared_ptr<const ir::Graph>(Parse(text)));
  auto out = exec.Run(inputs);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : std::vector<Tensor>{};
}

// An RNN-like loop: h = Tanh(h W + x_t U) over the trip count, an If inside choosing a
// branch by the iteration's parity, scan outputs stacked.
const char* kLoop = R"(
  opset 17
  graph g (m: i64[], h0: f32[4,16], x: f32[4,8]) -> (h, hs) {
    w = const f32[16,16] random
    u = const f32[8,16] random
    two = const i64[] {2}
    zero = const i64[] {0}
    h, hs = Loop(m, _, h0) {body = graph b (i: i64[], c: bool[], hin: f32[4,16]) -> (c, hout, hout) {
      a = MatMul(hin, w)
      bx = MatMul(x, u)
      s = Add(a, bx)
      r = Mod(i, two)
      even = Equal(r, zero)
      hout = If(even) {then_branch = graph t () -> (p) { p = Tanh(s) },
                       else_branch = graph e () -> (q) { q = Sigmoid(s) }}
    }}
  })";

TEST(CpuSubgraph, LoopBodyAndNestedIfRunOnCpuKernels) {
  auto engine = CpuEngineFor(kLoop);
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  std::mt19937_64 rng(3);
  std::map<std::string, Tensor> in{{"m", Tensor::FromVector<int64_t>(DType::kInt64, {5}, {})},
                                   {"h0", RandomTensor(DType::kFloat32, {4, 16}, rng, -0.5, 0.5)},
                                   {"x", RandomTensor(DType::kFloat32, {4, 8}, rng, -0.5, 0.5)}};
  const uint64_t before = CpuSubgraphExecutor::runs_on_cpu_kernels();
  auto got = (*ctx)->Run(in);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // Five bodies and five branches, every one a CPU program.
  EXPECT_EQ(CpuSubgraphExecutor::runs_on_cpu_kernels() - before, 10u)
      << "declined " << CpuSubgraphExecutor::runs_declined();
  auto want = Reference(kLoop, in);
  ASSERT_EQ(got->size(), 2u);
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ((*got)[1].shape(), (Shape{5, 4, 16}));
  for (size_t i = 0; i < 2; ++i) EXPECT_LE(Mismatch((*got)[i], want[i]), 1.0) << "output " << i;
  // Again with another trip count: the programs are reused (same signatures).
  in["m"] = Tensor::FromVector<int64_t>(DType::kInt64, {3}, {});
  auto again = (*ctx)->Run(in);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  want = Reference(kLoop, in);
  for (size_t i = 0; i < 2; ++i) EXPECT_LE(Mismatch((*again)[i], want[i]), 1.0) << "output " << i;
}

TEST(CpuSubgraph, GrowingShapesGoBackToTheReferenceKernels) {
  // The carried value grows by a row each iteration: a new signature every time.
  const char* text = R"(
    opset 17
    graph g (m: i64[], x: f32[1,3]) -> (y) {
      y = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], acc: f32[?,3]) -> (c, out) {
        last = Neg(acc)
        out = Concat(acc, last) {axis = 0}
      }}
    })";
  auto engine = CpuEngineFor(text);
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  std::map<std::string, Tensor> in{{"m", Tensor::FromVector<int64_t>(DType::kInt64, {12}, {})},
                                   {"x", Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3}, {1, 3})}};
  const uint64_t taken = CpuSubgraphExecutor::runs_on_cpu_kernels();
  const uint64_t declined = CpuSubgraphExecutor::runs_declined();
  auto got = (*ctx)->Run(in);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)[0].shape(), (Shape{4096, 3}));
  EXPECT_EQ(Mismatch((*got)[0], Reference(text, in)[0]), 0.0);
  EXPECT_EQ(CpuSubgraphExecutor::runs_on_cpu_kernels() - taken, CpuSubgraphExecutor::kMaxSignatures);
  EXPECT_EQ(CpuSubgraphExecutor::runs_declined() - declined, 12 - CpuSubgraphExecutor::kMaxSignatures);
}

// A lookup inside a body whose index goes out of range: the error names the Loop.
TEST(CpuSubgraph, AnErrorInsideABodyNamesTheNode) {
  const char* valid = R"(
    opset 17
    graph g (m: i64[], x: f32[2], i0: i64[1]) -> (y) {
      t = const f32[3,2] random
      shp = const i64[1] {2}
      y = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], acc: f32[2]) -> (c, out) {
        row = Gather(t, i0) {axis = 0}
        r = Reshape(row, shp)
        out = Add(acc, r)
      }} @loop
    })";
  auto engine = CpuEngineFor(valid);
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  std::map<std::string, Tensor> in{{"m", Tensor::FromVector<int64_t>(DType::kInt64, {2}, {})},
                                   {"x", Tensor::FromVector<float>(DType::kFloat32, {1, 2}, {2})},
                                   {"i0", Tensor::FromVector<int64_t>(DType::kInt64, {1}, {1})}};
  auto ok = (*ctx)->Run(in);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_LE(Mismatch((*ok)[0], Reference(valid, in)[0]), 1.0);
  in["i0"] = Tensor::FromVector<int64_t>(DType::kInt64, {7}, {1});
  auto bad = (*ctx)->Run(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("Loop 'loop' body"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace sampan::cpu
