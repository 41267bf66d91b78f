// The fused CUDA attention kernel (backends/cuda/attention.cu) and the layer-norm kernels
// (layer_norm.cu: warp-per-row, block-per-row, with and without a residual) against the
// reference kernels, node by node: each case is one sampan::Attention / AddLayerNorm /
// LayerNormalization node prepared by cuda::MakeKernel and run on random inputs of its
// own type (FP16, BF16, FP32), compared with ops::RunNode on the same inputs.
// Covers S = 1, 7, 128, 200, 384 (tile edges), D = 20 .. 128, the bhsd, bshd and
// pre-transposed-K layouts, every mask broadcast pattern, fully masked and NaN rows.
// Without a GPU (or without the CUDA backend in the build) these tests skip and say why.
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/node_kernel.h"
#include "ops/run_node.h"
#include "passes/pass_test_util.h"
#include "runtime/backend.h"

namespace sampan::cuda {
namespace {

using testing::DeviceScope;

using passes::testing::MustParse;

using testing::AsF32;
using testing::Random;
using testing::TypeName;

struct DeviceResult {
  Tensor got, want;
  std::string family;
};

// Runs the single node of `graph_text` on the device (cuda::MakeKernel) and with its
// reference kernel; `inputs` in the node's input order (an undefined Tensor = absent).
// `tactic` > 0 selects that tactic first (it must be one the kernel offers).
Result<DeviceResult> RunOnDevice(const std::string& graph_text, const std::vector<Tensor>& inputs, int tactic = 0,
                                 std::vector<int>* candidates = nullptr) {
  auto g = MustParse(graph_text);
  if (g->nodes().size() != 1) return Internal("expected one node");
  const ir::Node& node = *g->nodes()[0];
  // Constants of the graph (a quantized output's scale) stand for their inputs, with host data.
  auto constant = [&](size_t i) -> const Tensor* {
    const ir::Value* v = node.input(i);
    return v != nullptr && v->is_constant() ? &v->data : nullptr;
  };
  std::vector<const Tensor*> ptrs;
  for (size_t i = 0; i < std::max(inputs.size(), node.num_inputs()); ++i) {
    const Tensor* c = constant(i);
    ptrs.push_back(c ? c : i < inputs.size() && inputs[i].defined() ? &inputs[i] : nullptr);
  }
  DeviceResult r;
  std::vector<Tensor> want;
  SP_RETURN_IF_ERROR(ops::RunNode(node, g->opset(), ptrs, &want));
  r.want = want[0];
  DeviceScope dev;
  if (cudaStreamCreate(&dev.stream) != cudaSuccess) return Internal("cudaStreamCreate");
  if (cublasLtCreate(&dev.lt) != CUBLAS_STATUS_SUCCESS) return Internal("cublasLtCreate");
  std::vector<KernelInput> kin;
  std::vector<const void*> din;
  for (size_t i = 0; i < ptrs.size(); ++i) {
    if (ptrs[i] == nullptr) {
      kin.push_back(KernelInput{});
      din.push_back(nullptr);
      continue;
    }
    const Tensor& t = *ptrs[i];
    kin.push_back(KernelInput{true, t.dtype(), t.shape(), constant(i)});
    SP_ASSIGN_OR_RETURN(void* p, dev.Alloc(t.nbytes()));
    if (cudaMemcpy(p, t.raw(), t.nbytes(), cudaMemcpyHostToDevice) != cudaSuccess) return Internal("upload");
    din.push_back(p);
  }
  RunEnv env{dev.stream, dev.lt, nullptr, nullptr, 0, nullptr};
  SP_ASSIGN_OR_RETURN(
      KernelChoice choice,
      MakeKernel(node, g->opset(), kin, {KernelOutput{r.want.dtype(), r.want.shape()}}, KernelOptions{}, env));
  if (!choice.kernel) return Internal("no device kernel (a view)");
  if (candidates) *candidates = choice.kernel->Candidates();
  if (tactic > 0) {
    const auto c = choice.kernel->Candidates();
    if (std::find(c.begin(), c.end(), tactic) == c.end()) return Internal("tactic ", tactic, " is not offered");
    SP_RETURN_IF_ERROR(choice.kernel->Select(tactic));
  }
  r.family = choice.kernel->family();
  SP_ASSIGN_OR_RETURN(void* out, dev.Alloc(r.want.nbytes()));
  // NaN-fill the output so rows the kernel never writes cannot pass as zeros.
  if (cudaMemset(out, 0xff, r.want.nbytes()) != cudaSuccess) return Internal("memset");
  env.workspace_bytes = choice.kernel->workspace();
  if (env.workspace_bytes > 0) {
    SP_ASSIGN_OR_RETURN(env.workspace, dev.Alloc(env.workspace_bytes));
  }
  SP_RETURN_IF_ERROR(choice.kernel->Run(env, din, {out}));
  cudaError_t err = cudaStreamSynchronize(dev.stream);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) return Internal(node.Label(), ": kernel failed: ", cudaGetErrorString(err));
  r.got = Tensor::Alloc(r.want.dtype(), r.want.shape());
  if (cudaMemcpy(r.got.mutable_raw(), out, r.want.nbytes(), cudaMemcpyDeviceToHost) != cudaSuccess)
    return Internal("download");
  return r;
}

struct Tolerance {
  double rel_l2, atol, rtol;
};
Tolerance TolFor(DType t) {
  if (t == DType::kFloat16) return {5e-3, 5e-3, 2e-2};
  if (t == DType::kBFloat16) return {2e-2, 2e-2, 5e-2};
  return {1e-4, 1e-4, 1e-3};
}

// Relative L2 error, elements outside atol + rtol * |want|, NaN mismatches.
void ExpectClose(const DeviceResult& r, DType t, const std::string& what) {
  ASSERT_EQ(r.got.shape(), r.want.shape()) << what;
  const Tensor g = AsF32(r.got), w = AsF32(r.want);
  const Tolerance tol = TolFor(t);
  double num = 0, den = 0;
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double x = g.data<float>()[i], y = w.data<float>()[i];
    if (std::isnan(x) || std::isnan(y) || std::fabs(x - y) > tol.atol + tol.rtol * std::fabs(y)) {
      if (first_bad < 0) first_bad = i;
      ++bad;
    }
    if (!std::isnan(x) && !std::isnan(y)) {
      num += (x - y) * (x - y);
      den += y * y;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << w.numel() << " elements off, first at " << first_bad << " ("
                    << (first_bad >= 0 ? g.data<float>()[first_bad] : 0.f) << " vs "
                    << (first_bad >= 0 ? w.data<float>()[first_bad] : 0.f) << ")";
  EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), tol.rel_l2) << what;
}

// ---------------------------------------------------------------- attention

enum class Layout { kBhsd, kBshd, kBhsdKeyT };
const char* LayoutName(Layout l) {
  return l == Layout::kBhsd ? "bhsd" : l == Layout::kBshd ? "bshd" : "bhsd_kt";
}

std::string Dims(const Shape& s) {
  std::string out;
  for (int64_t d : s) {
    if (!out.empty()) out += ',';
    out += std::to_string(d);
  }
  return out;
}

struct AttentionCase {
  DType dt;
  Layout layout;
  int64_t b, h, sq, sk, d, dv;
  Shape mask;  // empty: no mask; else broadcast against [B, H, Sq, Sk]
  // Fully masked or NaN rows written into the mask: (mask batch index, row) pairs, per pattern below.
  std::string name() const {
    return StrCat(TypeName(dt), " ", LayoutName(layout), " B", b, " H", h, " Sq", sq, " Sk", sk, " D", d,
                  dv != d ? StrCat(" Dv", dv) : std::string(), " mask[", Dims(mask), "]");
  }
};

// The stored shapes of Q, K, V for a case.
void Shapes(const AttentionCase& c, Shape* q, Shape* k, Shape* v) {
  switch (c.layout) {
    case Layout::kBhsd:
      *q = {c.b, c.h, c.sq, c.d};
      *k = {c.b, c.h, c.sk, c.d};
      *v = {c.b, c.h, c.sk, c.dv};
      break;
    case Layout::kBshd:
      *q = {c.b, c.sq, c.h, c.d};
      *k = {c.b, c.sk, c.h, c.d};
      *v = {c.b, c.sk, c.h, c.dv};
      break;
    case Layout::kBhsdKeyT:
      *q = {c.b, c.h, c.sq, c.d};
      *k = {c.b, c.h, c.d, c.sk};
      *v = {c.b, c.h, c.sk, c.dv};
      break;
  }
}

std::string AttentionGraph(const AttentionCase& c, const Shape& q, const Shape& k, const Shape& v) {
  const char* t = TypeName(c.dt);
  const std::string attrs =
      StrCat("{scale=", 1.0 / std::sqrt(static_cast<double>(c.d)), c.layout == Layout::kBshd ? ", layout=\"bshd\"" : "",
             c.layout == Layout::kBhsdKeyT ? ", k_transposed=1" : "", "}");
  const std::string mask_in = c.mask.empty() ? "" : StrCat(", m: ", t, "[", Dims(c.mask), "]");
  return StrCat("opset 17\nopset sampan 1\ngraph g (q: ", t, "[", Dims(q), "], k: ", t, "[", Dims(k), "], v: ", t, "[",
                Dims(v), "]", mask_in, ") -> (y) {\n  y = sampan::Attention(q, k, v", c.mask.empty() ? "" : ", m", ") ",
                attrs, "\n}\n");
}

// An additive mask in [-2, 0] with every 5th key (from key 3) at -inf: finite rows stay finite.
Tensor RandomMask(DType dt, const Shape& shape, uint64_t seed) {
  Tensor m = Random(DType::kFloat32, shape, seed, -2.f, 0.f);
  const int64_t cols = shape.back();
  for (int64_t i = 0; i < m.numel(); ++i)
    if (cols > 1 && (i % cols) % 5 == 3) m.mutable_data<float>()[i] = -std::numeric_limits<float>::infinity();
  return *CastTensor(m, dt);
}

DeviceResult RunAttentionCase(const AttentionCase& c, uint64_t seed, const Tensor* mask_override = nullptr,
                              int tactic = 0, std::vector<int>* candidates = nullptr) {
  Shape qs, ks, vs;
  Shapes(c, &qs, &ks, &vs);
  std::vector<Tensor> in = {Random(c.dt, qs, seed, -2.f, 2.f), Random(c.dt, ks, seed + 1, -2.f, 2.f),
                            Random(c.dt, vs, seed + 2)};
  if (!c.mask.empty()) in.push_back(mask_override ? *mask_override : RandomMask(c.dt, c.mask, seed + 3));
  auto r = RunOnDevice(AttentionGraph(c, qs, ks, vs), in, tactic, candidates);
  EXPECT_TRUE(r.ok()) << c.name() << " tactic " << tactic << ": " << r.status().ToString();
  return r.ok() ? *r : DeviceResult{};
}

// Mask shapes the kernels support, for logical scores [B, H, Sq, Sk].
std::vector<Shape> MaskPatterns(int64_t b, int64_t h, int64_t sq, int64_t sk) {
  return {{}, {b, 1, 1, sk}, {b, 1, sq, sk}, {b, h, sq, sk}, {sq, sk}, {sk}, {b, 1, sq, 1}, {h, sq, sk}};
}

TEST(CudaFusedAttention, MatchesReferenceAcrossSequenceLengths) {
  SKIP_WITHOUT_GPU();
  const Layout layouts[] = {Layout::kBhsd, Layout::kBshd, Layout::kBhsdKeyT};
  int i = 0;
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (int64_t d : {64, 128})
      for (int64_t s : {1, 7, 128, 200, 384}) {
        const int64_t b = 2, h = s >= 200 ? 2 : 3;
        const auto masks = MaskPatterns(b, h, s, s);
        AttentionCase c{dt, layouts[i % 3], b, h, s, s, d, d, masks[static_cast<size_t>(i % 7)]};
        ++i;
        const DeviceResult r = RunAttentionCase(c, 100 + static_cast<uint64_t>(i));
        if (!r.got.defined()) continue;
        EXPECT_EQ(r.family, "fused attention") << c.name();
        ExpectClose(r, dt, c.name());
      }
}

// Every tactic the builder may record (2, 4 or 8 query warps per block, those that differ
// for Sq) computes the same attention: ViT's 197 tokens (partial last block), BERT's 128
// with a key-padding mask, a short query against long keys.
TEST(CudaFusedAttention, EveryTacticMatchesReference) {
  SKIP_WITHOUT_GPU();
  const AttentionCase cases[] = {
      {DType::kFloat16, Layout::kBshd, 2, 3, 197, 197, 64, 64, {}},
      {DType::kFloat16, Layout::kBshd, 2, 2, 128, 128, 64, 64, {2, 1, 1, 128}},
      {DType::kBFloat16, Layout::kBhsd, 1, 2, 40, 300, 128, 128, {1, 2, 40, 300}},
  };
  uint64_t seed = 900;
  for (const AttentionCase& c : cases) {
    std::vector<int> tactics;
    RunAttentionCase(c, seed, nullptr, 0, &tactics);
    EXPECT_GE(tactics.size(), c.sq > 64 ? 3u : 2u) << c.name();
    for (int t : tactics) {
      const DeviceResult r = RunAttentionCase(c, seed, nullptr, t);
      if (!r.got.defined()) continue;
      ExpectClose(r, c.dt, StrCat(c.name(), " tactic ", t));
    }
    seed += 10;
  }
}

// `text` (AttentionGraph) with a quantized output: YScale `scale` (a constant), output_dtype
// and saturate as given.
std::string QuantizedAttentionGraph(const std::string& text, bool has_mask, int out_dtype, int saturate,
                                    const std::string& scale) {
  std::string g = text;
  const std::string call = has_mask ? "(q, k, v, m)" : "(q, k, v)";
  const size_t at = g.find(call);
  g.replace(at, call.size(), has_mask ? "(q, k, v, m, ys)" : "(q, k, v, _, ys)");
  g.insert(g.find("}\n", at), StrCat(", output_dtype=", out_dtype, ", saturate=", saturate));
  g.insert(g.find("{\n") + 2, StrCat("  ys = ", scale, "\n"));
  return g;
}

// A quantized output (sampan::Attention's YScale, FP8 builds' FuseAttentionQuantize) holds
// QuantizeLinear of the kernel's own output bit for bit: for every tactic, e4m3fn and e5m2, saturating or not (values
// past the float8 range then give NaN codes), an f32 scale over f16/bf16 operands, a head size that is not a multiple
// of 8 (byte stores), and f32 on the unfused path (a quantize pass after the products).
TEST(CudaFusedAttention, QuantizedOutputIsQuantizeLinearOfItsOutput) {
  SKIP_WITHOUT_GPU();
  struct QuantCase {
    AttentionCase c;
    int out, saturate;
    const char* scale;
  };
  const QuantCase cases[] = {
      {{DType::kFloat16, Layout::kBshd, 8, 12, 128, 128, 64, 64, {8, 1, 1, 128}}, 17, 1, "const f16[] {0.004}"},
      {{DType::kBFloat16, Layout::kBhsd, 3, 2, 200, 200, 128, 128, {3, 1, 200, 200}}, 19, 0, "const f32[] {0.03}"},
      {{DType::kFloat16, Layout::kBhsdKeyT, 2, 3, 70, 49, 40, 40, {70, 49}}, 17, 0, "const f32[] {0.002}"},
      {{DType::kFloat32, Layout::kBhsd, 2, 2, 33, 17, 16, 16, {}}, 17, 1, "const f32[] {0.01}"},
  };
  uint64_t seed = 1500;
  for (const QuantCase& qc : cases) {
    const AttentionCase& c = qc.c;
    Shape qs, ks, vs;
    Shapes(c, &qs, &ks, &vs);
    std::vector<Tensor> in = {Random(c.dt, qs, seed, -2.f, 2.f), Random(c.dt, ks, seed + 1, -2.f, 2.f),
                              Random(c.dt, vs, seed + 2)};
    if (!c.mask.empty()) in.push_back(RandomMask(c.dt, c.mask, seed + 3));
    const std::string plain = AttentionGraph(c, qs, ks, vs);
    const std::string quant = QuantizedAttentionGraph(plain, !c.mask.empty(), qc.out, qc.saturate, qc.scale);
    std::vector<int> tactics;
    auto first = RunOnDevice(plain, in, 0, &tactics);
    ASSERT_TRUE(first.ok()) << c.name() << ": " << first.status().ToString();
    if (tactics.empty()) tactics.push_back(0);  // the unfused path has none
    for (int t : tactics) {
      const std::string what = StrCat(c.name(), " tactic ", t, " output_dtype ", qc.out, " saturate ", qc.saturate);
      auto f = RunOnDevice(plain, in, t);
      auto q = RunOnDevice(quant, in, t);
      ASSERT_TRUE(f.ok()) << what << ": " << f.status().ToString();
      ASSERT_TRUE(q.ok()) << what << ": " << q.status().ToString();
      EXPECT_EQ(q->family, c.dt == DType::kFloat32 ? "attention" : "fused attention") << what;
      ExpectClose(*f, c.dt, what);
      ASSERT_EQ(q->got.dtype(), qc.out == 17 ? DType::kFloat8E4M3FN : DType::kFloat8E5M2) << what;
      const std::string qtext =
          StrCat("opset 21\nopset sampan 1\ngraph g (x: ", TypeName(c.dt), "[", Dims(f->got.shape()),
                 "]) -> (y) {\n  ys = ", qc.scale, "\n  y = sampan::QuantizeLinear(x, ys) {output_dtype=", qc.out,
                 ", saturate=", qc.saturate, "}\n}\n");
      auto want = passes::testing::RunReference(MustParse(qtext), {{"x", f->got}});
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      ASSERT_EQ((*want)[0].nbytes(), q->got.nbytes()) << what;
      const auto* a = static_cast<const uint8_t*>(q->got.raw());
      const auto* b = static_cast<const uint8_t*>((*want)[0].raw());
      int64_t diff = 0, first_diff = -1;
      for (size_t i = 0; i < q->got.nbytes(); ++i)
        if (a[i] != b[i] && diff++ == 0) first_diff = static_cast<int64_t>(i);
      EXPECT_EQ(diff, 0) << what << ": " << diff << " codes differ from QuantizeLinear of the float output, first at "
                         << first_diff << " (" << int(first_diff >= 0 ? a[first_diff] : 0) << " vs "
                         << int(first_diff >= 0 ? b[first_diff] : 0) << ")";
    }
    seed += 10;
  }
}

TEST(CudaFusedAttention, EveryMaskPattern) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (int64_t s : {7, 130})
      for (Layout l : {Layout::kBhsd, Layout::kBshd}) {
        int p = 0;
        for (const Shape& m : MaskPatterns(2, 3, s, s)) {
          AttentionCase c{dt, l, 2, 3, s, s, 64, 64, m};
          const DeviceResult r = RunAttentionCase(c, 7 + static_cast<uint64_t>(p++));
          if (!r.got.defined()) continue;
          EXPECT_EQ(r.family, "fused attention") << c.name();
          ExpectClose(r, dt, c.name());
        }
      }
}

// Rows whose logits are all -inf, or contain a NaN, give zeros (the reference's and
// torch's NaN-guarded semantics); rows masked in one key tile only are ordinary rows.
TEST(CudaFusedAttention, FullyMaskedAndNaNRowsGiveZeros) {
  SKIP_WITHOUT_GPU();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (Layout l : {Layout::kBhsd, Layout::kBshd, Layout::kBhsdKeyT}) {
      const int64_t b = 2, h = 2, s = 130;  // keys 0..63, 64..127, 128..129: three tiles
      AttentionCase c{dt, l, b, h, s, s, 64, 64, {b, 1, s, s}};
      Tensor m = Random(DType::kFloat32, c.mask, 3, -1.f, 0.f);
      float* pm = m.mutable_data<float>();
      auto at = [&](int64_t bi, int64_t i, int64_t j) -> float& { return pm[(bi * s + i) * s + j]; };
      for (int64_t j = 0; j < s; ++j) {
        at(1, 2, j) = ninf;                // batch 1, row 2: fully masked
        at(0, 70, j) = ninf;               // batch 0, row 70 (second query tile): fully masked
        if (j < 64) at(0, 4, j) = ninf;    // only the first key tile masked
        if (j >= 64) at(0, 5, j) = ninf;   // only later tiles masked
        if (j != 129) at(1, 6, j) = ninf;  // one key left, in the last partial tile
      }
      at(0, 3, 1) = std::numeric_limits<float>::quiet_NaN();  // a NaN logit: row 3 of batch 0 is zeros
      const Tensor mask = *CastTensor(m, dt);
      const DeviceResult r = RunAttentionCase(c, 11, &mask);
      if (!r.got.defined()) continue;
      EXPECT_EQ(r.family, "fused attention") << c.name();
      ExpectClose(r, dt, c.name());
      const Tensor g = AsF32(r.got), w = AsF32(r.want);
      // Output element (batch bi, head hi, row i, channel ci) in the stored layout.
      auto out = [&](const Tensor& t, int64_t bi, int64_t hi, int64_t i, int64_t ci) {
        return l == Layout::kBshd ? t.data<float>()[((bi * s + i) * h + hi) * 64 + ci]
                                  : t.data<float>()[((bi * h + hi) * s + i) * 64 + ci];
      };
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t ci = 0; ci < 64; ++ci) {
          for (auto [bi, i] : {std::pair<int64_t, int64_t>{1, 2}, {0, 70}, {0, 3}}) {
            EXPECT_EQ(out(w, bi, hi, i, ci), 0.f) << "reference row " << bi << "," << i;
            EXPECT_EQ(out(g, bi, hi, i, ci), 0.f) << c.name() << ": row " << bi << "," << i << " head " << hi;
          }
        }
    }
}

TEST(CudaFusedAttention, LayoutsHeadSizesAndCrossAttention) {
  SKIP_WITHOUT_GPU();
  const DType h16 = DType::kFloat16, b16 = DType::kBFloat16;
  const std::vector<AttentionCase> cases = {
      {h16, Layout::kBhsdKeyT, 2, 2, 200, 200, 64, 64, {2, 1, 1, 200}},
      {b16, Layout::kBhsdKeyT, 1, 3, 7, 130, 128, 128, {}},
      {b16, Layout::kBshd, 2, 4, 77, 77, 32, 32, {2, 1, 1, 77}},
      {h16, Layout::kBshd, 2, 2, 130, 130, 80, 80, {2, 1, 130, 130}},  // 80 runs as 128, zero padded
      {h16, Layout::kBhsd, 2, 2, 33, 33, 20, 20, {33, 33}},            // head size not a multiple of 8
      {h16, Layout::kBshd, 1, 2, 9, 17, 20, 20, {1, 2, 9, 17}},
      {b16, Layout::kBhsd, 2, 2, 7, 384, 128, 128, {2, 1, 7, 384}},  // Sq != Sk
      {h16, Layout::kBshd, 2, 2, 384, 7, 64, 64, {2, 1, 384, 7}},
      {h16, Layout::kBhsd, 1, 1, 1, 1, 64, 64, {}},
      {h16, Layout::kBhsd, 3, 2, 65, 65, 16, 16, {3, 2, 65, 65}},
  };
  int i = 0;
  for (const AttentionCase& c : cases) {
    const DeviceResult r = RunAttentionCase(c, 500 + static_cast<uint64_t>(i++));
    if (!r.got.defined()) continue;
    EXPECT_EQ(r.family, "fused attention") << c.name();
    ExpectClose(r, c.dt, c.name());
  }
}

// Rank 3 ([B*H, S, D]) and rank 5 leading dims with a mask broadcast over the inner ones.
// Q, K and V packed in one [B, S, 3, H, D] tensor (the fuse_qkv rewrite's layout).
TEST(CudaFusedAttention, PackedQkv) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (int64_t s : {7, 128, 200})
      for (int64_t d : {32, 64}) {
        const int64_t b = 2, h = 3;
        const char* t = TypeName(dt);
        const std::string graph =
            StrCat("opset 17\nopset sampan 1\ngraph g (p: ", t, "[", b, ",", s, ",3,", h, ",", d, "], m: ", t, "[", b,
                   ",1,1,", s, "]) -> (y) {\n  y = sampan::Attention(p, _, _, m) {layout=\"bs3hd\", scale=",
                   1.0 / std::sqrt(static_cast<double>(d)), "}\n}\n");
        const std::string what = StrCat(t, " packed S", s, " D", d);
        auto r = RunOnDevice(graph, {Random(dt, {b, s, 3, h, d}, 40 + static_cast<uint64_t>(s), -2.f, 2.f), Tensor(),
                                     Tensor(), RandomMask(dt, {b, 1, 1, s}, 41)});
        ASSERT_TRUE(r.ok()) << what << ": " << r.status().ToString();
        EXPECT_EQ(r->family, "fused attention") << what;
        ExpectClose(*r, dt, what);
      }
}

TEST(CudaFusedAttention, OtherRanks) {
  SKIP_WITHOUT_GPU();
  struct RankCase {
    Shape q, k, v, m;
  };
  const std::vector<RankCase> cases = {
      {{6, 50, 64}, {6, 50, 64}, {6, 50, 64}, {6, 1, 50}},
      {{2, 2, 2, 40, 64}, {2, 2, 2, 40, 64}, {2, 2, 2, 40, 64}, {2, 1, 1, 1, 40}},
  };
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (const RankCase& rc : cases) {
      const char* t = TypeName(dt);
      const std::string text = StrCat("opset 17\nopset sampan 1\ngraph g (q: ", t, "[", Dims(rc.q), "], k: ", t, "[",
                                      Dims(rc.k), "], v: ", t, "[", Dims(rc.v), "], m: ", t, "[", Dims(rc.m),
                                      "]) -> (y) {\n  y = sampan::Attention(q, k, v, m) {scale=0.125}\n}\n");
      auto r = RunOnDevice(text, {Random(dt, rc.q, 1, -2.f, 2.f), Random(dt, rc.k, 2, -2.f, 2.f), Random(dt, rc.v, 3),
                                  RandomMask(dt, rc.m, 4)});
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->family, "fused attention") << Dims(rc.q);
      ExpectClose(*r, dt, StrCat(t, " q[", Dims(rc.q), "]"));
    }
}

// What the fused kernel does not cover runs the GEMM path, bshd included (copied to
// [B, H, S, D] and back in the workspace).
TEST(CudaFusedAttention, GemmPathForOtherShapesAndFp32) {
  SKIP_WITHOUT_GPU();
  const std::vector<AttentionCase> cases = {
      {DType::kFloat32, Layout::kBshd, 2, 3, 100, 100, 64, 64, {2, 1, 1, 100}},
      {DType::kFloat32, Layout::kBhsdKeyT, 2, 3, 33, 40, 32, 32, {2, 1, 33, 40}},
      {DType::kFloat16, Layout::kBshd, 2, 2, 50, 50, 64, 32, {2, 1, 1, 50}},  // Dv != D
      {DType::kFloat16, Layout::kBhsd, 1, 2, 20, 20, 192, 192, {}},           // D > 128
  };
  int i = 0;
  for (const AttentionCase& c : cases) {
    const DeviceResult r = RunAttentionCase(c, 900 + static_cast<uint64_t>(i++));
    if (!r.got.defined()) continue;
    EXPECT_EQ(r.family, "attention") << c.name();
    ExpectClose(r, c.dt, c.name());
  }
}

// ---------------------------------------------------------------- layer norm

struct NormCase {
  DType dt;
  Shape x, r;  // r empty: plain LayerNormalization
  bool bias;
};

TEST(CudaLayerNorm, AddLayerNormAndLayerNormMatchReference) {
  SKIP_WITHOUT_GPU();
  std::vector<NormCase> cases;
  for (DType dt : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    cases.push_back({dt, {4, 16, 768}, {4, 16, 768}, true});   // BERT-base rows, warp per row
    cases.push_back({dt, {2, 8, 1024}, {2, 8, 1024}, false});  // BERT-large, no bias
    cases.push_back({dt, {2, 8, 384}, {8, 384}, true});        // residual broadcast over the batch
    cases.push_back({dt, {2, 8, 384}, {2, 1, 384}, true});     // not whole rows: sum in the workspace
    cases.push_back({dt, {3, 5, 100}, {3, 5, 100}, true});     // n not a multiple of a vector: block per row
    cases.push_back({dt, {2, 3, 4096}, {2, 3, 4096}, true});   // longer than a warp holds
    cases.push_back({dt, {4, 16, 768}, {}, true});             // plain LayerNormalization
    cases.push_back({dt, {3, 7, 2048}, {}, false});
  }
  int seed = 0;
  for (const NormCase& c : cases) {
    const char* t = TypeName(c.dt);
    const int64_t n = c.x.back();
    const std::string scale = StrCat("sc: ", t, "[", n, "]"), bias = c.bias ? StrCat(", bi: ", t, "[", n, "]") : "";
    std::string text;
    std::vector<Tensor> in;
    in.reserve(4);
    in.push_back(Random(c.dt, c.x, static_cast<uint64_t>(seed), -3.f, 3.f));
    if (c.r.empty()) {
      text =
          StrCat("opset 17\ngraph g (x: ", t, "[", Dims(c.x), "], ", scale, bias,
                 ") -> (y) {\n  y = LayerNormalization(x, sc", c.bias ? ", bi" : "", ") {axis=-1, epsilon=1e-5}\n}\n");
    } else {
      text = StrCat("opset 17\nopset sampan 1\ngraph g (x: ", t, "[", Dims(c.x), "], r: ", t, "[", Dims(c.r), "], ",
                    scale, bias, ") -> (y) {\n  y = sampan::AddLayerNorm(x, r, sc", c.bias ? ", bi" : "",
                    ") {axis=-1, epsilon=1e-5}\n}\n");
      in.push_back(Random(c.dt, c.r, static_cast<uint64_t>(seed) + 1, -3.f, 3.f));
    }
    in.push_back(Random(c.dt, {n}, static_cast<uint64_t>(seed) + 2, 0.5f, 1.5f));
    if (c.bias) in.push_back(Random(c.dt, {n}, static_cast<uint64_t>(seed) + 3));
    seed += 4;
    const std::string what =
        StrCat(t, c.r.empty() ? " LayerNormalization" : " AddLayerNorm", " x[", Dims(c.x), "] r[", Dims(c.r), "]");
    auto r = RunOnDevice(text, in);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().ToString();
    EXPECT_EQ(r->family, "layernorm") << what;
    ExpectClose(*r, c.dt, what);
  }
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
