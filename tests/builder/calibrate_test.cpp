// Implicit INT8 (builder/calibrate.h): the calibration cache format, the three threshold
// methods on data whose answer is known, unsigned activations, determinism, cache mismatches and
// bad samples, and the plan the whole flow builds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "base/npy.h"
#include "builder/backend_builder.h"
#include "builder/builder.h"
#include "passes/pass_test_util.h"
#include "runtime/engine.h"

namespace sampan::builder {
namespace {

namespace fs = std::filesystem;
using passes::testing::MustParse;

// A fresh directory under the test's temp dir.
fs::path TempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / StrCat("sampan_calib_", ::getpid(), "_", name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Writes sample k of `fill` (256 float32 values) for k < n as INPUT.k.npy of shape `shape`.
using Fill = std::function<void(int, float*)>;
void WriteSamples(const fs::path& dir, int n, const Fill& fill, const std::string& input = "x",
                  const Shape& shape = {1, 256}) {
  for (int k = 0; k < n; ++k) {
    Tensor t = Tensor::Alloc(DType::kFloat32, shape);
    fill(k, t.mutable_data<float>());
    ASSERT_TRUE(WriteNpy((dir / StrCat(input, ".", k, ".npy")).string(), t).ok());
  }
}

// Sample k: 256 values drawn from N(0, 1), seeded with a * k + b.
Fill NormalSamples(unsigned a, unsigned b) {
  return [a, b](int k, float* p) {
    std::mt19937 rng(a * static_cast<unsigned>(k) + b);
    std::normal_distribution<float> n(0.f, 1.f);
    for (int i = 0; i < 256; ++i) p[i] = n(rng);
  };
}

// Calibration samples 0..calib-1 of `fill` in TempDir(name), and `held` held-out ones for the
// accuracy gate (fill's samples held_from, held_from + 1, ...) in TempDir(name + "_held").
struct GateSamples {
  fs::path data, held;
};
GateSamples WriteGateSamples(const std::string& name, const Fill& fill, int calib, int held, int held_from) {
  GateSamples dirs{TempDir(name), TempDir(name + "_held")};
  WriteSamples(dirs.data, calib, fill);
  WriteSamples(dirs.held, held, [&](int k, float* p) { fill(k + held_from, p); });
  return dirs;
}

enum class Format { kInt8, kFp8 };

// A build config that quantizes to `format` on `backend`, calibrating on `data` and caching in
// `cache` (neither set when empty).
BuildConfig Quantizing(Format format, const std::string& backend, const fs::path& data = {},
                       const fs::path& cache = {}) {
  BuildConfig config;
  config.backend = backend;
  (format == Format::kFp8 ? config.calibration.fp8 : config.calibration.int8) = true;
  config.calibration.data_dir = data.string();
  config.calibration.cache_file = cache.string();
  return config;
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kMatMul = R"(
  opset 17
  graph g (x: f32[1,256]) -> (y) {
    w = const f32[256,8] random
    y = MatMul(x, w) @mm
  })";

// A MatMul reading a Relu: its activation is never negative.
const char* kReluMatMul = R"(
  opset 17
  graph g (x: f32[1,256]) -> (y) {
    r = Relu(x) @relu
    w = const f32[256,8] random
    y = MatMul(r, w) @mm
  })";

// The gate and FP8 tests' graph: two MatMuls with a Relu between.
const char* kTwoMatMuls = R"(
  opset 17
  graph g (x: f32[1,256]) -> (y) {
    w1 = const f32[256,64] random
    h = MatMul(x, w1) @mm1
    r = Relu(h) @relu
    w2 = const f32[64,8] random
    y = MatMul(r, w2) @mm2
  })";

// Builds `text` with --int8 (cpu backend) and returns the cache's text.
Result<std::string> Calibrate(const std::string& text, const fs::path& data, const std::string& method,
                              const fs::path& cache, BuildReport* report = nullptr) {
  BuildConfig config = Quantizing(Format::kInt8, "cpu", data, cache);
  SP_RETURN_IF_ERROR(ParseCalibMethod(method, &config.calibration));
  BuildReport local;
  SP_RETURN_IF_ERROR(Build(MustParse(text), config, report ? report : &local).status());
  return ReadText(cache);
}

// The scale the cache gives `tensor`, and its type.
std::pair<double, std::string> ScaleOf(const std::string& cache, const std::string& tensor) {
  auto parsed = CalibrationCache::Parse(cache, "cache");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  if (!parsed.ok()) return {0, ""};
  for (const auto& [name, s] : parsed->tensors)
    if (name == tensor) return {s.scale, s.is_unsigned ? "uint8" : "int8"};
  ADD_FAILURE() << "no '" << tensor << "' in\n" << cache;
  return {0, ""};
}

TEST(CalibrationCache, RoundTripAndErrors) {
  CalibrationCache c;
  c.method = "percentile=99.9";
  c.samples = 3;
  c.tensors = {{"a b/c:0", {0.0123f, false}}, {"relu_out", {4.5e-7f, true}}};
  const std::string text = c.Serialize();
  auto back = CalibrationCache::Parse(text, "c.cache");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->method, "percentile=99.9");
  EXPECT_EQ(back->samples, 3);
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[0].first, "a b/c:0");       // names with spaces survive
  EXPECT_EQ(back->tensors[0].second.scale, 0.0123f);  // %.9g round-trips a float
  EXPECT_TRUE(back->tensors[1].second.is_unsigned);
  EXPECT_EQ(back->Serialize(), text);

  auto bad = [](const std::string& body) { return CalibrationCache::Parse(body, "c.cache").status(); };
  EXPECT_NE(bad("TRT-8601-EntropyCalibration2\nx: 3c010204\n").message().find("not a Sampan calibration cache"),
            std::string::npos);
  EXPECT_NE(bad("sampan-calibration 1\nx 0 int8\n").message().find("c.cache:2"), std::string::npos);
  EXPECT_NE(bad("sampan-calibration 1\nx -1 int8\n").message().find("not a positive number"), std::string::npos);
  EXPECT_NE(bad("sampan-calibration 1\nx 0.5 int4\n").message().find("'int4'"), std::string::npos);
  EXPECT_NE(bad("sampan-calibration 1\nx\n").message().find("expected 'TENSOR SCALE"), std::string::npos);
  EXPECT_FALSE(bad("").ok());
}

TEST(CalibMethod, Parse) {
  CalibrationConfig c;
  ASSERT_TRUE(ParseCalibMethod("percentile=99.5", &c).ok());
  EXPECT_EQ(c.method, CalibMethod::kPercentile);
  EXPECT_EQ(c.percentile, 99.5);
  EXPECT_EQ(CalibMethodName(c), "percentile=99.5");
  EXPECT_FALSE(ParseCalibMethod("percentile=0", &c).ok());
  EXPECT_FALSE(ParseCalibMethod("percentile=101", &c).ok());
  EXPECT_FALSE(ParseCalibMethod("percentile=x", &c).ok());
  EXPECT_NE(ParseCalibMethod("kl", &c).message().find("'kl'"), std::string::npos);
}

TEST(Calibrate, MethodsChooseTheirThresholds) {
  // |x| uniform in [0, 1) with sign, and one outlier of 20 in sample 0: minmax takes the outlier,
  // percentile=50 about the median 0.5, entropy clips the outlier (the bulk is what matters).
  const fs::path data = TempDir("methods");
  WriteSamples(data, 8, [](int k, float* p) {
    std::mt19937 rng(static_cast<unsigned>(k));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int i = 0; i < 256; ++i) p[i] = u(rng);
    if (k == 0) p[7] = 20.f;
  });
  auto mm = Calibrate(kMatMul, data, "minmax", data / "minmax.cache");
  ASSERT_TRUE(mm.ok()) << mm.status().ToString();
  auto [s_mm, t_mm] = ScaleOf(*mm, "x");
  EXPECT_FLOAT_EQ(s_mm, 20.f / 127.f);
  EXPECT_EQ(t_mm, "int8");
  auto pc = Calibrate(kMatMul, data, "percentile=50", data / "pc.cache");
  ASSERT_TRUE(pc.ok()) << pc.status().ToString();
  const double median = ScaleOf(*pc, "x").first * 127.0;
  EXPECT_NEAR(median, 0.5, 0.05);
  auto en = Calibrate(kMatMul, data, "entropy", data / "en.cache");
  ASSERT_TRUE(en.ok()) << en.status().ToString();
  const double thr = ScaleOf(*en, "x").first * 127.0;
  EXPECT_GT(thr, 0.9);  // keeps the bulk
  EXPECT_LT(thr, 5.0);  // clips the lone outlier
  EXPECT_NE(en->find("method entropy"), std::string::npos);
  EXPECT_NE(en->find("samples 8"), std::string::npos);
}

TEST(Calibrate, NonNegativeActivationsAreUnsignedAndPlanIsInteger) {
  const fs::path data = TempDir("unsigned");
  WriteSamples(data, 4, [](int k, float* p) {
    for (int i = 0; i < 256; ++i) p[i] = std::sin(0.1f * static_cast<float>(i + 31 * k));
  });
  BuildReport report;
  auto cache = Calibrate(kReluMatMul, data, "minmax", data / "c.cache", &report);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  auto [s, type] = ScaleOf(*cache, "r");
  EXPECT_EQ(type, "uint8");
  EXPECT_NEAR(s * 255.0, 1.0, 1e-3);
  EXPECT_TRUE(report.int8);
  EXPECT_EQ(report.quantization.quantized, std::vector<std::string>{"mm"});
  EXPECT_EQ(report.kernel_counts["onednn:int8"], 1u);
}

TEST(Calibrate, DeterministicAndTheCacheIsReadBack) {
  const fs::path data = TempDir("determinism");
  WriteSamples(data, 5, NormalSamples(1, 100));
  auto a = Calibrate(kMatMul, data, "entropy", data / "a.cache");
  auto b = Calibrate(kMatMul, data, "entropy", data / "b.cache");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  // Read back: no data needed; the report says the cache was read and the hash is the same.
  BuildConfig config = Quantizing(Format::kInt8, "cpu", {}, data / "a.cache");
  BuildReport from_cache;
  ASSERT_TRUE(Build(MustParse(kMatMul), config, &from_cache).ok());
  EXPECT_TRUE(from_cache.quantization.cache_read);
  BuildReport calibrated;
  ASSERT_TRUE(Calibrate(kMatMul, data, "entropy", data / "c.cache", &calibrated).ok());
  EXPECT_EQ(from_cache.quantization.cache_hash, calibrated.quantization.cache_hash);
}

TEST(Calibrate, AllZeroActivationStaysFloatAndItsCacheReadsBack) {
  // Relu of negative samples is 0 everywhere: no scale; the cache says so ("0 float") and a build
  // from it keeps that layer float too.
  const fs::path data = TempDir("zero");
  WriteSamples(data, 2, [](int, float* p) { std::fill(p, p + 256, -1.f); });
  BuildReport calibrated;
  auto cache = Calibrate(kReluMatMul, data, "entropy", data / "z.cache", &calibrated);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  EXPECT_NE(cache->find("\nr 0 float\n"), std::string::npos) << *cache;
  EXPECT_TRUE(calibrated.quantization.quantized.empty());
  BuildConfig config = Quantizing(Format::kInt8, "cpu", {}, data / "z.cache");
  BuildReport from_cache;
  ASSERT_TRUE(Build(MustParse(kReluMatMul), config, &from_cache).ok());
  EXPECT_TRUE(from_cache.quantization.cache_read);
  EXPECT_TRUE(from_cache.quantization.quantized.empty());
  ASSERT_FALSE(from_cache.quantization.skipped.empty());
  EXPECT_NE(from_cache.quantization.skipped[0].find("was 0 in every calibration sample"), std::string::npos);
}

TEST(Calibrate, BackendWithoutIntegerKernelsIsRefused) {
  const BackendBuilder* cuda = FindBackendBuilder("cuda");
  if (cuda == nullptr) GTEST_SKIP() << "the cuda backend is not in this build";
  ASSERT_FALSE(cuda->runs_integer_products);
  BuildConfig config = Quantizing(Format::kInt8, "cuda", "/nonexistent");
  Status st = Build(MustParse(kMatMul), config, nullptr).status();
  EXPECT_NE(st.message().find("no INT8 kernels"), std::string::npos) << st.ToString();
}

TEST(Calibrate, CacheOfAnotherGraphIsRefusedByTensor) {
  const fs::path data = TempDir("mismatch");
  WriteSamples(data, 2, [](int, float* p) { std::fill(p, p + 256, 0.5f); });
  ASSERT_TRUE(Calibrate(kMatMul, data, "minmax", data / "mm.cache").ok());
  const char* other = R"(
    opset 17
    graph g (z: f32[1,256]) -> (y) {
      w = const f32[256,8] random
      y = MatMul(z, w) @mm
    })";
  BuildConfig config = Quantizing(Format::kInt8, "cpu", {}, data / "mm.cache");
  Status st = Build(MustParse(other), config, nullptr).status();
  EXPECT_NE(st.message().find("tensor 'z'"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("another graph"), std::string::npos) << st.ToString();
}

TEST(Calibrate, BadSamples) {
  const char* two = R"(
    opset 17
    graph g (x: f32[1,256], b: f32[1,8]) -> (y) {
      w = const f32[256,8] random
      m = MatMul(x, w) @mm
      y = Add(m, b) @add
    })";
  BuildConfig config = Quantizing(Format::kInt8, "cpu");
  // No directory.
  config.calibration.data_dir = "/nonexistent/calib";
  EXPECT_NE(Build(MustParse(two), config, nullptr).status().message().find("/nonexistent/calib"), std::string::npos);
  // Empty directory: names what it expected.
  const fs::path empty = TempDir("empty");
  config.calibration.data_dir = empty.string();
  Status st = Build(MustParse(two), config, nullptr).status();
  EXPECT_NE(st.message().find("x.0.npy"), std::string::npos) << st.ToString();
  // One input's file missing.
  const fs::path partial = TempDir("partial");
  WriteSamples(partial, 1, [](int, float* p) { std::fill(p, p + 256, 1.f); });
  config.calibration.data_dir = partial.string();
  st = Build(MustParse(two), config, nullptr).status();
  EXPECT_NE(st.message().find("b.0.npy"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("incomplete"), std::string::npos) << st.ToString();
  // Wrong shape: names the file and the input's type.
  ASSERT_TRUE(WriteNpy((partial / "b.0.npy").string(), Tensor::Alloc(DType::kFloat32, {1, 9})).ok());
  st = Build(MustParse(two), config, nullptr).status();
  EXPECT_NE(st.message().find("b.0.npy"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("[1,9]"), std::string::npos) << st.ToString();
  // Wrong type.
  ASSERT_TRUE(WriteNpy((partial / "b.0.npy").string(), Tensor::Alloc(DType::kInt64, {1, 8})).ok());
  st = Build(MustParse(two), config, nullptr).status();
  EXPECT_NE(st.message().find("is i64, input 'b' is f32"), std::string::npos) << st.ToString();
  // No data and no cache.
  config.calibration.data_dir.clear();
  st = Build(MustParse(two), config, nullptr).status();
  EXPECT_NE(st.message().find("--calibData"), std::string::npos) << st.ToString();
}

TEST(Calibrate, AccuracyGate) {
  // A bound every plan meets keeps every layer in int8; one only float meets puts them all back;
  // --strict refuses instead.
  const char* text = kTwoMatMuls;
  const auto [data, held] = WriteGateSamples("gate", NormalSamples(7, 1), 4, 3, 10);
  BuildConfig config = Quantizing(Format::kInt8, "cpu", data);
  config.calibration.method = CalibMethod::kMinMax;
  config.calibration.accuracy_dir = held.string();
  config.calibration.accuracy_bound = 0.9;
  BuildReport easy;
  ASSERT_TRUE(Build(MustParse(text), config, &easy).ok());
  EXPECT_EQ(easy.quantization.quantized.size(), 2u);
  EXPECT_TRUE(easy.quantization.fell_back.empty());
  EXPECT_GE(easy.quantization.accuracy, 0.9);
  ASSERT_EQ(easy.quantization.layer_errors.size(), 2u);
  for (const auto& [name, err] : easy.quantization.layer_errors) {
    EXPECT_GT(err, 0.0) << name;
    EXPECT_LT(err, 0.1) << name;
  }
  config.calibration.accuracy_bound = 1.5;  // cosine never exceeds 1: only float (cos = 1 up to rounding) ...
  BuildReport hard;
  Status st = Build(MustParse(text), config, &hard).status();
  // ... and not even that: the gate says so rather than looping.
  EXPECT_NE(st.message().find("even with every quantized layer back in float"), std::string::npos) << st.ToString();
  config.calibration.accuracy_bound = 0.999999;
  config.strict = true;
  st = Build(MustParse(text), config, nullptr).status();
  EXPECT_NE(st.message().find("--strict"), std::string::npos) << st.ToString();
  config.strict = false;
  BuildReport fallback;
  ASSERT_TRUE(Build(MustParse(text), config, &fallback).ok());
  EXPECT_FALSE(fallback.quantization.fell_back.empty());
  EXPECT_GE(fallback.quantization.accuracy, 0.999999);
}

// --fp8: MatMul/Gemm quantized to float8 e4m3fn (per-tensor scales = amax / 448), Q/DQ of domain
// sampan at a model opset (17) without float8, fused into QMatMul with float8 operands where the
// target has FP8 products (reference here; cuda on the GPU), close to the float result; the gate
// works on FP8 too; a cache of the other format, a backend without FP8 kernels and convolutions
// are refused or left in float with the reason.
TEST(Calibrate, Fp8MatMulsOnTheReferenceBackend) {
  const char* text = kTwoMatMuls;
  const Fill fill = NormalSamples(11, 3);
  const auto [data, held] = WriteGateSamples("fp8", fill, 4, 2, 20);
  BuildConfig config = Quantizing(Format::kFp8, "reference", data, data / "fp8.cache");
  config.calibration.method = CalibMethod::kMinMax;
  BuildReport report;
  auto plan = Build(MustParse(text), config, &report);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(report.quantization.quantized, (std::vector<std::string>{"mm1", "mm2"}));
  EXPECT_NE(plan->options.quantization.find("fp8 calibration=minmax"), std::string::npos) << plan->options.quantization;
  int qmatmul = 0, quantize = 0;
  for (const auto& n : plan->graph->nodes()) {
    if (n->op_type == "QMatMul") {
      ++qmatmul;
      EXPECT_EQ(n->input(0)->type.dtype, DType::kFloat8E4M3FN);
      EXPECT_EQ(n->input(3)->type.dtype, DType::kFloat8E4M3FN);
    }
    if (n->op_type == "QuantizeLinear") {
      ++quantize;
      EXPECT_EQ(n->domain, "sampan");
    }
  }
  EXPECT_EQ(qmatmul, 2);
  EXPECT_GE(quantize, 1);
  // The cache: float8 scales, x's = max|x| / 448 over the samples.
  const std::string cache_text = ReadText(data / "fp8.cache");
  auto cache = CalibrationCache::Parse(cache_text, "fp8.cache");
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  float amax = 0.f;
  for (int k = 0; k < 4; ++k) {
    std::vector<float> v(256);
    fill(k, v.data());
    for (float f : v) amax = std::max(amax, std::fabs(f));
  }
  ASSERT_FALSE(cache->tensors.empty());
  EXPECT_EQ(cache->tensors[0].first, "x");
  EXPECT_TRUE(cache->tensors[0].second.fp8);
  EXPECT_FLOAT_EQ(cache->tensors[0].second.scale, amax / 448.f);
  EXPECT_NE(cache_text.find(" fp8e4m3\n"), std::string::npos) << cache_text;
  // The FP8 plan against the float graph on a held-out sample.
  auto run = [&](plan::Plan p, const Tensor& x) -> Result<Tensor> {
    SP_ASSIGN_OR_RETURN(auto engine, runtime::Engine::Create(std::move(p)));
    SP_ASSIGN_OR_RETURN(auto ctx, engine->CreateContext());
    SP_ASSIGN_OR_RETURN(auto out, ctx->Run({{"x", x}}));
    return out[0];
  };
  Tensor x = Tensor::Alloc(DType::kFloat32, {1, 256});
  fill(20, x.mutable_data<float>());
  BuildConfig plain;
  plain.backend = "reference";
  auto float_plan = Build(MustParse(text), plain, nullptr);
  ASSERT_TRUE(float_plan.ok());
  auto want = run(std::move(*float_plan), x);
  auto got = run(std::move(*plan), x);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status().ToString() << got.status().ToString();
  double num = 0, den = 0;
  for (int64_t i = 0; i < want->numel(); ++i) {
    const double d = got->data<float>()[i] - want->data<float>()[i];
    num += d * d;
    den += static_cast<double>(want->data<float>()[i]) * want->data<float>()[i];
  }
  const double rel = std::sqrt(num / den);
  EXPECT_GT(rel, 0.0);   // it did quantize
  EXPECT_LT(rel, 0.08);  // e4m3 keeps 3 mantissa bits: a few percent over two layers
  // The gate measures FP8 too.
  config.calibration.accuracy_dir = held.string();
  config.calibration.accuracy_bound = 0.99;
  BuildReport gated;
  ASSERT_TRUE(Build(MustParse(text), config, &gated).ok());
  EXPECT_GE(gated.quantization.accuracy, 0.99);
  EXPECT_EQ(gated.quantization.layer_errors.size(), 2u);
  config.calibration.accuracy_dir.clear();
  config.calibration.accuracy_bound = std::nan("");
  // A cache of INT8 scales is refused by an FP8 build, and the other way round.
  config.calibration.data_dir.clear();
  ASSERT_TRUE(Calibrate(text, data, "minmax", data / "int8.cache").ok());
  config.calibration.cache_file = (data / "int8.cache").string();
  Status st = Build(MustParse(text), config, nullptr).status();
  EXPECT_NE(st.message().find("holds int8 scales"), std::string::npos) << st.ToString();
  BuildConfig int8 = config;
  int8.calibration.fp8 = false;
  int8.calibration.int8 = true;
  int8.calibration.cache_file = (data / "fp8.cache").string();
  st = Build(MustParse(text), int8, nullptr).status();
  EXPECT_NE(st.message().find("holds fp8e4m3 scales"), std::string::npos) << st.ToString();
  // Both formats at once, and a backend without FP8 products.
  int8.calibration.fp8 = true;
  st = Build(MustParse(text), int8, nullptr).status();
  EXPECT_NE(st.message().find("exclusive"), std::string::npos) << st.ToString();
  if (FindBackendBuilder("cpu") != nullptr) {
    BuildConfig cpu = config;
    cpu.backend = "cpu";
    st = Build(MustParse(text), cpu, nullptr).status();
    EXPECT_NE(st.message().find("no FP8 kernels"), std::string::npos) << st.ToString();
  }
}

TEST(Calibrate, Fp8LeavesConvolutionsInFloat) {
  const char* text = R"(
    opset 17
    graph g (x: f32[1,4,8,8]) -> (y) {
      w = const f32[8,4,3,3] random
      y = Conv(x, w) @conv
    })";
  const fs::path data = TempDir("fp8_conv");
  const Fill waves = [](int k, float* p) {
    for (int i = 0; i < 256; ++i) p[i] = std::sin(0.3f * static_cast<float>(i + k));
  };
  WriteSamples(data, 2, waves, "x", {1, 4, 8, 8});
  ASSERT_FALSE(HasFatalFailure());
  BuildConfig config = Quantizing(Format::kFp8, "reference", data);
  BuildReport report;
  ASSERT_TRUE(Build(MustParse(text), config, &report).ok());
  EXPECT_TRUE(report.quantization.quantized.empty());
  ASSERT_EQ(report.quantization.skipped.size(), 1u);
  EXPECT_NE(report.quantization.skipped[0].find("FP8 convolutions"), std::string::npos);
}

// Writes a binary PPM (P6) of w x h RGB pixels: pixel (y, x) channel c = f(y, x, c).
void WritePpm(const fs::path& path, int w, int h, const std::function<uint8_t(int, int, int)>& f) {
  std::ofstream o(path, std::ios::binary);
  o << "P6\n" << w << " " << h << "\n255\n";
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) o.put(static_cast<char>(f(y, x, c)));
  ASSERT_TRUE(o.good());
}

const char* kImageConv = R"(
  opset 17
  graph g (x: f32[1,3,8,8]) -> (y) {
    w = const f32[4,3,3,3] random
    y = Conv(x, w) {pads=[1, 1, 1, 1]} @conv
  })";

BuildConfig ImageQuantizing(const fs::path& data, const fs::path& cache) {
  BuildConfig config = Quantizing(Format::kInt8, "cpu", data, cache);
  config.input_formats = {InputFormat{"x", {123.675f, 116.28f, 103.53f}, {58.395f, 57.12f, 57.375f}}};
  return config;
}

// Calibration images (#16): with --input-format the samples may be images, decoded and resized to
// the input's height and width, normalised by the plan's own preprocessing. An 8x8 image
// calibrates exactly as the same pixels given as a uint8 NHWC .npy; other sizes are resized; the
// errors name what is wrong.
TEST(Calibrate, ImagesThroughTheInputFormat) {
  const auto pixel = [](int y, int x, int c) { return static_cast<uint8_t>((37 * y + 11 * x + 83 * c) % 256); };
  const fs::path images = TempDir("images"), npy = TempDir("images_npy");
  WritePpm(images / "a.ppm", 8, 8, pixel);
  ASSERT_FALSE(HasFatalFailure());
  Tensor t = Tensor::Alloc(DType::kUInt8, {1, 8, 8, 3});
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x)
      for (int c = 0; c < 3; ++c) t.mutable_data<uint8_t>()[(y * 8 + x) * 3 + c] = pixel(y, x, c);
  ASSERT_TRUE(WriteNpy((npy / "x.0.npy").string(), t).ok());
  BuildReport from_images, from_npy;
  ASSERT_TRUE(Build(MustParse(kImageConv), ImageQuantizing(images, images / "cache"), &from_images).ok());
  ASSERT_TRUE(Build(MustParse(kImageConv), ImageQuantizing(npy, npy / "cache"), &from_npy).ok());
  EXPECT_EQ(from_images.quantization.samples, 1);
  EXPECT_EQ(from_images.quantization.quantized.size(), 1u);
  EXPECT_EQ(ReadText(images / "cache"), ReadText(npy / "cache")) << "the image's pixels are the sample";

  // Other sizes are resized (and count as samples); a corrupt file is named.
  WritePpm(images / "b.ppm", 13, 5, pixel);
  WritePpm(images / "c.PPM", 3, 20, pixel);
  fs::remove(images / "cache");
  BuildReport three;
  auto built = Build(MustParse(kImageConv), ImageQuantizing(images, images / "cache"), &three);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  EXPECT_EQ(three.quantization.samples, 3);
  { std::ofstream(images / "d.png") << "not a png"; }
  fs::remove(images / "cache");
  auto corrupt = Build(MustParse(kImageConv), ImageQuantizing(images, images / "cache"), nullptr);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.status().message().find("d.png"), std::string::npos) << corrupt.status().ToString();

  // Without --input-format the model takes float tensors: images are refused, saying what to do.
  fs::remove(images / "d.png");
  auto no_format = Build(MustParse(kImageConv), Quantizing(Format::kInt8, "cpu", images), nullptr);
  ASSERT_FALSE(no_format.ok());
  EXPECT_NE(no_format.status().message().find("--input-format"), std::string::npos) << no_format.status().ToString();
  fs::remove_all(images);
  fs::remove_all(npy);
}

// The other image-sample forms: a grey (one-channel) input, a batch fixed at 2 (two images a
// sample, the odd one left out), .npy samples winning over images, a model with two inputs
// refused, fewer images than the batch refused.
// A Conv over x: f32[N, C, 6, 6] (one more input z of the same type when `two`).
std::string ConvOver(int n, int c, bool two = false) {
  const std::string x = StrCat("f32[", n, ",", c, ",6,6]");
  return StrCat("opset 17\ngraph g (x: ", x, two ? StrCat(", z: ", x) : "", ") -> (y) {\n",
                two ? "  s = Add(x, z)\n" : "  s = Identity(x)\n", "  w = const f32[2,", c, ",3,3] random\n",
                "  y = Conv(s, w) @conv\n}\n");
}

TEST(Calibrate, ImageSampleForms) {
  const auto pixel = [](int y, int x, int c) { return static_cast<uint8_t>((29 * y + 7 * x + 61 * c) % 256); };
  const fs::path dir = TempDir("image_forms");
  for (const char* name : {"a.ppm", "b.ppm", "c.ppm"}) WritePpm(dir / name, 6, 6, pixel);
  ASSERT_FALSE(HasFatalFailure());
  // Grey: the input takes one channel (ImageDecoder's Grayscale).
  const std::string grey = ConvOver(1, 1);
  BuildConfig config = Quantizing(Format::kInt8, "cpu", dir);
  config.input_formats = {InputFormat{"x", {128.f}, {64.f}}};
  BuildReport grey_report;
  auto g = Build(MustParse(grey), config, &grey_report);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(grey_report.quantization.samples, 3);
  // Batch 2: samples of two images; the third is not used.
  const std::string pairs = ConvOver(2, 3);
  config.input_formats = {InputFormat{"x", {}, {}}};
  BuildReport pair_report;
  auto p = Build(MustParse(pairs), config, &pair_report);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(pair_report.quantization.samples, 1);
  // Fewer images than the batch.
  const std::string four = ConvOver(4, 3);
  auto f = Build(MustParse(four), config, nullptr);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("fewer than the batch"), std::string::npos) << f.status().ToString();
  // Two inputs: images cannot say which is which.
  const std::string two = ConvOver(1, 3, true);
  config.input_formats = {InputFormat{"x", {}, {}}, InputFormat{"z", {}, {}}};
  auto t = Build(MustParse(two), config, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("2 inputs"), std::string::npos) << t.status().ToString();
  // .npy samples win where both are present.
  Tensor npy = Tensor::Alloc(DType::kUInt8, {1, 6, 6, 3});
  ASSERT_TRUE(WriteNpy((dir / "x.0.npy").string(), npy).ok());
  ASSERT_TRUE(WriteNpy((dir / "x.1.npy").string(), npy).ok());
  const std::string one = ConvOver(1, 3);
  config.input_formats = {InputFormat{"x", {}, {}}};
  BuildReport npy_report;
  auto n = Build(MustParse(one), config, &npy_report);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(npy_report.quantization.samples, 2) << "the two .npy samples, not the three images";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sampan::builder
