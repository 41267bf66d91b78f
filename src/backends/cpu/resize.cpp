// Resize in mode "nearest" (float32): a separable gather. Which input index each
// output index reads, per axis, is found once per program by running the
// reference Resize on a probe whose values are their own flat indices (so the
// coordinate transformation, nearest_mode, scales/sizes/axes handling are
// exactly the reference's); the result is checked to be separable and then
// applied as per-axis tables: rows over the threads, the last axis a table gather.
// Other modes, tf_crop_and_resize (extrapolation) and non-constant
// scales/sizes/roi run the reference kernel.
#include "backends/cpu/kernels.h"
#include "ops/run_node.h"

namespace sampan::cpu {
namespace {

bool AcceptsResize(const ir::Node& node) {
  if (!node.domain.empty() || node.op_type != "Resize" || !node.input(0) || !node.output(0)) return false;
  if (node.input(0)->type.dtype != DType::kFloat32 || node.output(0)->type.dtype != DType::kFloat32) return false;
  return node.attr_string("mode", "nearest") == "nearest" &&
         node.attr_string("coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize";
}

class ResizeNearestStep : public Kernel {
 public:
  int in = -1, out = -1;
  Shape out_shape;
  std::vector<int64_t> in_strides;           // input element strides
  std::vector<std::vector<int64_t>> tables;  // per axis: output index -> input index
  std::vector<int64_t> last;                 // last-axis table, already times its stride
  Status Bind(const std::vector<void*>& ptrs) override {
    x_ = static_cast<const float*>(ptrs[static_cast<size_t>(in)]);
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    const size_t r = out_shape.size();
    const int64_t inner = out_shape[r - 1];
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < r; ++i) rows *= out_shape[i];
    ParallelFor(ctx, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t rem = row, off = 0;
        for (size_t d = r - 1; d-- > 0;) {
          off += tables[d][static_cast<size_t>(rem % out_shape[d])] * in_strides[d];
          rem /= out_shape[d];
        }
        const float* src = x_ + off;
        float* dst = y_ + row * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] = src[last[static_cast<size_t>(i)]];
      }
    });
    return Status::Ok();
  }

 private:
  const float* x_ = nullptr;
  float* y_ = nullptr;
};

Status BuildResize(ProgramBuilder& b, const ir::Node& node, int64_t opset) {
  const Shape is = b.state(node.input(0)).shape, os = b.state(node.output(0)).shape;
  const size_t r = is.size();
  if (r == 0 || os.size() != r || NumElements(os) == 0 || NumElements(is) == 0) return Unsupported("shape");
  if (NumElements(is) > (int64_t{1} << 24)) return Unsupported("probe too large");  // flat indices exact in float
  std::vector<const Tensor*> args{nullptr};
  for (size_t k = 1; k < node.num_inputs(); ++k) {
    const ir::Value* v = node.input(k);
    if (v == nullptr) {
      args.push_back(nullptr);
      continue;
    }
    if (b.state(v).known == nullptr) return Unsupported("roi/scales/sizes not constant");
    args.push_back(b.state(v).known);
  }
  Tensor probe = Tensor::Alloc(DType::kFloat32, is);
  float* p = probe.mutable_data<float>();
  for (int64_t i = 0; i < probe.numel(); ++i) p[i] = static_cast<float>(i);
  args[0] = &probe;
  std::vector<Tensor> outs;
  if (!ops::RunNode(node, opset, args, &outs).ok() || outs.empty() || outs[0].shape() != os)
    return Unsupported("probe");
  const float* src = outs[0].data<float>();
  std::vector<int64_t> ist(r, 1), ost(r, 1);
  for (size_t i = r; i-- > 1;) {
    ist[i - 1] = ist[i] * is[i];
    ost[i - 1] = ost[i] * os[i];
  }
  auto step = std::make_unique<ResizeNearestStep>();
  step->out_shape = os;
  step->in_strides = ist;
  step->tables.resize(r);
  // Axis d's table: the source of output element (0, ..., o_d, ..., 0).
  for (size_t d = 0; d < r; ++d)
    for (int64_t o = 0; o < os[d]; ++o) {
      const int64_t flat = static_cast<int64_t>(src[o * ost[d]]);
      const int64_t idx = (flat / ist[d]) % is[d];
      if (flat != idx * ist[d]) return Unsupported("not separable");
      step->tables[d].push_back(idx);
    }
  // Separable: every output element must read sum_d table_d[o_d] * stride_d.
  for (int64_t o = 0; o < NumElements(os); ++o) {
    int64_t rem = o, want = 0;
    for (size_t d = r; d-- > 0;) {
      want += step->tables[d][static_cast<size_t>(rem % os[d])] * ist[d];
      rem /= os[d];
    }
    if (static_cast<int64_t>(src[o]) != want) return Unsupported("not separable");
  }
  for (int64_t i : step->tables[r - 1]) step->last.push_back(i * ist[r - 1]);
  SP_ASSIGN_OR_RETURN(step->in, b.PlainInput(node.input(0)));
  step->out = b.Output(node.output(0));
  b.AddStep(std::move(step), StrCat("Resize ", node.name, " [cpu nearest]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kResizeFamily{"cpu:resize", AcceptsResize, BuildResize};

}  // namespace sampan::cpu
