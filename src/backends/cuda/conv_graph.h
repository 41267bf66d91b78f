// Convolutions through cuDNN 9's graph (backend) API: act(conv(x, w) + bias + z)
// as one operation graph — convolution, then pointwise bias add, residual add and
// ReLU on the fp32 accumulator — so cuDNN's fused Hopper/Ampere engines run the
// whole epilogue inside the convolution kernel. The heuristic (mode A) proposes
// engine configurations; the builder times them next to the legacy algorithms
// (conv.h) and records the winner by its position in the heuristic's list, which
// is deterministic for one cuDNN version, device and shape (the timing cache and
// plans are keyed by all three). Channels-last 2-D, fp16/bf16, groups 1; anything
// else, or a graph cuDNN has no engine for, stays on the legacy path.
#pragma once

#include <cudnn.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/conv.h"
#include "base/status.h"

namespace sampan::cuda {

//! Owns one cudnnBackendDescriptor_t.
class BackendDesc {
 public:
  BackendDesc() = default;
  ~BackendDesc();
  BackendDesc(BackendDesc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  BackendDesc& operator=(BackendDesc&& o) noexcept;
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;
  Status Create(cudnnBackendDescriptorType_t type);
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* ptr() { return &d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

class ConvGraph {
 public:
  //! Whether the graph path applies to this convolution at all (layout, type, activation).
  static bool Eligible(const ConvShape& s);
  //! Builds the operation graph and asks the heuristic for engine configurations.
  //! Unsupported when cuDNN offers none (the caller keeps the legacy path).
  Status Build(cudnnHandle_t handle, const ConvShape& s);
  //! Positions in the heuristic's list worth timing: configurations that do not
  //! compile kernels at run time (unless SAMPAN_CUDNN_RTC=1) and do not reduce in
  //! half precision.
  const std::vector<int>& candidates() const { return candidates_; }
  //! Finalizes the execution plan of configuration `index` (cached per index).
  Status Select(int index);
  int selected() const { return selected_; }
  size_t workspace_needed() const;
  //! A short description of the selected engine, for build reports.
  std::string Describe() const;
  Status Run(cudnnHandle_t handle, const void* x, const void* w, const void* bias, const void* z, void* y,
             void* workspace, size_t workspace_bytes, cudaStream_t stream);

 private:
  struct PlanEntry {
    BackendDesc plan;
    size_t workspace = 0;
    int64_t engine = -1;  //!< cuDNN's global engine index
    bool failed = false;
  };
  ConvShape s_;
  cudnnHandle_t handle_ = nullptr;
  std::vector<BackendDesc> tensors_, ops_;  // kept alive for the graph's lifetime
  BackendDesc conv_desc_;
  std::vector<BackendDesc> pw_descs_;
  BackendDesc graph_;
  std::vector<BackendDesc> configs_;
  std::vector<int64_t> engines_;  //!< global engine index per configuration
  std::vector<int> candidates_;
  std::vector<std::unique_ptr<PlanEntry>> plans_;
  int selected_ = -1;
  // The last variant pack and the pointers it was made for (stable across runs of a bucket).
  BackendDesc pack_;
  std::array<const void*, 6> pack_ptrs_{};
};

}  // namespace sampan::cuda
