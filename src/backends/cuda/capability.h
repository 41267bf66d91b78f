// The CUDA backend's capability query: for every node of a graph with static
// shapes, whether it gets a device kernel (and which family), is a view, is shape
// arithmetic folded on the host once per input shape, or would stay on the host —
// and why. It asks the same kernel factories the runtime uses (node_kernel.h) with
// KernelOptions::check_only, so it needs no device and calls no library; the
// builder prints its answer, `--strict` refuses any host node, and the runtime
// plans by the same rules (context.cpp).
#pragma once

#include <map>
#include <string>

#include "base/status.h"
#include "ir/graph.h"

namespace sampan::cuda {

struct NodeSupport {
  enum class Where { kDevice, kView, kFolded, kHost };
  Where where = Where::kHost;
  std::string family;  //!< kernel family ("cudnn conv", "reduce"), "view", "folded" or "host"
  std::string reason;  //!< for kHost: why
};

struct Capability {
  std::map<std::string, NodeSupport> nodes;  //!< by node name
  //! Activations kept channels-last (layout.h); 0 when a host node touching one
  //! made the whole graph fall back to NCHW (`nhwc_blocker` names it).
  size_t channels_last_values = 0;
  std::string nhwc_blocker;
};

//! Answers the query for `graph`, whose inputs must have static shapes.
Result<Capability> QueryCapability(const ir::Graph& graph);

}  // namespace sampan::cuda
