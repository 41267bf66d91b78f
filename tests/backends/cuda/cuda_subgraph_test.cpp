// Control-flow nodes on the CUDA backend: the node is a host step, and its subgraphs (If
// branches, Loop and Scan bodies, nested ones too) run on CUDA kernels
// (backends/cuda/subgraph_executor.h), a context per subgraph and input types, a bucket
// per input shapes. They give what the reference executor gives; subgraphs whose shapes
// keep changing, or that hold sequences, go back to the reference kernels and still give
// the same answers; an error inside a body names the node. Without a GPU these skip.
#include <gtest/gtest.h>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/subgraph_executor.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;
using testing::Random;

std::vector<Tensor> RunOn(const std::string& backend, const std::string& text, const std::map<std::string, Tensor>& in,
                          builder::BuildReport* report = nullptr) {
  builder::BuildConfig config;
  config.backend = backend;
  auto p = builder::Build(MustParse(text), config, report);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  auto e = runtime::Engine::Create(std::move(p).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return {};
  auto ctx = (*e)->CreateContext();
  EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
  if (!ctx.ok()) return {};
  auto out = (*ctx)->Run(in);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : std::vector<Tensor>{};
}

double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::fabs(ElementAsDouble(a, i) - ElementAsDouble(b, i)));
  return worst;
}

// An RNN-like loop: h = Tanh or Sigmoid(h W + x U) by the iteration's parity (an If inside
// the body), scan outputs stacked. Products in FP32 without TF32 (the cuda default).
const char* kLoop = R"(
  opset 17
  graph g (m: i64[], h0: f32[4,64], x: f32[4,32]) -> (h, hs) {
    w = const f32[64,64] random
    u = const f32[32,64] random
    two = const i64[] {2}
    zero = const i64[] {0}
    h, hs = Loop(m, _, h0) {body = graph b (i: i64[], c: bool[], hin: f32[4,64]) -> (c, hout, hout) {
      a = MatMul(hin, w)
      bx = MatMul(x, u)
      s = Add(a, bx)
      r = Mod(i, two)
      even = Equal(r, zero)
      hout = If(even) {then_branch = graph t () -> (p) { p = Tanh(s) },
                       else_branch = graph e () -> (q) { q = Sigmoid(s) }}
    }} @loop
  })";

TEST(CudaSubgraph, LoopBodyAndNestedIfRunOnCudaKernels) {
  std::map<std::string, Tensor> in{{"m", Tensor::FromVector<int64_t>(DType::kInt64, {5}, {})},
                                   {"h0", Random(DType::kFloat32, {4, 64}, 1, -0.5f, 0.5f)},
                                   {"x", Random(DType::kFloat32, {4, 32}, 2, -0.5f, 0.5f)}};
  auto want = RunOn("reference", kLoop, in);  // (runs without a GPU too: the graph is valid)
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(want[1].shape(), (Shape{5, 4, 64}));
  SKIP_WITHOUT_GPU();
  builder::BuildReport report;
  const uint64_t before = CudaSubgraphExecutor::runs_on_cuda_kernels();
  auto got = RunOn("cuda", kLoop, in, &report);
  // The scan output's shape depends on the trip count, an input value: the enclosing graph runs on
  // the host (the build says so), and the subgraphs still run on CUDA kernels: five bodies, and
  // inside each the If, a host step of the body's context, whose branch runs on CUDA kernels too.
  EXPECT_FALSE(report.host_nodes.empty());
  EXPECT_EQ(CudaSubgraphExecutor::runs_on_cuda_kernels() - before, 10u)
      << "declined " << CudaSubgraphExecutor::runs_declined();
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_LE(MaxAbsDiff(got[i], want[i]), 1e-4) << "output " << i;
}

// A Loop whose outputs have static shapes (carried state only): the enclosing graph is planned
// on the device, the Loop is its one host step, and the build says where the body runs.
TEST(CudaSubgraph, ControlFlowNodeIsAHostStepSayingWhereItsBodyRuns) {
  const char* text = R"(
    opset 17
    graph g (h0: f32[4,64]) -> (h) {
      w = const f32[64,64] random
      m = const i64[] {6}
      a = Relu(h0)
      h = Loop(m, _, a) {body = graph b (i: i64[], c: bool[], hin: f32[4,64]) -> (c, hout) {
        p = MatMul(hin, w)
        hout = Tanh(p)
      }} @loop
    })";
  std::map<std::string, Tensor> in{{"h0", Random(DType::kFloat32, {4, 64}, 3, -0.5f, 0.5f)}};
  auto want = RunOn("reference", text, in);
  ASSERT_EQ(want.size(), 1u);
  SKIP_WITHOUT_GPU();
  builder::BuildReport report;
  const uint64_t before = CudaSubgraphExecutor::runs_on_cuda_kernels();
  auto got = RunOn("cuda", text, in, &report);
  ASSERT_EQ(report.host_nodes.size(), 1u);
  EXPECT_NE(report.host_nodes[0].reason.find("subgraphs' nodes run on CUDA kernels"), std::string::npos)
      << report.host_nodes[0].reason;
  EXPECT_EQ(CudaSubgraphExecutor::runs_on_cuda_kernels() - before, 6u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LE(MaxAbsDiff(got[0], want[0]), 1e-4);
}

// A body that reshapes with a shape and unsqueezes with axes read from the enclosing graph (as
// exported decoders do): those small integer captures are compiled into the body's program, so
// its shapes are known and it runs on CUDA kernels.
TEST(CudaSubgraph, IntegerCapturesAreCompiledIn) {
  const char* text = R"(
    opset 17
    graph g (h0: f32[1,1,16], m: i64[]) -> (h, hs) {
      w = const f32[16,16] random
      flat = const i64[2] {1, 16}
      ax = const i64[1] {0}
      h, hs = Loop(m, _, h0) {body = graph b (i: i64[], c: bool[], hin: f32[1,1,16]) -> (c, hout, r) {
        r = Reshape(hin, flat)
        p = MatMul(r, w)
        t = Tanh(p)
        hout = Unsqueeze(t, ax)
      }} @loop
    })";
  std::map<std::string, Tensor> in{{"h0", Random(DType::kFloat32, {1, 1, 16}, 4, -0.5f, 0.5f)},
                                   {"m", Tensor::FromVector<int64_t>(DType::kInt64, {5}, {})}};
  auto want = RunOn("reference", text, in);
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(want[1].shape(), (Shape{5, 1, 16}));
  SKIP_WITHOUT_GPU();
  const uint64_t before = CudaSubgraphExecutor::runs_on_cuda_kernels();
  auto got = RunOn("cuda", text, in);
  EXPECT_EQ(CudaSubgraphExecutor::runs_on_cuda_kernels() - before, 5u)
      << "declined " << CudaSubgraphExecutor::runs_declined();
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_LE(MaxAbsDiff(got[i], want[i]), 1e-4) << "output " << i;
}

TEST(CudaSubgraph, ContextsAreReusedAcrossRunsAndTripCounts) {
  SKIP_WITHOUT_GPU();  // (the graph's reference run: LoopBodyAndNestedIfRunOnCudaKernels)
  builder::BuildConfig config;
  config.backend = "cuda";
  auto p = builder::Build(MustParse(kLoop), config, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto e = runtime::Engine::Create(std::move(p).value());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto ctx = (*e)->CreateContext();
  ASSERT_TRUE(ctx.ok());
  for (int64_t m : {3, 0, 7}) {
    std::map<std::string, Tensor> in{{"m", Tensor::FromVector<int64_t>(DType::kInt64, {m}, {})},
                                     {"h0", Random(DType::kFloat32, {4, 64}, 10 + m, -0.5f, 0.5f)},
                                     {"x", Random(DType::kFloat32, {4, 32}, 20 + m, -0.5f, 0.5f)}};
    const uint64_t before = CudaSubgraphExecutor::runs_on_cuda_kernels();
    auto got = (*ctx)->Run(in);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(CudaSubgraphExecutor::runs_on_cuda_kernels() - before, static_cast<uint64_t>(2 * m)) << "m " << m;
    auto want = RunOn("reference", kLoop, in);
    ASSERT_EQ(want.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_LE(MaxAbsDiff((*got)[i], want[i]), 1e-4) << "m " << m << " output " << i;
  }
}

// A Scan computing a running sum and a per-step product with an outer-scope weight (a
// capture), at FP16: the body's nodes run in FP16 on the device.
TEST(CudaSubgraph, ScanWithCapturesMatchesTheReference) {
  for (DType dt : {DType::kFloat32, DType::kFloat16}) {
    const std::string t = testing::TypeName(dt);
    const std::string text = R"(
      opset 17
      graph g (s0: )" + t + R"([8,16], xs: )" +
                             t + R"([6,8,16], w: )" + t + R"([16,16]) -> (s, ys) {
        s, ys = Scan(s0, xs) {num_scan_inputs = 1, body = graph b (acc: )" +
                             t + R"([8,16], x: )" + t + R"([8,16]) -> (nacc, y) {
          nacc = Add(acc, x)
          y = MatMul(nacc, w)
        }}
      })";
    std::map<std::string, Tensor> in{{"s0", Random(dt, {8, 16}, 3)},
                                     {"xs", Random(dt, {6, 8, 16}, 4)},
                                     {"w", Random(dt, {16, 16}, 5, -0.25f, 0.25f)}};
    auto want = RunOn("reference", text, in);
    ASSERT_EQ(want.size(), 2u);
    EXPECT_EQ(want[1].shape(), (Shape{6, 8, 16}));
    SKIP_WITHOUT_GPU();
    const uint64_t before = CudaSubgraphExecutor::runs_on_cuda_kernels();
    auto got = RunOn("cuda", text, in);
    EXPECT_EQ(CudaSubgraphExecutor::runs_on_cuda_kernels() - before, 6u) << t;
    ASSERT_EQ(got.size(), 2u);
    const double tol = dt == DType::kFloat32 ? 1e-4 : 2e-2;
    for (size_t i = 0; i < 2; ++i) EXPECT_LE(MaxAbsDiff(got[i], want[i]), tol) << t << " output " << i;
  }
}

TEST(CudaSubgraph, GrowingShapesGoBackToTheReferenceKernels) {
  // The carried value doubles each iteration: a new shape signature every time.
  const char* text = R"(
    opset 17
    graph g (m: i64[], x: f32[1,3]) -> (y) {
      y = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], acc: f32[?,3]) -> (c, out) {
        last = Neg(acc)
        out = Concat(acc, last) {axis = 0}
      }}
    })";
  std::map<std::string, Tensor> in{{"m", Tensor::FromVector<int64_t>(DType::kInt64, {12}, {})},
                                   {"x", Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3}, {1, 3})}};
  auto want = RunOn("reference", text, in);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_EQ(want[0].shape(), (Shape{4096, 3}));
  SKIP_WITHOUT_GPU();
  const uint64_t taken = CudaSubgraphExecutor::runs_on_cuda_kernels();
  const uint64_t declined = CudaSubgraphExecutor::runs_declined();
  auto got = RunOn("cuda", text, in);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(MaxAbsDiff(got[0], want[0]), 0.0);
  EXPECT_EQ(CudaSubgraphExecutor::runs_on_cuda_kernels() - taken, CudaSubgraphExecutor::kMaxSignatures);
  EXPECT_EQ(CudaSubgraphExecutor::runs_declined() - declined, 12 - CudaSubgraphExecutor::kMaxSignatures);
}

// A body that builds a sequence: the reference kernels run it, with the same answer.
TEST(CudaSubgraph, SequencesStayWithTheReferenceKernels) {
  const char* text = R"(
    opset 17
    graph g (m: i64[], x: f32[2,3]) -> (y) {
      e = SequenceEmpty() {dtype = 1}
      s = Loop(m, _, e) {body = graph b (i: i64[], c: bool[], seq: sequence[]) -> (c, nseq) {
        xi = Mul(x, x)
        nseq = SequenceInsert(seq, xi)
      }}
      y = ConcatFromSequence(s) {axis = 0}
    })";
  std::map<std::string, Tensor> in{{"m", Tensor::FromVector<int64_t>(DType::kInt64, {3}, {})},
                                   {"x", Random(DType::kFloat32, {2, 3}, 9)}};
  auto want = RunOn("reference", text, in);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_EQ(want[0].shape(), (Shape{6, 3}));
  SKIP_WITHOUT_GPU();
  const uint64_t taken = CudaSubgraphExecutor::runs_on_cuda_kernels();
  auto got = RunOn("cuda", text, in);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(MaxAbsDiff(got[0], want[0]), 0.0);
  EXPECT_EQ(CudaSubgraphExecutor::runs_on_cuda_kernels(), taken);
}

// A lookup inside a body whose index goes out of range: the error names the Loop.
TEST(CudaSubgraph, AnErrorInsideABodyNamesTheNode) {
  const char* text = R"(
    opset 17
    graph g (m: i64[], x: f32[2], i0: i64[1]) -> (y) {
      t = const f32[3,2] random
      shp = const i64[1] {2}
      y = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], acc: f32[2]) -> (c, out) {
        row = Gather(t, i0) {axis = 0}
        r = Reshape(row, shp)
        out = Add(acc, r)
      }} @loop
    })";
  std::map<std::string, Tensor> in0{{"m", Tensor::FromVector<int64_t>(DType::kInt64, {2}, {})},
                                    {"x", Tensor::FromVector<float>(DType::kFloat32, {1, 2}, {2})},
                                    {"i0", Tensor::FromVector<int64_t>(DType::kInt64, {1}, {1})}};
  ASSERT_EQ(RunOn("reference", text, in0).size(), 1u);
  SKIP_WITHOUT_GPU();
  builder::BuildConfig config;
  config.backend = "cuda";
  auto p = builder::Build(MustParse(text), config, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto e = runtime::Engine::Create(std::move(p).value());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto ctx = (*e)->CreateContext();
  ASSERT_TRUE(ctx.ok());
  std::map<std::string, Tensor> in{{"m", Tensor::FromVector<int64_t>(DType::kInt64, {2}, {})},
                                   {"x", Tensor::FromVector<float>(DType::kFloat32, {1, 2}, {2})},
                                   {"i0", Tensor::FromVector<int64_t>(DType::kInt64, {1}, {1})}};
  auto ok = (*ctx)->Run(in);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(MaxAbsDiff((*ok)[0], RunOn("reference", text, in)[0]), 0.0);
  in["i0"] = Tensor::FromVector<int64_t>(DType::kInt64, {7}, {1});
  auto bad = (*ctx)->Run(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("Loop 'loop' body"), std::string::npos) << bad.status().ToString();
  // The context still serves after the error.
  in["i0"] = Tensor::FromVector<int64_t>(DType::kInt64, {0}, {1});
  auto again = (*ctx)->Run(in);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(MaxAbsDiff((*again)[0], RunOn("reference", text, in)[0]), 0.0);
}

}  // namespace
}  // namespace sampan::cuda
