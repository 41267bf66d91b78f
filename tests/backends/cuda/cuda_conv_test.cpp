// CUDA convolutions (backends/cuda/conv_kernel.cpp: cuDNN's legacy algorithms and its
// graph-API engine configurations, conv_graph.cpp) against the reference kernel: each
// case is one sampan::FusedConv node, channels-last on the device, and EVERY tactic
// the builder could record for it (Candidates(): legacy algorithms 0..7, graph
// configurations 1000+i, channel-padded ones 2000+i, our depthwise kernel 3000, the
// product form through cuBLASLt 4000+i, the space-to-depth form 5000+i) is selected and run, so no engine cuDNN's
// heuristic offers can win a timing and then compute something else. Cases cover bias, residual, ReLU, none of them,
// strides, 1x1/3x3/7x7 and a 3-channel first layer, FP16 and BF16. Without a GPU (or without the CUDA backend in the
// build) these tests skip and say why.
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <random>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/node_kernel.h"
#include "ops/run_node.h"
#include "passes/pass_test_util.h"
#include "runtime/backend.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;

using testing::AsF32;
using testing::DeviceScope;
using testing::FromNhwc;
using testing::Random;
using testing::ToNhwc;
using testing::TypeName;

struct ConvCase {
  DType dt;
  int64_t n, c, h, w, k, r;  // input [n, c, h, w], k filters of r x r
  int64_t stride;
  bool bias, residual, relu;
  bool x_nchw = false;   // x handed over channels-first (a graph input), converted by the kernel
  int64_t group = 1;     // c: depthwise (our kernel, tactic 3000, next to cuDNN's)
  std::string act = "";  // another activation than relu ("SiLU", "Clip" as ReLU6, "HardSwish")
  int64_t pad = -1;      // -1: r / 2
  bool y_nchw = false;   // the output (and the residual) channels-first
  std::string activation() const { return act.empty() ? (relu ? "Relu" : "") : act; }
  int64_t padding() const { return pad < 0 ? r / 2 : pad; }
  // The product form (tactics 4000+, cuBLASLt) applies: unpadded, windows that do not overlap.
  bool gemm_form() const { return group == 1 && padding() == 0 && r <= stride && !(y_nchw && bias && residual); }
  std::string name() const {
    return StrCat(TypeName(dt), " x[", n, ",", c, ",", h, ",", w, "]", x_nchw ? " nchw" : "", " k", k, " ", r, "x", r,
                  " s", stride, " pad ", padding(), y_nchw ? " y nchw" : "", group > 1 ? StrCat(" group ", group) : "",
                  bias ? " +bias" : "", residual ? " +residual" : "", activation().empty() ? "" : " " + activation());
  }
};

// Runs every tactic of the case's kernel; returns how many graph configurations ran.
int CheckEveryTactic(const ConvCase& cc, uint64_t seed) {
  const int64_t pad = cc.padding();
  const int64_t oh = (cc.h + 2 * pad - cc.r) / cc.stride + 1, ow = (cc.w + 2 * pad - cc.r) / cc.stride + 1;
  const Shape xs{cc.n, cc.c, cc.h, cc.w}, ws{cc.k, cc.c / cc.group, cc.r, cc.r}, ys{cc.n, cc.k, oh, ow};
  const std::string act = cc.activation();
  const char* t = TypeName(cc.dt);
  const std::string graph = StrCat(
      "opset 17\nopset sampan 1\ngraph g (x: ", t, "[", cc.n, ",", cc.c, ",", cc.h, ",", cc.w, "], w: ", t, "[", cc.k,
      ",", cc.c / cc.group, ",", cc.r, ",", cc.r, "], b: ", t, "[", cc.k, "], z: ", t, "[", cc.n, ",", cc.k, ",", oh,
      ",", ow, "]) -> (y) {\n  y = sampan::FusedConv(x, w, ", cc.bias ? "b" : "_", ", ", cc.residual ? "z" : "_",
      ") {kernel_shape=[", cc.r, ",", cc.r, "], pads=[", pad, ",", pad, ",", pad, ",", pad, "], strides=[", cc.stride,
      ",", cc.stride, "], group=", cc.group, act.empty() ? "" : StrCat(", activation=\"", act, "\""),
      act == "Clip" ? ", activation_params=[0.0, 6.0]" : "", "}\n}\n");
  auto g = MustParse(graph);
  const ir::Node& node = *g->nodes()[0];
  const Tensor x = Random(cc.dt, xs, seed), w = Random(cc.dt, ws, seed + 1, -0.3f, 0.3f),
               b = Random(cc.dt, {cc.k}, seed + 2), z = Random(cc.dt, ys, seed + 3);
  std::vector<const Tensor*> ref_in = {&x, &w, cc.bias ? &b : nullptr, cc.residual ? &z : nullptr};
  std::vector<Tensor> want;
  Status st = ops::RunNode(node, g->opset(), ref_in, &want);
  EXPECT_TRUE(st.ok()) << cc.name() << ": " << st.ToString();
  if (!st.ok()) return 0;
  const Tensor want32 = AsF32(want[0]);

  DeviceScope dev;
  EXPECT_EQ(cudaStreamCreate(&dev.stream), cudaSuccess);
  EXPECT_EQ(cublasLtCreate(&dev.lt), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudnnCreate(&dev.dnn), CUDNN_STATUS_SUCCESS);
  const Tensor x_nhwc = ToNhwc(x), z_nhwc = ToNhwc(z);
  auto upload = [&](const Tensor& h) -> void* {
    auto p = dev.Alloc(h.nbytes());
    if (!p.ok() || cudaMemcpy(*p, h.raw(), h.nbytes(), cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;
    return *p;
  };
  void* dx = upload(cc.x_nchw ? x : x_nhwc);
  void* dw = upload(w);
  void* db = upload(b);
  void* dz = upload(cc.y_nchw ? z : z_nhwc);
  const size_t y_bytes = want[0].nbytes();
  auto dy = dev.Alloc(y_bytes);
  EXPECT_TRUE(dx && dw && db && dz && dy.ok()) << cc.name();
  if (!(dx && dw && db && dz && dy.ok())) return 0;

  std::vector<KernelInput> kin = {KernelInput{true, cc.dt, xs, nullptr}, KernelInput{true, cc.dt, ws, &w},
                                  cc.bias ? KernelInput{true, cc.dt, {cc.k}, &b} : KernelInput{},
                                  cc.residual ? KernelInput{true, cc.dt, ys, nullptr} : KernelInput{}};
  KernelOptions opt;
  opt.in_nhwc = {!cc.x_nchw, false, false, !cc.y_nchw};
  opt.out_nhwc = !cc.y_nchw;
  RunEnv env{dev.stream, dev.lt, dev.dnn, nullptr, 0, nullptr};
  auto choice = MakeKernel(node, g->opset(), kin, {KernelOutput{cc.dt, ys}}, opt, env);
  EXPECT_TRUE(choice.ok()) << cc.name() << ": " << choice.status().ToString();
  if (!choice.ok() || !choice->kernel) return 0;
  NodeKernel& k = *choice->kernel;
  int graph_runs = 0, runs = 0, padded_runs = 0, depthwise_runs = 0, gemm_runs = 0, s2d_runs = 0;
  for (int cand : k.Candidates()) {
    const std::string what = StrCat(cc.name(), " tactic ", cand);
    if (!k.Select(cand).ok()) continue;  // not every offered configuration finalizes
    const size_t ws_bytes = k.workspace();
    void* wsp = nullptr;
    if (ws_bytes > 0) {
      auto p = dev.Alloc(ws_bytes);
      EXPECT_TRUE(p.ok()) << what;
      if (!p.ok()) return graph_runs;
      wsp = *p;
    }
    env.workspace = wsp;
    env.workspace_bytes = ws_bytes;
    EXPECT_EQ(cudaMemset(*dy, 0xff, y_bytes), cudaSuccess);  // NaNs: an unwritten output cannot pass
    Status rs = k.Run(env, {dx, dw, cc.bias ? db : nullptr, cc.residual ? dz : nullptr}, {*dy});
    // A legacy algorithm cuDNN lists but cannot run for this shape may say so; a graph
    // configuration that finalized must run.
    if (!rs.ok() && cand < 1000) continue;
    EXPECT_TRUE(rs.ok()) << what << ": " << rs.ToString();
    if (!rs.ok()) continue;
    Tensor got = cc.y_nchw ? Tensor::Alloc(cc.dt, ys) : Tensor::Alloc(cc.dt, {ys[0], ys[2], ys[3], ys[1]});
    const cudaError_t e = cudaStreamSynchronize(dev.stream);
    EXPECT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
    if (e != cudaSuccess || cudaMemcpy(got.mutable_raw(), *dy, y_bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      return graph_runs;
    const Tensor g32 = AsF32(cc.y_nchw ? got : FromNhwc(got));
    double num = 0, den = 0;
    int64_t bad = 0;
    const double atol = cc.dt == DType::kFloat16 ? 2e-2 : 8e-2, rtol = cc.dt == DType::kFloat16 ? 1e-2 : 4e-2;
    for (int64_t i = 0; i < want32.numel(); ++i) {
      const double a = g32.data<float>()[i], e = want32.data<float>()[i];
      if (!(std::fabs(a - e) <= atol + rtol * std::fabs(e))) ++bad;
      if (std::isfinite(a)) num += (a - e) * (a - e);
      den += e * e;
    }
    EXPECT_EQ(bad, 0) << what << " (" << k.family() << "): " << bad << " of " << want32.numel() << " off";
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), cc.dt == DType::kFloat16 ? 5e-3 : 2e-2) << what;
    ++runs;
    if (cand >= 5000) {
      ++s2d_runs;
      EXPECT_STREQ(k.family(), "cudnn graph conv s2d") << what;
    } else if (cand >= 4000) {
      ++gemm_runs;
      EXPECT_STREQ(k.family(), "cublaslt conv") << what;
    } else if (cand == 3000) {
      ++depthwise_runs;
      EXPECT_STREQ(k.family(), "depthwise conv") << what;
    } else if (cand >= 1000) {
      ++graph_runs;
      EXPECT_STREQ(k.family(), cand >= 2000 ? "cudnn graph conv padded" : "cudnn graph conv") << what;
      if (cand >= 2000) ++padded_runs;
    }
  }
  EXPECT_GT(runs, 0) << cc.name() << ": no tactic ran";
  // Every depthwise convolution (constant filters) is offered our kernel.
  if (cc.group == cc.c && cc.group > 1) {
    EXPECT_EQ(depthwise_runs, 1) << cc.name() << ": the depthwise kernel did not run";
  }
  // Unpadded convolutions whose windows do not overlap are offered as one product.
  EXPECT_EQ(gemm_runs > 0, cc.gemm_form()) << cc.name() << ": " << gemm_runs << " cuBLASLt product tactics ran";
  // A channels-last stride-2 first layer of up to 4 channels is offered folded 2x2 into channels.
  if (cc.c <= 4 && cc.stride == 2 && cc.r >= 2 && cc.group == 1 && !cc.y_nchw) {
    EXPECT_GT(s2d_runs, 0) << cc.name() << ": no space-to-depth configuration ran";
  } else {
    EXPECT_EQ(s2d_runs, 0) << cc.name();
  }
  // A channels-last first layer of fewer than 8 channels is also offered zero-padded to 8.
  if (cc.c < 8 && !cc.y_nchw) {
    EXPECT_GT(padded_runs, 0) << cc.name() << ": no channel-padded configuration ran";
  }
  return graph_runs;
}

TEST(CudaConv, EveryTacticMatchesReference) {
  SKIP_WITHOUT_GPU();
  const ConvCase cases[] = {
      {DType::kFloat16, 2, 64, 14, 14, 64, 3, 1, true, true, true},        // residual block conv
      {DType::kFloat16, 2, 64, 14, 14, 256, 1, 1, true, false, false},     // 1x1 expansion, no activation
      {DType::kFloat16, 3, 32, 9, 9, 64, 3, 2, true, false, true},         // strided, odd sizes
      {DType::kFloat16, 1, 128, 7, 7, 128, 3, 1, false, false, false},     // no epilogue at all
      {DType::kFloat16, 2, 3, 32, 32, 64, 7, 2, true, false, true},        // 3-channel first layer
      {DType::kFloat16, 2, 3, 30, 30, 64, 7, 2, true, false, true, true},  // the same from an NCHW input
      {DType::kBFloat16, 2, 64, 14, 14, 64, 3, 1, true, true, true},
      {DType::kBFloat16, 2, 64, 8, 8, 128, 1, 1, true, false, true},
      // Activations the graph engines run as a pass after the epilogue.
      {DType::kFloat16, 2, 32, 10, 10, 48, 3, 1, true, false, false, false, 1, "SiLU"},
      {DType::kFloat16, 2, 16, 12, 12, 32, 1, 1, true, true, false, false, 1, "Clip"},
      {DType::kFloat16, 2, 3, 20, 20, 16, 3, 2, true, false, false, false, 1, "HardSwish"},  // padded first layer
      // Depthwise: 16-byte channel vectors, 2-channel vectors (36), scalar (an NCHW
      // input; a multiplier of 2), 7x7 (ConvNeXt), strided 5x5, residual, BF16.
      {DType::kFloat16, 2, 64, 14, 14, 64, 3, 1, true, false, true, false, 64},
      {DType::kFloat16, 2, 96, 11, 11, 96, 7, 1, true, false, false, false, 96},
      {DType::kFloat16, 3, 40, 13, 13, 40, 5, 2, true, false, false, false, 40, "SiLU"},
      {DType::kFloat16, 2, 36, 9, 9, 36, 3, 1, true, true, false, false, 36, "Clip"},
      {DType::kFloat16, 2, 24, 9, 9, 24, 3, 2, false, false, true, true, 24},
      {DType::kFloat16, 2, 16, 8, 8, 32, 3, 1, true, false, false, false, 16},
      {DType::kBFloat16, 2, 32, 9, 9, 32, 3, 1, true, true, true, false, 32},
      // Grouped (not depthwise): cuDNN only.
      {DType::kFloat16, 2, 64, 8, 8, 64, 3, 1, true, false, true, false, 4},
      // The product form (cuBLASLt, tactics 4000+): ViT's patch embedding (channels-first in
      // and out, and channels-last out with GELU), a strided 1x1 shortcut with a residual, a
      // kernel smaller than its stride, channels-first 1x1 read as is (residual; bias + SiLU).
      {DType::kFloat16, 2, 3, 32, 32, 64, 4, 4, true, false, false, true, 1, "", 0, true},
      {DType::kFloat16, 2, 3, 32, 32, 64, 4, 4, true, false, false, true, 1, "Gelu", 0},
      {DType::kFloat16, 2, 64, 14, 14, 256, 1, 2, true, true, true, false, 1, "", 0},
      {DType::kFloat16, 1, 8, 11, 11, 16, 2, 3, true, true, false, false, 1, "", 0},
      {DType::kBFloat16, 2, 32, 8, 8, 64, 1, 1, false, true, true, true, 1, "", 0, true},
      {DType::kFloat16, 2, 16, 6, 6, 24, 1, 1, true, false, false, true, 1, "SiLU", 0, true},
      {DType::kFloat16, 2, 16, 6, 6, 24, 1, 1, true, true, false, true, 1, "", 0, true},  // not offered
      // Space-to-depth stems (5000+): odd sizes and an even kernel, a 4-channel input, BF16.
      {DType::kFloat16, 2, 3, 23, 21, 32, 4, 2, true, false, true, true, 1, "", 1},
      {DType::kFloat16, 2, 4, 20, 20, 32, 3, 2, true, false, true},
      {DType::kBFloat16, 2, 3, 30, 30, 64, 7, 2, true, false, true, true},
  };
  int graph_runs = 0;
  uint64_t seed = 11;
  for (const ConvCase& c : cases) graph_runs += CheckEveryTactic(c, seed += 10);
  // cuDNN 9 on sm_80+ offers graph engines for channels-last FP16 convolutions with
  // these epilogues; none running means the graph path silently fell away.
  EXPECT_GT(graph_runs, 0) << "no cuDNN graph-API configuration ran";
  std::printf("(tactic counts per case above; depthwise cases run our kernel as tactic 3000)\n");
  std::printf("graph-API configurations checked: %d\n", graph_runs);
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
