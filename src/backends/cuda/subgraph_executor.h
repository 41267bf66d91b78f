// The CUDA backend's ops::SubgraphExecutor: an If branch, Loop body or Scan body runs on
// this backend's kernels, as a CUDA engine and context of its own made once per subgraph
// and input types (and values of its small integer captures, compiled in as constants: a Reshape's
// shape read from the enclosing graph), each set of input shapes being one of its shape buckets (planned once,
// then replayed). The control-flow node itself stays a host step of the enclosing context
// (its condition, trip count and carried values are host decisions), so every run of a
// subgraph copies its inputs to the device and its outputs back. A subgraph that holds
// strings, sequences or optionals, whose types cannot be inferred, or whose shapes keep
// changing (more than kMaxSignatures input shape sets: a carried value that grows each
// iteration) is handed back to the reference kernels, and so is a shape bucket that its
// context runs wholly on the host (shapes that depend on data). One executor per
// CudaContext, made current around the context's host steps, so nested subgraphs come
// here too (to the executor of the subgraph's own context). Under SAMPAN_CUDA_PROFILE=1 it
// prints, when it goes away, each subgraph's runs on CUDA kernels and on the reference kernels
// with the reason.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "ops/control_flow.h"
#include "plan/plan.h"
#include "runtime/backend.h"

namespace sampan::cuda {

class CudaEngine;
class CudaContext;

class CudaSubgraphExecutor final : public ops::SubgraphExecutor {
 public:
  static constexpr size_t kMaxSignatures = 8;
  //! Integer captures of at most this many elements are compiled in as constants.
  static constexpr int64_t kMaxEmbeddedElements = 64;

  explicit CudaSubgraphExecutor(const runtime::EngineOptions& options);
  ~CudaSubgraphExecutor() override;
  Result<bool> TryRun(const ir::Graph& graph, int64_t opset, const std::vector<const Tensor*>& inputs,
                      const std::vector<const Tensor*>& captures, std::vector<Tensor>* outputs,
                      const std::string& where) override;

  //! What the subgraphs' engines (their weights on the device) and contexts hold now
  //! (thread-safe).
  runtime::MemoryReport MemoryUsage() const;
  //! Runs taken on CUDA kernels, and runs handed back to the reference kernels (or that the
  //! subgraph's context ran wholly on the host), process-wide (tests, diagnostics).
  static uint64_t runs_on_cuda_kernels() { return taken_.load(); }
  static uint64_t runs_declined() { return declined_.load(); }

 private:
  //! The subgraph compiled for one list of input types and values of its small integer captures.
  struct Program {
    std::string key;             //!< input types, and the embedded captures' values
    std::vector<bool> embedded;  //!< per bound input: compiled in as a constant
    plan::Plan plan;             //!< the engine keeps a reference: a Program never moves
    std::unique_ptr<CudaEngine> engine;
    std::unique_ptr<CudaContext> context;
    std::set<std::vector<Shape>> host_buckets;  //!< input shapes its context runs wholly on the host
  };
  struct Entry {
    std::string where;  //!< "Loop 'l' body", for the summary
    uint64_t taken = 0, declined = 0;
    std::string why_declined;               //!< the last reason a run went to the reference kernels
    std::shared_ptr<ir::Graph> standalone;  //!< the subgraph with its captures as trailing inputs
    std::vector<std::unique_ptr<Program>> programs;
    std::set<std::vector<Shape>> signatures;  //!< input shape sets seen (one bucket each)
    bool reference_only = false;
  };
  runtime::EngineOptions options_;
  std::map<const ir::Graph*, Entry> entries_;
  mutable std::mutex mu_;  //!< held where entries_ or an entry's programs change, and by MemoryUsage
  static std::atomic<uint64_t> taken_, declined_;
};

}  // namespace sampan::cuda
