#include "server/core/bytes_format.h"

#include <cstdint>
#include <cstring>

namespace sampan::server {

Result<Tensor> ParseBytesTensor(const char* data, size_t size, const Shape& shape, const std::string& where) {
  const int64_t n = NumElements(shape);
  // Each element takes at least its 4-byte length: refuse a shape the bytes cannot fill
  // before allocating for it.
  if (static_cast<uint64_t>(n) > size / 4)
    return InvalidArgument(where, ": BYTES shape ", ShapeToString(shape), " holds ", n, " elements but ", size,
                           " bytes can hold at most ", size / 4, " (4-byte length before each element)");
  SP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(DType::kString, shape));
  std::string* out = t.mutable_strings();
  size_t pos = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (size - pos < 4)
      return InvalidArgument(where, ": BYTES element ", i, " has no 4-byte length (", size - pos, " bytes left)");
    const auto* p = reinterpret_cast<const unsigned char*>(data + pos);
    const uint32_t len = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
    pos += 4;
    if (len > size - pos)
      return InvalidArgument(where, ": BYTES element ", i, " says ", len, " bytes but only ", size - pos, " remain");
    out[i].assign(data + pos, len);
    pos += len;
  }
  if (pos != size)
    return InvalidArgument(where, ": ", size - pos, " bytes follow the last of the ", n, " BYTES elements of shape ",
                           ShapeToString(shape));
  return t;
}

size_t SerializedBytesSize(const Tensor& t) {
  size_t total = 0;
  for (int64_t i = 0; i < t.numel(); ++i) total += 4 + t.strings()[i].size();
  return total;
}

Tensor SerializeBytesTensor(const Tensor& t) {
  const size_t total = SerializedBytesSize(t);
  Tensor out = Tensor::Alloc(DType::kUInt8, {static_cast<int64_t>(total)});
  auto* p = static_cast<unsigned char*>(out.mutable_raw());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const std::string& s = t.strings()[i];
    const auto len = static_cast<uint32_t>(s.size());
    p[0] = static_cast<unsigned char>(len & 0xFF);
    p[1] = static_cast<unsigned char>((len >> 8) & 0xFF);
    p[2] = static_cast<unsigned char>((len >> 16) & 0xFF);
    p[3] = static_cast<unsigned char>(len >> 24);
    if (!s.empty()) std::memcpy(p + 4, s.data(), s.size());
    p += 4 + s.size();
  }
  return out;
}

}  // namespace sampan::server
