// NumPy .npy files (format versions 1.0, 2.0 and 3.0, C order, little-endian). String tensors
// read from '<U<n>' (UTF-32, converted to UTF-8) and '|S<n>' (bytes) arrays and are written as
// '<U<n>' ('|S<n>' when an element is not valid UTF-8); object arrays (pickles) are refused.
#pragma once

#include <string>

#include "base/status.h"
#include "base/tensor.h"

namespace sampan {

//! Reads a .npy file. Errors name the file and what is wrong with it.
Result<Tensor> ReadNpy(const std::string& path);
//! Parses .npy bytes; `what` names the source in errors.
Result<Tensor> ParseNpy(const std::string& bytes, const std::string& what);
//! Writes a .npy file (format 1.0). Types NumPy has no dtype for are widened exactly: bfloat16
//! and float8/float4/float6 to float32, 2/4-bit integers to int8/uint8.
Status WriteNpy(const std::string& path, const Tensor& tensor);
//! Serializes a tensor as .npy bytes.
std::string SerializeNpy(const Tensor& tensor);

}  // namespace sampan
