// Engine and Context: profile selection and concurrent contexts on one engine.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "builder/builder.h"
#include "passes/pass_test_util.h"

namespace sampan::runtime {
namespace {

using passes::testing::MustParse;

const char* kNet = R"(
  opset 17
  graph net (x: f32[N,2,S], m: f32[N,3]) -> (y, z) {
    w = const f32[4,2,3] random
    b = const f32[4] random
    c = Conv(x, w, b) {pads=[1, 1]} @conv1
    y = Relu(c) @relu1
    wf = const f32[3,5] random
    m2 = MatMul(m, wf) @fc
    z = Sigmoid(m2) @sig
  }
)";

plan::ShapeRange Range(Shape min, Shape opt, Shape max) {
  return {std::move(min), std::move(opt), std::move(max)};
}

// Profile 0: batch 1..4, length 8..16; profile 1: batch 5..16, length 8..64.
std::shared_ptr<Engine> TwoProfileEngine() {
  builder::BuildConfig config;
  config.profiles = {
      plan::Profile{{"x", Range({1, 2, 8}, {2, 2, 16}, {4, 2, 16})}, {"m", Range({1, 3}, {2, 3}, {4, 3})}},
      plan::Profile{{"x", Range({5, 2, 8}, {8, 2, 32}, {16, 2, 64})}, {"m", Range({5, 3}, {8, 3}, {16, 3})}},
  };
  auto p = builder::Build(MustParse(kNet), config, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return nullptr;
  auto e = Engine::Create(std::move(p).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

Tensor Random(Shape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> real(-1.f, 1.f);
  Tensor t = Tensor::Alloc(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = real(rng);
  return t;
}

std::map<std::string, Tensor> Inputs(int64_t n, int64_t s, uint64_t seed = 1) {
  return {{"x", Random({n, 2, s}, seed)}, {"m", Random({n, 3}, seed + 1)}};
}

TEST(SelectProfile, PicksTheProfileThatFits) {
  auto engine = TwoProfileEngine();
  ASSERT_TRUE(engine);
  auto sel = [&](int64_t n, int64_t s) { return engine->SelectProfile({{"x", {n, 2, s}}, {"m", {n, 3}}}); };
  EXPECT_EQ(*sel(1, 8), 0);
  EXPECT_EQ(*sel(4, 16), 0);
  EXPECT_EQ(*sel(2, 12), 0);
  EXPECT_EQ(*sel(5, 8), 1);
  EXPECT_EQ(*sel(16, 64), 1);
  EXPECT_FALSE(sel(4, 32).ok()) << "batch 4 length 32 fits neither";
}

TEST(SelectProfile, ErrorNamesInputShapeAndRanges) {
  auto engine = TwoProfileEngine();
  ASSERT_TRUE(engine);
  // x's length 100 is outside both profiles; m fits profile 0 only.
  auto r = engine->SelectProfile({{"x", {2, 2, 100}}, {"m", {2, 3}}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("profile 0: input 'x' is " + ShapeToString({2, 2, 100}) + ", allowed 1..4x2x8..16"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("profile 1: input 'm' is " + ShapeToString({2, 3}) + ", allowed 5..16x3"), std::string::npos)
      << msg;
  auto big = engine->SelectProfile({{"x", {20, 2, 8}}, {"m", {20, 3}}});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("[20,3]"), std::string::npos) << big.status().message();

  // Wrong rank is outside every profile too.
  auto rank = engine->SelectProfile({{"x", {2, 2}}, {"m", {2, 3}}});
  EXPECT_FALSE(rank.ok());
  // The second input out of range is named.
  auto m = engine->SelectProfile({{"x", {2, 2, 8}}, {"m", {2, 4}}});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'m'"), std::string::npos) << m.status().message();
}

TEST(SelectProfile, NoProfilesMeansMinusOne) {
  auto p = builder::Build(MustParse(R"(
    opset 17
    graph g (x: f32[2,3]) -> (y) {
      y = Relu(x) @relu
    }
  )"),
                          builder::BuildConfig{}, nullptr);
  ASSERT_TRUE(p.ok());
  auto e = Engine::Create(std::move(p).value());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*(*e)->SelectProfile({{"x", {2, 3}}}), -1);
}

TEST(Context, RunRecordsProfileAndRejectsOutOfRange) {
  auto engine = TwoProfileEngine();
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  auto a = (*ctx)->Run(Inputs(2, 10));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*ctx)->last_profile(), 0);
  EXPECT_EQ((*a)[0].shape(), (Shape{2, 4, 10}));
  auto b = (*ctx)->Run(Inputs(8, 40));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*ctx)->last_profile(), 1);
  EXPECT_GE((*ctx)->last_timing().compute_ms, 0.0);
  auto c = (*ctx)->Run(Inputs(2, 100));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'x'"), std::string::npos) << c.status().message();
  // Missing input: the executor names it.
  auto d = (*ctx)->Run({{"x", Random({2, 2, 8}, 3)}});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("'m'"), std::string::npos) << d.status().message();
}

// Pipelined runs (the bench's overlap): a host backend runs each Enqueue to the end; Finish
// hands back the timings oldest first; the order of calls and the shapes are checked.
TEST(Context, EnqueueAndFinishOnAHostBackend) {
  auto engine = TwoProfileEngine();
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ((*ctx)->max_in_flight(), 1);
  auto none = (*ctx)->Finish();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*ctx)->Enqueue(Inputs(2, 10)).ok());
  Status second = (*ctx)->Enqueue(Inputs(2, 10));
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition) << second.ToString();
  EXPECT_NE(second.message().find("Finish one first"), std::string::npos) << second.ToString();
  auto t = (*ctx)->Finish();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_GT(t->compute_ms, 0.0);
  EXPECT_GE(t->enqueue_ms, 0.0);
  Status bad = (*ctx)->Enqueue(Inputs(2, 100));  // outside every profile
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'x'"), std::string::npos) << bad.ToString();
  EXPECT_FALSE((*ctx)->Finish().ok()) << "a refused Enqueue leaves nothing in flight";
  auto r = (*ctx)->Run(Inputs(2, 10));  // Run still works between pipelined runs
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

bool BitEqual(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(Context, ConcurrentContextsOnOneEngineAgree) {
  auto engine = TwoProfileEngine();
  ASSERT_TRUE(engine);
  // Several input sets, each with a reference result from a single context.
  std::vector<std::map<std::string, Tensor>> sets = {Inputs(1, 8, 1), Inputs(3, 16, 2), Inputs(8, 32, 3),
                                                     Inputs(16, 64, 4)};
  std::vector<std::vector<Tensor>> expected;
  {
    auto ctx = engine->CreateContext();
    ASSERT_TRUE(ctx.ok());
    for (const auto& s : sets) {
      auto r = (*ctx)->Run(s);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      expected.push_back(*r);
    }
  }
  constexpr int kThreads = 6;
  constexpr int kIters = 8;
  std::vector<std::unique_ptr<Context>> contexts;
  for (int t = 0; t < kThreads; ++t) {
    auto c = engine->CreateContext();
    ASSERT_TRUE(c.ok());
    contexts.push_back(std::move(c).value());
  }
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t]() {
      for (int i = 0; i < kIters; ++i) {
        const size_t k = static_cast<size_t>(t + i) % sets.size();
        auto r = contexts[static_cast<size_t>(t)]->Run(sets[k]);
        if (!r.ok()) {
          errors[static_cast<size_t>(t)] = r.status().ToString();
          return;
        }
        for (size_t o = 0; o < r->size(); ++o)
          if (!BitEqual((*r)[o], expected[k][o])) {
            errors[static_cast<size_t>(t)] = StrCat("thread ", t, " iteration ", i, " output ", o, " differs");
            return;
          }
        const int want_profile = sets[k].at("x").dim(0) <= 4 ? 0 : 1;
        if (contexts[static_cast<size_t>(t)]->last_profile() != want_profile) {
          errors[static_cast<size_t>(t)] = StrCat("thread ", t, " wrong profile");
          return;
        }
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(Engine, UnhealthyEngineRefusesWork) {
  auto engine = TwoProfileEngine();
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  engine->MarkUnhealthy();
  EXPECT_FALSE(engine->healthy());
  EXPECT_FALSE(engine->CreateContext().ok());
  EXPECT_EQ((*ctx)->Run(Inputs(1, 8)).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace sampan::runtime
