// Helpers shared by the reduction / normalization op files (reduce.cpp,
// arg_reduce.cpp, softmax.cpp, normalization.cpp, topk.cpp, cumsum.cpp):
// splitting a shape around one axis, and walking an input against a reduced
// output with contiguous inner runs.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "base/tensor.h"
#include "ops/common.h"

namespace sampan::ops {

//! A shape seen as [outer, n, inner] around one axis (or around a split point).
struct AxisSplit {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
};

//! outer = prod(shape[:axis]), n = shape[axis], inner = prod(shape[axis+1:]).
inline AxisSplit SplitAtAxis(const Shape& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis)
      s.outer *= shape[static_cast<size_t>(d)];
    else if (d == axis)
      s.n = shape[static_cast<size_t>(d)];
    else
      s.inner *= shape[static_cast<size_t>(d)];
  }
  return s;
}

//! outer = prod(shape[:axis]), n = prod(shape[axis:]), inner = 1 (flatten to 2-D at axis).
inline AxisSplit FlattenAtAxis(const Shape& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis)
      s.outer *= shape[static_cast<size_t>(d)];
    else
      s.n *= shape[static_cast<size_t>(d)];
  }
  return s;
}

//! A plan to walk an input against an output where `reduced[d]` dims collapse
//! to 1. Adjacent dims with the same reduced-ness are merged.
struct ReducePlan {
  Shape dims;                 //!< merged input dims
  std::vector<char> reduced;  //!< per merged dim
  Shape in_strides;           //!< element strides into the input
  Shape out_strides;          //!< element strides into the output (0 for reduced dims)
  int64_t in_numel = 0;
  int64_t out_numel = 0;
};

inline ReducePlan MakeReducePlan(const Shape& in_shape, const std::vector<char>& reduced) {
  ReducePlan p;
  p.in_numel = NumElements(in_shape);
  p.out_numel = 1;
  for (size_t d = 0; d < in_shape.size(); ++d) {
    if (!reduced[d]) p.out_numel *= in_shape[d];
    if (in_shape[d] == 1) continue;  // size-1 dims never matter
    if (!p.dims.empty() && p.reduced.back() == reduced[d]) {
      p.dims.back() *= in_shape[d];
    } else {
      p.dims.push_back(in_shape[d]);
      p.reduced.push_back(reduced[d]);
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    p.reduced.push_back(0);
  }
  const size_t r = p.dims.size();
  p.in_strides.assign(r, 1);
  p.out_strides.assign(r, 0);
  int64_t is = 1, os = 1;
  for (size_t d = r; d-- > 0;) {
    p.in_strides[d] = is;
    is *= p.dims[d];
    if (!p.reduced[d]) {
      p.out_strides[d] = os;
      os *= p.dims[d];
    }
  }
  return p;
}

//! Calls fn(in_offset, out_offset, count, out_step) for each contiguous inner run
//! of the input: input elements in_offset + j and output element
//! out_offset + j * out_step (out_step is 0 when the innermost dim is reduced),
//! for j in [0, count). Runs come in input order.
template <class Fn>
void ForEachReduceRun(const ReducePlan& p, Fn&& fn) {
  if (p.in_numel == 0) return;
  const size_t r = p.dims.size();
  const int64_t count = p.dims[r - 1];
  const int64_t step = p.out_strides[r - 1];
  const int64_t runs = p.in_numel / count;
  std::vector<int64_t> index(r, 0);
  int64_t in_off = 0, out_off = 0;
  for (int64_t k = 0; k < runs; ++k) {
    fn(in_off, out_off, count, step);
    for (size_t d = r - 1; d-- > 0;) {
      ++index[d];
      in_off += p.in_strides[d];
      out_off += p.out_strides[d];
      if (index[d] < p.dims[d]) break;
      in_off -= p.in_strides[d] * index[d];
      out_off -= p.out_strides[d] * index[d];
      index[d] = 0;
    }
  }
}

//! The accumulation type for reductions over T: double for floating types,
//! int64/uint64 for integers (bool counts as int64).
template <class T>
using AccType =
    std::conditional_t<std::is_floating_point_v<ComputeType<T>>, double,
                       std::conditional_t<std::is_unsigned_v<T> && !std::is_same_v<T, bool>, uint64_t, int64_t>>;

//! Reads element i of a small parameter tensor (scale, bias, mean...) as double.
inline std::vector<double> ToDoubleVector(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  (void)DispatchDType(t.dtype(), [&]<class T>() {
    const T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(static_cast<ComputeType<T>>(p[i]));
  });
  return v;
}

}  // namespace sampan::ops
