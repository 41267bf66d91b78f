// Small helpers model_version.cpp and model_requests.cpp share (not an API).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "server/repository/model_config.h"

namespace sampan::server::internal {

using Clock = std::chrono::steady_clock;

inline uint64_t Ns(Clock::duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
}

inline std::string DimsText(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += StrCat(i ? "," : "", dims[i]);
  return s + "]";
}

// `dims` with at most one -1 resolved so the element count is `numel`; empty when impossible.
inline std::optional<Shape> Resolve(const std::vector<int64_t>& dims, int64_t numel) {
  Shape s(dims.begin(), dims.end());
  int64_t known = 1;
  int wild = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] < 0) {
      if (wild >= 0) return std::nullopt;
      wild = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (wild >= 0) {
    if (known == 0 || numel % known != 0) return std::nullopt;
    s[static_cast<size_t>(wild)] = numel / known;
  } else if (known != numel) {
    return std::nullopt;
  }
  return s;
}

template <class T>
std::vector<int64_t> Dims(const T& t) {
  return std::vector<int64_t>(t.dims().begin(), t.dims().end());
}

inline std::string InputNames(const ModelConfig& c) {
  std::string s;
  for (const auto& i : c.input()) s += (s.empty() ? "" : ", ") + i.name();
  return s;
}

}  // namespace sampan::server::internal
