// Times the fused attention kernel (backends/cuda/attention.h) alone on transformer shapes, every
// tactic (query warps per block), with an FP16 output and, where the variant has it, a float8
// one (the quantized output of FP8 builds), CUDA events over back-to-back launches. Built once
// per kernel variant by attention_probe.sh (-I picks the variant's attention.h/.cu before
// src/), so one GPU run compares variants on the same card. Prints: variant, shape, tactic,
// output, microseconds per launch, effective GB/s (Q, K, V read once, the output written once)
// and a checksum of the output.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backends/cuda/attention.h"

#ifndef PROBE_VARIANT
#define PROBE_VARIANT "tree"
#endif

using namespace sampan::cuda;

#define CHECK(x)                                                             \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

struct Shape {
  const char* name;
  int64_t b, s, h, d;
  bool mask;  // a [B, 1, 1, S] key-padding mask (BERT)
};

int main() {
  CHECK(PrepareFusedAttention());
  const Shape shapes[] = {{"bert_b128", 128, 128, 12, 64, true},
                          {"bert_b32", 32, 128, 12, 64, true},
                          {"vit_b32", 32, 197, 12, 64, false},
                          {"minilm_b32", 32, 128, 12, 32, true}};
  for (const Shape& sh : shapes) {
    const int64_t b = sh.b, s = sh.s, h = sh.h, d = sh.d;
    const size_t qkv_elems = static_cast<size_t>(b * s * 3 * h * d), out_elems = static_cast<size_t>(b * s * h * d);
    std::vector<__half> host(qkv_elems);
    uint32_t x = 12345;
    for (auto& v : host) {
      x = x * 1664525u + 1013904223u;
      v = __float2half(static_cast<float>(x >> 8) / 16777216.f * 2.f - 1.f);
    }
    std::vector<__half> mask_host(static_cast<size_t>(b * s));
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < s; ++j) mask_host[i * s + j] = __float2half(j < s - (i % 17) ? 0.f : -10000.f);
    __half *qkv, *out, *mask;
    CHECK(cudaMalloc(&qkv, qkv_elems * 2));
    CHECK(cudaMalloc(&out, out_elems * 2));
    CHECK(cudaMalloc(&mask, mask_host.size() * 2));
    CHECK(cudaMemcpy(qkv, host.data(), qkv_elems * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(mask, mask_host.data(), mask_host.size() * 2, cudaMemcpyHostToDevice));
    AttentionParams p;
    p.slices = b * h;
    p.heads = h;
    p.sq = p.sk = s;
    p.d = d;
    p.scale = 0.125f;
    p.q = p.k = p.v = {s * 3 * h * d, d, 3 * h * d, 1};
    p.out = {s * h * d, d, h * d, 1};
    if (sh.mask) {
      p.mask = mask;
      p.mask_batch_div = h;
      p.mask_batch_mod = b;
      p.mask_batch_stride = s;
      p.mask_row_stride = 0;
      p.mask_col_stride = 1;
    }
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (int w : {2, 4, 8}) {
      for (int quant = 0; quant < 2; ++quant) {
#ifndef PROBE_HAS_QUANT
        if (quant) continue;
#else
        p.quantized = quant != 0;
        p.q8.scale = 0.01f;
        p.q8.inv_scale = 100.f;
#endif
        p.warps = w;
        auto launch = [&] {
          CHECK(LaunchFusedAttention(FloatType::kF16, qkv, qkv + h * d, qkv + 2 * h * d, out, p, st));
        };
        for (int i = 0; i < 20; ++i) launch();
        const int n = 200;
        CHECK(cudaEventRecord(e0, st));
        for (int i = 0; i < n; ++i) launch();
        CHECK(cudaEventRecord(e1, st));
        CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        const size_t out_bytes = out_elems * (quant ? 1 : 2);
        std::vector<unsigned char> o(out_bytes);
        CHECK(cudaMemcpy(o.data(), out, out_bytes, cudaMemcpyDeviceToHost));
        double sum = 0;
        for (size_t i = 0; i + 1 < o.size(); i += 14) {
          const double v = quant ? static_cast<double>(o[i]) : __half2float(*reinterpret_cast<const __half*>(&o[i]));
          sum += v * static_cast<double>(i % 13 + 1);
        }
        const double us = ms * 1e3 / n;
        const double gbs = (static_cast<double>(qkv_elems) * 2 + static_cast<double>(out_bytes)) / (us * 1e3);
        std::printf("%-8s %-11s warps %d %-5s %8.2f us  %6.0f GB/s  checksum %.6e\n", PROBE_VARIANT, sh.name, w,
                    quant ? "fp8" : "fp16", us, gbs, sum);
      }
    }
    CHECK(cudaFree(qkv));
    CHECK(cudaFree(out));
    CHECK(cudaFree(mask));
    CHECK(cudaStreamDestroy(st));
  }
  return 0;
}
