// A lowering rewrite of the CUDA backend: LayerNormalization(Add(a, b), scale, bias)
// whose Add is read by nothing else becomes sampan::AddLayerNorm(a, b, scale, bias)
// (ops/add_layer_norm.cpp), one kernel instead of two and one activation round trip
// less (BERT's post-LN residual blocks). Other backends keep the two ops, which their
// own kernels run, so this lives here and not in the shared pass pipeline.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cuda {

//! Rewrites plan.graph in place; the fused node takes the LayerNormalization's name (and
//! plan choice), the Add's choice is dropped. Returns one line per rewrite (also appended
//! to plan.rewrites).
Result<std::vector<std::string>> FuseAddLayerNorm(plan::Plan& plan);

}  // namespace sampan::cuda
