// ParallelCopy (server/core/parallel_copy.h): the batch gather's copies land intact
// whether they run on the pool or serially, from several batches at once.
#include "server/core/parallel_copy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <random>
#include <thread>

namespace sampan::server {
namespace {

// Spans of assorted sizes (0 bytes, odd sizes, a few MB) gathered back to back.
void GatherAndCheck(uint64_t seed, size_t min_parallel) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<unsigned char>> srcs;
  size_t total = 0;
  for (int i = 0; i < 40; ++i) {
    const size_t n = i % 7 == 0 ? 0 : (i % 5 == 0 ? (1u << 20) + rng() % 4096 : rng() % 200000);
    std::vector<unsigned char> v(n);
    for (auto& b : v) b = static_cast<unsigned char>(rng());
    total += n;
    srcs.push_back(std::move(v));
  }
  std::vector<unsigned char> dst(total, 0xAB);
  std::vector<CopySpan> spans;
  size_t off = 0;
  for (const auto& s : srcs) {
    spans.push_back({dst.data() + off, s.data(), s.size()});
    off += s.size();
  }
  ParallelCopy(spans, min_parallel);
  off = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    ASSERT_TRUE(std::equal(srcs[i].begin(), srcs[i].end(), dst.begin() + static_cast<long>(off))) << "span " << i;
    off += srcs[i].size();
  }
}

TEST(ParallelCopy, PoolAndSerialCopiesAreExact) {
  setenv("SAMPAN_GATHER_THREADS", "3", 0);  // before the pool's first use in this process
  GatherAndCheck(1, 0);                     // on the pool
  GatherAndCheck(2, size_t{1} << 40);       // serial
  EXPECT_GE(ParallelCopyThreads(), 0);
}

TEST(ParallelCopy, ConcurrentBatches) {
  setenv("SAMPAN_GATHER_THREADS", "3", 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int r = 0; r < 5; ++r) GatherAndCheck(100 + static_cast<uint64_t>(t * 10 + r), 0);
    });
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace sampan::server
