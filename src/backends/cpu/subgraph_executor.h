// The CPU backend's ops::SubgraphExecutor: an If branch, Loop body or Scan body runs as a
// Program of this backend (its nodes on the CPU kernels), compiled once per signature of its
// inputs (data types and shapes) and reused for every iteration with that signature. A
// subgraph whose shapes depend on data (its program is dynamic), that holds sequences, or
// whose signature keeps changing (shapes that grow each iteration: more than
// kMaxSignatures) is handed back to the reference kernels. One executor per CpuContext (its
// programs own arenas); made current around every reference step and fallback run of the
// context, so nested subgraphs come here too.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include "backends/cpu/program.h"
#include "ops/control_flow.h"
#include "runtime/memory_usage.h"

namespace sampan::cpu {

class CpuEngine;

class CpuSubgraphExecutor final : public ops::SubgraphExecutor {
 public:
  static constexpr size_t kMaxSignatures = 8;

  CpuSubgraphExecutor(CpuEngine& engine, dnnl::stream& stream) : engine_(engine), stream_(stream) {}
  Result<bool> TryRun(const ir::Graph& graph, int64_t opset, const std::vector<const Tensor*>& inputs,
                      const std::vector<const Tensor*>& captures, std::vector<Tensor>* outputs,
                      const std::string& where) override;

  //! The arenas and folded values of the programs made so far (thread-safe).
  runtime::MemoryReport MemoryUsage() const { return memory_.Snapshot(); }
  //! Runs taken on CPU programs and runs handed back, process-wide (tests, diagnostics).
  static uint64_t runs_on_cpu_kernels() { return taken_.load(); }
  static uint64_t runs_declined() { return declined_.load(); }

 private:
  struct Entry {
    std::shared_ptr<ir::Graph> standalone;  //!< the subgraph with its captures as trailing inputs
    std::vector<std::pair<std::vector<std::pair<DType, Shape>>, std::unique_ptr<Program>>> programs;
    std::vector<std::shared_ptr<ir::Graph>> graphs;  //!< the typed copy each program was made from
    bool reference_only = false;
  };
  CpuEngine& engine_;
  dnnl::stream& stream_;
  std::map<const ir::Graph*, Entry> entries_;
  runtime::MemoryTally memory_;
  static std::atomic<uint64_t> taken_, declined_;
};

}  // namespace sampan::cpu
