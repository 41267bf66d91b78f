// KServe's wire form of a BYTES tensor, as Triton and its clients write it: every element is
// a 4-byte little-endian length followed by that many bytes, elements in row-major order.
// HTTP's binary extension, gRPC's raw_input_contents/raw_output_contents and shared memory
// all carry BYTES this way; inside the server a BYTES tensor is a string tensor (kString).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/tensor.h"
#include "base/utf8.h"  // IsUtf8, for the front ends

namespace sampan::server {

//! Parses `size` bytes at `data` into a string tensor of `shape`. Errors (`where` first) when
//! an element's length runs past the end, when there are fewer or more elements than the shape
//! holds, or when bytes are left over.
Result<Tensor> ParseBytesTensor(const char* data, size_t size, const Shape& shape, const std::string& where);
//! Bytes SerializeBytesTensor writes for `t` (4 per element plus the elements).
size_t SerializedBytesSize(const Tensor& t);
//! A string tensor in the wire form, as a u8 tensor of SerializedBytesSize(t) bytes.
Tensor SerializeBytesTensor(const Tensor& t);

}  // namespace sampan::server
