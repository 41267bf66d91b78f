#include "backends/cuda/gemm.h"

#include "backends/cuda/cuda_check.h"

namespace sampan::cuda {
namespace {

cudaDataType_t DataType(FloatType t) {
  switch (t) {
    case FloatType::kF16:
      return CUDA_R_16F;
    case FloatType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

cudaDataType_t Fp8DataType(Fp8Type t, cudaDataType_t otherwise) {
  switch (t) {
    case Fp8Type::kE4M3:
      return CUDA_R_8F_E4M3;
    case Fp8Type::kE5M2:
      return CUDA_R_8F_E5M2;
    default:
      return otherwise;
  }
}

// A row-major [rows, cols] matrix with leading dim ld is column-major [cols, rows].
Status MakeLayout(cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                  int64_t stride) {
  SP_CUBLAS(cublasLtMatrixLayoutCreate(l, t, static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    SP_CUBLAS(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    SP_CUBLAS(
        cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return Status::Ok();
}

}  // namespace

void SplitEpilogue(UnaryOp act, FloatType type, GemmEpilogue* epi, UnaryOp* post) {
  *epi = GemmEpilogue::kNone;
  *post = act;
  if (act == UnaryOp::kRelu) *epi = GemmEpilogue::kRelu;
  if (act == UnaryOp::kGeluTanh) *epi = GemmEpilogue::kGeluTanh;
  if (act == UnaryOp::kGelu && (type == FloatType::kF16 || type == FloatType::kBF16)) *epi = GemmEpilogue::kGeluTanh;
  if (*epi != GemmEpilogue::kNone) *post = UnaryOp::kIdentity;
}

Status CheckFp8Operands(const GemmShape& s) {
  if (!s.fp8()) return Status::Ok();
  if (s.fp8_b == Fp8Type::kNone || !s.trans_b || s.trans_a)
    return Unsupported("FP8 products take float8 A and B with B transposed (cuBLASLt's TN form)");
  if (s.fp8_a == Fp8Type::kE5M2 && s.fp8_b == Fp8Type::kE5M2)
    return Unsupported("FP8 products of two e5m2 operands (cuBLASLt takes e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3)");
  if (s.k % 16 != 0 || (s.lda && s.lda % 16) || (s.ldb && s.ldb % 16))
    return Unsupported("FP8 products need the inner dimension and leading dims in multiples of 16 (k=", s.k, ")");
  return Status::Ok();
}

Gemm::~Gemm() {
  if (op_) cublasLtMatmulDescDestroy(op_);
  for (auto* l : {la_, lb_, lc_, ld_})
    if (l) cublasLtMatrixLayoutDestroy(l);
}

Status Gemm::Prepare(cublasLtHandle_t handle, const GemmShape& s, size_t workspace_bytes, int max_algos) {
  shape_ = s;
  const cudaDataType_t t = DataType(s.type);
  SP_RETURN_IF_ERROR(CheckFp8Operands(s));
  // Half and bfloat16 accumulate in f32, like PyTorch and TensorRT by default.
  const cublasComputeType_t compute =
      s.type == FloatType::kF32 && s.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  SP_CUBLAS(cublasLtMatmulDescCreate(&op_, compute, CUDA_R_32F));
  // Column-major view: D^T[n, m] = op(B)^T . op(A)^T, so B is the first operand.
  cublasOperation_t ta = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  SP_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  SP_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (s.has_bias) {
    epi = s.epilogue == GemmEpilogue::kRelu       ? CUBLASLT_EPILOGUE_RELU_BIAS
          : s.epilogue == GemmEpilogue::kGeluTanh ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                  : CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bt = t;
    SP_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  } else if (s.epilogue == GemmEpilogue::kRelu) {
    epi = CUBLASLT_EPILOGUE_RELU;
  } else if (s.epilogue == GemmEpilogue::kGeluTanh) {
    epi = CUBLASLT_EPILOGUE_GELU;
  }
  SP_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (s.fp8()) {
    // Hopper's FP8 MMA accumulates in reduced precision between promotions; fast accumulation skips
    // the promotions (the inference setting of TensorRT and Transformer Engine's forward pass).
    const int8_t fast = 1;
    SP_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }

  // Stored (row-major) shapes of A and B.
  const int64_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
  const int64_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
  SP_RETURN_IF_ERROR(
      MakeLayout(&lb_, Fp8DataType(s.fp8_b, t), b_rows, b_cols, s.ldb ? s.ldb : b_cols, s.batch, s.stride_b));
  SP_RETURN_IF_ERROR(
      MakeLayout(&la_, Fp8DataType(s.fp8_a, t), a_rows, a_cols, s.lda ? s.lda : a_cols, s.batch, s.stride_a));
  SP_RETURN_IF_ERROR(MakeLayout(&lc_, t, s.m, s.n, s.ldc ? s.ldc : s.n, s.batch, s.stride_c));
  SP_RETURN_IF_ERROR(MakeLayout(&ld_, Fp8DataType(s.fp8_d, t), s.m, s.n, s.ldd ? s.ldd : s.n, s.batch, s.stride_d));

  cublasLtMatmulPreference_t pref = nullptr;
  SP_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = workspace_bytes;
  cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  algos_.assign(static_cast<size_t>(max_algos), cublasLtMatmulHeuristicResult_t{});
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle, op_, lb_, la_, lc_, ld_, pref, max_algos, algos_.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  SP_CUBLAS(st);
  if (found == 0)
    return Unsupported("cuBLASLt has no algorithm for this product (m=", s.m, " n=", s.n, " k=", s.k,
                       " batch=", s.batch, ")");
  algos_.resize(static_cast<size_t>(found));
  chosen_ = 0;
  return Status::Ok();
}

size_t Gemm::workspace_needed() const {
  return algos_.empty() ? 0 : algos_[static_cast<size_t>(chosen_)].workspaceSize;
}

Status Gemm::Run(cublasLtHandle_t handle, const void* a, const void* b, const void* c, const void* bias, void* d,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream, const float* d_scale) const {
  if (shape_.m == 0 || shape_.n == 0 || shape_.batch == 0) return Status::Ok();
  if (shape_.has_bias)
    SP_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (shape_.fp8_d != Fp8Type::kNone) {
    if (d_scale == nullptr) return Internal("FP8 product with a float8 result but no D scale");
    SP_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &d_scale, sizeof(d_scale)));
  }
  const float alpha = shape_.alpha, beta = shape_.has_c ? shape_.beta : 0.f;
  const auto& algo = algos_[static_cast<size_t>(chosen_)];
  // Without a C term C is D (same layout), except for a float8 D: its C layout has another type,
  // and cuBLASLt takes no C at all then (as Transformer Engine passes it).
  const void* cp = shape_.has_c ? c : shape_.fp8_d != Fp8Type::kNone ? nullptr : d;
  SP_CUBLAS(cublasLtMatmul(handle, op_, &alpha, b, lb_, a, la_, &beta, cp, lc_, d, ld_, &algo.algo, workspace,
                           workspace_bytes, stream));
  return Status::Ok();
}

}  // namespace sampan::cuda
