#include "server/core/gpu_placement.h"

#include <cctype>
#include <sstream>

#include "runtime/memory_usage.h"

namespace sampan::server {

namespace {

using metrics::GpuInfo;
using metrics::MigDeviceInfo;

std::vector<std::string> SplitList(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    size_t b = 0, e = item.size();
    while (b < e && std::isspace(static_cast<unsigned char>(item[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(item[e - 1]))) --e;
    out.push_back(item.substr(b, e - b));
  }
  return out;
}

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string Sized(const std::string& name, uint64_t bytes) {
  if (bytes == 0) return name;
  return StrCat(name.empty() ? "" : name + ", ", runtime::BytesText(bytes));
}

std::string GpuText(const GpuInfo& g) {
  return StrCat("GPU ", g.index, " (", Sized(g.name, g.memory_total), ")");
}

std::string MigText(const GpuInfo& g, const MigDeviceInfo& m) {
  return StrCat("MIG device ", m.index, " of GPU ", g.index, " (", Sized(m.name, m.memory_total), ")");
}

// What one entry names: a GPU, a MIG device, or nothing (why, in `error`).
struct Match {
  const GpuInfo* gpu = nullptr;
  const MigDeviceInfo* mig = nullptr;
  std::string error;
};

std::string Known(const std::vector<GpuInfo>& gpus) {
  std::string s;
  for (const GpuInfo& g : gpus) {
    s += StrCat(s.empty() ? "" : "; ", g.index, " = ", g.uuid, g.mig_enabled ? " (MIG mode" : "");
    if (g.mig_enabled) {
      for (const MigDeviceInfo& m : g.mig) s += StrCat(", ", m.uuid);
      s += g.mig.empty() ? ", no MIG device)" : ")";
    }
  }
  return s.empty() ? "NVML reports no GPU" : "NVML has " + s;
}

// CUDA's matching: an index, or a whole UUID or a prefix that names one device only.
Match Find(const std::vector<GpuInfo>& gpus, const std::string& entry) {
  Match m;
  if (AllDigits(entry)) {
    const unsigned long i = std::stoul(entry.size() > 9 ? std::string("999999999") : entry);
    for (const GpuInfo& g : gpus)
      if (g.index == i) m.gpu = &g;
    if (!m.gpu) m.error = "is no GPU's index";
    return m;
  }
  int found = 0;
  if (StartsWith(entry, "MIG-") && entry.size() > 4) {
    for (const GpuInfo& g : gpus)
      for (const MigDeviceInfo& d : g.mig)
        if (StartsWith(d.uuid, entry)) {
          ++found;
          m.gpu = &g;
          m.mig = &d;
        }
  } else if (StartsWith(entry, "GPU-") && entry.size() > 4) {
    for (const GpuInfo& g : gpus)
      if (StartsWith(g.uuid, entry)) {
        ++found;
        m.gpu = &g;
      }
  } else {
    m.error = "is neither an index nor a GPU-/MIG- UUID";
    return m;
  }
  if (found == 0) m.error = "matches no device";
  if (found > 1) m.error = StrCat("matches ", found, " devices (give more of the UUID)");
  if (found != 1) m.gpu = nullptr, m.mig = nullptr;
  return m;
}

}  // namespace

GpuPlacement ResolveVisibleGpus(const std::vector<GpuInfo>& gpus, const std::optional<std::string>& visible) {
  GpuPlacement p;
  bool have_mig = false;
  auto add = [&](const GpuInfo& g, const MigDeviceInfo* m) {
    VisibleGpu v;
    v.ordinal = static_cast<int>(p.visible.size());
    v.uuid = m ? m->uuid : g.uuid;
    v.mig = m != nullptr;
    v.description = m ? MigText(g, *m) : GpuText(g);
    p.visible.push_back(std::move(v));
  };
  if (!visible) {
    for (const GpuInfo& g : gpus) {
      if (g.mig_enabled) {
        p.notes.push_back(StrCat("GPU ", g.index, " (", g.uuid,
                                 ") is in MIG mode: a CUDA process uses one MIG device; ",
                                 "name it with CUDA_VISIBLE_DEVICES=MIG-... or --gpus MIG-..."));
        continue;
      }
      add(g, nullptr);
    }
    return p;
  }
  for (const std::string& entry : SplitList(*visible)) {
    if (StartsWith(entry, "MIG-GPU-")) {
      p.notes.push_back(StrCat("CUDA_VISIBLE_DEVICES entry '", entry,
                               "': the MIG-GPU-UUID/GI/CI form is not resolved here; give the MIG device's UUID "
                               "(nvidia-smi -L)"));
      break;
    }
    Match m = Find(gpus, entry);
    if (!m.gpu) {
      p.notes.push_back(StrCat("CUDA_VISIBLE_DEVICES entry '", entry, "' ", m.error,
                               ": CUDA ignores it and every entry after it (", Known(gpus), ")"));
      break;
    }
    if (!m.mig && m.gpu->mig_enabled) {
      p.notes.push_back(StrCat("CUDA_VISIBLE_DEVICES entry '", entry, "' is GPU ", m.gpu->index,
                               ", which is in MIG mode: name one of its MIG devices (", Known({*m.gpu}), ")"));
      continue;
    }
    if (m.mig && have_mig) {
      p.notes.push_back(StrCat("CUDA_VISIBLE_DEVICES entry '", entry,
                               "' is a second MIG device: a CUDA process uses one MIG device only; run one server "
                               "per MIG device"));
      continue;
    }
    have_mig = have_mig || m.mig;
    add(*m.gpu, m.mig);
  }
  return p;
}

Result<std::string> VisibleDevicesFor(const std::vector<GpuInfo>& gpus, const std::string& list) {
  std::string out;
  int migs = 0, whole = 0;
  for (const std::string& entry : SplitList(list)) {
    if (entry.empty()) return InvalidArgument("--gpus '", list, "': an empty entry");
    Match m = Find(gpus, entry);
    if (!m.gpu) return InvalidArgument("--gpus entry '", entry, "' ", m.error, " (", Known(gpus), ")");
    if (!m.mig && m.gpu->mig_enabled)
      return InvalidArgument("--gpus entry '", entry, "' is GPU ", m.gpu->index,
                             ", which is in MIG mode: name one of its MIG devices (", Known({*m.gpu}), ")");
    (m.mig ? migs : whole) += 1;
    out += StrCat(out.empty() ? "" : ",", m.mig ? m.mig->uuid : m.gpu->uuid);
  }
  if (migs > 1)
    return InvalidArgument("--gpus '", list, "' names ", migs,
                           " MIG devices: a CUDA process uses one MIG device; run one sampan serve per MIG device "
                           "(docs/gpu-sharing.md)");
  if (migs > 0 && whole > 0)
    return InvalidArgument("--gpus '", list,
                           "' mixes a MIG device with whole GPUs: CUDA shows a process one or the other");
  if (out.empty()) return InvalidArgument("--gpus is empty");
  return out;
}

std::vector<std::string> GpuInventoryLines(const std::vector<GpuInfo>& gpus) {
  std::vector<std::string> lines;
  for (const GpuInfo& g : gpus) {
    lines.push_back(
        StrCat(GpuText(g), ": ", g.uuid, g.mig_enabled ? StrCat(", MIG mode, ", g.mig.size(), " MIG device(s)") : ""));
    for (const MigDeviceInfo& m : g.mig) lines.push_back(StrCat("  ", MigText(g, m), ": ", m.uuid));
  }
  return lines;
}

}  // namespace sampan::server
