#include "runtime/memory_usage.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace sampan::runtime {

const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kPlanWeights:
      return "plan weights";
    case MemoryKind::kWeights:
      return "weights";
    case MemoryKind::kArena:
      return "arena";
    case MemoryKind::kFolded:
      return "folded values";
    case MemoryKind::kKernel:
      return "kernel data";
    case MemoryKind::kWorkspace:
      return "workspace";
    case MemoryKind::kStaging:
      return "staging";
  }
  return "?";
}

const char* MemoryPlaceName(MemoryPlace place) {
  switch (place) {
    case MemoryPlace::kHost:
      return "host";
    case MemoryPlace::kPinnedHost:
      return "pinned host";
    case MemoryPlace::kDevice:
      return "device";
  }
  return "?";
}

void MemoryReport::Add(MemoryKind kind, MemoryPlace place, int device, uint64_t bytes, bool estimate) {
  if (bytes == 0) return;
  if (place != MemoryPlace::kDevice) device = 0;
  for (MemoryFigure& f : figures_)
    if (f.kind == kind && f.place == place && f.device == device && f.estimate == estimate) {
      f.bytes += bytes;
      return;
    }
  figures_.push_back(MemoryFigure{kind, place, device, bytes, estimate});
}

void MemoryReport::Add(const MemoryReport& other) {
  for (const MemoryFigure& f : other.figures_) Add(f.kind, f.place, f.device, f.bytes, f.estimate);
}

void MemoryReport::Remove(MemoryKind kind, MemoryPlace place, int device, uint64_t bytes) {
  if (place != MemoryPlace::kDevice) device = 0;
  for (size_t i = 0; i < figures_.size(); ++i) {
    MemoryFigure& f = figures_[i];
    if (f.kind != kind || f.place != place || f.device != device || f.estimate) continue;
    f.bytes -= std::min(f.bytes, bytes);
    if (f.bytes == 0) figures_.erase(figures_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

MemoryReport MemoryReport::Times(uint64_t n) const {
  MemoryReport r;
  for (const MemoryFigure& f : figures_) r.Add(f.kind, f.place, f.device, f.bytes * n, f.estimate);
  return r;
}

uint64_t MemoryReport::Bytes(MemoryKind kind, MemoryPlace place, int device) const {
  if (place != MemoryPlace::kDevice) device = 0;
  uint64_t n = 0;
  for (const MemoryFigure& f : figures_)
    if (f.kind == kind && f.place == place && f.device == device) n += f.bytes;
  return n;
}

uint64_t MemoryReport::Total(MemoryPlace place, int device) const {
  if (place != MemoryPlace::kDevice) device = 0;
  uint64_t n = 0;
  for (const MemoryFigure& f : figures_)
    if (f.place == place && f.device == device) n += f.bytes;
  return n;
}

std::vector<int> MemoryReport::Devices() const {
  std::set<int> d;
  for (const MemoryFigure& f : figures_)
    if (f.place == MemoryPlace::kDevice) d.insert(f.device);
  return {d.begin(), d.end()};
}

std::string MemoryReport::ToString() const {
  if (figures_.empty()) return "nothing";
  std::string s;
  for (const MemoryFigure& f : figures_) {
    if (!s.empty()) s += ", ";
    s += MemoryKindName(f.kind);
    s += ' ';
    s += MemoryPlaceName(f.place);
    if (f.place == MemoryPlace::kDevice) s += ' ' + std::to_string(f.device);
    s += ": " + BytesText(f.bytes);
    if (f.estimate) s += " (estimate)";
  }
  return s;
}

std::string BytesText(uint64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace sampan::runtime
