// Loops shared by the element-wise op files (binary_arith, unary_math,
// activations, compare_logic, variadic, where): a broadcast walk that hands
// out contiguous inner blocks, and plain unary/binary kernels built on it.
#pragma once

#include <array>
#include <cmath>
#include <type_traits>

#include "ops/common.h"

namespace sampan::ops {

//! Broadcast walk by blocks. The output is split into an outer part and the
//! longest trailing block in which every input is either fully present
//! (step 1) or fully broadcast (step 0). Calls
//! fn(out_offset, in_offsets, in_steps, count) once per block.
template <size_t N, class Fn>
void ForEachBroadcastBlock(const Shape& out, const std::array<Shape, N>& ins, Fn&& fn) {
  const size_t rank = out.size();
  std::array<Shape, N> padded;
  for (size_t k = 0; k < N; ++k) {
    padded[k].assign(rank - ins[k].size(), 1);
    padded[k].insert(padded[k].end(), ins[k].begin(), ins[k].end());
  }
  std::array<int, N> mode{};  // 0: undecided, 1: present (step 1), 2: broadcast (step 0)
  size_t split = rank;
  int64_t inner = 1;
  while (split > 0) {
    const size_t d = split - 1;
    if (out[d] != 1) {
      std::array<int, N> next = mode;
      bool ok = true;
      for (size_t k = 0; k < N; ++k) {
        const int want = padded[k][d] == 1 ? 2 : 1;
        if (next[k] == 0)
          next[k] = want;
        else if (next[k] != want)
          ok = false;
      }
      if (!ok) break;
      mode = next;
    }
    inner *= out[d];
    --split;
  }
  std::array<int64_t, N> steps{};
  std::array<int64_t, N> scale{};
  for (size_t k = 0; k < N; ++k) {
    steps[k] = mode[k] == 2 ? 0 : 1;
    scale[k] = mode[k] == 1 ? inner : 1;
  }
  if (inner == 0) return;
  const Shape outer(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(split));
  std::array<Shape, N> in_outer;
  for (size_t k = 0; k < N; ++k)
    in_outer[k].assign(padded[k].begin(), padded[k].begin() + static_cast<std::ptrdiff_t>(split));
  ForEachBroadcast<N>(outer, in_outer, [&](int64_t i, const std::array<int64_t, N>& offs) {
    std::array<int64_t, N> o;
    for (size_t k = 0; k < N; ++k) o[k] = offs[k] * scale[k];
    fn(i * inner, o, steps, inner);
  });
}

//! y[i] = f(a[ia], b[ib]) with multidirectional broadcasting; f gets the raw
//! element types and returns Y.
template <class A, class B, class Y, class F>
void BinaryLoop(const Tensor& a, const Tensor& b, Tensor& y, F&& f) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  Y* py = y.mutable_data<Y>();
  ForEachBroadcastBlock<2>(
      y.shape(), {a.shape(), b.shape()},
      [&](int64_t o, const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& step, int64_t n) {
        const A* xa = pa + off[0];
        const B* xb = pb + off[1];
        Y* xy = py + o;
        if (step[0] && step[1]) {
          for (int64_t i = 0; i < n; ++i) xy[i] = f(xa[i], xb[i]);
        } else if (step[0]) {
          const B bv = *xb;
          for (int64_t i = 0; i < n; ++i) xy[i] = f(xa[i], bv);
        } else if (step[1]) {
          const A av = *xa;
          for (int64_t i = 0; i < n; ++i) xy[i] = f(av, xb[i]);
        } else {
          const Y v = f(*xa, *xb);
          for (int64_t i = 0; i < n; ++i) xy[i] = v;
        }
      });
}

//! y[i] = f(x[i]) over same-shaped tensors.
template <class X, class Y, class F>
void UnaryLoop(const Tensor& x, Tensor& y, F&& f) {
  const X* px = x.data<X>();
  Y* py = y.mutable_data<Y>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
}

//! Integer +, -, * that wrap (two's complement) instead of overflowing (UB).
template <class T>
inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return static_cast<T>(a + b);
  }
}
template <class T>
inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return static_cast<T>(a - b);
  }
}
template <class T>
inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    // unsigned short * unsigned short promotes to int and can overflow: go through a wide unsigned.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else {
    return static_cast<T>(a * b);
  }
}

//! Same dtype and dims as input 0 (unary element-wise ops).
inline Status InferSameAsInput(InferContext& ctx, DType out_dtype) {
  ctx.set_output(0, out_dtype, ctx.input_dims(0));
  return Status::Ok();
}

//! Checks that input `i`, when its shape is known, holds exactly one element
//! (scalar-like inputs such as Clip's min/max).
inline Status ExpectScalarInput(const InferContext& ctx, size_t i, const char* what) {
  if (!ctx.has_input(i) || !ctx.input_dims(i)) return Status::Ok();
  for (const ir::Dim& d : *ctx.input_dims(i))
    if (d.known() && d.value != 1) return ctx.Error(what, " must be a scalar, got a tensor with a dim of ", d.value);
  return Status::Ok();
}

inline constexpr std::initializer_list<DType> kIntegerTypes = {DType::kInt8,   DType::kInt16, DType::kInt32,
                                                               DType::kInt64,  DType::kUInt8, DType::kUInt16,
                                                               DType::kUInt32, DType::kUInt64};
inline constexpr std::initializer_list<DType> kSignedNumericTypes = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                                                     DType::kBFloat16, DType::kInt8,    DType::kInt16,
                                                                     DType::kInt32,    DType::kInt64};

template <class T>
inline constexpr bool kIsFloatElem = std::is_floating_point_v<T> || kIsReducedFloat<T>;
template <class T>
inline constexpr bool kIsIntElem = std::is_integral_v<T> && !std::is_same_v<T, bool>;

}  // namespace sampan::ops
