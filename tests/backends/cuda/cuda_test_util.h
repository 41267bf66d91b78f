// Shared by the CUDA kernel tests that run single nodes against the reference kernels:
// the skip without a GPU (saying why) and typed random inputs.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/node_kernel.h"
#include "base/tensor.h"
#include "builder/builder.h"
#include "passes/pass_test_util.h"
#include "runtime/backend.h"
#include "runtime/engine.h"

#define SKIP_WITHOUT_GPU()                                                        \
  do {                                                                            \
    const ::sampan::runtime::Backend* b = ::sampan::runtime::FindBackend("cuda"); \
    if (b == nullptr) GTEST_SKIP() << "the CUDA backend is not in this build";    \
    ::sampan::Status st = b->available();                                         \
    if (!st.ok()) GTEST_SKIP() << "needs a GPU: " << st.ToString();               \
  } while (0)

namespace sampan::cuda::testing {

inline const char* TypeName(DType t) {
  return t == DType::kFloat16 ? "f16" : t == DType::kBFloat16 ? "bf16" : "f32";
}

//! Uniform in [lo, hi), as f32 cast to `dt`.
inline Tensor Random(DType dt, const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t = Tensor::Alloc(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = u(rng);
  return dt == DType::kFloat32 ? t : *CastTensor(t, dt);
}

//! "2,3,4": a shape as the IR text writes it.
inline std::string Dims(const Shape& s) {
  std::ostringstream os;
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  return os.str();
}

//! Integers uniform in [lo, hi) as `dt`.
inline Tensor Ints(DType dt, const Shape& s, uint64_t seed, int64_t lo, int64_t hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> u(lo, hi - 1);
  Tensor t = Tensor::Alloc(DType::kInt64, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<int64_t>()[i] = u(rng);
  return dt == DType::kInt64 ? t : *CastTensor(t, dt);
}

// NCHW <-> NHWC of a 4-D tensor (any element type: bytes are moved).
inline Tensor ToNhwc(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor o = Tensor::Alloc(t.dtype(), {s[0], s[2], s[3], s[1]});
  const size_t e = DTypeSize(t.dtype());
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(o.mutable_raw());
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w)
          std::memcpy(dst + static_cast<size_t>(((n * s[2] + h) * s[3] + w) * s[1] + c) * e,
                      src + static_cast<size_t>(((n * s[1] + c) * s[2] + h) * s[3] + w) * e, e);
  return o;
}
inline Tensor FromNhwc(const Tensor& t) {  // [N, H, W, C] -> [N, C, H, W]
  const Shape& s = t.shape();
  Tensor o = Tensor::Alloc(t.dtype(), {s[0], s[3], s[1], s[2]});
  const size_t e = DTypeSize(t.dtype());
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(o.mutable_raw());
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t h = 0; h < s[1]; ++h)
      for (int64_t w = 0; w < s[2]; ++w)
        for (int64_t c = 0; c < s[3]; ++c)
          std::memcpy(dst + static_cast<size_t>(((n * s[3] + c) * s[1] + h) * s[2] + w) * e,
                      src + static_cast<size_t>(((n * s[1] + h) * s[2] + w) * s[3] + c) * e, e);
  return o;
}

//! A stream, library handles and device buffers, released together.
struct DeviceScope {
  std::vector<void*> bufs;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;
  ~DeviceScope() {
    if (stream) cudaStreamSynchronize(stream);
    for (void* p : bufs) cudaFree(p);
    if (dnn) cudnnDestroy(dnn);
    if (lt) cublasLtDestroy(lt);
    if (stream) cudaStreamDestroy(stream);
  }
  Result<void*> Alloc(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) return Internal("cudaMalloc of ", bytes, " bytes");
    bufs.push_back(p);
    return p;
  }
};

inline Tensor AsF32(const Tensor& t) {
  return t.dtype() == DType::kFloat32 ? t : *CastTensor(t, DType::kFloat32);
}

//! ||got - want|| / ||want|| in f64; infinity when NaNs differ.
inline double RelL2(const Tensor& got, const Tensor& want) {
  auto g = *CastTensor(got, DType::kFloat64);
  auto w = *CastTensor(want, DType::kFloat64);
  double num = 0, den = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double a = g.data<double>()[i], b = w.data<double>()[i];
    if (std::isnan(a) != std::isnan(b)) return INFINITY;
    if (std::isnan(a)) continue;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

//! Builds the IR text `graph` for `backend` at `precision` (TF32 off, level 1) and runs it
//! `runs` times (`cuda_graph`: captured after the first). `host_nodes` (when given) gets the
//! number of nodes the backend's capability query left on the host.
inline Result<std::vector<Tensor>> BuildAndRun(const std::string& graph, const std::string& backend,
                                               builder::Precision precision, const std::map<std::string, Tensor>& in,
                                               bool cuda_graph = false, int runs = 1, size_t* host_nodes = nullptr) {
  builder::BuildConfig config;
  config.backend = backend;
  config.precision = precision;
  config.allow_tf32 = false;
  config.optimization_level = 1;
  builder::BuildReport report;
  SP_ASSIGN_OR_RETURN(plan::Plan p, builder::Build(passes::testing::MustParse(graph), config, &report));
  if (host_nodes) {
    auto it = report.kernel_counts.find("host");
    *host_nodes = it == report.kernel_counts.end() ? 0 : it->second;
  }
  runtime::EngineOptions eo;
  eo.use_cuda_graph = cuda_graph;
  SP_ASSIGN_OR_RETURN(auto engine, runtime::Engine::Create(std::move(p), eo));
  SP_ASSIGN_OR_RETURN(auto ctx, engine->CreateContext());
  std::vector<Tensor> out;
  for (int r = 0; r < runs; ++r) {
    SP_ASSIGN_OR_RETURN(out, ctx->Run(in));
  }
  return out;
}

//! The graph on "cuda" at `precision` (eager, then under CUDA-graph replay) against the
//! reference backend in FP32: every output within `tol` relative L2, integer outputs
//! exactly equal, and (unless `allow_host`) no node left on the host.
inline void ExpectMatchesReference(const std::string& name, const std::string& graph,
                                   const std::map<std::string, Tensor>& in, builder::Precision precision, double tol,
                                   bool allow_host = false) {
  auto want = BuildAndRun(graph, "reference", builder::Precision::kFP32, in);
  ASSERT_TRUE(want.ok()) << name << ": " << want.status().ToString();
  for (bool cuda_graph : {false, true}) {
    size_t host = 0;
    auto got = BuildAndRun(graph, "cuda", precision, in, cuda_graph, cuda_graph ? 3 : 1, &host);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    if (!allow_host) {
      EXPECT_EQ(host, 0u) << name << ": nodes left on the host";
    }
    ASSERT_EQ(got->size(), want->size()) << name;
    for (size_t i = 0; i < want->size(); ++i) {
      const Tensor& g = (*got)[i];
      const Tensor& w = (*want)[i];
      ASSERT_EQ(g.shape(), w.shape()) << name << " output " << i;
      if (!IsFloatDType(w.dtype())) {
        ASSERT_EQ(g.dtype(), w.dtype()) << name << " output " << i;
        EXPECT_EQ(0, std::memcmp(g.raw(), w.raw(), w.nbytes())) << name << " output " << i << " differs";
        continue;
      }
      EXPECT_LT(RelL2(g, w), tol) << name << " output " << i << (cuda_graph ? " (CUDA graph)" : " (eager)");
    }
  }
}

// ---------------------------------------------------------------- capability answers (no GPU needed)

//! A kernel factory's answer (check_only: neither the device nor a library is asked) for the last
//! node of `text` at its declared static types; constants are the factory's host values.
inline Result<KernelChoice> Ask(KernelFactory f, const std::string& text, KernelOptions opt = {}) {
  static std::vector<std::unique_ptr<ir::Graph>> keep;  // the node outlives the answer
  keep.push_back(passes::testing::MustParse(text));
  const ir::Graph& g = *keep.back();
  const ir::Node& n = *g.nodes().back();
  std::vector<KernelInput> in;
  for (const ir::Value* v : n.inputs())
    in.push_back(v ? KernelInput{true, v->type.dtype, v->type.static_shape(), v->is_constant() ? &v->data : nullptr}
                   : KernelInput{});
  std::vector<KernelOutput> out;
  for (const ir::Value* v : n.outputs())
    out.push_back(v ? KernelOutput{v->type.dtype, v->type.static_shape()} : KernelOutput{});
  opt.check_only = true;
  RunEnv env;
  return f(KernelRequest{n, g.opset(), in, out, opt, env});
}

//! `r` is kUnsupported and its message contains `why`.
inline void ExpectUnsupported(const Result<KernelChoice>& r, const std::string& why) {
  ASSERT_FALSE(r.ok()) << "expected Unsupported: " << why;
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
  EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().ToString();
}

}  // namespace sampan::cuda::testing
