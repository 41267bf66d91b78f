// runtime::MemoryReport, and the memory figures of the reference backend's engine and context:
// the plan's weights once per engine, one arena per input-shape signature, exactly as planned.
#include "runtime/memory_usage.h"

#include <gtest/gtest.h>

#include "builder/builder.h"
#include "passes/pass_test_util.h"
#include "runtime/engine.h"
#include "runtime/reference_context.h"

namespace sampan::runtime {
namespace {

using passes::testing::MustParse;

TEST(MemoryReport, MergesByKindPlaceAndDevice) {
  MemoryReport r;
  r.Add(MemoryKind::kArena, MemoryPlace::kDevice, 1, 100);
  r.Add(MemoryKind::kArena, MemoryPlace::kDevice, 1, 28);
  r.Add(MemoryKind::kArena, MemoryPlace::kDevice, 0, 5);
  r.Add(MemoryKind::kWorkspace, MemoryPlace::kDevice, 1, 2048);
  r.Add(MemoryKind::kStaging, MemoryPlace::kPinnedHost, 7, 64);  // a host place has no device
  r.Add(MemoryKind::kArena, MemoryPlace::kHost, 0, 0);           // nothing: no figure
  EXPECT_EQ(r.figures().size(), 4u);
  EXPECT_EQ(r.Bytes(MemoryKind::kArena, MemoryPlace::kDevice, 1), 128u);
  EXPECT_EQ(r.Total(MemoryPlace::kDevice, 1), 128u + 2048u);
  EXPECT_EQ(r.Total(MemoryPlace::kPinnedHost), 64u);
  EXPECT_EQ(r.Total(MemoryPlace::kHost), 0u);
  EXPECT_EQ(r.Devices(), (std::vector<int>{0, 1}));
  EXPECT_EQ(r.Times(3).Total(MemoryPlace::kDevice, 1), 3 * (128u + 2048u));
  r.Remove(MemoryKind::kWorkspace, MemoryPlace::kDevice, 1, 2048);
  EXPECT_EQ(r.figures().size(), 3u);
  r.Remove(MemoryKind::kArena, MemoryPlace::kDevice, 0, 1000);  // never below 0
  EXPECT_EQ(r.Total(MemoryPlace::kDevice, 0), 0u);
  EXPECT_EQ(r.ToString(), "arena device 1: 128 bytes, staging pinned host: 64 bytes");
  MemoryReport e;
  e.Add(MemoryKind::kWorkspace, MemoryPlace::kDevice, 0, 3u << 20, /*estimate=*/true);
  EXPECT_EQ(e.ToString(), "workspace device 0: 3.0 MiB (estimate)");
  EXPECT_EQ(MemoryReport().ToString(), "nothing");
}

const char* kNet = R"(
  opset 17
  graph net (x: f32[N,8]) -> (y) {
    w = const f32[8,16] random
    b = const f32[16] random
    m = MatMul(x, w)
    a = Add(m, b)
    r = Relu(a)
    y = Sigmoid(r)
  }
)";

// The graph as written (passes off), for the reference backend.
Result<plan::Plan> PlanAsWritten() {
  builder::BuildConfig config;
  for (const passes::PassDef* d : passes::AllPasses()) config.disabled_passes.insert(d->name);
  return builder::Build(MustParse(kNet), config, nullptr);
}

TEST(EngineMemory, ReferenceEngineHoldsThePlanWeightsAndEachSignatureAnArena) {
  auto p = PlanAsWritten();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto e = Engine::Create(std::move(p).value());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const MemoryReport held = (*e)->MemoryUsage();
  EXPECT_EQ(held.Bytes(MemoryKind::kPlanWeights, MemoryPlace::kHost), (8 * 16 + 16) * sizeof(float));
  EXPECT_EQ(held.figures().size(), 1u) << held.ToString();

  auto impl = (*e)->backend_engine().CreateContext();
  ASSERT_TRUE(impl.ok());
  auto* ref = dynamic_cast<ReferenceContext*>(impl->get());
  ASSERT_NE(ref, nullptr);
  EXPECT_TRUE(ref->MemoryUsage().empty());
  size_t planned = 0;
  for (int64_t n : {2, 5, 2}) {
    std::map<std::string, Tensor> in{{"x", *Tensor::Zeros(DType::kFloat32, {n, 8})}};
    ASSERT_TRUE(ref->Run(in, nullptr).ok());
    if (n == 5 || planned == 0) planned += ref->arena_bytes();
  }
  ASSERT_GT(planned, 0u);
  EXPECT_EQ(ref->MemoryUsage().Bytes(MemoryKind::kArena, MemoryPlace::kHost), planned);
  EXPECT_EQ(ref->MemoryUsage().Total(MemoryPlace::kDevice), 0u);
}

TEST(EngineMemory, EstimateChecksTheShapesThenAsksTheBackend) {
  auto p = PlanAsWritten();
  ASSERT_TRUE(p.ok());
  auto e = Engine::Create(std::move(p).value());
  ASSERT_TRUE(e.ok());
  auto missing = (*e)->EstimateContextMemory({{{"z", {1, 8}}}});
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("graph input 'x' has no shape"), std::string::npos)
      << missing.status().ToString();
  auto wrong = (*e)->EstimateContextMemory({{{"x", {1, 9}}}});
  EXPECT_NE(wrong.status().message().find("does not fit"), std::string::npos) << wrong.status().ToString();
  auto extra = (*e)->EstimateContextMemory({{{"x", {1, 8}}, {"q", {1}}}});
  EXPECT_NE(extra.status().message().find("no input named 'q'"), std::string::npos) << extra.status().ToString();
  // The reference backend runs on the host: nothing to estimate ahead.
  EXPECT_EQ((*e)->EstimateContextMemory({{{"x", {1, 8}}}}).status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace sampan::runtime
