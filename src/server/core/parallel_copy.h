// Copies for the batch gather: a batch of large inputs (a hundred 150 KB images is
// 15 MB) is concatenated into the engine's pinned input buffer by a few threads
// instead of one, so the gather does not sit on the batch's latency for
// milliseconds. Small batches copy on the calling thread. One process-wide pool of
// worker threads, started on first use; the caller copies a share too.
#pragma once

#include <cstddef>
#include <vector>

namespace sampan::server {

struct CopySpan {
  void* dst;
  const void* src;
  size_t bytes;
};

//! Performs every copy of `spans` (non-overlapping destinations) before returning.
//! Below `parallel_min_bytes` in total, or with one span, all on the calling thread.
void ParallelCopy(const std::vector<CopySpan>& spans, size_t parallel_min_bytes = size_t{4} << 20);

//! Worker threads the pool uses (0 before first use or when copies stay serial).
int ParallelCopyThreads();

}  // namespace sampan::server
