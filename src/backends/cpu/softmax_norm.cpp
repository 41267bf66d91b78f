// Softmax, LayerNormalization, sampan::AddLayerNorm (the residual sum and the norm in one pass
// over each row) and BatchNormalization (inference) in float32.
// Rows are independent, so each kernel splits rows over the engine's threads.
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec.h"

namespace sampan::cpu {
namespace {

int64_t Prod(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

// ---- softmax -----------------------------------------------------------------

bool AcceptsSoftmax(const ir::Node& node) {
  return node.domain.empty() && node.op_type == "Softmax" && AllFloat32(node);
}

class SoftmaxStep : public Kernel {
 public:
  int in = -1, out = -1;
  int64_t outer = 1, axis = 1, inner = 1;
  int scratch = -1;
  Status Bind(const std::vector<void*>& ptrs) override {
    x_ = static_cast<const float*>(ptrs[static_cast<size_t>(in)]);
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out)]);
    tmp_ = scratch >= 0 ? static_cast<float*>(ptrs[static_cast<size_t>(scratch)]) : nullptr;
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    if (inner == 1) {
      ParallelFor(ctx, outer, std::max<int64_t>(1, 4096 / std::max<int64_t>(axis, 1)), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) vec::SoftmaxRow(x_ + r * axis, y_ + r * axis, axis);
      });
      return Status::Ok();
    }
    // Strided softmax: gather each column into a row of scratch (one per outer slice).
    for (int64_t o = 0; o < outer; ++o) {
      const float* x = x_ + o * axis * inner;
      float* y = y_ + o * axis * inner;
      for (int64_t i = 0; i < inner; ++i) {
        for (int64_t a = 0; a < axis; ++a) tmp_[a] = x[a * inner + i];
        vec::SoftmaxRow(tmp_, tmp_ + axis, axis);
        for (int64_t a = 0; a < axis; ++a) y[a * inner + i] = tmp_[axis + a];
      }
    }
    return Status::Ok();
  }

 private:
  const float* x_ = nullptr;
  float* y_ = nullptr;
  float* tmp_ = nullptr;
};

Status BuildSoftmax(ProgramBuilder& b, const ir::Node& node, int64_t opset) {
  const Shape s = b.state(node.input(0)).shape;
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t axis = node.attr_int("axis", opset >= 13 ? -1 : 1);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return Unsupported("axis");
  auto step = std::make_unique<SoftmaxStep>();
  const size_t ax = static_cast<size_t>(axis);
  step->outer = Prod(s, 0, ax);
  if (opset >= 13) {
    step->axis = s[ax];
    step->inner = Prod(s, ax + 1, s.size());
  } else {  // opset < 13: softmax over the flattened [axis:] block
    step->axis = Prod(s, ax, s.size());
    step->inner = 1;
  }
  SP_ASSIGN_OR_RETURN(step->in, b.PlainInput(node.input(0)));
  step->out = b.Output(node.output(0));
  if (step->inner != 1) step->scratch = b.Scratch(static_cast<size_t>(2 * step->axis) * sizeof(float));
  b.AddStep(std::move(step), StrCat("Softmax ", node.name, " [cpu]"));
  return Status::Ok();
}

// ---- layer norm --------------------------------------------------------------

bool AcceptsLayerNorm(const ir::Node& node) {
  if (!node.domain.empty() || node.op_type != "LayerNormalization" || !AllFloat32(node)) return false;
  for (size_t k = 1; k < node.num_outputs(); ++k)
    if (node.output(k)) return false;  // Mean / InvStdDev outputs: reference kernel
  return true;
}

class LayerNormStep : public Kernel {
 public:
  int in = -1, out = -1, scale = -1, bias = -1;
  int64_t rows = 0, n = 0;
  float eps = 1e-5f;
  Status Bind(const std::vector<void*>& ptrs) override {
    x_ = static_cast<const float*>(ptrs[static_cast<size_t>(in)]);
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out)]);
    s_ = static_cast<const float*>(ptrs[static_cast<size_t>(scale)]);
    b_ = bias >= 0 ? static_cast<const float*>(ptrs[static_cast<size_t>(bias)]) : nullptr;
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    ParallelFor(ctx, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) vec::LayerNormRow(x_ + r * n, s_, b_, eps, y_ + r * n, n);
    });
    return Status::Ok();
  }

 private:
  const float* x_ = nullptr;
  float* y_ = nullptr;
  const float* s_ = nullptr;
  const float* b_ = nullptr;
};

Status BuildLayerNorm(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const Shape s = b.state(node.input(0)).shape;
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t axis = node.attr_int("axis", -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return Unsupported("axis");
  const int64_t n = Prod(s, static_cast<size_t>(axis), s.size());
  // Scale and bias must cover the normalised block exactly (no broadcasting inside it).
  for (size_t k = 1; k <= 2; ++k)
    if (node.input(k) && NumElements(b.state(node.input(k)).shape) != n) return Unsupported("affine shape");
  auto step = std::make_unique<LayerNormStep>();
  step->n = n;
  step->rows = NumElements(s) / std::max<int64_t>(n, 1);
  step->eps = node.attr_float("epsilon", 1e-5f);
  SP_ASSIGN_OR_RETURN(step->in, b.PlainInput(node.input(0)));
  SP_ASSIGN_OR_RETURN(step->scale, b.PlainInput(node.input(1)));
  if (node.input(2)) {
    SP_ASSIGN_OR_RETURN(step->bias, b.PlainInput(node.input(2)));
  }
  step->out = b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat("LayerNormalization ", node.name, " [cpu]"));
  return Status::Ok();
}

// ---- residual add + layer norm -----------------------------------------------

bool AcceptsAddLayerNorm(const ir::Node& node) {
  if (node.domain != ops::kSampanDomain || node.op_type != "AddLayerNorm" || !AllFloat32(node)) return false;
  if (node.num_inputs() > 4 && node.input(4)) return false;  // a quantized copy (YScale): reference kernel
  return !(node.num_outputs() > 1 && node.output(1));
}

// Y = LayerNorm(A + B) by rows of n. An operand of fewer rows than Y (broadcast along the
// leading dims: a position embedding [S, H] added to [N, S, H]) is read cyclically: row r
// reads its row r % rows.
class AddLayerNormStep : public Kernel {
 public:
  int a = -1, b = -1, out = -1, scale = -1, bias = -1;
  int64_t rows = 0, n = 0, a_rows = 1, b_rows = 1;
  float eps = 1e-5f;
  Status Bind(const std::vector<void*>& ptrs) override {
    a_ = static_cast<const float*>(ptrs[static_cast<size_t>(a)]);
    b_ = b >= 0 ? static_cast<const float*>(ptrs[static_cast<size_t>(b)]) : nullptr;
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out)]);
    s_ = static_cast<const float*>(ptrs[static_cast<size_t>(scale)]);
    bias_ = bias >= 0 ? static_cast<const float*>(ptrs[static_cast<size_t>(bias)]) : nullptr;
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    ParallelFor(ctx, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), [&](int64_t first, int64_t end) {
      for (int64_t r = first; r < end; ++r) {
        const float* x = a_ + (r % a_rows) * n;
        if (b_)
          vec::AddLayerNormRow(x, b_ + (r % b_rows) * n, s_, bias_, eps, y_ + r * n, n);
        else
          vec::LayerNormRow(x, s_, bias_, eps, y_ + r * n, n);
      }
    });
    return Status::Ok();
  }

 private:
  const float* a_ = nullptr;
  const float* b_ = nullptr;
  float* y_ = nullptr;
  const float* s_ = nullptr;
  const float* bias_ = nullptr;
};

// Rows of n an operand of shape `x` holds when it broadcasts into `y` along leading dims only
// (right-aligned, every dim before some p is 1 and every dim from p on is y's, p <= axis);
// 0 when it broadcasts otherwise.
int64_t CyclicRows(const Shape& x, const Shape& y, size_t axis, int64_t n) {
  if (x.size() > y.size() || n <= 0) return 0;
  const size_t off = y.size() - x.size();
  size_t p = y.size();  // first dim (of y) the operand spans
  for (size_t i = y.size(); i-- > 0;) {
    const int64_t d = i >= off ? x[i - off] : 1;
    if (d != y[i]) break;
    p = i;
  }
  for (size_t i = off; i < p; ++i)
    if (x[i - off] != 1) return 0;
  if (p > axis) return 0;
  return NumElements(x) / n;
}

Status BuildAddLayerNorm(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const Shape ys = b.state(node.output(0)).shape;
  const int64_t r = static_cast<int64_t>(ys.size());
  int64_t axis = node.attr_int("axis", -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return Unsupported(node.Label(), ": axis ", axis, " of a rank-", r, " output");
  const int64_t n = Prod(ys, static_cast<size_t>(axis), ys.size());
  const int64_t rows = NumElements(ys) / std::max<int64_t>(n, 1);
  for (size_t k = 2; k <= 3; ++k)
    if (node.input(k) && NumElements(b.state(node.input(k)).shape) != n)
      return Unsupported(node.Label(), ": input ", k, " does not hold the ", n, " values of the normalised block");
  auto step = std::make_unique<AddLayerNormStep>();
  step->rows = rows;
  step->n = n;
  step->eps = node.attr_float("epsilon", 1e-5f);
  for (size_t k = 0; k < 2; ++k) {
    if (!node.input(k)) continue;
    const int64_t cyc = CyclicRows(b.state(node.input(k)).shape, ys, static_cast<size_t>(axis), n);
    if (rows > 0 && cyc <= 0)
      return Unsupported(node.Label(), ": input ", k, " ", ShapeToString(b.state(node.input(k)).shape),
                         " broadcasts into ", ShapeToString(ys), " other than along its leading dims");
    (k == 0 ? step->a_rows : step->b_rows) = std::max<int64_t>(cyc, 1);
  }
  SP_ASSIGN_OR_RETURN(step->a, b.PlainInput(node.input(0)));
  if (node.input(1)) {
    SP_ASSIGN_OR_RETURN(step->b, b.PlainInput(node.input(1)));
  }
  SP_ASSIGN_OR_RETURN(step->scale, b.PlainInput(node.input(2)));
  if (node.input(3)) {
    SP_ASSIGN_OR_RETURN(step->bias, b.PlainInput(node.input(3)));
  }
  step->out = b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat("AddLayerNorm ", node.name, " [cpu]"));
  return Status::Ok();
}

// ---- batch norm --------------------------------------------------------------

bool AcceptsBatchNorm(const ir::Node& node) {
  if (!node.domain.empty() || node.op_type != "BatchNormalization" || !AllFloat32(node)) return false;
  if (node.attr_int("training_mode", 0) != 0) return false;
  for (size_t k = 1; k < node.num_outputs(); ++k)
    if (node.output(k)) return false;
  for (size_t k = 1; k <= 4; ++k)
    if (!node.input(k) || !node.input(k)->is_constant()) return false;
  return true;
}

class ChannelAffineStep : public Kernel {
 public:
  int in = -1, out = -1;
  int64_t n = 0, c = 0, inner = 0;
  std::vector<float> a, bias;
  Status Bind(const std::vector<void*>& ptrs) override {
    x_ = static_cast<const float*>(ptrs[static_cast<size_t>(in)]);
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    ParallelFor(ctx, n * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const float sa = a[static_cast<size_t>(r % c)], sb = bias[static_cast<size_t>(r % c)];
        const float* x = x_ + r * inner;
        float* y = y_ + r * inner;
        for (int64_t i = 0; i < inner; ++i) y[i] = x[i] * sa + sb;
      }
    });
    return Status::Ok();
  }

 private:
  const float* x_ = nullptr;
  float* y_ = nullptr;
};

Status BuildBatchNorm(ProgramBuilder& b, const ir::Node& node, int64_t) {
  const Shape s = b.state(node.input(0)).shape;
  if (s.size() < 2) return Unsupported("rank");
  const int64_t c = s[1];
  const Tensor* t[4];
  for (size_t k = 0; k < 4; ++k) {
    t[k] = b.state(node.input(k + 1)).known;
    if (t[k] == nullptr || t[k]->numel() != c) return Unsupported("parameters");
  }
  auto step = std::make_unique<ChannelAffineStep>();
  const float eps = node.attr_float("epsilon", 1e-5f);
  for (int64_t i = 0; i < c; ++i) {
    const double scale = ElementAsDouble(*t[0], i), bias = ElementAsDouble(*t[1], i);
    const double mean = ElementAsDouble(*t[2], i), var = ElementAsDouble(*t[3], i);
    const double k = scale / std::sqrt(var + static_cast<double>(eps));
    step->a.push_back(static_cast<float>(k));
    step->bias.push_back(static_cast<float>(bias - mean * k));
  }
  step->n = s[0];
  step->c = c;
  step->inner = Prod(s, 2, s.size());
  SP_ASSIGN_OR_RETURN(step->in, b.PlainInput(node.input(0)));
  step->out = b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat("BatchNormalization ", node.name, " [cpu]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kSoftmaxFamily{"cpu:softmax", AcceptsSoftmax, BuildSoftmax};
const KernelFamily kLayerNormFamily{"cpu:layernorm", AcceptsLayerNorm, BuildLayerNorm};
const KernelFamily kAddLayerNormFamily{"cpu:add_layernorm", AcceptsAddLayerNorm, BuildAddLayerNorm};
const KernelFamily kBatchNormFamily{"cpu:batchnorm", AcceptsBatchNorm, BuildBatchNorm};

}  // namespace sampan::cpu
