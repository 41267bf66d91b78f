#include "backends/cpu/vec.h"

namespace sampan::cpu::vec {

SP_CPU_DISPATCH void ExpInPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = Exp(x[i]);
}

SP_CPU_DISPATCH void SoftmaxRow(const float* x, float* y, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  if (std::isinf(m) && m < 0) m = 0.f;  // all -inf: exp gives 0s, the division NaNs like the reference
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = Exp(x[i] - m);
    s += y[i];
  }
  const float inv = 1.f / s;
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

SP_CPU_DISPATCH void LayerNormRow(const float* x, const float* scale, const float* bias, float eps, float* y,
                                  int64_t n) {
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float var = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - mean;
    var += d * d;
  }
  const float rstd = 1.f / std::sqrt(var / static_cast<float>(n) + eps);
  if (bias) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * scale[i] + bias[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * scale[i];
  }
}

SP_CPU_DISPATCH float Dot(const float* a, const float* b, int64_t n) {
  // Eight partial sums let the compiler keep one vector accumulator.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0.f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 8; ++j) s += acc[j];
  return s;
}

SP_CPU_DISPATCH void Axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace sampan::cpu::vec
