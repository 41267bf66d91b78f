// The choice between the packed GEMM and oneDNN's matmul for products by constant weights
// (backends/cpu/product_algo.h): the knob forces either, both compute what the reference does,
// the build times and records the choice per node, and a loaded plan runs the recorded one.
#include <cstring>

#include "backends/cpu/cpu_test_util.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/product_algo.h"
#include "plan/plan.h"

namespace sampan::cpu::testing {
namespace {

using S = std::map<std::string, Shape>;

// MiniLM's products at a small hidden size: Q projection, GELU feed-forward up and down.
const char* kProducts = R"(opset 17
  opset sampan 1
  graph g (x: f32[2,16,64], a2: f32[32,64]) -> (y, z) {
    wq = const f32[64,64] random
    bq = const f32[64] random
    q = sampan::FusedMatMul(x, wq, bq) @q
    w1 = const f32[64,256] random
    b1 = const f32[256] random
    f = sampan::FusedMatMul(q, w1, b1) {activation="Gelu"} @up
    w2 = const f32[256,64] random
    y = sampan::FusedMatMul(f, w2, bq) @down
    wt = const f32[48,64] random
    bt = const f32[48] random
    z = Gemm(a2, wt, bt) {transB=1} @g
  }
)";

bool PackedRunsHere() {
  return PackedGemm::CpuSupported();
}

std::map<std::string, Tensor> Inputs() {
  std::mt19937_64 rng(11);
  return {{"x", RandomTensor(DType::kFloat32, {2, 16, 64}, rng)}, {"a2", RandomTensor(DType::kFloat32, {32, 64}, rng)}};
}

// The step label prefix of each product node: "[cpu packed gemm]" or "[onednn ...]".
std::map<std::string, std::string> KernelOf(runtime::Engine& engine) {
  std::map<std::string, std::string> out;
  for (const auto& l : StepLabels(engine, Inputs()))
    for (const char* node : {" q ", " up ", " down ", " g "}) {
      if (l.find(node) == std::string::npos || l.rfind("Gelu", 0) == 0) continue;
      out[std::string(node).substr(1, std::strlen(node) - 2)] = l.substr(l.find('['));
    }
  return out;
}

TEST(CpuProductAlgo, AllocatingImplementationsAreNamed) {
  EXPECT_TRUE(OneDnnMatMulAllocates("gemm:jit"));
  EXPECT_TRUE(OneDnnMatMulAllocates("gemm:jit:f32"));
  EXPECT_FALSE(OneDnnMatMulAllocates("brg:avx512_core"));
  EXPECT_FALSE(OneDnnMatMulAllocates("ref:any"));
}

// Forced either way, every product matches the reference, and runs where it was told to.
TEST(CpuProductAlgo, TheKnobForcesEitherAndBothAreRight) {
  for (const char* knob : {"1", "0", ""}) {
    SCOPED_TRACE(StrCat("SAMPAN_CPU_PACKED_GEMM=", knob));
    ScopedEnv env("SAMPAN_CPU_PACKED_GEMM", knob);
    RunCase({"products", kProducts, {S{{"x", {2, 16, 64}}, {"a2", {32, 64}}}}, ""});
    auto engine = CpuEngineFor(kProducts);
    ASSERT_NE(engine, nullptr);
    const auto kernels = KernelOf(*engine);
    ASSERT_EQ(kernels.size(), 4u);
    for (const auto& [node, kernel] : kernels) {
      SCOPED_TRACE(node + " " + kernel);
      if (std::string(knob) == "1" && PackedRunsHere()) {
        EXPECT_EQ(kernel, "[cpu packed gemm]");
      } else if (std::string(knob) == "0") {
        EXPECT_EQ(kernel.rfind("[onednn", 0), 0u);
      } else if (std::string(knob).empty()) {  // unforced, an allocating oneDNN matmul is never chosen
        EXPECT_EQ(kernel.find("gemm:"), std::string::npos);
      }
    }
  }
}

// The build chooses each product's algorithm (a rule; timed with SAMPAN_CPU_TIME_PRODUCTS=1) and records the choice
// (Tactic::algo 0 packed, 1 oneDNN) in the plan; an engine made from the plan after a save and load runs the recorded
// algorithm without timing it, so every process running a plan computes the same bits.
TEST(CpuProductAlgo, TheBuildRecordsTheChoiceAndLoadsFollowIt) {
  if (!PackedRunsHere()) GTEST_SKIP() << "the packed GEMM needs AVX2: every product runs on oneDNN here";
  ScopedEnv timed("SAMPAN_CPU_PACKED_GEMM", "");
  builder::BuildConfig config;
  config.backend = "cpu";
  for (const passes::PassDef* p : passes::AllPasses()) config.disabled_passes.insert(p->name);
  builder::BuildReport report;
  auto plan = builder::Build(Parse(kProducts), config, &report);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (const char* node : {"q", "up", "down", "g"}) {
    ASSERT_TRUE(plan->choices.count(node)) << node;
    const int algo = plan->choices.at(node).tactic.algo;
    EXPECT_TRUE(algo == 0 || algo == 1) << node << " algo " << algo;
    // The rule (no timing unless SAMPAN_CPU_TIME_PRODUCTS=1): the packed GEMM without AMX.
    if (ActiveIsa() < Isa::kAmx) {
      EXPECT_EQ(algo, 0) << node;
    }
  }
  bool noted = false;
  for (const auto& line : report.backend_notes)
    noted |= line.find("products by constant weights recorded") != std::string::npos;
  EXPECT_TRUE(noted);
  // What oneDNN's matmul is here for each node (the allocating gemm:* is never run when unforced).
  std::map<std::string, std::string> onednn;
  {
    ScopedEnv forced("SAMPAN_CPU_PACKED_GEMM", "0");
    auto engine = CpuEngineFor(kProducts);
    ASSERT_NE(engine, nullptr);
    onednn = KernelOf(*engine);
  }
  // Each node's recorded algorithm flipped, one node at a time: the load follows the plan.
  for (const char* node : {"q", "up", "down", "g"}) {
    for (int algo : {0, 1}) {
      SCOPED_TRACE(StrCat(node, " algo ", algo));
      plan::Plan p = *plan;
      p.choices[node].tactic.algo = algo;
      auto bytes = plan::SerializePlan(p);
      ASSERT_TRUE(bytes.ok());
      auto loaded = plan::ParsePlan(std::make_shared<const std::string>(std::move(*bytes)), "test.plan");
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
      EXPECT_EQ(loaded->choices.at(node).tactic.algo, algo);
      auto engine = runtime::Engine::Create(std::move(loaded).value(), runtime::EngineOptions{});
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      const std::string kernel = KernelOf(**engine)[node];
      const bool allocating = onednn[node].find("gemm:") != std::string::npos;
      EXPECT_EQ(kernel, algo == 0 || allocating ? "[cpu packed gemm]" : onednn[node]);
      auto ctx = (*engine)->CreateContext();
      ASSERT_TRUE(ctx.ok());
      auto a = (*ctx)->Run(Inputs()), b = (*ctx)->Run(Inputs());
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(std::memcmp((*a)[0].raw(), (*b)[0].raw(), (*a)[0].nbytes()), 0);
    }
  }
}

}  // namespace
}  // namespace sampan::cpu::testing
