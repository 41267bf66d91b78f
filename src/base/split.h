// Splitting flag values and specs into fields.
#pragma once

#include <string>
#include <vector>

namespace sampan {

//! Every field of `text` between `sep`s, empty ones included ("a::b" -> "a", "", "b"; "" -> "").
inline std::vector<std::string> SplitFields(const std::string& text, char sep) {
  std::vector<std::string> fields;
  for (size_t start = 0;;) {
    const size_t at = text.find(sep, start);
    fields.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return fields;
    start = at + 1;
  }
}

}  // namespace sampan
