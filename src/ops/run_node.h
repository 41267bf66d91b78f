// Running one node on concrete tensors, and type/shape inference over a graph.
#pragma once

#include <functional>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"
#include "ops/fold_limits.h"

namespace sampan::ops {

//! Infers output shapes from the concrete inputs (nullptr = omitted), allocates
//! the outputs and runs the op's reference kernel. Checks the kernel produced
//! what inference promised.
//! `alloc`, when given, supplies the memory of statically-shaped outputs (it must
//! return zero-filled, writable tensors of the requested type and shape).
using OutputAllocator = std::function<Result<Tensor>(size_t output, DType dtype, const Shape& shape)>;
Status RunNode(const ir::Node& node, int64_t opset, const std::vector<const Tensor*>& inputs,
               std::vector<Tensor>* outputs, const OutputAllocator* alloc = nullptr);

//! Lists every node whose op is not registered, grouped by op type, in one error:
//! "unsupported ops: Foo (nodes: a, b), Bar (nodes: c)". Ok when all are known.
Status CheckOpsRegistered(const ir::Graph& graph);

struct InferOptions {
  //! Small all-constant nodes are evaluated so values (e.g. shape arithmetic)
  //! propagate to later nodes' inference. Elements above this are not folded.
  int64_t max_fold_elements = kMaxShapeFoldElements;
};

//! Type and shape inference over the whole graph in topological order. Merges
//! inferred types into each value's declared type and fails on a contradiction
//! (naming node, value, declared and inferred types). Unsupported features of
//! registered ops are collected and reported together as one kUnsupported error.
Status InferTypes(ir::Graph& graph, const InferOptions& options = {});

}  // namespace sampan::ops
