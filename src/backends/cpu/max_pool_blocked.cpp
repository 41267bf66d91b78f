// 2-D MaxPool on the layouts oneDNN's convolutions leave: channel-blocked nChw8c
// ([N][C/8][H][W][8]) on AVX2, nChw16c or channels-last nhwc ([N][H][W][C], its brgconv
// kernels') on AVX-512 — all [planes][H][W][block] with contiguous blocks of channels. oneDNN 2.6's pooling takes
// ~0.3 ms (b1, hot) to ~0.7 ms (in ResNet-50, after conv1) for 64x112x112 -> 56x56 with a
// 3x3 stride-2 window; this loop of 8-wide maxima takes ~0.1 ms (AVX2). It also takes the
// windows oneDNN refuses (input rows past the last window).
#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec.h"

namespace sampan::cpu {
namespace {

typedef float V8 __attribute__((vector_size(32)));

struct PoolGeom {
  int64_t blk = 8;     // channels per block: 8 (nChw8c), 16 (nChw16c) or C (nhwc), a multiple of 8
  int64_t planes = 0;  // N * C/blk
  int64_t h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 0, kw = 0, sh = 0, sw = 0, pt = 0, pl = 0;
};

// Rows [r0, r1) of the output, counted over all planes.
__attribute__((always_inline)) inline void MaxPoolRowsBody(const PoolGeom& g, const float* src, float* dst, int64_t r0,
                                                           int64_t r1) {
  const int64_t blk = g.blk;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t plane = r / g.oh, oy = r % g.oh;
    const int64_t y0 = std::max<int64_t>(0, oy * g.sh - g.pt), y1 = std::min(g.h, oy * g.sh - g.pt + g.kh);
    const float* in = src + plane * g.h * g.w * blk;
    float* out = dst + (plane * g.oh + oy) * g.ow * blk;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t x0 = std::max<int64_t>(0, ox * g.sw - g.pl), x1 = std::min(g.w, ox * g.sw - g.pl + g.kw);
      for (int64_t c = 0; c < blk; c += 8) {  // 8 channels of the block at a time
        V8 m;
        __builtin_memcpy(&m, in + (y0 * g.w + x0) * blk + c, sizeof(V8));
        for (int64_t y = y0; y < y1; ++y)
          for (int64_t x = x0; x < x1; ++x) {
            V8 v;
            __builtin_memcpy(&v, in + (y * g.w + x) * blk + c, sizeof(V8));
            m = v > m ? v : m;
          }
        __builtin_memcpy(out + ox * blk + c, &m, sizeof(V8));
      }
    }
  }
}

SP_ISA_DISPATCH(void, MaxPoolRows, (const PoolGeom& g, const float* src, float* dst, int64_t r0, int64_t r1),
                (g, src, dst, r0, r1))

class MaxPoolBlockedStep : public Kernel {
 public:
  MaxPoolBlockedStep(const PoolGeom& g, int src, int dst) : g_(g), src_id_(src), dst_id_(dst) {}
  Status Bind(const std::vector<void*>& ptrs) override {
    src_ = static_cast<const float*>(ptrs[static_cast<size_t>(src_id_)]);
    dst_ = static_cast<float*>(ptrs[static_cast<size_t>(dst_id_)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    ParallelFor(ctx, g_.planes * g_.oh, 4, [&](int64_t b, int64_t e) { MaxPoolRows(g_, src_, dst_, b, e); });
    return Status::Ok();
  }

 private:
  PoolGeom g_;
  int src_id_, dst_id_;
  const float* src_ = nullptr;
  float* dst_ = nullptr;
};

}  // namespace

Result<bool> BuildMaxPoolBlocked(ProgramBuilder& b, const ir::Node& node, const dnnl::memory::dims& kernel,
                                 const dnnl::memory::dims& strides, const dnnl::memory::dims& dilations,
                                 const dnnl::memory::dims& pads_begin) {
  const ir::Value* x = node.input(0);
  const ir::Value* y = node.output(0);
  const ValueState& xs = b.state(x);
  const Shape out = b.state(y).shape;
  if (xs.shape.size() != 4 || kernel.size() != 2) return false;
  using tag = dnnl::memory::format_tag;
  // Only where the producer left one of these layouts: no reorder for it.
  const dnnl::memory::dims dims = {xs.shape[0], xs.shape[1], xs.shape[2], xs.shape[3]};
  int64_t blk = 0;
  tag layout = tag::undef;
  for (auto [b_, t] : {std::pair<int64_t, tag>{8, tag::nChw8c}, {16, tag::nChw16c}, {xs.shape[1], tag::nhwc}})
    if (b_ > 0 && b_ % 8 == 0 && xs.shape[1] % b_ == 0 &&
        xs.md == dnnl::memory::desc(dims, dnnl::memory::data_type::f32, t)) {
      blk = b_;
      layout = t;
      break;
    }
  if (blk == 0) return false;
  const dnnl::memory::desc blocked(dims, dnnl::memory::data_type::f32, layout);
  PoolGeom g;
  g.blk = blk;
  g.planes = xs.shape[0] * xs.shape[1] / blk;
  g.h = xs.shape[2];
  g.w = xs.shape[3];
  g.oh = out[2];
  g.ow = out[3];
  g.kh = kernel[0];
  g.kw = kernel[1];
  g.sh = strides[0];
  g.sw = strides[1];
  g.pt = pads_begin[0];
  g.pl = pads_begin[1];
  if (dilations[0] != 0 || dilations[1] != 0) return false;  // oneDNN counts dilation from 0
  // Every window must hold at least one input element (pads smaller than the kernel,
  // ceil_mode windows starting inside the input).
  if (g.pt >= g.kh || g.pl >= g.kw) return false;
  if ((g.oh - 1) * g.sh - g.pt >= g.h || (g.ow - 1) * g.sw - g.pl >= g.w) return false;
  const dnnl::memory::desc dst_md({out[0], out[1], out[2], out[3]}, dnnl::memory::data_type::f32, layout);
  SP_ASSIGN_OR_RETURN(int src, b.Input(x, blocked));
  const int dst = b.Output(y, &dst_md);
  b.AddStep(std::make_unique<MaxPoolBlockedStep>(g, src, dst),
            StrCat(node.op_type, " ", node.name, " [cpu ",
                   layout == tag::nhwc ? std::string("nhwc") : StrCat("nChw", blk, "c"), "]"));
  return true;
}

}  // namespace sampan::cpu
