#include "backends/cpu/threads.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace sampan::cpu {

namespace {
std::string ReadFirstLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (f) std::getline(f, line);
  return line;
}
}  // namespace

int CoresFromCpuMax(const std::string& cpu_max) {
  std::istringstream is(cpu_max);
  std::string quota;
  long long period = 0;
  if (!(is >> quota >> period) || quota == "max" || period <= 0) return 0;
  long long q = 0;
  try {
    q = std::stoll(quota);
  } catch (...) {
    return 0;
  }
  if (q <= 0) return 0;
  return std::max(1, static_cast<int>(std::ceil(static_cast<double>(q) / static_cast<double>(period))));
}

int AvailableCores() {
  int cores = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = static_cast<int>(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN)));
  int quota = CoresFromCpuMax(ReadFirstLine("/sys/fs/cgroup/cpu.max"));
  if (quota == 0) {
    const std::string q = ReadFirstLine("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    const std::string p = ReadFirstLine("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    if (!q.empty() && !p.empty()) quota = CoresFromCpuMax(q + " " + p);
  }
  if (quota > 0) cores = std::min(cores, quota);
  return std::max(1, cores);
}

}  // namespace sampan::cpu
