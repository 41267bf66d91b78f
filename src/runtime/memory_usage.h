// What an engine or a context holds in memory, by kind and place (Engine::MemoryUsage,
// Context::MemoryUsage; the server sums them into Triton's statistics memory_usage).
//
// Figures are the bytes asked of the allocator (malloc, cudaMalloc, cudaHostAlloc) for the
// buffers the runtime and its backends own. What no figure covers:
//   - the allocators' own rounding (the CUDA driver hands out device memory in pages of up to
//     2 MiB, so nvidia-smi shows more than the figures add up to);
//   - memory the libraries keep behind their handles (a cuDNN or cuBLASLt handle, oneDNN's
//     primitive caches and scratchpads), the CUDA context itself, and instantiated CUDA graphs
//     (the CUDA API gives no size for a cudaGraphExec_t);
//   - host memory of planning (the IR, kernel objects, descriptors) and per-run temporaries
//     (a host step's tensors, RunDevice outputs handed to the caller).
// A figure marked `estimate` was computed before the memory was allocated
// (BackendEngine::EstimateContextMemory), not read off allocations.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace sampan::runtime {

enum class MemoryKind {
  kPlanWeights,  //!< the plan's constants as loaded (mapped or parsed), shared by every engine of that plan
  kWeights,      //!< weights an engine made of them: a device copy, reordered or repacked forms
  kArena,        //!< activations: one arena per input-shape signature (bucket, program) a context planned
  kFolded,       //!< values fixed per input shape (shape arithmetic, folded constants) kept for the runs
  kKernel,       //!< data kernels prepared for one shape (a convolution's weights in another layout)
  kWorkspace,    //!< scratch shared by a context's kernels (cuBLASLt/cuDNN workspace, kernels' own)
  kStaging,      //!< page-locked host buffers for transfers to and from the device
};
enum class MemoryPlace { kHost, kPinnedHost, kDevice };

const char* MemoryKindName(MemoryKind kind);     //!< "plan weights", "weights", "arena", ...
const char* MemoryPlaceName(MemoryPlace place);  //!< "host", "pinned host", "device"

struct MemoryFigure {
  MemoryKind kind = MemoryKind::kArena;
  MemoryPlace place = MemoryPlace::kHost;
  int device = 0;  //!< the GPU ordinal for kDevice; 0 otherwise
  uint64_t bytes = 0;
  bool estimate = false;  //!< computed ahead of allocation (see the file comment)
};

//! Figures, at most one per (kind, place, device, estimate).
class MemoryReport {
 public:
  //! Adds `bytes` to the figure of (kind, place, device); zero bytes add nothing.
  void Add(MemoryKind kind, MemoryPlace place, int device, uint64_t bytes, bool estimate = false);
  void Add(const MemoryReport& other);
  //! Subtracts what Add added (a buffer freed); never below 0.
  void Remove(MemoryKind kind, MemoryPlace place, int device, uint64_t bytes);
  //! Every figure times n (n contexts alike).
  MemoryReport Times(uint64_t n) const;

  const std::vector<MemoryFigure>& figures() const { return figures_; }
  bool empty() const { return figures_.empty(); }
  //! Bytes of one kind at one place (device: the ordinal, for kDevice).
  uint64_t Bytes(MemoryKind kind, MemoryPlace place, int device = 0) const;
  //! Bytes of every kind at one place.
  uint64_t Total(MemoryPlace place, int device = 0) const;
  //! The GPU ordinals with a figure.
  std::vector<int> Devices() const;
  //! "arena device 0: 12.0 MiB, workspace device 0: 32.0 MiB (estimate), ..." ("nothing" when empty).
  std::string ToString() const;

 private:
  std::vector<MemoryFigure> figures_;
};

//! A report that one thread updates while others read it (a context allocates on its run
//! thread; the server's statistics read it from another).
class MemoryTally {
 public:
  void Add(MemoryKind kind, MemoryPlace place, int device, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    report_.Add(kind, place, device, bytes);
  }
  void Remove(MemoryKind kind, MemoryPlace place, int device, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    report_.Remove(kind, place, device, bytes);
  }
  void Add(const MemoryReport& r) {
    std::lock_guard<std::mutex> lock(mu_);
    report_.Add(r);
  }
  MemoryReport Snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return report_;
  }

 private:
  mutable std::mutex mu_;
  MemoryReport report_;
};

//! "1.5 GiB", "12.0 MiB", "512 bytes".
std::string BytesText(uint64_t bytes);

}  // namespace sampan::runtime
