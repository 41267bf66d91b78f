// A 2-D ConvTranspose whose kernel equals its stride (no padding, dilation, output padding or
// groups) with fewer than 8 output channels and at most 64 outputs per input pixel: each input pixel
// writes its own kh x kw patch of every output channel, a small matrix-vector product, so the
// map is one pass over the input and one over the plain output. oneDNN 2.6 would compute such an
// upsampling in its channel-blocked layout, padding 1 output channel to 16 (16x the work and
// memory) and leaving a reorder for the readers: the PP-OCR detector's last layer (24 -> 1
// channel, 2x2 stride 2 to 640x640) took 2.7 ms + 0.85 ms there against ~0.5 ms here.
// The input is read as stored: plain, or channel-blocked (nChw8c/nChw16c, padded channels
// included: their weights are zero).
#include <algorithm>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"

namespace sampan::cpu {
namespace {

constexpr int64_t kMaxOutputsPerPixel = 64;
constexpr int64_t kMinBlock = 8;  // the smallest channel block oneDNN uses (nChw8c)
constexpr int64_t kTile = 64;     // input pixels a row is computed in at a time

// One input row's k outputs per pixel into acc[j * w + q] (j < k, q < w). wt_t is the weight
// transposed, [k][ic_pad]. Blocked input (block > 1): pixel q's channels c of block cb are at
// xr[cb * s_cb + q * block + c], a dot product each; plain: channel c's row at xr[c * s_cb].
// A pixel's dot products with vectors of B lanes (GCC vector extensions): the lanes add
// independently, so no reassociation is needed to vectorise (a plain float sum would stay
// scalar without -ffast-math); the lanes are summed at the end.
typedef float V8 __attribute__((vector_size(8 * sizeof(float))));
typedef float V16 __attribute__((vector_size(16 * sizeof(float))));

template <class V, int B>
__attribute__((always_inline)) inline void BlockedDots(const float* xr, int64_t w, int64_t ic_pad, int64_t s_cb,
                                                       const float* wt_t, int64_t k, float* acc) {
  for (int64_t q = 0; q < w; ++q)
    for (int64_t j = 0; j < k; ++j) {
      V sum = {};
      for (int64_t cb = 0; cb < ic_pad / B; ++cb) {
        V xv, wv;
        __builtin_memcpy(&xv, xr + cb * s_cb + q * B, sizeof(V));
        __builtin_memcpy(&wv, wt_t + j * ic_pad + cb * B, sizeof(V));
        sum += xv * wv;
      }
      float total = 0.f;
      for (int l = 0; l < B; ++l) total += sum[l];
      acc[j * w + q] = total;
    }
}

__attribute__((always_inline)) inline void UpsampleRowBody(const float* xr, int64_t w, int64_t ic_pad, int64_t block,
                                                           int64_t s_cb, const float* wt_t, int64_t k, float* acc) {
  if (block == 16) return BlockedDots<V16, 16>(xr, w, ic_pad, s_cb, wt_t, k, acc);
  if (block == 8) return BlockedDots<V8, 8>(xr, w, ic_pad, s_cb, wt_t, k, acc);
  if (block > 1) {  // another block size: one element at a time
    for (int64_t q = 0; q < w; ++q)
      for (int64_t j = 0; j < k; ++j) {
        float sum = 0.f;
        for (int64_t c = 0; c < ic_pad; ++c)
          sum += xr[(c / block) * s_cb + q * block + c % block] * wt_t[j * ic_pad + c];
        acc[j * w + q] = sum;
      }
    return;
  }
  for (int64_t i = 0; i < k * w; ++i) acc[i] = 0.f;
  for (int64_t c = 0; c < ic_pad; ++c) {
    const float* xp = xr + c * s_cb;
    for (int64_t j = 0; j < k; ++j) {
      const float wv = wt_t[j * ic_pad + c];
      float* a = acc + j * w;
      for (int64_t q = 0; q < w; ++q) a[q] += xp[q] * wv;
    }
  }
}

SP_ISA_DISPATCH(void, UpsampleRow,
                (const float* xr, int64_t w, int64_t ic_pad, int64_t block, int64_t s_cb, const float* wt_t, int64_t k,
                 float* acc),
                (xr, w, ic_pad, block, s_cb, wt_t, k, acc))

class UpsampleDeconvStep : public Kernel {
 public:
  int in = -1, out = -1;
  int64_t n = 0, ic_pad = 0, block = 1, h = 0, w = 0, oc = 0, kh = 0, kw = 0;
  int64_t s_n = 0, s_cb = 0, s_h = 0, s_w = 0;  // input strides (elements) of n, channel block, h, w
  std::vector<float> wt_t;                      // [oc * kh * kw][ic_pad], padded channels zero
  std::vector<float> bias;                      // [oc]

  Status Bind(const std::vector<void*>& ptrs) override {
    x_ = static_cast<const float*>(ptrs[static_cast<size_t>(in)]);
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    const int64_t k = oc * kh * kw, oh = h * kh, ow = w * kw;
    ParallelFor(ctx, n * h, 1, [&](int64_t b, int64_t e) {
      float acc[kTile * kMaxOutputsPerPixel];  // a tile's outputs, [k][tile]: no allocation per run
      for (int64_t row = b; row < e; ++row) {
        const int64_t in_n = row / h, in_h = row % h;
        for (int64_t q0 = 0; q0 < w; q0 += kTile) {
          const int64_t tw = std::min(kTile, w - q0);
          UpsampleRow(x_ + in_n * s_n + in_h * s_h + q0 * s_w, tw, ic_pad, block, s_cb, wt_t.data(), k, acc);
          // Output (o, in_h * kh + i, (q0 + q) * kw + t) = acc[(o * kh + i) * kw + t][q] + bias[o].
          for (int64_t o = 0; o < oc; ++o)
            for (int64_t i = 0; i < kh; ++i) {
              float* yr = y_ + ((in_n * oc + o) * oh + in_h * kh + i) * ow + q0 * kw;
              const float bo = bias[static_cast<size_t>(o)];
              for (int64_t t = 0; t < kw; ++t) {
                const float* a = acc + ((o * kh + i) * kw + t) * tw;
                for (int64_t q = 0; q < tw; ++q) yr[q * kw + t] = a[q] + bo;
              }
            }
        }
      }
    });
    return Status::Ok();
  }

 private:
  const float* x_ = nullptr;
  float* y_ = nullptr;
};

}  // namespace

Result<bool> BuildUpsampleDeconv(ProgramBuilder& b, const ir::Node& node) {
  if (!node.domain.empty() || node.op_type != "ConvTranspose") return false;
  const ir::Value* x = node.input(0);
  const ir::Value* bias = node.input(2);
  const ValueState& xs = b.state(x);
  const ValueState& ws = b.state(node.input(1));
  const Shape out = b.state(node.output(0)).shape;
  if (xs.shape.size() != 4 || ws.shape.size() != 4 || ws.known == nullptr || out.size() != 4) return false;
  if (node.attr_int("group", 1) != 1 || node.has_attr("output_shape")) return false;
  const int64_t ic = xs.shape[1], oc = ws.shape[1], kh = ws.shape[2], kw = ws.shape[3];
  const Shape kernel = node.attr_ints("kernel_shape", {kh, kw});
  if (kernel != Shape{kh, kw} || node.attr_ints("strides", {1, 1}) != Shape{kh, kw}) return false;
  if (node.attr_ints("dilations", {1, 1}) != Shape{1, 1}) return false;
  const Shape zeros4{0, 0, 0, 0}, zeros2{0, 0};
  if (node.attr_ints("pads", zeros4) != zeros4 || node.attr_ints("output_padding", zeros2) != zeros2) return false;
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") return false;
  // Few output channels only: that is where oneDNN's blocked layout pads (1 or 3 channels in
  // blocks of 8 or 16) and this kernel wins; with 16 or more (a UNet decoder's 32 -> 16) oneDNN's
  // blocked kernel is far faster and its output is the layout the next convolution reads.
  if (oc >= kMinBlock || oc * kh * kw > kMaxOutputsPerPixel || ws.shape[0] != ic) return false;
  if (out != Shape{xs.shape[0], oc, xs.shape[2] * kh, xs.shape[3] * kw}) return false;
  if (bias && (b.state(bias).known == nullptr || b.state(bias).known->numel() != oc)) return false;
  // The input as stored when that is plain or channel-blocked on the channels, else plain.
  const dnnl::memory::desc& md = xs.md;
  const auto& blk = md.data.format_desc.blocking;
  const bool blocked = PaddedChannelBlockedLayout(md) || (DenseBlockedLayout(md) && blk.inner_nblks == 1);
  auto step = std::make_unique<UpsampleDeconvStep>();
  step->n = xs.shape[0];
  step->h = xs.shape[2];
  step->w = xs.shape[3];
  step->oc = oc;
  step->kh = kh;
  step->kw = kw;
  if (blocked) {
    step->block = blk.inner_blks[0];
    step->ic_pad = md.data.padded_dims[1];
    step->s_n = blk.strides[0];
    step->s_cb = blk.strides[1];
    step->s_h = blk.strides[2];
    step->s_w = blk.strides[3];
    // The row kernel reads pixel q's block at q * block: n, C/block, h, w, block order.
    if (step->s_w != step->block) return false;
  } else {
    step->ic_pad = ic;
    step->s_w = 1;
    step->s_h = step->w;
    step->s_cb = step->h * step->w;
    step->s_n = ic * step->s_cb;
  }
  const int64_t k = oc * kh * kw;
  step->wt_t.assign(static_cast<size_t>(step->ic_pad * k), 0.f);
  const Tensor& wt = *ws.known;  // [ic][oc][kh][kw]: row c is [oc * kh * kw]
  for (int64_t c = 0; c < ic; ++c)
    for (int64_t j = 0; j < k; ++j)
      step->wt_t[static_cast<size_t>(j * step->ic_pad + c)] = static_cast<float>(ElementAsDouble(wt, c * k + j));
  step->bias.assign(static_cast<size_t>(oc), 0.f);
  if (bias)
    for (int64_t o = 0; o < oc; ++o)
      step->bias[static_cast<size_t>(o)] = static_cast<float>(ElementAsDouble(*b.state(bias).known, o));
  if (blocked) {
    step->in = b.AnyInput(x, nullptr);
  } else {
    SP_ASSIGN_OR_RETURN(step->in, b.PlainInput(x));
  }
  step->out = b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat("ConvTranspose ", node.name, " [cpu upsample ", kh, "x", kw, "]"));
  return true;
}

}  // namespace sampan::cpu
