// GEMM layout probe (GPU machine): why is a row-major x[M,K] . W[K,N] (+bias) product,
// as Sampan issues it for ONNX MatMul, slower than torch.nn.functional.linear?
// Times cuBLASLt FP16 (f32 accumulate) for the same M, K, N with the weight stored
// [K,N] (ONNX) and [N,K] (PyTorch), the heuristic's first algorithm and the best of
// up to 16, with and without the bias epilogue. Build: nvcc -O2 -arch=sm_90
// gemm_layouts.cu -lcublasLt -o gemm_layouts; run: ./gemm_layouts
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CK(x)                                                        \
  do {                                                               \
    auto ck_ = (x);                                                  \
    if (ck_ != 0) {                                                  \
      std::printf("%s:%d error %d\n", __FILE__, __LINE__, (int)ck_); \
      return -1;                                                     \
    }                                                                \
  } while (0)

static float TimeMs(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, const void* A, cublasLtMatrixLayout_t la,
                    const void* B, cublasLtMatrixLayout_t lb, void* D, cublasLtMatrixLayout_t ld,
                    const cublasLtMatmulAlgo_t* algo, void* ws, size_t wsb, cudaStream_t s) {
  float alpha = 1, beta = 0;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, algo, ws, wsb, s);
  const int reps = 20;
  cudaEventRecord(a, s);
  for (int i = 0; i < reps; ++i) cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, algo, ws, wsb, s);
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (cudaGetLastError() != cudaSuccess) return -1;
  return ms / reps;
}

// Row-major D[M,N] = X[M,K] . W (+ bias), in cuBLAS's column-major terms D^T = W^T X^T.
static int Probe(cublasLtHandle_t lt, int M, int K, int N, bool w_kn, bool bias, void* X, void* W, void* Bv, void* D,
                 void* ws, size_t wsb, cudaStream_t s) {
  cublasLtMatmulDesc_t op;
  CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // First operand: W^T as column-major [N,K]. Stored [K,N] row-major = col-major [N,K] (op N);
  // stored [N,K] row-major = col-major [K,N] (op T).
  cublasOperation_t ta = w_kn ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (bias) {
    cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bt = CUDA_R_16F;
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &Bv, sizeof(Bv)));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  if (w_kn)
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, N, K, N));
  else
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, K, N, K));
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, K, M, K));
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16F, N, M, N));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t w = wsb;
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof(w)));
  cublasLtMatmulHeuristicResult_t res[16];
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 16, res, &found));
  float first = -1, best = 1e9;
  int best_i = -1;
  for (int i = 0; i < found; ++i) {
    float ms = TimeMs(lt, op, W, la, X, lb, D, ld, &res[i].algo, ws, wsb, s);
    if (i == 0) first = ms;
    if (ms > 0 && ms < best) best = ms, best_i = i;
  }
  const double tf = 2.0 * M * K * N / 1e9;
  std::printf("%6d %5d %5d  W[%s] bias=%d  algos=%2d  first %7.1f us %5.0f TF/s   best(#%d) %7.1f us %5.0f TF/s\n", M,
              K, N, w_kn ? "K,N" : "N,K", bias, found, first * 1e3, tf / first, best_i, best * 1e3, tf / best);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  return 0;
}

int main() {
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  const size_t wsb = 32u << 20;
  void *X, *W, *Bv, *D, *ws;
  const size_t big = size_t{16384} * 3072;
  CK(cudaMalloc(&X, big * 2));
  CK(cudaMalloc(&W, big * 2));
  CK(cudaMalloc(&D, big * 2));
  CK(cudaMalloc(&Bv, 3072 * 2));
  CK(cudaMalloc(&ws, wsb));
  std::vector<__half> h(big);
  for (size_t i = 0; i < big; ++i) h[i] = __float2half(((i * 2654435761u) % 1000) / 1000.f - 0.5f);
  CK(cudaMemcpy(X, h.data(), big * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(W, h.data(), big * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(Bv, 0, 3072 * 2));
  std::printf("cublasLt version %d\n", (int)cublasLtGetVersion());
  const int shapes[][3] = {{4096, 768, 3072}, {16384, 768, 3072}, {16384, 3072, 768}, {16384, 768, 768}};
  for (auto& sh : shapes)
    for (int w_kn = 1; w_kn >= 0; --w_kn)
      for (int bias = 0; bias <= 1; ++bias) Probe(lt, sh[0], sh[1], sh[2], w_kn, bias, X, W, Bv, D, ws, wsb, s);
  return 0;
}
