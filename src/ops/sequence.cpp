// Sequence and optional values (ONNX's non-tensor types) and their ops: SequenceEmpty,
// SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase, SequenceLength,
// SplitToSequence, ConcatFromSequence, SequenceMap (a subgraph per element) and Optional. A
// sequence or optional is a Tensor of dtype kSequence / kOptional holding a list of tensors
// (base/tensor.h); these ops, Identity, If, Loop and the Optional* ops take them, and every
// other op refuses them (OpDef::sequences). Their element shapes are known only at run time,
// so graphs holding them take the planner's dynamic path.
#include <algorithm>
#include <cstring>

#include "ops/common.h"
#include "ops/control_flow.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

Status ExpectSequence(const InferContext& ctx, size_t i) {
  if (ctx.input_dtype(i) != DType::kSequence)
    return ctx.Error("input ", i, " must be a sequence, got ", DTypeName(ctx.input_dtype(i)));
  return Status::Ok();
}

Status ExpectTensorInput(const InferContext& ctx, size_t i) {
  const DType d = ctx.input_dtype(i);
  if (d == DType::kSequence || d == DType::kOptional)
    return ctx.Error("input ", i, " must be a tensor, got a ", DTypeName(d));
  return Status::Ok();
}

// The position input (a scalar int32/int64; negative counts from the end). `size` is the
// number of valid positions (the length for At/Erase, length + 1 for Insert).
Result<int64_t> Position(const KernelContext& ctx, size_t i, int64_t size, int64_t dflt) {
  int64_t pos = dflt;
  if (ctx.has_input(i)) {
    const Tensor& p = ctx.in(i);
    if ((p.dtype() != DType::kInt64 && p.dtype() != DType::kInt32) || p.numel() != 1)
      return ctx.Error("position must be one int32 or int64 value, got ", p.Describe());
    pos = ElementAsInt64(p, 0);
  }
  if (pos < -size || pos >= size)
    return ctx.Error("sequence position ", pos, " is out of range for ", size == 0 ? "an empty sequence" : "",
                     size == 0 ? "" : StrCat("positions ", -size, "..", size - 1));
  return pos < 0 ? pos + size : pos;
}

Status SetSequence(InferContext& ctx, size_t k) {
  ctx.set_output_shape(k, DType::kSequence, {});
  return Status::Ok();
}

// ---------------------------------------------------------------- construct, insert, erase, at, length

Status InferSequenceEmpty(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(0, 0));
  const int64_t dt = ctx.node().attr_int("dtype", static_cast<int64_t>(DType::kFloat32));
  if (dt < 1 || dt > 28 || !IsStorableDType(static_cast<DType>(dt)))
    return ctx.Error("dtype ", dt, " is not a tensor element type");
  Tensor empty = Tensor::Sequence(static_cast<DType>(dt), {});
  ctx.set_output_shape(0, DType::kSequence, {});
  ctx.set_output_value(0, std::move(empty));
  return Status::Ok();
}

Status RunSequenceEmpty(KernelContext& ctx) {
  ctx.out(0) = Tensor::Sequence(static_cast<DType>(ctx.node.attr_int("dtype", 1)), {});
  return Status::Ok();
}

Status InferSequenceConstruct(InferContext& ctx) {
  if (ctx.num_inputs() < 1) return ctx.Error("needs at least one input");
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error("input ", i, " is omitted");
    SP_RETURN_IF_ERROR(ExpectTensorInput(ctx, i));
    if (ctx.input_dtype(i) != ctx.input_dtype(0))
      return ctx.Error("every input must have the same element type: input ", i, " is ", DTypeName(ctx.input_dtype(i)),
                       ", input 0 ", DTypeName(ctx.input_dtype(0)));
  }
  return SetSequence(ctx, 0);
}

Status RunSequenceConstruct(KernelContext& ctx) {
  std::vector<Tensor> items;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) items.push_back(ctx.in(i));
  ctx.out(0) = Tensor::Sequence(ctx.in(0).dtype(), std::move(items));
  return Status::Ok();
}

Status InferSequenceInsert(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  SP_RETURN_IF_ERROR(ExpectSequence(ctx, 0));
  SP_RETURN_IF_ERROR(ExpectTensorInput(ctx, 1));
  return SetSequence(ctx, 0);
}

// The element type of a sequence: its declared one, else its first item's.
DType ElementType(const Tensor& seq) {
  if (seq.elem_dtype() != DType::kUndefined) return seq.elem_dtype();
  return seq.items().empty() ? DType::kUndefined : seq.items().front().dtype();
}

Status RunSequenceInsert(KernelContext& ctx) {
  const Tensor& seq = ctx.in(0);
  const Tensor& t = ctx.in(1);
  const DType elem = ElementType(seq);
  if (elem != DType::kUndefined && t.dtype() != elem)
    return ctx.Error("inserting a ", DTypeName(t.dtype()), " tensor into a sequence of ", DTypeName(elem));
  const auto n = static_cast<int64_t>(seq.items().size());
  SP_ASSIGN_OR_RETURN(int64_t pos, Position(ctx, 2, n + 1, n));
  std::vector<Tensor> items = seq.items();
  items.insert(items.begin() + pos, t);
  ctx.out(0) = Tensor::Sequence(t.dtype(), std::move(items));
  return Status::Ok();
}

Status InferSequenceErase(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 2));
  SP_RETURN_IF_ERROR(ExpectSequence(ctx, 0));
  return SetSequence(ctx, 0);
}

Status RunSequenceErase(KernelContext& ctx) {
  const Tensor& seq = ctx.in(0);
  const auto n = static_cast<int64_t>(seq.items().size());
  SP_ASSIGN_OR_RETURN(int64_t pos, Position(ctx, 1, n, n - 1));
  std::vector<Tensor> items = seq.items();
  items.erase(items.begin() + pos);
  ctx.out(0) = Tensor::Sequence(ElementType(seq), std::move(items));
  return Status::Ok();
}

Status InferSequenceAt(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectSequence(ctx, 0));
  // The element's type and shape are the item's: known once the sequence is.
  if (const Tensor* seq = ctx.input_value(0); seq != nullptr && ctx.input_value(1) != nullptr) {
    const auto n = static_cast<int64_t>(seq->items().size());
    int64_t pos = ElementAsInt64(*ctx.input_value(1), 0);
    if (pos < -n || pos >= n) return ctx.Error("sequence position ", pos, " is out of range for length ", n);
    const Tensor& item = seq->items()[static_cast<size_t>(pos < 0 ? pos + n : pos)];
    ctx.set_output_shape(0, item.dtype(), item.shape());
    return Status::Ok();
  }
  ctx.set_output(0, ctx.input_value(0) ? ElementType(*ctx.input_value(0)) : DType::kUndefined, std::nullopt);
  return Status::Ok();
}

Status RunSequenceAt(KernelContext& ctx) {
  const Tensor& seq = ctx.in(0);
  const auto n = static_cast<int64_t>(seq.items().size());
  if (!ctx.has_input(1)) return ctx.Error("position is required");
  SP_ASSIGN_OR_RETURN(int64_t pos, Position(ctx, 1, n, 0));
  ctx.out(0) = seq.items()[static_cast<size_t>(pos)];
  return Status::Ok();
}

Status InferSequenceLength(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectSequence(ctx, 0));
  ctx.set_output_shape(0, DType::kInt64, {});
  return Status::Ok();
}

Status RunSequenceLength(KernelContext& ctx) {
  ctx.out(0) =
      Tensor::FromVector(DType::kInt64, std::vector<int64_t>{static_cast<int64_t>(ctx.in(0).items().size())}, {});
  return Status::Ok();
}

// ---------------------------------------------------------------- SplitToSequence, ConcatFromSequence

Status InferSplitToSequence(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 2));
  SP_RETURN_IF_ERROR(ExpectTensorInput(ctx, 0));
  if (ctx.has_input(1)) SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, {DType::kInt32, DType::kInt64}));
  const int64_t rank = ctx.input_rank(0);
  if (rank >= 0) SP_RETURN_IF_ERROR(NormalizeAxis(ctx, ctx.node().attr_int("axis", 0), rank).status());
  return SetSequence(ctx, 0);
}

// Copies rows [begin, end) of `x` along `axis` into a new tensor.
Tensor SliceAxis(const Tensor& x, int64_t axis, int64_t begin, int64_t end) {
  Shape s = x.shape();
  s[static_cast<size_t>(axis)] = end - begin;
  Tensor out = Tensor::Alloc(x.dtype(), s);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const int64_t len = x.dim(axis);
  if (x.is_string()) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = begin; r < end; ++r)
        for (int64_t i = 0; i < inner; ++i)
          out.mutable_strings()[(o * (end - begin) + (r - begin)) * inner + i] = x.strings()[(o * len + r) * inner + i];
    return out;
  }
  const size_t es = DTypeSize(x.dtype());
  const size_t chunk = static_cast<size_t>((end - begin) * inner) * es;
  for (int64_t o = 0; o < outer; ++o)
    if (chunk)
      std::memcpy(static_cast<char*>(out.mutable_raw()) + static_cast<size_t>(o) * chunk,
                  static_cast<const char*>(x.raw()) + static_cast<size_t>((o * len + begin) * inner) * es, chunk);
  return out;
}

Status RunSplitToSequence(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (IsPackedDType(x.dtype())) return ctx.Error("splitting packed ", DTypeName(x.dtype()), " tensors");
  if (x.rank() == 0) return ctx.Error("input must have rank >= 1");
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", 0), x.rank());
  if (axis < 0 || axis >= x.rank()) return ctx.Error("axis out of range for ", x.Describe());
  const int64_t len = x.dim(axis);
  std::vector<int64_t> sizes;
  bool drop_axis = false;
  if (!ctx.has_input(1)) {
    sizes.assign(static_cast<size_t>(len), 1);  // one element per row
    drop_axis = ctx.node.attr_int("keepdims", 1) == 0;
  } else {
    SP_ASSIGN_OR_RETURN(std::vector<int64_t> split, ToInt64Vector(ctx.in(1), "split"));
    if (ctx.in(1).rank() == 0) {  // a chunk length: the last chunk takes the rest
      if (split[0] <= 0) return ctx.Error("split must be positive, got ", split[0]);
      for (int64_t at = 0; at < len; at += split[0]) sizes.push_back(std::min(split[0], len - at));
    } else {
      int64_t sum = 0;
      for (int64_t s : split) {
        if (s < 0) return ctx.Error("split sizes must be >= 0, got ", s);
        sum += s;
      }
      if (sum != len) return ctx.Error("split sizes sum to ", sum, " but axis ", axis, " has ", len);
      sizes = split;
    }
  }
  std::vector<Tensor> items;
  int64_t at = 0;
  for (int64_t s : sizes) {
    Tensor part = SliceAxis(x, axis, at, at + s);
    if (drop_axis) {
      Shape shape = part.shape();
      shape.erase(shape.begin() + axis);
      part = part.Reshaped(shape);
    }
    items.push_back(std::move(part));
    at += s;
  }
  ctx.out(0) = Tensor::Sequence(x.dtype(), std::move(items));
  return Status::Ok();
}

Status InferConcatFromSequence(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectSequence(ctx, 0));
  const int64_t new_axis = ctx.node().attr_int("new_axis", 0);
  if (new_axis != 0 && new_axis != 1) return ctx.Error("new_axis must be 0 or 1, got ", new_axis);
  if (!ctx.node().has_attr("axis")) return ctx.Error("missing required attribute 'axis'");
  ctx.set_output(0, ctx.input_value(0) ? ElementType(*ctx.input_value(0)) : DType::kUndefined, std::nullopt);
  return Status::Ok();
}

Status RunConcatFromSequence(KernelContext& ctx) {
  const std::vector<Tensor>& items = ctx.in(0).items();
  if (items.empty()) return ctx.Error("the sequence is empty: nothing to concatenate");
  const bool new_axis = ctx.node.attr_int("new_axis", 0) == 1;
  const Tensor& first = items[0];
  const int64_t out_rank = first.rank() + (new_axis ? 1 : 0);
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", 0), out_rank);
  if (axis < 0 || axis >= out_rank || (!new_axis && first.rank() == 0))
    return ctx.Error("axis ", ctx.node.attr_int("axis", 0), " is out of range for rank ", out_rank);
  if (IsPackedDType(first.dtype())) return ctx.Error("concatenating packed ", DTypeName(first.dtype()), " tensors");
  // With new_axis each item gains a dimension of 1 at `axis`.
  std::vector<Tensor> parts;
  int64_t total = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    Tensor t = items[k];
    if (new_axis) {
      Shape s = t.shape();
      s.insert(s.begin() + axis, 1);
      t = t.Reshaped(s);
    }
    bool fits = t.dtype() == first.dtype() && t.rank() == out_rank;
    for (int64_t d = 0; fits && !parts.empty() && d < out_rank; ++d) fits = d == axis || t.dim(d) == parts[0].dim(d);
    if (!fits)
      return ctx.Error("item ", k, " is ", items[k].Describe(), ", which does not concatenate with item 0 ",
                       first.Describe(), " along axis ", axis);
    total += t.dim(axis);
    parts.push_back(std::move(t));
  }
  Shape out_shape = parts[0].shape();
  out_shape[static_cast<size_t>(axis)] = total;
  Tensor out = Tensor::Alloc(first.dtype(), out_shape);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out_shape[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < out_rank; ++d) inner *= out_shape[static_cast<size_t>(d)];
  int64_t at = 0;
  for (const Tensor& p : parts) {
    const int64_t rows = p.dim(axis);
    for (int64_t o = 0; o < outer; ++o) {
      if (out.is_string()) {
        for (int64_t i = 0; i < rows * inner; ++i)
          out.mutable_strings()[(o * total + at) * inner + i] = p.strings()[o * rows * inner + i];
      } else {
        const size_t es = DTypeSize(out.dtype());
        const size_t n = static_cast<size_t>(rows * inner) * es;
        if (n)
          std::memcpy(static_cast<char*>(out.mutable_raw()) + static_cast<size_t>((o * total + at) * inner) * es,
                      static_cast<const char*>(p.raw()) + static_cast<size_t>(o) * n, n);
      }
    }
    at += rows;
  }
  ctx.out(0) = std::move(out);
  return Status::Ok();
}

// ---------------------------------------------------------------- SequenceMap

Status InferSequenceMap(InferContext& ctx) {
  const ir::Graph* body = ctx.node().subgraph("body");
  if (body == nullptr) return ctx.Error("missing graph attribute 'body'");
  const size_t n = ctx.node().num_explicit_inputs();
  if (n < 1) return ctx.Error("needs an input sequence");
  SP_RETURN_IF_ERROR(ExpectSequence(ctx, 0));
  if (body->inputs().size() != n)
    return ctx.Error("body takes ", body->inputs().size(), " inputs but the node gives ", n);
  if (body->outputs().size() != ctx.num_outputs())
    return ctx.Error("body yields ", body->outputs().size(), " outputs but the node has ", ctx.num_outputs());
  for (size_t k = 0; k < ctx.num_outputs(); ++k) SP_RETURN_IF_ERROR(SetSequence(ctx, k));
  return Status::Ok();
}

Status RunSequenceMap(KernelContext& ctx) {
  const ir::Graph& body = *ctx.node.subgraph("body");
  const size_t n = ctx.node.num_explicit_inputs();
  const size_t len = ctx.in(0).items().size();
  for (size_t i = 1; i < n; ++i)
    if (ctx.has_input(i) && ctx.in(i).is_sequence() && ctx.in(i).items().size() != len)
      return ctx.Error("input ", i, " is a sequence of ", ctx.in(i).items().size(), " items but input 0 has ", len);
  const SubgraphRunner runner(body, ctx.opset, ctx.node.Label() + " body");
  const std::vector<const Tensor*> captures = CaptureTensors(ctx);
  std::vector<std::vector<Tensor>> results(ctx.outputs.size());
  std::vector<DType> elem(ctx.outputs.size(), DType::kUndefined);
  for (size_t it = 0; it < len; ++it) {
    std::vector<const Tensor*> args;
    for (size_t i = 0; i < n; ++i) {
      const Tensor& in = ctx.in(i);
      args.push_back(in.is_sequence() ? &in.items()[it] : &in);  // sequences advance, tensors repeat
    }
    std::vector<Tensor> outs;
    SP_RETURN_IF_ERROR(runner.Run(args, captures, &outs));
    for (size_t k = 0; k < outs.size() && k < results.size(); ++k) {
      elem[k] = outs[k].dtype();
      results[k].push_back(std::move(outs[k]));
    }
  }
  for (size_t k = 0; k < results.size(); ++k) {
    // An empty result takes the element type the body declares.
    DType d = elem[k];
    if (d == DType::kUndefined && k < body.outputs().size()) d = body.outputs()[k]->type.dtype;
    ctx.out(k) = Tensor::Sequence(d, std::move(results[k]));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- Optional

Status InferOptional(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(0, 1));
  if (!ctx.has_input(0) && !ctx.node().has_attr("type"))
    return ctx.Error("an empty optional needs the 'type' attribute");
  ctx.set_output_shape(0, DType::kOptional, {});
  return Status::Ok();
}

Status RunOptional(KernelContext& ctx) {
  if (ctx.has_input(0)) {
    ctx.out(0) = Tensor::Optional(ctx.in(0).dtype(), ctx.in(0));
  } else {
    // `type` describes what the optional would hold (the importer's text: "seq(tensor(f32))").
    const std::string type = ctx.node.attr_string("type", "");
    DType elem = DType::kUndefined;
    if (type.rfind("seq(", 0) == 0)
      elem = DType::kSequence;
    else if (type.rfind("tensor(", 0) == 0 && type.size() > 8)
      elem = DTypeFromName(type.substr(7, type.size() - 8));
    ctx.out(0) = Tensor::Optional(elem, std::nullopt);
  }
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "SequenceEmpty",
                        .infer = InferSequenceEmpty,
                        .run = RunSequenceEmpty,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "SequenceConstruct",
                        .infer = InferSequenceConstruct,
                        .run = RunSequenceConstruct,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "SequenceInsert",
                        .infer = InferSequenceInsert,
                        .run = RunSequenceInsert,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "SequenceErase",
                        .infer = InferSequenceErase,
                        .run = RunSequenceErase,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "SequenceAt",
                        .infer = InferSequenceAt,
                        .run = RunSequenceAt,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "SequenceLength",
                        .infer = InferSequenceLength,
                        .run = RunSequenceLength,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "SplitToSequence",
                        .infer = InferSplitToSequence,
                        .run = RunSplitToSequence,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "ConcatFromSequence",
                        .infer = InferConcatFromSequence,
                        .run = RunConcatFromSequence,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "SequenceMap",
                        .infer = InferSequenceMap,
                        .run = RunSequenceMap,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "Optional",
                        .infer = InferOptional,
                        .run = RunOptional,
                        .strings = true,
                        .sequences = true});

}  // namespace sampan::ops
