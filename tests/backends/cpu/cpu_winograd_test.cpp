// Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution (backends/cpu/winograd.h)
// against the reference kernel: each forced on (SAMPAN_CPU_WINOGRAD=2, =4) over shapes that exercise partial
// edge tiles, every padding, tiles fewer than threads (the output channels are
// split instead), residual sums in place and copied, and each epilogue; then the
// timed choice, whichever way it goes, gives the same answers.
#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/cpu_test_util.h"
#include "backends/cpu/winograd.h"
#include "plan/plan.h"

namespace sampan::cpu::testing {
namespace {

// F(4x4, 3x3) scales the transformed sums by up to 8 and 1/24, so its rounding error
// is a few ulp of the largest partial sums rather than of each output: outputs near
// zero differ from the direct sum by ~1e-5 of the output's scale (measured up to 6e-6
// here, with C*9 products of values in [-2, 2]), relative to that scale.
bool CloseAtScale(const Tensor& got, const Tensor& want, double* mismatch) {
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(ElementAsDouble(want, i)));
  *mismatch = Mismatch(got, want, 1e-4, 1e-5 * scale + 1e-6);
  return *mismatch <= 1.0;
}

struct WinoCase {
  std::string name, graph;
  std::vector<std::map<std::string, Shape>> shapes;
};

// Runs `c` on the cpu backend (Winograd with tile size `tile` forced on) and the
// reference executor; every case must have run its conv on that Winograd step.
void RunWinograd(const WinoCase& c, int threads, int tile) {
  SCOPED_TRACE(StrCat(c.name, ", ", threads, " threads, F(", tile, "x", tile, ",3x3)"));
  const std::string label = StrCat("[winograd f", tile, "x", tile);
  ScopedEnv force("SAMPAN_CPU_WINOGRAD", tile == 2 ? "2" : "4");
  auto engine = CpuEngineFor(c.graph, threads);
  ASSERT_NE(engine, nullptr);
  auto ref_graph = std::shared_ptr<const ir::Graph>(Parse(c.graph));
  reference::Executor ref(ref_graph);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  std::mt19937_64 rng(5);
  for (const auto& shapes : c.shapes) {
    std::map<std::string, Tensor> inputs;
    std::string where;
    for (const auto& [n, s] : shapes) {
      inputs[n] = RandomTensor(DType::kFloat32, s, rng);
      where += n + "=" + ShapeToString(s) + " ";
    }
    SCOPED_TRACE(where);
    auto want = ref.Run(inputs);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    auto got = (*ctx)->Run(inputs);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < got->size(); ++i) {
      double mismatch = 0;
      EXPECT_TRUE(CloseAtScale((*got)[i], (*want)[i], &mismatch)) << "output " << i << ": " << mismatch;
    }
    bool ran = false;
    std::string all;
    for (const auto& l : StepLabels(*engine, inputs)) {
      ran |= l.find(label) != std::string::npos;
      all += l + "\n";
    }
    EXPECT_TRUE(ran) << "no " << label << " step:\n" << all;
  }
}

using S = std::map<std::string, Shape>;

// Whether oneDNN's convolutions leave nChw8c on this CPU (AVX2): the only layout the Winograd
// kernels take, so the only CPUs where they replace a convolution (ChooseWinograd). AVX-512
// CPUs get nhwc or nChw16c and oneDNN's own AVX-512 kernels.
bool ConvsUseNChw8c() {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const dnnl::memory::desc x({1, 64, 28, 28}, dt::f32, tag::any), w({64, 64, 3, 3}, dt::f32, tag::any),
      y({1, 64, 28, 28}, dt::f32, tag::any);
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, x, w,
                                          y, {1, 1}, {1, 1}, {1, 1});
  const dnnl::convolution_forward::primitive_desc pd(d, eng);
  return pd.src_desc() == dnnl::memory::desc({1, 64, 28, 28}, dt::f32, tag::nChw8c);
}

#define SKIP_UNLESS_NCHW8C_CONVS()                                                                       \
  do {                                                                                                   \
    if (!WinogradConv::CpuSupported()) GTEST_SKIP() << "needs AVX2 and FMA";                             \
    if (!ConvsUseNChw8c())                                                                               \
      GTEST_SKIP() << "oneDNN's convolutions do not use nChw8c on this CPU (AVX-512: nhwc or nChw16c): " \
                      "the nChw8c Winograd kernels never replace them here";                             \
  } while (0)

TEST(CpuWinograd, MatchesReferenceOnEdgeTilesPaddingsAndThreadSplits) {
  SKIP_UNLESS_NCHW8C_CONVS();
  const std::vector<WinoCase> cases = {
      {"same_pad_bias",
       R"(opset 17
        graph g (x: f32[N,8,H,W]) -> (y) {
          w = const f32[16,8,3,3] random
          b = const f32[16] random
          y = Conv(x, w, b) {pads=[1,1,1,1]} @c
        })",
       // 1x1 and 3x5 are a single partial tile; 9x9 and 16x12 partial and whole edge tiles.
       {S{{"x", {1, 8, 1, 1}}}, S{{"x", {1, 8, 3, 5}}}, S{{"x", {2, 8, 9, 9}}}, S{{"x", {3, 8, 16, 12}}}}},
      {"valid_no_bias_wide",
       R"(opset 17
        graph g (x: f32[N,24,H,W]) -> (y) {
          w = const f32[48,24,3,3] random
          y = Conv(x, w) @c
        })",
       {S{{"x", {1, 24, 3, 3}}}, S{{"x", {2, 24, 10, 7}}}, S{{"x", {1, 24, 30, 30}}}}},
      {"asymmetric_pads",
       R"(opset 17
        graph g (x: f32[N,16,H,W]) -> (y) {
          w = const f32[32,16,3,3] random
          y = Conv(x, w) {pads=[2,0,0,2]} @c
        })",
       {S{{"x", {1, 16, 6, 6}}}, S{{"x", {2, 16, 11, 5}}}}},
      {"same_upper_many_channels",
       R"(opset 17
        graph g (x: f32[N,64,H,W]) -> (y) {
          w = const f32[64,64,3,3] random
          b = const f32[64] random
          y = Conv(x, w, b) {auto_pad="SAME_UPPER"} @c
        })",
       {S{{"x", {1, 64, 7, 7}}}, S{{"x", {4, 64, 14, 14}}}}},
  };
  for (int tile : {2, 4})
    for (int threads : {1, 2, 3})
      for (const WinoCase& c : cases) RunWinograd(c, threads, tile);
}

TEST(CpuWinograd, EpiloguesAndResiduals) {
  SKIP_UNLESS_NCHW8C_CONVS();
  // Clip's lower bound stays below the outputs so their scale (which the tolerance follows) is kept.
  for (int tile : {2, 4})
    for (const std::string act : {"Relu", "LeakyRelu", "Clip", ""}) {
      const std::string params = act == "LeakyRelu" ? ", activation_params=[0.1]"
                                 : act == "Clip"    ? ", activation_params=[-100.0, 5.0]"
                                                    : "";
      const std::string attrs = act.empty() ? "" : ", activation=\"" + act + "\"" + params;
      RunWinograd({"fused_" + (act.empty() ? std::string("none") : act),
                   R"(opset 17
      opset sampan 1
      graph g (x: f32[N,16,H,W], z: f32[N,32,H,W]) -> (y) {
        w = const f32[32,16,3,3] random
        b = const f32[32] random
        y = sampan::FusedConv(x, w, b, z) {pads=[1,1,1,1])" +
                       attrs + R"(} @fc
      })",
                   {S{{"x", {1, 16, 8, 8}}, {"z", {1, 32, 8, 8}}}, S{{"x", {2, 16, 5, 9}}, {"z", {2, 32, 5, 9}}}}},
                  2, tile);
    }
  // The residual `a` is read again by the second fused conv: the first one must copy it.
  for (int tile : {2, 4})
    RunWinograd({"residual_reused",
                 R"(opset 17
    opset sampan 1
    graph g (x: f32[N,16,H,W]) -> (y, v) {
      w = const f32[16,16,3,3] random
      b = const f32[16] random
      a = Conv(x, w, b) {pads=[1,1,1,1]} @ca
      y = sampan::FusedConv(a, w, b, a) {pads=[1,1,1,1], activation="Relu"} @cy
      v = sampan::FusedConv(y, w, b, a) {pads=[1,1,1,1]} @cv
    })",
                 {S{{"x", {1, 16, 6, 6}}}, S{{"x", {2, 16, 9, 7}}}}},
                2, tile);
}

// Unforced, the choice is timed: either kernel may win, both must be right.
TEST(CpuWinograd, TimedChoiceIsCorrect) {
  const std::string graph = R"(opset 17
    opset sampan 1
    graph g (x: f32[N,64,H,W]) -> (y) {
      w = const f32[64,64,3,3] random
      b = const f32[64] random
      y = sampan::FusedConv(x, w, b) {pads=[1,1,1,1], activation="Relu"} @c
    })";
  ScopedEnv timed("SAMPAN_CPU_WINOGRAD", "");
  auto engine = CpuEngineFor(graph, 2);
  ASSERT_NE(engine, nullptr);
  reference::Executor ref(std::shared_ptr<const ir::Graph>(Parse(graph)));
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  std::mt19937_64 rng(9);
  std::map<std::string, Tensor> inputs{{"x", RandomTensor(DType::kFloat32, {1, 64, 28, 28}, rng)}};
  auto want = ref.Run(inputs);
  auto got = (*ctx)->Run(inputs);
  ASSERT_TRUE(want.ok() && got.ok());
  double mismatch = 0;
  EXPECT_TRUE(CloseAtScale((*got)[0], (*want)[0], &mismatch)) << mismatch;
  int fast = 0;
  for (const auto& l : StepLabels(*engine, inputs))
    fast += l.find("[winograd") != std::string::npos || l.find("[onednn") != std::string::npos;
  EXPECT_EQ(fast, 1);
}

// `sampan build` times the choice once and records it in the plan (Tactic::algo); an engine
// made from the plan, in this process or after a save and load, runs the recorded algorithm
// without timing it: every process running a plan computes the same bits.
TEST(CpuWinograd, TheBuildRecordsTheChoiceAndLoadsFollowIt) {
  SKIP_UNLESS_NCHW8C_CONVS();
  const std::string graph = R"(opset 17
    opset sampan 1
    graph g (x: f32[1,64,28,28]) -> (y) {
      w = const f32[64,64,3,3] random
      b = const f32[64] random
      y = sampan::FusedConv(x, w, b) {pads=[1,1,1,1], activation="Relu"} @c
    })";
  ScopedEnv timed("SAMPAN_CPU_WINOGRAD", "");
  builder::BuildConfig config;
  config.backend = "cpu";
  for (const passes::PassDef* p : passes::AllPasses()) config.disabled_passes.insert(p->name);
  auto plan = builder::Build(Parse(graph), config, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(plan->choices.count("c"));
  const int timed_algo = plan->choices.at("c").tactic.algo;
  EXPECT_TRUE(timed_algo == 0 || timed_algo == 2 || timed_algo == 4) << timed_algo;
  std::mt19937_64 rng(5);
  std::map<std::string, Tensor> inputs{{"x", RandomTensor(DType::kFloat32, {1, 64, 28, 28}, rng)}};
  for (int algo : {4, 0, 2}) {
    plan::Plan p = *plan;
    p.choices["c"].tactic.algo = algo;
    auto bytes = plan::SerializePlan(p);
    ASSERT_TRUE(bytes.ok());
    auto loaded = plan::ParsePlan(std::make_shared<const std::string>(std::move(*bytes)), "test.plan");
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(loaded->choices.at("c").tactic.algo, algo);
    auto engine = runtime::Engine::Create(std::move(loaded).value(), runtime::EngineOptions{});
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    const auto labels = StepLabels(**engine, inputs);
    const std::string want = algo == 0 ? "[onednn" : StrCat("[winograd f", algo, "x", algo);
    int found = 0;
    for (const auto& l : labels) found += l.find(want) != std::string::npos;
    EXPECT_EQ(found, 1) << "algo " << algo;
    auto ctx = (*engine)->CreateContext();
    ASSERT_TRUE(ctx.ok());
    auto a = (*ctx)->Run(inputs), b = (*ctx)->Run(inputs);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(std::memcmp((*a)[0].raw(), (*b)[0].raw(), (*a)[0].nbytes()), 0);
  }
}

}  // namespace
}  // namespace sampan::cpu::testing
