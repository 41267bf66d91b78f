// sampan::FusedConvPool on the device (backends/cuda/conv_pool_kernel.cpp) against its
// reference kernel (FusedConv, then MaxPool): EVERY tactic the builder could record is
// selected and run: our fused kernel's configurations (6000 + v, conv_pool.h) and the
// convolution's own tactics followed by the pooling kernel. Cases: ResNet's stem
// (channels-first input, channels-last or channels-first output), a channels-last
// BF16 input with SiLU and a ceil-mode pool, one input channel and 128 filters (two
// 64-channel blocks), AlexNet's 11x11/4 on 4 channels and 24 filters. Without a GPU
// these tests skip and say why.
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <cuda_runtime.h>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/node_kernel.h"
#include "ops/run_node.h"
#include "passes/pass_test_util.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;
using testing::AsF32;
using testing::DeviceScope;
using testing::FromNhwc;
using testing::Random;
using testing::RelL2;
using testing::ToNhwc;
using testing::TypeName;

struct PoolCase {
  DType dt;
  int64_t n, c, h, w, k, r, stride, pad;  // conv: x [n, c, h, w], k filters r x r
  int64_t pk, ps, pp;                     // pool: pk x pk, stride, pad
  bool ceil, bias;
  std::string act;
  bool x_nhwc, y_nhwc;
  std::string name() const {
    return StrCat(TypeName(dt), " x[", n, ",", c, ",", h, ",", w, "]", x_nhwc ? " nhwc" : "", " k", k, " ", r, "x", r,
                  "/", stride, " pad ", pad, bias ? " +bias" : "", act.empty() ? "" : " " + act, " pool ", pk, "/", ps,
                  " pad ", pp, ceil ? " ceil" : "", y_nhwc ? " -> nhwc" : " -> nchw");
  }
};

void CheckEveryTactic(const PoolCase& pc, uint64_t seed) {
  const char* t = TypeName(pc.dt);
  const std::string act = pc.act.empty() ? "" : StrCat(", activation=\"", pc.act, "\"");
  const std::string graph =
      StrCat("opset 17\nopset sampan 1\ngraph g (x: ", t, "[", pc.n, ",", pc.c, ",", pc.h, ",", pc.w, "], w: ", t, "[",
             pc.k, ",", pc.c, ",", pc.r, ",", pc.r, "], b: ", t, "[", pc.k,
             "]) -> (y) {\n  y = sampan::FusedConvPool(x, w", pc.bias ? ", b" : "", ") {kernel_shape=[", pc.r, ",",
             pc.r, "], pads=[", pc.pad, ",", pc.pad, ",", pc.pad, ",", pc.pad, "], strides=[", pc.stride, ",",
             pc.stride, "]", act, pc.act == "Clip" ? ", activation_params=[0.0, 6.0]" : "", ", pool_kernel_shape=[",
             pc.pk, ",", pc.pk, "], pool_strides=[", pc.ps, ",", pc.ps, "], pool_pads=[", pc.pp, ",", pc.pp, ",", pc.pp,
             ",", pc.pp, "], pool_ceil_mode=", pc.ceil ? 1 : 0, "}\n}\n");
  auto g = MustParse(graph);
  const ir::Node& node = *g->nodes()[0];
  const Shape xs{pc.n, pc.c, pc.h, pc.w}, ws{pc.k, pc.c, pc.r, pc.r};
  const Tensor x = Random(pc.dt, xs, seed), w = Random(pc.dt, ws, seed + 1, -0.3f, 0.3f),
               b = Random(pc.dt, {pc.k}, seed + 2);
  std::vector<Tensor> want;
  Status st = ops::RunNode(node, g->opset(), {&x, &w, pc.bias ? &b : nullptr}, &want);
  ASSERT_TRUE(st.ok()) << pc.name() << ": " << st.ToString();
  const Shape ys = want[0].shape();
  const Tensor want32 = AsF32(want[0]);

  DeviceScope dev;
  ASSERT_EQ(cudaStreamCreate(&dev.stream), cudaSuccess);
  ASSERT_EQ(cublasLtCreate(&dev.lt), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudnnCreate(&dev.dnn), CUDNN_STATUS_SUCCESS);
  auto upload = [&](const Tensor& h) -> void* {
    auto p = dev.Alloc(h.nbytes());
    if (!p.ok() || cudaMemcpy(*p, h.raw(), h.nbytes(), cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;
    return *p;
  };
  void* dx = upload(pc.x_nhwc ? ToNhwc(x) : x);
  void* dw = upload(w);
  void* db = upload(b);
  auto dy = dev.Alloc(want[0].nbytes());
  ASSERT_TRUE(dx && dw && db && dy.ok()) << pc.name();
  std::vector<KernelInput> kin = {KernelInput{true, pc.dt, xs, nullptr}, KernelInput{true, pc.dt, ws, &w},
                                  pc.bias ? KernelInput{true, pc.dt, {pc.k}, &b} : KernelInput{}};
  KernelOptions opt;
  opt.in_nhwc = {pc.x_nhwc, false, false};
  opt.out_nhwc = pc.y_nhwc;
  RunEnv env{dev.stream, dev.lt, dev.dnn, nullptr, 0, nullptr};
  auto choice = MakeKernel(node, g->opset(), kin, {KernelOutput{pc.dt, ys}}, opt, env);
  ASSERT_TRUE(choice.ok()) << pc.name() << ": " << choice.status().ToString();
  ASSERT_TRUE(choice->kernel) << pc.name();
  NodeKernel& k = *choice->kernel;
  int fused = 0, split = 0;
  for (int cand : k.Candidates()) {
    if (!k.Select(cand).ok()) continue;
    void* ws_ptr = nullptr;
    if (k.workspace() > 0) {
      auto p = dev.Alloc(k.workspace());
      ASSERT_TRUE(p.ok());
      ws_ptr = *p;
    }
    RunEnv e{dev.stream, dev.lt, dev.dnn, ws_ptr, k.workspace(), nullptr};
    ASSERT_EQ(cudaMemset(*dy, 0xff, want[0].nbytes()), cudaSuccess);  // NaNs: every element must be written
    Status run = k.Run(e, {dx, dw, pc.bias ? db : nullptr}, {*dy});
    if (!run.ok()) {  // a library configuration that does not run is skipped by the builder too
      ASSERT_LT(cand, 6000) << pc.name() << ": fused configuration " << cand << ": " << run.ToString();
      cudaGetLastError();
      continue;
    }
    ASSERT_EQ(cudaStreamSynchronize(dev.stream), cudaSuccess) << pc.name() << " tactic " << cand;
    Tensor got = Tensor::Alloc(pc.dt, pc.y_nhwc ? Shape{ys[0], ys[2], ys[3], ys[1]} : ys);
    ASSERT_EQ(cudaMemcpy(got.mutable_raw(), *dy, got.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (pc.y_nhwc) got = FromNhwc(got);
    const double err = RelL2(AsF32(got), want32);
    EXPECT_LT(err, pc.dt == DType::kFloat16 ? 5e-3 : 2e-2)
        << pc.name() << ": tactic " << cand << " (" << k.family() << ")";
    if (cand >= 6000) {
      ++fused;
      EXPECT_STREQ(k.family(), "conv+pool");
    } else {
      ++split;
    }
  }
  EXPECT_GT(fused, 0) << pc.name() << ": no fused configuration ran";
  EXPECT_GT(split, 0) << pc.name() << ": no convolution + pool tactic ran";
  std::printf("%s: %d fused, %d split tactics\n", pc.name().c_str(), fused, split);
}

TEST(CudaConvPool, EveryTacticMatchesReference) {
  SKIP_WITHOUT_GPU();
  const PoolCase cases[] = {
      {DType::kFloat16, 2, 3, 64, 60, 64, 7, 2, 3, 3, 2, 1, false, true, "Relu", false, true},   // ResNet's stem
      {DType::kFloat16, 2, 3, 64, 60, 64, 7, 2, 3, 3, 2, 1, false, true, "Relu", false, false},  // NCHW out
      {DType::kBFloat16, 3, 3, 29, 31, 32, 3, 1, 1, 2, 2, 0, true, false, "SiLU", true, true},
      {DType::kFloat16, 1, 1, 40, 36, 128, 5, 2, 2, 3, 2, 0, true, true, "Clip", false, true},
      {DType::kFloat16, 2, 4, 67, 67, 24, 11, 4, 2, 3, 2, 0, false, true, "", true, true},  // AlexNet-like
  };
  uint64_t seed = 3;
  for (const PoolCase& c : cases) CheckEveryTactic(c, seed += 10);
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
