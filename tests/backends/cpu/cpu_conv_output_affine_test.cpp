// The cpu lowering's FuseConvOutputAffine: a scalar affine after a fused convolution's
// activation becomes its output_scale / output_bias (a oneDNN post-op), computing what the
// nodes it replaces computed; what it must leave alone stays.
#include "backends/cpu/cpu_test_util.h"
#include "backends/cpu/fuse_conv_output_affine.h"

namespace sampan::cpu::testing {
namespace {

// The graph as a cpu plan with the passes on (Conv + HardSwish -> FusedConv), and a context.
struct Built {
  std::shared_ptr<runtime::Engine> engine;
  size_t fused_affine = 0;  // FusedConv nodes carrying output_scale
  size_t binary = 0;        // Mul/Add/Sub/Div nodes left
};

Built BuildIt(const std::string& text) {
  builder::BuildConfig config;
  config.backend = "cpu";
  auto plan = builder::Build(Parse(text), config, nullptr);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  Built b;
  if (!plan.ok()) return b;
  for (const auto& n : plan->graph->nodes()) {
    if (n->op_type == "FusedConv" && n->attrs.count("output_scale")) ++b.fused_affine;
    if (n->domain.empty() && (n->op_type == "Mul" || n->op_type == "Add" || n->op_type == "Sub" || n->op_type == "Div"))
      ++b.binary;
  }
  runtime::EngineOptions options;
  options.threads = 2;
  auto e = runtime::Engine::Create(std::move(plan).value(), options);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (e.ok()) b.engine = *e;
  return b;
}

void ExpectMatchesReference(const std::string& text, const Built& b) {
  ASSERT_NE(b.engine, nullptr);
  auto ref_graph = std::shared_ptr<const ir::Graph>(Parse(text));
  reference::Executor ref(ref_graph);
  std::mt19937_64 rng(11);
  std::map<std::string, Tensor> inputs{{"x", RandomTensor(DType::kFloat32, {2, 8, 9, 7}, rng)}};
  auto want = ref.Run(inputs);
  auto ctx = b.engine->CreateContext();
  ASSERT_TRUE(want.ok() && ctx.ok());
  auto got = (*ctx)->Run(inputs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (size_t i = 0; i < got->size(); ++i) EXPECT_LE(Mismatch((*got)[i], (*want)[i], 1e-4, 1e-4), 1.0) << i;
}

std::string Graph(const std::string& tail, const std::string& outputs = "y") {
  return R"(opset 17
    graph g (x: f32[N,8,H,W]) -> ()" +
         outputs + R"() {
      w = const f32[16,8,3,3] random
      b = const f32[16] random
      c = Conv(x, w, b) {pads=[1,1,1,1]} @conv
      h = HardSwish(c) @hs
      )" +
         tail + R"(
    })";
}

TEST(CpuConvOutputAffine, ScalarChainsFoldIntoTheConvolution) {
  for (const std::string tail :
       {"s = const f32[] {0.75}\n t = const f32[1] {-0.5}\n m = Mul(s, h) @m\n y = Add(m, t) @a",
        "s = const f32[] {4}\n t = const f32[] {2}\n m = Div(h, s) @d\n y = Sub(t, m) @s",
        "t = const f32[] {1.5}\n y = Sub(h, t) @s"}) {
    SCOPED_TRACE(tail);
    const std::string text = Graph(tail);
    Built b = BuildIt(text);
    EXPECT_EQ(b.fused_affine, 1u);
    EXPECT_EQ(b.binary, 0u);
    ExpectMatchesReference(text, b);
  }
}

TEST(CpuConvOutputAffine, LeavesWhatItCannotFold) {
  struct Case {
    std::string tail, outputs;
    bool compare = true;  // s / h: HardSwish's zeros make it too ill-conditioned to compare
  };
  for (const Case& c : std::vector<Case>{// a per-channel scale (the passes fold those only before an activation)
                                         {"s = const f32[16,1,1] random\n y = Mul(h, s) @m", "y"},
                                         // the activation's result read twice (an Add would be
                                         // factored first: x + x * s = x * (1 + s))
                                         {"s = const f32[] {0.5}\n m = Mul(h, s) @m\n y = Sub(m, h) @a", "y"},
                                         // the intermediate is a graph output
                                         {"s = const f32[] {0.5}\n y = Mul(h, s) @m", "y, h"},
                                         // a scalar divided by the output
                                         {"s = const f32[] {0.5}\n y = Div(s, h) @d", "y", false},
                                         // a one-element constant of higher rank: it broadcasts the output to 5-D
                                         {"s = const f32[1,1,1,1,1] {0.5}\n y = Mul(h, s) @m", "y"}}) {
    SCOPED_TRACE(c.tail);
    const std::string text = Graph(c.tail, c.outputs);
    Built b = BuildIt(text);
    EXPECT_EQ(b.fused_affine, 0u);
    EXPECT_GE(b.binary, 1u);
    if (c.compare) ExpectMatchesReference(text, b);
  }
}

// Every activation with an output affine, as the post-ops oneDNN runs: one 1x1 convolution on a
// 1x1 map (the squeeze-excitation shape), against the reference's act(conv) * scale + bias.
TEST(CpuConvOutputAffine, EveryActivationWithAnAffine) {
  for (const char* act :
       {R"(activation="Relu")", R"(activation="Sigmoid")", R"(activation="HardSwish")",
        R"(activation="Clip", activation_params=[-0.5, 0.5])", R"(activation="LeakyRelu", activation_params=[0.1])",
        R"(activation="HardSigmoid", activation_params=[0.2, 0.5])"}) {
    for (const char* affine : {"output_bias=1.0", "output_scale=2.0", "output_scale=-1.5, output_bias=0.25"}) {
      RunCase({std::string(act) + " " + affine,
               std::string(R"(opset 17
        opset sampan 1
        graph g (x: f32[N,4,H,W]) -> (y) {
          w = const f32[16,4,1,1] random
          y = sampan::FusedConv(x, w) {)") +
                   act + ", " + affine + R"(} @c
        })",
               {std::map<std::string, Shape>{{"x", {2, 4, 1, 1}}}, std::map<std::string, Shape>{{"x", {1, 4, 5, 3}}}},
               "FusedConv c [onednn"});
    }
  }
}

}  // namespace
}  // namespace sampan::cpu::testing
