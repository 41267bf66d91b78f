// The CPU backend's instruction set levels (isa.h): detection against the compiler's own CPU
// checks, level names, and every compilation of our row kernels against a double-precision
// scalar reference (the kernel families through the engine run per variant in cpu_kernels_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/vec.h"

namespace sampan::cpu {
namespace {

TEST(CpuIsa, NamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(Isa::kAmx); ++i) {
    Isa isa;
    ASSERT_TRUE(ParseIsa(IsaName(static_cast<Isa>(i)), &isa)) << i;
    EXPECT_EQ(static_cast<int>(isa), i);
  }
  Isa isa;
  EXPECT_FALSE(ParseIsa("avx1024", &isa));
  EXPECT_FALSE(ParseIsa("", &isa));
  EXPECT_EQ(IsaNamesUpTo(Isa::kAvx2), "baseline, avx2");
  EXPECT_EQ(IsaNamesUpTo(Isa::kAmx), "baseline, avx2, avx512, avx512_vnni, avx512_bf16, amx");
}

TEST(CpuIsa, HostLevelAgreesWithTheCompilersCpuChecks) {
  const Isa host = HostIsa();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512cd");
  // GCC's checks look at CPUID and (for AVX/AVX-512) the OS-enabled state, as HostIsa does.
  EXPECT_EQ(static_cast<int>(host) >= static_cast<int>(Isa::kAvx2), v3) << IsaName(host);
  EXPECT_EQ(static_cast<int>(host) >= static_cast<int>(Isa::kAvx512), v4) << IsaName(host);
  if (static_cast<int>(host) >= static_cast<int>(Isa::kAvx512Vnni)) {
    EXPECT_TRUE(__builtin_cpu_supports("avx512vnni"));
  }
  if (static_cast<int>(host) >= static_cast<int>(Isa::kAvx512Bf16)) {
    EXPECT_TRUE(__builtin_cpu_supports("avx512bf16"));
  }
  std::printf("[ info ] host instruction set: %s; %s\n", IsaName(host), IsaSummary().c_str());
}

TEST(CpuIsa, UnsetVariableMeansNoCap) {
  if (std::getenv("SAMPAN_CPU_ISA") != nullptr) GTEST_SKIP() << "SAMPAN_CPU_ISA is set in this test's environment";
  EXPECT_TRUE(CheckIsa().ok());
  EXPECT_EQ(ActiveIsa(), HostIsa());
  EXPECT_EQ(static_cast<int>(KernelVariant()), std::min(static_cast<int>(HostIsa()), static_cast<int>(Isa::kAvx512)));
}

TEST(CpuIsa, ScopedVariantRefusesLevelsAboveTheHost) {
  const Isa before = KernelVariant();
  if (HostIsa() != Isa::kAmx) {
    ScopedKernelVariant pin(Isa::kAmx);
    EXPECT_FALSE(pin.ok());
    EXPECT_EQ(KernelVariant(), before);
  }
  {
    ScopedKernelVariant pin(Isa::kBaseline);
    EXPECT_TRUE(pin.ok());
    EXPECT_EQ(KernelVariant(), Isa::kBaseline);
  }
  EXPECT_EQ(KernelVariant(), before);
}

std::vector<Isa> Variants() {
  std::vector<Isa> v = {Isa::kBaseline};
  if (static_cast<int>(HostIsa()) >= static_cast<int>(Isa::kAvx2)) v.push_back(Isa::kAvx2);
  if (static_cast<int>(HostIsa()) >= static_cast<int>(Isa::kAvx512)) v.push_back(Isa::kAvx512);
  return v;
}

// Each row kernel, each variant, sizes around the vector widths (8, 16) and their tails.
TEST(CpuIsa, EveryVariantOfTheRowKernelsMatchesAScalarReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (Isa isa : Variants()) {
    ScopedKernelVariant pin(isa);
    ASSERT_TRUE(pin.ok());
    SCOPED_TRACE(IsaName(isa));
    for (int64_t n : {1, 7, 8, 15, 16, 17, 33, 64, 100, 257}) {
      SCOPED_TRACE(n);
      std::vector<float> x(n), y(n), s(n), b(n);
      for (auto* v : {&x, &s, &b})
        for (float& f : *v) f = u(rng);
      // Softmax
      vec::SoftmaxRow(x.data(), y.data(), n);
      double mx = -1e30, sum = 0;
      for (float f : x) mx = std::max(mx, double(f));
      for (float f : x) sum += std::exp(double(f) - mx);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], std::exp(double(x[i]) - mx) / sum, 2e-6) << i;
      // LayerNorm
      vec::LayerNormRow(x.data(), s.data(), b.data(), 1e-5f, y.data(), n);
      double mean = 0, var = 0;
      for (float f : x) mean += f;
      mean /= double(n);
      for (float f : x) var += (f - mean) * (f - mean);
      const double rstd = 1.0 / std::sqrt(var / double(n) + 1e-5);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], (x[i] - mean) * rstd * s[i] + b[i], 2e-4) << i;
      // Dot, Axpy, Exp
      double dot = 0;
      for (int64_t i = 0; i < n; ++i) dot += double(x[i]) * s[i];
      EXPECT_NEAR(vec::Dot(x.data(), s.data(), n), dot, 1e-4 * (1 + std::fabs(dot)));
      y = b;
      vec::Axpy(0.5f, x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(y[i], b[i] + 0.5f * x[i]) << i;
      y = x;
      vec::ExpInPlace(y.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], std::exp(double(x[i])), 4e-7 * std::exp(double(x[i]))) << i;
      // Quantize: round half to even, saturated
      std::vector<int8_t> q(n);
      vec::QuantizeS8(x.data(), 0.02f, 3, q.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double r = std::nearbyint(double(x[i] / 0.02f)) + 3;
        EXPECT_EQ(q[i], static_cast<int8_t>(std::clamp(r, -128.0, 127.0))) << i;
      }
    }
    // Attention scores and context over 1..4 rows, widths around the 16-column tiles.
    for (int rows = 1; rows <= 4; ++rows)
      for (int64_t sk : {5, 16, 31}) {
        const int64_t d = 12;
        std::vector<float> q(rows * d), kt(d * sk), sc(rows * sk), v(sk * d), ctx(rows * d);
        for (auto* w : {&q, &kt, &v})
          for (float& f : *w) f = u(rng);
        vec::AttentionScores(q.data(), d, 1, rows, kt.data(), d, sk, sc.data());
        for (int r = 0; r < rows; ++r)
          for (int64_t j = 0; j < sk; ++j) {
            double want = 0;
            for (int64_t t = 0; t < d; ++t) want += double(q[r * d + t]) * kt[t * sk + j];
            EXPECT_NEAR(sc[r * sk + j], want, 1e-4) << rows << " " << sk << " " << j;
          }
        vec::AttentionContext(sc.data(), rows, sk, v.data(), d, d, ctx.data(), d);
        for (int r = 0; r < rows; ++r)
          for (int64_t c = 0; c < d; ++c) {
            double want = 0;
            for (int64_t j = 0; j < sk; ++j) want += double(sc[r * sk + j]) * v[j * d + c];
            EXPECT_NEAR(ctx[r * d + c], want, 1e-3 * (1 + std::fabs(want))) << rows << " " << sk << " " << c;
          }
      }
  }
}

}  // namespace
}  // namespace sampan::cpu
