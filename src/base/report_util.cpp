#include "base/report_util.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#ifndef SAMPAN_VERSION_STRING
#error "SAMPAN_VERSION_STRING is defined by CMake (project VERSION)"
#endif

namespace sampan {

std::string QuotedString(std::string_view s, QuoteStyle style) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || (c == 0x7f && style == QuoteStyle::kCLike)) {
          out += style == QuoteStyle::kJson ? "\\u00" : "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 0xf];
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

double NearestRankPercentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  const size_t k = rank <= 1 ? 0 : std::min(v.size(), static_cast<size_t>(rank)) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

const char* Version() {
  return SAMPAN_VERSION_STRING;
}

}  // namespace sampan
