// Data-movement family: Transpose, Concat, Expand and Slice as strided copies.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/families.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/strided_copy.h"

namespace sampan::cuda {
namespace {

class CopyKernel : public NodeKernel {
 public:
  struct Part {
    int input;
    int64_t src_offset, dst_offset;  // elements
    StridedShape shape;
  };
  CopyKernel(size_t elem, std::vector<Part> parts, const char* fam)
      : elem_(elem), parts_(std::move(parts)), fam_(fam) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    for (const Part& p : parts_)
      SP_CUDA(LaunchStridedCopy(elem_,
                                static_cast<const char*>(in[static_cast<size_t>(p.input)]) + p.src_offset * elem_,
                                static_cast<char*>(out[0]) + p.dst_offset * elem_, p.shape, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return fam_; }

 private:
  size_t elem_;
  std::vector<Part> parts_;
  const char* fam_;
};

// A single copy part from `in` (input 0) to the output: a view when both
// index the same memory the same way (a Transpose that only reorders how a
// channels-last tensor is described, a full Slice, an Expand that broadcasts nothing).
Result<KernelChoice> OnePart(const KernelRequest& r, int64_t base, const std::vector<int64_t>& src,
                             const char* family) {
  const Shape& o = r.out[0].shape;
  const size_t elem = DTypeSize(r.out[0].dtype);
  const auto dst = StorageStrides(o, r.opt.out_nhwc);
  if (NumElements(o) == 0)
    return KernelChoice{false, std::make_unique<CopyKernel>(elem, std::vector<CopyKernel::Part>{}, family)};
  bool same = base == 0 && NumElements(o) == NumElements(r.in[0].shape);
  for (size_t i = 0; same && i < o.size(); ++i) same = o[i] == 1 || src[i] == dst[i];
  if (same) return KernelChoice{true, nullptr};
  SP_ASSIGN_OR_RETURN(StridedShape s, MakeStridedFor(o, r.opt.out_nhwc, {src, dst}));
  return KernelChoice{false,
                      std::make_unique<CopyKernel>(elem, std::vector<CopyKernel::Part>{{0, base, 0, s}}, family)};
}

}  // namespace

// Every factory here reads and writes either layout (layout.h): strides are those of
// each value as stored, and the destination is visited in its memory order.
Result<KernelChoice> MakeTranspose(const KernelRequest& r) {
  const Shape& x = r.in[0].shape;
  std::vector<int64_t> perm = r.node.attr_ints("perm");
  if (perm.empty())
    for (size_t i = 0; i < x.size(); ++i) perm.insert(perm.begin(), static_cast<int64_t>(i));
  if (perm.size() != x.size())
    return InvalidArgument(r.node.Label(), ": perm of ", perm.size(), " for rank ", x.size());
  const auto xs = StorageStrides(x, r.opt.input_nhwc(0));
  std::vector<int64_t> src(x.size());
  for (size_t i = 0; i < perm.size(); ++i) src[i] = xs[static_cast<size_t>(perm[i])];
  return OnePart(r, 0, src, "transpose");
}

// Concat whose inputs are all stored in the output's layout: row copies, every input in
// one launch (LaunchConcatRows, up to ConcatRows::kMaxParts a launch).
class ConcatRowsKernel : public NodeKernel {
 public:
  struct Part {
    int input;
    int64_t len, off;  // elements of each output row
  };
  ConcatRowsKernel(size_t elem, int64_t outer, int64_t row, std::vector<Part> parts)
      : elem_(elem), outer_(outer), row_(row), parts_(std::move(parts)) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    for (size_t first = 0; first < parts_.size(); first += ConcatRows::kMaxParts) {
      ConcatRows c;
      c.outer = outer_;
      c.row = row_;
      for (size_t i = first; i < parts_.size() && c.parts < ConcatRows::kMaxParts; ++i, ++c.parts) {
        c.src[c.parts] = in[static_cast<size_t>(parts_[i].input)];
        c.len[c.parts] = parts_[i].len;
        c.off[c.parts] = parts_[i].off;
      }
      SP_CUDA(LaunchConcatRows(elem_, c, out[0], env.stream));
    }
    return Status::Ok();
  }
  const char* family() const override { return "concat"; }

 private:
  size_t elem_;
  int64_t outer_, row_;
  std::vector<Part> parts_;
};

Result<KernelChoice> MakeConcat(const KernelRequest& r) {
  const Shape& o = r.out[0].shape;
  const int64_t rank = static_cast<int64_t>(o.size());
  int64_t axis = r.node.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return InvalidArgument(r.node.Label(), ": axis out of range");
  // Inputs stored like the output: each is `outer` contiguous rows of its part of an output row.
  bool same_layout = true;
  for (size_t i = 0; i < r.in.size(); ++i)
    same_layout = same_layout && (!r.in[i].present || r.opt.input_nhwc(i) == r.opt.out_nhwc);
  if (same_layout && NumElements(o) > 0) {
    std::vector<size_t> order(o.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (r.opt.out_nhwc && o.size() == 4) order = {0, 2, 3, 1};
    const size_t pos =
        static_cast<size_t>(std::find(order.begin(), order.end(), static_cast<size_t>(axis)) - order.begin());
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < order.size(); ++k) {
      if (k < pos) outer *= o[order[k]];
      if (k > pos) inner *= o[order[k]];
    }
    std::vector<ConcatRowsKernel::Part> parts;
    int64_t offset = 0;
    for (size_t i = 0; i < r.in.size(); ++i) {
      if (!r.in[i].present) continue;
      const int64_t l = r.in[i].shape[static_cast<size_t>(axis)];
      if (l > 0) parts.push_back({static_cast<int>(i), l * inner, offset * inner});
      offset += l;
    }
    return KernelChoice{false,
                        std::make_unique<ConcatRowsKernel>(DTypeSize(r.out[0].dtype), outer,
                                                           o[static_cast<size_t>(axis)] * inner, std::move(parts))};
  }
  const auto os = StorageStrides(o, r.opt.out_nhwc);
  std::vector<CopyKernel::Part> parts;
  int64_t offset = 0;
  for (size_t i = 0; i < r.in.size(); ++i) {
    if (!r.in[i].present) continue;
    const Shape& x = r.in[i].shape;
    if (NumElements(x) > 0) {
      SP_ASSIGN_OR_RETURN(StridedShape s,
                          MakeStridedFor(x, r.opt.out_nhwc, {StorageStrides(x, r.opt.input_nhwc(i)), os}));
      parts.push_back({static_cast<int>(i), 0, offset * os[static_cast<size_t>(axis)], s});
    }
    offset += x[static_cast<size_t>(axis)];
  }
  return KernelChoice{false, std::make_unique<CopyKernel>(DTypeSize(r.out[0].dtype), parts, "concat")};
}

Result<KernelChoice> MakeExpand(const KernelRequest& r) {
  return OnePart(r, 0, BroadcastStrides(r.in[0].shape, r.out[0].shape, r.opt.input_nhwc(0)), "expand");
}

// Slice: out[i] = x[start + i * step] per axis (ONNX clamping, as the reference does).
Result<KernelChoice> MakeSlice(const KernelRequest& r) {
  const ir::Node& node = r.node;
  const auto& in = r.in;
  const Shape& x = in[0].shape;
  const size_t rank = x.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (r.opset < 10) {
    starts = node.attr_ints("starts");
    ends = node.attr_ints("ends");
    axes = node.attr_ints("axes");
  } else {
    for (size_t i = 1; i < 5; ++i) {
      if (i >= in.size() || !in[i].present) continue;
      if (!in[i].host) return Unsupported(node.Label(), ": slice bounds computed on the device");
      SP_ASSIGN_OR_RETURN(auto v, ToInt64Vector(*in[i].host, "slice input"));
      (i == 1 ? starts : i == 2 ? ends : i == 3 ? axes : steps) = v;
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> begin(rank, 0), step(rank, 1);
  for (size_t k = 0; k < starts.size() && k < axes.size() && k < ends.size(); ++k) {
    int64_t a = axes[k] < 0 ? axes[k] + static_cast<int64_t>(rank) : axes[k];
    if (a < 0 || a >= static_cast<int64_t>(rank))
      return InvalidArgument(node.Label(), ": axis ", axes[k], " out of range");
    const int64_t d = x[static_cast<size_t>(a)], st = k < steps.size() ? steps[k] : 1;
    if (st == 0) return InvalidArgument(node.Label(), ": step 0");
    int64_t s = starts[k];
    if (s < 0) s += d;
    s = st > 0 ? std::clamp<int64_t>(s, 0, d) : std::clamp<int64_t>(s, 0, d - 1);
    begin[static_cast<size_t>(a)] = s;
    step[static_cast<size_t>(a)] = st;
  }
  const auto xs = StorageStrides(x, r.opt.input_nhwc(0));
  int64_t base = 0;
  std::vector<int64_t> src(rank);
  for (size_t i = 0; i < rank; ++i) {
    base += begin[i] * xs[i];
    src[i] = xs[i] * step[i];
  }
  return OnePart(r, base, src, "slice");
}

}  // namespace sampan::cuda
