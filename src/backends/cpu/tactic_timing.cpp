#include "backends/cpu/tactic_timing.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <random>

namespace sampan::cpu {

ScopedOmpThreads::ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) {
  omp_set_num_threads(threads);
}

ScopedOmpThreads::~ScopedOmpThreads() {
  omp_set_num_threads(saved_);
}

TimingBuffers::TimingBuffers(const dnnl::engine& eng, dnnl::stream& stream, const dnnl::memory::desc& src_md,
                             const dnnl::memory::desc& dst_md, const dnnl::memory::desc& weights_md,
                             const dnnl::memory::desc& scratchpad_md, const dnnl::memory::desc& plain_weights_md,
                             const float* plain_weights, const dnnl::memory::desc& bias_md, const float* bias)
    : src(src_md, eng), dst(dst_md, eng), weights(weights_md, eng) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  float* sp = src_data();
  for (size_t i = 0; i < src_md.get_size() / sizeof(float); ++i) sp[i] = uni(rng);
  std::memset(dst.get_data_handle(), 0, dst_md.get_size());
  dnnl::memory wplain(plain_weights_md, eng, const_cast<float*>(plain_weights));
  dnnl::reorder(wplain, weights).execute(stream, wplain, weights);
  args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  if (bias) args[DNNL_ARG_BIAS] = dnnl::memory(bias_md, eng, const_cast<float*>(bias));
  if (scratchpad_md.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(scratchpad_md, eng);
}

void Evict(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; i += 64) _mm_clflush(c + i);
  _mm_mfence();
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<double> MedianTimes(size_t n, const std::function<double(size_t)>& run) {
  double first = 0;
  for (size_t i = 0; i < n; ++i) first = std::max(first, run(i));
  const int rounds = std::clamp(static_cast<int>(250.0 / (static_cast<double>(n) * std::max(first, 1e-3))), 3, 7);
  std::vector<std::vector<double>> times(n);
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < n; ++i) times[i].push_back(run(i));
  std::vector<double> medians;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  return medians;
}

}  // namespace sampan::cpu
