#include "backends/cuda/conv_kernel.h"

#include <optional>

#include "backends/cuda/conv.h"
#include "backends/cuda/conv_graph.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/depthwise.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/pad_channels.h"
#include "backends/cuda/strided_copy.h"
#include "ops/conv_util.h"

namespace sampan::cuda {
namespace {

class ConvKernel : public NodeKernel {
 public:
  Status Init(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
              const KernelOptions& opt, const RunEnv& env) {
    SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
    const Shape& x = in[0].shape;
    const Shape& w = in[1].shape;
    if (x.size() < 3 || x.size() > 5) return Unsupported(node.Label(), ": conv rank");
    ops::SpatialAttrs a;
    a.kernel = node.attr_ints("kernel_shape");
    if (a.kernel.empty()) a.kernel.assign(w.begin() + 2, w.end());
    SP_RETURN_IF_ERROR(ops::ReadSpatialAttrs(node, &a, false));
    const ops::SpatialGeometry g = ops::ComputeGeometry(a, x);
    ConvShape s;
    s.type = t;
    type_ = t;
    s.tf32 = opt.tf32;
    s.groups = node.attr_int("group", 1);
    // Asymmetric pads (TF-style SAME): cuDNN takes one pad per dim, so the input is
    // copied into a zeroed buffer with its padding and convolved without any.
    bool asymmetric = false;
    for (size_t i = 0; i < a.rank(); ++i) asymmetric = asymmetric || g.pad_begin[i] != g.pad_end[i];
    Shape xs = x;  // the input as cuDNN sees it
    for (size_t i = 0; i < a.rank(); ++i) {
      if (asymmetric) xs[2 + i] += g.pad_begin[i] + g.pad_end[i];
      s.pads.push_back(asymmetric ? 0 : g.pad_begin[i]);
    }
    s.strides = a.strides;
    s.dilations = a.dilations;
    s.x = xs;
    s.w = w;
    s.y = out.shape;
    if (x.size() == 3) {  // 1-D as 2-D with H = 1
      s.x.insert(s.x.begin() + 2, 1);
      s.w.insert(s.w.begin() + 2, 1);
      s.y.insert(s.y.begin() + 2, 1);
      s.pads.insert(s.pads.begin(), 0);
      s.strides.insert(s.strides.begin(), 1);
      s.dilations.insert(s.dilations.begin(), 1);
    }
    s.has_bias = in.size() > 2 && in[2].present;
    if (in.size() > 3 && in[3].present) {
      if (in[3].shape != out.shape) return Unsupported(node.Label(), ": broadcast residual runs on the host");
      s.has_z = true;
    }
    SP_RETURN_IF_ERROR(ActivationOf(node, &s.act, &s.act_p0, &s.act_p1));
    // Channels-last: the output's layout decides; inputs stored the other way are
    // converted in the workspace (only at the edges of an NHWC region).
    if (opt.out_nhwc && x.size() != 4) return Unsupported(node.Label(), ": channels-last output of rank ", x.size());
    if (opt.input_nhwc(1))
      return Unsupported(node.Label(), ": filters computed on the device in channels-last storage");
    s.nhwc = opt.out_nhwc;
    elem_ = DTypeSize(in[0].dtype);
    const bool w_known = in[1].host && in[1].host->nbytes() == static_cast<size_t>(NumElements(w)) * elem_;
    // (Zero-padding a first layer's 3 channels to 8 is offered below as separate tactics,
    // graph-API only: under cuDNN's legacy API it made ResNet-50's conv1 slower on the H200.)
    if (opt.input_nhwc(0) != s.nhwc || asymmetric) {
      // One strided copy converts the layout and places x inside its padding.
      const auto dst = StorageStrides(xs, s.nhwc);
      x_offset_ = 0;
      for (size_t i = 0; asymmetric && i < a.rank(); ++i) x_offset_ += g.pad_begin[i] * dst[2 + i];
      SP_ASSIGN_OR_RETURN(StridedShape xc, MakeStridedFor(x, s.nhwc, {StorageStrides(x, opt.input_nhwc(0)), dst}));
      x_copy_ = xc;
      x_zero_ = asymmetric;
      x_bytes_ = Aligned(static_cast<size_t>(NumElements(xs)) * elem_);
    }
    if (s.has_z && opt.input_nhwc(3) != s.nhwc) {
      SP_ASSIGN_OR_RETURN(StridedShape zc, LayoutCopy(out.shape, s.nhwc));
      z_copy_ = zc;
      z_bytes_ = Aligned(static_cast<size_t>(NumElements(out.shape)) * elem_);
    }
    // Depthwise (group == input channels, constant filters): our kernel is offered as a
    // tactic next to cuDNN's (it reads x through its strides: no layout or padding copy).
    if (s.groups > 1 && s.groups == x[1] && w[1] == 1 && w[0] % x[1] == 0 && w_known &&
        (x.size() == 4 || x.size() == 3)) {
      const bool one_d = x.size() == 3;
      const auto xs = StorageStrides(x, opt.input_nhwc(0));
      DepthwiseShape d{};
      d.n = x[0];
      d.c = x[1];
      d.h = one_d ? 1 : x[2];
      d.w = x.back();
      d.k = w[0];
      d.oh = one_d ? 1 : out.shape[2];
      d.ow = out.shape.back();
      d.r = one_d ? 1 : w[2];
      d.s = w.back();
      d.stride_h = one_d ? 1 : a.strides[0];
      d.stride_w = a.strides.back();
      d.pad_h = one_d ? 0 : g.pad_begin[0];
      d.pad_w = g.pad_begin.back();
      d.dil_h = one_d ? 1 : a.dilations[0];
      d.dil_w = a.dilations.back();
      d.xs[0] = xs[0];
      d.xs[1] = xs[1];
      d.xs[2] = one_d ? 0 : xs[2];
      d.xs[3] = xs.back();
      d.out_nhwc = s.nhwc;
      d.act = s.act;
      d.p0 = s.act_p0;
      d.p1 = s.act_p1;
      if (DepthwiseFits(d)) dw_ = d;
    }
    PlanGemm(s, x, a.kernel.size() == 1 ? Shape{1, a.kernel[0]} : Shape{a.kernel[0], a.kernel[1]}, asymmetric, opt, t);
    PlanSpaceToDepth(s, x, w, g.pad_begin, w_known, opt);
    if (opt.check_only) return Status::Ok();  // capability query: no device work
    if (dw_) {
      // Filters as [R*S, K]: the K filters of one tap side by side.
      const Tensor& wt = *in[1].host;
      const int64_t K = w[0], RS = dw_->r * dw_->s;
      std::vector<char> host(wt.nbytes());
      const char* src = static_cast<const char*>(wt.raw());
      for (int64_t k = 0; k < K; ++k)
        for (int64_t t = 0; t < RS; ++t)
          std::memcpy(&host[static_cast<size_t>(t * K + k) * elem_], src + static_cast<size_t>(k * RS + t) * elem_,
                      elem_);
      SP_CUDA(cudaMalloc(&w_dw_, std::max<size_t>(host.size(), 1)));
      device_bytes_ += std::max<size_t>(host.size(), 1);
      SP_CUDA(cudaMemcpy(w_dw_, host.data(), host.size(), cudaMemcpyHostToDevice));
    }
    if (s.nhwc) {
      // Filters as [K, R, S, C]: transposed once here when the weights are constant,
      // else on every run into the workspace.
      if (w_known) {
        const Tensor& wt = *in[1].host;
        const int64_t K = w[0], C = w[1], R = w[2], S = w[3];
        std::vector<char> host(wt.nbytes());
        const char* src = static_cast<const char*>(wt.raw());
        for (int64_t k = 0; k < K; ++k)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t q = 0; q < S; ++q)
                std::memcpy(&host[static_cast<size_t>(((k * R + r) * S + q) * C + c) * elem_],
                            src + static_cast<size_t>(((k * C + c) * R + r) * S + q) * elem_, elem_);
        SP_CUDA(cudaMalloc(&w_nhwc_, std::max<size_t>(host.size(), 1)));
        device_bytes_ += std::max<size_t>(host.size(), 1);
        SP_CUDA(cudaMemcpy(w_nhwc_, host.data(), host.size(), cudaMemcpyHostToDevice));
        if (C < kPadC && !asymmetric && ConvGraph::Eligible(s)) {
          // The same filters with channels zero-padded to kPadC, for the padded tactics.
          std::vector<char> padded(static_cast<size_t>(K * R * S * kPadC) * elem_, 0);
          for (int64_t krs = 0; krs < K * R * S; ++krs)
            std::memcpy(&padded[static_cast<size_t>(krs * kPadC) * elem_], &host[static_cast<size_t>(krs * C) * elem_],
                        static_cast<size_t>(C) * elem_);
          SP_CUDA(cudaMalloc(&w_padded_, padded.size()));
          device_bytes_ += padded.size();
          SP_CUDA(cudaMemcpy(w_padded_, padded.data(), padded.size(), cudaMemcpyHostToDevice));
        }
      } else {
        SP_ASSIGN_OR_RETURN(StridedShape wc, LayoutCopy(w, true));
        w_copy_ = wc;
        w_bytes_ = Aligned(static_cast<size_t>(NumElements(w)) * elem_);
      }
    }
    env_dnn_ = env.dnn;
    // Tactics: legacy algorithms are 0..7, cuDNN graph-API configurations 1000 + their
    // position in the graph heuristic's list (conv_graph.h), and for a channel count
    // below 8, 2000 + the position in the list for the input zero-padded to 8 channels;
    // 3000 our depthwise kernel, 4000 + i cuBLASLt's i-th algorithm for the product form.
    const int algo = opt.algo;
    SP_RETURN_IF_ERROR(conv_.Prepare(env.dnn, s, algo >= kGraphBase ? -1 : algo));

    if (s2d_) SP_RETURN_IF_ERROR(PrepareSpaceToDepth(env, in[1]));
    if (cg_) {
      auto gm = std::make_unique<Gemm>();
      if (gm->Prepare(env.lt, cg_->shape, kGemmWorkspace).ok()) gemm_ = std::move(gm);
    }
    if (ConvGraph::Eligible(s)) {
      auto g = std::make_unique<ConvGraph>();
      if (g->Build(env.dnn, s).ok()) graph_ = std::move(g);
    }
    if (w_padded_) {
      ConvShape sp = s;
      sp.x[1] = kPadC;
      sp.w[1] = kPadC;
      auto g = std::make_unique<ConvGraph>();
      if (g->Build(env.dnn, sp).ok()) {
        padded_ = std::move(g);
        // The source as read by the padding copy: NHWC, or NCHW converted on the way.
        const int64_t N = x[0], C = x[1], H = x[2], W = x[3];
        pad_ = opt.input_nhwc(0) ? PadChannelsShape{N, C, H, W, H * W * C, 1, W * C, C, kPadC}
                                 : PadChannelsShape{N, C, H, W, C * H * W, H * W, W, 1, kPadC};
        pad_bytes_ = Aligned(static_cast<size_t>(N * H * W * kPadC) * elem_);
      }
    }
    // A recorded configuration, or (no tactic: a shape the builder did not time) the
    // first unpadded graph configuration the heuristic offers that finalizes.
    if (algo >= kS2dBase && s2d_graph_) {
      if (s2d_graph_->Select(algo - kS2dBase).ok()) mode_ = Mode::kS2d;
    } else if (algo >= kGemmBase && algo < kS2dBase && gemm_ && algo - kGemmBase < gemm_->num_algos()) {
      gemm_->select(algo - kGemmBase);
      mode_ = Mode::kGemm;
    } else if (algo >= kPaddedBase && algo < kDepthwise && padded_) {
      if (padded_->Select(algo - kPaddedBase).ok()) mode_ = Mode::kPadded;
    } else if (algo >= kGraphBase && algo < kPaddedBase && graph_) {
      if (graph_->Select(algo - kGraphBase).ok()) mode_ = Mode::kGraph;
    } else if (algo < 0 && graph_) {
      for (int c : graph_->candidates())
        if (graph_->Select(c).ok()) {
          mode_ = Mode::kGraph;
          break;
        }
    }
    // cuDNN's fused call needs a bias; a convolution without one gets zeros.
    if (!s.has_bias) {
      SP_CUDA(cudaMalloc(&zero_bias_, static_cast<size_t>(s.y[1]) * 4));
      device_bytes_ += static_cast<size_t>(s.y[1]) * 4;
      SP_CUDA(cudaMemset(zero_bias_, 0, static_cast<size_t>(s.y[1]) * 4));
    }
    // Depthwise: the recorded tactic, or (no tactic) the default, since cuDNN's
    // depthwise algorithms are rarely close to it.
    if (dw_ && (algo == kDepthwise || algo < 0)) mode_ = Mode::kDepthwise;
    return Status::Ok();
  }
  ~ConvKernel() override {
    if (zero_bias_) cudaFree(zero_bias_);
    if (w_nhwc_) cudaFree(w_nhwc_);
    if (w_padded_) cudaFree(w_padded_);
    if (w_dw_) cudaFree(w_dw_);
    if (w_s2d_) cudaFree(w_s2d_);
  }
  size_t device_bytes() const override { return device_bytes_; }
  size_t workspace() const override {
    switch (mode_) {
      case Mode::kGraph:
        return x_bytes_ + z_bytes_ + w_bytes_ + graph_->workspace_needed();
      case Mode::kPadded:
        return pad_bytes_ + z_bytes_ + padded_->workspace_needed();
      case Mode::kDepthwise:
        return z_bytes_;
      case Mode::kGemm:
        return cg_->col_bytes + z_bytes_ + gemm_->workspace_needed();
      case Mode::kS2d:
        return s2d_bytes_ + z_bytes_ + s2d_graph_->workspace_needed();
      case Mode::kLegacy:
        break;
    }
    return x_bytes_ + z_bytes_ + w_bytes_ + conv_.workspace_needed();
  }
  std::vector<int> Candidates() const override {
    std::vector<int> c = conv_.candidates();
    if (graph_)
      for (int i : graph_->candidates()) c.push_back(kGraphBase + i);
    if (padded_)
      for (int i : padded_->candidates()) c.push_back(kPaddedBase + i);
    if (dw_) c.push_back(kDepthwise);
    for (int i = 0; gemm_ && i < gemm_->num_algos(); ++i) c.push_back(kGemmBase + i);
    if (s2d_graph_)
      for (int i : s2d_graph_->candidates()) c.push_back(kS2dBase + i);
    return c;
  }
  Status Select(int algo) override {
    if (algo == kDepthwise) {
      if (!dw_) return Unsupported("the depthwise kernel does not apply to this convolution");
      mode_ = Mode::kDepthwise;
      return Status::Ok();
    }
    if (algo >= kS2dBase) {
      if (!s2d_graph_) return Unsupported("no space-to-depth configurations for this convolution");
      SP_RETURN_IF_ERROR(s2d_graph_->Select(algo - kS2dBase));
      mode_ = Mode::kS2d;
      return Status::Ok();
    }
    if (algo >= kGemmBase) {
      if (!gemm_ || algo - kGemmBase >= gemm_->num_algos())
        return Unsupported("no cuBLASLt algorithm ", algo - kGemmBase, " for this convolution");
      gemm_->select(algo - kGemmBase);
      mode_ = Mode::kGemm;
      return Status::Ok();
    }
    if (algo >= kPaddedBase) {
      if (!padded_) return Unsupported("no channel-padded cuDNN graph configurations for this convolution");
      SP_RETURN_IF_ERROR(padded_->Select(algo - kPaddedBase));
      mode_ = Mode::kPadded;
      return Status::Ok();
    }
    if (algo >= kGraphBase) {
      if (!graph_) return Unsupported("no cuDNN graph configurations for this convolution");
      SP_RETURN_IF_ERROR(graph_->Select(algo - kGraphBase));
      mode_ = Mode::kGraph;
      return Status::Ok();
    }
    SP_RETURN_IF_ERROR(conv_.SetAlgo(env_dnn_, algo));
    mode_ = Mode::kLegacy;
    return Status::Ok();
  }
  int selected() const override {
    switch (mode_) {
      case Mode::kGraph:
        return kGraphBase + graph_->selected();
      case Mode::kPadded:
        return kPaddedBase + padded_->selected();
      case Mode::kDepthwise:
        return kDepthwise;
      case Mode::kGemm:
        return kGemmBase + gemm_->selected();
      case Mode::kS2d:
        return kS2dBase + s2d_graph_->selected();
      case Mode::kLegacy:
        break;
    }
    return conv_.algo();
  }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* bias = in.size() > 2 && in[2] ? in[2] : zero_bias_;
    const void* x = in[0];
    const void* w = w_nhwc_ ? w_nhwc_ : in[1];
    const void* z = in.size() > 3 ? in[3] : nullptr;
    char* ws = static_cast<char*>(env.workspace);
    if (mode_ == Mode::kDepthwise) {
      if (z_copy_ && z) {
        SP_CUDA(LaunchStridedCopy(elem_, z, ws, *z_copy_, env.stream));
        z = ws;
      }
      SP_CUDA(LaunchDepthwise(type_, *dw_, x, w_dw_, in.size() > 2 ? in[2] : nullptr, z, out[0], env.stream));
      return Status::Ok();
    }
    if (mode_ == Mode::kGemm) return RunGemm(env, in, out);
    if (mode_ == Mode::kS2d) {
      SP_CUDA(LaunchSpaceToDepth2(x, ws, *s2d_, env.stream));
      const void* xs = ws;
      ws += s2d_bytes_;
      if (z_copy_ && z) {
        SP_CUDA(LaunchStridedCopy(elem_, z, ws, *z_copy_, env.stream));
        z = ws;
        ws += z_bytes_;
      }
      const size_t used = static_cast<size_t>(ws - static_cast<char*>(env.workspace));
      return s2d_graph_->Run(env.dnn, xs, w_s2d_, bias, z, out[0], ws, env.workspace_bytes - used, env.stream);
    }
    // The input: zero-padded to kPadC channels (padded tactics), or converted to this
    // convolution's layout when stored the other way.
    if (mode_ == Mode::kPadded) {
      SP_CUDA(LaunchPadChannels2(x, ws, pad_, env.stream));
      x = ws;
      ws += pad_bytes_;
      w = w_padded_;
    } else if (x_copy_) {
      if (x_zero_) SP_CUDA(cudaMemsetAsync(ws, 0, x_bytes_, env.stream));
      SP_CUDA(LaunchStridedCopy(elem_, x, ws + x_offset_ * static_cast<int64_t>(elem_), *x_copy_, env.stream));
      x = ws;
      ws += x_bytes_;
    }
    if (z_copy_ && z) {
      SP_CUDA(LaunchStridedCopy(elem_, z, ws, *z_copy_, env.stream));
      z = ws;
      ws += z_bytes_;
    }
    if (w_copy_ && mode_ != Mode::kPadded) {
      SP_CUDA(LaunchStridedCopy(elem_, w, ws, *w_copy_, env.stream));
      w = ws;
      ws += w_bytes_;
    }
    const size_t used = static_cast<size_t>(ws - static_cast<char*>(env.workspace));
    if (mode_ == Mode::kPadded)
      return padded_->Run(env.dnn, x, w, bias, z, out[0], ws, env.workspace_bytes - used, env.stream);
    if (mode_ == Mode::kGraph)
      return graph_->Run(env.dnn, x, w, bias, z, out[0], ws, env.workspace_bytes - used, env.stream);
    return conv_.Run(env.dnn, x, w, bias, z, out[0], ws, env.workspace_bytes - used, env.stream);
  }
  const char* family() const override {
    switch (mode_) {
      case Mode::kGraph:
        return "cudnn graph conv";
      case Mode::kPadded:
        return "cudnn graph conv padded";
      case Mode::kDepthwise:
        return "depthwise conv";
      case Mode::kGemm:
        return "cublaslt conv";
      case Mode::kS2d:
        return "cudnn graph conv s2d";
      case Mode::kLegacy:
        break;
    }
    return "cudnn conv";
  }

 private:
  //! A convolution as one cuBLASLt product (see PlanGemm).
  struct ConvGemm {
    GemmShape shape;
    bool nhwc = true;                 //!< y[N*P, K'] = patches . W^T; else y_n[K', P] = W . patches_n^T
    std::optional<StridedShape> col;  //!< the patch gather into the workspace; none: x is read as is
    size_t col_bytes = 0;
    std::optional<StridedShape> bias_fill;  //!< channels-first bias: broadcast into y first, then C = y
    UnaryOp post = UnaryOp::kIdentity;      //!< activation cuBLASLt's epilogue does not run
    float p0 = 0, p1 = 0;
    int64_t out_n = 0;
  };

  // Unpadded convolutions whose windows do not overlap (kernel <= stride on each axis,
  // no dilation, one group) are one matrix product over the gathered patches, offered as
  // tactics next to cuDNN's: ViT's 16x16/16 patch embedding, 1x1 layers (read as they are
  // when x is stored in the output's layout), strided 1x1 shortcuts. Channels-last: y[N*P, K']
  // = patches[N*P, C*R*S] . W^T with the bias and the residual (as C) in cuBLASLt's epilogue.
  // Channels-first: y_n[K', P] = W . patches_n^T per image; the bias is per row there, which
  // cuBLASLt's epilogue does not add, so it is broadcast into y and read back as C (not
  // offered with a residual as well).
  void PlanGemm(const ConvShape& s, const Shape& x, const Shape& kernel, bool asymmetric, const KernelOptions& opt,
                FloatType t) {
    if (s.groups != 1 || asymmetric || s.x.size() != 4) return;
    const int64_t N = s.x[0], C = s.x[1], H = s.x[2], W = s.x[3], K = s.y[1], Ho = s.y[2], Wo = s.y[3];
    const int64_t R = kernel[0], S = kernel[1], sh = s.strides[0], sw = s.strides[1];
    for (size_t i = 0; i < 2; ++i)
      if (s.pads[i] != 0 || s.dilations[i] != 1) return;
    if (R > sh || S > sw || (Ho - 1) * sh + R > H || (Wo - 1) * sw + S > W) return;
    if (!s.nhwc && s.has_bias && s.has_z) return;
    ConvGemm cg;
    cg.nhwc = s.nhwc;
    const int64_t P = Ho * Wo, KC = C * R * S;
    const bool x_nhwc = opt.input_nhwc(0);
    const bool direct = R == 1 && S == 1 && sh == 1 && sw == 1 && x_nhwc == s.nhwc;
    if (!direct) {
      std::vector<int64_t> xst = StorageStrides(x, x_nhwc);
      if (x.size() == 3) xst.insert(xst.begin() + 2, 0);  // 1-D: H = 1
      const Shape dims{N, Ho, Wo, C, R, S};
      auto col = MakeStrided(dims, {{xst[0], xst[2] * sh, xst[3] * sw, xst[1], xst[2], xst[3]}, Packed(dims)});
      if (!col.ok()) return;
      cg.col = *col;
      cg.col_bytes = Aligned(static_cast<size_t>(N * P * KC) * elem_);
    }
    GemmShape& g = cg.shape;
    g.type = t;
    g.tf32 = s.tf32;
    g.k = KC;
    if (s.nhwc) {
      g.m = N * P;
      g.n = K;
      g.trans_b = true;  // the filters [K', C*R*S] as they are stored
      g.has_bias = s.has_bias;
      g.has_c = s.has_z;
    } else {
      g.batch = N;
      g.m = K;
      g.n = P;
      g.stride_a = 0;  // the same filters for every image
      g.trans_b = !direct;
      g.stride_b = direct ? C * H * W : P * KC;
      g.stride_c = g.stride_d = K * P;
      g.has_c = s.has_z || s.has_bias;
      if (s.has_bias) {
        const Shape dims{N, K, P};
        auto fill = MakeStrided(dims, {{0, 1, 0}, Packed(dims)});
        if (!fill.ok()) return;
        cg.bias_fill = *fill;
      }
    }
    g.beta = 1.f;
    SplitEpilogue(s.act, t, &g.epilogue, &cg.post);
    cg.p0 = s.act_p0;
    cg.p1 = s.act_p1;
    cg.out_n = N * K * P;
    cg_ = cg;
  }

  // Stride-2 convolutions of few input channels (RGB stems: ResNet's 7x7, GoogLeNet's,
  // DenseNet's) as a stride-1 convolution over the input folded 2x2 into channels
  // (pad_channels.h's space-to-depth, which also pads 4C to a multiple of 8 and converts
  // the layout): tensor cores get 16 channels instead of 3, the MLPerf ResNet-50 trick.
  // cuDNN graph configurations of the folded convolution are offered as tactics 5000+i.
  void PlanSpaceToDepth(const ConvShape& s, const Shape& x, const Shape& w, const std::vector<int64_t>& pad_begin,
                        bool w_known, const KernelOptions& opt) {
    if (!s.nhwc || elem_ != 2 || s.groups != 1 || x.size() != 4 || !w_known) return;
    if (s.strides[0] != 2 || s.strides[1] != 2 || s.dilations[0] != 1 || s.dilations[1] != 1) return;
    const int64_t C = x[1], R = w[2], S = w[3];
    if (C > 4 || (R < 2 && S < 2)) return;
    const int64_t R2 = (R + 1) / 2, S2 = (S + 1) / 2, Ho = s.y[2], Wo = s.y[3];
    const std::vector<int64_t> xst = StorageStrides(x, opt.input_nhwc(0));
    SpaceToDepthShape d{x[0],
                        C,
                        x[2],
                        x[3],
                        xst[0],
                        xst[1],
                        xst[2],
                        xst[3],
                        pad_begin[0],
                        pad_begin[1],
                        Ho + R2 - 1,
                        Wo + S2 - 1,
                        (4 * C + 7) / 8 * 8};
    ConvShape ss = s;
    ss.x = {x[0], d.cp, d.hs, d.ws};
    ss.w = {w[0], d.cp, R2, S2};
    ss.pads = {0, 0};
    ss.strides = {1, 1};
    ss.dilations = {1, 1};
    if (!ConvGraph::Eligible(ss)) return;
    s2d_ = d;
    s2d_shape_ = ss;
    s2d_bytes_ = Aligned(static_cast<size_t>(d.n * d.hs * d.ws * d.cp) * elem_);
  }

  // Folds the constant filters like the input and builds the folded convolution's graph.
  Status PrepareSpaceToDepth(const RunEnv& env, const KernelInput& win) {
    const Tensor& wt = *win.host;
    const int64_t K = wt.dim(0), C = wt.dim(1), R = wt.dim(2), S = wt.dim(3);
    const int64_t R2 = s2d_shape_.w[2], S2 = s2d_shape_.w[3], cp = s2d_->cp;
    std::vector<uint16_t> host(static_cast<size_t>(K * R2 * S2 * cp), 0);
    const uint16_t* src = static_cast<const uint16_t*>(wt.raw());
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t q = 0; q < S; ++q) {
            const int64_t ch = (c * 2 + r % 2) * 2 + q % 2;
            host[static_cast<size_t>(((k * R2 + r / 2) * S2 + q / 2) * cp + ch)] = src[((k * C + c) * R + r) * S + q];
          }
    auto g = std::make_unique<ConvGraph>();
    if (!g->Build(env.dnn, s2d_shape_).ok()) {  // no engine for the folded form: the tactic is not offered
      s2d_.reset();
      return Status::Ok();
    }
    SP_CUDA(cudaMalloc(&w_s2d_, host.size() * sizeof(uint16_t)));
    device_bytes_ += host.size() * sizeof(uint16_t);
    SP_CUDA(cudaMemcpy(w_s2d_, host.data(), host.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
    s2d_graph_ = std::move(g);
    return Status::Ok();
  }

  Status RunGemm(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) {
    const ConvGemm& cg = *cg_;
    char* ws = static_cast<char*>(env.workspace);
    const void* patches = in[0];
    if (cg.col) {
      SP_CUDA(LaunchStridedCopy(elem_, in[0], ws, *cg.col, env.stream));
      patches = ws;
      ws += cg.col_bytes;
    }
    const void* c = in.size() > 3 ? in[3] : nullptr;
    if (z_copy_ && c) {
      SP_CUDA(LaunchStridedCopy(elem_, c, ws, *z_copy_, env.stream));
      c = ws;
      ws += z_bytes_;
    }
    const void* bias = in.size() > 2 ? in[2] : nullptr;
    if (cg.bias_fill) {
      SP_CUDA(LaunchStridedCopy(elem_, bias, out[0], *cg.bias_fill, env.stream));
      c = out[0];
    }
    const size_t left = env.workspace_bytes - static_cast<size_t>(ws - static_cast<char*>(env.workspace));
    if (cg.nhwc)
      SP_RETURN_IF_ERROR(gemm_->Run(env.lt, patches, in[1], c, bias, out[0], ws, left, env.stream));
    else
      SP_RETURN_IF_ERROR(gemm_->Run(env.lt, in[1], patches, c, nullptr, out[0], ws, left, env.stream));
    if (cg.post != UnaryOp::kIdentity)
      SP_CUDA(LaunchUnary(cg.post, type_, out[0], out[0], cg.out_n, cg.p0, cg.p1, env.stream));
    return Status::Ok();
  }

  static constexpr int kGraphBase = 1000, kPaddedBase = 2000, kDepthwise = 3000, kGemmBase = 4000, kS2dBase = 5000;
  static constexpr int64_t kPadC = 8;
  enum class Mode { kLegacy, kGraph, kPadded, kDepthwise, kGemm, kS2d };
  Conv conv_;
  std::unique_ptr<ConvGraph> graph_, padded_;
  Mode mode_ = Mode::kLegacy;
  void* w_padded_ = nullptr;              //!< [K, R, S, kPadC] filters, zero channels past C
  std::optional<DepthwiseShape> dw_;      //!< set when the depthwise kernel applies
  std::optional<ConvGemm> cg_;            //!< set when the convolution is one matrix product
  std::unique_ptr<Gemm> gemm_;            //!< its prepared cuBLASLt product (not in a capability query)
  std::optional<SpaceToDepthShape> s2d_;  //!< set when the space-to-depth form applies
  ConvShape s2d_shape_;                   //!< the stride-1 convolution over the folded input
  std::unique_ptr<ConvGraph> s2d_graph_;  //!< its cuDNN graph (not in a capability query)
  void* w_s2d_ = nullptr;                 //!< its filters, [K, ceil(R/2), ceil(S/2), cp]
  size_t s2d_bytes_ = 0;
  void* w_dw_ = nullptr;  //!< depthwise filters as [R*S, K]
  FloatType type_ = FloatType::kF32;
  PadChannelsShape pad_{};
  size_t pad_bytes_ = 0;
  size_t elem_ = 4;
  std::optional<StridedShape> x_copy_, z_copy_, w_copy_;
  int64_t x_offset_ = 0;  //!< elements from the copy buffer's start to x's first (its padding)
  bool x_zero_ = false;   //!< the copy buffer holds padding: zero it first
  size_t x_bytes_ = 0, z_bytes_ = 0, w_bytes_ = 0;
  void* w_nhwc_ = nullptr;  //!< filters as [K, R, S, C] (constant weights, channels-last)
  cudnnHandle_t env_dnn_ = nullptr;
  void* zero_bias_ = nullptr;
  size_t device_bytes_ = 0;  //!< what the buffers above hold
};

}  // namespace

Result<KernelChoice> MakeConv(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                              const KernelOptions& opt, const RunEnv& env) {
  auto k = std::make_unique<ConvKernel>();
  SP_RETURN_IF_ERROR(k->Init(node, in, out, opt, env));
  if (opt.check_only) return KernelChoice{};
  return KernelChoice{false, std::move(k)};
}

}  // namespace sampan::cuda
