// The cuda backend's memory figures (runtime/memory_usage.h) on a GPU: the engine's weight block,
// what a context allocates per shape bucket, and the estimate (CudaEngine::EstimateContextMemory),
// which plans the same buckets without allocating and must give the same figures. Skips
// without a GPU. Named CudaBackend* so bench/gpu_peers/check_on_gpu.sh runs it.
#include <gtest/gtest.h>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/kernel_util.h"

namespace sampan::cuda::testing {
namespace {

using passes::testing::MustParse;
using runtime::MemoryKind;
using runtime::MemoryPlace;

const char* kNet = R"(
  opset 17
  graph g (x: f32[N,3,16,16]) -> (y) {
    w = const f32[8,3,3,3] random
    c = Conv(x, w) {pads=[1,1,1,1]}
    r = Relu(c)
    s = Shape(r)
    k = const i64[1] {0}
    n = Gather(s, k) {axis=0}
    m = const i64[1] {-1}
    t = Concat(n, m) {axis=0}
    f = Reshape(r, t)
    wf = const f32[2048,10] random
    y = MatMul(f, wf)
  })";

std::shared_ptr<runtime::Engine> CudaEngineFor(const char* text) {
  builder::BuildConfig config;
  config.backend = "cuda";
  config.profiles = {plan::Profile{{"x", plan::ShapeRange{{1, 3, 16, 16}, {4, 3, 16, 16}, {8, 3, 16, 16}}}}};
  auto p = builder::Build(MustParse(text), config, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return nullptr;
  auto e = runtime::Engine::Create(std::move(p).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

TEST(CudaBackendMemory, EstimateMatchesWhatAContextAllocates) {
  SKIP_WITHOUT_GPU();
  auto engine = CudaEngineFor(kNet);
  ASSERT_NE(engine, nullptr);
  // The engine: its weight block on device 0, every constant aligned to 256 bytes.
  const runtime::MemoryReport e = engine->MemoryUsage();
  uint64_t block = 0;
  for (const auto& n : engine->graph().nodes())
    for (const ir::Value* v : n->inputs())
      if (v && v->is_constant() && v->data.nbytes() > 0) block += Aligned(v->data.nbytes());
  // (each constant once: none is read twice here)
  EXPECT_EQ(e.Bytes(MemoryKind::kWeights, MemoryPlace::kDevice, 0), block) << e.ToString();
  EXPECT_GT(e.Bytes(MemoryKind::kPlanWeights, MemoryPlace::kHost), 0u);

  const std::vector<int64_t> batches{1, 4, 8};
  std::vector<std::map<std::string, Shape>> sets;
  for (int64_t b : batches) sets.push_back({{"x", {b, 3, 16, 16}}});
  auto estimate = engine->EstimateContextMemory(sets);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  for (const runtime::MemoryFigure& f : estimate->figures()) EXPECT_TRUE(f.estimate) << estimate->ToString();

  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const uint64_t fixed = (*ctx)->MemoryUsage().Total(MemoryPlace::kDevice, 0);
  EXPECT_EQ(fixed, sizeof(int)) << "only the index flag before any bucket";
  for (int64_t b : batches)
    ASSERT_TRUE((*ctx)->Run({{"x", Random(DType::kFloat32, {b, 3, 16, 16}, static_cast<uint64_t>(b))}}).ok());
  const runtime::MemoryReport held = (*ctx)->MemoryUsage();
  for (MemoryKind kind : {MemoryKind::kArena, MemoryKind::kFolded, MemoryKind::kKernel, MemoryKind::kWorkspace})
    EXPECT_EQ(held.Bytes(kind, MemoryPlace::kDevice, 0), estimate->Bytes(kind, MemoryPlace::kDevice, 0))
        << runtime::MemoryKindName(kind) << ": held " << held.ToString() << "; estimated " << estimate->ToString();
  EXPECT_EQ(held.Bytes(MemoryKind::kStaging, MemoryPlace::kPinnedHost),
            estimate->Bytes(MemoryKind::kStaging, MemoryPlace::kPinnedHost));
  // Three buckets' arenas hold at least each batch's input and output.
  uint64_t io = 0;
  for (int64_t b : batches) io += static_cast<uint64_t>(b) * (3 * 16 * 16 + 10) * sizeof(float);
  EXPECT_GE(held.Bytes(MemoryKind::kArena, MemoryPlace::kDevice, 0), io);
  EXPECT_GT(held.Bytes(MemoryKind::kWorkspace, MemoryPlace::kDevice, 0), sizeof(int)) << "cuBLASLt's workspace";
  // A batch 8 bucket planned again is no new memory.
  ASSERT_TRUE((*ctx)->Run({{"x", Random(DType::kFloat32, {8, 3, 16, 16}, 9)}}).ok());
  EXPECT_EQ((*ctx)->MemoryUsage().Total(MemoryPlace::kDevice, 0), held.Total(MemoryPlace::kDevice, 0));
  // Host inputs from the pinned pool count as pinned staging while handed out or cached.
  Tensor pinned = (*ctx)->AllocateHostInput(DType::kFloat32, {8, 3, 16, 16});
  EXPECT_GE((*ctx)->MemoryUsage().Total(MemoryPlace::kPinnedHost),
            held.Total(MemoryPlace::kPinnedHost) + pinned.nbytes());
}

TEST(CudaBackendMemory, DeviceMemoryQueryAndBadEstimates) {
  SKIP_WITHOUT_GPU();
  const runtime::Backend* b = runtime::FindBackend("cuda");
  ASSERT_TRUE(b->device_memory);
  auto mem = b->device_memory(0);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_GT(mem->total, 0u);
  EXPECT_LE(mem->free, mem->total);
  EXPECT_FALSE(b->device_memory(1 << 20).ok());
  auto engine = CudaEngineFor(kNet);
  ASSERT_NE(engine, nullptr);
  // Outside the plan's profile: refused before anything is planned.
  auto outside = engine->EstimateContextMemory({{{"x", {64, 3, 16, 16}}}});
  EXPECT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("optimization profile"), std::string::npos) << outside.status().ToString();
}

}  // namespace
}  // namespace sampan::cuda::testing
