// The plan file: round trip, corruption/truncation/magic/version/fingerprint
// errors, portable plans, and a stored v1 fixture that must keep loading.
#include "plan/plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/npy.h"
#include "builder/builder.h"
#include "passes/pass_test_util.h"
#include "runtime/engine.h"

#ifndef SAMPAN_SOURCE_DIR
#error "tests/CMakeLists.txt defines SAMPAN_SOURCE_DIR"
#endif

namespace sampan::plan {
namespace {

using passes::testing::MustParse;

const char* kNet = R"(
  opset 17
  graph net (x: f32[N,3,6,6]) -> (y, z) {
    w = const f32[4,3,3,3] random
    b = const f32[4] random
    c = Conv(x, w, b) {pads=[1, 1, 1, 1]} @conv1
    y = Relu(c) @relu1
    p = GlobalAveragePool(y) @pool
    f = Flatten(p) @flatten
    wf = const f32[4,3] random
    bf = const f32[3] random
    m = MatMul(f, wf) @fc
    z = Add(m, bf) @fc_bias
  }
)";

Plan BuildNet(builder::BuildConfig config = {}) {
  if (config.profiles.empty()) config.profiles = {Profile{{"x", ShapeRange{{1, 3, 6, 6}, {2, 3, 6, 6}, {4, 3, 6, 6}}}}};
  auto p = builder::Build(MustParse(kNet), config, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(p).value() : Plan{};
}

std::map<std::string, Tensor> Inputs(int64_t batch, uint64_t seed = 11) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> real(-2.f, 2.f);
  Tensor x = Tensor::Alloc(DType::kFloat32, {batch, 3, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] = real(rng);
  return {{"x", x}};
}

Result<std::vector<Tensor>> RunPlan(Plan p, const std::map<std::string, Tensor>& inputs) {
  SP_ASSIGN_OR_RETURN(auto engine, runtime::Engine::Create(std::move(p)));
  SP_ASSIGN_OR_RETURN(auto ctx, engine->CreateContext());
  return ctx->Run(inputs);
}

bool BitEqual(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::string TempPath(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("sampan_plan_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

Result<Plan> Parse(std::string bytes) {
  return ParsePlan(std::make_shared<const std::string>(std::move(bytes)), "test.plan");
}

TEST(Plan, HeaderLayout) {
  Plan p = BuildNet();
  auto bytes = SerializePlan(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_GE(bytes->size(), sizeof(PlanHeader));
  PlanHeader h;
  std::memcpy(&h, bytes->data(), sizeof(h));
  EXPECT_EQ(std::memcmp(h.magic, kMagic, 8), 0);
  EXPECT_EQ(h.format_version, kFormatVersion);
  EXPECT_EQ(h.header_size, 64u);
  EXPECT_EQ(h.meta_offset, 64u);
  EXPECT_EQ(h.blob_offset % kAlignment, 0u);
  EXPECT_EQ(h.blob_offset + h.blob_size, bytes->size());
  EXPECT_EQ(h.checksum, Hash64(bytes->data() + h.meta_offset, bytes->size() - h.meta_offset));
}

TEST(Plan, RoundTripRunsBitForBit) {
  Plan p = BuildNet();
  auto inputs = Inputs(3);
  auto bytes = SerializePlan(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto expected = RunPlan(p, inputs);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();

  const std::string path = TempPath("round_trip.plan");
  ASSERT_TRUE(WritePlan(p, path).ok());
  EXPECT_TRUE(LooksLikePlan(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  EXPECT_EQ(ReadBytes(path), *bytes) << "WritePlan writes exactly SerializePlan's bytes";
  for (int from_file = 0; from_file < 2; ++from_file) {
    SCOPED_TRACE(from_file ? "ReadPlan" : "ParsePlan");
    auto loaded = from_file ? ReadPlan(path) : Parse(*bytes);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(ir::PrintGraph(*loaded->graph, ir::PrintOptions{-1, true}),
              ir::PrintGraph(*p.graph, ir::PrintOptions{-1, true}));
    EXPECT_EQ(loaded->builder_version, p.builder_version);
    EXPECT_EQ(loaded->created_utc, p.created_utc);
    EXPECT_EQ(loaded->fingerprint.backend, "reference");
    EXPECT_EQ(loaded->options.precision, "fp32");
    EXPECT_EQ(loaded->rewrites, p.rewrites);
    ASSERT_EQ(loaded->profiles.size(), 1u);
    EXPECT_EQ(loaded->profiles[0].at("x").opt, (Shape{2, 3, 6, 6}));
    EXPECT_EQ(loaded->choices.size(), p.choices.size());
    for (const auto& [name, c] : p.choices) EXPECT_EQ(loaded->choices.at(name).precision, c.precision) << name;
    // Weights are 64-byte aligned in the loaded plan.
    for (const ir::Value* v : loaded->graph->values()) {
      if (v->is_constant() && v->data.nbytes() > 0) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data.raw()) % kAlignment, 0u) << v->name();
      }
    }
    auto got = RunPlan(std::move(loaded).value(), inputs);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), expected->size());
    for (size_t i = 0; i < got->size(); ++i) EXPECT_TRUE(BitEqual((*got)[i], (*expected)[i])) << "output " << i;
    // Re-serializing the loaded plan gives the same bytes.
  }
  auto again = ReadPlan(path);
  ASSERT_TRUE(again.ok());
  auto bytes2 = SerializePlan(*again);
  ASSERT_TRUE(bytes2.ok());
  EXPECT_EQ(*bytes2, *bytes);
}

// A node's kernel choice is stored as fields (family, algorithm, math mode, layout) and
// comes back equal; the text form parses back to the same fields.
TEST(Plan, TacticFieldsRoundTrip) {
  Plan p = BuildNet();
  const auto& nodes = p.graph->nodes();
  ASSERT_GE(nodes.size(), 3u);
  const Tactic given[3] = {Tactic{"cudnn conv", 5003, true, true}, Tactic{"cublaslt gemm", 0, false, false},
                           Tactic{"elementwise"}};
  for (size_t i = 0; i < 3; ++i) p.choices[nodes[i]->name].tactic = given[i];
  auto bytes = SerializePlan(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto loaded = Parse(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(loaded->choices.count(nodes[i]->name)) << nodes[i]->name;
    EXPECT_EQ(loaded->choices.at(nodes[i]->name).tactic, given[i]) << nodes[i]->name;
  }

  const Tactic t{"cudnn graph conv", 1004, true, true};
  EXPECT_EQ(t.ToString(), "cudnn graph conv algo=1004 tf32 nhwc");
  auto back = Tactic::Parse(t.ToString());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, t);
  EXPECT_EQ(Tactic{"host"}.ToString(), "host");
  for (const char* bad : {"cudnn conv algo=", "cudnn conv algo=x1", "cudnn conv algo=-2", "gemm algo=3x"}) {
    auto r = Tactic::Parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("algo="), std::string::npos) << r.status().ToString();
  }
}

// ONNX does not enforce UTF-8 and file paths are bytes: a plan must keep such
// names (found by tests/fuzz, fuzz_onnx: the plan's proto3 `string` fields made
// a plan that built fine fail to parse).
TEST(Plan, NamesThatAreNotUtf8RoundTrip) {
  Plan p = BuildNet();
  p.source_model = "/models/caf\xe9.onnx";  // Latin-1
  p.graph->name = "net\xff";
  ir::Node* first = p.graph->nodes().front().get();
  first->name = "conv\xc3";  // a truncated UTF-8 sequence
  ir::Value* mid = first->outputs()[0];
  ASSERT_TRUE(p.graph->RenameValue(mid, "c\x80").ok());
  p.graph->opsets["dom\xfe"] = 1;
  auto bytes = SerializePlan(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto loaded = Parse(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->source_model, p.source_model);
  EXPECT_EQ(loaded->graph->name, "net\xff");
  EXPECT_EQ(loaded->graph->opsets.at("dom\xfe"), 1);
  EXPECT_EQ(ir::PrintGraph(*loaded->graph, ir::PrintOptions{-1, true}),
            ir::PrintGraph(*p.graph, ir::PrintOptions{-1, true}));
}

// Control flow: If branches and a Loop body (with an If nested in it) are stored in the plan,
// captures in their binding order, and the loaded plan prints and runs the same, on the
// reference backend and on cpu (where the plan's subgraph nodes are reference steps).
TEST(Plan, SubgraphsRoundTrip) {
  const char* text = R"(
    opset 17
    graph g (c: bool[], m: i64[], x: f32[2]) -> (y, z, s) {
      k = const f32[2] {1, 2}
      w = const f32[2] {0.5, -1}
      y = If(c) {then_branch = graph t () -> (a) { a = Add(x, k) },
                 else_branch = graph e () -> (n) { n = Neg(x) }}
      z, s = Loop(m, _, x) {body = graph b (i: i64[], cond: bool[], acc: f32[2]) -> (cond, acc2, t) {
        d = If(c) {then_branch = graph t2 () -> (p) { p = Mul(w, k) },
                   else_branch = graph e2 () -> (q) { q = Sub(w, acc) }}
        acc2 = Add(acc, d)
        t = ReduceSum(acc2) {keepdims = 0}
      }}
    })";
  for (const char* backend : {"reference", "cpu"}) {
    SCOPED_TRACE(backend);
    builder::BuildConfig config;
    config.backend = backend;
    auto p = builder::Build(MustParse(text), config, nullptr);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto bytes = SerializePlan(*p);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    auto loaded = Parse(*bytes);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(ir::PrintGraph(*loaded->graph, ir::PrintOptions{-1, true}),
              ir::PrintGraph(*p->graph, ir::PrintOptions{-1, true}));
    auto again = SerializePlan(*loaded);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *bytes) << "a loaded plan serializes to the same bytes";
    for (bool cond : {true, false}) {
      std::map<std::string, Tensor> in{{"c", Tensor::FromVector<bool>(DType::kBool, {cond}, {})},
                                       {"m", Tensor::FromVector<int64_t>(DType::kInt64, {3}, {})},
                                       {"x", Tensor::FromVector<float>(DType::kFloat32, {1, 2}, {2})}};
      auto want = RunPlan(*p, in);
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      auto got = RunPlan(*loaded, in);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(got->size(), 3u);
      for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(BitEqual((*got)[i], (*want)[i])) << "output " << i << " c=" << cond;
      // y: x + k or -x; z after three steps of acc + (w * k) or acc + (w - acc).
      const float y0 = cond ? 2.f : -1.f;
      EXPECT_EQ((*got)[0].data<float>()[0], y0);
      EXPECT_EQ((*got)[1].data<float>()[0], cond ? 1.f + 3 * 0.5f : 0.5f);
    }
  }
}

// Sequence and optional constants (what constant folding makes of SequenceEmpty or
// SequenceConstruct over constants) are stored item by item.
TEST(Plan, SequenceAndOptionalConstantsRoundTrip) {
  auto g = MustParse(R"(
    opset 17
    graph g (x: f32[2]) -> (y) {
      y = Neg(x)
    })");
  const Tensor a = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3}, {3});
  const Tensor b = Tensor::FromStrings({"é", ""}, {2});
  ASSERT_TRUE(g->AddConstant("seq", Tensor::Sequence(DType::kFloat32, {a, a})).ok());
  ASSERT_TRUE(g->AddConstant("empty", Tensor::Sequence(DType::kUndefined, {})).ok());
  ASSERT_TRUE(g->AddConstant("some", Tensor::Optional(DType::kString, b)).ok());
  ASSERT_TRUE(g->AddConstant("none", Tensor::Optional(DType::kSequence, std::nullopt)).ok());
  Plan p;
  p.graph = std::move(g);
  p.fingerprint.backend = "reference";
  auto bytes = SerializePlan(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto loaded = Parse(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Tensor& seq = loaded->graph->FindValue("seq")->data;
  ASSERT_TRUE(seq.is_sequence());
  EXPECT_EQ(seq.elem_dtype(), DType::kFloat32);
  ASSERT_EQ(seq.items().size(), 2u);
  EXPECT_TRUE(BitEqual(seq.items()[1], a));
  EXPECT_TRUE(loaded->graph->FindValue("empty")->data.items().empty());
  const Tensor& some = loaded->graph->FindValue("some")->data;
  ASSERT_TRUE(some.is_optional());
  ASSERT_EQ(some.items().size(), 1u);
  EXPECT_EQ(some.items()[0].strings()[0], "é");
  EXPECT_EQ(some.items()[0].strings()[1], "");
  const Tensor& none = loaded->graph->FindValue("none")->data;
  EXPECT_TRUE(none.is_optional() && none.items().empty());
  EXPECT_EQ(none.elem_dtype(), DType::kSequence);
  auto again = SerializePlan(*loaded);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *bytes);
}

TEST(Plan, Fp16PlanRoundTrips) {
  builder::BuildConfig config;
  config.precision = builder::Precision::kFP16;
  Plan p = BuildNet(config);
  auto bytes = SerializePlan(p);
  ASSERT_TRUE(bytes.ok());
  auto loaded = Parse(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto inputs = Inputs(2);
  auto a = RunPlan(p, inputs), b = RunPlan(std::move(loaded).value(), inputs);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->size(); ++i) EXPECT_TRUE(BitEqual((*a)[i], (*b)[i]));
}

TEST(Plan, AnyFlippedByteAfterHeaderIsAChecksumError) {
  auto bytes = SerializePlan(BuildNet());
  ASSERT_TRUE(bytes.ok());
  int failures = 0;
  for (size_t i = sizeof(PlanHeader); i < bytes->size(); ++i) {
    std::string corrupt = *bytes;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x01);
    auto r = Parse(corrupt);
    if (r.ok() || r.status().message().find("checksum") == std::string::npos) {
      if (++failures < 5) ADD_FAILURE() << "byte " << i << ": " << (r.ok() ? "loaded" : r.status().ToString());
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Plan, FlippedHeaderBitsNeverCrash) {
  auto bytes = SerializePlan(BuildNet());
  ASSERT_TRUE(bytes.ok());
  for (size_t i = 0; i < offsetof(PlanHeader, reserved); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string corrupt = *bytes;
      corrupt[i] = static_cast<char>(corrupt[i] ^ (1 << bit));
      auto r = Parse(corrupt);
      // Most fields make the load fail; a shorter meta_size may still parse, but must be safe to use.
      if (r.ok()) {
        EXPECT_EQ(i / 8, offsetof(PlanHeader, meta_size) / 8) << "byte " << i << " bit " << bit;
      }
    }
  // A meta_size that wraps around must not read past the buffer.
  std::string wrap = *bytes;
  const uint64_t huge = ~uint64_t{0} - 10;
  std::memcpy(wrap.data() + offsetof(PlanHeader, meta_size), &huge, 8);
  EXPECT_FALSE(Parse(wrap).ok());
  const uint64_t big = (uint64_t{1} << 63) + 100;
  std::memcpy(wrap.data() + offsetof(PlanHeader, meta_size), &big, 8);
  EXPECT_FALSE(Parse(wrap).ok());
  std::memcpy(wrap.data() + offsetof(PlanHeader, blob_offset), &big, 8);
  EXPECT_FALSE(Parse(wrap).ok());
}

TEST(Plan, CorruptChecksumFieldIsDetected) {
  auto bytes = SerializePlan(BuildNet());
  ASSERT_TRUE(bytes.ok());
  std::string corrupt = *bytes;
  corrupt[offsetof(PlanHeader, checksum)] ^= 0x40;
  auto r = Parse(corrupt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().message();
}

TEST(Plan, TruncatedFile) {
  auto bytes = SerializePlan(BuildNet());
  ASSERT_TRUE(bytes.ok());
  const std::string path = TempPath("truncated.plan");
  for (size_t keep :
       {bytes->size() - 1, bytes->size() / 2, sizeof(PlanHeader) + 1, sizeof(PlanHeader), size_t{40}, size_t{8}}) {
    SCOPED_TRACE(keep);
    auto r = Parse(bytes->substr(0, keep));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
    WriteBytes(path, bytes->substr(0, keep));
    auto f = ReadPlan(path);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status().message();
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
  }
  // Trailing garbage is an error too.
  auto r = Parse(*bytes + "xyz");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("trailing"), std::string::npos) << r.status().message();
}

TEST(Plan, BadMagic) {
  auto bytes = SerializePlan(BuildNet());
  ASSERT_TRUE(bytes.ok());
  std::string bad = *bytes;
  bad[0] = 'X';
  auto r = Parse(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("magic"), std::string::npos) << r.status().message();
  const std::string path = TempPath("bad_magic.plan");
  WriteBytes(path, bad);
  EXPECT_FALSE(LooksLikePlan(path));
  auto f = ReadPlan(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("not a Sampan plan"), std::string::npos) << f.status().message();
  // An ONNX file (or anything else) is not a plan.
  WriteBytes(path, std::string("\x08\x07\x12\x07pytorch", 11) + std::string(100, '\0'));
  EXPECT_FALSE(LooksLikePlan(path));
  EXPECT_FALSE(ReadPlan(path).ok());
  EXPECT_EQ(ReadPlan(TempPath("does_not_exist.plan")).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(Parse("").ok());
}

TEST(Plan, UnsupportedFormatVersion) {
  auto bytes = SerializePlan(BuildNet());
  ASSERT_TRUE(bytes.ok());
  for (uint32_t v : {0u, kFormatVersion + 1, 999u}) {
    std::string patched = *bytes;
    std::memcpy(patched.data() + offsetof(PlanHeader, format_version), &v, 4);
    auto r = Parse(patched);
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_NE(r.status().message().find("version " + std::to_string(v)), std::string::npos) << r.status().message();
  }
}

TEST(Plan, ForeignFingerprintIsRejectedNamingTheField) {
  Plan p = BuildNet();
  p.fingerprint.gpu_name = "NVIDIA H100 80GB HBM3";
  p.fingerprint.cuda_version = "12.4";
  auto bytes = SerializePlan(p);
  ASSERT_TRUE(bytes.ok());
  auto loaded = Parse(*bytes);
  ASSERT_TRUE(loaded.ok()) << "parsing is device-independent: " << loaded.status().ToString();
  EXPECT_EQ(loaded->fingerprint.gpu_name, "NVIDIA H100 80GB HBM3");
  auto engine = runtime::Engine::Create(std::move(loaded).value());
  ASSERT_FALSE(engine.ok());
  const std::string msg = engine.status().message();
  EXPECT_NE(msg.find("gpu_name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NVIDIA H100 80GB HBM3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda_version"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("backend:"), std::string::npos) << "the backend matches, so it is not listed: " << msg;
  // Through a file, the error names the file.
  const std::string path = TempPath("foreign.plan");
  ASSERT_TRUE(WritePlan(p, path).ok());
  auto loaded_file = runtime::Engine::Load(path);
  ASSERT_FALSE(loaded_file.ok());
  EXPECT_NE(loaded_file.status().ToString().find("gpu_name"), std::string::npos);
  EXPECT_NE(loaded_file.status().ToString().find(path), std::string::npos) << loaded_file.status().ToString();
}

// A plan's profiles are checked on load (found by tests/fuzz, fuzz_plan: a profile
// shorter than its input's rank was read past its end when choosing a profile).
TEST(Plan, ProfilesThatDoNotFitTheirInputAreRejected) {
  struct Case {
    const char* what;
    ShapeRange range;
    const char* input;
    const char* expected;
  };
  const Case cases[] = {
      {"short rank", {{1, 3}, {2, 3}, {4, 3}}, "x", "shapes of rank 2 for an input of rank 4"},
      {"ranks differ", {{1, 3, 6, 6}, {2, 3, 6}, {4, 3, 6, 6}}, "x", "different ranks (4, 3, 4)"},
      {"min above opt", {{3, 3, 6, 6}, {2, 3, 6, 6}, {4, 3, 6, 6}}, "x", "dimension 0 needs 0 <= min <= opt <= max"},
      {"negative", {{-1, 3, 6, 6}, {2, 3, 6, 6}, {4, 3, 6, 6}}, "x", "got -1, 2, 4"},
      {"no such input", {{1}, {1}, {1}}, "nope", "the graph has no such input"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Plan p = BuildNet();
    p.profiles = {Profile{{c.input, c.range}}};
    auto bytes = SerializePlan(p);
    ASSERT_TRUE(bytes.ok());
    auto loaded = Parse(*bytes);
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find(c.expected), std::string::npos) << loaded.status().ToString();
    EXPECT_NE(loaded.status().message().find("profile 0"), std::string::npos) << loaded.status().ToString();
  }
}

TEST(Plan, ForeignIsaIsRejected) {
  Plan p = BuildNet();
  p.fingerprint.isa = "some-future-isa";
  auto engine = runtime::Engine::Create(std::move(p));
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("isa"), std::string::npos);
}

TEST(Plan, PortablePlanLoadsAnywhere) {
  builder::BuildConfig config;
  config.portable = true;
  Plan p = BuildNet(config);
  p.fingerprint.gpu_name = "NVIDIA H100 80GB HBM3";
  auto bytes = SerializePlan(p);
  ASSERT_TRUE(bytes.ok());
  auto loaded = Parse(*bytes);
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(loaded->options.portable);
  auto out = RunPlan(std::move(loaded).value(), Inputs(1));
  EXPECT_TRUE(out.ok()) << out.status().ToString();
}

TEST(Plan, OtherBackendIsRejected) {
  Plan p = BuildNet();
  p.fingerprint.backend = "cuda";
  auto engine = runtime::Engine::Create(std::move(p));
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("cuda"), std::string::npos);
}

// --- the stored fixture (see tests/fixtures/README.md) ---

std::string Fixture(const std::string& name) {
  return std::string(SAMPAN_SOURCE_DIR) + "/tests/fixtures/" + name;
}

TEST(PlanFixture, V1SmallStillLoadsAndRuns) {
  const std::string path = Fixture("plan_v1_small.plan");
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_TRUE(LooksLikePlan(path));
  auto engine = runtime::Engine::Load(path);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const Plan& p = (*engine)->plan();
  EXPECT_EQ(p.format_version, 1u);
  EXPECT_EQ(p.source_model, "plan_v1_small.onnx");
  auto x = ReadNpy(Fixture("plan_v1_small.input.npy"));
  auto expected = ReadNpy(Fixture("plan_v1_small.expected.npy"));
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  ASSERT_EQ((*engine)->graph().inputs().size(), 1u);
  auto ctx = (*engine)->CreateContext();
  ASSERT_TRUE(ctx.ok());
  auto out = (*ctx)->Run({{(*engine)->graph().inputs()[0]->name(), *x}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 1u);
  // Expected values come from onnxruntime on the source model.
  EXPECT_TRUE(passes::testing::AllClose((*out)[0], *expected, 1e-5));
}

TEST(PlanFixture, V1SmallWithFutureVersionIsRejected) {
  std::string bytes = ReadBytes(Fixture("plan_v1_small.plan"));
  ASSERT_GE(bytes.size(), sizeof(PlanHeader));
  const uint32_t v = 999;
  std::memcpy(bytes.data() + offsetof(PlanHeader, format_version), &v, 4);
  const std::string path = TempPath("plan_v999.plan");
  WriteBytes(path, bytes);
  auto r = ReadPlan(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("version 999"), std::string::npos) << r.status().message();
  auto e = runtime::Engine::Load(path);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().ToString().find("999"), std::string::npos);
}

}  // namespace
}  // namespace sampan::plan
