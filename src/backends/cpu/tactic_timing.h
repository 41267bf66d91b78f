#pragma once

// What timing one tactic against another on the program's shapes takes (the convolution
// algorithms of conv_winograd.cpp, the product algorithms of product_algo.cpp): runs with
// the weights evicted from the caches (in a network every layer's weights are cold: the model
// is larger than the cache), candidates alternating, the median of each kept.

#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

namespace sampan::cpu {

//! Writes every cache line of [p, p + bytes) back to memory and drops it from the caches.
void Evict(const void* p, size_t bytes);
//! Milliseconds since t0.
double MsSince(std::chrono::steady_clock::time_point t0);
//! Median time (ms) of each of n candidates: run(i) runs candidate i once and returns its time.
//! Each runs once to warm up (code, scratch pages), then in alternating rounds, as many (3..7)
//! as fit in about a quarter of a second.
std::vector<double> MedianTimes(size_t n, const std::function<double(size_t)>& run);

}  // namespace sampan::cpu
