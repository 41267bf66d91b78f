// Small helpers shared by the reports the tools write (sampan bench, perf, conformance,
// the server's metadata): JSON string literals, nearest-rank percentiles, the version.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sampan {

//! `s` as a JSON string literal, quotes included: '"' and '\' escaped, newline and tab as
//! \n and \t, other control characters as \u00XX.
std::string JsonQuote(std::string_view s);

//! The p-th percentile (0 < p <= 100) of `v` by nearest rank, as trtexec and perf_analyzer
//! report them: the ceil(p / 100 * n)-th smallest value (the smallest for p <= 0). 0 for an
//! empty `v`.
double NearestRankPercentile(std::vector<double> v, double p);

//! Sampan's version, from CMake's project(VERSION) (e.g. "0.1.0").
const char* Version();

}  // namespace sampan
