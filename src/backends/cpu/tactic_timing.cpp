#include "backends/cpu/tactic_timing.h"

#include <immintrin.h>

#include <algorithm>

namespace sampan::cpu {

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
