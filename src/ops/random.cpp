// RandomNormal, RandomNormalLike, RandomUniform, RandomUniformLike, Bernoulli and
// Multinomial: ops that draw random numbers. Sampan does not run them (an inference
// engine has no use for them, and the ONNX suite's expected outputs are one
// generator's draws); they are registered so their definition carries the
// kRandom trait that constant folding, common subexpressions and the backends'
// planners read, and so a model that uses them is told which feature is missing.
#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferRandom(InferContext& ctx) {
  return ctx.NotSupported("random number generation");
}

Status RunRandom(KernelContext& ctx) {
  return Unsupported(ctx.node.Label(), ": random number generation");
}

#define SAMPAN_REGISTER_RANDOM_OP(name) \
  SAMPAN_REGISTER_OP_DEF(               \
      {.domain = "", .op_type = name, .infer = InferRandom, .run = RunRandom, .determinism = Determinism::kRandom})

SAMPAN_REGISTER_RANDOM_OP("RandomNormal");
SAMPAN_REGISTER_RANDOM_OP("RandomNormalLike");
SAMPAN_REGISTER_RANDOM_OP("RandomUniform");
SAMPAN_REGISTER_RANDOM_OP("RandomUniformLike");
SAMPAN_REGISTER_RANDOM_OP("Bernoulli");
SAMPAN_REGISTER_RANDOM_OP("Multinomial");

#undef SAMPAN_REGISTER_RANDOM_OP

}  // namespace
}  // namespace sampan::ops
