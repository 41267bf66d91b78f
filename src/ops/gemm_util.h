// A small, cache-friendly reference GEMM shared by Conv, ConvTranspose, Gemm and
// MatMul: C[M,N] += A[M,K] * B[K,N], all row-major with leading dimensions.
// The loop order is i-k-j (contiguous, vectorisable inner loop over N) with
// blocking over N and K so the active panel of B stays in cache, and four rows
// of A at a time so every load of B feeds four multiply-adds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "base/convert.h"

namespace sampan::ops {

//! The type a GEMM on T accumulates in: float for float/half/bfloat16, double
//! for double, T itself for integers.
template <class T>
using GemmAccType = ComputeType<T>;

//! C[M,N] += A[M,K] * B[K,N]. A, B and C must not overlap.
template <class T>
void GemmAccumulate(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
                    int64_t ldc) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  constexpr int64_t kBlockN = 512;
  constexpr int64_t kBlockK = 256;
  for (int64_t j0 = 0; j0 < N; j0 += kBlockN) {
    const int64_t jn = std::min(kBlockN, N - j0);
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      const int64_t kn = std::min(kBlockK, K - k0);
      int64_t i = 0;
      for (; i + 4 <= M; i += 4) {
        T* __restrict c0 = C + i * ldc + j0;
        T* __restrict c1 = c0 + ldc;
        T* __restrict c2 = c1 + ldc;
        T* __restrict c3 = c2 + ldc;
        const T* a0 = A + i * lda + k0;
        const T* a1 = a0 + lda;
        const T* a2 = a1 + lda;
        const T* a3 = a2 + lda;
        for (int64_t k = 0; k < kn; ++k) {
          const T v0 = a0[k], v1 = a1[k], v2 = a2[k], v3 = a3[k];
          const T* __restrict b = B + (k0 + k) * ldb + j0;
          for (int64_t j = 0; j < jn; ++j) {
            const T bj = b[j];
            c0[j] += v0 * bj;
            c1[j] += v1 * bj;
            c2[j] += v2 * bj;
            c3[j] += v3 * bj;
          }
        }
      }
      for (; i < M; ++i) {
        T* __restrict c = C + i * ldc + j0;
        const T* a = A + i * lda + k0;
        for (int64_t k = 0; k < kn; ++k) {
          const T v = a[k];
          const T* __restrict b = B + (k0 + k) * ldb + j0;
          for (int64_t j = 0; j < jn; ++j) c[j] += v * b[j];
        }
      }
    }
  }
}

//! Dst[cols, rows] = transpose of Src[rows, cols] (leading dimension ld_src).
template <class T>
void TransposeInto(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * ld_src + c];
    }
}

//! `n` elements of `p` as Acc: `p` itself when T is Acc, otherwise converted into `buf`.
template <class Acc, class T>
const Acc* AsAccumType(const T* p, int64_t n, std::vector<Acc>& buf) {
  if constexpr (std::is_same_v<Acc, T>) {
    return p;
  } else {
    buf.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = ConvertElement<Acc>(p[i]);
    return buf.data();
  }
}

}  // namespace sampan::ops
