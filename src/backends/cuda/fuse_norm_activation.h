// A lowering rewrite of the CUDA backend: an inference BatchNormalization whose only reader
// is an activation (Relu, Clip, SiLU, ...: passes::MatchActivation) becomes
// sampan::FusedBatchNorm with that activation (ops/fused.h), one pass over the tensor
// instead of two. The normalisations that remain after folding are those no convolution
// absorbs: DenseNet's BatchNorm + ReLU after every Concat. Other backends keep both ops.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cuda {

//! Rewrites plan.graph in place; the fused node takes the BatchNormalization's name (and
//! plan choice), the activation's choices are dropped. One line per rewrite (also
//! appended to plan.rewrites).
Result<std::vector<std::string>> FuseNormActivation(plan::Plan& plan);

}  // namespace sampan::cuda
