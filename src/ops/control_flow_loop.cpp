// Loop (opsets 1, 11, 13, 16, 19, 21, 23, 24, 25): runs `body` while the trip count and the
// condition allow. Inputs: M (optional trip count, int64), cond (optional, bool), then N
// loop-carried values; body: (iteration_num, cond_in, v_in...) -> (cond_out, v_out...,
// scan_out...); outputs: the N final values, then the K scan outputs, each the per-iteration
// values stacked on a new axis 0. Without cond the body's cond_out is ignored (a for loop).
// Tensor-typed values (sequence and optional loop-carried values are not supported yet).
#include <cstring>

#include "ops/common.h"
#include "ops/control_flow.h"

namespace sampan::ops {
namespace {

struct LoopShape {
  const ir::Graph* body = nullptr;
  size_t n = 0;  //!< loop-carried values
  size_t k = 0;  //!< scan outputs
};

Result<LoopShape> ShapeOf(const ir::Node& node) {
  LoopShape s;
  s.body = node.subgraph("body");
  if (s.body == nullptr) return InvalidArgument(node.Label(), ": needs a graph attribute 'body'");
  const size_t explicit_inputs = node.num_explicit_inputs();
  if (explicit_inputs < 2)
    return InvalidArgument(node.Label(), ": expects at least 2 inputs (M and cond, each may be empty), got ",
                           explicit_inputs);
  s.n = explicit_inputs - 2;
  const size_t body_in = s.body->inputs().size(), body_out = s.body->outputs().size();
  if (body_in != 2 + s.n)
    return InvalidArgument(node.Label(), ": body takes ", body_in, " inputs, expected 2 + ", s.n,
                           " (iteration_num, cond, then one per loop-carried value)");
  if (body_out < 1 + s.n)
    return InvalidArgument(node.Label(), ": body yields ", body_out, " outputs, expected at least 1 + ", s.n,
                           " (cond, then one per loop-carried value, then scan outputs)");
  s.k = body_out - 1 - s.n;
  if (node.num_outputs() > s.n + s.k)
    return InvalidArgument(node.Label(), ": has ", node.num_outputs(), " outputs, its body gives ", s.n, " + ", s.k);
  return s;
}

Status CheckScalarInput(const InferContext& ctx, size_t i, DType want, const char* what) {
  if (!ctx.has_input(i)) return Status::Ok();
  if (ctx.input_dtype(i) != want)
    return ctx.Error(what, " must be ", DTypeName(want), ", got ", DTypeName(ctx.input_dtype(i)));
  if (auto shape = ctx.input_static_shape(i); shape && NumElements(*shape) != 1)
    return ctx.Error(what, " must hold one element, has shape ", ShapeToString(*shape));
  return Status::Ok();
}

Status InferLoop(InferContext& ctx) {
  SP_ASSIGN_OR_RETURN(LoopShape s, ShapeOf(ctx.node()));
  SP_RETURN_IF_ERROR(CheckScalarInput(ctx, 0, DType::kInt64, "M (the trip count)"));
  SP_RETURN_IF_ERROR(CheckScalarInput(ctx, 1, DType::kBool, "cond"));
  const std::vector<InferInput> captures = CaptureInputs(ctx);
  const std::string where = ctx.node().Label() + " body";
  // Loop-carried values change from one iteration to the next: the body is inferred with
  // what holds for all of them (no values; dims that the body changes become unknown,
  // and the body is inferred again at the weaker types until they hold).
  std::vector<InferInput> in(2 + s.n);
  in[0] = InferInput{true, DType::kInt64, ir::Dims{}, nullptr};
  in[1] = InferInput{true, DType::kBool, ir::Dims{}, nullptr};
  for (size_t j = 0; j < s.n; ++j) {
    const size_t i = 2 + j;
    if (!ctx.has_input(i)) return ctx.Error("loop-carried input ", i, " is missing");
    in[i] = InferInput{true, ctx.input_dtype(i), ctx.input_dims(i), nullptr};
  }
  std::vector<SubgraphOutput> out;
  for (int round = 0;; ++round) {
    SP_ASSIGN_OR_RETURN(out, InferSubgraph(*s.body, ctx.opset(), in, captures, where));
    bool stable = true;
    for (size_t j = 0; j < s.n; ++j) {
      const SubgraphOutput& o = out[1 + j];
      InferInput& carried = in[2 + j];
      // An optional carried value may come back as what it holds (Loop-16): the value is
      // optional again when it re-enters the body (RunLoop), and of either kind at the end.
      if (carried.dtype == DType::kOptional && o.dtype != DType::kOptional) continue;
      if (o.dtype != DType::kUndefined && o.dtype != carried.dtype)
        return ctx.Error("loop-carried value ", j, " enters the body as ", DTypeName(carried.dtype),
                         " but the body yields ", DTypeName(o.dtype));
      std::optional<ir::Dims> merged = round < 3 ? MergeDims(carried.dims, o.dims) : std::nullopt;
      if (merged != carried.dims) {
        carried.dims = std::move(merged);
        stable = false;
      }
    }
    if (stable) break;
  }
  if (out[0].dtype != DType::kUndefined && out[0].dtype != DType::kBool)
    return ctx.Error("the body's first output (cond) must be bool, got ", DTypeName(out[0].dtype));
  for (size_t j = 0; j < s.n && j < ctx.num_outputs(); ++j) {
    if (in[2 + j].dtype == DType::kOptional && out[1 + j].dtype != DType::kOptional)
      ctx.set_output(j, DType::kUndefined, std::nullopt);  // optional, or what it holds
    else
      ctx.set_output(j, in[2 + j].dtype, in[2 + j].dims);
  }
  // The trip count is known when M is and no condition can end the loop early.
  ir::Dim trips = ir::Dim::Unknown();
  if (const Tensor* m = ctx.input_value(0); m != nullptr && !ctx.has_input(1))
    trips = ir::Dim::Known(std::max<int64_t>(ElementAsInt64(*m, 0), 0));
  if (const Tensor* c = ctx.input_value(1); c != nullptr && ElementAsInt64(*c, 0) == 0) trips = ir::Dim::Known(0);
  for (size_t k = 0; k < s.k && s.n + k < ctx.num_outputs(); ++k) {
    const SubgraphOutput& o = out[1 + s.n + k];
    std::optional<ir::Dims> dims;
    if (o.dims) {
      dims = ir::Dims{trips};
      dims->insert(dims->end(), o.dims->begin(), o.dims->end());
    }
    ctx.set_output(s.n + k, o.dtype, dims);
  }
  return Status::Ok();
}

// Stacks equal-shaped tensors on a new axis 0.
Result<Tensor> Stack(const std::vector<Tensor>& parts, DType dtype, const Shape& empty_part, const ir::Node& node,
                     size_t k) {
  // Packed sub-byte elements do not stack by whole bytes.
  if (DTypeSize(dtype) == 0) return Unsupported(node.Label(), ": scan output ", k, " of type ", DTypeName(dtype));
  Shape part = parts.empty() ? empty_part : parts[0].shape();
  Shape shape{static_cast<int64_t>(parts.size())};
  shape.insert(shape.end(), part.begin(), part.end());
  SP_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(dtype, shape));
  char* dst = static_cast<char*>(out.mutable_raw());
  for (size_t t = 0; t < parts.size(); ++t) {
    if (parts[t].shape() != part || parts[t].dtype() != dtype)
      return InvalidArgument(node.Label(), ": scan output ", k, " is ", parts[t].Describe(), " at iteration ", t,
                             " but ", DTypeName(dtype), ShapeToString(part), " at iteration 0");
    if (parts[t].nbytes() > 0) std::memcpy(dst + t * parts[t].nbytes(), parts[t].raw(), parts[t].nbytes());
  }
  return out;
}

Status RunLoop(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(LoopShape s, ShapeOf(ctx.node));
  int64_t max_trips = -1;  // -1: no trip count
  if (ctx.has_input(0)) {
    if (ctx.in(0).numel() != 1)
      return ctx.Error("M must hold one element, has shape ", ShapeToString(ctx.in(0).shape()));
    max_trips = std::max<int64_t>(ElementAsInt64(ctx.in(0), 0), 0);
  }
  bool cond = true;
  if (ctx.has_input(1)) {
    if (ctx.in(1).numel() != 1)
      return ctx.Error("cond must hold one element, has shape ", ShapeToString(ctx.in(1).shape()));
    cond = ElementAsInt64(ctx.in(1), 0) != 0;
  }
  const std::vector<const Tensor*> captures = CaptureTensors(ctx);
  const SubgraphRunner runner(*s.body, ctx.opset, ctx.node.Label() + " body");
  std::vector<Tensor> carried(s.n);
  for (size_t j = 0; j < s.n; ++j) carried[j] = ctx.in(2 + j);
  std::vector<bool> wrap(s.n, false);  // carried j is the body's value re-wrapped as an optional
  std::vector<Tensor> last(s.n);       // ... and that value as the body yielded it
  std::vector<std::vector<Tensor>> scans(s.k);
  std::vector<const Tensor*> args(2 + s.n);
  std::vector<Tensor> outs;
  for (int64_t it = 0; cond && (max_trips < 0 || it < max_trips); ++it) {
    // Fresh each iteration: the body may hand them on as outputs.
    const Tensor iteration = Tensor::FromVector<int64_t>(DType::kInt64, {it}, {});
    const Tensor cond_in = Tensor::FromVector<bool>(DType::kBool, {cond}, {});
    args[0] = &iteration;
    args[1] = &cond_in;
    for (size_t j = 0; j < s.n; ++j) args[2 + j] = &carried[j];
    SP_RETURN_IF_ERROR(runner.Run(args, captures, &outs));
    if (ctx.has_input(1)) {
      if (outs[0].numel() != 1 || outs[0].dtype() != DType::kBool)
        return ctx.Error("the body's cond output must be one bool, got ", outs[0].Describe());
      cond = ElementAsInt64(outs[0], 0) != 0;
    }
    for (size_t j = 0; j < s.n; ++j) {
      Tensor& next = outs[1 + j];
      // An optional carried value may come back as what it holds: it re-enters the body as an
      // optional again, and leaves the loop as the body yielded it.
      const bool unwrapped = carried[j].is_optional() && !next.is_optional();
      if (!unwrapped && next.dtype() != carried[j].dtype())
        return ctx.Error("loop-carried value ", j, " entered as ", carried[j].Describe(), " but the body yields ",
                         next.Describe());
      if (unwrapped || (j < wrap.size() && wrap[j])) {
        wrap[j] = true;
        last[j] = next;
        carried[j] = Tensor::Optional(next.dtype(), std::move(next));
      } else {
        carried[j] = std::move(next);
      }
    }
    for (size_t k = 0; k < s.k; ++k) scans[k].push_back(std::move(outs[1 + s.n + k]));
  }
  for (size_t j = 0; j < s.n && j < ctx.outputs.size(); ++j)
    if (ctx.node.output(j)) SetKernelOutput(ctx, j, wrap[j] ? std::move(last[j]) : std::move(carried[j]));
  for (size_t k = 0; k < s.k && s.n + k < ctx.outputs.size(); ++k) {
    if (ctx.node.output(s.n + k) == nullptr) continue;
    // No iteration ran: the per-iteration shape is what inference knows of it (unknown dims as 0).
    const ir::TensorType& t = ctx.infer->output(s.n + k);
    Shape empty_part;
    if (t.dims)
      for (size_t d = 1; d < t.dims->size(); ++d) empty_part.push_back(std::max<int64_t>((*t.dims)[d].value, 0));
    const DType dtype = scans[k].empty() ? t.dtype : scans[k][0].dtype();
    if (dtype == DType::kUndefined) return ctx.Error("scan output ", k, " has no known type after zero iterations");
    SP_ASSIGN_OR_RETURN(Tensor stacked, Stack(scans[k], dtype, empty_part, ctx.node, k));
    SetKernelOutput(ctx, s.n + k, std::move(stacked));
  }
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF({.domain = "", .op_type = "Loop", .infer = InferLoop, .run = RunLoop, .sequences = true});

}  // namespace sampan::ops
