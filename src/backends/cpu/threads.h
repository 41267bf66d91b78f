// How many cores this process may use: the CPU affinity mask, capped by a
// cgroup CPU quota (v2 cpu.max, or v1 cfs_quota_us / cfs_period_us).
#pragma once

#include <string>

namespace sampan::cpu {

//! Cores available to the process (>= 1).
int AvailableCores();
//! Cores allowed by a cgroup quota text ("max 100000", "150000 100000"); 0 = no limit.
int CoresFromCpuMax(const std::string& cpu_max);

}  // namespace sampan::cpu
