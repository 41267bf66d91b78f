// Checks shared by the index-op kernel factories (index_kernel.cpp, pattern_kernel.cpp).
#pragma once

#include <cstdint>

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda::index_detail {

//! Product of s[b, e).
inline int64_t Product(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e && i < s.size(); ++i) p *= s[i];
  return p;
}

//! Inputs 0..count-1 present, the output present, and everything in NCHW (plain) storage.
inline Status Plain(const KernelRequest& r, size_t count) {
  const ir::Node& node = r.node;
  if (r.in.size() < count || r.out.empty()) return Unsupported(node.Label(), ": missing inputs");
  for (size_t i = 0; i < count; ++i)
    if (!r.in[i].present) return Unsupported(node.Label(), ": input ", i, " is absent");
  for (size_t i = 0; i < r.in.size(); ++i)
    if (r.opt.input_nhwc(i)) return Unsupported(node.Label(), ": layout (channels-last input)");
  if (r.opt.out_nhwc) return Unsupported(node.Label(), ": layout (channels-last output)");
  return Status::Ok();
}

//! Element size of input i when the byte-moving kernels take it.
inline Result<size_t> ElementSize(const KernelRequest& r, size_t i) {
  const size_t e = DTypeSize(r.in[i].dtype);
  if (e != 1 && e != 2 && e != 4 && e != 8)
    return Unsupported(r.node.Label(), ": element type ", DTypeName(r.in[i].dtype));
  return e;
}

//! True for int64 indices, false for int32; Unsupported otherwise.
inline Result<bool> IndicesI64(const KernelRequest& r, size_t i) {
  if (r.in[i].dtype == DType::kInt64) return true;
  if (r.in[i].dtype == DType::kInt32) return false;
  return Unsupported(r.node.Label(), ": indices of type ", DTypeName(r.in[i].dtype));
}

//! Attribute `axis` (default `dflt`) wrapped into [0, rank); Unsupported when out of range.
inline Result<int64_t> Axis(const ir::Node& node, int64_t dflt, size_t rank) {
  const int64_t a = node.attr_int("axis", dflt);
  const int64_t w = a < 0 ? a + static_cast<int64_t>(rank) : a;
  if (w < 0 || w >= static_cast<int64_t>(rank)) return Unsupported(node.Label(), ": axis ", a, " for rank ", rank);
  return w;
}

}  // namespace sampan::cuda::index_detail
