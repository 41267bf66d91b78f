// The kernel families of the CUDA backend, one factory each, one file each
// (<family>_kernel.cpp; the device code in <family>.cu). node_kernel.cpp holds the
// one table that maps ONNX ops to these factories. A factory validates the node at
// its concrete shapes and answers Unsupported (naming the node and the reason) or a
// kernel; with KernelOptions::check_only it touches neither the device nor a library.
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

//! Add, Sub, Mul, Div, Pow, PRelu, Max/Min of two inputs, and the unary math/activations.
std::vector<std::string> BinaryOpNames();  //!< each operand and the output in either layout
std::vector<std::string> UnaryOpNames();   //!< input and output in one layout
Result<KernelChoice> MakeElementwise(const KernelRequest& r);
Result<KernelChoice> MakeCast(const KernelRequest& r);
//! Strided copies (copy_kernel.cpp).
Result<KernelChoice> MakeTranspose(const KernelRequest& r);
Result<KernelChoice> MakeConcat(const KernelRequest& r);
Result<KernelChoice> MakeExpand(const KernelRequest& r);
Result<KernelChoice> MakeSlice(const KernelRequest& r);
Result<KernelChoice> MakeGather(const KernelRequest& r);
Result<KernelChoice> MakePool(const KernelRequest& r);
Result<KernelChoice> MakeSoftmax(const KernelRequest& r);
Result<KernelChoice> MakeLayerNorm(const KernelRequest& r);
Result<KernelChoice> MakeAddLayerNorm(const KernelRequest& r);
//! cuBLASLt products: Gemm / sampan::FusedGemm, MatMul / sampan::FusedMatMul.
Result<KernelChoice> MakeGemm(const KernelRequest& r);
Result<KernelChoice> MakeMatMul(const KernelRequest& r);
//! sampan::QMatMul with float8 e4m3 operands: cuBLASLt FP8 (gemm_kernel.cpp).
Result<KernelChoice> MakeQMatMul(const KernelRequest& r);
//! QuantizeLinear / DequantizeLinear, per tensor or per axis (quantize_kernel.cpp).
Result<KernelChoice> MakeQuantize(const KernelRequest& r);
Result<KernelChoice> MakeDequantize(const KernelRequest& r);
Result<KernelChoice> MakeImageInput(const KernelRequest& r);
//! sampan::ResizeImage: cv2 INTER_LINEAR resize, placement and normalisation (resize_image_kernel.cpp).
Result<KernelChoice> MakeResizeImage(const KernelRequest& r);
//! EfficientNMS_TRT (default and "TRT" domains): static-shape NMS (efficient_nms_kernel.cpp).
Result<KernelChoice> MakeEfficientNms(const KernelRequest& r);

}  // namespace sampan::cuda
