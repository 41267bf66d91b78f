#include "backends/cuda/split_kernel.h"

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/strided_copy.h"
#include "backends/cuda/tile.h"

namespace sampan::cuda {
namespace {

// Strided copies out of input 0 into the outputs (an absent output's parts are skipped).
class CopyOutKernel : public NodeKernel {
 public:
  struct Part {
    size_t output;
    int64_t src_offset;  // elements
    StridedShape shape;
  };
  CopyOutKernel(size_t elem, std::vector<Part> parts, const char* fam)
      : elem_(elem), parts_(std::move(parts)), fam_(fam) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    for (const Part& p : parts_) {
      if (p.output >= out.size() || out[p.output] == nullptr) continue;
      SP_CUDA(LaunchStridedCopy(elem_, static_cast<const char*>(in[0]) + p.src_offset * static_cast<int64_t>(elem_),
                                out[p.output], p.shape, env.stream));
    }
    return Status::Ok();
  }
  const char* family() const override { return fam_; }

 private:
  size_t elem_;
  std::vector<Part> parts_;
  const char* fam_;
};

class TileKernel : public NodeKernel {
 public:
  TileKernel(size_t elem, const TileShape& s) : elem_(elem), s_(s) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchTile(elem_, in[0], out[0], s_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "tile"; }

 private:
  size_t elem_;
  TileShape s_;
};

// The element size of input 0 when the copy kernels take it and the layout is plain NCHW.
Result<size_t> CopyElement(const KernelRequest& r) {
  const ir::Node& node = r.node;
  if (r.in.empty() || !r.in[0].present || r.out.empty()) return Unsupported(node.Label(), ": no data input");
  const size_t elem = DTypeSize(r.in[0].dtype);
  if (elem != 1 && elem != 2 && elem != 4 && elem != 8)
    return Unsupported(node.Label(), ": element type ", DTypeName(r.in[0].dtype));
  // Channels-last storage would need the copy rewritten; the planner keeps these ops NCHW.
  for (size_t i = 0; i < r.in.size(); ++i)
    if (r.opt.input_nhwc(i)) return Unsupported(node.Label(), ": layout (channels-last input)");
  if (r.opt.out_nhwc) return Unsupported(node.Label(), ": layout (channels-last output)");
  return elem;
}

// One copy of input 0 into output 0, iterating `dims` (output order) with source strides `src`.
Result<KernelChoice> OneCopy(size_t elem, const Shape& dims, const std::vector<int64_t>& src, const char* fam) {
  SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(dims, {src, Packed(dims)}));
  std::vector<CopyOutKernel::Part> parts;
  if (NumElements(dims) > 0) parts.push_back({0, 0, s});
  return KernelChoice{false, std::make_unique<CopyOutKernel>(elem, std::move(parts), fam)};
}

}  // namespace

Result<KernelChoice> MakeSplit(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_ASSIGN_OR_RETURN(size_t elem, CopyElement(r));
  const Shape& x = r.in[0].shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return Unsupported(node.Label(), ": axis ", node.attr_int("axis", 0));
  const size_t a = static_cast<size_t>(axis);
  const auto xs = Packed(x);
  // Output i starts where outputs 0..i-1 end along the axis; the sizes are the outputs' own
  // (whatever form the split took), so only trailing outputs may be absent.
  std::vector<CopyOutKernel::Part> parts;
  int64_t offset = 0;
  bool absent = false;
  for (size_t i = 0; i < node.num_outputs(); ++i) {
    if (!node.output(i) || i >= r.out.size()) {
      absent = true;
      continue;
    }
    if (absent) return Unsupported(node.Label(), ": absent output before output ", i);
    const Shape& y = r.out[i].shape;
    if (r.out[i].dtype != r.in[0].dtype || y.size() != x.size())
      return Unsupported(node.Label(), ": output ", i, " type or rank");
    for (size_t d = 0; d < x.size(); ++d)
      if (d != a && y[d] != x[d]) return Unsupported(node.Label(), ": output ", i, " shape");
    if (NumElements(y) > 0) {
      SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(y, {xs, Packed(y)}));
      parts.push_back({i, offset * xs[a], s});
    }
    offset += y[a];
  }
  if (offset > x[a] || (!absent && offset != x[a]))
    return Unsupported(node.Label(), ": output sizes add up to ", offset, ", axis has ", x[a]);
  return KernelChoice{false, std::make_unique<CopyOutKernel>(elem, std::move(parts), "split")};
}

Result<KernelChoice> MakeTile(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_ASSIGN_OR_RETURN(size_t elem, CopyElement(r));
  const Shape& x = r.in[0].shape;
  const Shape& y = r.out[0].shape;
  if (y.size() != x.size() || r.out[0].dtype != r.in[0].dtype)
    return Unsupported(node.Label(), ": output type or rank");
  if (NumElements(y) == 0) return OneCopy(elem, y, Packed(y), "tile");  // nothing to copy
  for (size_t d = 0; d < x.size(); ++d)
    if (x[d] <= 0 || y[d] % x[d] != 0) return Unsupported(node.Label(), ": output dim ", d, " is not a multiple");
  // Output dim d = (repeat, extent): the source stride is 0 across repeats.
  const auto xs = Packed(x), ys = Packed(y);
  Shape dims;
  std::vector<int64_t> src, dst;
  for (size_t d = 0; d < x.size(); ++d) {
    dims.insert(dims.end(), {y[d] / x[d], x[d]});
    src.insert(src.end(), {0, xs[d]});
    dst.insert(dst.end(), {x[d] * ys[d], ys[d]});
  }
  if (auto s = MakeStrided(dims, {src, dst}); s.ok()) {
    std::vector<CopyOutKernel::Part> parts{{0, 0, *s}};
    return KernelChoice{false, std::make_unique<CopyOutKernel>(elem, std::move(parts), "tile")};
  }
  // Too many dims for a strided copy once split: the modulo walk over the output's dims.
  TileShape t;
  for (size_t d = 0; d < x.size(); ++d) {
    if (y[d] == 1) continue;
    if (t.rank == kMaxRank) return Unsupported(node.Label(), ": rank ", x.size(), " Tile");
    t.out_dims[t.rank] = y[d];
    t.in_dims[t.rank] = x[d];
    t.in_stride[t.rank] = xs[d];
    ++t.rank;
  }
  return KernelChoice{false, std::make_unique<TileKernel>(elem, t)};
}

// DepthToSpace: y[n, c, h*b + i, w*b + j] = x[n, ic, h, w] with ic = (i*b + j)*oc + c (DCR)
// or (c*b + i)*b + j (CRD): a copy over y viewed as [N, oc, H, b, W, b].
Result<KernelChoice> MakeDepthToSpace(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_ASSIGN_OR_RETURN(size_t elem, CopyElement(r));
  const Shape& x = r.in[0].shape;
  const int64_t b = node.attr_int("blocksize", 0);
  const std::string mode = node.attr_string("mode", "DCR");
  if (x.size() != 4 || b < 1 || x[1] % (b * b) != 0 || (mode != "DCR" && mode != "CRD"))
    return Unsupported(node.Label(), ": DepthToSpace shape, blocksize or mode");
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], oc = C / (b * b), hw = H * W;
  if (r.out[0].shape != Shape{N, oc, H * b, W * b}) return Unsupported(node.Label(), ": output shape");
  const bool crd = mode == "CRD";
  const std::vector<int64_t> src = {C * hw, crd ? b * b * hw : hw, W, crd ? b * hw : b * oc * hw,
                                    1,      crd ? hw : oc * hw};
  return OneCopy(elem, {N, oc, H, b, W, b}, src, "transpose");
}

// SpaceToDepth: DCR (the default) y[n, (i*b + j)*C + c, oh, ow] = x[n, c, oh*b + i, ow*b + j],
// a copy over y viewed as [N, b, b, C, OH, OW]; CRD (opset 28) y[n, (c*b + i)*b + j, oh, ow],
// the view [N, C, b, b, OH, OW].
Result<KernelChoice> MakeSpaceToDepth(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_ASSIGN_OR_RETURN(size_t elem, CopyElement(r));
  const Shape& x = r.in[0].shape;
  const int64_t b = node.attr_int("blocksize", 0);
  const std::string mode = node.attr_string("mode", "DCR");
  if (x.size() != 4 || b < 1 || x[2] % b != 0 || x[3] % b != 0 || (mode != "DCR" && mode != "CRD"))
    return Unsupported(node.Label(), ": SpaceToDepth shape, blocksize or mode");
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], OH = H / b, OW = W / b;
  if (r.out[0].shape != Shape{N, C * b * b, OH, OW}) return Unsupported(node.Label(), ": output shape");
  if (mode == "CRD") return OneCopy(elem, {N, C, b, b, OH, OW}, {C * H * W, H * W, W, 1, b * W, b}, "transpose");
  return OneCopy(elem, {N, b, b, C, OH, OW}, {C * H * W, W, 1, H * W, b * W, b}, "transpose");
}

}  // namespace sampan::cuda
