// sampan::AddLayerNorm on the cpu backend: the row kernel (vec::AddLayerNormRow) against a
// double-precision reference, the kernel family against the reference kernel on random shapes
// (odd hidden sizes, operands broadcast along leading dims, no B, no bias, a normalised block of
// two dims) at every instruction set variant this CPU has, and the lowering rewrite that forms
// the op from Add -> LayerNormalization (and leaves the pairs it must not fuse alone).
#include <cmath>

#include "backends/cpu/cpu_test_util.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/vec.h"

namespace sampan::cpu::testing {
namespace {

using S = std::map<std::string, Shape>;

std::vector<Isa> Variants() {
  std::vector<Isa> v = {Isa::kBaseline};
  if (static_cast<int>(HostIsa()) >= static_cast<int>(Isa::kAvx2)) v.push_back(Isa::kAvx2);
  if (static_cast<int>(HostIsa()) >= static_cast<int>(Isa::kAvx512)) v.push_back(Isa::kAvx512);
  return v;
}

TEST(CpuAddLayerNorm, RowKernelMatchesADoubleReferenceInEveryVariant) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (Isa isa : Variants()) {
    ScopedKernelVariant pin(isa);
    ASSERT_TRUE(pin.ok());
    SCOPED_TRACE(IsaName(isa));
    for (int64_t n : {1, 7, 8, 15, 16, 17, 33, 100, 384, 385}) {
      SCOPED_TRACE(n);
      std::vector<float> a(n), b(n), s(n), bias(n), y(n);
      for (auto* v : {&a, &b, &s, &bias})
        for (float& f : *v) f = u(rng);
      for (const float* bp : {static_cast<const float*>(bias.data()), static_cast<const float*>(nullptr)}) {
        vec::AddLayerNormRow(a.data(), b.data(), s.data(), bp, 1e-5f, y.data(), n);
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; ++i) mean += double(a[i] + b[i]);
        mean /= double(n);
        for (int64_t i = 0; i < n; ++i) var += (double(a[i] + b[i]) - mean) * (double(a[i] + b[i]) - mean);
        const double rstd = 1.0 / std::sqrt(var / double(n) + 1e-5);
        for (int64_t i = 0; i < n; ++i) {
          const double want = (double(a[i] + b[i]) - mean) * rstd * s[i] + (bp ? bp[i] : 0.0);
          EXPECT_NEAR(y[i], want, 2e-4 * (1 + std::fabs(want))) << i;
        }
      }
    }
  }
}

std::string AddNorm(const std::string& a_type, const std::string& b_type, const std::string& h, const char* attrs,
                    bool bias = true) {
  return StrCat(R"(opset 17
    opset sampan 1
    graph g (a: )",
                a_type, ", b: ", b_type, R"() -> (y) {
      s = const f32[)",
                h, R"(] random
      c = const f32[)",
                h, "] random\n      y = sampan::AddLayerNorm(a, b, s", bias ? ", c" : "", ") ", attrs,
                " @aln\n    }\n");
}

void AddLayerNormCases() {
  // Hidden sizes around the vector widths, odd ones, and MiniLM's 384; rows from 1 up.
  for (int64_t h : {1, 7, 17, 33, 384, 385}) {
    const std::string hs = StrCat(h);
    RunCase({StrCat("residual_h", h),
             AddNorm(StrCat("f32[N,S,", h, "]"), StrCat("f32[N,S,", h, "]"), hs, "{}"),
             {S{{"a", {1, 1, h}}, {"b", {1, 1, h}}}, S{{"a", {2, 5, h}}, {"b", {2, 5, h}}},
              S{{"a", {3, 13, h}}, {"b", {3, 13, h}}}},
             "AddLayerNorm aln [cpu]"});
  }
  // A position table [S, H] added to [N, S, H]; a vector [H]; either operand the smaller one.
  RunCase({"broadcast_b_table",
           AddNorm("f32[N,S,24]", "f32[S,24]", "24", "{epsilon=1e-6}"),
           {S{{"a", {3, 5, 24}}, {"b", {5, 24}}}},
           "AddLayerNorm aln [cpu]"});
  RunCase({"broadcast_a_vector",
           AddNorm("f32[1,1,31]", "f32[N,S,31]", "31", "{}", false),
           {S{{"a", {1, 1, 31}}, {"b", {4, 3, 31}}}},
           "AddLayerNorm aln [cpu]"});
  // The normalised block is two dims (axis = 1 of a 3-D tensor).
  RunCase({"axis1",
           AddNorm("f32[N,3,5]", "f32[N,3,5]", "3,5", "{axis=1}"),
           {S{{"a", {4, 3, 5}}, {"b", {4, 3, 5}}}},
           "AddLayerNorm aln [cpu]"});
  // No B: a LayerNormalization.
  RunCase({"no_b",
           R"(opset 17
    opset sampan 1
    graph g (a: f32[N,19]) -> (y) {
      s = const f32[19] random
      y = sampan::AddLayerNorm(a, _, s) @aln
    })",
           {S{{"a", {6, 19}}}},
           "AddLayerNorm aln [cpu]"});
  // Broadcast inside the rows ([N, 1, H] into [N, S, H]): the reference kernel, still right.
  RunCase({"broadcast_middle_falls_back",
           AddNorm("f32[N,S,8]", "f32[N,1,8]", "8", "{}"),
           {S{{"a", {2, 3, 8}}, {"b", {2, 1, 8}}}},
           "AddLayerNorm aln [reference]"});
}

TEST(CpuAddLayerNorm, MatchesTheReferenceInEveryVariant) {
  for (Isa isa : Variants()) {
    ScopedKernelVariant pin(isa);
    ASSERT_TRUE(pin.ok());
    SCOPED_TRACE(IsaName(isa));
    AddLayerNormCases();
  }
}

// The op the nodes became in a cpu plan built from `text` (passes off: the lowering alone).
std::map<std::string, std::string> OpsAfterLowering(const std::string& text) {
  builder::BuildConfig config;
  config.backend = "cpu";
  for (const passes::PassDef* p : passes::AllPasses()) config.disabled_passes.insert(p->name);
  auto plan = builder::Build(Parse(text), config, nullptr);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  std::map<std::string, std::string> ops;
  if (plan.ok())
    for (const auto& n : plan->graph->nodes()) ops[n->name] = n->op_type;
  return ops;
}

TEST(CpuAddLayerNorm, TheLoweringFusesResidualSumsIntoTheNorm) {
  // BERT's residual block and its embeddings (a position table broadcast over the batch).
  const std::string text = R"(opset 17
    graph g (x: f32[N,7,32], r: f32[N,7,32]) -> (y, e) {
      s = const f32[32] random
      c = const f32[32] random
      t = Add(x, r) @add
      y = LayerNormalization(t, s, c) @ln
      pos = const f32[7,32] random
      p = Add(pos, x) @add2
      e = LayerNormalization(p, s) {epsilon=1e-12} @ln2
    })";
  const auto ops = OpsAfterLowering(text);
  EXPECT_EQ(ops.count("add"), 0u);
  EXPECT_EQ(ops.count("add2"), 0u);
  ASSERT_TRUE(ops.count("ln") && ops.count("ln2"));
  EXPECT_EQ(ops.at("ln"), "AddLayerNorm");
  EXPECT_EQ(ops.at("ln2"), "AddLayerNorm");
  RunCase({"bert_blocks", text, {S{{"x", {2, 7, 32}}, {"r", {2, 7, 32}}}}, "AddLayerNorm ln2 [cpu]"});

  // Left alone: the sum is read elsewhere too; the norm's Mean output is used; the operand
  // broadcasts inside the rows.
  const std::string shared = R"(opset 17
    graph g (x: f32[N,16], r: f32[N,16]) -> (y, t) {
      s = const f32[16] random
      t = Add(x, r) @add
      y = LayerNormalization(t, s) @ln
    })";
  EXPECT_EQ(OpsAfterLowering(shared).at("ln"), "LayerNormalization");
  const std::string stats = R"(opset 17
    graph g (x: f32[N,16], r: f32[N,16]) -> (y, m) {
      s = const f32[16] random
      t = Add(x, r) @add
      y, m = LayerNormalization(t, s) @ln
    })";
  EXPECT_EQ(OpsAfterLowering(stats).at("ln"), "LayerNormalization");
  const std::string middle = R"(opset 17
    graph g (x: f32[N,4,16], r: f32[N,1,16]) -> (y) {
      s = const f32[16] random
      t = Add(x, r) @add
      y = LayerNormalization(t, s) @ln
    })";
  EXPECT_EQ(OpsAfterLowering(middle).at("ln"), "LayerNormalization");
  RunCase({"not_fused", middle, {S{{"x", {2, 4, 16}}, {"r", {2, 1, 16}}}}, "LayerNormalization ln [cpu]"});
}

}  // namespace
}  // namespace sampan::cpu::testing
