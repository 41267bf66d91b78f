#include "backends/cuda/attention_kernel.h"

#include <algorithm>
#include <optional>

#include "backends/cuda/attention.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/fuse_quantized_outputs.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/quantize.h"
#include "backends/cuda/softmax.h"
#include "backends/cuda/strided_copy.h"
#include "ops/attention.h"

namespace sampan::cuda {
namespace {

QFloat AsQFloat(FloatType t) {
  return t == FloatType::kF16 ? QFloat::kF16 : t == FloatType::kBF16 ? QFloat::kBF16 : QFloat::kF32;
}

// The [B, H, S, D] view of a bshd (ops/attention.h) shape or stride list.
template <class V>
V AttentionLogical(V d, bool bshd) {
  if (bshd) std::swap(d[1], d[2]);
  return d;
}

// out = softmax(Q K^T * scale + mask) V. FP16/BF16 with head size <= 128 run the fused
// kernel (attention.cu), which reads every layout through strides. Otherwise two
// cuBLASLt batched products around our masked softmax, the [B, Sq, Sk] scores in the
// workspace; a bshd layout is first copied to [B, H, S, D] there (and the output back).
class AttentionKernel : public NodeKernel {
 public:
  Status Init(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
              const KernelOptions& opt, const RunEnv& env) {
    SP_ASSIGN_OR_RETURN(type_, FloatOf(in[0].dtype, node));
    packed_ = ops::AttentionIsPacked(node);
    const bool bshd = packed_ || ops::AttentionIsBshd(node);
    // Packed [B, S, 3, H, D]: Q, K and V are its three [B, S, H, D] parts.
    const Shape part = packed_ && in[0].shape.size() == 5
                           ? Shape{in[0].shape[0], in[0].shape[1], in[0].shape[3], in[0].shape[4]}
                           : Shape{};
    if (packed_ && (part.empty() || in[0].shape[2] != 3)) return Unsupported(node.Label(), ": packed QKV shape");
    const Shape& q_stored = packed_ ? part : in[0].shape;
    const Shape& k_stored = packed_ ? part : in[1].shape;
    const Shape& v_stored = packed_ ? part : in[2].shape;
    const size_t r = q_stored.size();
    if (r < 2 || k_stored.size() != r || v_stored.size() != r || out.shape.size() != r)
      return Unsupported(node.Label(), ": attention ranks");
    if (bshd && r != 4) return Unsupported(node.Label(), ": bshd attention needs rank 4");
    // Logical [lead..., S, D] shapes (the stored ones for bhsd).
    const Shape q = AttentionLogical(q_stored, bshd);
    const Shape k = AttentionLogical(k_stored, bshd);
    const Shape v = AttentionLogical(v_stored, bshd);
    const Shape y = AttentionLogical(out.shape, bshd);
    const bool kt = node.attr_int("k_transposed", 0) != 0;
    batch_ = 1;
    for (size_t i = 0; i + 2 < r; ++i) batch_ *= q[i];
    sq_ = q[r - 2];
    d_ = q[r - 1];
    sk_ = kt ? k[r - 1] : k[r - 2];
    dv_ = v[r - 1];
    if (batch_ == 0 || sq_ == 0 || sk_ == 0 || d_ == 0 || dv_ == 0)
      return Unsupported(node.Label(), ": empty attention");
    const float scale = node.attr_float("scale", 1.f);
    if (in.size() > 3 && in[3].present) {
      // Mask broadcast to [lead..., Sq, Sk]: supported when its leading dims
      // broadcast as one block (all of them, none, or a prefix with the rest 1).
      Shape m = in[3].shape;
      if (m.size() > r) return Unsupported(node.Label(), ": mask rank");
      while (m.size() < r) m.insert(m.begin(), 1);
      if ((m[r - 1] != sk_ && m[r - 1] != 1) || (m[r - 2] != sq_ && m[r - 2] != 1))
        return Unsupported(node.Label(), ": mask shape");
      mask_col_stride_ = m[r - 1] == 1 ? 0 : 1;
      mask_row_stride_ = m[r - 2] == 1 ? 0 : m[r - 1];
      // Leading dims: the mask's batch index is (b / div) % mod over the flattened batch
      // b, which covers masks whose full dims form one block: broadcast dims inside it
      // (div: [B, 1, Sq|1, Sk]) and outside it (ignored by % mod: a relative-position
      // bias [H, Sq, Sk] against MaxViT's [B, G, H, Sq, Sk]).
      int64_t div = 1, mask_batch = 1;
      enum { kInnerOnes, kFull, kOuterOnes } phase = kInnerOnes;
      bool pattern = true;
      for (size_t i = r - 2; i-- > 0;) {
        if (q[i] == 1) continue;
        if (m[i] == 1) {
          if (phase == kInnerOnes)
            div *= q[i];
          else
            phase = kOuterOnes;
        } else {
          if (m[i] != q[i]) return Unsupported(node.Label(), ": mask shape");
          pattern = pattern && phase != kOuterOnes;
          phase = kFull;
          mask_batch *= m[i];
        }
      }
      mask_batch_div_ = div;
      mask_batch_mod_ = mask_batch;
      mask_batch_stride_ = m[r - 2] * m[r - 1];
      if (!pattern) {
        // Other broadcasts (Swin's shifted-window mask: [1, windows, 1, S, S] against
        // [batch * windows, heads, S, S] split as [batch, windows, heads, S, S]) are
        // materialised to the full [lead..., Sq, Sk] mask in the workspace first.
        Shape full(q.begin(), q.end() - 2);
        full.push_back(sq_);
        full.push_back(sk_);
        SP_ASSIGN_OR_RETURN(StridedShape mc, MakeStrided(full, {BroadcastStrides(in[3].shape, full), Packed(full)}));
        mask_copy_ = mc;
        mask_bytes_ = Aligned(static_cast<size_t>(NumElements(full)) * DTypeSize(in[3].dtype));
        mask_elem_ = DTypeSize(in[3].dtype);
        mask_batch_div_ = 1;
        mask_batch_mod_ = batch_;
        mask_batch_stride_ = sq_ * sk_;
        mask_row_stride_ = sk_;
        mask_col_stride_ = 1;
      }
      has_mask_ = true;
    }
    elem_ = DTypeSize(in[0].dtype);
    if (in.size() > 4 && in[4].present) {
      // A quantized output (YScale): float8 codes of the output as rounded to its type.
      SP_ASSIGN_OR_RETURN(q8_, Float8OutputParams(node, in[0].dtype, in[4], out.dtype));
      SP_ASSIGN_OR_RETURN(const FloatType st, FloatOf(in[4].dtype, node));
      quantized_ = true;
      quant_.n = NumElements(out.shape);
      quant_.scale = AsQFloat(st);
      quant_.x = AsQFloat(type_);
      quant_.precision = q8_.precision;
      quant_.q = q8_.e5m2 ? QType::kE5M2 : QType::kE4M3;
      quant_.saturate = q8_.saturate;
    } else if (out.dtype != in[0].dtype) {
      return Unsupported(node.Label(), ": a ", DTypeName(out.dtype), " output of ", DTypeName(in[0].dtype),
                         " attention");
    }
    if (opt.check_only) return Status::Ok();  // capability query: no device work
    int device = 0, cc_major = 0;
    SP_CUDA(cudaGetDevice(&device));
    SP_CUDA(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device));
    if (FusedAttentionSupports(type_, d_, dv_, cc_major)) {
      SP_CUDA(PrepareFusedAttention());
      fused_ = true;
      AttentionParams& p = fused_params_;
      p.slices = batch_;
      p.sq = sq_;
      p.sk = sk_;
      p.d = d_;
      p.scale = scale;
      if (packed_) {  // rows of 3 H D: Q, then K (H D further), then V
        const int64_t h = part[2];
        p.heads = h;
        p.q = p.k = p.v = {sq_ * 3 * h * d_, d_, 3 * h * d_, 1};
        p.out = {sq_ * h * dv_, dv_, h * dv_, 1};
        packed_offset_ = static_cast<size_t>(h * d_) * DTypeSize(in[0].dtype);
      } else if (bshd) {  // [B, S, H, D]: slice b = (b / H, b % H)
        const int64_t h = in[0].shape[2];
        p.heads = h;
        p.q = {sq_ * h * d_, d_, h * d_, 1};
        p.k = {sk_ * h * d_, d_, h * d_, 1};
        p.v = {sk_ * h * dv_, dv_, h * dv_, 1};
        p.out = {sq_ * h * dv_, dv_, h * dv_, 1};
      } else {
        p.heads = 1;
        p.q = {sq_ * d_, 0, d_, 1};
        p.k = kt ? AttentionStrides{d_ * sk_, 0, 1, sk_} : AttentionStrides{sk_ * d_, 0, d_, 1};
        p.v = {sk_ * dv_, 0, dv_, 1};
        p.out = {sq_ * dv_, 0, dv_, 1};
      }
      p.mask_batch_div = mask_batch_div_;
      p.mask_batch_mod = mask_batch_mod_;
      p.mask_batch_stride = mask_batch_stride_;
      p.mask_row_stride = mask_row_stride_;
      p.mask_col_stride = mask_col_stride_;
      p.quantized = quantized_;
      p.q8 = q8_;
      // A recorded tactic: the query warps per block the builder timed fastest.
      if (const int w = opt.algo; w >= 1 && w <= kAttentionMaxWarps) p.warps = w;
      return Status::Ok();
    }
    // The unfused path reads Q, K and V as separate tensors: packed ones run on the host.
    if (packed_) return Unsupported(node.Label(), ": packed QKV outside the fused kernel");
    GemmShape s1;
    s1.type = type_;
    s1.tf32 = opt.tf32;
    s1.m = sq_;
    s1.n = sk_;
    s1.k = d_;
    s1.trans_b = !kt;
    s1.batch = batch_;
    s1.stride_a = sq_ * d_;
    s1.stride_b = sk_ * d_;
    s1.stride_c = s1.stride_d = sq_ * sk_;
    SP_RETURN_IF_ERROR(qk_.Prepare(env.lt, s1, kGemmWorkspace));
    GemmShape s2;
    s2.type = type_;
    s2.tf32 = opt.tf32;
    s2.m = sq_;
    s2.n = dv_;
    s2.k = sk_;
    s2.batch = batch_;
    s2.stride_a = sq_ * sk_;
    s2.stride_b = sk_ * dv_;
    s2.stride_c = s2.stride_d = sq_ * dv_;
    SP_RETURN_IF_ERROR(pv_.Prepare(env.lt, s2, kGemmWorkspace));
    sm_.outer = batch_ * sq_;
    sm_.n = sk_;
    sm_.inner = 1;
    sm_.scale = scale;
    sm_.zero_invalid_rows = true;  // as the reference op: fully masked (or NaN) rows give zeros
    sm_.mask_col_stride = mask_col_stride_;
    sm_.mask_row_stride = mask_row_stride_;
    sm_.mask_rows_per_batch = sq_;
    sm_.mask_batch_div = mask_batch_div_;
    sm_.mask_batch_mod = mask_batch_mod_;
    sm_.mask_batch_stride = mask_batch_stride_;
    if (bshd) {
      // Gather Q, K, V into [B, H, S, D] in the workspace; scatter the output back.
      const Shape* logical[4] = {&q, &k, &v, &y};
      const Shape* stored[4] = {&in[0].shape, &in[1].shape, &in[2].shape, &out.shape};
      for (int i = 0; i < 4; ++i) {
        const std::vector<int64_t> st = AttentionLogical(Packed(*stored[i]), true);
        const std::vector<int64_t> packed = Packed(*logical[i]);
        SP_ASSIGN_OR_RETURN(StridedShape c,
                            MakeStrided(*logical[i], i < 3 ? std::vector<std::vector<int64_t>>{st, packed}
                                                           : std::vector<std::vector<int64_t>>{packed, st}));
        copies_[i] = c;
        copy_bytes_[i] = Aligned(static_cast<size_t>(NumElements(*logical[i])) * elem_);
      }
      bshd_copies_ = true;
    }
    return Status::Ok();
  }
  size_t workspace() const override {
    if (fused_) return mask_bytes_;
    size_t b = mask_bytes_ + ScoresBytes() + kGemmWorkspace + (quantized_ ? OutputBytes() : 0);
    if (bshd_copies_)
      for (size_t c : copy_bytes_) b += c;
    return b;
  }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* mask = has_mask_ ? in[3] : nullptr;
    // A materialised mask takes the workspace's first mask_bytes_ (see Init).
    char* ws = static_cast<char*>(env.workspace);
    if (mask_copy_) {
      SP_CUDA(LaunchStridedCopy(mask_elem_, mask, ws, *mask_copy_, env.stream));
      mask = ws;
      ws += mask_bytes_;
    }
    if (fused_) {
      AttentionParams p = fused_params_;
      p.mask = mask;
      if (packed_) {
        const char* qkv = static_cast<const char*>(in[0]);
        SP_CUDA(
            LaunchFusedAttention(type_, qkv, qkv + packed_offset_, qkv + 2 * packed_offset_, out[0], p, env.stream));
      } else {
        SP_CUDA(LaunchFusedAttention(type_, in[0], in[1], in[2], out[0], p, env.stream));
      }
      return Status::Ok();
    }
    char* scores = ws;
    ws += ScoresBytes();
    // A quantized output: the attention in its type into the workspace first.
    void* const result = quantized_ ? ws : out[0];
    if (quantized_) ws += OutputBytes();
    const void* q = in[0];
    const void* k = in[1];
    const void* v = in[2];
    void* y = result;
    if (bshd_copies_) {
      const void* src[3] = {in[0], in[1], in[2]};
      const void* dst[3];
      for (int i = 0; i < 3; ++i) {
        SP_CUDA(LaunchStridedCopy(elem_, src[i], ws, copies_[i], env.stream));
        dst[i] = ws;
        ws += copy_bytes_[i];
      }
      q = dst[0];
      k = dst[1];
      v = dst[2];
      y = ws;
      ws += copy_bytes_[3];
    }
    const size_t ws_bytes = env.workspace_bytes - static_cast<size_t>(ws - static_cast<char*>(env.workspace));
    SP_RETURN_IF_ERROR(qk_.Run(env.lt, q, k, nullptr, nullptr, scores, ws, ws_bytes, env.stream));
    SoftmaxParams p = sm_;
    p.mask = mask;
    SP_CUDA(LaunchSoftmax(type_, scores, scores, p, env.stream));
    SP_RETURN_IF_ERROR(pv_.Run(env.lt, scores, v, nullptr, nullptr, y, ws, ws_bytes, env.stream));
    if (bshd_copies_) SP_CUDA(LaunchStridedCopy(elem_, y, result, copies_[3], env.stream));
    if (quantized_) SP_CUDA(LaunchQuantize(quant_, result, in[4], nullptr, out[0], env.stream));
    return Status::Ok();
  }
  const char* family() const override { return fused_ ? "fused attention" : "attention"; }
  // The fused kernel's tactics: 2, 4 or 8 query warps per block (32 to 128 rows), those
  // that differ for this Sq. Fewer rows per block give more blocks (short sequences, many
  // heads fill the SMs better); more share each K/V tile among more rows.
  std::vector<int> Candidates() const override {
    std::vector<int> c;
    if (!fused_) return c;
    const int64_t need = (sq_ + 15) / 16;
    for (int w : {2, 4, kAttentionMaxWarps})
      if (c.empty() || std::min<int64_t>(w, need) != std::min<int64_t>(c.back(), need)) c.push_back(w);
    return c;
  }
  Status Select(int warps) override {
    if (!fused_ || warps < 1 || warps > kAttentionMaxWarps)
      return InvalidArgument("attention tactic ", warps, " (query warps per block) is not offered");
    fused_params_.warps = warps;
    return Status::Ok();
  }
  int selected() const override { return fused_params_.warps > 0 ? fused_params_.warps : kAttentionMaxWarps; }

 private:
  size_t ScoresBytes() const { return Aligned(static_cast<size_t>(batch_ * sq_ * sk_) * elem_); }
  size_t OutputBytes() const { return Aligned(static_cast<size_t>(quant_.n) * elem_); }
  FloatType type_ = FloatType::kF32;
  bool packed_ = false;
  size_t packed_offset_ = 0;  //!< bytes from Q to K (and K to V) in a packed row
  int64_t batch_ = 1, sq_ = 0, sk_ = 0, d_ = 0, dv_ = 0;
  size_t elem_ = 4;
  bool has_mask_ = false;
  std::optional<StridedShape> mask_copy_;  //!< a broadcast the kernels cannot index: materialised
  size_t mask_bytes_ = 0, mask_elem_ = 2;
  int64_t mask_batch_div_ = 1, mask_batch_mod_ = 1, mask_batch_stride_ = 0, mask_row_stride_ = 0, mask_col_stride_ = 0;
  bool quantized_ = false;
  Float8Out q8_;       //!< the fused kernel's quantized output
  QuantParams quant_;  //!< the unfused path's: a quantize pass over the result
  bool fused_ = false;
  AttentionParams fused_params_;
  Gemm qk_, pv_;
  SoftmaxParams sm_;
  bool bshd_copies_ = false;
  StridedShape copies_[4];  //!< Q, K, V gathered to [B, H, S, D]; the output scattered back
  size_t copy_bytes_[4] = {};
};

}  // namespace

Result<KernelChoice> MakeAttention(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                                   const KernelOptions& opt, const RunEnv& env) {
  for (size_t i = 1; i < in.size() && i < 4; ++i)  // input 4: a quantized output's scale
    if (in[i].present && in[i].dtype != in[0].dtype) return Unsupported("attention types");
  auto k = std::make_unique<AttentionKernel>();
  SP_RETURN_IF_ERROR(k->Init(node, in, out, opt, env));
  return KernelChoice{false, std::move(k)};
}

}  // namespace sampan::cuda
