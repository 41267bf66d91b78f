#include "backends/cuda/conv_transpose.h"

#include <algorithm>
#include <optional>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/strided_copy.h"
#include "ops/conv_util.h"

namespace sampan::cuda {
namespace {

// ---------------------------------------------------------------- geometry (host only)

int64_t FloorDiv2(int64_t v) {
  return v >= 0 ? v / 2 : -((-v + 1) / 2);
}

struct DeconvAttrs {
  ops::SpatialAttrs a;                  // kernel (from W), strides, dilations, pads, auto_pad
  std::vector<int64_t> output_padding;  // one per spatial dim
  std::vector<int64_t> output_shape;    // empty, or one per spatial dim
  int64_t group = 1;
};

// As ops/conv_transpose.cpp reads them; invalid values (which the reference rejects
// before lowering) come back Unsupported so the host reports them.
Status ReadAttrs(const ir::Node& node, DeconvAttrs* t) {
  const size_t r = t->a.kernel.size();
  t->group = node.attr_int("group", 1);
  if (t->group <= 0 || t->group > ops::kMaxSpatialAttr) return Unsupported(node.Label(), ": group ", t->group);
  Status st = ops::ReadSpatialAttrs(node, &t->a, false);
  if (!st.ok()) return Unsupported(st.message());
  t->output_padding = node.attr_ints("output_padding", std::vector<int64_t>(r, 0));
  if (t->output_padding.size() != r) return Unsupported(node.Label(), ": output_padding size");
  for (int64_t v : t->output_padding)
    if (v < 0 || v > ops::kMaxSpatialAttr) return Unsupported(node.Label(), ": output_padding ", v);
  t->output_shape = node.attr_ints("output_shape");
  if (t->output_shape.size() == r + 2) t->output_shape.erase(t->output_shape.begin(), t->output_shape.begin() + 2);
  if (!t->output_shape.empty() && t->output_shape.size() != r) return Unsupported(node.Label(), ": output_shape size");
  return Status::Ok();
}

// Output size and begin pad of spatial dim i (the reference's TransposeOutDim): output
// position o receives the "full" (unpadded) transposed convolution at o + pb.
int64_t OutDim(const DeconvAttrs& t, size_t i, int64_t in, int64_t* pb) {
  const ops::SpatialAttrs& a = t.a;
  const int64_t full = a.strides[i] * (in - 1) + t.output_padding[i] + a.effective_kernel(i);
  if (a.auto_pad == ops::AutoPad::kSameUpper || a.auto_pad == ops::AutoPad::kSameLower) {
    const int64_t out = t.output_shape.empty() ? in * a.strides[i] : t.output_shape[i];
    const int64_t total = full - out;
    *pb = a.auto_pad == ops::AutoPad::kSameUpper ? FloorDiv2(total) : total - FloorDiv2(total);
    return out;
  }
  *pb = a.pads[i];
  if (!t.output_shape.empty()) return t.output_shape[i];
  return full - a.pads[i] - a.pads[a.rank() + i];
}

// What the kernel runs: cuDNN dims (1-D given as 2-D with H = 1) and, when dx is not y
// itself, how the workspace dx maps into y.
struct Setup {
  FloatType type = FloatType::kF32;
  bool tf32 = false;
  size_t elem = 4;
  std::vector<int64_t> dy, w, dx, pads, strides, dilations;
  int64_t groups = 1;
  bool crop = false;       // dx lives in the workspace and is copied into y
  bool zero_fill = false;  // y has positions outside dx (zeros before the bias)
  std::optional<StridedShape> copy;
  int64_t src_off = 0, dst_off = 0;  // elements
  size_t y_bytes = 0, crop_bytes = 0;
  std::optional<StridedShape> bias;  // y += bias[channel]
};

// Spatial dim by dim: cuDNN's dx of size D with symmetric pad p holds the full result's
// positions [p, p + D), for any D in [F - 2p, F - 2p + s - 1] (F = s*(in-1) + ek; the
// upper part is output_padding). When y's window [pb, pb + out) is such a range, dx is y
// ("direct"). Otherwise dx takes p = min(pb, end crop) (0 with `full`, or when negative),
// D = F - 2p, which holds every non-zero position y needs, and the copy picks y's window.
Status PlanGeometry(const DeconvAttrs& t, const Shape& xs, const Shape& ys, bool full, Setup* s) {
  const size_t r = xs.size() - 2;
  Shape dx = {ys[0], ys[1]};
  std::vector<int64_t> lo(r), hi(r), shift(r);
  s->pads.assign(r, 0);
  s->crop = false;
  for (size_t i = 0; i < r; ++i) {
    const int64_t in = xs[2 + i], out = ys[2 + i], st = t.a.strides[i];
    int64_t pb = 0;
    (void)OutDim(t, i, in, &pb);
    const int64_t f = st * (in - 1) + t.a.effective_kernel(i);
    const bool direct = !full && pb >= 0 && out >= f - 2 * pb && out <= f - 2 * pb + st - 1;
    int64_t p = pb, d = out;
    lo[i] = 0;
    hi[i] = out;
    if (!direct) {
      s->crop = true;
      p = full ? 0 : std::max<int64_t>(0, std::min(pb, f - pb - out));
      d = f - 2 * p;
      lo[i] = std::max<int64_t>(0, -pb);
      hi[i] = std::min(out, f - pb);
    }
    shift[i] = pb - p;
    s->pads[i] = p;
    dx.push_back(d);
  }
  s->dx = dx;
  s->copy.reset();
  s->zero_fill = false;
  s->crop_bytes = 0;
  if (s->crop) {
    s->crop_bytes = (static_cast<size_t>(NumElements(dx)) * s->elem + 255) / 256 * 256;
    const auto src = Packed(dx), dst = Packed(ys);
    Shape dims = {ys[0], ys[1]};
    s->src_off = s->dst_off = 0;
    bool any = true;
    for (size_t i = 0; i < r; ++i) {
      if (lo[i] > 0 || hi[i] < ys[2 + i]) s->zero_fill = true;
      any = any && hi[i] > lo[i];
      dims.push_back(std::max<int64_t>(0, hi[i] - lo[i]));
      s->src_off += (lo[i] + shift[i]) * src[2 + i];
      s->dst_off += lo[i] * dst[2 + i];
    }
    if (any) {
      SP_ASSIGN_OR_RETURN(StridedShape c, MakeStrided(dims, {src, dst}));
      s->copy = c;
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- the kernel

cudnnDataType_t DnnType(FloatType t) {
  switch (t) {
    case FloatType::kF16:
      return CUDNN_DATA_HALF;
    case FloatType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

std::vector<int> Ints(const std::vector<int64_t>& v) {
  return std::vector<int>(v.begin(), v.end());
}

Status SetTensor(cudnnTensorDescriptor_t d, cudnnDataType_t t, const std::vector<int64_t>& dims) {
  auto di = Ints(dims);
  auto st = Ints(Packed(dims));
  SP_CUDNN(cudnnSetTensorNdDescriptor(d, t, static_cast<int>(di.size()), di.data(), st.data()));
  return Status::Ok();
}

class DeconvKernel : public NodeKernel {
 public:
  ~DeconvKernel() override {
    if (dyd_) cudnnDestroyTensorDescriptor(dyd_);
    if (dxd_) cudnnDestroyTensorDescriptor(dxd_);
    if (wd_) cudnnDestroyFilterDescriptor(wd_);
    if (cd_) cudnnDestroyConvolutionDescriptor(cd_);
  }

  //! Sets the descriptors for `s` and picks the algorithm: the recorded tactic `algo`
  //! when cuDNN accepts it for this geometry, else the heuristic's first.
  Status Init(const Setup& s, cudnnHandle_t dnn, int algo) {
    s_ = s;
    dnn_ = dnn;
    if (!dyd_) {
      SP_CUDNN(cudnnCreateTensorDescriptor(&dyd_));
      SP_CUDNN(cudnnCreateTensorDescriptor(&dxd_));
      SP_CUDNN(cudnnCreateFilterDescriptor(&wd_));
      SP_CUDNN(cudnnCreateConvolutionDescriptor(&cd_));
    }
    const cudnnDataType_t t = DnnType(s.type);
    SP_RETURN_IF_ERROR(SetTensor(dyd_, t, s.dy));
    SP_RETURN_IF_ERROR(SetTensor(dxd_, t, s.dx));
    auto wdims = Ints(s.w);
    SP_CUDNN(cudnnSetFilterNdDescriptor(wd_, t, CUDNN_TENSOR_NCHW, static_cast<int>(wdims.size()), wdims.data()));
    auto pads = Ints(s.pads), strides = Ints(s.strides), dil = Ints(s.dilations);
    // Half/bf16 accumulate in float; f32 stays exact f32 unless TF32 was allowed.
    SP_CUDNN(cudnnSetConvolutionNdDescriptor(cd_, static_cast<int>(pads.size()), pads.data(), strides.data(),
                                             dil.data(), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    SP_CUDNN(cudnnSetConvolutionGroupCount(cd_, static_cast<int>(s.groups)));
    const bool tensor_ops = s.type != FloatType::kF32 || s.tf32;
    SP_CUDNN(cudnnSetConvolutionMathType(cd_, tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    // The heuristic's list (no timing here: the builder times Candidates()), keeping the
    // algorithms cuDNN will actually run for these descriptors.
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int found = 0;
    SP_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn, wd_, dyd_, cd_, dxd_,
                                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf));
    candidates_.clear();
    for (int i = 0; i < found; ++i) {
      size_t ws = 0;
      if (perf[i].status == CUDNN_STATUS_SUCCESS && WorkspaceFor(static_cast<int>(perf[i].algo), &ws))
        candidates_.push_back(static_cast<int>(perf[i].algo));
    }
    if (candidates_.empty()) return Unsupported("cuDNN has no backward-data algorithm for this geometry");
    if (algo < 0 || !Select(algo).ok()) SP_RETURN_IF_ERROR(Select(candidates_[0]));
    return Status::Ok();
  }

  size_t workspace() const override { return s_.crop_bytes + dnn_ws_; }
  std::vector<int> Candidates() const override { return candidates_; }
  Status Select(int algo) override {
    size_t ws = 0;
    if (!WorkspaceFor(algo, &ws)) return Unsupported("cuDNN backward-data algorithm ", algo, " does not apply here");
    algo_ = static_cast<cudnnConvolutionBwdDataAlgo_t>(algo);
    dnn_ws_ = ws;
    return Status::Ok();
  }
  int selected() const override { return static_cast<int>(algo_); }

  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    char* ws = static_cast<char*>(env.workspace);
    void* dx = s_.crop ? ws : out[0];
    const size_t dnn_bytes = env.workspace_bytes > s_.crop_bytes ? env.workspace_bytes - s_.crop_bytes : 0;
    const float one = 1.f, zero = 0.f;
    SP_CUDNN(cudnnSetStream(env.dnn, env.stream));
    SP_CUDNN(cudnnConvolutionBackwardData(env.dnn, &one, wd_, in[1], dyd_, in[0], cd_, algo_,
                                          s_.crop ? ws + s_.crop_bytes : ws, dnn_bytes, &zero, dxd_, dx));
    if (s_.crop) {
      if (s_.zero_fill) SP_CUDA(cudaMemsetAsync(out[0], 0, s_.y_bytes, env.stream));
      if (s_.copy)
        SP_CUDA(LaunchStridedCopy(s_.elem, ws + s_.src_off * static_cast<int64_t>(s_.elem),
                                  static_cast<char*>(out[0]) + s_.dst_off * static_cast<int64_t>(s_.elem), *s_.copy,
                                  env.stream));
    }
    if (s_.bias && in.size() > 2 && in[2])
      SP_CUDA(LaunchBinary(BinaryOp::kAdd, s_.type, out[0], in[2], out[0], *s_.bias, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "cudnn deconv"; }

 private:
  bool WorkspaceFor(int algo, size_t* ws) const {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(dnn_, wd_, dyd_, cd_, dxd_,
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                                        ws) == CUDNN_STATUS_SUCCESS;
  }

  Setup s_;
  cudnnHandle_t dnn_ = nullptr;
  cudnnTensorDescriptor_t dyd_ = nullptr, dxd_ = nullptr;
  cudnnFilterDescriptor_t wd_ = nullptr;
  cudnnConvolutionDescriptor_t cd_ = nullptr;
  cudnnConvolutionBwdDataAlgo_t algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  size_t dnn_ws_ = 0;
  std::vector<int> candidates_;
};

// An empty output: nothing to compute.
class EmptyKernel : public NodeKernel {
 public:
  Status Run(const RunEnv&, const std::vector<const void*>&, const std::vector<void*>&) override {
    return Status::Ok();
  }
  const char* family() const override { return "cudnn deconv"; }
};

bool FitsCudnn(const Shape& s) {
  return NumElements(s) < (int64_t{1} << 31);
}

}  // namespace

Result<KernelChoice> MakeConvTranspose(const KernelRequest& r) {
  const ir::Node& node = r.node;
  const std::vector<KernelInput>& in = r.in;
  if (in.size() < 2 || !in[0].present || !in[1].present || r.out.empty())
    return Unsupported(node.Label(), ": ConvTranspose needs X and W");
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  const bool has_bias = in.size() > 2 && in[2].present;
  if (in[1].dtype != in[0].dtype || (has_bias && in[2].dtype != in[0].dtype) || r.out[0].dtype != in[0].dtype)
    return Unsupported(node.Label(), ": mixed types");
  if (r.opt.input_nhwc(0) || r.opt.out_nhwc) return Unsupported(node.Label(), ": layout (channels-last storage)");
  const Shape& xs = in[0].shape;
  const Shape& ws = in[1].shape;
  const Shape& ys = r.out[0].shape;
  if (xs.size() < 3 || xs.size() > 5) return Unsupported(node.Label(), ": rank ", xs.size(), " (1-D to 3-D only)");
  if (ws.size() != xs.size() || ys.size() != xs.size()) return Unsupported(node.Label(), ": W/Y rank");
  DeconvAttrs a;
  a.a.kernel.assign(ws.begin() + 2, ws.end());
  SP_RETURN_IF_ERROR(ReadAttrs(node, &a));
  const size_t nsp = xs.size() - 2;
  const int64_t C = xs[1], M = ws[1] * a.group;
  if (ws[0] != C || C % a.group != 0) return Unsupported(node.Label(), ": W does not match X's channels and group");
  Shape want = {xs[0], M};
  for (size_t i = 0; i < nsp; ++i) {
    int64_t pb = 0;
    want.push_back(OutDim(a, i, xs[2 + i], &pb));
  }
  if (want != ys)
    return Unsupported(node.Label(), ": output shape ", ShapeToString(ys), " differs from the computed ",
                       ShapeToString(want));
  if (has_bias && NumElements(in[2].shape) != M)
    return Unsupported(node.Label(), ": bias is not one value per channel");
  if (NumElements(ys) == 0) return KernelChoice{false, std::make_unique<EmptyKernel>()};
  if (NumElements(xs) == 0 || NumElements(ws) == 0)
    return Unsupported(node.Label(), ": empty input with a non-empty output");

  Setup s;
  s.type = t;
  s.tf32 = r.opt.tf32;
  s.elem = DTypeSize(in[0].dtype);
  s.groups = a.group;
  s.dy = xs;
  s.w = ws;
  s.strides = a.a.strides;
  s.dilations = a.a.dilations;
  s.y_bytes = static_cast<size_t>(NumElements(ys)) * s.elem;
  if (has_bias) {
    std::vector<int64_t> bs(ys.size(), 0);
    bs[1] = 1;
    SP_ASSIGN_OR_RETURN(StridedShape b, MakeStrided(ys, {Packed(ys), bs}));
    s.bias = b;
  }
  SP_RETURN_IF_ERROR(PlanGeometry(a, xs, ys, false, &s));
  // cuDNN takes int dims and strides, and needs 2-D at least: 1-D runs with H = 1.
  auto to_cudnn = [&](Setup* g) -> Status {
    if (!FitsCudnn(g->dy) || !FitsCudnn(g->dx) || !FitsCudnn(g->w))
      return Unsupported(node.Label(), ": tensors of 2^31 elements or more");
    if (nsp == 1) {
      g->dy.insert(g->dy.begin() + 2, 1);
      g->w.insert(g->w.begin() + 2, 1);
      g->dx.insert(g->dx.begin() + 2, 1);
      g->pads.insert(g->pads.begin(), 0);
      g->strides.insert(g->strides.begin(), 1);
      g->dilations.insert(g->dilations.begin(), 1);
    }
    return Status::Ok();
  };
  Setup full = s;
  SP_RETURN_IF_ERROR(PlanGeometry(a, xs, ys, true, &full));
  SP_RETURN_IF_ERROR(to_cudnn(&s));
  SP_RETURN_IF_ERROR(to_cudnn(&full));
  if (r.opt.check_only) return KernelChoice{false, nullptr};

  auto k = std::make_unique<DeconvKernel>();
  const int algo = r.opt.algo;
  Status st = k->Init(s, r.env.dnn, algo);
  if (!st.ok() && (s.pads != full.pads || s.dx != full.dx)) {
    // Pads cuDNN turns down (large ones, say): the unpadded geometry and a crop instead.
    st = k->Init(full, r.env.dnn, algo);
  }
  if (!st.ok()) return Unsupported(node.Label(), ": cuDNN backward data: ", st.message());
  return KernelChoice{false, std::move(k)};
}

}  // namespace sampan::cuda
