// `sampan info`: what this build has and this machine offers each backend (whether it can
// run here, the CPU's instruction set levels and the variant that runs, the GPUs), and the GPUs and
// MIG devices NVML enumerates.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "base/report_util.h"
#include "cli/commands.h"
#include "runtime/backend.h"
#include "server/core/gpu_placement.h"

namespace sampan::cli {

namespace {

// NVML's enumeration (GPUs, MIG devices) and the devices CUDA shows this process, as
// `sampan serve` logs them (server/core/gpu_placement.h).
void PrintGpus() {
  auto nvml = server::metrics::GpuMonitor::OpenOrError();
  if (!nvml.ok()) {
    std::printf("gpus: none (%s)\n", nvml.status().message().c_str());
    return;
  }
  const auto inventory = (*nvml)->Inventory();
  std::printf("gpus (NVML, %s):\n", (*nvml)->library().c_str());
  for (const std::string& line : server::GpuInventoryLines(inventory)) std::printf("  %s\n", line.c_str());
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  const auto p = server::ResolveVisibleGpus(inventory, env ? std::optional<std::string>(env) : std::nullopt);
  std::printf("cuda devices of this process%s:%s\n", env ? StrCat(" (CUDA_VISIBLE_DEVICES=", env, ")").c_str() : "",
              p.visible.empty() ? " none" : "");
  for (const auto& v : p.visible) std::printf("  %d: %s, %s\n", v.ordinal, v.uuid.c_str(), v.description.c_str());
  for (const std::string& note : p.notes) std::printf("  note: %s\n", note.c_str());
}

}  // namespace

void AddInfoCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show the backends in this build and what this machine offers them");
  cmd->callback([] {
    std::printf("sampan %s\n", Version());
    for (const std::string& name : runtime::BackendNames()) {
      const runtime::Backend* b = runtime::FindBackend(name);
      const Status st = b->available ? b->available() : Status::Ok();
      std::printf("backend %s: %s\n", name.c_str(),
                  st.ok() ? "available" : ("unavailable (" + st.message() + ")").c_str());
      if (!st.ok() || !b->describe) continue;
      std::istringstream lines(b->describe());
      for (std::string line; std::getline(lines, line);) std::printf("  %s\n", line.c_str());
    }
    PrintGpus();
  });
}

}  // namespace sampan::cli
