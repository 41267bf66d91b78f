// LayerNorm and GEMM-residual probe for the H200 (bench/gpu_zoo/transformer_session.sh builds and
// runs it there with nvcc): BERT-base's post-LN block at batch 128 x 128 tokens (16,384 rows of 768
// halves). Times, with CUDA events over rotating buffers (no L2 reuse between iterations):
//   - AddLayerNorm kernels of src/backends/cuda/layer_norm.cu (each template variant) and the
//     previous kernel (commit cb84414), in TB/s of the bytes they must move;
//   - a plain vectorised add y = x + r, the bandwidth ceiling for three streams;
//   - cuBLASLt's best of 16 heuristic algorithms for the two products that feed BERT's
//     LayerNorms (16384x768x768 and 16384x3072x768, bias epilogue), with beta = 0 and with the
//     residual as C (beta = 1): what folding the residual into the GEMM costs it; and the first
//     FFN product (16384x768x3072) with the bias against the GELU+bias epilogue.
#include <cublasLt.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backends/cuda/layer_norm.cu"

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
#define CB(x)                                                                        \
  do {                                                                               \
    cublasStatus_t s_ = (x);                                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
      std::fprintf(stderr, "%s:%d cublas status %d\n", __FILE__, __LINE__, (int)s_); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace sampan::cuda {
namespace {
template <class T, int kVecs>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock) OldWarpLayerNormKernel(NormArgs a) {
  constexpr int kE = 16 / sizeof(T);
  const int64_t row = blockIdx.x * int64_t(kWarpRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= a.rows) return;
  const int chunks = static_cast<int>(a.n / kE);
  const T* x = static_cast<const T*>(a.x) + (row % a.x_rows) * a.n;
  const T* res = a.residual ? static_cast<const T*>(a.residual) + (row % a.residual_rows) * a.n : nullptr;
  float v[kVecs][kE];
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = lane + 32 * i;
#pragma unroll
    for (int e = 0; e < kE; ++e) v[i][e] = 0.f;
    if (c < chunks) {
      const uint4 xv = *reinterpret_cast<const uint4*>(x + c * kE);
      const T* xe = reinterpret_cast<const T*>(&xv);
      if (res) {
        const uint4 rv = *reinterpret_cast<const uint4*>(res + c * kE);
        const T* re = reinterpret_cast<const T*>(&rv);
#pragma unroll
        for (int e = 0; e < kE; ++e) v[i][e] = ToFloat(FromFloat<T>(ToFloat(xe[e]) + ToFloat(re[e])));
      } else {
#pragma unroll
        for (int e = 0; e < kE; ++e) v[i][e] = ToFloat(xe[e]);
      }
#pragma unroll
      for (int e = 0; e < kE; ++e) sum += v[i][e];
    }
  }
  const float inv_n = 1.f / static_cast<float>(a.n);
  const float mean = a.rms ? 0.f : WarpSum(sum) * inv_n;
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (lane + 32 * i < chunks) {
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const float d = v[i][e] - mean;
        q += d * d;
      }
    }
  }
  const float inv = rsqrtf(WarpSum(q) * inv_n + a.eps);
  const T* scale = static_cast<const T*>(a.scale);
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y) + row * a.n;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = lane + 32 * i;
    if (c >= chunks) continue;
    const uint4 sv = *reinterpret_cast<const uint4*>(scale + c * kE);
    const T* se = reinterpret_cast<const T*>(&sv);
    uint4 bv = make_uint4(0u, 0u, 0u, 0u);
    if (bias) bv = *reinterpret_cast<const uint4*>(bias + c * kE);
    const T* be = reinterpret_cast<const T*>(&bv);
    uint4 ov;
    T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      float r = (v[i][e] - mean) * inv * ToFloat(se[e]);
      if (bias) r += ToFloat(be[e]);
      oe[e] = FromFloat<T>(r);
    }
    *reinterpret_cast<uint4*>(y + c * kE) = ov;
  }
}

// Hashed values in [-scale, scale): reproducible, never all zero.
__global__ void FillKernel(__half* p, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t h = static_cast<uint32_t>(i * 2654435761ull) ^ static_cast<uint32_t>(i >> 32);
    p[i] = __float2half(scale * (static_cast<float>(h % 2000u) / 1000.f - 1.f));
  }
}

__global__ void AddKernel(const uint4* x, const uint4* r, uint4* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint4 a = x[i], b = r[i], o;
    const __half2* ah = reinterpret_cast<const __half2*>(&a);
    const __half2* bh = reinterpret_cast<const __half2*>(&b);
    __half2* oh = reinterpret_cast<__half2*>(&o);
    for (int k = 0; k < 4; ++k) oh[k] = __hadd2(ah[k], bh[k]);
    y[i] = o;
  }
}

}  // namespace
}  // namespace sampan::cuda

using namespace sampan::cuda;

constexpr int64_t kRows = 16384, kN = 768;
constexpr int kSets = 6;  // 6 x 3 x 25 MB: more than the 50 MB L2 many times over
constexpr int kIters = 60;

template <class F>
float TimeUs(F launch) {
  for (int i = 0; i < 5; ++i) launch(i);
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int i = 0; i < kIters; ++i) launch(i);
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaGetLastError());
  return ms * 1000.f / kIters;
}

int main() {
  const size_t bytes = kRows * kN * sizeof(__half);
  std::vector<void*> xs(kSets), rs(kSets), ys(kSets);
  std::vector<__half> host(kRows * kN);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = __float2half(static_cast<float>((i * 2654435761u) % 1000) / 500.f - 1.f);
  for (int s = 0; s < kSets; ++s) {
    CK(cudaMalloc(&xs[s], bytes));
    CK(cudaMalloc(&rs[s], bytes));
    CK(cudaMalloc(&ys[s], bytes));
    CK(cudaMemcpy(xs[s], host.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(rs[s], host.data(), bytes, cudaMemcpyHostToDevice));
  }
  void *scale, *bias;
  CK(cudaMalloc(&scale, kN * 2));
  CK(cudaMalloc(&bias, kN * 2));
  CK(cudaMemcpy(scale, host.data(), kN * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bias, host.data() + kN, kN * 2, cudaMemcpyHostToDevice));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs; rows %lld x %lld halves (%.1f MB a tensor)\n", prop.name, prop.multiProcessorCount,
              (long long)kRows, (long long)kN, bytes / 1e6);

  auto args = [&](int i, bool residual) {
    const int s = i % kSets;
    return NormArgs{xs[s], residual ? rs[s] : nullptr, scale, bias, ys[s], kRows, kN, kRows, kRows, 1e-12f, false};
  };
  const unsigned blocks = static_cast<unsigned>(kRows / kWarpRowsPerBlock);
  const int threads = 32 * kWarpRowsPerBlock;
  auto report = [&](const char* name, int streams, float us) {
    std::printf("  %-40s %8.2f us  %6.2f TB/s\n", name, us, streams * bytes / (us * 1e-6) / 1e12);
  };
  std::printf("== three streams (x, residual in; y out)\n");
  report("add only (ceiling)", 3, TimeUs([&](int i) {
           const int s = i % kSets;
           AddKernel<<<prop.multiProcessorCount * 16, 256>>>(static_cast<const uint4*>(xs[s]),
                                                             static_cast<const uint4*>(rs[s]),
                                                             static_cast<uint4*>(ys[s]), kRows * kN / 8);
         }));
  report("AddLayerNorm, previous kernel <4>", 3,
         TimeUs([&](int i) { OldWarpLayerNormKernel<__half, 4><<<blocks, threads>>>(args(i, true)); }));
  report("AddLayerNorm <3, early affine>", 3,
         TimeUs([&](int i) { WarpLayerNormKernel<__half, 3, true><<<blocks, threads>>>(args(i, true)); }));
  report("AddLayerNorm <3, late affine>", 3,
         TimeUs([&](int i) { WarpLayerNormKernel<__half, 3, false><<<blocks, threads>>>(args(i, true)); }));
  report("AddLayerNorm <4, early affine>", 3,
         TimeUs([&](int i) { WarpLayerNormKernel<__half, 4, true><<<blocks, threads>>>(args(i, true)); }));
  report("AddLayerNorm <4, late affine>", 3,
         TimeUs([&](int i) { WarpLayerNormKernel<__half, 4, false><<<blocks, threads>>>(args(i, true)); }));
  report(
      "AddLayerNorm via LaunchAddLayerNorm", 3, TimeUs([&](int i) {
        const int s = i % kSets;
        CK(LaunchAddLayerNorm(FloatType::kF16, xs[s], kRows, rs[s], kRows, scale, bias, ys[s], kRows, kN, 1e-12f, 0));
      }));
  std::printf("== two streams (x in; y out)\n");
  report("LayerNorm, previous kernel <4>", 2,
         TimeUs([&](int i) { OldWarpLayerNormKernel<__half, 4><<<blocks, threads>>>(args(i, false)); }));
  report("LayerNorm <3, early affine>", 2,
         TimeUs([&](int i) { WarpLayerNormKernel<__half, 3, true><<<blocks, threads>>>(args(i, false)); }));
  report("LayerNorm <3, late affine>", 2,
         TimeUs([&](int i) { WarpLayerNormKernel<__half, 3, false><<<blocks, threads>>>(args(i, false)); }));

  // Same results from the previous and the new kernel (bit for bit: same float math order).
  {
    std::vector<__half> a(kRows * kN), b(kRows * kN);
    OldWarpLayerNormKernel<__half, 4><<<blocks, threads>>>(args(0, true));
    CK(cudaMemcpy(a.data(), ys[0], bytes, cudaMemcpyDeviceToHost));
    CK(LaunchAddLayerNorm(FloatType::kF16, xs[0], kRows, rs[0], kRows, scale, bias, ys[0], kRows, kN, 1e-12f, 0));
    CK(cudaMemcpy(b.data(), ys[0], bytes, cudaMemcpyDeviceToHost));
    double maxd = 0;
    for (size_t i = 0; i < a.size(); ++i)
      maxd = std::max(maxd, (double)std::abs(__half2float(a[i]) - __half2float(b[i])));
    std::printf("max |previous - new| = %g\n", maxd);
  }

  // cuBLASLt: D[m,n] = A[m,k] W[k,n] + bias (+ C) in row-major terms, as gemm.cpp lays it out
  // (column-major D^T = W^T A^T). Operands hold hashed values in [-1, 1) (W scaled by 0.05):
  // all-zero operands let the tensor cores run cooler and faster than a real model's.
  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  void* ws;
  const size_t ws_bytes = 32u << 20;
  CK(cudaMalloc(&ws, ws_bytes));
  // Best of 16 heuristic algorithms; C is the residual (beta 1) when given.
  auto best_gemm = [&](int64_t m, int64_t k, int64_t n, cublasLtEpilogue_t epi, const void* A, const void* W,
                       const void* bias_ptr, const std::vector<void*>* C, const std::vector<void*>& D, int* algo,
                       int* found_out) {
    cublasLtMatmulDesc_t op;
    CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
    cudaDataType_t bt = CUDA_R_16F;
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    cublasLtMatrixLayout_t la, lb, lc;
    CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, n, k, n));  // W^T as column-major n x k
    CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, k, m, k));  // A^T: k x m
    CB(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16F, n, m, n));
    cublasLtMatmulPreference_t pref;
    CB(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = ws_bytes;
    CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
    cublasLtMatmulHeuristicResult_t res[16];
    int found = 0;
    CB(cublasLtMatmulAlgoGetHeuristic(lt, op, lb, la, lc, lc, pref, 16, res, &found));
    const float alpha = 1.f, beta = C ? 1.f : 0.f;
    float best = 1e30f;
    *algo = -1;
    for (int a = 0; a < found; ++a) {
      bool ok = true;
      const float us = TimeUs([&](int i) {
        void* d = D[i % D.size()];
        const void* c = C ? (*C)[i % C->size()] : d;
        if (cublasLtMatmul(lt, op, &alpha, W, lb, A, la, &beta, c, lc, d, lc, &res[a].algo, ws, ws_bytes, 0) !=
            CUBLAS_STATUS_SUCCESS)
          ok = false;
      });
      if (ok && us < best) best = us, *algo = a;
    }
    *found_out = found;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    return best;
  };
  auto filled = [&](int64_t count, float scale) {
    void* p;
    CK(cudaMalloc(&p, count * 2));
    FillKernel<<<prop.multiProcessorCount * 8, 256>>>(static_cast<__half*>(p), count, scale);
    CK(cudaGetLastError());
    return p;
  };
  std::printf("== cuBLASLt FP16 products feeding the LayerNorms (best of 16 heuristic algorithms)\n");
  for (int64_t k : {768, 3072}) {
    const int64_t m = kRows, n = kN;
    void* A = filled(m * k, 1.f);
    void* W = filled(k * n, 0.05f);
    for (int beta_i = 0; beta_i < 2; ++beta_i) {
      int algo = -1, found = 0;
      const float us =
          best_gemm(m, k, n, CUBLASLT_EPILOGUE_BIAS, A, W, bias, beta_i ? &rs : nullptr, ys, &algo, &found);
      std::printf("  m=%lld k=%lld n=%lld beta=%d: %8.2f us (%.0f TFLOP/s), algorithm %d of %d\n", (long long)m,
                  (long long)k, (long long)n, beta_i, us, 2.0 * m * n * k / (us * 1e-6) / 1e12, algo, found);
    }
    CK(cudaFree(A));
    CK(cudaFree(W));
  }
  // The first FFN product: bias only (GELU left to a separate pass) against the fused GELU_BIAS
  // epilogue the builder picks for FP16 Gelu.
  std::printf("== cuBLASLt FP16 m=%lld k=768 n=3072: bias vs gelu+bias epilogue (best of 16)\n", (long long)kRows);
  {
    const int64_t m = kRows, k = 768, n = 3072;
    void* A = filled(m * k, 1.f);
    void* W = filled(k * n, 0.05f);
    void* B3 = filled(n, 1.f);
    std::vector<void*> D = {filled(m * n, 1.f), filled(m * n, 1.f)};
    for (cublasLtEpilogue_t epi : {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS}) {
      int algo = -1, found = 0;
      const float us = best_gemm(m, k, n, epi, A, W, B3, nullptr, D, &algo, &found);
      std::printf("  %s: %8.2f us (%.0f TFLOP/s), algorithm %d of %d\n",
                  epi == CUBLASLT_EPILOGUE_BIAS ? "bias     " : "gelu+bias", us, 2.0 * m * n * k / (us * 1e-6) / 1e12,
                  algo, found);
    }
    for (void* p : {A, W, B3, D[0], D[1]}) CK(cudaFree(p));
  }
  return 0;
}
