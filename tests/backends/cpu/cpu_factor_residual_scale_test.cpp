// The cpu lowering's FactorResidualScale: x + x * s becomes x * (1 + s) (one pass over x), in
// either operand order, with s computed or constant, computing what the graph computed; a
// product read elsewhere, or an s that would broadcast x to a larger shape, stays as written.
#include "backends/cpu/cpu_test_util.h"

namespace sampan::cpu::testing {
namespace {

// Builds `text` as a cpu plan (passes on) and returns the op the node named "add" became, after
// checking its outputs against the reference executor's on random inputs.
std::string AddBecameAndMatch(const std::string& text, const std::map<std::string, Shape>& shapes) {
  builder::BuildConfig config;
  config.backend = "cpu";
  auto plan = builder::Build(Parse(text), config, nullptr);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return "";
  std::string op;
  for (const auto& n : plan->graph->nodes())
    if (n->name == "add") op = n->op_type;
  runtime::EngineOptions options;
  options.threads = 2;
  auto engine = runtime::Engine::Create(std::move(plan).value(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return "";
  reference::Executor ref(std::shared_ptr<const ir::Graph>(Parse(text)));
  std::mt19937_64 rng(5);
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, shape] : shapes) inputs[name] = RandomTensor(DType::kFloat32, shape, rng);
  auto want = ref.Run(inputs);
  auto ctx = (*engine)->CreateContext();
  EXPECT_TRUE(want.ok() && ctx.ok());
  if (!want.ok() || !ctx.ok()) return "";
  auto got = (*ctx)->Run(inputs);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  if (got.ok()) {
    for (size_t i = 0; i < got->size(); ++i) EXPECT_LE(Mismatch((*got)[i], (*want)[i], 1e-5, 1e-5), 1.0) << i;
  }
  return op;
}

// The PP-OCRv4 detector's residual squeeze-excitation: conv, pool, two 1x1 convs, hard sigmoid,
// then conv * s added to conv.
std::string Rse(const std::string& tail) {
  return R"(opset 17
    graph g (x: f32[N,8,H,W]) -> (y) {
      w = const f32[16,8,3,3] random
      c = Conv(x, w) {pads=[1,1,1,1]} @conv
      p = GlobalAveragePool(c) @gap
      w1 = const f32[4,16,1,1] random
      r = Conv(p, w1) @se1
      w2 = const f32[16,4,1,1] random
      q = Conv(r, w2) @se2
      s = HardSigmoid(q) {alpha=0.2, beta=0.5} @hs
      )" +
         tail + "\n    }\n";
}

TEST(CpuFactorResidualScale, ResidualSqueezeExcitation) {
  const std::map<std::string, Shape> shapes{{"x", {2, 8, 9, 7}}};
  for (const char* tail : {"m = Mul(c, s) @mul\n y = Add(c, m) @add", "m = Mul(s, c) @mul\n y = Add(m, c) @add"})
    EXPECT_EQ(AddBecameAndMatch(Rse(tail), shapes), "Mul") << tail;
  // A constant per-channel s: 1 + s is folded.
  EXPECT_EQ(AddBecameAndMatch(Rse("k = const f32[16,1,1] random\n m = Mul(c, k) @mul\n y = Add(c, m) @add"), shapes),
            "Mul");
}

TEST(CpuFactorResidualScale, LeavesOtherSumsAlone) {
  // The product is also a graph output.
  const std::string shared = R"(opset 17
    graph g (x: f32[N,8,H,W], s: f32[N,8,1,1]) -> (y, m) {
      m = Mul(x, s) @mul
      y = Add(x, m) @add
    })";
  EXPECT_EQ(AddBecameAndMatch(shared, {{"x", {1, 8, 5, 4}}, {"s", {1, 8, 1, 1}}}), "Add");
  // s is larger than x: x * s broadcasts x, so the sum is not x's shape.
  const std::string wider = R"(opset 17
    graph g (x: f32[N,8,1,1], s: f32[N,8,H,W]) -> (y) {
      m = Mul(x, s) @mul
      y = Add(x, m) @add
    })";
  EXPECT_EQ(AddBecameAndMatch(wider, {{"x", {1, 8, 1, 1}}, {"s", {1, 8, 5, 4}}}), "Add");
  // Another operand: x + y * s.
  const std::string other = R"(opset 17
    graph g (x: f32[N,8,H,W], z: f32[N,8,H,W], s: f32[N,8,1,1]) -> (y) {
      m = Mul(z, s) @mul
      y = Add(x, m) @add
    })";
  EXPECT_EQ(AddBecameAndMatch(other, {{"x", {1, 8, 5, 4}}, {"z", {1, 8, 5, 4}}, {"s", {1, 8, 1, 1}}}), "Add");
}

}  // namespace
}  // namespace sampan::cpu::testing
