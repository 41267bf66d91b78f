// sampan::Attention(Q, K, V, mask?) in float32, one query row at a time:
//   s_j = scale * <q_i, k_j> + mask_ij;  p = softmax(s);  out_i = sum_j p_j v_j
// Rows are split over the engine's threads; each thread owns one score row of
// scratch (planned in the arena), so nothing is allocated per inference.
#include <omp.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/vec.h"
#include "ops/fused.h"

namespace sampan::cpu {
namespace {

bool AcceptsAttention(const ir::Node& node) {
  return node.domain == ops::kSampanDomain && node.op_type == "Attention" && AllFloat32(node);
}

class AttentionStep : public Kernel {
 public:
  int q = -1, k = -1, v = -1, mask = -1, out = -1, scratch = -1;
  int64_t batch = 0, sq = 0, sk = 0, d = 0, dv = 0;
  bool k_transposed = false;
  float scale = 1.f;
  std::vector<int64_t> lead;              // leading dims of the score tensor
  std::vector<int64_t> mask_lead_stride;  // mask strides for them
  int64_t mask_row_stride = 0, mask_col_stride = 0;
  int threads = 1;

  Status Bind(const std::vector<void*>& ptrs) override {
    q_ = static_cast<const float*>(ptrs[static_cast<size_t>(q)]);
    k_ = static_cast<const float*>(ptrs[static_cast<size_t>(k)]);
    v_ = static_cast<const float*>(ptrs[static_cast<size_t>(v)]);
    m_ = mask >= 0 ? static_cast<const float*>(ptrs[static_cast<size_t>(mask)]) : nullptr;
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out)]);
    s_ = static_cast<float*>(ptrs[static_cast<size_t>(scratch)]);
    return Status::Ok();
  }

  Status Run(const RunCtx& ctx) override {
    const int64_t rows = batch * sq;
    const int nt = std::max(1, std::min<int>(std::min(ctx.threads, threads), static_cast<int>(rows)));
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; ++r) Row(r, s_ + static_cast<int64_t>(omp_get_thread_num()) * sk);
    return Status::Ok();
  }

 private:
  void Row(int64_t r, float* s) const {
    const int64_t bi = r / sq, i = r % sq;
    const float* qi = q_ + r * d;
    const float* kb = k_ + bi * sk * d;
    const float* vb = v_ + bi * sk * dv;
    if (k_transposed) {  // K [D, Sk]: accumulate row by row of K
      for (int64_t j = 0; j < sk; ++j) s[j] = 0.f;
      for (int64_t t = 0; t < d; ++t) vec::Axpy(qi[t], kb + t * sk, s, sk);
      for (int64_t j = 0; j < sk; ++j) s[j] *= scale;
    } else {
      for (int64_t j = 0; j < sk; ++j) s[j] = scale * vec::Dot(qi, kb + j * d, d);
    }
    if (m_) {
      int64_t rem = bi, off = i * mask_row_stride;
      for (size_t t = lead.size(); t-- > 0;) {
        off += (rem % lead[t]) * mask_lead_stride[t];
        rem /= lead[t];
      }
      const float* m = m_ + off;
      for (int64_t j = 0; j < sk; ++j) s[j] += m[j * mask_col_stride];
    }
    vec::SoftmaxRow(s, s, sk);
    float* y = y_ + r * dv;
    for (int64_t t = 0; t < dv; ++t) y[t] = 0.f;
    for (int64_t j = 0; j < sk; ++j) vec::Axpy(s[j], vb + j * dv, y, dv);
  }

  const float *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *m_ = nullptr;
  float* y_ = nullptr;
  float* s_ = nullptr;
};

Status BuildAttention(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const Shape qs = b.state(node.input(0)).shape, ks = b.state(node.input(1)).shape,
              vs = b.state(node.input(2)).shape;
  const size_t r = qs.size();
  if (r < 2 || ks.size() != r || vs.size() != r) return Unsupported("rank");
  auto step = std::make_unique<AttentionStep>();
  step->k_transposed = node.attr_int("k_transposed", 0) != 0;
  step->scale = node.attr_float("scale", 1.f);
  step->sq = qs[r - 2];
  step->d = qs[r - 1];
  step->sk = step->k_transposed ? ks[r - 1] : ks[r - 2];
  step->dv = vs[r - 1];
  step->batch = 1;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (ks[i] != qs[i] || vs[i] != qs[i]) return Unsupported("leading dims");
    step->batch *= qs[i];
    step->lead.push_back(qs[i]);
  }
  if (const ir::Value* m = node.input(3)) {
    // Broadcast the mask against [lead..., Sq, Sk]: stride 0 where it has size 1.
    const Shape ms = b.state(m).shape;
    if (ms.size() > r) return Unsupported("mask rank");
    Shape padded(r - ms.size(), 1);
    padded.insert(padded.end(), ms.begin(), ms.end());
    std::vector<int64_t> st(r, 0);
    int64_t acc = 1;
    for (size_t i = r; i-- > 0;) {
      st[i] = padded[i] == 1 ? 0 : acc;
      acc *= padded[i];
    }
    step->mask_lead_stride.assign(st.begin(), st.end() - 2);
    step->mask_row_stride = st[r - 2];
    step->mask_col_stride = st[r - 1];
  }
  step->threads = std::max(1, b.threads());
  SP_ASSIGN_OR_RETURN(step->q, b.PlainInput(node.input(0)));
  SP_ASSIGN_OR_RETURN(step->k, b.PlainInput(node.input(1)));
  SP_ASSIGN_OR_RETURN(step->v, b.PlainInput(node.input(2)));
  if (node.input(3)) {
    SP_ASSIGN_OR_RETURN(step->mask, b.PlainInput(node.input(3)));
  }
  step->out = b.Output(node.output(0));
  step->scratch = b.Scratch(static_cast<size_t>(step->threads * std::max<int64_t>(step->sk, 1)) * sizeof(float));
  b.AddStep(std::move(step), StrCat("Attention ", node.name, " [cpu]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kAttentionFamily{"cpu:attention", AcceptsAttention, BuildAttention};

}  // namespace sampan::cpu
