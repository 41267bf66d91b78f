// No heap allocation per inference after warm-up, on the CPU backend.
//
// The test binary interposes malloc and friends (glibc; operator new and
// oneDNN's own allocations go through them) with pass-through versions that
// count calls while a flag is set. The flag is set only around the measured
// region of this test, so every other test of the shared binary is unaffected.
// Sanitizer builds have their own allocator interceptors: the test skips there.
#include <dlfcn.h>
#include <malloc.h>

#include <atomic>

#include "backends/cpu/cpu_test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SP_COUNT_ALLOCS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SP_COUNT_ALLOCS 0
#endif
#endif
#if !defined(SP_COUNT_ALLOCS) && defined(__GLIBC__)
#define SP_COUNT_ALLOCS 1
#endif
#ifndef SP_COUNT_ALLOCS
#define SP_COUNT_ALLOCS 0
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};
inline void Count() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

#if SP_COUNT_ALLOCS
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  Count();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t s) {
  Count();
  return __libc_calloc(n, s);
}
void* realloc(void* p, size_t n) {
  Count();
  return __libc_realloc(p, n);
}
void* memalign(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  Count();
  void* p = __libc_memalign(a, n);
  if (p == nullptr) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}
#endif

namespace sampan::cpu::testing {
namespace {

//! Allocations made by `fn` (on any thread) while counting.
template <class Fn>
long CountAllocations(Fn&& fn) {
  g_allocs = 0;
  g_counting = true;
  fn();
  g_counting = false;
  return g_allocs.load();
}

// A small network touching every kind of step: oneDNN conv with residual and
// activation post-ops, pooling, reorders out of the blocked layout, matmul,
// our elementwise / softmax / layernorm / attention / data-movement kernels.
const char* kNet = R"(opset 17
  opset sampan 1
  graph g (x: f32[N,8,16,16], t: f32[N,16,32], m: f32[N,1,1,16], i: i64[N,16]) -> (y, z) {
    w1 = const f32[16,8,3,3] random
    b1 = const f32[16] random
    c1 = sampan::FusedConv(x, w1, b1) {pads=[1,1,1,1], activation="Relu"}
    w2 = const f32[16,16,3,3] random
    c2 = sampan::FusedConv(c1, w2, b1, c1) {pads=[1,1,1,1], activation="Relu"}
    p = MaxPool(c2) {kernel_shape=[2,2], strides=[2,2]}
    g = GlobalAveragePool(p)
    f = Flatten(g)
    wf = const f32[16,10] random
    l = MatMul(f, wf)
    y = Softmax(l)
    emb = const f32[8,32] random
    e = Gather(emb, i)
    s = Add(t, e)
    ls = const f32[32] random
    n = LayerNormalization(s, ls, ls)
    wq = const f32[32,32] random
    bq = const f32[32] random
    q = sampan::FusedMatMul(n, wq, bq)
    shp = const i64[4] {0, 16, 4, 8}
    q4 = Reshape(q, shp)
    qh = Transpose(q4) {perm=[0,2,1,3]}
    a = sampan::Attention(qh, qh, qh, m) {scale=0.35}
    at = Transpose(a) {perm=[0,2,1,3]}
    shp2 = const i64[3] {0, 16, 32}
    z0 = Reshape(at, shp2)
    z = Sigmoid(z0)
  }
)";

std::map<std::string, Tensor> NetInputs(int64_t batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return {{"x", RandomTensor(DType::kFloat32, {batch, 8, 16, 16}, rng)},
          {"t", RandomTensor(DType::kFloat32, {batch, 16, 32}, rng)},
          {"m", RandomTensor(DType::kFloat32, {batch, 1, 1, 16}, rng)},
          {"i", RandomTensor(DType::kInt64, {batch, 16}, rng, 0, 7.99)}};
}

// Per step: heap allocations of one inference after warm-up, for one batch size.
std::vector<long> AllocationsPerStep(CpuContext& ctx, const std::map<std::string, Tensor>& inputs,
                                     std::vector<std::string>* labels) {
  auto prog = ctx.ProgramFor(inputs);
  EXPECT_TRUE(prog.ok() && *prog != nullptr);
  if (!prog.ok() || *prog == nullptr) return {};
  Program& p = **prog;
  *labels = p.labels();
  EXPECT_TRUE(p.CopyInputs(inputs).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ctx.RunSteps(p).ok());  // warm-up: thread pool, oneDNN caches
  std::vector<long> per_step(p.num_steps(), 0);
  const long copy_in = CountAllocations([&] { EXPECT_TRUE(p.CopyInputs(inputs).ok()); });
  EXPECT_EQ(copy_in, 0) << "copying the inputs in allocated";
  // Whole inference in one measured region, then step by step to attribute them.
  const long whole = CountAllocations([&] { EXPECT_TRUE(ctx.RunSteps(p).ok()); });
  long sum = 0;
  for (size_t i = 0; i < p.num_steps(); ++i) {
    per_step[i] = CountAllocations([&] { EXPECT_TRUE(ctx.RunStepForTest(p, i).ok()); });
    sum += per_step[i];
  }
  EXPECT_EQ(whole, sum) << "allocations outside the steps";
  return per_step;
}

TEST(CpuNoAlloc, NoHeapAllocationPerInferenceAfterWarmUp) {
#if !SP_COUNT_ALLOCS
  GTEST_SKIP() << "allocation counting needs glibc without sanitizers";
#else
  auto engine = CpuEngineFor(kNet, 2);
  ASSERT_NE(engine, nullptr);
  auto& cpu = dynamic_cast<CpuEngine&>(engine->backend_engine());
  CpuContext ctx(cpu);
  for (int64_t batch : {2, 8}) {
    SCOPED_TRACE(StrCat("batch ", batch));
    std::vector<std::string> labels;
    const std::vector<long> allocs = AllocationsPerStep(ctx, NetInputs(batch, 3), &labels);
    ASSERT_EQ(allocs.size(), labels.size());
    for (size_t i = 0; i < labels.size(); ++i) {
      EXPECT_EQ(labels[i].find("[reference]"), std::string::npos) << "fell back: " << labels[i];
      const bool onednn = labels[i].find("[onednn") != std::string::npos || labels[i].rfind("reorder", 0) == 0 ||
                          labels[i].rfind("residual", 0) == 0;
      // Sampan's own kernels, the arena and the input copy allocate nothing. oneDNN
      // 2.x's dnnl_primitive_execute builds a small std::unordered_map of its
      // arguments on every call (a handful of nodes, never tensor memory): bounded.
      if (onednn) EXPECT_LE(allocs[i], 10) << labels[i];
      else EXPECT_EQ(allocs[i], 0) << labels[i];
    }
  }

  // The counter itself works (so the assertions above can fail).
  const long probe = CountAllocations([] {
    void* p = malloc(64);
    free(p);
  });
  EXPECT_EQ(probe, 1);
#endif
}

}  // namespace
}  // namespace sampan::cpu::testing
