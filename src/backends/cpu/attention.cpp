// sampan::Attention(Q, K, V, mask?) in float32, blocked and allocation-free:
// each task is one (batch x head) slice, or part of its query rows when there are
// fewer slices than threads. A task packs K^T ([D][Sk]) and, when its rows are not
// contiguous, V into per-thread scratch, then runs 4 query rows at a time:
//   scores (4 x Sk register tiles) -> softmax(s * scale + mask) -> context (4 x Dv tiles).
// Q, K, V are read through their strides, so the head transposes in front of
// attention (Reshape + Transpose of a projection: views, see data_movement.cpp)
// cost no copy; when the output's only consumer is a Transpose, it is written in
// that Transpose's order, which makes the Transpose (and the Reshape after it)
// views too. With layout="bshd" (ops/attention.h) the operands are [B, S, H, D] and
// are read through the strides of their [B, H, S, D] views. Scratch lives in the
// program's arena: nothing is allocated per run.
#include "ops/attention.h"

#include <omp.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/vec.h"
#include "ops/fused.h"

namespace sampan::cpu {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

bool AcceptsAttention(const ir::Node& node) {
  return node.domain == ops::kSampanDomain && node.op_type == "Attention" && AllFloat32(node);
}

dims RowMajor(const dims& d) {
  dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}

// Offset of leading index `bi` (row-major over `lead`) with per-dim `strides`.
int64_t LeadOffset(int64_t bi, const std::vector<int64_t>& lead, const dims& strides) {
  int64_t off = 0;
  for (size_t t = lead.size(); t-- > 0;) {
    off += (bi % lead[t]) * strides[t];
    bi /= lead[t];
  }
  return off;
}

class AttentionStep : public Kernel {
 public:
  int q = -1, k = -1, v = -1, mask = -1, out = -1, scratch = -1;
  int64_t batch = 1, sq = 0, sk = 0, d = 0, dv = 0;
  float scale = 1.f;
  // Element strides within a slice: Q (row, col), K as [D][Sk] (t, j), V (row, col), Y row (col = 1).
  int64_t q_row = 0, q_col = 0, k_t = 0, k_j = 0, v_row = 0, v_col = 0, y_row = 0;
  int64_t m_row = 0, m_col = 0;
  std::vector<int64_t> q_off, k_off, v_off, y_off, m_off;  // per slice
  int64_t chunks = 1;                                      // query-row chunks per slice
  int64_t scratch_floats = 0;                              // per thread
  bool pack_v = false;
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
    const int64_t tasks = batch * chunks;
    const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(std::min(ctx.threads, threads), tasks)));
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t task = 0; task < tasks; ++task)
      Task(task / chunks, task % chunks, s_ + static_cast<int64_t>(omp_get_thread_num()) * scratch_floats);
    return Status::Ok();
  }

 private:
  void Task(int64_t bi, int64_t chunk, float* scratch) const {
    float* kt = scratch;                      // [D][Sk]
    float* vp = kt + d * sk;                  // [Sk][Dv] when V's rows are not contiguous
    float* sc = vp + (pack_v ? sk * dv : 0);  // [4][Sk]
    const float* kb = k_ + k_off[static_cast<size_t>(bi)];
    for (int64_t t = 0; t < d; ++t)
      for (int64_t j = 0; j < sk; ++j) kt[t * sk + j] = kb[t * k_t + j * k_j];
    const float* vb = v_ + v_off[static_cast<size_t>(bi)];
    int64_t vs = v_row;
    if (pack_v) {
      for (int64_t j = 0; j < sk; ++j)
        for (int64_t c = 0; c < dv; ++c) vp[j * dv + c] = vb[j * v_row + c * v_col];
      vb = vp;
      vs = dv;
    }
    const float* qb = q_ + q_off[static_cast<size_t>(bi)];
    float* yb = y_ + y_off[static_cast<size_t>(bi)];
    const float* mb = m_ ? m_ + m_off[static_cast<size_t>(bi)] : nullptr;
    const int64_t r0 = sq * chunk / chunks, r1 = sq * (chunk + 1) / chunks;
    for (int64_t i = r0; i < r1; i += 4) {
      const int rows = static_cast<int>(std::min<int64_t>(4, r1 - i));
      vec::AttentionScores(qb + i * q_row, q_row, q_col, rows, kt, d, sk, sc);
      for (int r = 0; r < rows; ++r)
        vec::AttentionSoftmaxRow(sc + r * sk, sk, scale, mb ? mb + (i + r) * m_row : nullptr, m_col);
      vec::AttentionContext(sc, rows, sk, vb, vs, dv, yb + i * y_row, y_row);
    }
  }

  const float *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *m_ = nullptr;
  float* y_ = nullptr;
  float* s_ = nullptr;
};

// Buffer holding `v` and its element strides (as stored when strided, else a row-major copy).
Result<std::pair<int, dims>> StridedOperand(ProgramBuilder& b, const ir::Value* v) {
  const ValueState& s = b.state(v);
  dims st;
  if (StridedLayout(s.md, &st)) return std::make_pair(b.AnyInput(v, nullptr), st);
  SP_ASSIGN_OR_RETURN(int buf, b.PlainInput(v));
  return std::make_pair(buf, RowMajor(dims(s.shape.begin(), s.shape.end())));
}

// The output layout: in the order of a Transpose consuming it alone (then that Transpose
// is a view), as long as the last dim stays contiguous; else row-major.
dnnl::memory::desc OutputLayout(const ir::Node& node, const Shape& ys) {
  const dims d(ys.begin(), ys.end());
  const dnnl::memory::desc plain(d, dt::f32, RowMajor(d));
  const ir::Value* y = node.output(0);
  if (y->uses().size() != 1) return plain;
  const ir::Node* t = y->uses()[0].first;
  if (!t->domain.empty() || t->op_type != "Transpose") return plain;
  std::vector<int64_t> perm = t->attr_ints("perm");
  const size_t r = d.size();
  if (perm.size() != r) return plain;
  dims td(r);
  std::vector<bool> seen(r, false);
  for (size_t i = 0; i < r; ++i) {
    const int64_t p = perm[i] < 0 ? perm[i] + static_cast<int64_t>(r) : perm[i];
    if (p < 0 || p >= static_cast<int64_t>(r) || seen[static_cast<size_t>(p)]) return plain;
    seen[static_cast<size_t>(p)] = true;
    perm[i] = p;
    td[i] = d[static_cast<size_t>(p)];
  }
  const dims tst = RowMajor(td);
  dims st(r, 0);
  for (size_t i = 0; i < r; ++i) st[static_cast<size_t>(perm[i])] = tst[i];
  if (st[r - 1] != 1 && d[r - 1] != 1) return plain;
  return dnnl::memory::desc(d, dt::f32, st);
}

// bshd: the [B, H, S, D] view of a [B, S, H, D] shape or stride list.
template <class V>
V Logical(V d, bool bshd) {
  if (bshd) std::swap(d[1], d[2]);
  return d;
}

Status BuildAttention(ProgramBuilder& b, const ir::Node& node, int64_t) {
  if (node.num_inputs() > 4 && node.input(4) != nullptr) return Unsupported("a quantized output (input 4)");
  if (ops::AttentionIsPacked(node)) return Unsupported("packed Q, K and V");
  const bool bshd = ops::AttentionIsBshd(node);
  const Shape ys_stored = b.state(node.output(0)).shape;
  if (bshd && ys_stored.size() != 4) return Unsupported("bshd rank");
  const Shape qs = Logical(b.state(node.input(0)).shape, bshd), ks = Logical(b.state(node.input(1)).shape, bshd),
              vs = Logical(b.state(node.input(2)).shape, bshd), ys = Logical(ys_stored, bshd);
  const size_t r = qs.size();
  if (r < 2 || ks.size() != r || vs.size() != r || ys.size() != r) return Unsupported("rank");
  auto step = std::make_unique<AttentionStep>();
  const bool kt = node.attr_int("k_transposed", 0) != 0;
  step->scale = node.attr_float("scale", 1.f);
  step->sq = qs[r - 2];
  step->d = qs[r - 1];
  step->sk = kt ? ks[r - 1] : ks[r - 2];
  step->dv = vs[r - 1];
  std::vector<int64_t> lead;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (ks[i] != qs[i] || vs[i] != qs[i]) return Unsupported("leading dims");
    step->batch *= qs[i];
    lead.push_back(qs[i]);
  }
  if (step->batch * step->sq * step->sk * step->d * step->dv == 0) return Unsupported("empty");
  dims mask_st;
  if (const ir::Value* m = node.input(3)) {
    // Broadcast the mask against [lead..., Sq, Sk]: stride 0 where it has size 1.
    const Shape ms = b.state(m).shape;
    if (ms.size() > r) return Unsupported("mask rank");
    Shape padded(r - ms.size(), 1);
    padded.insert(padded.end(), ms.begin(), ms.end());
    mask_st.assign(r, 0);
    int64_t acc = 1;
    for (size_t i = r; i-- > 0;) {
      mask_st[i] = padded[i] == 1 ? 0 : acc;
      acc *= padded[i];
    }
    step->m_row = mask_st[r - 2];
    step->m_col = mask_st[r - 1];
  }
  step->threads = std::max(1, b.threads());
  // Fewer slices than threads: split each slice's query rows (at least 4 per chunk).
  step->chunks =
      std::max<int64_t>(1, std::min<int64_t>((step->threads + step->batch - 1) / step->batch, (step->sq + 3) / 4));
  SP_ASSIGN_OR_RETURN(auto qo, StridedOperand(b, node.input(0)));
  SP_ASSIGN_OR_RETURN(auto ko, StridedOperand(b, node.input(1)));
  SP_ASSIGN_OR_RETURN(auto vo, StridedOperand(b, node.input(2)));
  qo.second = Logical(qo.second, bshd);
  ko.second = Logical(ko.second, bshd);
  vo.second = Logical(vo.second, bshd);
  step->q = qo.first;
  step->k = ko.first;
  step->v = vo.first;
  step->q_row = qo.second[r - 2];
  step->q_col = qo.second[r - 1];
  step->k_t = kt ? ko.second[r - 2] : ko.second[r - 1];
  step->k_j = kt ? ko.second[r - 1] : ko.second[r - 2];
  step->v_row = vo.second[r - 2];
  step->v_col = vo.second[r - 1];
  step->pack_v = step->v_col != 1 && step->dv != 1;
  if (node.input(3)) {
    SP_ASSIGN_OR_RETURN(step->mask, b.PlainInput(node.input(3)));
  }
  const dnnl::memory::desc out_md = OutputLayout(node, ys_stored);
  dims y_st;
  StridedLayout(out_md, &y_st);
  y_st = Logical(y_st, bshd);
  step->y_row = y_st[r - 2];
  for (int64_t bi = 0; bi < step->batch; ++bi) {
    step->q_off.push_back(LeadOffset(bi, lead, qo.second));
    step->k_off.push_back(LeadOffset(bi, lead, ko.second));
    step->v_off.push_back(LeadOffset(bi, lead, vo.second));
    step->y_off.push_back(LeadOffset(bi, lead, y_st));
    step->m_off.push_back(node.input(3) ? LeadOffset(bi, lead, mask_st) : 0);
  }
  step->out = b.Output(node.output(0), &out_md);
  step->scratch_floats = step->d * step->sk + (step->pack_v ? step->sk * step->dv : 0) + 4 * step->sk;
  step->scratch_floats = (step->scratch_floats + 15) / 16 * 16;  // each thread's part 64-byte aligned
  step->scratch = b.Scratch(static_cast<size_t>(step->threads * step->scratch_floats) * sizeof(float));
  b.AddStep(std::move(step), StrCat("Attention ", node.name, " [cpu]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kAttentionFamily{"cpu:attention", AcceptsAttention, BuildAttention};

}  // namespace sampan::cpu
