#include "backends/cuda/index_kernel.h"

#include <optional>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/index_kernel_util.h"
#include "backends/cuda/index_ops.h"
#include "backends/cuda/kernel_util.h"

namespace sampan::cuda {
namespace {

using index_detail::Axis;
using index_detail::ElementSize;
using index_detail::IndicesI64;
using index_detail::Plain;
using index_detail::Product;

// Data, indices (and updates) of GatherElements/ScatterElements: same rank, indices within data
// off the axis. The walk iterates the indices' shape with data strides, 0 on the axis.
struct ElementsWalk {
  StridedShape walk;
  int64_t axis_dim = 0, axis_stride = 0;
};

Result<ElementsWalk> MakeElementsWalk(const KernelRequest& r) {
  const ir::Node& node = r.node;
  const Shape& data = r.in[0].shape;
  const Shape& ind = r.in[1].shape;
  if (data.empty() || ind.size() != data.size()) return Unsupported(node.Label(), ": data/indices ranks");
  SP_ASSIGN_OR_RETURN(int64_t axis, Axis(node, 0, data.size()));
  for (size_t d = 0; d < data.size(); ++d)
    if (static_cast<int64_t>(d) != axis && ind[d] > data[d])
      return Unsupported(node.Label(), ": indices dim ", d, " exceeds data");
  std::vector<int64_t> walk = Packed(data);
  ElementsWalk w;
  w.axis_dim = data[static_cast<size_t>(axis)];
  w.axis_stride = walk[static_cast<size_t>(axis)];
  walk[static_cast<size_t>(axis)] = 0;
  auto s = MakeStrided(ind, {walk, Packed(ind)});
  if (!s.ok()) return Unsupported(node.Label(), ": ", s.status().message());
  w.walk = *s;
  return w;
}

Result<ScatterReduction> ParseReduction(const ir::Node& node) {
  const std::string s = node.attr_string("reduction", "none");
  if (s == "none") return ScatterReduction::kNone;
  if (s == "add") return ScatterReduction::kAdd;
  if (s == "mul") return ScatterReduction::kMul;
  if (s == "max") return ScatterReduction::kMax;
  if (s == "min") return ScatterReduction::kMin;
  return Unsupported(node.Label(), ": reduction '", s, "'");
}

// The atomics' element type for a reduction (bytes for none).
Result<ScatterType> ScatterTypeOf(const ir::Node& node, DType t, ScatterReduction red) {
  if (red == ScatterReduction::kNone) return ScatterType::kBytes;
  switch (t) {
    case DType::kFloat32:
      return ScatterType::kF32;
    case DType::kFloat16:
      return ScatterType::kF16;
    case DType::kBFloat16:
      return ScatterType::kBF16;
    case DType::kFloat64:
      return ScatterType::kF64;
    case DType::kInt32:
      return ScatterType::kI32;
    case DType::kInt64:
      return ScatterType::kI64;
    default:
      return Unsupported(node.Label(), ": reduction '", node.attr_string("reduction", ""), "' on ", DTypeName(t));
  }
}

// Data, indices and updates of a scatter: types, the reduction, and the output a copy of data.
struct ScatterSetup {
  size_t elem = 0;
  bool i64 = false;
  ScatterReduction red = ScatterReduction::kNone;
  ScatterType type = ScatterType::kBytes;
};

Result<ScatterSetup> MakeScatterSetup(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_RETURN_IF_ERROR(Plain(r, 3));
  ScatterSetup s;
  SP_ASSIGN_OR_RETURN(s.elem, ElementSize(r, 0));
  SP_ASSIGN_OR_RETURN(s.i64, IndicesI64(r, 1));
  if (r.in[2].dtype != r.in[0].dtype || r.out[0].dtype != r.in[0].dtype || r.out[0].shape != r.in[0].shape)
    return Unsupported(node.Label(), ": updates/output type or shape");
  SP_ASSIGN_OR_RETURN(s.red, ParseReduction(node));
  SP_ASSIGN_OR_RETURN(s.type, ScatterTypeOf(node, r.in[0].dtype, s.red));
  return s;
}

// ---------------------------------------------------------------- kernels

class GatherElementsKernel : public NodeKernel {
 public:
  GatherElementsKernel(size_t elem, bool i64, ElementsWalk w) : elem_(elem), i64_(i64), w_(w) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchGatherElements(elem_, in[0], in[1], i64_, out[0], w_.walk, w_.axis_dim, w_.axis_stride, env.bad_index,
                                 env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "gather"; }

 private:
  size_t elem_;
  bool i64_;
  ElementsWalk w_;
};

class GatherNDKernel : public NodeKernel {
 public:
  GatherNDKernel(size_t elem, bool i64, int64_t batches, int64_t per_batch, IndexedDims d, int64_t slice,
                 int64_t batch_stride)
      : elem_(elem), i64_(i64), batches_(batches), per_batch_(per_batch), d_(d), slice_(slice), stride_(batch_stride) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchGatherND(elem_, in[0], in[1], i64_, out[0], batches_, per_batch_, d_, slice_, stride_, env.bad_index,
                           env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "gather"; }

 private:
  size_t elem_;
  bool i64_;
  int64_t batches_, per_batch_;
  IndexedDims d_;
  int64_t slice_, stride_;
};

// Output = data, then the updates scattered into it (ScatterElements when `walk` is set, else ScatterND).
class ScatterKernel : public NodeKernel {
 public:
  ScatterKernel(ScatterSetup s, size_t bytes, std::optional<ElementsWalk> walk, int64_t count, IndexedDims d,
                int64_t slice)
      : s_(s), bytes_(bytes), walk_(walk), count_(count), d_(d), slice_(slice) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (bytes_ > 0 && out[0] != in[0])
      SP_CUDA(cudaMemcpyAsync(out[0], in[0], bytes_, cudaMemcpyDeviceToDevice, env.stream));
    if (walk_)
      SP_CUDA(LaunchScatterElements(s_.type, s_.elem, s_.red, in[2], in[1], s_.i64, out[0], walk_->walk,
                                    walk_->axis_dim, walk_->axis_stride, env.bad_index, env.stream));
    else
      SP_CUDA(LaunchScatterND(s_.type, s_.elem, s_.red, in[2], in[1], s_.i64, out[0], count_, d_, slice_, env.bad_index,
                              env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "scatter"; }

 private:
  ScatterSetup s_;
  size_t bytes_;
  std::optional<ElementsWalk> walk_;
  int64_t count_;
  IndexedDims d_;
  int64_t slice_;
};

}  // namespace

Result<KernelChoice> MakeGatherElements(const KernelRequest& r) {
  SP_RETURN_IF_ERROR(Plain(r, 2));
  SP_ASSIGN_OR_RETURN(size_t elem, ElementSize(r, 0));
  SP_ASSIGN_OR_RETURN(bool i64, IndicesI64(r, 1));
  if (r.out[0].dtype != r.in[0].dtype || r.out[0].shape != r.in[1].shape)
    return Unsupported(r.node.Label(), ": output type or shape");
  SP_ASSIGN_OR_RETURN(ElementsWalk w, MakeElementsWalk(r));
  return KernelChoice{false, std::make_unique<GatherElementsKernel>(elem, i64, w)};
}

Result<KernelChoice> MakeGatherND(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_RETURN_IF_ERROR(Plain(r, 2));
  SP_ASSIGN_OR_RETURN(size_t elem, ElementSize(r, 0));
  SP_ASSIGN_OR_RETURN(bool i64, IndicesI64(r, 1));
  const Shape& data = r.in[0].shape;
  const Shape& ind = r.in[1].shape;
  const int64_t b = node.attr_int("batch_dims", 0);
  const size_t rank = data.size(), q = ind.size();
  if (b < 0 || static_cast<int64_t>(rank) <= b || static_cast<int64_t>(q) <= b)
    return Unsupported(node.Label(), ": batch_dims ", b);
  const size_t bd = static_cast<size_t>(b);
  const int64_t last = ind.back();
  if (last < 1 || last > static_cast<int64_t>(rank - bd) || last > kMaxRank)
    return Unsupported(node.Label(), ": index tuples of ", last, " values");
  for (size_t d = 0; d < bd; ++d)
    if (data[d] != ind[d]) return Unsupported(node.Label(), ": batch dim ", d, " differs");
  Shape want(ind.begin(), ind.end() - 1);
  want.insert(want.end(), data.begin() + b + last, data.end());
  if (r.out[0].dtype != r.in[0].dtype || r.out[0].shape != want) return Unsupported(node.Label(), ": output shape");
  IndexedDims d;
  d.k = static_cast<int>(last);
  for (int j = 0; j < d.k; ++j) d.dims[j] = data[bd + static_cast<size_t>(j)];
  return KernelChoice{false, std::make_unique<GatherNDKernel>(elem, i64, Product(data, 0, bd), Product(ind, bd, q - 1),
                                                              d, Product(data, bd + static_cast<size_t>(last), rank),
                                                              Product(data, bd, rank))};
}

Result<KernelChoice> MakeScatterElements(const KernelRequest& r) {
  SP_ASSIGN_OR_RETURN(ScatterSetup s, MakeScatterSetup(r));
  if (r.in[1].shape != r.in[2].shape) return Unsupported(r.node.Label(), ": indices and updates shapes differ");
  SP_ASSIGN_OR_RETURN(ElementsWalk w, MakeElementsWalk(r));
  const size_t bytes = static_cast<size_t>(NumElements(r.in[0].shape)) * s.elem;
  return KernelChoice{false, std::make_unique<ScatterKernel>(s, bytes, w, 0, IndexedDims{}, 0)};
}

Result<KernelChoice> MakeScatterND(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_ASSIGN_OR_RETURN(ScatterSetup s, MakeScatterSetup(r));
  const Shape& data = r.in[0].shape;
  const Shape& ind = r.in[1].shape;
  if (data.empty() || ind.empty()) return Unsupported(node.Label(), ": rank-0 data or indices");
  const int64_t k = ind.back();
  if (k < 1 || k > static_cast<int64_t>(data.size()) || k > kMaxRank)
    return Unsupported(node.Label(), ": index tuples of ", k, " values");
  Shape want(ind.begin(), ind.end() - 1);
  want.insert(want.end(), data.begin() + k, data.end());
  if (r.in[2].shape != want) return Unsupported(node.Label(), ": updates shape");
  IndexedDims d;
  d.k = static_cast<int>(k);
  for (int j = 0; j < d.k; ++j) d.dims[j] = data[static_cast<size_t>(j)];
  const size_t bytes = static_cast<size_t>(NumElements(data)) * s.elem;
  return KernelChoice{false, std::make_unique<ScatterKernel>(s, bytes, std::nullopt, Product(ind, 0, ind.size() - 1), d,
                                                             Product(data, static_cast<size_t>(k), data.size()))};
}

}  // namespace sampan::cuda
