// The cpu backend's memory figures (runtime/memory_usage.h): the engine's reordered and packed
// weights are its weight cache's bytes; a context holds one arena per input-shape signature, of
// the size its program planned, and the folded values of each program.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_test_util.h"

namespace sampan::cpu::testing {
namespace {

using runtime::MemoryKind;
using runtime::MemoryPlace;

const char* kNet = R"(opset 17
  graph g (x: f32[N,3,H,W]) -> (y) {
    w = const f32[16,3,3,3] random
    c = Conv(x, w) {pads=[1,1,1,1]} @conv
    r = Relu(c) @relu
    s = Shape(r) @shape
    k = const i64[1] {0}
    n = Gather(s, k) {axis=0} @batch
    m = const i64[1] {-1}
    t = Concat(n, m) {axis=0} @target
    f = Reshape(r, t) @flat
    y = Sigmoid(f) @sig
  })";

TEST(CpuMemory, FiguresAreTheArenasThePlannedPrograms) {
  auto engine = CpuEngineFor(kNet);
  ASSERT_NE(engine, nullptr);
  auto& cpu = dynamic_cast<CpuEngine&>(engine->backend_engine());
  auto impl = cpu.CreateContext();
  ASSERT_TRUE(impl.ok()) << impl.status().ToString();
  auto* ctx = dynamic_cast<CpuContext*>(impl->get());
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->MemoryUsage().Total(MemoryPlace::kHost), 0u) << "nothing planned yet";

  std::mt19937_64 rng(7);
  size_t arenas = 0, planned = 0, folded = 0;
  for (const Shape& shape : {Shape{1, 3, 8, 8}, Shape{2, 3, 16, 12}, Shape{1, 3, 8, 8}}) {
    std::map<std::string, Tensor> in{{"x", RandomTensor(DType::kFloat32, shape, rng)}};
    auto prog = ctx->ProgramFor(in);
    ASSERT_TRUE(prog.ok()) << prog.status().ToString();
    ASSERT_NE(*prog, nullptr);
    if (shape[1] == 3 && (shape[0] == 2 || arenas == 0)) {  // a new signature: its program is new
      arenas += (*prog)->arena_allocated_bytes();
      planned += (*prog)->arena_bytes();
      folded += (*prog)->folded_bytes();
    }
    ASSERT_TRUE(ctx->Run(in, nullptr).ok());
  }
  // The arenas are what the programs planned (each well over the 64-byte minimum here).
  EXPECT_EQ(planned, arenas);
  const runtime::MemoryReport held = ctx->MemoryUsage();
  EXPECT_EQ(held.Bytes(MemoryKind::kArena, MemoryPlace::kHost), arenas) << held.ToString();
  // Shape -> Gather -> Concat is folded per signature: [N, -1] as two int64 per program.
  EXPECT_EQ(folded, 2 * 2 * sizeof(int64_t));
  EXPECT_EQ(held.Bytes(MemoryKind::kFolded, MemoryPlace::kHost), folded) << held.ToString();
  EXPECT_EQ(held.Total(MemoryPlace::kDevice), 0u);
  EXPECT_EQ(held.Total(MemoryPlace::kPinnedHost), 0u);

  // The engine: the plan's weights (16x3x3x3 floats, two int64 constants) and the weight cache.
  const runtime::MemoryReport e = engine->MemoryUsage();
  EXPECT_EQ(e.Bytes(MemoryKind::kPlanWeights, MemoryPlace::kHost),
            16u * 3 * 3 * 3 * sizeof(float) + 2 * sizeof(int64_t));
  EXPECT_EQ(e.Bytes(MemoryKind::kWeights, MemoryPlace::kHost), cpu.weights().bytes()) << e.ToString();
}

TEST(CpuMemory, ContextReportsThroughTheRuntime) {
  auto engine = CpuEngineFor(kNet);
  ASSERT_NE(engine, nullptr);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  std::mt19937_64 rng(3);
  ASSERT_TRUE((*ctx)->Run({{"x", RandomTensor(DType::kFloat32, {1, 3, 8, 8}, rng)}}).ok());
  const uint64_t one = (*ctx)->MemoryUsage().Bytes(MemoryKind::kArena, MemoryPlace::kHost);
  EXPECT_GT(one, 0u);
  ASSERT_TRUE((*ctx)->Run({{"x", RandomTensor(DType::kFloat32, {4, 3, 8, 8}, rng)}}).ok());
  // A second signature, four times the batch: a second, larger arena beside the first.
  const uint64_t two = (*ctx)->MemoryUsage().Bytes(MemoryKind::kArena, MemoryPlace::kHost);
  EXPECT_GT(two, 2 * one);
  // The first signature again: its program is reused, nothing new is held.
  ASSERT_TRUE((*ctx)->Run({{"x", RandomTensor(DType::kFloat32, {1, 3, 8, 8}, rng)}}).ok());
  EXPECT_EQ((*ctx)->MemoryUsage().Bytes(MemoryKind::kArena, MemoryPlace::kHost), two);
  EXPECT_EQ(engine->EstimateContextMemory({{{"x", {1, 3, 8, 8}}}}).status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace sampan::cpu::testing
