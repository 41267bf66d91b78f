// Small helpers shared by the reports the tools write (sampan bench, perf, conformance,
// the server's metadata): JSON string literals, nearest-rank percentiles, the version.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sampan {

//! How QuotedString writes a control character that has no short escape.
enum class QuoteStyle {
  kJson,   //!< \u00XX (JSON); DEL stays as it is
  kCLike,  //!< \xXX, DEL too (the IR text form, ir/text.h)
};

//! `s` in double quotes: '"' and '\' escaped, newline, tab and carriage return as \n, \t and
//! \r, other control characters as `style` says.
std::string QuotedString(std::string_view s, QuoteStyle style);

//! `s` as a JSON string literal, quotes included (QuotedString's kJson style).
inline std::string JsonQuote(std::string_view s) {
  return QuotedString(s, QuoteStyle::kJson);
}

//! The p-th percentile (0 < p <= 100) of `v` by nearest rank, as trtexec and perf_analyzer
//! report them: the ceil(p / 100 * n)-th smallest value (the smallest for p <= 0). 0 for an
//! empty `v`.
double NearestRankPercentile(std::vector<double> v, double p);

//! Sampan's version, from CMake's project(VERSION) (e.g. "0.1.0").
const char* Version();

}  // namespace sampan
