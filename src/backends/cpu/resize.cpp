// Resize in mode "nearest" (float32): a separable gather. Which input index each
// output index reads, per axis, is found once per program by running the
// reference Resize on a probe whose values are their own flat indices (so the
// coordinate transformation, nearest_mode, scales/sizes/axes handling are
// exactly the reference's); the result is checked to be separable and then
// applied as per-axis tables: rows over the threads, the last axis a table gather. A
// convolution's blocked (nChw16c) or channels-last output is resized in that layout, whole
// channel blocks copied at a time.
// Other modes, tf_crop_and_resize (extrapolation) and non-constant
// scales/sizes/roi run the reference kernel.
#include <cstring>

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

// The gather in memory order: outer physical axes (rows), then the innermost axis that
// resizes (a table gather), then `run` contiguous elements no table changes (1 in a plain
// layout; the channel block of nChw16c; all channels of nhwc).
class ResizeNearestStep : public Kernel {
 public:
  int in = -1, out = -1;
  std::vector<int64_t> outer_size;              // output sizes of the outer axes
  std::vector<std::vector<int64_t>> outer_src;  // per outer axis: output index -> input offset
  std::vector<int64_t> gather;                  // gather axis: output index -> input offset
  int64_t run = 1;
  Status Bind(const std::vector<void*>& ptrs) override {
    x_ = static_cast<const float*>(ptrs[static_cast<size_t>(in)]);
    y_ = static_cast<float*>(ptrs[static_cast<size_t>(out)]);
    return Status::Ok();
  }
  Status Run(const RunCtx& ctx) override {
    const int64_t inner = static_cast<int64_t>(gather.size());
    int64_t rows = 1;
    for (int64_t n : outer_size) rows *= n;
    const int64_t row_elems = inner * run;
    ParallelFor(ctx, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(row_elems, 1)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t rem = row, off = 0;
        for (size_t d = outer_size.size(); d-- > 0;) {
          off += outer_src[d][static_cast<size_t>(rem % outer_size[d])];
          rem /= outer_size[d];
        }
        const float* src = x_ + off;
        float* dst = y_ + row * row_elems;
        if (run == 1) {
          for (int64_t i = 0; i < inner; ++i) dst[i] = src[gather[static_cast<size_t>(i)]];
        } else {
          for (int64_t i = 0; i < inner; ++i)
            std::memcpy(dst + i * run, src + gather[static_cast<size_t>(i)], static_cast<size_t>(run) * sizeof(float));
        }
      }
    });
    return Status::Ok();
  }

 private:
  const float* x_ = nullptr;
  float* y_ = nullptr;
};

// Per logical axis, the input index each output index reads: from running the reference
// Resize on a probe of flat indices, checked to be separable. Unsupported otherwise.
Result<std::vector<std::vector<int64_t>>> NearestTables(const ir::Node& node, int64_t opset, const ProgramBuilder& b,
                                                        const Shape& is, const Shape& os) {
  const size_t r = is.size();
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
  std::vector<std::vector<int64_t>> tables(r);
  // Axis d's table: the source of output element (0, ..., o_d, ..., 0).
  for (size_t d = 0; d < r; ++d)
    for (int64_t o = 0; o < os[d]; ++o) {
      const int64_t flat = static_cast<int64_t>(src[o * ost[d]]);
      const int64_t idx = (flat / ist[d]) % is[d];
      if (flat != idx * ist[d]) return Unsupported("not separable");
      tables[d].push_back(idx);
    }
  // Separable: every output element must read sum_d table_d[o_d] * stride_d.
  for (int64_t o = 0; o < NumElements(os); ++o) {
    int64_t rem = o, want = 0;
    for (size_t d = r; d-- > 0;) {
      want += tables[d][static_cast<size_t>(rem % os[d])] * ist[d];
      rem /= os[d];
    }
    if (static_cast<int64_t>(src[o]) != want) return Unsupported("not separable");
  }
  return tables;
}

bool Identity(const std::vector<int64_t>& table, int64_t in_size) {
  if (static_cast<int64_t>(table.size()) != in_size) return false;
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i] != static_cast<int64_t>(i)) return false;
  return true;
}

Status BuildResize(ProgramBuilder& b, const ir::Node& node, int64_t opset) {
  const Shape is = b.state(node.input(0)).shape, os = b.state(node.output(0)).shape;
  const size_t r = is.size();
  if (r == 0 || os.size() != r || NumElements(os) == 0 || NumElements(is) == 0) return Unsupported("shape");
  if (NumElements(is) > (int64_t{1} << 24)) return Unsupported("probe too large");  // flat indices exact in float
  SP_ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> tables, NearestTables(node, opset, b, is, os));
  // A convolution's blocked or channels-last output stays in its layout when the channels are
  // not resized and every reader takes that layout (an FPN's upsampled levels going into Adds,
  // a Concat and convolutions): no reorder of the input before, nor of the larger output after.
  const dnnl::memory::desc in_md = b.state(node.input(0)).md;
  std::optional<dnnl::memory::desc> out_md;
  if (r >= 3 && Identity(tables[1], is[1]) && ReadersTakeBlockedLayout(b, node.output(0)))
    out_md = DenseLayoutLike(in_md, os);
  const dnnl::memory::desc md_in = out_md ? in_md : PlainDesc(DType::kFloat32, is);
  const dnnl::memory::desc md_out = out_md ? *out_md : PlainDesc(DType::kFloat32, os);
  const std::vector<PhysicalAxis> in_axes = PhysicalAxes(md_in), out_axes = PhysicalAxes(md_out);
  const std::vector<int64_t> in_strides = PhysicalStrides(md_in);
  if (in_axes.size() != out_axes.size()) return Unsupported("layout");
  // Per physical axis, output index -> input offset (a channel axis is never resized here).
  const size_t n = out_axes.size();
  std::vector<std::vector<int64_t>> src(n);
  std::vector<bool> identity(n);
  for (size_t k = 0; k < n; ++k) {
    const PhysicalAxis& a = out_axes[k];
    const bool channel_block = out_md && a.dim == 1;
    identity[k] = channel_block || Identity(tables[static_cast<size_t>(a.dim)], is[static_cast<size_t>(a.dim)]);
    for (int64_t o = 0; o < a.size; ++o)
      src[k].push_back((channel_block ? o : tables[static_cast<size_t>(a.dim)][static_cast<size_t>(o)]) *
                       in_strides[k]);
  }
  auto step = std::make_unique<ResizeNearestStep>();
  size_t g = n;  // the innermost axis that resizes; the ones inside it are copied as runs
  while (g > 0 && identity[g - 1]) {
    --g;
    step->run *= out_axes[g].size;
  }
  if (g == 0) {  // nothing resizes: one run
    step->gather = {0};
  } else {
    --g;
    step->gather = src[g];
    for (size_t k = 0; k < g; ++k) {
      step->outer_size.push_back(out_axes[k].size);
      step->outer_src.push_back(src[k]);
    }
  }
  if (out_md) {
    step->in = b.AnyInput(node.input(0), nullptr);
    step->out = b.Output(node.output(0), &md_out);
  } else {
    SP_ASSIGN_OR_RETURN(step->in, b.PlainInput(node.input(0)));
    step->out = b.Output(node.output(0));
  }
  b.AddStep(std::move(step), StrCat("Resize ", node.name, out_md ? " [cpu nearest in layout]" : " [cpu nearest]"));
  return Status::Ok();
}

}  // namespace

const KernelFamily kResizeFamily{"cpu:resize", AcceptsResize, BuildResize};

}  // namespace sampan::cpu
