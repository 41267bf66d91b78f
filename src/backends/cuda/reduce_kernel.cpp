#include "backends/cuda/reduce_kernel.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/strided_copy.h"

namespace sampan::cuda {
namespace {

constexpr size_t kWorkspaceAlign = 256;
size_t AlignUp(size_t n) {
  return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// A reduction over the middle axis of [outer, r, inner], after (when the reduced axes are
// not adjacent) a strided copy into the workspace that moves them last.
class ReduceKernel : public NodeKernel {
 public:
  ReduceKernel(ReduceParams p, std::optional<StridedShape> permute, size_t elem, size_t copy_bytes, const char* family)
      : p_(p), permute_(permute), elem_(elem), copy_bytes_(copy_bytes), family_(family) {}
  size_t workspace() const override { return copy_bytes_ + ReduceWorkspace(p_); }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (workspace() > 0 && (env.workspace == nullptr || env.workspace_bytes < workspace()))
      return Internal(family_, " kernel: needs ", workspace(), " bytes of workspace, has ", env.workspace_bytes);
    char* ws = static_cast<char*>(env.workspace);
    const void* x = in[0];
    if (permute_) {
      SP_CUDA(LaunchStridedCopy(elem_, in[0], ws, *permute_, env.stream));
      x = ws;
    }
    void* partials = ReduceWorkspace(p_) > 0 ? ws + copy_bytes_ : nullptr;
    SP_CUDA(LaunchReduce(p_, x, out[0], partials, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return family_; }

 private:
  ReduceParams p_;
  std::optional<StridedShape> permute_;
  size_t elem_;
  size_t copy_bytes_;  // the permuted copy of x, rounded up so the partials stay aligned
  const char* family_;
};

// Empty axes with noop_with_empty_axes: the output is the input.
class CopyThroughKernel : public NodeKernel {
 public:
  explicit CopyThroughKernel(size_t bytes) : bytes_(bytes) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (bytes_ > 0 && out[0] != in[0])
      SP_CUDA(cudaMemcpyAsync(out[0], in[0], bytes_, cudaMemcpyDeviceToDevice, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "reduce"; }

 private:
  size_t bytes_;
};

const std::map<std::string, ReduceOp>& ReduceOps() {
  static const std::map<std::string, ReduceOp> k = {
      {"ReduceSum", ReduceOp::kSum},       {"ReduceMean", ReduceOp::kMean},
      {"ReduceMax", ReduceOp::kMax},       {"ReduceMin", ReduceOp::kMin},
      {"ReduceProd", ReduceOp::kProd},     {"ReduceL1", ReduceOp::kL1},
      {"ReduceL2", ReduceOp::kL2},         {"ReduceSumSquare", ReduceOp::kSumSquare},
      {"ReduceLogSum", ReduceOp::kLogSum}, {"ReduceLogSumExp", ReduceOp::kLogSumExp}};
  return k;
}

// The reduced-dims mask the node asks for, read as ops/reduce.cpp does (ReadAxes, AxesMask);
// nullopt for empty axes with noop_with_empty_axes (an identity).
Result<std::optional<std::vector<char>>> ReducedDims(const KernelRequest& r, ReduceOp op, int64_t rank) {
  const ir::Node& node = r.node;
  const int64_t input_opset = op == ReduceOp::kSum ? 13 : 18;
  const bool has_input = r.in.size() > 1 && r.in[1].present;
  std::vector<int64_t> axes;
  bool noop = false;
  if (r.opset >= input_opset) {
    noop = node.attr_int("noop_with_empty_axes", 0) != 0;
    if (node.has_attr("axes"))
      return InvalidArgument(node.Label(), ": 'axes' is an input (not an attribute) from opset ", input_opset);
    if (has_input) {
      const Tensor* a = r.in[1].host;
      if (a == nullptr) return Unsupported(node.Label(), ": axes computed on the device");
      if (a->rank() > 1) return InvalidArgument(node.Label(), ": 'axes' must be 1-D, got ", a->Describe());
      SP_ASSIGN_OR_RETURN(axes, ToInt64Vector(*a, node.Label() + ": axes"));
    }
  } else {
    if (has_input) return InvalidArgument(node.Label(), ": 'axes' input is only allowed from opset ", input_opset);
    axes = node.attr_ints("axes");
  }
  if (axes.empty() && noop) return std::optional<std::vector<char>>();
  std::vector<char> mask(static_cast<size_t>(rank), axes.empty() ? 1 : 0);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return InvalidArgument(node.Label(), ": axis ", a, " is out of range for rank ", rank);
    char& m = mask[static_cast<size_t>(a < 0 ? a + rank : a)];
    if (m) return InvalidArgument(node.Label(), ": axis ", a, " is repeated in 'axes'");
    m = 1;
  }
  return std::optional<std::vector<char>>(std::move(mask));
}

// x seen as [outer, r, inner] around the reduced dims, plus the strided copy that first
// moves them last (then inner == 1) when they are not adjacent once size-1 dims are dropped.
struct ReduceLayout {
  int64_t outer = 1, r = 1, inner = 1;
  std::optional<StridedShape> permute;
};

Result<ReduceLayout> LayoutFor(const ir::Node& node, const Shape& x, const std::vector<char>& mask) {
  std::vector<std::pair<int64_t, bool>> groups;  // merged (size, reduced), size-1 dims dropped
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 1) continue;
    const bool red = mask[d] != 0;
    if (!groups.empty() && groups.back().second == red)
      groups.back().first *= x[d];
    else
      groups.emplace_back(x[d], red);
  }
  int reduced_groups = 0;
  for (const auto& g : groups) reduced_groups += g.second ? 1 : 0;
  ReduceLayout l;
  if (reduced_groups <= 1) {
    bool after = false;
    for (const auto& [n, red] : groups) {
      if (red) {
        l.r = n;
        after = true;
      } else {
        (after ? l.inner : l.outer) *= n;
      }
    }
    return l;
  }
  for (size_t d = 0; d < x.size(); ++d) (mask[d] ? l.r : l.outer) *= x[d];
  if (NumElements(x) == 0) return l;  // nothing to read: no outputs, or identities (r == 0)
  // Destination [kept dims..., reduced dims...] (packed): rows of r contiguous elements,
  // in the output's order.
  const std::vector<int64_t> xs = Packed(x);
  Shape dims;
  std::vector<int64_t> src;
  for (char pass : {char(0), char(1)})
    for (size_t d = 0; d < x.size(); ++d)
      if ((mask[d] != 0) == (pass != 0)) {
        dims.push_back(x[d]);
        src.push_back(xs[d]);
      }
  auto s = MakeStrided(dims, {src, Packed(dims)});
  if (!s.ok()) return Unsupported(node.Label(), ": ", s.status().message());
  l.permute = *s;
  return l;
}

KernelChoice Choice(const ReduceParams& p, const std::optional<StridedShape>& permute, const KernelInput& x,
                    const char* family) {
  const size_t elem = DTypeSize(x.dtype);
  const size_t copy = permute ? AlignUp(static_cast<size_t>(NumElements(x.shape)) * elem) : 0;
  return KernelChoice{false, std::make_unique<ReduceKernel>(p, permute, elem, copy, family)};
}

}  // namespace

std::optional<NumType> NumTypeOf(DType t) {
  switch (t) {
    case DType::kFloat32:
      return NumType::kF32;
    case DType::kFloat16:
      return NumType::kF16;
    case DType::kBFloat16:
      return NumType::kBF16;
    case DType::kInt32:
      return NumType::kI32;
    case DType::kInt64:
      return NumType::kI64;
    default:
      return std::nullopt;
  }
}

Result<KernelChoice> MakeReduce(const KernelRequest& r) {
  const ir::Node& node = r.node;
  auto it = ReduceOps().find(node.op_type);
  if (it == ReduceOps().end()) return Unsupported(node.Label(), ": not a Reduce op");
  const ReduceOp op = it->second;
  if (r.in.empty() || !r.in[0].present || r.out.empty()) return Unsupported(node.Label(), ": no data input");
  const KernelInput& x = r.in[0];
  if (r.opt.input_nhwc(0) || r.opt.out_nhwc) return Unsupported(node.Label(), ": channels-last layout");
  if (r.out[0].dtype != x.dtype) return Unsupported(node.Label(), ": output type differs from the input's");
  const std::optional<NumType> t = NumTypeOf(x.dtype);
  if (!t || !ReduceSupported(op, *t))
    return Unsupported(node.Label(), ": no CUDA kernel for ", node.op_type, " on ", DTypeName(x.dtype));
  SP_ASSIGN_OR_RETURN(auto mask, ReducedDims(r, op, static_cast<int64_t>(x.shape.size())));
  if (!mask) {
    const size_t bytes = static_cast<size_t>(NumElements(x.shape)) * DTypeSize(x.dtype);
    return KernelChoice{false, std::make_unique<CopyThroughKernel>(bytes)};
  }
  SP_ASSIGN_OR_RETURN(ReduceLayout l, LayoutFor(node, x.shape, *mask));
  if (NumElements(r.out[0].shape) != l.outer * l.inner)
    return Unsupported(node.Label(), ": output shape ", ShapeToString(r.out[0].shape),
                       " does not match the reduction of ", ShapeToString(x.shape));
  ReduceParams p;
  p.op = op;
  p.type = *t;
  p.outer = l.outer;
  p.r = l.r;
  p.inner = l.inner;
  PlanReduce(&p);
  return Choice(p, l.permute, x, "reduce");
}

Result<KernelChoice> MakeArgReduce(const KernelRequest& r) {
  const ir::Node& node = r.node;
  if (node.op_type != "ArgMax" && node.op_type != "ArgMin") return Unsupported(node.Label(), ": not ArgMax/ArgMin");
  if (r.in.empty() || !r.in[0].present || r.out.empty()) return Unsupported(node.Label(), ": no data input");
  const KernelInput& x = r.in[0];
  if (r.opt.input_nhwc(0) || r.opt.out_nhwc) return Unsupported(node.Label(), ": channels-last layout");
  if (r.out[0].dtype != DType::kInt64) return Unsupported(node.Label(), ": output type ", DTypeName(r.out[0].dtype));
  const std::optional<NumType> t = NumTypeOf(x.dtype);
  if (!t) return Unsupported(node.Label(), ": no CUDA kernel for ", node.op_type, " on ", DTypeName(x.dtype));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) return Unsupported(node.Label(), ": scalar input");
  int64_t axis = node.attr_int("axis", 0);
  if (axis < -rank || axis >= rank)
    return InvalidArgument(node.Label(), ": axis ", axis, " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  ReduceParams p;
  p.op = node.op_type == "ArgMax" ? ReduceOp::kArgMax : ReduceOp::kArgMin;
  p.type = *t;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t n = x.shape[static_cast<size_t>(d)];
    if (d < axis)
      p.outer *= n;
    else if (d == axis)
      p.r = n;
    else
      p.inner *= n;
  }
  // No index to return: the reference reports the error.
  if (p.r == 0 && p.outer * p.inner > 0) return Unsupported(node.Label(), ": ", node.op_type, " over an empty axis");
  if (NumElements(r.out[0].shape) != p.outer * p.inner)
    return Unsupported(node.Label(), ": output shape ", ShapeToString(r.out[0].shape), " does not match the input ",
                       ShapeToString(x.shape));
  p.select_last = r.opset >= 12 && node.attr_int("select_last_index", 0) != 0;
  PlanReduce(&p);
  return Choice(p, std::nullopt, x, "argmax");
}

}  // namespace sampan::cuda
