// Stream priorities (Triton's optimization.priority, docs/gpu-sharing.md): the mapping onto a
// device's range runs anywhere; the streams a context creates are checked on a GPU.
#include <gtest/gtest.h>

#include "backends/cuda/context.h"
#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/device.h"

namespace sampan::cuda {
namespace {

using runtime::StreamPriority;

TEST(CudaStreamPriority, MapsOntoTheDeviceRange) {
  // CUDA: lower numbers run first; an H100 reports least 0, greatest -5.
  EXPECT_EQ(StreamPriorityIn(StreamPriority::kHigh, 0, -5), -5);
  EXPECT_EQ(StreamPriorityIn(StreamPriority::kLow, 0, -5), 0);
  EXPECT_EQ(StreamPriorityIn(StreamPriority::kDefault, 0, -5), 0);
  EXPECT_EQ(StreamPriorityIn(StreamPriority::kLow, 2, -3), 2);
}

TEST(CudaStreamPriority, ContextStreamsHaveTheEnginesPriority) {
  SKIP_WITHOUT_GPU();
  builder::BuildConfig config;
  config.backend = "cuda";
  config.optimization_level = 1;
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  for (auto [p, want] :
       {std::pair{StreamPriority::kHigh, greatest}, {StreamPriority::kLow, least}, {StreamPriority::kDefault, 0}}) {
    auto plan = builder::Build(passes::testing::MustParse(R"(
        opset 17
        graph g (x: f32[2,3]) -> (y) {
          y = Relu(x)
        })"),
                               config, nullptr);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    runtime::EngineOptions eo;
    eo.stream_priority = p;
    auto engine = runtime::Engine::Create(std::move(plan).value(), eo);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto& cuda_engine = dynamic_cast<CudaEngine&>((*engine)->backend_engine());
    auto ctx = cuda_engine.CreateContext();
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    auto* cuda_ctx = dynamic_cast<CudaContext*>(ctx->get());
    ASSERT_NE(cuda_ctx, nullptr);
    int got = 1234;
    ASSERT_EQ(cudaStreamGetPriority(cuda_ctx->stream(), &got), cudaSuccess);
    EXPECT_EQ(got, want) << runtime::StreamPriorityName(p) << " (device range: least " << least << ", greatest "
                         << greatest << ")";
    // The context still runs.
    auto out = (*engine)->CreateContext();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    auto y = (*out)->Run({{"x", testing::Random(DType::kFloat32, {2, 3}, 1)}});
    ASSERT_TRUE(y.ok()) << y.status().ToString();
  }
}

}  // namespace
}  // namespace sampan::cuda
