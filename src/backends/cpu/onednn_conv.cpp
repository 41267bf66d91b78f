// Conv, sampan::FusedConv and ConvTranspose on oneDNN primitives.
// The primitive chooses its source/destination formats (format_tag::any:
// nChw8c on AVX2, nChw16c on AVX-512...), so chains of convolutions stay in the
// blocked format; weights are reordered into the primitive's format once per
// engine. FusedConv's epilogue becomes post-ops: sum (residual Z: the output
// takes over Z's buffer when this is Z's last reader, else Z is copied into the
// destination first) then the activation. 3x3 stride-1 convolutions may run on
// our Winograd kernel instead, when it times faster (conv_winograd.cpp).
#include <set>

#include "backends/cpu/kernels.h"
#include "backends/cpu/winograd.h"
#include "ops/conv_util.h"
#include "ops/fused.h"

namespace sampan::cpu {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

bool AcceptsConv(const ir::Node& node) {
  const bool fused = node.domain == ops::kSampanDomain && node.op_type == "FusedConv";
  if (!fused && !(node.domain.empty() && node.op_type == "Conv")) return false;
  if (!AllFloat32(node)) return false;
  if (node.input(1) == nullptr || !node.input(1)->is_constant()) return false;
  if (node.input(2) && !node.input(2)->is_constant()) return false;
  return !fused || FusedActivationOf(node).ok();
}

dims ToDims(const Shape& s) {
  return dims(s.begin(), s.end());
}

Status BuildConv(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const bool fused = node.op_type == "FusedConv";
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.input(1);
  const ir::Value* bias = node.input(2);
  const ir::Value* z = fused ? node.input(3) : nullptr;
  const ir::Value* y = node.output(0);
  const ValueState& xs = b.state(x);
  const ValueState& ws = b.state(w);
  const Shape out = b.state(y).shape;
  if (ws.known == nullptr) return Unsupported("conv weights not constant");
  if (bias && b.state(bias).known == nullptr) return Unsupported("conv bias not constant");
  if (z && (b.state(z).shape != out || b.state(z).dtype != DType::kFloat32)) return Unsupported("residual shape");
  SP_ASSIGN_OR_RETURN(ConvGeometry geo, MakeConvGeometry(node, xs.shape, ws.shape, out));
  const ops::SpatialAttrs& a = geo.attrs;
  const int64_t group = geo.group;
  const dims& strides = geo.strides;
  const dims& dil = geo.dilations;
  const dims& pl = geo.pad_l;
  const dims& pr = geo.pad_r;
  const dims& wdims = geo.weights;
  const int64_t oc = ws.shape[0];
  ops::FusedActivation act;
  if (fused) {
    SP_ASSIGN_OR_RETURN(act, FusedActivationOf(node));
  }
  dnnl::post_ops po;
  if (z) po.append_sum(1.f);
  // y * output_scale + output_bias after the activation (fuse_conv_output_affine.h).
  const float out_scale = node.attr_float("output_scale", 1.f), out_bias = node.attr_float("output_bias", 0.f);
  const bool affine = fused && (out_scale != 1.f || out_bias != 0.f);
  if (affine && act.kind == ops::Activation::kHardSigmoid) {
    // s * clip(a x + b, 0, 1) + t = clip(s a x + s b + t, min(t, s + t), max(t, s + t)) for any s:
    // two post-ops. oneDNN 2.6 computes the chain linear, clip, linear wrongly (half the values
    // off: CpuConvOutputAffine.EveryActivationWithAnAffine).
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, out_scale * act.p0, out_scale * act.p1 + out_bias);
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, std::min(out_bias, out_scale + out_bias),
                      std::max(out_bias, out_scale + out_bias));
  } else {
    AppendActivation(po, act);
    if (affine) po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, out_scale, out_bias);
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // A BF16 layer (plan precision, on a CPU with AVX512-BF16/AMX) multiplies BF16 operands (its
  // input converted by the reorder Input() adds, unless it already is BF16; the weights once)
  // into an FP32 result, or a BF16 one when only BF16 convolutions read it (the middle of a
  // ResNet bottleneck), so the next one needs no conversion.
  const bool bf16 = b.RunsBf16(node.name);
  const dt operand = bf16 ? dt::bf16 : dt::f32;
  const dt result = bf16 && b.OnlyBf16ConvsRead(y) ? dt::bf16 : dt::f32;
  dnnl::memory::desc src_any(ToDims(xs.shape), operand, tag::any);
  dnnl::memory::desc w_any(wdims, operand, tag::any);
  dnnl::memory::desc dst_any(ToDims(out), result, tag::any);
  dnnl::memory::desc bias_md({oc}, dt::f32, tag::x);
  dnnl::convolution_forward::primitive_desc pd;
  try {
    auto d =
        bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                               src_any, w_any, bias_md, dst_any, strides, dil, pl, pr)
             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                               src_any, w_any, dst_any, strides, dil, pl, pr);
    pd = dnnl::convolution_forward::primitive_desc(d, attr, b.engine());
  } catch (const dnnl::error& e) {
    return Unsupported("oneDNN convolution: ", e.what());
  }
  // Grouped weights [G*OCg, IC, k...] are the same bytes as [G, OCg, IC, k...].
  const dnnl::memory::desc w_plain(wdims, dt::f32, geo.weights_tag);
  ConvTactic tactic;
  tactic.x = xs.shape;
  tactic.y = out;
  tactic.weights = static_cast<const float*>(ws.known->raw());
  tactic.weights_tensor = ws.known;
  tactic.weights_md = w_plain;
  tactic.bias = bias ? static_cast<const float*>(b.state(bias).known->raw()) : nullptr;
  tactic.kernel = a.kernel;
  tactic.strides = a.strides;
  tactic.dilations = a.dilations;
  tactic.group = group;
  tactic.pad_t = pl[0];
  tactic.pad_l = pl.size() > 1 ? pl[1] : 0;
  tactic.sum = z != nullptr;
  tactic.node = node.name;
  tactic.activation = act;
  std::shared_ptr<const WinogradConv> wino;
  if (!bf16 && !affine) {  // Winograd: FP32, and its epilogue has no output affine
    SP_ASSIGN_OR_RETURN(wino, ChooseWinograd(b, tactic, pd));
  }
  // From here on the program is changed: errors are real errors.
  dnnl::memory wmem;
  if (!wino) {
    SP_ASSIGN_OR_RETURN(wmem, ConstantIn(b, w, w_plain, pd.weights_desc()));
  }
  const dnnl::memory::desc dst_md = pd.dst_desc();
  SP_ASSIGN_OR_RETURN(int src, b.Input(x, pd.src_desc()));
  int dst = -1;
  if (z) {
    // The sum post-op adds into what dst holds. When this is the residual's last
    // reader and it is stored as dst wants, the output simply takes over its
    // buffer (no copy); otherwise the residual is copied into a new buffer first.
    dnnl::memory::desc zmd;
    const int zb = b.AnyInput(z, &zmd);
    if (zmd == dst_md && zb != src && b.LastUse(z, node)) {
      dst = zb;
      b.ViewOutput(y, zb, dst_md);
    } else {
      dst = b.Output(y, &dst_md);
      SP_RETURN_IF_ERROR(AddReorderStep(b, zb, zmd, dst, dst_md, StrCat("residual ", z->name(), " -> ", node.name)));
      b.UseBuffer(dst);
      b.UseBuffer(src);
    }
  } else {
    dst = b.Output(y, &dst_md);
  }
  if (wino) {
    const int m = wino->tile();
    AddWinogradStep(b, std::move(wino), src, dst,
                    StrCat(node.op_type, " ", node.name, " [winograd f", m, "x", m, " avx2]"));
    return Status::Ok();
  }
  auto step = std::make_unique<DnnlStep>(dnnl::convolution_forward(pd), b.engine());
  step->AddBuffer(DNNL_ARG_SRC, src, pd.src_desc());
  step->AddFixed(DNNL_ARG_WEIGHTS, wmem);
  if (bias) {
    SP_ASSIGN_OR_RETURN(dnnl::memory bmem, ConstantIn(b, bias, bias_md, bias_md));
    step->AddFixed(DNNL_ARG_BIAS, bmem);
  }
  step->AddBuffer(DNNL_ARG_DST, dst, dst_md);
  if (pd.scratchpad_desc().get_size() > 0)
    step->AddBuffer(DNNL_ARG_SCRATCHPAD, b.Scratch(pd.scratchpad_desc().get_size()), pd.scratchpad_desc());
  b.AddStep(std::move(step), StrCat(node.op_type, " ", node.name, " [onednn ", pd.impl_info_str(), "]"));
  return Status::Ok();
}

// y[c] += bias[c] in place, over a plain, channels-last or channel-blocked layout (nChw16c,
// padded channels included: their bias is 0, so the padding stays zero).
class BiasStep : public Kernel {
 public:
  int buffer = -1;
  //! The step for a buffer of layout `md`; null when md is none of those layouts.
  static std::unique_ptr<BiasStep> Make(const dnnl::memory::desc& md, const std::vector<float>& bias) {
    const dnnl_memory_desc_t& d = md.data;
    const auto& blk = d.format_desc.blocking;
    if (d.data_type != dnnl_f32 || d.format_kind != dnnl_blocked || d.offset0 != 0 || d.ndims < 2) return nullptr;
    if (blk.inner_nblks > 1 || (blk.inner_nblks == 1 && blk.inner_idxs[0] != 1)) return nullptr;
    const int64_t block = blk.inner_nblks == 1 ? blk.inner_blks[0] : 1;
    // Physical axes, outermost first (largest stride; ties in logical order), with padded sizes.
    std::vector<int> order(static_cast<size_t>(d.ndims));
    for (int i = 0; i < d.ndims; ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return blk.strides[a] > blk.strides[c]; });
    auto step = std::make_unique<BiasStep>();
    int64_t total = 1;
    for (int i : order) {
      const int64_t size = i == 1 ? d.padded_dims[1] / block : d.padded_dims[i];
      step->sizes_.push_back(size);
      step->channel_mult_.push_back(i == 1 ? block : 0);
      total *= size;
    }
    if (block > 1) {
      step->sizes_.push_back(block);
      step->channel_mult_.push_back(1);
      total *= block;
    }
    if (static_cast<int64_t>(md.get_size()) != total * 4) return nullptr;  // not dense
    step->bias_.assign(static_cast<size_t>(d.padded_dims[1]), 0.f);
    std::copy(bias.begin(), bias.end(), step->bias_.begin());
    // Rows: the axes up to the last one (but the innermost) that indexes channels; within a
    // row, `repeat` runs of `inner` elements, each run one channel (plain layouts) or the
    // channels of the innermost axis (the block of nChw16c; all of them in nhwc).
    const size_t last = step->sizes_.size() - 1;
    step->inner_channels_ = step->channel_mult_[last] != 0;
    step->inner_ = step->sizes_[last];
    size_t rows_end = 0;  // axes [0, rows_end) index the rows
    for (size_t k = 0; k < last; ++k)
      if (step->channel_mult_[k] != 0) rows_end = k + 1;
    for (size_t k = rows_end; k < last; ++k) step->repeat_ *= step->sizes_[k];
    step->sizes_.resize(rows_end);
    step->channel_mult_.resize(rows_end);
    return step;
  }
  Status Bind(const std::vector<void*>& ptrs) override {
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(buffer)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    int64_t rows = 1;
    for (int64_t n : sizes_) rows *= n;
    const int64_t row_elems = repeat_ * inner_;
    ParallelFor(ctx, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(row_elems, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t rem = r, channel = 0;
        for (size_t k = sizes_.size(); k-- > 0;) {
          channel += (rem % sizes_[k]) * channel_mult_[k];
          rem /= sizes_[k];
        }
        float* y = y_ + r * row_elems;
        if (inner_channels_) {
          const float* bias = bias_.data() + channel;
          for (int64_t j = 0; j < repeat_; ++j, y += inner_)
            for (int64_t i = 0; i < inner_; ++i) y[i] += bias[i];
        } else {
          const float v = bias_[static_cast<size_t>(channel)];
          for (int64_t i = 0; i < row_elems; ++i) y[i] += v;
        }
      }
    });
    return Status::Ok();
  }

 private:
  std::vector<int64_t> sizes_, channel_mult_;  // the row axes: size, channels per index step
  int64_t repeat_ = 1, inner_ = 1;
  bool inner_channels_ = false;
  std::vector<float> bias_;  // padded to the layout's channel count with zeros
  float* y_ = nullptr;
};

// A channel-blocked result with padded channels (nChw16c holding 1 or 24 channels) into the
// plain layout, bias added on the way: one pass instead of a bias pass and a reorder.
class UnpadStep : public Kernel {
 public:
  int src = -1, dst = -1;
  //! Null when `md` is not n, C/block, spatial..., block in that memory order (nChw16c).
  static std::unique_ptr<UnpadStep> Make(const dnnl::memory::desc& md, const std::vector<float>& bias) {
    const dnnl_memory_desc_t& d = md.data;
    const auto& blk = d.format_desc.blocking;
    if (!PaddedChannelBlockedLayout(md)) return nullptr;
    auto step = std::make_unique<UnpadStep>();
    step->block_ = blk.inner_blks[0];
    int64_t expect = step->block_;
    for (int i = d.ndims; i-- > 2;) {  // spatial axes innermost, then the channel blocks, then n
      if (blk.strides[i] != expect) return nullptr;
      expect *= d.dims[i];
      step->spatial_ *= d.dims[i];
    }
    if (blk.strides[1] != expect || blk.strides[0] != expect * (d.padded_dims[1] / step->block_)) return nullptr;
    step->n_ = d.dims[0];
    step->channels_ = d.dims[1];
    step->blocks_ = d.padded_dims[1] / step->block_;
    step->bias_ = bias;
    step->bias_.resize(static_cast<size_t>(step->channels_), 0.f);
    return step;
  }
  Status Bind(const std::vector<void*>& ptrs) override {
    x_ = static_cast<const float*>(ptrs[static_cast<size_t>(src)]);
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(dst)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    // Work items: pieces of kPiece spatial positions of one (n, c) row (one row is the whole
    // map when there is one channel, as in the PP-OCR detector's last upsampling).
    constexpr int64_t kPiece = 4096;
    const int64_t pieces = (spatial_ + kPiece - 1) / kPiece;
    ParallelFor(ctx, n_ * channels_ * pieces, 4, [&](int64_t b, int64_t e) {
      for (int64_t w = b; w < e; ++w) {
        const int64_t r = w / pieces, begin = (w % pieces) * kPiece, end = std::min(spatial_, begin + kPiece);
        const int64_t n = r / channels_, c = r % channels_;
        const float* x = x_ + ((n * blocks_ + c / block_) * spatial_) * block_ + c % block_;
        float* y = y_ + r * spatial_;
        const float v = bias_[static_cast<size_t>(c)];
        for (int64_t i = begin; i < end; ++i) y[i] = x[i * block_] + v;
      }
    });
    return Status::Ok();
  }

 private:
  int64_t n_ = 0, channels_ = 0, blocks_ = 0, block_ = 1, spatial_ = 1;
  std::vector<float> bias_;
  const float* x_ = nullptr;
  float* y_ = nullptr;
};

bool AcceptsConvTranspose(const ir::Node& node) {
  return node.domain.empty() && node.op_type == "ConvTranspose" && AllFloat32(node) && node.input(1) &&
         node.input(1)->is_constant() && (!node.input(2) || node.input(2)->is_constant());
}

Status BuildConvTranspose(ProgramBuilder& b, const ir::Node& node, int64_t) {
  SP_ASSIGN_OR_RETURN(const bool upsample, BuildUpsampleDeconv(b, node));
  if (upsample) return Status::Ok();
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.input(1);
  const ir::Value* bias = node.input(2);
  const ir::Value* y = node.output(0);
  const ValueState& xs = b.state(x);
  const ValueState& ws = b.state(w);
  const Shape out = b.state(y).shape;
  const size_t r = xs.shape.size();
  if (r < 3 || r > 5 || ws.known == nullptr || ws.shape.size() != r) return Unsupported("rank");
  const int64_t group = node.attr_int("group", 1);
  const size_t sp = r - 2;
  const Shape kernel = node.attr_ints("kernel_shape", Shape(ws.shape.begin() + 2, ws.shape.end()));
  const Shape st = node.attr_ints("strides", Shape(sp, 1));
  const Shape dl = node.attr_ints("dilations", Shape(sp, 1));
  const Shape pads = node.attr_ints("pads", Shape(2 * sp, 0));
  const Shape opad = node.attr_ints("output_padding", Shape(sp, 0));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (kernel.size() != sp || st.size() != sp || dl.size() != sp || pads.size() != 2 * sp || opad.size() != sp)
    return Unsupported("attributes");
  dims strides, dil, pl, pr;
  for (size_t i = 0; i < sp; ++i) {
    const int64_t in = xs.shape[i + 2], ek = (kernel[i] - 1) * dl[i] + 1, o = out[i + 2];
    int64_t begin = pads[i];
    if (node.has_attr("output_shape") || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t total = st[i] * (in - 1) + opad[i] + ek - o;
      begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else if (auto_pad == "VALID") {
      begin = 0;
    }
    const int64_t end = (in - 1) * st[i] + ek - begin - o;
    if (begin < 0 || end < 0) return Unsupported("padding");
    strides.push_back(st[i]);
    dil.push_back(dl[i] - 1);
    pl.push_back(begin);
    pr.push_back(end);
  }
  // ONNX W is [IC, OC/g, k...] = [G][IC/g][OC/g][k...]; oneDNN's logical weights are [G, OC/g, IC/g, k...].
  const int64_t icg = ws.shape[0] / group, ocg = ws.shape[1];
  int64_t ksize = 1;
  for (size_t i = 2; i < r; ++i) ksize *= ws.shape[i];
  dims wdims, wstrides;
  if (group > 1) {
    wdims = {group, ocg, icg};
    wstrides = {icg * ocg * ksize, ksize, ocg * ksize};
  } else {
    wdims = {ocg, icg};
    wstrides = {ksize, ocg * ksize};
  }
  {
    int64_t s = 1;
    dims ks;
    for (size_t i = r; i-- > 2;) {
      ks.insert(ks.begin(), s);
      s *= ws.shape[i];
    }
    for (size_t i = 2; i < r; ++i) {
      wdims.push_back(ws.shape[i]);
      wstrides.push_back(ks[i - 2]);
    }
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::memory::desc src_any(ToDims(xs.shape), dt::f32, tag::any);
  const dnnl::memory::desc w_any(wdims, dt::f32, tag::any);
  const dnnl::memory::desc dst_any(ToDims(out), dt::f32, tag::any);
  std::string error;
  // A primitive for these layouts; with `fast`, none when oneDNN would run its reference kernel.
  auto make = [&](const dnnl::memory::desc& src_md, const dnnl::memory::desc& dst_md,
                  bool fast = true) -> std::optional<dnnl::deconvolution_forward::primitive_desc> {
    try {
      // No bias: oneDNN 2.6 adds a deconvolution's bias in a reference loop after the kernel
      // (7-11 ms on the PP-OCR detector's head against 1-2 ms for the kernel); BiasStep adds it.
      dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                          src_md, w_any, dst_md, strides, dil, pl, pr);
      dnnl::deconvolution_forward::primitive_desc pd(d, attr, b.engine());
      if (fast && std::string(pd.impl_info_str()).find("ref") != std::string::npos) return std::nullopt;
      return pd;
    } catch (const dnnl::error& e) {
      error = e.what();
      return std::nullopt;
    }
  };
  // The source in the layout its producer left (a convolution's nChw16c) when a fast kernel
  // takes it, so no reorder comes before; the result blocked (what oneDNN prefers) unless that
  // would pad the channels and a reader other than a convolution would need it reordered (a
  // 1-channel map is 16x the memory in nChw16c): then plain, if a kernel as fast takes it.
  std::optional<dnnl::deconvolution_forward::primitive_desc> found;
  if (DenseBlockedLayout(xs.md)) found = make(xs.md, dst_any);
  if (!found) found = make(src_any, dst_any);
  // Readers that take a padded channel-blocked layout as it is: convolutions, and unary ops
  // with op(0) == 0, which run over the padding too (eltwise.cpp).
  static const std::set<std::string> kTakePadded = {
      "Conv", "ConvTranspose", "FusedConv", "Relu", "LeakyRelu", "Tanh", "HardSwish", "Gelu", "Elu", "Abs", "Neg"};
  bool convolutions_read = !b.IsGraphIo(y) && !y->uses().empty();
  for (const auto& [reader, slot] : y->uses())
    convolutions_read = convolutions_read && slot == 0 && kTakePadded.count(reader->op_type) > 0;
  if (found && !convolutions_read && !DenseBlockedLayout(found->dst_desc()) &&
      found->dst_desc() != PlainDesc(DType::kFloat32, out)) {
    // Only for a kernel as fast: oneDNN 2.6's plain-layout deconvolution is its GEMM-based one,
    // slower than the blocked one plus a reorder (the PP-OCR detector's last 1-channel
    // upsampling: 4.8 against 2.4 + 0.7 ms).
    const dnnl::memory::desc dst_plain = PlainDesc(DType::kFloat32, out);
    std::optional<dnnl::deconvolution_forward::primitive_desc> plain_dst = make(found->src_desc(), dst_plain);
    if (!plain_dst) plain_dst = make(src_any, dst_plain);
    if (plain_dst && std::string(plain_dst->impl_info_str()).find("gemm") == std::string::npos) found = plain_dst;
  }
  if (!found) found = make(src_any, dst_any, /*fast=*/false);
  if (!found) return Unsupported("oneDNN deconvolution: ", error);
  const dnnl::deconvolution_forward::primitive_desc pd = *found;
  dnnl::memory::desc w_plain(wdims, dt::f32, wstrides);
  SP_ASSIGN_OR_RETURN(dnnl::memory wmem, ConstantIn(b, w, w_plain, pd.weights_desc()));
  const dnnl::memory::desc dst_md = pd.dst_desc();
  std::vector<float> bias_values;
  if (bias) {
    const Tensor* bt = b.state(bias).known;
    if (bt == nullptr || bt->numel() != group * ocg) return Unsupported("bias");
    for (int64_t c = 0; c < bt->numel(); ++c) bias_values.push_back(static_cast<float>(ElementAsDouble(*bt, c)));
  }
  // Padded channels that a reader other than a convolution would reorder: the kernel writes a
  // scratch buffer, UnpadStep the plain result (with the bias). Else the bias in place.
  std::unique_ptr<UnpadStep> unpad =
      !convolutions_read && !DenseBlockedLayout(dst_md) ? UnpadStep::Make(dst_md, bias_values) : nullptr;
  std::unique_ptr<BiasStep> bias_step;
  if (bias && !unpad) {
    bias_step = BiasStep::Make(dst_md, bias_values);
    if (!bias_step) return Unsupported("bias on a ", dst_md.data.format_desc.blocking.inner_nblks, "-block layout");
  }
  SP_ASSIGN_OR_RETURN(int src, b.Input(x, pd.src_desc()));
  const int dst = unpad ? b.Scratch(dst_md.get_size()) : b.Output(y, &dst_md);
  if (bias_step) bias_step->buffer = dst;
  auto step = std::make_unique<DnnlStep>(dnnl::deconvolution_forward(pd), b.engine());
  step->AddBuffer(DNNL_ARG_SRC, src, pd.src_desc());
  step->AddFixed(DNNL_ARG_WEIGHTS, wmem);
  step->AddBuffer(DNNL_ARG_DST, dst, dst_md);
  if (pd.scratchpad_desc().get_size() > 0)
    step->AddBuffer(DNNL_ARG_SCRATCHPAD, b.Scratch(pd.scratchpad_desc().get_size()), pd.scratchpad_desc());
  b.AddStep(std::move(step), StrCat(node.op_type, " ", node.name, " [onednn ", pd.impl_info_str(), "]"));
  if (bias_step) {
    b.UseBuffer(dst);
    b.AddStep(std::move(bias_step), StrCat("bias of ", node.name, " [cpu in layout]"));
  }
  if (unpad) {
    b.UseBuffer(dst);
    unpad->src = dst;
    unpad->dst = b.Output(y);
    b.AddStep(std::move(unpad), StrCat("unpad ", node.name, bias ? " + bias [cpu]" : " [cpu]"));
  }
  return Status::Ok();
}

}  // namespace

const KernelFamily kConvFamily{"onednn:conv", AcceptsConv, BuildConv};
const KernelFamily kConvTransposeFamily{"onednn:deconv", AcceptsConvTranspose, BuildConvTranspose};

}  // namespace sampan::cpu
