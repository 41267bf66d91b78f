// QuantizeLinear and DequantizeLinear on the device, bit for bit as the reference kernels
// (ops/quantize.cpp): per-tensor or per-axis scales (and zero points) read from device memory.
// Quantize: q = round_p(round_p(x) / round_p(scale)) in the quotient type p (float32, or float16 /
// bfloat16 when x and the scale are both that type or `precision` says so), then integers:
// saturate(round_half_even(q) + zero point), NaN -> 0; float8: q rounded to nearest even, with
// `saturate` clamping to +-max or giving NaN (e4m3fn) / inf (e5m2). Dequantize: (x - zp) * scale in
// float32 (the difference in float64 for int32 x with a zero point), rounded to the output type.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

//! Float types of x, scale, the quotient and dequantized outputs.
enum class QFloat { kF32, kF16, kBF16 };
//! Quantized types (QuantizeLinear outputs, DequantizeLinear inputs; int32 for the latter only).
enum class QType { kI8, kU8, kI16, kU16, kI32, kE4M3, kE5M2 };

//! Elements as [outer, axis_len, inner] of the storage order: the scale / zero point index of
//! element i is (i / inner) % axis_len when per_axis, 0 otherwise.
struct QuantParams {
  int64_t n = 0;
  bool per_axis = false;
  int64_t inner = 1, axis_len = 1;
  QFloat scale = QFloat::kF32;
  bool has_zp = false;
  // QuantizeLinear
  QFloat x = QFloat::kF32, precision = QFloat::kF32;
  QType q = QType::kU8;
  bool saturate = true;
  // DequantizeLinear: x is `q`, the output `y`.
  QFloat y = QFloat::kF32;
};

//! y (p.q) = QuantizeLinear(x (p.x), scale (p.scale), zp (p.q, nullptr when !has_zp)).
cudaError_t LaunchQuantize(const QuantParams& p, const void* x, const void* scale, const void* zp, void* y,
                           cudaStream_t stream);
//! y (p.y) = DequantizeLinear(x (p.q), scale (p.scale), zp (p.q, nullptr when !has_zp)).
cudaError_t LaunchDequantize(const QuantParams& p, const void* x, const void* scale, const void* zp, void* y,
                             cudaStream_t stream);

//! A float8 output a kernel writes itself (a norm's quantized copy, sampan::AddLayerNorm's YQ;
//! sampan::Attention's quantized output): its elements, as rounded to the kernel's own type,
//! quantized as QuantizeLinear does with a per-tensor `scale` already rounded to the quotient
//! type `precision` (backends/cuda/fuse_quantized_outputs.h: Float8OutputParams). y null: none.
struct Float8Out {
  void* y = nullptr;
  float scale = 1.f;
  float inv_scale = 1.f;  //!< 1.f / scale for 2^-64 <= scale <= 2^64, else 0 (DivRnReciprocal)
  QFloat precision = QFloat::kF32;
  bool e5m2 = false;  //!< float8 e5m2, else e4m3fn
  bool saturate = true;
};

}  // namespace sampan::cuda
