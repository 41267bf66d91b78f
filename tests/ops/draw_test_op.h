// sampan.test::Draw: a test-only op that really is nondeterministic. Every run
// returns the next value of a counter (i64[1]), so a node of it that was folded
// into a constant or merged with another copy shows up as a repeated value. It
// has no inputs, or any number that are ignored; it is flagged kRandom.
#pragma once

#include <atomic>

#include "ops/op.h"

namespace sampan::ops::testing {

inline std::atomic<int64_t> g_draws{0};

inline Status InferDraw(InferContext& ctx) {
  for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output_shape(i, DType::kInt64, {1});
  return Status::Ok();
}

inline Status RunDraw(KernelContext& ctx) {
  for (Tensor& out : ctx.outputs) out.mutable_data<int64_t>()[0] = ++g_draws;
  return Status::Ok();
}

// An inline variable: registered once however many tests include this header.
inline const bool kDrawRegistered = RegisterOp(OpDef{.domain = "sampan.test",
                                                     .op_type = "Draw",
                                                     .infer = InferDraw,
                                                     .run = RunDraw,
                                                     .determinism = Determinism::kRandom});

}  // namespace sampan::ops::testing
