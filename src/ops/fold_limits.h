// How large a value may be to be computed ahead of time instead of by a step that
// runs with every inference. There are two kinds of folding, and they pay off at
// different sizes.
#pragma once

#include <cstdint>

namespace sampan::ops {

//! Build time (the constant_folding pass): a node whose inputs are all constants
//! becomes a constant of the plan, computed once for every run of every context.
//! The only cost is plan size, so only results that would bloat the plan (or an
//! expansion that is cheaper to run than to store) are left as nodes.
constexpr int64_t kMaxBuildFoldElements = int64_t{1} << 26;

//! Inference and planning (ops::InferTypes, and runtime::WalkPlan, the one planning walk
//! the reference, CPU and CUDA backends and the CUDA capability query go through): a node
//! whose inputs are known once the input shapes are known (Shape -> Gather -> Concat ->
//! Reshape arithmetic) is computed on the host, again for every set of input shapes and
//! held by every program or bucket. That is meant for shape arithmetic; larger results
//! are data and run as ordinary steps.
constexpr int64_t kMaxShapeFoldElements = int64_t{1} << 16;

}  // namespace sampan::ops
