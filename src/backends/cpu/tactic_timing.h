#pragma once

// What timing one tactic against another on the program's shapes takes (the convolution
// algorithms of conv_winograd.cpp, the product algorithms of product_algo.cpp): runs with
// the weights evicted from the caches (in a network every layer's weights are cold: the model
// is larger than the cache), candidates alternating, the median of each kept.

#include <chrono>
#include <cstddef>
#include <dnnl.hpp>
#include <functional>
#include <unordered_map>
#include <vector>

namespace sampan::cpu {

//! Sets OpenMP's thread count (the plan's, while its tactics are timed) and restores the
//! caller's at the end of the scope, however it ends.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

//! What a oneDNN primitive runs on while it is timed against another tactic: a float source
//! of uniform random values in [-1, 1) (one fixed seed), a zeroed destination, the plain
//! weights reordered into the primitive's layout, the bias (when given) and a scratchpad (when
//! it needs one); `args` names them for `primitive::execute`. Throws dnnl::error.
struct TimingBuffers {
  TimingBuffers(const dnnl::engine& eng, dnnl::stream& stream, const dnnl::memory::desc& src_md,
                const dnnl::memory::desc& dst_md, const dnnl::memory::desc& weights_md,
                const dnnl::memory::desc& scratchpad_md, const dnnl::memory::desc& plain_weights_md,
                const float* plain_weights, const dnnl::memory::desc& bias_md, const float* bias);
  float* src_data() const { return static_cast<float*>(src.get_data_handle()); }
  float* dst_data() const { return static_cast<float*>(dst.get_data_handle()); }

  dnnl::memory src, dst, weights;
  std::unordered_map<int, dnnl::memory> args;
};

//! Writes every cache line of [p, p + bytes) back to memory and drops it from the caches.
void Evict(const void* p, size_t bytes);
//! Milliseconds since t0.
double MsSince(std::chrono::steady_clock::time_point t0);
//! Median time (ms) of each of n candidates: run(i) runs candidate i once and returns its time.
//! Each runs once to warm up (code, scratch pages), then in alternating rounds, as many (3..7)
//! as fit in about a quarter of a second.
std::vector<double> MedianTimes(size_t n, const std::function<double(size_t)>& run);

}  // namespace sampan::cpu
