// The tactic timing cache (--timingCacheFile): one line per measured layer,
//   <device key>\t<layer signature>\t<tactic>\t<ms>
// so rebuilds and other models with the same layers skip the measurement.
// Lines for other devices or library versions are kept but never matched.
#pragma once

#include <map>
#include <string>

#include "base/status.h"

namespace sampan::cuda {

class TimingCache {
 public:
  //! Reads `path` (a missing file is an empty cache); malformed lines are an error naming the line.
  Status Load(const std::string& path);
  Status Save(const std::string& path) const;
  struct Entry {
    std::string tactic;
    double ms = 0;
  };
  const Entry* Find(const std::string& device, const std::string& signature) const;
  void Put(const std::string& device, const std::string& signature, Entry e);
  size_t hits() const { return hits_; }

 private:
  std::map<std::pair<std::string, std::string>, Entry> entries_;
  mutable size_t hits_ = 0;
};

}  // namespace sampan::cuda
