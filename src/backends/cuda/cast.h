// Cast between the types precision borders and masks need: f32, f16, bf16,
// i32, i64, bool (ONNX semantics: float->int truncates, ->bool is != 0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

enum class CastType { kF32, kF16, kBF16, kI32, kI64, kBool };

cudaError_t LaunchCast(CastType from, CastType to, const void* x, void* y, int64_t n, cudaStream_t stream);

}  // namespace sampan::cuda
