// sampan::CtcGreedyDecoder(probs, classes) -> (text, score): an OCR recognizer's per-step class
// probabilities to strings, as PaddleOCR's CTCLabelDecode does it, so a recognizer model answers
// text (the pipelines' OCR step) instead of a probability tensor.
//   probs:   float32/float16 [N, T, C], each step's class probabilities (a softmax output)
//   classes: string [C], the text of each class (the blank's entry is not used)
//   text:    string [N], per row the classes of the steps' argmax, with the blank dropped and,
//            when merge_repeated (default 1), a class repeated on consecutive steps taken once
//   score:   float32 [N], the mean of the kept steps' maximum probability (0 when none is kept)
// Attributes: blank (default 0), merge_repeated (default 1). The argmax takes the first of equal
// maxima, as numpy's does.
#include <optional>
#include <string>
#include <vector>

#include "ops/common.h"
#include "ops/control_flow.h"

namespace sampan::ops {
namespace {

Status InferCtcDecode(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  const DType pt = ctx.input_dtype(0);
  if (pt != DType::kFloat32 && pt != DType::kFloat16)
    return ctx.Error("probs must be float32 or float16, got ", DTypeName(pt));
  if (ctx.input_dtype(1) != DType::kString)
    return ctx.Error("classes must be a string tensor, got ", DTypeName(ctx.input_dtype(1)));
  std::optional<ir::Dim> n;
  if (const auto& d = ctx.input_dims(0)) {
    if (d->size() != 3) return ctx.Error("probs must be [N, T, C], got rank ", d->size());
    n = (*d)[0];
    if (const auto& c = ctx.input_dims(1)) {
      if (c->size() != 1) return ctx.Error("classes must be 1-D [C], got rank ", c->size());
      if ((*d)[2].known() && (*c)[0].known() && (*d)[2].value != (*c)[0].value)
        return ctx.Error("classes has ", (*c)[0].value, " entries but probs has ", (*d)[2].value, " classes");
    }
  }
  const int64_t blank = ctx.node().attr_int("blank", 0);
  if (blank < 0) return ctx.Error("blank must be >= 0, got ", blank);
  const ir::Dims out_dims = n ? ir::Dims{*n} : ir::Dims{ir::Dim{}};
  ctx.set_output(0, DType::kString, out_dims);
  if (ctx.num_outputs() > 1) ctx.set_output(1, DType::kFloat32, out_dims);
  return Status::Ok();
}

Status RunCtcDecode(KernelContext& ctx) {
  const Tensor& probs = ctx.in(0);
  const Tensor& classes = ctx.in(1);
  const Shape& s = probs.shape();
  if (s.size() != 3) return ctx.Error("probs must be [N, T, C], got ", ShapeToString(s));
  const int64_t n = s[0], t = s[1], c = s[2];
  if (classes.rank() != 1 || classes.numel() != c)
    return ctx.Error("classes has shape ", ShapeToString(classes.shape()), " but probs has ", c, " classes");
  const int64_t blank = ctx.node.attr_int("blank", 0);
  if (blank >= c) return ctx.Error("blank ", blank, " is not a class (", c, " classes)");
  const bool merge = ctx.node.attr_int("merge_repeated", 1) != 0;
  Tensor p32 = probs;
  if (probs.dtype() != DType::kFloat32) {
    SP_ASSIGN_OR_RETURN(p32, CastTensor(probs, DType::kFloat32));
  }
  const float* p = p32.data<float>();
  std::vector<std::string> text(static_cast<size_t>(n));
  Tensor score = Tensor::Alloc(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) {
    std::string& out = text[static_cast<size_t>(i)];
    double sum = 0;
    int64_t kept = 0, prev = -1;
    for (int64_t k = 0; k < t; ++k) {
      const float* row = p + (i * t + k) * c;
      int64_t best = 0;
      for (int64_t j = 1; j < c; ++j)
        if (row[j] > row[best]) best = j;
      if (best != blank && !(merge && best == prev)) {
        out += classes.strings()[best];
        sum += row[best];
        ++kept;
      }
      prev = best;
    }
    score.mutable_data<float>()[i] = kept ? static_cast<float>(sum / static_cast<double>(kept)) : 0.f;
  }
  SetKernelOutput(ctx, 0, Tensor::FromStrings(std::move(text), {n}));
  if (ctx.outputs.size() > 1) SetKernelOutput(ctx, 1, std::move(score));
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF(
    {.domain = "sampan", .op_type = "CtcGreedyDecoder", .infer = InferCtcDecode, .run = RunCtcDecode, .strings = true});

}  // namespace sampan::ops
