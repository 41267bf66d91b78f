// Kernel factories for the mask-building ops (logical.cu): comparisons,
// And/Or/Xor/Not, IsNaN/IsInf and Where.
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

//! The kernel family ("compare", "logical", "where") of a default-domain op, or "" when not one of these.
//! The ops this family runs: comparisons, IsNaN/IsInf, Not/And/Or/Xor, Where.
std::vector<std::string> LogicalOpNames();
//! "compare", "logical" or "where"; "" for other ops.
const char* LogicalFamily(const std::string& op);
//! Prepares the kernel of a LogicalFamily op; Unsupported for types it does not cover.
Result<KernelChoice> MakeLogicalOp(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out);

}  // namespace sampan::cuda
