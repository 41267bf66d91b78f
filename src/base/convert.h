// Element conversion between every storable C++ element type, with ONNX Cast
// semantics: float->int truncates toward zero, anything->bool is (x != 0),
// half/bfloat16 go through float.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "base/half.h"

namespace sampan {

template <class T>
inline constexpr bool kIsReducedFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

//! The type arithmetic on T is done in: float for half/bfloat16, T otherwise.
template <class T>
using ComputeType = std::conditional_t<kIsReducedFloat<T>, float, T>;

template <class To, class From>
inline To ConvertElement(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsReducedFloat<From>) {
    return ConvertElement<To>(static_cast<float>(v));
  } else if constexpr (kIsReducedFloat<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // Out-of-range and NaN are undefined in C++; saturate-free ONNX leaves them
    // implementation-defined, so clamp to something deterministic.
    if (std::isnan(v)) return To(0);
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (v <= static_cast<From>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace sampan
