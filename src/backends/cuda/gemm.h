// Matrix products through cuBLASLt: row-major D = act(alpha * op(A) . op(B) + beta * C + bias),
// batched with element strides (0 broadcasts an operand over the batch).
// The product runs as the column-major D^T = B^T . A^T, so no data is transposed.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_types.h"
#include "backends/cuda/node_kernel.h"
#include "base/status.h"

namespace sampan::cuda {

//! Workspace given to cuBLASLt products (Hopper's fastest kernels want up to 32 MiB).
constexpr size_t kGemmWorkspace = 32u << 20;
//! Heuristic candidates the builder times for a Gemm/MatMul node.
constexpr int kGemmCandidates = 16;

enum class GemmEpilogue { kNone, kRelu, kGeluTanh };

//! Storage of an FP8 product's operand or result (kNone: stored in GemmShape::type).
enum class Fp8Type { kNone, kE4M3, kE5M2 };

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;  //!< elements between batch items
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;                      //!< row-major leading dims (0: packed)
  FloatType type = FloatType::kF32;
  bool tf32 = false;  //!< f32 only: allow TF32 tensor cores
  float alpha = 1.f, beta = 0.f;
  bool has_c = false;     //!< beta * C term (C may alias D)
  bool has_bias = false;  //!< bias[n] added in the epilogue
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  //! FP8 products (Hopper/Ada tensor cores): A and B in float8, accumulated in f32, C and bias in
  //! `type`, D in `type` or float8 (then scaled by the device float given to Run as d_scale).
  //! cuBLASLt takes only B transposed (trans_b, trans_a false) with 16-byte-aligned rows.
  Fp8Type fp8_a = Fp8Type::kNone, fp8_b = Fp8Type::kNone, fp8_d = Fp8Type::kNone;
  bool fp8() const { return fp8_a != Fp8Type::kNone; }
};

//! Splits a fused activation into what cuBLASLt's epilogue runs (`epi`: ReLU, tanh-GELU)
//! and what runs as a pass after the product (`post`, kIdentity when nothing does). In
//! half precision the erf form of GELU also goes to the tanh-form epilogue: the two differ
//! by at most 4.7e-4 (at x = 2.7, where fp16's spacing is 2e-3), less than the rounding of
//! the fp16 result, and it saves a pass over the widest activation in BERT. The epilogue
//! applies to alpha * A.B + beta * C + bias, the fused ops' act(product + addend) order.
void SplitEpilogue(UnaryOp act, FloatType type, GemmEpilogue* epi, UnaryOp* post);

//! The operand forms cuBLASLt's FP8 products take (Ok for products that are not FP8). Asked by
//! Gemm::Prepare and by the capability query, which must refuse what lowering would.
Status CheckFp8Operands(const GemmShape& s);

//! A prepared product: descriptors built once, an algorithm chosen (by index into
//! cuBLASLt's heuristic list), reused for every run with the same shape.
class Gemm {
 public:
  Gemm() = default;
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  //! Builds descriptors and asks the heuristic for up to `max_algos` candidates.
  Status Prepare(cublasLtHandle_t handle, const GemmShape& shape, size_t workspace_bytes, int max_algos = 8);
  int num_algos() const { return static_cast<int>(algos_.size()); }
  void select(int algo) { chosen_ = algo; }
  int selected() const { return chosen_; }
  //! Workspace the selected algorithm needs.
  size_t workspace_needed() const;
  //! `d_scale`: device float D is multiplied by when D is float8 (GemmShape::fp8_d), else unused.
  Status Run(cublasLtHandle_t handle, const void* a, const void* b, const void* c, const void* bias, void* d,
             void* workspace, size_t workspace_bytes, cudaStream_t stream, const float* d_scale = nullptr) const;

 private:
  GemmShape shape_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr, ld_ = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos_;
  int chosen_ = 0;
};

//! A node kernel built on one prepared product: its tactics are the product's cuBLASLt
//! algorithms (the builder times them; plan::Tactic records the index).
class GemmNodeKernel : public NodeKernel {
 public:
  size_t workspace() const override { return kGemmWorkspace; }
  std::vector<int> Candidates() const override {
    std::vector<int> c;
    for (int i = 0; i < gemm_.num_algos(); ++i) c.push_back(i);
    return c;
  }
  Status Select(int algo) override {
    if (algo < 0 || algo >= gemm_.num_algos()) return InvalidArgument("no cuBLASLt algorithm ", algo);
    gemm_.select(algo);
    return Status::Ok();
  }
  int selected() const override { return gemm_.selected(); }

 protected:
  //! Prepares the product and selects `algo` when it names one of its candidates.
  Status PrepareGemm(const RunEnv& env, const GemmShape& shape, int algo) {
    SP_RETURN_IF_ERROR(gemm_.Prepare(env.lt, shape, kGemmWorkspace, kGemmCandidates));
    if (algo >= 0 && algo < gemm_.num_algos()) gemm_.select(algo);
    return Status::Ok();
  }
  Gemm gemm_;
};

}  // namespace sampan::cuda
