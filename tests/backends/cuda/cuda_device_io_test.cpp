// Device-resident I/O (runtime::Context::RunDevice, TensorRT's execute_v2 with device bindings):
// device inputs and outputs give the host run's answer bit for bit, caller buffers are written
// in place and checked, host-computed outputs go up, producers' streams are waited for. The
// argument checks and the host backends' refusal run without a GPU; the rest skips and says why.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;
using testing::Random;

const char* kGraph = R"(
  opset 17
  graph g (x: f32[N,16], b: f32[16]) -> (y, s) {
    w = const f32[16,16] random
    m = MatMul(x, w)
    a = Add(m, b)
    y = Relu(a)
    s = Softmax(a) {axis=-1}
  })";

std::shared_ptr<runtime::Engine> MakeEngine(const std::string& backend, const char* text) {
  builder::BuildConfig config;
  config.backend = backend;
  auto p = builder::Build(MustParse(text), config, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return nullptr;
  auto e = runtime::Engine::Create(std::move(p).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

TEST(DeviceIo, HostBackendsRefuseDeviceMemoryByName) {
  auto engine = MakeEngine("reference", kGraph);
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  runtime::DeviceRun run;
  run.host_inputs["x"] = Random(DType::kFloat32, {2, 16}, 1);
  run.host_inputs["b"] = Random(DType::kFloat32, {16}, 2);
  auto r = (*ctx)->RunDevice(run);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("--backend cuda"), std::string::npos) << r.status().message();
}

TEST(DeviceIo, ArgumentsAreCheckedBeforeTheBackendRuns) {
  auto engine = MakeEngine("reference", kGraph);
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  runtime::DeviceRun twice;
  twice.host_inputs["x"] = Random(DType::kFloat32, {2, 16}, 1);
  twice.device_inputs["x"] = runtime::DeviceTensor{DType::kFloat32, {2, 16}, reinterpret_cast<void*>(0x1000), nullptr};
  auto r = (*ctx)->RunDevice(twice);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 'x' is given twice"), std::string::npos) << r.status().message();

  runtime::DeviceRun null_ptr;
  null_ptr.device_inputs["x"] = runtime::DeviceTensor{DType::kFloat32, {2, 16}, nullptr, nullptr};
  r = (*ctx)->RunDevice(null_ptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 'x': a null device pointer"), std::string::npos) << r.status().message();

  runtime::DeviceRun stream0;
  stream0.host_inputs["x"] = Random(DType::kFloat32, {2, 16}, 1);
  stream0.wait_streams = {0};
  r = (*ctx)->RunDevice(stream0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("stream 0"), std::string::npos) << r.status().message();
}

// Device memory holding a copy of `t`.
std::shared_ptr<void> Upload(const Tensor& t) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, t.nbytes()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, t.raw(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

Tensor Download(const runtime::DeviceTensor& d) {
  Tensor t = Tensor::Alloc(d.dtype, d.shape);
  EXPECT_EQ(cudaMemcpy(t.mutable_raw(), d.data, d.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return t;
}

void ExpectSameBits(const Tensor& want, const Tensor& got, const std::string& what) {
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  ASSERT_EQ(want.shape(), got.shape()) << what;
  EXPECT_EQ(std::memcmp(want.raw(), got.raw(), want.nbytes()), 0) << what;
}

TEST(CudaDeviceIo, DeviceInAndOutGiveTheHostRunsBits) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine("cuda", kGraph);
  ASSERT_TRUE(engine);
  auto host_ctx = engine->CreateContext();
  auto dev_ctx = engine->CreateContext();
  ASSERT_TRUE(host_ctx.ok() && dev_ctx.ok());
  for (int64_t n : {3, 5, 3}) {  // a new shape bucket is planned from downloaded inputs; then replayed
    const Tensor x = Random(DType::kFloat32, {n, 16}, 10 + n), b = Random(DType::kFloat32, {16}, 20 + n);
    auto want = (*host_ctx)->Run({{"x", x}, {"b", b}});
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    auto dx = Upload(x);
    runtime::DeviceRun run;
    run.device_inputs["x"] = runtime::DeviceTensor{DType::kFloat32, x.shape(), dx.get(), nullptr};
    run.host_inputs["b"] = b;  // host and device inputs mix
    for (int rep = 0; rep < 2; ++rep) {
      auto got = (*dev_ctx)->RunDevice(run);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(got->size(), 2u);
      for (size_t i = 0; i < 2; ++i) {
        ASSERT_TRUE((*got)[i].owner) << "runtime-allocated output " << i;
        ExpectSameBits((*want)[i], Download((*got)[i]), "output " + std::to_string(i) + " n=" + std::to_string(n));
      }
    }
  }
}

TEST(CudaDeviceIo, CallerBuffersAreWrittenInPlaceAndChecked) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine("cuda", kGraph);
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  const Tensor x = Random(DType::kFloat32, {4, 16}, 1), b = Random(DType::kFloat32, {16}, 2);
  auto want = (*ctx)->Run({{"x", x}, {"b", b}});
  ASSERT_TRUE(want.ok());
  auto dx = Upload(x), db = Upload(b);
  auto dy = Upload(Tensor::Alloc(DType::kFloat32, {4, 16}));
  runtime::DeviceRun run;
  run.device_inputs["x"] = runtime::DeviceTensor{DType::kFloat32, {4, 16}, dx.get(), nullptr};
  run.device_inputs["b"] = runtime::DeviceTensor{DType::kFloat32, {16}, db.get(), nullptr};
  run.outputs["y"] = runtime::DeviceTensor{DType::kFloat32, {4, 16}, dy.get(), nullptr};
  auto got = (*ctx)->RunDevice(run);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)[0].data, dy.get());  // the caller's buffer, not a new one
  EXPECT_FALSE((*got)[0].owner);
  ExpectSameBits((*want)[0], Download((*got)[0]), "y in the caller's buffer");
  ExpectSameBits((*want)[1], Download((*got)[1]), "s");

  run.outputs["y"].shape = {2, 16};
  auto bad = (*ctx)->RunDevice(run);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("output 'y' is f32[4,16], the buffer given for it is f32[2,16]"),
            std::string::npos)
      << bad.status().message();
  // A wrong feed is named as a host one is.
  run.outputs.clear();
  run.device_inputs["b"].dtype = DType::kFloat16;
  bad = (*ctx)->RunDevice(run);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("input 'b' must be"), std::string::npos) << bad.status().message();
  // The context still serves.
  run.device_inputs["b"].dtype = DType::kFloat32;
  EXPECT_TRUE((*ctx)->RunDevice(run).ok());
}

TEST(CudaDeviceIo, ProducerStreamsAreWaitedFor) {
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine("cuda", kGraph);
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  const Tensor x = Random(DType::kFloat32, {64, 16}, 3), b = Random(DType::kFloat32, {16}, 4);
  auto want = (*ctx)->Run({{"x", x}, {"b", b}});
  ASSERT_TRUE(want.ok());
  cudaStream_t producer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, x.nbytes()), cudaSuccess);
  std::memcpy(pinned, x.raw(), x.nbytes());
  auto dx = Upload(Tensor::Alloc(DType::kFloat32, {64, 16}));  // zeros until the producer writes x
  ASSERT_EQ(cudaMemsetAsync(dx.get(), 0, x.nbytes(), producer), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {
    // The producer's copy is queued, not finished, when the run starts.
    ASSERT_EQ(cudaMemcpyAsync(dx.get(), pinned, x.nbytes(), cudaMemcpyHostToDevice, producer), cudaSuccess);
    runtime::DeviceRun run;
    run.device_inputs["x"] = runtime::DeviceTensor{DType::kFloat32, {64, 16}, dx.get(), nullptr};
    run.host_inputs["b"] = b;
    run.wait_streams = {reinterpret_cast<uintptr_t>(producer)};
    auto got = (*ctx)->RunDevice(run);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameBits((*want)[0], Download((*got)[0]), "y after the producer's copy");
    ASSERT_EQ(cudaMemsetAsync(dx.get(), 0, x.nbytes(), producer), cudaSuccess);
  }
  cudaStreamSynchronize(producer);
  cudaStreamDestroy(producer);
  cudaFreeHost(pinned);
}

// A graph the CUDA backend runs on the host as a whole (a Loop whose trip count is an input's
// value shapes an output): device inputs are downloaded for it and its outputs go up.
const char* kHostGraph = R"(
  opset 17
  graph g (m: i64[], x: f32[4,8]) -> (h, hs) {
    one = const f32[] {1}
    h, hs = Loop(m, _, x) {body = graph b (i: i64[], c: bool[], hin: f32[4,8]) -> (c, hout, hout) {
      hout = Add(hin, one)
    }}
  })";

TEST(CudaDeviceIo, OutputsComputedOnTheHostGoUp) {
  const Tensor m = Tensor::FromVector<int64_t>(DType::kInt64, {3}, {});
  const Tensor x = Random(DType::kFloat32, {4, 8}, 5);
  auto reference = MakeEngine("reference", kHostGraph);  // (runs without a GPU too: the graph is valid)
  ASSERT_TRUE(reference);
  auto ref_ctx = reference->CreateContext();
  ASSERT_TRUE(ref_ctx.ok());
  auto want = (*ref_ctx)->Run({{"m", m}, {"x", x}});
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  SKIP_WITHOUT_GPU();
  auto engine = MakeEngine("cuda", kHostGraph);
  ASSERT_TRUE(engine);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  auto dm = Upload(m), dx = Upload(x);
  runtime::DeviceRun run;
  run.device_inputs["m"] = runtime::DeviceTensor{DType::kInt64, {}, dm.get(), nullptr};
  run.device_inputs["x"] = runtime::DeviceTensor{DType::kFloat32, {4, 8}, dx.get(), nullptr};
  auto got = (*ctx)->RunDevice(run);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  ExpectSameBits((*want)[0], Download((*got)[0]), "h");
  ExpectSameBits((*want)[1], Download((*got)[1]), "hs");
  EXPECT_EQ((*got)[1].shape, (Shape{3, 4, 8}));
}

}  // namespace
}  // namespace sampan::cuda
