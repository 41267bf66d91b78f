// A CPU program: the graph lowered for one set of input shapes. Every step is a
// kernel bound to fixed buffer addresses (arena slots planned from tensor
// lifetimes, weights, shape-derived constants), so running it touches no
// allocator: the context copies the inputs in, runs the steps, copies out.
//
// Preparing a program goes through the runtime's planning walk (runtime/plan_walk.h)
// with concrete shapes:
//   - nodes the walk folds (shape arithmetic, values inference gives) become
//     constants of the program; a data-dependent shape makes the program dynamic;
//   - every other node gets the kernel family the plan chose for it (kernels.h),
//     or the reference kernel when the family cannot take these shapes;
//   - values produced by oneDNN keep the memory format the primitive chose
//     (e.g. nChw8c); a consumer that needs another layout gets a reorder step,
//     made once per value and layout and shared by all such consumers.
#pragma once

#include <dnnl.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"
#include "runtime/plan_walk.h"

namespace sampan::ops {
class SubgraphExecutor;
}  // namespace sampan::ops

namespace sampan::cpu {

//! What a step sees while running.
struct RunCtx {
  dnnl::stream* stream = nullptr;
  int threads = 1;
  //! Runs the subgraphs of control-flow nodes on this backend's kernels (made current around
  //! reference steps); nullptr: their reference kernels.
  ops::SubgraphExecutor* subgraphs = nullptr;
};

//! One step of a program. Created with buffer ids; Bind() turns them into addresses.
class Kernel {
 public:
  virtual ~Kernel() = default;
  //! Called once after the arena is allocated; ptrs[id] is buffer id's address.
  virtual Status Bind(const std::vector<void*>& ptrs) = 0;
  //! Runs the step. Must not allocate (the reference fallback excepted).
  virtual Status Run(const RunCtx& ctx) = 0;
};

//! Weights reordered into a oneDNN format, shared by every program and context of an engine.
class WeightCache {
 public:
  //! Entries are found by their source's address. A source is a plan constant or a value a
  //! program folded (which dies with that program): the cache keeps every source it was
  //! given alive, so an address it knows is never reused for other contents.
  //! `src` (plain) in layout `want`; reordered on first request.
  Result<dnnl::memory> Get(const dnnl::engine& eng, const Tensor& src, const dnnl::memory::desc& plain,
                           const dnnl::memory::desc& want);
  //! An object derived from constant `src` by our own kernels (e.g. Winograd-transformed
  //! weights), named `kind`; `make` runs on first request and returns it with its size.
  //! `also` are further sources `kind` names by address (a packed GEMM's bias).
  std::shared_ptr<const void> Derived(const Tensor& src, const std::string& kind,
                                      const std::function<std::pair<std::shared_ptr<const void>, size_t>()>& make,
                                      const std::vector<const Tensor*>& also = {});
  size_t bytes() const;

 private:
  void Keep(const Tensor& t);  // mu_ held
  mutable std::mutex mu_;
  std::map<const void*, Tensor> kept_;  // sources by address, shallow copies that keep them alive
  std::map<const void*, std::vector<std::pair<dnnl::memory::desc, dnnl::memory>>> entries_;
  std::map<std::pair<const void*, std::string>, std::shared_ptr<const void>> derived_;
  size_t bytes_ = 0;
};

//! Plain (row-major) descriptor of a tensor; rank 0 is described as [1].
dnnl::memory::desc PlainDesc(DType dtype, const Shape& shape);
//! oneDNN data type of a DType (undef when oneDNN has none).
dnnl::memory::data_type DnnlType(DType dtype);

struct Buffer {
  size_t bytes = 0;
  int first = 0;                //!< step writing it first (-1: graph input, copied in before step 0)
  int last = 0;                 //!< last step reading it (INT_MAX: graph output)
  const void* fixed = nullptr;  //!< weights/constants: not in the arena
  //! A string tensor: `fixed` points at a Tensor object of the program (its elements are
  //! std::string objects, which bytes in an arena cannot hold). Only reference steps use it.
  bool object = false;
};

//! Where a value lives during a run.
struct ValueState {
  DType dtype = DType::kUndefined;
  Shape shape;
  int buffer = -1;
  dnnl::memory::desc md;          //!< layout of `buffer` (plain unless a oneDNN primitive chose another)
  const Tensor* known = nullptr;  //!< value fixed for this program (weight or shape-derived)
  std::vector<std::pair<dnnl::memory::desc, int>> converted;  //!< other layouts made of it: md -> buffer
  bool plain() const;
};

struct PrepareOptions {
  //! node name -> tactic recorded by the builder ("" or missing: choose now).
  const std::map<std::string, std::string>* tactics = nullptr;
  //! node name -> algorithm recorded in the plan (plan.choices[].tactic.algo): for a
  //! convolution 0 (oneDNN's direct kernel), 2 or 4 (Winograd F(2x2)/F(4x4)); for a product by
  //! a constant weight (MatMul, Gemm) 0 (our packed GEMM) or 1 (oneDNN's matmul). Missing: timed
  //! now. Recorded choices make every process that loads a plan compute the same bits.
  const std::map<std::string, int>* algos = nullptr;
  //! When set, receives the algorithm each convolution and product got (recorded or timed).
  std::map<std::string, int>* chosen_algos = nullptr;
  //! When set, receives one line per product shape timed or looked up (what each candidate took
  //! and which ran), keyed by the shape: `sampan build --verbose` lists them.
  std::map<std::string, std::string>* algo_notes = nullptr;
  //! Layers the plan runs in BF16 (plan.choices[node].precision == "bf16"); they get BF16
  //! operands where the CPU computes in BF16 (ActiveIsa() >= avx512_bf16), FP32 elsewhere.
  const std::set<std::string>* bf16_nodes = nullptr;
  int threads = 1;
};

class Program;

//! The interface kernel factories use while a program is prepared.
class ProgramBuilder {
 public:
  ProgramBuilder(Program& prog, const dnnl::engine& eng, WeightCache& weights, int threads,
                 const PrepareOptions* options = nullptr)
      : prog_(prog), eng_(eng), weights_(weights), threads_(threads), options_(options) {}

  const ValueState& state(const ir::Value* v) const;
  bool has_state(const ir::Value* v) const;
  //! Buffer holding `v` in layout `md` (a reorder step is added when it is stored otherwise).
  Result<int> Input(const ir::Value* v, const dnnl::memory::desc& md);
  //! Buffer holding `v` row-major.
  Result<int> PlainInput(const ir::Value* v);
  //! Buffer holding `v` as it is stored; *md receives its layout.
  int AnyInput(const ir::Value* v, dnnl::memory::desc* md);
  //! A new buffer for output `v` in layout `md` (plain when null).
  int Output(const ir::Value* v, const dnnl::memory::desc* md = nullptr);
  //! `out` is a view of `in`'s plain buffer (Reshape, Identity...): no copy.
  Status AliasOutput(const ir::Value* out, const ir::Value* in);
  //! `out` is `buffer` seen through the strided layout `md` (a Transpose without a copy):
  //! consumers that take strides read it as is, the others get a row-major copy made once.
  void ViewOutput(const ir::Value* out, int buffer, const dnnl::memory::desc& md);
  //! True when `node` (being built) is the last reader of `v`'s buffer: every value
  //! stored there (v, its views, layout copies) is no graph input or output and has
  //! no reader other than `node` that is not built yet. Then `node` may overwrite it.
  bool LastUse(const ir::Value* v, const ir::Node& node) const;
  //! True when `v` is a graph input or output.
  bool IsGraphIo(const ir::Value* v) const { return graph_io_.count(v) > 0; }
  //! Marks an existing buffer as used by the next step.
  void UseBuffer(int buffer) { pending_.push_back(buffer); }
  //! Scratch memory used only by the next step.
  int Scratch(size_t bytes);
  //! Appends the step that uses every buffer requested since the last step.
  void AddStep(std::unique_ptr<Kernel> kernel, std::string label);

  const dnnl::engine& engine() const { return eng_; }
  WeightCache& weights() { return weights_; }
  int threads() const { return threads_; }
  //! The algorithm the plan recorded for `node` (-1: none recorded; PrepareOptions::algos).
  int RecordedAlgo(const std::string& node) const;
  //! Notes the algorithm `node` got (PrepareOptions::chosen_algos).
  void NoteAlgo(const std::string& node, int algo);
  //! Notes how the algorithm of a product shape was chosen (PrepareOptions::algo_notes).
  void NoteAlgoTiming(const std::string& key, const std::string& line);
  //! Whether `node` computes with BF16 operands here (PrepareOptions::bf16_nodes on a CPU with
  //! AVX512-BF16 or AMX, within the SAMPAN_CPU_ISA cap).
  bool RunsBf16(const std::string& node) const;
  //! Whether `v` may be stored in BF16: it is not a graph input or output, and every reader
  //! is a convolution that runs in BF16 (RunsBf16) and reads it as its data input (slot 0).
  bool OnlyBf16ConvsRead(const ir::Value* v) const;
  //! Fixed buffer for a constant tensor the program keeps alive.
  int Constant(const Tensor& t);

 private:
  friend class Program;
  ValueState& mutable_state(const ir::Value* v);
  int NewBuffer(size_t bytes, const void* fixed = nullptr);
  //! An object buffer (a string tensor), holding `init` when given (a constant).
  int NewObjectBuffer(const Tensor* init = nullptr);
  void Use(int buffer) { pending_.push_back(buffer); }

  Program& prog_;
  const dnnl::engine& eng_;
  WeightCache& weights_;
  int threads_;
  const PrepareOptions* options_ = nullptr;
  std::vector<int> pending_;
  std::set<const ir::Node*> built_;      //!< nodes lowered so far
  std::set<const ir::Value*> graph_io_;  //!< graph inputs and outputs
};

class Program {
 public:
  //! Lowers `graph` for the shapes of `inputs`. A graph whose shapes depend on
  //! data (NonZero, ...) is reported with dynamic() = true and no steps.
  static Result<std::unique_ptr<Program>> Prepare(const ir::Graph& graph, const std::map<std::string, Tensor>& inputs,
                                                  const dnnl::engine& eng, WeightCache& weights,
                                                  const PrepareOptions& options);
  bool dynamic() const { return dynamic_; }
  //! Runs on inputs already validated against this program's shapes; writes the
  //! outputs into `outputs` (allocated by the caller with output_shapes()).
  Status Execute(const std::map<std::string, Tensor>& inputs, const RunCtx& ctx);
  //! Copies graph outputs into fresh tensors.
  Result<std::vector<Tensor>> CollectOutputs() const;
  //! Runs only the steps (inputs already copied in): the allocation-free part.
  Status RunSteps(const RunCtx& ctx);
  Status CopyInputs(const std::map<std::string, Tensor>& inputs);
  //! Runs step i alone (steps before it must have run); for diagnostics and tests.
  Status RunStep(size_t i, const RunCtx& ctx) { return steps_.at(i)->Run(ctx); }

  ~Program();
  size_t arena_bytes() const { return arena_bytes_; }
  //! The arena as allocated: arena_bytes(), at least 64.
  size_t arena_allocated_bytes() const { return arena_.nbytes(); }
  //! Host memory of the constants this program made (folded shape arithmetic, kernels' own
  //! constants), not counting the plan's weights it reads in place.
  size_t folded_bytes() const { return folded_bytes_; }
  size_t num_steps() const { return steps_.size(); }
  //! "step label" per step, for --verbose and tests.
  const std::vector<std::string>& labels() const { return labels_; }
  //! How the planning walk treated each node (folded, lowered, left to the reference kernel).
  const std::vector<runtime::WalkedNode>& walked() const { return walked_; }

 private:
  friend class ProgramBuilder;
  bool dynamic_ = false;
  std::vector<runtime::WalkedNode> walked_;
  std::vector<Buffer> buffers_;
  std::vector<std::unique_ptr<Kernel>> steps_;
  std::vector<std::string> labels_;
  std::map<const ir::Value*, ValueState> values_;
  std::vector<std::unique_ptr<Tensor>> constants_;   //!< shape-derived values kept alive
  std::vector<std::unique_ptr<Tensor>> objects_;     //!< the Tensors of object buffers
  std::vector<std::pair<std::string, int>> inputs_;  //!< graph input name -> buffer
  struct Out {
    const ir::Value* value;
    int buffer;
  };
  std::vector<Out> outputs_;
  Tensor arena_;
  size_t arena_bytes_ = 0;
  size_t folded_bytes_ = 0;
  std::vector<void*> ptrs_;
  //! SAMPAN_CPU_PROFILE=1: time every step; the totals go to stderr when the program is destroyed.
  bool profile_ = false;
  std::vector<double> step_ms_;
  int64_t profiled_runs_ = 0;
};

}  // namespace sampan::cpu
