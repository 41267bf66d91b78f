#include "base/report_util.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#ifndef SAMPAN_VERSION_STRING
#error "SAMPAN_VERSION_STRING is defined by CMake (project VERSION)"
#endif

namespace sampan {

std::string JsonQuote(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
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
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
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
