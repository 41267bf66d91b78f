#pragma once

// How a product by a constant weight runs (MatMul, Gemm and their fused forms, as one
// [M, K] x [K, N] product): our packed GEMM (packed_gemm.h) or oneDNN's matmul primitive,
// chosen per node for the program's shapes, the way conv_winograd.cpp chooses convolution
// algorithms. Neither wins everywhere: oneDNN 2.6's brgemm matmul (AVX-512) ran MiniLM b8 in
// 96-111 ms on a Xeon where the packed GEMM took 176-184, and the two are on par on an AVX-512
// EPYC; without AVX-512 oneDNN's matmul is its gemm:jit driver, which allocates its packing
// buffers (posix_memalign) on every call, something no inference of ours may do.
//
// Policy, first match wins:
//   SAMPAN_CPU_PACKED_GEMM=0 / =1   oneDNN's matmul / the packed GEMM for every product both
//                                   can run (comparisons; =0 runs oneDNN even where it allocates);
//   the plan's recorded choice      plan.choices[node].tactic.algo (ProductAlgo), so a loaded
//                                   plan computes the same bits in every process;
//   oneDNN's implementation is gemm:* (allocates per call)   the packed GEMM, untimed;
//   otherwise, by a rule            oneDNN's matmul when the active ISA has AMX, else the packed
//                                   GEMM: deterministic, so two builds of a model (and the
//                                   calibration that runs these products) compute the same bits;
//   SAMPAN_CPU_TIME_PRODUCTS=1      instead both timed on the program's shapes and the engine's
//                                   threads (weights evicted, alternating; tactic_timing.h); oneDNN
//                                   kept only when 15% faster; cached per process.

#include <dnnl.hpp>
#include <string>

#include "backends/cpu/packed_gemm.h"
#include "backends/cpu/program.h"

namespace sampan::cpu {

//! plan.choices[].tactic.algo of a product by a constant weight.
enum class ProductAlgo : int { kPackedGemm = 0, kOneDnnMatMul = 1 };

//! A product as the packed GEMM runs it: W(k, n) = w[k * stride_k + n * stride_n].
struct PackedProduct {
  std::string node;
  int64_t rows = 0, k = 0, n = 0;
  const Tensor* weights = nullptr;  //!< the tensor `w` points into (WeightCache key)
  const float* w = nullptr;
  int64_t stride_k = 0, stride_n = 0;
  const Tensor* bias_tensor = nullptr;
  const float* bias = nullptr;  //!< [bias_n] (bias_n = n or 1) or null
  int64_t bias_n = 0;
  GemmAct act = GemmAct::kNone;  //!< in registers
  float p0 = 0.f, p1 = 0.f;
  dnnl::algorithm post = dnnl::algorithm::undef;  //!< activation run as a oneDNN eltwise step after it
  float post_alpha = 0.f;
};

//! True when oneDNN's matmul implementation named `impl` (impl_info_str()) allocates heap
//! memory on every call: gemm:* (the sgemm driver's packing buffers).
bool OneDnnMatMulAllocates(const std::string& impl);

//! Which of the packed GEMM and oneDNN's matmul `pd` (the same product, bias and activation
//! fused; its weights stored as `plain_weights` describes `p.w`, its bias as `bias_md`) runs
//! `p.node` (policy above). Notes the choice (ProgramBuilder::NoteAlgo) and how it was made.
Result<ProductAlgo> ChooseProductAlgo(ProgramBuilder& b, const PackedProduct& p, const dnnl::matmul::primitive_desc& pd,
                                      const dnnl::memory::desc& plain_weights, const dnnl::memory::desc& bias_md);

}  // namespace sampan::cpu
