#include "backends/cuda/kernel_util.h"

#include <cstdlib>

#include "ops/fused.h"

namespace sampan::cuda {

Result<FloatType> FloatOf(DType t, const ir::Node& node) {
  switch (t) {
    case DType::kFloat32:
      return FloatType::kF32;
    case DType::kFloat16:
      return FloatType::kF16;
    case DType::kBFloat16:
      return FloatType::kBF16;
    default:
      return Unsupported(node.Label(), ": no CUDA kernel for ", DTypeName(t));
  }
}

std::vector<int64_t> Packed(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  const auto packed = Packed(in);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[off + i] = in[i] == 1 ? 0 : packed[i];
  return st;
}

Result<StridedShape> MakeStrided(const Shape& dims, const std::vector<std::vector<int64_t>>& strides) {
  std::vector<int64_t> d;
  std::vector<std::vector<int64_t>> s(strides.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    bool merge = !d.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k) merge = s[k].back() == strides[k][i] * dims[i];
    if (merge) {
      d.back() *= dims[i];
      for (size_t k = 0; k < strides.size(); ++k) s[k].back() = strides[k][i];
    } else {
      d.push_back(dims[i]);
      for (size_t k = 0; k < strides.size(); ++k) s[k].push_back(strides[k][i]);
    }
  }
  if (d.size() > static_cast<size_t>(kMaxRank)) return Unsupported("rank ", d.size(), " after merging dims");
  StridedShape out;
  out.rank = static_cast<int>(d.size());
  for (size_t i = 0; i < d.size(); ++i) {
    out.dims[i] = d[i];
    for (size_t k = 0; k < strides.size() && k < 3; ++k) out.stride[k][i] = s[k][i];
  }
  if (out.rank == 0) {  // a single element
    out.rank = 1;
    out.dims[0] = 1;
  }
  return out;
}

std::vector<int64_t> StorageStrides(const Shape& s, bool nhwc) {
  if (!nhwc || s.size() != 4) return Packed(s);
  const int64_t c = s[1], h = s[2], w = s[3];
  return {h * w * c, 1, w * c, c};
}

std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out, bool nhwc) {
  std::vector<int64_t> st(out.size(), 0);
  const auto stored = StorageStrides(in, nhwc);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[off + i] = in[i] == 1 ? 0 : stored[i];
  return st;
}

Result<StridedShape> MakeStridedFor(const Shape& dims, bool nhwc_order,
                                    const std::vector<std::vector<int64_t>>& strides) {
  if (!nhwc_order || dims.size() != 4) return MakeStrided(dims, strides);
  auto order = [](const std::vector<int64_t>& v) { return std::vector<int64_t>{v[0], v[2], v[3], v[1]}; };
  std::vector<std::vector<int64_t>> st;
  for (const auto& s : strides) st.push_back(order(s));
  return MakeStrided(order(dims), st);
}

Result<StridedShape> LayoutCopy(const Shape& nchw, bool to_nhwc) {
  if (nchw.size() != 4) return Unsupported("layout conversion of a rank-", nchw.size(), " tensor");
  const int64_t n = nchw[0], c = nchw[1], h = nchw[2], w = nchw[3];
  if (to_nhwc)  // iterate the destination [N, H, W, C]; read NCHW
    return MakeStrided({n, h, w, c}, {{c * h * w, w, 1, h * w}, {h * w * c, w * c, c, 1}});
  // iterate the destination [N, C, H, W]; read NHWC
  return MakeStrided({n, c, h, w}, {{h * w * c, 1, w * c, c}, {c * h * w, h * w, w, 1}});
}

Status ActivationOf(const ir::Node& node, UnaryOp* op, float* p0, float* p1) {
  Result<ops::FusedActivation> a = ops::ReadActivation(node);
  if (!a.ok()) return Unsupported(a.status().message());
  switch (a->kind) {
    case ops::Activation::kNone:
      *op = UnaryOp::kIdentity;
      break;
    case ops::Activation::kRelu:
      *op = UnaryOp::kRelu;
      break;
    case ops::Activation::kLeakyRelu:
      *op = UnaryOp::kLeakyRelu;
      break;
    case ops::Activation::kClip:
      *op = UnaryOp::kClip;
      break;
    case ops::Activation::kSigmoid:
      *op = UnaryOp::kSigmoid;
      break;
    case ops::Activation::kSiLU:
      *op = UnaryOp::kSiLU;
      break;
    case ops::Activation::kTanh:
      *op = UnaryOp::kTanh;
      break;
    case ops::Activation::kHardSigmoid:
      *op = UnaryOp::kHardSigmoid;
      break;
    case ops::Activation::kHardSwish:
      *op = UnaryOp::kHardSwish;
      break;
    case ops::Activation::kGelu:
      *op = UnaryOp::kGelu;
      break;
    case ops::Activation::kGeluTanh:
      *op = UnaryOp::kGeluTanh;
      break;
  }
  *p0 = a->p0;
  *p1 = a->p1;
  return Status::Ok();
}

}  // namespace sampan::cuda
