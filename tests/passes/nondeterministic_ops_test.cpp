// constant_folding and common_subexpression read the op registry's determinism
// trait: no op flagged random is folded into a constant or merged with a copy of
// itself, while the same graph with a deterministic op is.
#include "ops/draw_test_op.h"
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

// Two copies of one node, each reading the same constant, and their sum (ops that
// take no input ignore it; these graphs go to the passes directly, untyped).
std::string TwoCopies(const ops::OpDef& def) {
  const std::string op = def.domain.empty() ? def.op_type : def.domain + "::" + def.op_type;
  return R"(
    opset 17
    graph g () -> (y) {
      c = const f32[4] {0.25, 0.5, 0.75, 1}
      a = )" +
         op + R"((c) @first
      b = )" +
         op + R"((c) @second
      y = Sum(a, b) @sum
    }
  )";
}

// Runs one pass on the graph as it is (no verification: random ops have no inference).
Result<bool> RunPassDirectly(const char* name, ir::Graph& g) {
  const PassDef* pass = FindPass(name);
  if (pass == nullptr) return NotFound("no pass ", name);
  PassContext ctx;
  ctx.current_pass = name;
  return pass->run(g, ctx);
}

std::vector<const ops::OpDef*> RandomOps() {
  EXPECT_TRUE(ops::testing::kDrawRegistered);
  std::vector<const ops::OpDef*> out;
  for (const ops::OpDef* def : ops::AllOps())
    if (def->determinism == ops::Determinism::kRandom) out.push_back(def);
  return out;
}

TEST(NondeterministicOps, AreNeitherFoldedNorMerged) {
  const std::vector<const ops::OpDef*> random = RandomOps();
  ASSERT_GE(random.size(), 7u) << "the six ONNX random ops and sampan.test::Draw";
  for (const ops::OpDef* def : random) {
    SCOPED_TRACE(def->op_type);
    for (const char* pass : {"constant_folding", "common_subexpression"}) {
      SCOPED_TRACE(pass);
      auto parsed = ir::ParseGraph(TwoCopies(*def));
      ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
      ir::Graph& g = **parsed;
      Result<bool> changed = RunPassDirectly(pass, g);
      ASSERT_TRUE(changed.ok()) << changed.status().ToString();
      EXPECT_FALSE(*changed);
      const std::string op = (def->domain.empty() ? "" : def->domain + "::") + def->op_type;
      EXPECT_EQ(OpList(g), op + "," + op + ",Sum");
    }
  }
}

TEST(NondeterministicOps, ADeterministicOpIsFoldedAndMerged) {
  ops::OpDef relu = *ops::FindOp("", "Relu");
  ASSERT_EQ(relu.determinism, ops::Determinism::kDeterministic);
  // Merged into one copy; folded into constants.
  for (const auto& [pass, ops_left] :
       {std::pair{"common_subexpression", "Relu,Sum"}, std::pair{"constant_folding", ""}}) {
    SCOPED_TRACE(pass);
    auto parsed = ir::ParseGraph(TwoCopies(relu));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    Result<bool> changed = RunPassDirectly(pass, **parsed);
    ASSERT_TRUE(changed.ok()) << changed.status().ToString();
    EXPECT_TRUE(*changed);
    EXPECT_EQ(OpList(**parsed), ops_left);
  }
}

TEST(NondeterministicOps, DrawsStayDistinctThroughThePipeline) {
  ASSERT_TRUE(ops::testing::kDrawRegistered);
  // Through the PassManager (verified, typed) and then the reference executor: two
  // draws of one run differ, and a second run draws anew.
  const char* text = R"(
    opset 17
    graph g () -> (a, b) {
      a = sampan.test::Draw() @first
      b = sampan.test::Draw() @second
    }
  )";
  PassRun run;
  auto g = ParseAndRun(text, {"constant_folding", "common_subexpression"}, &run);
  EXPECT_EQ(OpList(*g), "sampan.test::Draw,sampan.test::Draw");
  EXPECT_TRUE(run.rewrites.empty());
  auto first = RunReference(std::move(g), {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->size(), 2u);
  EXPECT_NE((*first)[0].data<int64_t>()[0], (*first)[1].data<int64_t>()[0]);
}

}  // namespace
}  // namespace sampan::passes::testing
