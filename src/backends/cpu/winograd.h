// 3x3 stride-1 convolution by Winograd F(m x m, 3x3), m = 2 or 4, on nChw8c
// tensors (AVX2+FMA).
//
// Each m x m output tile is computed from an a x a input tile (a = m + 2):
// V = B^T d B (input transform), M[xi] = sum_c V[xi][c] U[xi][c][k] for the a*a
// points xi (a*a small GEMMs: tiles x C times C x K), Y = A^T M A (output
// transform), then bias, residual sum and activation. Multiplications per output
// and channel pair: 36/16 = 2.25 (m = 4) or 16/4 = 4 (m = 2) instead of 9, for
// a*a/9 times the weight memory (U = G g G^T, made once): m = 4 suits large
// images, m = 2 small ones with many channels, where streaming U dominates.
// Rounding differs from direct convolution by a few ulp of the transformed sums
// (the m = 4 transforms scale by up to 8 and 1/24; m = 2 by 1/2).
//
// Layouts: source and destination nChw8c ([N][C/8][H][W][8]); weights given as
// ONNX [K][C][3][3] row-major. C must be a multiple of 8, K of 16.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sampan::cpu {

struct WinogradShape {
  int64_t n = 0, c = 0, k = 0;   //!< batch, input channels, output channels
  int64_t h = 0, w = 0;          //!< input spatial size
  int64_t oh = 0, ow = 0;        //!< output spatial size
  int64_t pad_t = 0, pad_l = 0;  //!< leading padding (trailing padding follows from the sizes)
};

enum class WinogradAct { kNone, kRelu, kLeakyRelu, kClip };

//! What happens to each output value after the convolution and bias.
struct WinogradEpilogue {
  bool sum = false;  //!< add what the destination holds (residual) before the activation
  WinogradAct act = WinogradAct::kNone;
  float p0 = 0.f, p1 = 0.f;  //!< LeakyRelu alpha; Clip min, max
};

//! Transformed weights U = G g G^T for tile size m, laid out [K/16][a*a][C][16]: the
//! order the GEMMs read them in, one stream per panel of 16 output channels.
//! Shared by every program of an engine (WeightCache::Derived).
class WinogradWeights {
 public:
  //! `tile` m (2 or 4); `weights` [K][C][3][3] row-major.
  WinogradWeights(int tile, int64_t k, int64_t c, const float* weights);
  int tile() const { return tile_; }
  int64_t k() const { return k_; }
  int64_t c() const { return c_; }
  const float* data() const { return u_.get(); }
  size_t bytes() const { return static_cast<size_t>((tile_ + 2) * (tile_ + 2) * k_ * c_) * sizeof(float); }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  int tile_;
  int64_t k_, c_;
  std::unique_ptr<float, Free> u_;
};

class WinogradConv {
 public:
  //! True when this CPU runs the kernel (AVX2 and FMA).
  static bool CpuSupported();
  //! True when the shape is one this kernel takes (channel multiples, paddings < 3).
  static bool ShapeSupported(const WinogradShape& s);

  //! `u` made for s.k x s.c (its tile size is this convolution's); `bias` [K] or null (copied).
  WinogradConv(const WinogradShape& s, std::shared_ptr<const WinogradWeights> u, const float* bias,
               const WinogradEpilogue& ep, int threads);
  const WinogradWeights& weights() const { return *u_; }
  int tile() const { return u_->tile(); }
  //! Scratch bytes Run needs (all threads together).
  size_t scratch_bytes() const { return scratch_floats_ * sizeof(float) + 64; }
  //! dst = act(conv(src) + bias [+ dst]); `scratch` has scratch_bytes(); runs on `threads` OpenMP threads.
  void Run(const float* src, float* dst, void* scratch) const;

 private:
  void RunItem(int64_t item, const float* src, float* dst, float* v, float* m) const;
  template <int kM>
  void RunItem(int64_t item, const float* src, float* dst, float* v, float* m) const;

  WinogradShape s_;
  std::shared_ptr<const WinogradWeights> u_;
  std::vector<float> bias_;  //!< [K] (zeros when none)
  WinogradEpilogue ep_;
  int threads_ = 1;
  int64_t tiles_h_ = 0, tiles_w_ = 0, tiles_ = 0;
  int64_t chunks_ = 0, ksplit_ = 0, chunk_rows_ = 0;  //!< tiles split into chunks; K split in ksplit_ parts
  size_t scratch_floats_ = 0, thread_floats_ = 0;
};

}  // namespace sampan::cpu
