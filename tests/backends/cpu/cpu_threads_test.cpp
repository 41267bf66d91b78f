// Thread-count defaults of the CPU backend: affinity and cgroup quota.
#include <gtest/gtest.h>

#include "backends/cpu/threads.h"

namespace sampan::cpu {
namespace {

TEST(CpuThreads, CgroupQuota) {
  EXPECT_EQ(CoresFromCpuMax("max 100000"), 0);
  EXPECT_EQ(CoresFromCpuMax("200000 100000"), 2);
  EXPECT_EQ(CoresFromCpuMax("150000 100000"), 2);  // 1.5 cores: two threads, each throttled
  EXPECT_EQ(CoresFromCpuMax("50000 100000"), 1);
  EXPECT_EQ(CoresFromCpuMax("-1 100000"), 0);  // cgroup v1 "no limit"
  EXPECT_EQ(CoresFromCpuMax(""), 0);
  EXPECT_EQ(CoresFromCpuMax("garbage"), 0);
}

TEST(CpuThreads, AvailableCoresIsPositive) {
  EXPECT_GE(AvailableCores(), 1);
}

}  // namespace
}  // namespace sampan::cpu
