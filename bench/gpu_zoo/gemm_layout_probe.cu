// Does the weight's layout choose faster cuBLASLt kernels? BERT-base's products (FP16, f32
// accumulation, bias epilogue; GELU+bias for FFN1) timed with the weight stored [K, N] (ONNX
// MatMul's layout: cuBLAS "NN" in the column-major view Sampan uses) and [N, K] (PyTorch Linear's:
// "TN"), the best of cuBLASLt's first 16 heuristic candidates for each, CUDA-event timed.
//   nvcc -arch=sm_90 -O3 -std=c++17 bench/gpu_zoo/gemm_layout_probe.cu -lcublasLt -o /tmp/glp && /tmp/glp
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <cstdio>
#include <vector>

#define CK(x)                                                                      \
  do {                                                                             \
    auto e_ = (x);                                                                 \
    if (e_ != 0) {                                                                 \
      std::printf("error %d at %s:%d: %s\n", static_cast<int>(e_), __FILE__, __LINE__, #x); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

struct Result {
  float best_us = 1e30f;
  int best = -1, found = 0;
};

// Row-major D[m, n] = X[m, k] . W + bias; W stored [k, n] (trans=false) or [n, k] (trans=true).
Result Time(cublasLtHandle_t lt, int64_t m, int64_t n, int64_t k, bool trans_w, bool gelu, void* x, void* w,
            void* bias, void* d, void* ws, size_t ws_bytes, cudaStream_t stream) {
  cublasLtMatmulDesc_t op;
  CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major view: D^T[n, m] = W^T . X^T; W is the first operand.
  cublasOperation_t ta = trans_w ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtEpilogue_t epi = gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  cudaDataType_t bt = CUDA_R_16F;
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  cublasLtMatrixLayout_t lw, lx, ld;
  // W stored row-major [k, n] = column-major [n, k] (ld n); stored [n, k] = column-major [k, n] (ld k).
  if (trans_w) CK(cublasLtMatrixLayoutCreate(&lw, CUDA_R_16F, k, n, k));
  else CK(cublasLtMatrixLayoutCreate(&lw, CUDA_R_16F, n, k, n));
  CK(cublasLtMatrixLayoutCreate(&lx, CUDA_R_16F, k, m, k));
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16F, n, m, n));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsb = ws_bytes;
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  std::vector<cublasLtMatmulHeuristicResult_t> algos(16);
  Result r;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, op, lw, lx, ld, ld, pref, 16, algos.data(), &r.found));
  const float alpha = 1.f, beta = 0.f;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < r.found; ++i) {
    auto run = [&] {
      return cublasLtMatmul(lt, op, &alpha, w, lw, x, lx, &beta, d, ld, d, ld, &algos[i].algo, ws, ws_bytes, stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;
    for (int j = 0; j < 5; ++j) run();
    const int reps = 50;
    CK(cudaEventRecord(a, stream));
    for (int j = 0; j < reps; ++j) run();
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    const float us = ms * 1000.f / reps;
    if (us < r.best_us) r.best_us = us, r.best = i;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lw);
  cublasLtMatrixLayoutDestroy(lx);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  return r;
}

int main() {
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  const size_t ws_bytes = 32u << 20;
  void *x, *w, *bias, *d, *ws;
  const size_t big = size_t(16384) * 3072;
  CK(cudaMalloc(&x, big * 2));
  CK(cudaMalloc(&w, size_t(3072) * 3072 * 2));
  CK(cudaMalloc(&bias, 4096 * 2));
  CK(cudaMalloc(&d, big * 2));
  CK(cudaMalloc(&ws, ws_bytes));
  CK(cudaMemset(x, 0, big * 2));
  CK(cudaMemset(w, 0, size_t(3072) * 3072 * 2));
  CK(cudaMemset(bias, 0, 4096 * 2));
  struct P {
    const char* name;
    int64_t n, k;
    bool gelu;
  };
  const P products[] = {{"QKV fused", 2304, 768, false}, {"Q/K/V one", 768, 768, false},
                        {"attn out", 768, 768, false},   {"FFN1+GELU", 3072, 768, true},
                        {"FFN2", 768, 3072, false}};
  std::printf("%-10s %6s %6s %6s | %10s %10s | %7s\n", "product", "M", "N", "K", "NN us", "TN us", "TN/NN");
  for (int64_t m : {int64_t(4096), int64_t(16384)}) {
    double nn_total = 0, tn_total = 0;
    for (const P& p : products) {
      if (std::string(p.name) == "Q/K/V one") continue;  // (PyTorch's unfused form, for reference below)
      Result nn = Time(lt, m, p.n, p.k, false, p.gelu, x, w, bias, d, ws, ws_bytes, stream);
      Result tn = Time(lt, m, p.n, p.k, true, p.gelu, x, w, bias, d, ws, ws_bytes, stream);
      nn_total += nn.best_us;
      tn_total += tn.best_us;
      std::printf("%-10s %6lld %6lld %6lld | %10.2f %10.2f | %7.3f   (candidates %d / %d, best #%d / #%d)\n", p.name,
                  static_cast<long long>(m), static_cast<long long>(p.n), static_cast<long long>(p.k), nn.best_us,
                  tn.best_us, tn.best_us / nn.best_us, nn.found, tn.found, nn.best, tn.best);
    }
    Result one = Time(lt, m, 768, 768, true, false, x, w, bias, d, ws, ws_bytes, stream);
    std::printf("M=%lld: a layer's four products NN %.2f us, TN %.2f us (TN/NN %.3f); PyTorch-style Q+K+V as three TN "
                "products: %.2f us\n",
                static_cast<long long>(m), nn_total, tn_total, tn_total / nn_total, 3 * one.best_us);
  }
  return 0;
}
