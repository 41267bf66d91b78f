// Row-major float GEMM with constant weights (AVX2+FMA, or AVX-512): Y[M,N] = act(X[M,K] W[K,N] + bias).
//
// W is packed once into panels of 16 columns ([N/16][K][16], zero-padded); a 6x16
// register-blocked micro-kernel (6 rows of X broadcast as they are, a panel row
// loaded) runs over (panel, group of 6 rows) pairs on OpenMP threads, rows in
// blocks that stay in L2 while the thread's panels pass over them. As fast as
// oneDNN 2.6's gemm:jit on the shapes measured (alone within a few %; MiniLM b1
// and b8 and the ResNet-50 classifier in the network on par or faster), and unlike
// it, it never allocates: oneDNN's sgemm driver allocates its packing buffers with
// posix_memalign on every call. On AVX-512 (KernelVariant(), isa.h) a 12x16 kernel on ZMM
// registers runs over the same panels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sampan::cpu {

//! W packed for PackedGemm: [ceil(N/16)][K][16], columns past N zero; bias [ceil(N/16)*16].
class PackedWeights {
 public:
  //! W(k, n) = w[k * stride_k + n * stride_n] (row-major: stride_k = N, stride_n = 1;
  //! transposed: stride_k = 1, stride_n = K). `bias` [N], a scalar (bias_n = 1) or null.
  PackedWeights(const float* w, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n, const float* bias,
                int64_t bias_n);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t panels() const { return (n_ + 15) / 16; }
  const float* data() const { return w_.get(); }
  const float* bias() const { return bias_.get(); }
  size_t bytes() const { return static_cast<size_t>(panels() * (k_ + 1) * 16) * sizeof(float); }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  int64_t k_, n_;
  std::unique_ptr<float, Free> w_, bias_;
};

//! Epilogues applied in registers; others run as a separate step after the GEMM.
enum class GemmAct { kNone, kRelu, kLeakyRelu, kClip, kHardSigmoid, kGelu };

class PackedGemm {
 public:
  //! True when this CPU runs the kernel (AVX2 and FMA).
  static bool CpuSupported();
  //! act(x): LeakyRelu alpha = p0; Clip [p0, p1]; HardSigmoid clip(p0 * x + p1, 0, 1).
  PackedGemm(std::shared_ptr<const PackedWeights> w, int64_t m, GemmAct act, float p0, float p1, int threads);
  //! y[m][n] (row stride N) from x[m][k] (row stride K).
  void Run(const float* x, float* y) const;

 private:
  std::shared_ptr<const PackedWeights> w_;
  int64_t m_, mr_, groups_, block_groups_;  // mr_: rows per micro-kernel call (6, or 12 on AVX-512)
  bool avx512_;                             // the AVX-512 micro-kernel (KernelVariant() when made)
  GemmAct act_;
  float p0_, p1_;
  int threads_;
};

}  // namespace sampan::cpu
