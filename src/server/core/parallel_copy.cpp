#include "server/core/parallel_copy.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace sampan::server {
namespace {

// Threads beside the caller: a quarter of the cores, at most 3, none on a 2-core
// machine (SAMPAN_GATHER_THREADS overrides, 0 = serial).
int WantedWorkers() {
  if (const char* e = std::getenv("SAMPAN_GATHER_THREADS")) return std::clamp(std::atoi(e), 0, 15);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores / 4 - 1, 0, 3);
}

class CopyPool {
 public:
  explicit CopyPool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~CopyPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int workers() const { return static_cast<int>(threads_.size()); }

  // Splits the bytes of `spans` into (workers + 1) shares of whole chunks.
  // False (nothing copied) while another batch holds the pool.
  bool Run(const std::vector<CopySpan>& spans, size_t total) {
    std::unique_lock<std::mutex> one_at_a_time(run_mu_, std::try_to_lock);
    if (!one_at_a_time.owns_lock()) return false;
    chunks_.clear();
    const size_t parts = threads_.size() + 1;
    const size_t chunk = std::max<size_t>((total + parts * 4 - 1) / (parts * 4), size_t{256} << 10);
    for (const CopySpan& s : spans)
      for (size_t off = 0; off < s.bytes; off += chunk)
        chunks_.push_back(
            {static_cast<char*>(s.dst) + off, static_cast<const char*>(s.src) + off, std::min(chunk, s.bytes - off)});
    {
      std::lock_guard<std::mutex> lock(mu_);
      next_ = 0;
      pending_ = threads_.size();
      ++generation_;
    }
    cv_.notify_all();
    Work();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    return true;
  }

 private:
  void Work() {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (next_ >= chunks_.size()) return;
        i = next_++;
      }
      const CopySpan& c = chunks_[i];
      std::memcpy(c.dst, c.src, c.bytes);
    }
  }
  void Loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      Work();
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<CopySpan> chunks_;
  size_t next_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

CopyPool* Pool() {
  static CopyPool* pool = [] {
    const int n = WantedWorkers();
    return n > 0 ? new CopyPool(n) : nullptr;  // lives for the process (threads joined never)
  }();
  return pool;
}

}  // namespace

void ParallelCopy(const std::vector<CopySpan>& spans, size_t parallel_min_bytes) {
  size_t total = 0;
  for (const CopySpan& s : spans) total += s.bytes;
  CopyPool* pool = total >= parallel_min_bytes && spans.size() > 1 ? Pool() : nullptr;
  // Serial when small, when the pool is off, or while another batch's gather holds it.
  if (pool == nullptr || !pool->Run(spans, total)) {
    for (const CopySpan& s : spans)
      if (s.bytes) std::memcpy(s.dst, s.src, s.bytes);
  }
}

int ParallelCopyThreads() {
  CopyPool* p = Pool();
  return p ? p->workers() : 0;
}

}  // namespace sampan::server
