// The CPU backend's engine and context.
//   CpuEngine  = a plan bound to this CPU: the oneDNN engine, the weights
//                reordered once (shared by all contexts), the thread count.
//   CpuContext = one instance: a oneDNN stream and one Program (arena +
//                bound kernels) per input-shape signature, made on first use.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/program.h"
#include "backends/cpu/subgraph_executor.h"
#include "backends/reference/executor.h"
#include "runtime/engine.h"

namespace sampan::cpu {

class CpuEngine : public runtime::BackendEngine {
 public:
  static Result<std::unique_ptr<CpuEngine>> Create(const plan::Plan& plan, const runtime::EngineOptions& options);
  Result<std::unique_ptr<runtime::ContextImpl>> CreateContext() override;
  //! "CPU kernels avx512, instruction set amx, oneDNN avx512_core_amx, 2 threads" (isa.h).
  std::string Describe() const override;
  //! The weights reordered or repacked for the kernels (WeightCache::bytes), in host memory.
  runtime::MemoryReport MemoryUsage() const override;

  int threads() const { return threads_; }
  const dnnl::engine& engine() const { return eng_; }
  WeightCache& weights() { return weights_; }
  const WeightCache& weights() const { return weights_; }
  const std::shared_ptr<const ir::Graph>& graph() const { return graph_; }
  const std::map<std::string, std::string>& tactics() const { return tactics_; }
  //! Algorithms the plan recorded for convolutions and products (node name -> algo; PrepareOptions::algos).
  const std::map<std::string, int>& algos() const { return algos_; }
  //! Layers the plan runs in BF16 (PrepareOptions::bf16_nodes).
  const std::set<std::string>& bf16_nodes() const { return bf16_nodes_; }

 private:
  CpuEngine() = default;
  std::shared_ptr<const ir::Graph> graph_;
  dnnl::engine eng_;
  WeightCache weights_;
  int threads_ = 1;
  std::map<std::string, std::string> tactics_;
  std::map<std::string, int> algos_;
  std::set<std::string> bf16_nodes_;
};

class CpuContext : public runtime::ContextImpl {
 public:
  explicit CpuContext(CpuEngine& engine);
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, runtime::Timing* timing) override;

  //! The program for these inputs (prepared on first use); nullptr when shapes depend on data.
  Result<Program*> ProgramFor(const std::map<std::string, Tensor>& inputs);
  //! Runs `program`'s steps on inputs already copied in (the allocation-free path).
  Status RunSteps(Program& program);
  //! Each program's arena and folded values, and those of the subgraph programs (host memory;
  //! thread-safe). oneDNN's own scratchpads and the per-thread operator new arenas
  //! (exec_arena.h) are not counted.
  runtime::MemoryReport MemoryUsage() const override;
  //! Runs step i of `program` alone (tests attribute allocations and time per step).
  Status RunStepForTest(Program& program, size_t i);

 private:
  CpuEngine& engine_;
  dnnl::stream stream_;
  reference::Executor fallback_;
  std::vector<std::pair<std::vector<Shape>, std::unique_ptr<Program>>> programs_;
  CpuSubgraphExecutor subgraphs_;
  runtime::MemoryTally memory_;
};

}  // namespace sampan::cpu
