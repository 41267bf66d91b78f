// Scan. Opsets 9, 11, 16, 19, 21, 23, 24, 25: inputs are N state values then M scan inputs
// (num_scan_inputs); the body runs once per slice of the scan inputs along scan_input_axes
// (scan_input_directions 1: last slice first), taking (state..., slice...) and yielding
// (state..., scan_out...); outputs are the N final states, then the K scan outputs, each
// the per-iteration values stacked along scan_output_axes (scan_output_directions 1: in
// reverse). Opset 8: a leading optional sequence_lens input and a batch axis 0 on every
// input and output; the scan axis is 1 and `directions` gives the input directions.
#include <cstring>

#include "ops/common.h"
#include "ops/control_flow.h"

namespace sampan::ops {
namespace {

struct ScanShape {
  const ir::Graph* body = nullptr;
  size_t first = 0;      //!< index of the first state input (1 at opset 8: after sequence_lens)
  size_t n = 0;          //!< state values
  size_t m = 0;          //!< scan inputs
  size_t k = 0;          //!< scan outputs
  bool batched = false;  //!< opset 8
  std::vector<int64_t> in_axes, in_dirs, out_axes, out_dirs;  //!< axes as given (may be negative)
};

Result<std::vector<int64_t>> ListAttr(const ir::Node& node, const char* key, size_t count, int64_t dflt) {
  std::vector<int64_t> v = node.attr_ints(key, std::vector<int64_t>(count, dflt));
  if (v.size() != count)
    return InvalidArgument(node.Label(), ": attribute '", key, "' has ", v.size(), " entries, expected ", count);
  return v;
}

Result<ScanShape> ShapeOf(const ir::Node& node, int64_t opset) {
  ScanShape s;
  s.body = node.subgraph("body");
  if (s.body == nullptr) return InvalidArgument(node.Label(), ": needs a graph attribute 'body'");
  SP_ASSIGN_OR_RETURN(int64_t m, node.required_int("num_scan_inputs"));
  s.batched = opset < 9;
  s.first = s.batched ? 1 : 0;
  const size_t explicit_inputs = node.num_explicit_inputs();
  if (m < 1 || static_cast<size_t>(m) + s.first > explicit_inputs)
    return InvalidArgument(node.Label(), ": num_scan_inputs is ", m, " but the node has ", explicit_inputs - s.first,
                           " state and scan inputs");
  s.m = static_cast<size_t>(m);
  s.n = explicit_inputs - s.first - s.m;
  const size_t body_in = s.body->inputs().size(), body_out = s.body->outputs().size();
  if (body_in != s.n + s.m)
    return InvalidArgument(node.Label(), ": body takes ", body_in, " inputs, expected ", s.n, " states + ", s.m,
                           " scan inputs");
  if (body_out < s.n)
    return InvalidArgument(node.Label(), ": body yields ", body_out, " outputs, expected at least its ", s.n,
                           " states");
  s.k = body_out - s.n;
  if (node.num_outputs() > s.n + s.k)
    return InvalidArgument(node.Label(), ": has ", node.num_outputs(), " outputs, its body gives ", s.n, " + ", s.k);
  if (s.batched) {
    SP_ASSIGN_OR_RETURN(s.in_dirs, ListAttr(node, "directions", s.m, 0));
    s.in_axes.assign(s.m, 0);
    s.out_axes.assign(s.k, 0);
    s.out_dirs.assign(s.k, 0);
  } else {
    SP_ASSIGN_OR_RETURN(s.in_axes, ListAttr(node, "scan_input_axes", s.m, 0));
    SP_ASSIGN_OR_RETURN(s.in_dirs, ListAttr(node, "scan_input_directions", s.m, 0));
    SP_ASSIGN_OR_RETURN(s.out_axes, ListAttr(node, "scan_output_axes", s.k, 0));
    SP_ASSIGN_OR_RETURN(s.out_dirs, ListAttr(node, "scan_output_directions", s.k, 0));
  }
  for (const auto* dirs : {&s.in_dirs, &s.out_dirs})
    for (int64_t d : *dirs)
      if (d != 0 && d != 1) return InvalidArgument(node.Label(), ": scan directions must be 0 or 1, got ", d);
  if (opset < 11) {
    for (const auto* axes : {&s.in_axes, &s.out_axes})
      for (int64_t a : *axes)
        if (a < 0) return InvalidArgument(node.Label(), ": negative scan axes need opset 11, got ", a);
  }
  return s;
}

// An axis in [-rank, rank) made non-negative; error otherwise.
Result<int64_t> NormalizeAxis(const ir::Node& node, const char* what, size_t i, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return InvalidArgument(node.Label(), ": ", what, " ", i, " is ", axis, " but the tensor has rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

Status InferScan(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  SP_ASSIGN_OR_RETURN(ScanShape s, ShapeOf(node, ctx.opset()));
  const int64_t batch_axes = s.batched ? 1 : 0;
  if (s.batched && ctx.has_input(0)) {
    if (ctx.input_dtype(0) != DType::kInt32) return ctx.Error("sequence_lens must be int32");
  }
  // Scan inputs: their slices go to the body; all must have the same length.
  ir::Dim length = ir::Dim::Unknown();
  ir::Dim batch = ir::Dim::Unknown();
  std::vector<InferInput> in(s.n + s.m);
  for (size_t j = 0; j < s.n + s.m; ++j) {
    const size_t i = s.first + j;
    if (!ctx.has_input(i)) return ctx.Error("input ", i, " is missing");
    in[j] = InferInput{true, ctx.input_dtype(i), std::nullopt, nullptr};
    const auto& dims = ctx.input_dims(i);
    if (!dims) continue;
    const int64_t rank = static_cast<int64_t>(dims->size());
    if (rank < batch_axes) return ctx.Error("input ", i, " must have a batch axis");
    if (batch_axes && (*dims)[0].known()) {
      if (batch.known() && batch.value != (*dims)[0].value)
        return ctx.Error("input ", i, " has batch size ", (*dims)[0].value, ", an earlier input ", batch.value);
      batch = (*dims)[0];
    }
    ir::Dims slice(dims->begin() + batch_axes, dims->end());
    if (j >= s.n) {
      const size_t q = j - s.n;
      SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, "scan_input_axes", q, s.in_axes[q], rank - batch_axes));
      if (s.batched && rank < 2) return ctx.Error("scan input ", q, " must have a batch and a sequence axis");
      const ir::Dim len = slice[static_cast<size_t>(axis)];
      if (len.known()) {
        if (length.known() && length.value != len.value)
          return ctx.Error("scan input ", q, " has ", len.value, " slices along axis ", s.in_axes[q],
                           " but an earlier scan input has ", length.value);
        length = len;
      }
      slice.erase(slice.begin() + axis);
    }
    in[j].dims = std::move(slice);
  }
  const std::vector<InferInput> captures = CaptureInputs(ctx);
  const std::string where = node.Label() + " body";
  std::vector<SubgraphOutput> out;
  for (int round = 0;; ++round) {
    SP_ASSIGN_OR_RETURN(out, InferSubgraph(*s.body, ctx.opset(), in, captures, where));
    bool stable = true;
    for (size_t j = 0; j < s.n; ++j) {
      if (out[j].dtype != DType::kUndefined && out[j].dtype != in[j].dtype)
        return ctx.Error("state ", j, " enters the body as ", DTypeName(in[j].dtype), " but the body yields ",
                         DTypeName(out[j].dtype));
      std::optional<ir::Dims> merged = round < 3 ? MergeDims(in[j].dims, out[j].dims) : std::nullopt;
      if (merged != in[j].dims) {
        in[j].dims = std::move(merged);
        stable = false;
      }
    }
    if (stable) break;
  }
  auto with_batch = [&](std::optional<ir::Dims> dims) -> std::optional<ir::Dims> {
    if (dims && s.batched) dims->insert(dims->begin(), batch);
    return dims;
  };
  for (size_t j = 0; j < s.n && j < ctx.num_outputs(); ++j) ctx.set_output(j, in[j].dtype, with_batch(in[j].dims));
  for (size_t q = 0; q < s.k && s.n + q < ctx.num_outputs(); ++q) {
    const SubgraphOutput& o = out[s.n + q];
    std::optional<ir::Dims> dims = o.dims;
    if (dims) {
      const int64_t r = static_cast<int64_t>(dims->size());
      SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, "scan_output_axes", q, s.out_axes[q], r + 1));
      dims->insert(dims->begin() + axis, length);
    }
    ctx.set_output(s.n + q, o.dtype, with_batch(std::move(dims)));
  }
  return Status::Ok();
}

// Where slice `index` along `axis` lies in a tensor of `shape` (outer x len x inner): `outer`
// blocks of `block` bytes, block o at whole + offset + o * stride and at slice + o * block.
struct SliceLayout {
  int64_t outer = 1;
  size_t block = 0, stride = 0, offset = 0;
};

SliceLayout LayoutOf(const Shape& shape, DType dtype, int64_t axis, int64_t index) {
  SliceLayout l;
  int64_t inner = 1;
  for (int64_t d = 0; d < axis; ++d) l.outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  l.block = static_cast<size_t>(inner) * DTypeSize(dtype);
  l.stride = l.block * static_cast<size_t>(shape[static_cast<size_t>(axis)]);
  l.offset = l.block * static_cast<size_t>(index);
  return l;
}

// Copies slice `index` along `axis` of `t` into a new tensor.
Tensor TakeSlice(const Tensor& t, int64_t axis, int64_t index) {
  Shape shape = t.shape();
  shape.erase(shape.begin() + axis);
  Tensor out = Tensor::Alloc(t.dtype(), shape);
  const SliceLayout l = LayoutOf(t.shape(), t.dtype(), axis, index);
  const char* src = static_cast<const char*>(t.raw()) + l.offset;
  char* dst = static_cast<char*>(out.mutable_raw());
  for (int64_t o = 0; l.block && o < l.outer; ++o) std::memcpy(dst + o * l.block, src + o * l.stride, l.block);
  return out;
}

// Writes `part` as slice `index` along `axis` of `out`.
void PutSlice(Tensor& out, const Tensor& part, int64_t axis, int64_t index) {
  const SliceLayout l = LayoutOf(out.shape(), out.dtype(), axis, index);
  const char* src = static_cast<const char*>(part.raw());
  char* dst = static_cast<char*>(out.mutable_raw()) + l.offset;
  for (int64_t o = 0; l.block && o < l.outer; ++o) std::memcpy(dst + o * l.stride, src + o * l.block, l.block);
}

// One unbatched scan: states and scan inputs in, final states and scan outputs out.
// `length`: iterations to run (opset 8 sequence_lens); `total`: slices along the axes (outputs
// past `length` stay zero).
Status ScanOnce(const KernelContext& ctx, const ScanShape& s, const std::vector<Tensor>& inputs, int64_t length,
                std::vector<Tensor>* results) {
  const ir::Node& node = ctx.node;
  std::vector<int64_t> in_axes(s.m);
  int64_t total = -1;
  for (size_t q = 0; q < s.m; ++q) {
    const Tensor& t = inputs[s.n + q];
    SP_ASSIGN_OR_RETURN(in_axes[q], NormalizeAxis(node, "scan_input_axes", q, s.in_axes[q], t.rank()));
    const int64_t len = t.dim(in_axes[q]);
    if (total >= 0 && len != total)
      return ctx.Error("scan input ", q, " has ", len, " slices along axis ", s.in_axes[q], ", an earlier one ", total);
    total = len;
  }
  if (length < 0 || length > total) length = total;
  const std::vector<const Tensor*> captures = CaptureTensors(ctx);
  const SubgraphRunner runner(*s.body, ctx.opset, node.Label() + " body");
  std::vector<Tensor> state(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(s.n));
  std::vector<Tensor> slices(s.m);
  std::vector<std::vector<Tensor>> parts(s.k);
  std::vector<const Tensor*> args(s.n + s.m);
  std::vector<Tensor> outs;
  for (int64_t it = 0; it < length; ++it) {
    for (size_t q = 0; q < s.m; ++q) {
      const int64_t index = s.in_dirs[q] == 1 ? length - 1 - it : it;
      slices[q] = TakeSlice(inputs[s.n + q], in_axes[q], index);
    }
    for (size_t j = 0; j < s.n; ++j) args[j] = &state[j];
    for (size_t q = 0; q < s.m; ++q) args[s.n + q] = &slices[q];
    SP_RETURN_IF_ERROR(runner.Run(args, captures, &outs));
    for (size_t j = 0; j < s.n; ++j) {
      if (outs[j].dtype() != state[j].dtype())
        return ctx.Error("state ", j, " entered as ", state[j].Describe(), " but the body yields ", outs[j].Describe());
      state[j] = std::move(outs[j]);
    }
    for (size_t q = 0; q < s.k; ++q) parts[q].push_back(std::move(outs[s.n + q]));
  }
  results->assign(state.begin(), state.end());
  for (size_t q = 0; q < s.k; ++q) {
    if (s.n + q >= ctx.outputs.size() || node.output(s.n + q) == nullptr) {
      results->push_back(Tensor());  // an output the node omits
      continue;
    }
    // Zero iterations: the per-iteration shape is what inference knows (unknown dims as 0).
    Shape part;
    DType dtype = DType::kUndefined;
    if (!parts[q].empty()) {
      part = parts[q][0].shape();
      dtype = parts[q][0].dtype();
    } else {
      const ir::TensorType& t = ctx.infer->output(s.n + q);
      dtype = t.dtype;
      Shape full;
      if (t.dims)
        for (size_t d = s.batched ? 1 : 0; d < t.dims->size(); ++d)
          full.push_back(std::max<int64_t>((*t.dims)[d].value, 0));
      if (!full.empty()) {
        const int64_t r = static_cast<int64_t>(full.size()) - 1;
        SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, "scan_output_axes", q, s.out_axes[q], r + 1));
        full.erase(full.begin() + axis);
        part = full;
      }
    }
    if (dtype == DType::kUndefined) return ctx.Error("scan output ", q, " has no known type after zero iterations");
    if (DTypeSize(dtype) == 0) return Unsupported(node.Label(), ": scan output ", q, " of type ", DTypeName(dtype));
    const int64_t r = static_cast<int64_t>(part.size());
    SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, "scan_output_axes", q, s.out_axes[q], r + 1));
    Shape shape = part;
    shape.insert(shape.begin() + axis, total);
    SP_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(dtype, shape));
    for (int64_t it = 0; it < length; ++it) {
      const Tensor& p = parts[q][static_cast<size_t>(it)];
      if (p.shape() != part || p.dtype() != dtype)
        return ctx.Error("scan output ", q, " is ", p.Describe(), " at iteration ", it, " but ", DTypeName(dtype),
                         ShapeToString(part), " at iteration 0");
      PutSlice(out, p, axis, s.out_dirs[q] == 1 ? length - 1 - it : it);
    }
    results->push_back(std::move(out));
  }
  return Status::Ok();
}

Status RunScan(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(ScanShape s, ShapeOf(ctx.node, ctx.opset));
  std::vector<Tensor> inputs;
  for (size_t j = 0; j < s.n + s.m; ++j) inputs.push_back(ctx.in(s.first + j));
  // Slices are copied by whole bytes: packed sub-byte elements are not.
  for (const Tensor& t : inputs)
    if (DTypeSize(t.dtype()) == 0) return Unsupported(ctx.node.Label(), ": inputs of type ", DTypeName(t.dtype()));
  std::vector<Tensor> results;
  if (!s.batched) {
    SP_RETURN_IF_ERROR(ScanOnce(ctx, s, inputs, -1, &results));
  } else {
    // Opset 8: one scan per batch entry, over axis 0 of the entry (axis 1 of the input).
    const int64_t batch = inputs[0].rank() > 0 ? inputs[0].dim(0) : 0;
    for (const Tensor& t : inputs)
      if (t.rank() < 1 || t.dim(0) != batch) return ctx.Error("every input needs the same batch size ", batch);
    for (size_t q = 0; q < s.m; ++q)
      if (inputs[s.n + q].rank() < 2) return ctx.Error("scan input ", q, " must have a batch and a sequence axis");
    const Tensor* lens = ctx.has_input(0) ? &ctx.in(0) : nullptr;
    if (lens && (lens->rank() != 1 || lens->dim(0) != batch))
      return ctx.Error("sequence_lens must have shape [", batch, "], got ", ShapeToString(lens->shape()));
    std::vector<std::vector<Tensor>> per_batch;
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Tensor> entry;
      for (const Tensor& t : inputs) entry.push_back(TakeSlice(t, 0, b));
      const int64_t length = lens ? ElementAsInt64(*lens, b) : -1;
      if (lens && (length < 0 || length > inputs[s.n].dim(1)))
        return ctx.Error("sequence_lens[", b, "] is ", length, ", the sequence length is ", inputs[s.n].dim(1));
      std::vector<Tensor> r;
      SP_RETURN_IF_ERROR(ScanOnce(ctx, s, entry, length, &r));
      per_batch.push_back(std::move(r));
    }
    for (size_t k = 0; k < s.n + s.k; ++k) {
      if (batch == 0) return Unsupported(ctx.node.Label(), ": a batch of 0");
      if (!per_batch[0][k].defined()) {
        results.push_back(Tensor());  // an output the node omits
        continue;
      }
      Shape shape = per_batch[0][k].shape();
      shape.insert(shape.begin(), batch);
      SP_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(per_batch[0][k].dtype(), shape));
      for (int64_t b = 0; b < batch; ++b) {
        const Tensor& p = per_batch[static_cast<size_t>(b)][k];
        if (p.shape() != per_batch[0][k].shape()) return ctx.Error("output ", k, " differs in shape across the batch");
        PutSlice(out, p, 0, b);
      }
      results.push_back(std::move(out));
    }
  }
  for (size_t k = 0; k < ctx.outputs.size() && k < results.size(); ++k)
    if (ctx.node.output(k)) SetKernelOutput(ctx, k, std::move(results[k]));
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP("Scan", InferScan, RunScan);

}  // namespace sampan::ops
