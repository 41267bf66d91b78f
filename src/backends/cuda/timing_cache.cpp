#include "backends/cuda/timing_cache.h"

#include <fstream>
#include <sstream>
#include <vector>

namespace sampan::cuda {

Status TimingCache::Load(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::Ok();
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> parts;
    std::stringstream ss(line);
    std::string p;
    while (std::getline(ss, p, '\t')) parts.push_back(p);
    if (parts.size() != 4)
      return InvalidArgument(path, ":", n, ": timing cache lines need 4 tab-separated fields, got ", parts.size());
    char* endp = nullptr;
    const double ms = std::strtod(parts[3].c_str(), &endp);
    if (endp == parts[3].c_str()) return InvalidArgument(path, ":", n, ": '", parts[3], "' is not a time in ms");
    entries_[{parts[0], parts[1]}] = Entry{parts[2], ms};
  }
  return Status::Ok();
}

Status TimingCache::Save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) return IoError("cannot write timing cache '", tmp, "'");
    f << "# sampan tactic timing cache: device\tlayer signature\ttactic\tms\n";
    for (const auto& [k, e] : entries_) f << k.first << '\t' << k.second << '\t' << e.tactic << '\t' << e.ms << '\n';
    if (!f) return IoError("cannot write timing cache '", tmp, "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return IoError("cannot rename '", tmp, "' to '", path, "'");
  return Status::Ok();
}

const TimingCache::Entry* TimingCache::Find(const std::string& device, const std::string& signature) const {
  auto it = entries_.find({device, signature});
  if (it == entries_.end()) return nullptr;
  ++hits_;
  return &it->second;
}

void TimingCache::Put(const std::string& device, const std::string& signature, Entry e) {
  entries_[{device, signature}] = std::move(e);
}

}  // namespace sampan::cuda
