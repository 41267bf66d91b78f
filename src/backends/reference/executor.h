// The reference executor: runs a graph node by node with the ops/ reference
// kernels. Slow and exact; the oracle every other backend is checked against.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"

namespace sampan::reference {

class Executor {
 public:
  //! The graph must have passed import (verified, types inferred).
  explicit Executor(std::shared_ptr<const ir::Graph> graph);

  //! Checks inputs against the graph's declared inputs (names, dtypes, ranks,
  //! fixed dims, and that each symbolic dim has one size across all inputs).
  Status ValidateInputs(const std::map<std::string, Tensor>& inputs) const;
  //! Supplies memory for the output of a statically-shaped value (see ops::OutputAllocator).
  using ValueAllocator = std::function<Result<Tensor>(const ir::Value*, DType, const Shape&)>;
  //! Sees (and may replace) every node's outputs right after it ran: (node index, node, outputs).
  using NodeObserver = std::function<void(size_t, const ir::Node&, std::vector<Tensor>&)>;

  //! Runs the graph; returns outputs in graph output order.
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, const ValueAllocator* alloc = nullptr,
                                  const NodeObserver* observer = nullptr) const;
  const ir::Graph& graph() const { return *graph_; }

 private:
  std::shared_ptr<const ir::Graph> graph_;
  std::map<const ir::Value*, size_t> last_reader_;  //!< value -> index of the last node reading it
};

}  // namespace sampan::reference
