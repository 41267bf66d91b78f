// CudaContext's per-input-shape state (private to the context's files): what Plan
// (context_plan.cpp) prepares for one bucket and Launch/Complete (context.cpp) run.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "backends/cuda/context.h"

namespace sampan::cuda {

//! Alignment of values in a bucket's device arena.
constexpr size_t kArenaAlign = 256;

//! SAMPAN_CUDA_PROFILE=1 (context.cpp).
bool ProfileSteps();

struct CudaContext::Bucket {
  enum class Kind { kDevice, kView, kHost };
  struct Step {
    const ir::Node* node = nullptr;
    Kind kind = Kind::kDevice;
    std::unique_ptr<NodeKernel> kernel;
    cudaEvent_t prof_start = nullptr, prof_stop = nullptr;  //!< SAMPAN_CUDA_PROFILE only
    double prof_ms = 0;
  };
  struct Val {
    DType dtype = DType::kUndefined;
    Shape shape;
    void* dev = nullptr;
    Tensor host;           //!< known on the host (constant, planned shape arithmetic, or a host step's last output)
    bool planned = false;  //!< host value fixed for this bucket (does not change between runs)
    bool device = false;   //!< lives in device memory (arena, weight or a dedicated buffer)
    //! A string tensor, sequence or optional: held in `host` only (no device memory, no
    //! kernel reads it; host steps read and write it there).
    bool object = false;
    size_t bytes() const { return DTypeBytes(dtype, NumElements(shape)); }  // packed types round up
  };
  std::vector<Step> steps;
  std::unordered_map<const ir::Value*, Val> vals;
  void* arena = nullptr;
  size_t arena_bytes = 0;
  std::vector<void*> dedicated;  //!< uploaded planned host values
  bool host_steps = false;       //!< some node runs on the host each time (no CUDA graph)
  bool whole_graph_on_host = false;
  std::vector<void*> in_pinned, out_pinned;
  cudaGraphExec_t graph = nullptr;
  bool graph_failed = false;
  bool inputs_resident = false;  //!< inputs uploaded at least once (reused when transfers are off)
  int runs = 0;
  Stats stats;
  //! What Plan allocated for it (or, planned without allocating, would have): arena, uploaded
  //! folded values, kernels' own data, pinned staging. The context's workspace is apart.
  runtime::MemoryReport memory;
  size_t workspace_need = 0;  //!< the largest workspace one of its kernels needs

  int prof_runs = 0;

  ~Bucket() {
    for (Step& st : steps) {
      if (st.prof_start) cudaEventDestroy(st.prof_start);
      if (st.prof_stop) cudaEventDestroy(st.prof_stop);
    }
    if (graph) cudaGraphExecDestroy(graph);
    if (arena) cudaFree(arena);
    for (void* p : dedicated) cudaFree(p);
    for (void* p : in_pinned)
      if (p) cudaFreeHost(p);
    for (void* p : out_pinned)
      if (p) cudaFreeHost(p);
  }
};

}  // namespace sampan::cuda
