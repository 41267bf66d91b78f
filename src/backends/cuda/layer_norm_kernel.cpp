// Layer-norm family: LayerNormalization, RMSNormalization and sampan::AddLayerNorm.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/families.h"
#include "backends/cuda/fuse_quantized_outputs.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/layer_norm.h"
#include "ops/numpy_rounding.h"

namespace sampan::cuda {
namespace {

class LayerNormKernel : public NodeKernel {
 public:
  LayerNormKernel(FloatType t, int64_t rows, int64_t n, float eps, bool rms)
      : t_(t), rows_(rows), n_(n), eps_(eps), rms_(rms) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(
        LaunchLayerNorm(t_, in[0], in[1], in.size() > 2 ? in[2] : nullptr, out[0], rows_, n_, eps_, rms_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "layernorm"; }

 private:
  FloatType t_;
  int64_t rows_, n_;
  float eps_;
  bool rms_;
};

Result<KernelChoice> MakeLayerNorm(const ir::Node& node, const std::vector<KernelInput>& in) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  for (size_t i = 1; i < node.num_outputs(); ++i)
    if (node.output(i)) return Unsupported(node.Label(), ": mean/inv-std outputs run on the host");
  const Shape& x = in[0].shape;
  int64_t axis = node.attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  int64_t rows = 1, n = 1;
  for (size_t i = 0; i < x.size(); ++i) (static_cast<int64_t>(i) < axis ? rows : n) *= x[i];
  for (size_t i = 1; i < 3 && i < in.size(); ++i)
    if (in[i].present && (in[i].dtype != in[0].dtype || NumElements(in[i].shape) != n))
      return Unsupported(node.Label(), ": broadcast scale/bias run on the host");
  return KernelChoice{false, std::make_unique<LayerNormKernel>(t, rows, n, node.attr_float("epsilon", 1e-5f),
                                                               node.op_type == "RMSNormalization")};
}

// sampan::AddLayerNorm: LayerNorm(a + b) in one kernel when each operand is the output's
// rows or broadcast over whole leading dims (a row index r % rows); otherwise the sum is
// formed in the workspace first. Without b, a plain LayerNorm. With a quantized output, the
// kernel writes its float8 copy beside y (Float8Out).
class AddLayerNormKernel : public NodeKernel {
 public:
  AddLayerNormKernel(FloatType t, int64_t rows, int64_t n, float eps, bool has_b, int64_t a_rows, int64_t b_rows,
                     std::optional<StridedShape> sum, size_t sum_bytes, std::optional<Float8Out> q)
      : t_(t),
        rows_(rows),
        n_(n),
        eps_(eps),
        has_b_(has_b),
        a_rows_(a_rows),
        b_rows_(b_rows),
        sum_(sum),
        sum_bytes_(sum_bytes),
        q_(q) {}
  size_t workspace() const override { return sum_ ? sum_bytes_ : 0; }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* bias = in.size() > 3 ? in[3] : nullptr;
    Float8Out q;
    if (q_) {
      q = *q_;
      q.y = out[1];
    }
    if (!has_b_) {
      SP_CUDA(LaunchLayerNorm(t_, in[0], in[2], bias, out[0], rows_, n_, eps_, false, env.stream, q));
    } else if (sum_) {
      SP_CUDA(LaunchBinary(BinaryOp::kAdd, t_, in[0], in[1], env.workspace, *sum_, env.stream));
      SP_CUDA(LaunchLayerNorm(t_, env.workspace, in[2], bias, out[0], rows_, n_, eps_, false, env.stream, q));
    } else {
      SP_CUDA(
          LaunchAddLayerNorm(t_, in[0], a_rows_, in[1], b_rows_, in[2], bias, out[0], rows_, n_, eps_, env.stream, q));
    }
    return Status::Ok();
  }
  const char* family() const override { return "layernorm"; }

 private:
  FloatType t_;
  int64_t rows_, n_;
  float eps_;
  bool has_b_;
  int64_t a_rows_, b_rows_;
  std::optional<StridedShape> sum_;
  size_t sum_bytes_;
  std::optional<Float8Out> q_;
};

// Rows of `s` when, broadcast to `y`, it repeats whole rows of the first `axis` dims
// (leading 1s, then y's own dims) and matches y from `axis` on; -1 otherwise.
int64_t RepeatedRows(const Shape& s, const Shape& y, size_t axis) {
  if (s.size() > y.size()) return -1;
  Shape p(y.size() - s.size(), 1);
  p.insert(p.end(), s.begin(), s.end());
  int64_t rows = 1;
  bool prefix = true;
  for (size_t i = 0; i < y.size(); ++i) {
    if (i < axis && prefix && p[i] == 1) continue;
    prefix = false;
    if (p[i] != y[i]) return -1;
    if (i < axis) rows *= p[i];
  }
  return rows;
}

Result<KernelChoice> MakeAddLayerNorm(const ir::Node& node, const std::vector<KernelInput>& in,
                                      const std::vector<KernelOutput>& out) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  if (in.size() < 3 || !in[2].present) return Unsupported(node.Label(), ": AddLayerNorm without scale");
  for (size_t i = 1; i < in.size() && i < 4; ++i)
    if (in[i].present && in[i].dtype != in[0].dtype) return Unsupported(node.Label(), ": mixed types");
  std::optional<Float8Out> q;
  if (out.size() > 1 && in.size() > 4 && in[4].present) {
    SP_ASSIGN_OR_RETURN(Float8Out qo, Float8OutputParams(node, in[0].dtype, in[4], out[1].dtype));
    q = qo;
  }
  const Shape& y = out[0].shape;
  int64_t axis = node.attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(y.size());
  if (axis < 0 || axis > static_cast<int64_t>(y.size())) return Unsupported(node.Label(), ": axis");
  int64_t rows = 1, n = 1;
  for (size_t i = 0; i < y.size(); ++i) (static_cast<int64_t>(i) < axis ? rows : n) *= y[i];
  for (size_t i = 2; i < 4 && i < in.size(); ++i)
    if (in[i].present && NumElements(in[i].shape) != n)
      return Unsupported(node.Label(), ": broadcast scale/bias run on the host");
  const float eps = node.attr_float("epsilon", 1e-5f);
  const bool has_b = in[1].present;
  if (!has_b) {
    if (in[0].shape != y) return Unsupported(node.Label(), ": an input that broadcasts to the output");
    return KernelChoice{false,
                        std::make_unique<AddLayerNormKernel>(t, rows, n, eps, false, rows, 1, std::nullopt, 0, q)};
  }
  const int64_t a_rows = RepeatedRows(in[0].shape, y, static_cast<size_t>(axis));
  const int64_t b_rows = RepeatedRows(in[1].shape, y, static_cast<size_t>(axis));
  if (a_rows > 0 && b_rows > 0)
    return KernelChoice{
        false, std::make_unique<AddLayerNormKernel>(t, rows, n, eps, true, a_rows, b_rows, std::nullopt, 0, q)};
  SP_ASSIGN_OR_RETURN(StridedShape s,
                      MakeStrided(y, {BroadcastStrides(in[0].shape, y), BroadcastStrides(in[1].shape, y)}));
  const size_t bytes = static_cast<size_t>(NumElements(y)) * DTypeSize(in[0].dtype);
  return KernelChoice{false, std::make_unique<AddLayerNormKernel>(t, rows, n, eps, true, 1, 1, s, bytes, q)};
}

}  // namespace

Result<KernelChoice> MakeLayerNorm(const KernelRequest& r) {
  return MakeLayerNorm(r.node, r.in);
}
Result<KernelChoice> MakeAddLayerNorm(const KernelRequest& r) {
  return MakeAddLayerNorm(r.node, r.in, r.out);
}

}  // namespace sampan::cuda
