// `sampan`: the command-line entry point.
#include <cstdio>
#include <exception>
#include <string>

#include "base/report_util.h"
#include "cli/commands.h"

namespace sampan::cli {
int& ExitCode() {
  static int code = 0;
  return code;
}
}  // namespace sampan::cli

int main(int argc, char** argv) {
  CLI::App app{"Sampan: compile ONNX models into optimized engines and serve them"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sampan ") + sampan::Version());
  sampan::cli::AddRunCommand(app);
  sampan::cli::AddConformanceCommand(app);
  sampan::cli::AddBuildCommand(app);
  sampan::cli::AddBenchCommand(app);
  sampan::cli::AddServeCommand(app);
  sampan::cli::AddPerfCommand(app);
  sampan::cli::AddInfoCommand(app);
  sampan::cli::AddPublishCommand(app);
  sampan::cli::AddDeployCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  }
  return sampan::cli::ExitCode();
}
