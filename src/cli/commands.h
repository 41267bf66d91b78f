// One function per subcommand; each lives in its own file and registers its
// flags and callback on the root app. main.cpp only wires them up.
#pragma once

#include <CLI/CLI.hpp>

namespace sampan::cli {

void AddRunCommand(CLI::App& app);
void AddConformanceCommand(CLI::App& app);
void AddBuildCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddServeCommand(CLI::App& app);
void AddPerfCommand(CLI::App& app);
void AddInfoCommand(CLI::App& app);
void AddPublishCommand(CLI::App& app);
void AddDeployCommand(CLI::App& app);
//! `sampan deploy haproxy` (deploy_haproxy.cpp), under `deploy`.
void AddDeployHaproxyCommand(CLI::App* deploy);

//! Exit code for the whole process, set by the subcommand that ran.
int& ExitCode();

}  // namespace sampan::cli
