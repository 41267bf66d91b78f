// Reduced-precision arithmetic the way the ONNX reference (numpy + ml_dtypes)
// does it, for the reference kernels whose float16/bfloat16 results the ONNX
// node suite checks to the last bit: every elementwise step is computed in
// float and rounded to the tensor's type; sums accumulate in float for float16
// but element by element in bfloat16 for bfloat16 (ml_dtypes' add has no
// wider accumulator).
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "base/half.h"

namespace sampan::ops {

//! x rounded to dtype dt's precision (identity for types at least as wide as Acc).
template <class Acc>
Acc RoundTo(DType dt, Acc x) {
  switch (dt) {
    case DType::kFloat16:
      return static_cast<Acc>(static_cast<float>(Half(static_cast<float>(x))));
    case DType::kBFloat16:
      return static_cast<Acc>(static_cast<float>(BFloat16(static_cast<float>(x))));
    case DType::kFloat32:
      return static_cast<Acc>(static_cast<float>(x));
    default:
      return x;
  }
}

//! Sum of x[0], x[stride], ... (n values) as numpy sums an array of dtype dt.
template <class Acc>
Acc SumAs(DType dt, const Acc* x, int64_t n, int64_t stride = 1) {
  Acc sum = 0;
  if (dt == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) sum = RoundTo(dt, sum + x[i * stride]);
    return sum;
  }
  for (int64_t i = 0; i < n; ++i) sum += x[i * stride];
  return RoundTo(dt, sum);
}

}  // namespace sampan::ops
