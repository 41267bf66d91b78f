// Tensor-core building blocks shared by our own kernels (attention.cu, conv_pool.cu):
// mma.sync m16n8k16 with float accumulators for FP16 and BF16, register packing,
// ldmatrix, 32-bit shared loads and cp.async copies. sm_80+ (callers guard with
// __CUDA_ARCH__). Fragment layouts (PTX ISA, mma.m16n8k16 .f16/.bf16, g = lane / 4,
// t = lane % 4):
//   A 16x16: a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
//   B 16x8:  b0 (k = 2t..2t+1, n = g) b1 (k = 2t+8.., n = g)
//   C 16x8:  c0,c1 (g, 2t..2t+1) c2,c3 (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace sampan::cuda {

//! Two floats rounded into one 32-bit register of T (lo in the low half).
template <class T>
__device__ __forceinline__ uint32_t Pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t Pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t Pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

//! The two values of a register packed by Pack2, as floats (lo in .x).
template <class T>
__device__ __forceinline__ float2 Unpack2(uint32_t u);
template <>
__device__ __forceinline__ float2 Unpack2<__half>(uint32_t u) {
  return __half22float2(*reinterpret_cast<const __half2*>(&u));
}
template <>
__device__ __forceinline__ float2 Unpack2<__nv_bfloat16>(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}

//! Element-wise max of two registers packed by Pack2 (exact; a NaN loses to a number).
template <class T>
__device__ __forceinline__ uint32_t Max2(uint32_t a, uint32_t b);
template <>
__device__ __forceinline__ uint32_t Max2<__half>(uint32_t a, uint32_t b) {
  const __half2 m = __hmax2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&m);
}
template <>
__device__ __forceinline__ uint32_t Max2<__nv_bfloat16>(uint32_t a, uint32_t b) {
  const __nv_bfloat162 m =
      __hmax2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&m);
}

//! The 16 bits of a value of T.
__device__ __forceinline__ uint32_t Bits16(__half v) {
  return __half_as_ushort(v);
}
__device__ __forceinline__ uint32_t Bits16(__nv_bfloat16 v) {
  return __bfloat16_as_ushort(v);
}

//! c += A * B for one m16n8k16 tile (float accumulators).
template <class T>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void Mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void Mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

//! Four 8x8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
//! LdMatrixX4 from a 32-bit shared-memory address (__cvta_generic_to_shared).
__device__ __forceinline__ void LdMatrixX4At(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
//! 32 bits from a 32-bit shared-memory address: no 64-bit generic address arithmetic.
__device__ __forceinline__ uint32_t Lds32At(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
//! Four 8x8 b16 matrices, each transposed, from a 32-bit shared-memory address (lane l
//! gives row l % 8 of matrix l / 8).
__device__ __forceinline__ void LdMatrixX4TransAt(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

//! 16 bytes global -> shared without a register round trip (zeros when !valid; `src` must
//! still be a valid address). Complete after CpAsyncWaitAll.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
//! Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWaitGroup() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <class T>
__device__ __forceinline__ uint32_t Lds32(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

}  // namespace sampan::cuda
