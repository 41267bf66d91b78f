#include "base/base64.h"

#include <cstdint>

namespace sampan {

Result<std::string> DecodeBase64(std::string_view s) {
  auto value = [](char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  if (s.size() % 4 != 0) return InvalidArgument("base64 text of ", s.size(), " characters (a multiple of 4 is needed)");
  std::string out;
  out.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    const int pad = last ? (s[i + 3] == '=') + (s[i + 2] == '=' && s[i + 3] == '=') : 0;
    uint32_t n = 0;
    for (size_t k = 0; k < 4; ++k) {
      const int v = k >= 4 - static_cast<size_t>(pad) ? 0 : value(s[i + k]);
      if (v < 0) return InvalidArgument("base64 text has '", std::string(1, s[i + k]), "' at ", i + k);
      n = (n << 6) | static_cast<uint32_t>(v);
    }
    out.push_back(static_cast<char>(n >> 16));
    if (pad < 2) out.push_back(static_cast<char>((n >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(n & 0xFF));
  }
  return out;
}

}  // namespace sampan
