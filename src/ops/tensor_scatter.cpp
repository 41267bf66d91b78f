// TensorScatter (opset 24): a functional KV-cache update. past_cache [B, D1, ..., S_max, ..., Dn]
// and update [B, D1, ..., S, ..., Dn] differ only along `axis` (the sequence axis, never 0);
// write_indices [B] (int64, default zeros) gives each batch row's write position. The output is
// past_cache with update copied in at [write_indices[b], write_indices[b] + S) along `axis`;
// mode "circular" wraps those positions modulo S_max, "linear" requires them to fit.
#include <cstring>

#include "ops/common.h"
#include "ops/index_util.h"

namespace sampan::ops {
namespace {

struct ScatterAttrs {
  int64_t axis = 0;
  bool circular = false;
};

Result<ScatterAttrs> ReadAttrs(const InferContext& ctx, int64_t rank) {
  ScatterAttrs a;
  const std::string mode = ctx.node().attr_string("mode", "linear");
  if (mode != "linear" && mode != "circular") return ctx.Error("mode must be 'linear' or 'circular', got '", mode, "'");
  a.circular = mode == "circular";
  SP_ASSIGN_OR_RETURN(a.axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", -2), rank));
  if (a.axis == 0) return ctx.Error("axis must not be 0 (the batch dimension)");
  return a;
}

// Each write position (write_indices[b] + s for s < seq_len) must land in [0, max_seq) in
// linear mode; circular mode wraps any value.
Status CheckWriteIndices(const InferContext& ctx, const Tensor& idx, int64_t batch, int64_t seq_len, int64_t max_seq,
                         bool circular) {
  if (idx.rank() != 1 || idx.dim(0) != batch)
    return ctx.Error("write_indices must have shape [", batch, "] (the batch size), got ", ShapeToString(idx.shape()));
  if (circular) return Status::Ok();
  const int64_t* p = idx.data<int64_t>();
  for (int64_t b = 0; b < batch; ++b)
    if (p[b] < 0 || p[b] > max_seq - seq_len)
      return ctx.Error("write_indices[", b, "] = ", p[b], " with an update of length ", seq_len,
                       " does not fit the cache's sequence length ", max_seq, " (mode 'linear')");
  return Status::Ok();
}

Status InferTensorScatter(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  if (ctx.has_input(2) && ctx.input_dtype(2) != DType::kInt64)
    return ctx.Error("write_indices must be int64, got ", DTypeName(ctx.input_dtype(2)));
  const auto& cd = ctx.input_dims(0);
  const auto& ud = ctx.input_dims(1);
  const int64_t rank = cd ? static_cast<int64_t>(cd->size()) : (ud ? static_cast<int64_t>(ud->size()) : -1);
  if (rank < 0) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return Status::Ok();
  }
  if (rank < 2) return ctx.Error("past_cache must have rank >= 2 (batch and sequence axes), got rank ", rank);
  if (cd && ud && cd->size() != ud->size())
    return ctx.Error("past_cache has rank ", cd->size(), " but update has rank ", ud->size());
  SP_ASSIGN_OR_RETURN(ScatterAttrs a, ReadAttrs(ctx, rank));
  if (cd && ud)
    for (size_t d = 0; d < cd->size(); ++d) {
      const ir::Dim &c = (*cd)[d], &u = (*ud)[d];
      if (!c.known() || !u.known()) continue;
      if (static_cast<int64_t>(d) == a.axis && u.value > c.value)
        return ctx.Error("update's sequence length ", u.value, " (axis ", d, ") exceeds past_cache's ", c.value);
      if (static_cast<int64_t>(d) != a.axis && u.value != c.value)
        return ctx.Error("update dim ", d, " is ", u.value, " but past_cache dim ", d, " is ", c.value,
                         " (they may differ only along axis ", a.axis, ")");
    }
  if (ctx.has_input(2) && ctx.input_dims(2)) {
    const auto& id = *ctx.input_dims(2);
    if (id.size() != 1) return ctx.Error("write_indices must be 1-D [batch], got rank ", id.size());
    if (cd && (*cd)[0].known() && id[0].known() && id[0].value != (*cd)[0].value)
      return ctx.Error("write_indices has ", id[0].value, " values but the batch size is ", (*cd)[0].value);
  }
  const auto cs = ctx.input_static_shape(0);
  const auto us = ctx.input_static_shape(1);
  if (const Tensor* idx = ctx.input_value(2); idx && cs && us)
    SP_RETURN_IF_ERROR(CheckWriteIndices(ctx, *idx, (*cs)[0], (*us)[static_cast<size_t>(a.axis)],
                                         (*cs)[static_cast<size_t>(a.axis)], a.circular));
  if (cd) {
    ctx.set_output(0, ctx.input_dtype(0), cd);
    return Status::Ok();
  }
  ir::Dims out(static_cast<size_t>(rank), ir::Dim::Unknown());  // the cache's shape: all but axis from update
  for (size_t d = 0; d < out.size(); ++d)
    if (static_cast<int64_t>(d) != a.axis) out[d] = (*ud)[d];
  ctx.set_output(0, ctx.input_dtype(0), out);
  return Status::Ok();
}

Status RunTensorScatter(KernelContext& ctx) {
  const Tensor& cache = ctx.in(0);
  const Tensor& update = ctx.in(1);
  SP_ASSIGN_OR_RETURN(ScatterAttrs a, ReadAttrs(*ctx.infer, cache.rank()));
  const int64_t batch = cache.dim(0), max_seq = cache.dim(a.axis), seq = update.dim(a.axis);
  if (ctx.has_input(2)) SP_RETURN_IF_ERROR(CheckWriteIndices(*ctx.infer, ctx.in(2), batch, seq, max_seq, a.circular));
  Tensor& y = ctx.out(0);
  if (!y.defined()) y = Tensor::Alloc(cache.dtype(), cache.shape());
  const size_t esize = DTypeSize(cache.dtype());
  std::memcpy(y.mutable_raw(), cache.raw(), cache.nbytes());
  if (batch == 0 || seq == 0) return Status::Ok();
  // Both tensors viewed as [outer, seq axis, inner]; outer rows are batch-major.
  int64_t inner = 1;
  for (int64_t d = a.axis + 1; d < cache.rank(); ++d) inner *= cache.dim(d);
  const int64_t outer = cache.numel() / std::max<int64_t>(max_seq * inner, 1);
  const int64_t per_batch = outer / batch;
  const size_t row_bytes = static_cast<size_t>(inner) * esize;
  const auto* src = static_cast<const uint8_t*>(update.raw());
  auto* dst = static_cast<uint8_t*>(y.mutable_raw());
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t start = ctx.has_input(2) ? ctx.in(2).data<int64_t>()[o / per_batch] : 0;
    for (int64_t s = 0; s < seq; ++s) {
      int64_t pos = start + s;
      if (a.circular) pos = ((pos % max_seq) + max_seq) % max_seq;
      std::memcpy(dst + static_cast<size_t>(o * max_seq + pos) * row_bytes,
                  src + static_cast<size_t>(o * seq + s) * row_bytes, row_bytes);
    }
  }
  return Status::Ok();
}

SAMPAN_REGISTER_OP("TensorScatter", InferTensorScatter, RunTensorScatter);

}  // namespace
}  // namespace sampan::ops
