#include "base/utf8.h"

#include <cstdint>

namespace sampan {

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    *out += static_cast<char>(c);
  } else if (c < 0x800) {
    *out += static_cast<char>(0xC0 | (c >> 6));
    *out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    *out += static_cast<char>(0xE0 | (c >> 12));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (c >> 18));
    *out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

namespace {

// The code point at s[i] into *cp; its length in bytes, or 0 when the sequence there is
// malformed (truncated, a bad continuation byte, overlong, a surrogate, past U+10FFFF).
int DecodeOne(std::string_view s, size_t i, char32_t* cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  const int n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + static_cast<size_t>(n) > s.size()) return 0;
  uint32_t v = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((cc >> 6) != 2) return 0;
    v = (v << 6) | (cc & 0x3F);
  }
  const uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = static_cast<char32_t>(v);
  return n;
}

}  // namespace

bool DecodeUtf8(std::string_view s, std::u32string* out) {
  out->clear();
  char32_t cp = 0;
  for (size_t i = 0; i < s.size();) {
    const int n = DecodeOne(s, i, &cp);
    if (n == 0) return false;
    out->push_back(cp);
    i += static_cast<size_t>(n);
  }
  return true;
}

size_t FindInvalidUtf8(std::string_view s) {
  char32_t cp = 0;
  for (size_t i = 0; i < s.size();) {
    const int n = DecodeOne(s, i, &cp);
    if (n == 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

bool IsUtf8(std::string_view s) {
  return FindInvalidUtf8(s) == std::string_view::npos;
}

}  // namespace sampan
