// Cast family: conversions between the float, integer and bool types.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backends/cuda/cast.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/families.h"

namespace sampan::cuda {
namespace {

std::optional<CastType> CastTypeOf(DType t) {
  switch (t) {
    case DType::kFloat32:
      return CastType::kF32;
    case DType::kFloat16:
      return CastType::kF16;
    case DType::kBFloat16:
      return CastType::kBF16;
    case DType::kInt32:
      return CastType::kI32;
    case DType::kInt64:
      return CastType::kI64;
    case DType::kBool:
      return CastType::kBool;
    default:
      return std::nullopt;
  }
}

class CastKernel : public NodeKernel {
 public:
  CastKernel(CastType from, CastType to, int64_t n) : from_(from), to_(to), n_(n) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchCast(from_, to_, in[0], out[0], n_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "cast"; }

 private:
  CastType from_, to_;
  int64_t n_;
};

}  // namespace

Result<KernelChoice> MakeCast(const KernelRequest& r) {
  if (r.opt.input_nhwc(0) != r.opt.out_nhwc) return Unsupported(r.node.Label(), ": input and output layouts differ");
  auto from = CastTypeOf(r.in[0].dtype), to = CastTypeOf(r.out[0].dtype);
  if (!from || !to)
    return Unsupported(r.node.Label(), ": cast from ", DTypeName(r.in[0].dtype), " to ", DTypeName(r.out[0].dtype));
  return KernelChoice{false, std::make_unique<CastKernel>(*from, *to, NumElements(r.out[0].shape))};
}

}  // namespace sampan::cuda
