#include "ops/shape_util.h"

#include <algorithm>
#include <cstring>

namespace sampan::ops {

namespace {

template <class E>
void StridedCopyT(const E* in, E* out, const Shape& shape, const Shape& strides) {
  const size_t rank = shape.size();
  const int64_t inner = shape[rank - 1];
  const int64_t istride = strides[rank - 1];
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < rank; ++d) outer *= shape[d];
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t o = 0; o < outer; ++o) {
    const E* src = in + off;
    if (istride == 1) {
      std::memcpy(out, src, static_cast<size_t>(inner) * sizeof(E));
    } else if (istride == 0) {
      std::fill(out, out + inner, *src);
    } else {
      for (int64_t i = 0; i < inner; ++i) out[i] = src[i * istride];
    }
    out += inner;
    for (size_t d = rank - 1; d-- > 0;) {
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

void StridedCopy(const void* in, void* out, size_t elem_size, const Shape& out_shape, const Shape& in_strides,
                 int64_t in_offset) {
  if (NumElements(out_shape) == 0) return;
  // Coalesce: drop size-1 dims, merge dims that are contiguous in the input.
  Shape shape, strides;
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;
    if (!shape.empty() && strides.back() == in_strides[d] * out_shape[d]) {
      shape.back() *= out_shape[d];
      strides.back() = in_strides[d];
    } else {
      shape.push_back(out_shape[d]);
      strides.push_back(in_strides[d]);
    }
  }
  if (shape.empty()) {
    shape = {1};
    strides = {0};
  }
  const char* base = static_cast<const char*>(in) + in_offset * static_cast<int64_t>(elem_size);
  switch (elem_size) {
    case 1:
      StridedCopyT(reinterpret_cast<const uint8_t*>(base), static_cast<uint8_t*>(out), shape, strides);
      break;
    case 2:
      StridedCopyT(reinterpret_cast<const uint16_t*>(base), static_cast<uint16_t*>(out), shape, strides);
      break;
    case 4:
      StridedCopyT(reinterpret_cast<const uint32_t*>(base), static_cast<uint32_t*>(out), shape, strides);
      break;
    case 8:
      StridedCopyT(reinterpret_cast<const uint64_t*>(base), static_cast<uint64_t*>(out), shape, strides);
      break;
    default:
      break;
  }
}

Status ExpectStorableInput(const InferContext& ctx, size_t i) {
  if (!IsStorableDType(ctx.input_dtype(i)))
    return ctx.NotSupported("input ", i, " of type ", DTypeName(ctx.input_dtype(i)));
  return Status::Ok();
}

Result<std::vector<int64_t>> ReadInts(const InferContext& ctx, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32)
    return ctx.Error(what, " must be an int64 tensor, got ", t.Describe());
  if (t.rank() > 1) return ctx.Error(what, " must be 1-D, got ", t.Describe());
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = ElementAsInt64(t, i);
  return v;
}

int64_t StaticLength1D(const InferContext& ctx, size_t i) {
  const auto& dims = ctx.input_dims(i);
  if (!ctx.has_input(i) || !dims || dims->size() != 1 || !(*dims)[0].known()) return -1;
  // A shape-like input longer than any real rank (a declared dim can say anything): treated as
  // unknown here, so no rank-sized list is made from it; its values fail when they are read.
  if ((*dims)[0].value > kMaxShapeInputLength) return -1;
  return (*dims)[0].value;
}

}  // namespace sampan::ops
