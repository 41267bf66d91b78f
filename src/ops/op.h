// The op registry. An op = one OpDef: type/shape inference plus a reference
// kernel. The same inference runs statically (on IR types, with constant values
// where known) and at run time (on concrete shapes and values), so an op's shape
// logic lives in exactly one place.
//
// Quick start for adding an op:
//   1. Create src/ops/<family>.cpp (or add to the tight family it belongs to).
//   2. Write `Status InferFoo(InferContext&)` and `Status RunFoo(KernelContext&)`.
//   3. SAMPAN_REGISTER_OP("Foo", InferFoo, RunFoo); (file-scope, once per op_type)
//   4. Run `sampan conformance` on the test_foo* cases.
//   5. An op whose results are not a function of its inputs (it draws random numbers)
//      registers with SAMPAN_REGISTER_OP_DEF and a `determinism` other than the default:
//      folding and merging passes and the backends' planners read that trait.
// Anything the op does not implement (a dtype, an attribute value, a mode) must
// return Unsupported(...) from Infer, so the capability query is honest.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"

namespace sampan::ops {

//! What inference knows about one input.
struct InferInput {
  bool present = false;  //!< false for an omitted optional input
  DType dtype = DType::kUndefined;
  std::optional<ir::Dims> dims;   //!< nullopt: rank unknown
  const Tensor* value = nullptr;  //!< the value when known (constant, or at run time: always)
};

class InferContext {
 public:
  InferContext(const ir::Node& node, int64_t opset, std::vector<InferInput> inputs)
      : node_(node),
        opset_(opset),
        inputs_(std::move(inputs)),
        outputs_(node.num_outputs()),
        output_values_(node.num_outputs()) {}

  const ir::Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i].present; }
  const InferInput& input(size_t i) const { return inputs_.at(i); }
  DType input_dtype(size_t i) const { return inputs_.at(i).dtype; }
  const std::optional<ir::Dims>& input_dims(size_t i) const { return inputs_.at(i).dims; }
  //! Input i's value, or nullptr if absent or not known statically.
  const Tensor* input_value(size_t i) const { return has_input(i) ? inputs_[i].value : nullptr; }
  //! Rank of input i, -1 if unknown.
  int64_t input_rank(size_t i) const;
  //! Input i's shape when every dim is known.
  std::optional<Shape> input_static_shape(size_t i) const;

  void set_output(size_t i, DType dtype, std::optional<ir::Dims> dims);
  void set_output_shape(size_t i, DType dtype, const Shape& shape);
  //! Inference may also compute the value (e.g. Shape of a static tensor).
  void set_output_value(size_t i, Tensor value);
  const ir::TensorType& output(size_t i) const { return outputs_.at(i); }
  const std::optional<Tensor>& output_value(size_t i) const { return output_values_.at(i); }

  //! Error helpers: prefix the node label.
  template <class... A>
  Status Error(const A&... a) const {
    return InvalidArgument(node_.Label(), ": ", a...);
  }
  template <class... A>
  Status NotSupported(const A&... a) const {
    return Unsupported(node_.Label(), ": ", a...);
  }
  //! Checks input/output counts against [min, max].
  Status ExpectInputs(size_t min, size_t max) const;

 private:
  const ir::Node& node_;
  int64_t opset_;
  std::vector<InferInput> inputs_;
  std::vector<ir::TensorType> outputs_;
  std::vector<std::optional<Tensor>> output_values_;
};

//! Run-time arguments. Outputs whose inferred shape was static are already
//! allocated (zero-filled); any other output the kernel must assign itself.
struct KernelContext {
  const ir::Node& node;
  int64_t opset;
  std::vector<const Tensor*> inputs;  //!< nullptr for omitted optional inputs
  std::vector<Tensor> outputs;
  //! The inference result for this call (dtypes, shapes) — kernels may read it.
  const InferContext* infer = nullptr;

  const Tensor& in(size_t i) const { return *inputs.at(i); }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] != nullptr; }
  Tensor& out(size_t i) { return outputs.at(i); }
  template <class... A>
  Status Error(const A&... a) const {
    return InvalidArgument(node.Label(), ": ", a...);
  }
};

using InferFn = Status (*)(InferContext&);
using KernelFn = Status (*)(KernelContext&);

//! Whether an op's results are a function of its inputs and attributes alone. Only
//! deterministic nodes may be folded into constants or merged with an identical node.
enum class Determinism {
  kDeterministic,
  kRandom,            //!< draws random numbers on every run (RandomNormal, Bernoulli...)
  kRandomInTraining,  //!< random when its training_mode input (input 2) may be true: Dropout
};

struct OpDef {
  std::string domain;  //!< "" for the default ONNX domain
  std::string op_type;
  InferFn infer = nullptr;
  KernelFn run = nullptr;
  Determinism determinism = Determinism::kDeterministic;
  //! Takes or produces string tensors (their elements are std::string, not bytes: a kernel that
  //! moves elements by byte would corrupt them). Inference of any other op refuses them.
  bool strings = false;
  //! Takes or produces sequences and optionals (dtype kSequence / kOptional).
  bool sequences = false;
};

//! Runs def.infer on ctx; first refuses string inputs, and afterwards string outputs, unless
//! def.strings. Every caller of an op's inference goes through this.
Status RunInfer(const OpDef& def, InferContext& ctx);

//! nullptr when no op of that domain/type is registered.
const OpDef* FindOp(const std::string& domain, const std::string& op_type);
//! Every registered op, sorted by (domain, op_type).
std::vector<const OpDef*> AllOps();
//! Registers an op; duplicate registration is a programming error (aborts at start-up).
bool RegisterOp(OpDef def);

//! True when running `node` twice on the same inputs may give different results: its op
//! draws random numbers (Dropout: unless its training_mode is omitted or a constant false),
//! or its op is not registered, so nothing is known about it.
bool IsNondeterministic(const ir::Node& node);

}  // namespace sampan::ops

#define SAMPAN_REGISTER_OP(op_type, infer, run)                                \
  static const bool SP_CONCAT(sp_registered_op__, __LINE__) [[maybe_unused]] = \
      ::sampan::ops::RegisterOp(::sampan::ops::OpDef{"", op_type, infer, run})

#define SAMPAN_REGISTER_DOMAIN_OP(domain, op_type, infer, run)                 \
  static const bool SP_CONCAT(sp_registered_op__, __LINE__) [[maybe_unused]] = \
      ::sampan::ops::RegisterOp(::sampan::ops::OpDef{domain, op_type, infer, run})

//! An op with traits beyond the defaults, as designated initializers:
//! SAMPAN_REGISTER_OP_DEF({.op_type = "Foo", .infer = InferFoo, .run = RunFoo, .determinism = ...});
#define SAMPAN_REGISTER_OP_DEF(...)                                            \
  static const bool SP_CONCAT(sp_registered_op__, __LINE__) [[maybe_unused]] = \
      ::sampan::ops::RegisterOp(::sampan::ops::OpDef __VA_ARGS__)
