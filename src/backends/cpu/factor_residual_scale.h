#pragma once

// A lowering rewrite of the cpu backend: a map plus itself scaled becomes one product,
//   Add(x, Mul(x, s))  =>  Mul(x, Add(s, 1))      (either operand order of both ops)
// where s broadcasts to x's shape (a per-channel attention weight [N,C,1,1]) and the product is
// read only by the Add. One pass over x instead of two passes and a third operand read: the
// residual squeeze-excitation ("RSE") blocks of the PP-OCRv4 detector's neck write
// x + x * hardsigmoid(...) at every level. 1 + s is computed on s's small tensor (folded when
// s is a constant). In float32 the result differs from the sum's by rounding only; the cpu
// backend runs float32 there (the GPU plans, in FP16, keep the graph's form).

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cpu {

//! Returns one line per rewrite ("add <- x * (1 + s) of mul").
Result<std::vector<std::string>> FactorResidualScale(plan::Plan& plan);

}  // namespace sampan::cpu
