// `sampan info`: what this build has and this machine offers each backend (whether it can
// run here, the CPU's instruction set levels and the variant that runs, the GPUs).
#include <cstdio>
#include <sstream>

#include "base/report_util.h"
#include "cli/commands.h"
#include "runtime/backend.h"

namespace sampan::cli {

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
  });
}

}  // namespace sampan::cli
