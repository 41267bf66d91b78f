// UTF-8 <-> code points, for string tensors (ops/strings.cpp), .npy unicode arrays (npy.cpp)
// and the server's BYTES checks.
#pragma once

#include <string>
#include <string_view>

namespace sampan {

//! Appends code point `c` (<= U+10FFFF) to `out` as UTF-8.
void AppendUtf8(char32_t c, std::string* out);
//! Decodes well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF)
//! into `out`; false, with `out` unspecified, when `s` is not.
bool DecodeUtf8(std::string_view s, std::u32string* out);
//! Whether `s` is well-formed UTF-8.
bool IsUtf8(std::string_view s);
//! Byte offset of the first malformed sequence in `s`, or std::string_view::npos when there is none.
size_t FindInvalidUtf8(std::string_view s);

}  // namespace sampan
