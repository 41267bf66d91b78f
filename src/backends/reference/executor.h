// The reference executor: runs a graph node by node with the ops/ reference
// kernels. Slow and exact; the oracle every other backend is checked against.
#pragma once

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
  //! Runs the graph; returns outputs in graph output order.
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs) const;

 private:
  std::shared_ptr<const ir::Graph> graph_;
  std::map<const ir::Value*, size_t> last_reader_;  //!< value -> index of the last node reading it
};

}  // namespace sampan::reference
