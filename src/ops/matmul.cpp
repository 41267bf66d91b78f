// MatMul (NumPy matmul semantics: N-D batched with broadcasting, 1-D operands
// promoted and the added dim removed) and MatMulInteger.
#include "ops/common.h"
#include "ops/gemm_util.h"

namespace sampan::ops {
namespace {

// Output dims of matmul(a, b), or nullopt when a rank is unknown.
Result<std::optional<ir::Dims>> MatMulDims(const InferContext& ctx) {
  const auto& ad0 = ctx.input_dims(0);
  const auto& bd0 = ctx.input_dims(1);
  if (!ad0 || !bd0) return std::optional<ir::Dims>();
  ir::Dims ad = *ad0, bd = *bd0;
  if (ad.empty() || bd.empty()) return ctx.Error("MatMul operands must have rank >= 1");
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), ir::Dim::Known(1));
  if (b1) bd.push_back(ir::Dim::Known(1));
  const ir::Dim& ka = ad.back();
  const ir::Dim& kb = bd[bd.size() - 2];
  if (ka.known() && kb.known() && ka.value != kb.value)
    return ctx.Error("inner dimensions differ: ", ka.value, " vs ", kb.value);
  ir::Dims abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2);
  SP_ASSIGN_OR_RETURN(ir::Dims out, BroadcastDims(ctx, abatch, bbatch));
  if (!a1) out.push_back(ad[ad.size() - 2]);
  if (!b1) out.push_back(bd.back());
  return std::optional<ir::Dims>(out);
}

// y = matmul(a, b) on accumulator-typed buffers with the given (original) shapes.
template <class A>
void BatchedMatMul(const A* a, Shape as, const A* b, Shape bs, A* y) {
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const Shape batch = BroadcastShapes({ab, bb});
  const int64_t nbatch = NumElements(batch);
  if (NumElements(bb) == 1) {
    // B is shared by every batch: fold A's batch into M (A's batch equals the output's).
    const int64_t rows = NumElements(ab) * M;
    if (NumElements(ab) == nbatch) {
      GemmAccumulate<A>(rows, N, K, a, K, b, N, y, N);
      return;
    }
  }
  ForEachBroadcast<2>(batch, {ab, bb}, [&](int64_t i, const std::array<int64_t, 2>& o) {
    GemmAccumulate<A>(M, N, K, a + o[0] * M * K, K, b + o[1] * K * N, N, y + i * M * N, N);
  });
}

constexpr std::initializer_list<DType> kMatMulTypes = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                                       DType::kBFloat16, DType::kInt32,   DType::kInt64,
                                                       DType::kUInt32,   DType::kUInt64};

Status InferMatMul(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kMatMulTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  SP_ASSIGN_OR_RETURN(auto dims, MatMulDims(ctx));
  ctx.set_output(0, ctx.input_dtype(0), dims);
  return Status::Ok();
}

Status RunMatMul(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  return DispatchDType(a.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool> && !std::is_same_v<T, int8_t> && !std::is_same_v<T, uint8_t> &&
                  !std::is_same_v<T, int16_t> && !std::is_same_v<T, uint16_t>) {
      using A = GemmAccType<T>;
      std::vector<A> ab, bb;
      const A* pa = AsAccumType<A>(a.data<T>(), a.numel(), ab);
      const A* pb = AsAccumType<A>(b.data<T>(), b.numel(), bb);
      if constexpr (std::is_same_v<A, T>) {
        BatchedMatMul<A>(pa, a.shape(), pb, b.shape(), y.mutable_data<T>());
      } else {
        std::vector<A> acc(static_cast<size_t>(y.numel()), A(0));
        BatchedMatMul<A>(pa, a.shape(), pb, b.shape(), acc.data());
        T* py = y.mutable_data<T>();
        for (size_t i = 0; i < acc.size(); ++i) py[i] = ConvertElement<T>(acc[i]);
      }
    }
  });
}

// ---- MatMulInteger -----------------------------------------------------------

Status InferMatMulInteger(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 4));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kUInt8, DType::kInt8}));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, {DType::kUInt8, DType::kInt8}));
  if (ctx.has_input(2)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
  if (ctx.has_input(3)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 1, 3));
  for (size_t i : {size_t{2}, size_t{3}})
    if (ctx.has_input(i) && ctx.input_dims(i) && ctx.input_dims(i)->size() > 1) {
      // N-D zero points (per batch) are allowed by the spec but rare.
      int64_t n = 1;
      for (const auto& d : *ctx.input_dims(i)) n = d.known() && n >= 0 ? n * d.value : -1;
      if (n != 1) return ctx.NotSupported("N-D zero point tensors are not supported");
    }
  SP_ASSIGN_OR_RETURN(auto dims, MatMulDims(ctx));
  ctx.set_output(0, DType::kInt32, dims);
  return Status::Ok();
}

// int32(t) - zero point; zp has 1 element or one per row (of A: `along_rows`) / column (of B).
std::vector<int32_t> ShiftInt(const Tensor& t, const Tensor* zp, bool along_rows, int64_t rows, int64_t cols) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  const int64_t nzp = zp ? zp->numel() : 0;
  std::vector<int32_t> z(static_cast<size_t>(std::max<int64_t>(nzp, 1)), 0);
  for (int64_t i = 0; i < nzp; ++i) z[static_cast<size_t>(i)] = static_cast<int32_t>(ElementAsInt64(*zp, i));
  const bool u8 = t.dtype() == DType::kUInt8;
  const uint8_t* pu = t.data<uint8_t>();
  const int8_t* ps = t.data<int8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t zi = 0;
    if (nzp > 1) zi = along_rows ? (i / cols) % rows : i % cols;
    out[static_cast<size_t>(i)] = (u8 ? int32_t{pu[i]} : int32_t{ps[i]}) - z[static_cast<size_t>(zi)];
  }
  return out;
}

Status RunMatMulInteger(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  const Tensor* azp = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  const Tensor* bzp = ctx.has_input(3) ? &ctx.in(3) : nullptr;
  const int64_t M = a.rank() >= 2 ? a.dim(a.rank() - 2) : 1, K = a.dim(a.rank() - 1);
  const int64_t N = b.rank() >= 2 ? b.dim(b.rank() - 1) : 1;
  if (azp && azp->numel() != 1 && azp->numel() != M)
    return ctx.Error("a_zero_point has ", azp->numel(), " elements, expected 1 or ", M);
  if (bzp && bzp->numel() != 1 && bzp->numel() != N)
    return ctx.Error("b_zero_point has ", bzp->numel(), " elements, expected 1 or ", N);
  std::vector<int32_t> as = ShiftInt(a, azp, true, M, K);
  std::vector<int32_t> bs = ShiftInt(b, bzp, false, b.rank() >= 2 ? b.dim(b.rank() - 2) : b.dim(0), N);
  BatchedMatMul<int32_t>(as.data(), a.shape(), bs.data(), b.shape(), ctx.out(0).mutable_data<int32_t>());
  return Status::Ok();
}

SAMPAN_REGISTER_OP("MatMul", InferMatMul, RunMatMul);
SAMPAN_REGISTER_OP("MatMulInteger", InferMatMulInteger, RunMatMulInteger);

}  // namespace
}  // namespace sampan::ops
