// FP8 products on the GPU (issue #16): `--fp8` builds of small MLPs (MatMul + bias + ReLU, Gemm,
// a residual) run every product through cuBLASLt FP8 and every QuantizeLinear on the device, and
// agree with the same FP8 graph on the reference backend and, within FP8's precision, with float.
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/families.h"
#include "base/npy.h"

namespace sampan::cuda::testing {
namespace {

namespace fs = std::filesystem;

struct Fp8Run {
  std::vector<Tensor> out;
  builder::BuildReport report;
};

Result<Fp8Run> BuildFp8(const std::string& graph, const std::string& backend, const fs::path& calib,
                        const std::map<std::string, Tensor>& in, bool fp8, bool cuda_graph) {
  builder::BuildConfig config;
  config.backend = backend;
  config.precision = builder::Precision::kFP16;
  config.allow_tf32 = false;
  config.optimization_level = 1;
  config.calibration.fp8 = fp8;
  config.calibration.method = builder::CalibMethod::kMinMax;
  config.calibration.data_dir = fp8 ? calib.string() : "";
  Fp8Run r;
  SP_ASSIGN_OR_RETURN(plan::Plan p, builder::Build(passes::testing::MustParse(graph), config, &r.report));
  runtime::EngineOptions eo;
  eo.use_cuda_graph = cuda_graph;
  SP_ASSIGN_OR_RETURN(auto engine, runtime::Engine::Create(std::move(p), eo));
  SP_ASSIGN_OR_RETURN(auto ctx, engine->CreateContext());
  for (int i = 0; i < (cuda_graph ? 3 : 1); ++i) {
    SP_ASSIGN_OR_RETURN(r.out, ctx->Run(in));
  }
  return r;
}

void CheckFp8(const std::string& name, const std::string& graph, const Shape& x_shape, size_t want_products) {
  const fs::path calib = fs::temp_directory_path() / StrCat("sampan_fp8_", ::getpid(), "_", name);
  fs::remove_all(calib);
  fs::create_directories(calib);
  for (int k = 0; k < 2; ++k)
    ASSERT_TRUE(WriteNpy((calib / StrCat("x.", k, ".npy")).string(), Random(DType::kFloat32, x_shape, 100 + k)).ok());
  const std::map<std::string, Tensor> in{{"x", Random(DType::kFloat32, x_shape, 7)}};
  auto want = BuildFp8(graph, "reference", calib, in, /*fp8=*/false, false);
  ASSERT_TRUE(want.ok()) << name << ": " << want.status().ToString();
  auto ref8 = BuildFp8(graph, "reference", calib, in, true, false);
  ASSERT_TRUE(ref8.ok()) << name << ": " << ref8.status().ToString();
  EXPECT_EQ(ref8->report.quantization.quantized.size(), want_products) << name;
  for (bool cuda_graph : {false, true}) {
    auto got = BuildFp8(graph, "cuda", calib, in, true, cuda_graph);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    EXPECT_TRUE(got->report.host_nodes.empty())
        << name << ": " << got->report.host_nodes.size() << " node(s) on the host, first "
        << (got->report.host_nodes.empty() ? ""
                                           : got->report.host_nodes[0].node + ": " + got->report.host_nodes[0].reason);
    EXPECT_EQ(got->report.kernel_counts["cublaslt fp8 gemm"], want_products) << name;
    ASSERT_EQ(got->out.size(), 1u);
    // Against the same FP8 graph on the reference kernels: fast accumulation, the product's own
    // rounding of an FP8 output (x * 1/s against x / s) move a few values by one float8 step.
    const double vs_ref8 = RelL2(got->out[0], ref8->out[0]);
    const double vs_float = RelL2(got->out[0], want->out[0]);
    const double ref8_vs_float = RelL2(ref8->out[0], want->out[0]);
    EXPECT_LT(vs_ref8, 2e-2) << name << (cuda_graph ? " (CUDA graph)" : "");
    EXPECT_LT(vs_float, 1.5 * ref8_vs_float + 1e-2) << name;
    EXPECT_GT(vs_float, 0.0) << name << ": FP8 gave the float result exactly (nothing quantized?)";
  }
  fs::remove_all(calib);
}

TEST(CudaFp8, MatMulBiasReluChain) {
  SKIP_WITHOUT_GPU();
  // x -> MatMul + bias + ReLU (its FP8 output quantized by the product) -> MatMul + bias.
  CheckFp8("mlp", R"(
    opset 17
    graph g (x: f32[64,256]) -> (y) {
      w1 = const f32[256,512] random
      b1 = const f32[512] random
      h = MatMul(x, w1) @mm1
      hb = Add(h, b1) @bias1
      r = Relu(hb) @relu
      w2 = const f32[512,128] random
      b2 = const f32[128] random
      y0 = MatMul(r, w2) @mm2
      y = Add(y0, b2) @bias2
    })",
           {64, 256}, 2);
}

TEST(CudaFp8, BatchedInputGemmAndResidual) {
  SKIP_WITHOUT_GPU();
  // A 3-D activation (BERT's [batch, seq, hidden]) and a residual Add after the second product;
  // a Gemm with transB.
  CheckFp8("residual", R"(
    opset 17
    graph g (x: f32[4,32,128]) -> (y) {
      w1 = const f32[128,256] random
      h = MatMul(x, w1) @mm1
      w2 = const f32[256,128] random
      h2 = MatMul(h, w2) @mm2
      s = Add(h2, x) @residual
      shp = const i64[2] {128, 128}
      f = Reshape(s, shp) @flat
      wg = const f32[64,128] random
      bg = const f32[64] random
      y = Gemm(f, wg, bg) {transB=1} @fc
    })",
           {4, 32, 128}, 3);
}

// The norms' float8 copies (FuseNormQuantize): AddLayerNorm and a plain LayerNormalization
// write them beside their outputs, no quantize kernel is left, the norms agree with the
// reference's, and each copy is the reference QuantizeLinear of the norm output the GPU wrote,
// bit for bit, on the warp kernel (rows of whole 16-byte vectors) and the block kernel (other
// widths), in f16, bf16 and f32 with e4m3fn and e5m2 outputs.
TEST(CudaFp8, NormsWriteFloat8CopiesBitExact) {
  SKIP_WITHOUT_GPU();
  for (const char* t : {"f16", "bf16", "f32"}) {
    for (int n : {64, 20}) {
      const std::string text = StrCat(R"(
        opset 21
        graph g (x: )",
                                      t, "[3,5,", n, "], r: ", t, "[3,5,", n, R"(]) -> (yq, eq, y, e) {
          s = Add(x, r) @add
          sc = const )",
                                      t, "[", n, R"(] random
          bi = const )",
                                      t, "[", n, R"(] random
          y = LayerNormalization(s, sc, bi) {axis=-1} @ln
          qs = const )",
                                      t, R"([] {0.01}
          yq = sampan::QuantizeLinear(y, qs) {output_dtype=17} @q_ln
          e = LayerNormalization(x, sc) {axis=-1} @plain_ln
          es = const )",
                                      t, R"([] {0.003}
          ez = const f8e5m2[] {0}
          eq = QuantizeLinear(e, es, ez) @q_plain
        })");
      const DType dt = std::string(t) == "f16"    ? DType::kFloat16
                       : std::string(t) == "bf16" ? DType::kBFloat16
                                                  : DType::kFloat32;
      const std::map<std::string, Tensor> in{{"x", Random(dt, {3, 5, n}, 1, -4.f, 4.f)},
                                             {"r", Random(dt, {3, 5, n}, 2, -4.f, 4.f)}};
      const std::string name = StrCat(t, " n=", n);
      auto want = BuildAndRun(text, "reference", builder::Precision::kFP32, in);
      ASSERT_TRUE(want.ok()) << name << ": " << want.status().ToString();
      builder::BuildConfig config;
      config.backend = "cuda";
      config.precision = dt == DType::kFloat32 ? builder::Precision::kFP32 : builder::Precision::kFP16;
      config.allow_tf32 = false;
      builder::BuildReport report;
      auto plan = builder::Build(passes::testing::MustParse(text), config, &report);
      ASSERT_TRUE(plan.ok()) << name << ": " << plan.status().ToString();
      EXPECT_EQ(report.kernel_counts["quantize"], 0u) << name;
      EXPECT_EQ(report.kernel_counts["layernorm"], 2u) << name;
      EXPECT_TRUE(report.host_nodes.empty()) << name;
      auto engine = runtime::Engine::Create(std::move(plan).value(), runtime::EngineOptions{});
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      auto ctx = (*engine)->CreateContext();
      ASSERT_TRUE(ctx.ok());
      auto got = (*ctx)->Run(in);
      ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
      ASSERT_EQ(got->size(), 4u);
      for (size_t i : {2, 3}) EXPECT_LT(RelL2((*got)[i], (*want)[i]), 2e-3) << name << " norm output " << i;
      // The copies: QuantizeLinear (reference kernels) of what the GPU's norms wrote.
      const std::string q = StrCat(R"(
        opset 21
        graph q (y: )",
                                   t, "[3,5,", n, "], e: ", t, "[3,5,", n, R"(]) -> (yq, eq) {
          qs = const )",
                                   t, R"([] {0.01}
          yq = sampan::QuantizeLinear(y, qs) {output_dtype=17}
          es = const )",
                                   t, R"([] {0.003}
          ez = const f8e5m2[] {0}
          eq = QuantizeLinear(e, es, ez)
        })");
      auto copies = BuildAndRun(q, "reference", builder::Precision::kFP32, {{"y", (*got)[2]}, {"e", (*got)[3]}});
      ASSERT_TRUE(copies.ok()) << copies.status().ToString();
      for (size_t i : {0, 1}) {
        ASSERT_EQ((*got)[i].dtype(), (*copies)[i].dtype()) << name << " output " << i;
        ASSERT_EQ((*got)[i].nbytes(), (*copies)[i].nbytes()) << name << " output " << i;
        EXPECT_EQ(0, std::memcmp((*got)[i].raw(), (*copies)[i].raw(), (*copies)[i].nbytes()))
            << name << " copy " << i << " is not QuantizeLinear of the norm's output";
      }
    }
  }
}

// The capability answer (`--dry-run`, the builder's node-by-node query) refuses what lowering would,
// without a GPU: each refusal names its reason.
TEST(CudaFp8Factories, RefuseWhatLoweringWould) {
  auto q = [](const std::string& x, const std::string& w, int n, const std::string& xs = "",
              const std::string& tail = "", const std::string& y = "f32") {
    return StrCat("opset 17\ngraph g (x: ", x, "[8,32]", xs.empty() ? "" : ", xs: f32[]", ") -> (y: ", y, "[8,", n,
                  "]) {\n", xs.empty() ? "  xs = const f32[] {0.01}\n" : "", "  xz = const ", x, "[] {0}\n",
                  "  w = const ", w, "[32,", n, "]\n  ws = const f32[] {0.02}\n  wz = const ", w, "[] {0}\n",
                  tail.empty() ? "  y = sampan::QMatMul(x, xs, xz, w, ws, wz)\n" : tail, "}\n");
  };
  auto ok = Ask(MakeQMatMul, q("f8e4m3fn", "f8e4m3fn", 16));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(Ask(MakeQMatMul, q("f8e5m2", "f8e4m3fn", 16)).ok()) << "e5m2 x e4m3 is one of cuBLASLt's forms";
  ExpectUnsupported(Ask(MakeQMatMul, q("f8e5m2", "f8e5m2", 16)), "two e5m2 operands");
  ExpectUnsupported(Ask(MakeQMatMul, q("f8e4m3fn", "f8e4m3fn", 20)), "multiples of 16");
  ExpectUnsupported(Ask(MakeQMatMul, q("i8", "i8", 16)), "FP8 operands only");
  ExpectUnsupported(Ask(MakeQMatMul, q("f8e4m3fn", "f8e4m3fn", 16, "xs")), "positive per-tensor scales");
  ExpectUnsupported(Ask(MakeQMatMul, q("f8e4m3fn", "f8e4m3fn", 16, "",
                                       "  ys = const f32[] {0.5}\n  yz = const u8[] {0}\n"
                                       "  y = sampan::QMatMul(x, xs, xz, w, ws, wz, _, _, ys, yz)\n",
                                       "u8")),
                    "FP8 products write float8 or float");
}

}  // namespace
}  // namespace sampan::cuda::testing
