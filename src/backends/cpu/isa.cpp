#include "backends/cpu/isa.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace sampan::cpu {
namespace {

constexpr const char* kNames[] = {"baseline", "avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx"};
constexpr int kLevels = 6;

#if defined(__x86_64__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};
Regs Cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}
uint64_t Xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
bool Bit(unsigned reg, int bit) {
  return (reg >> bit) & 1u;
}

Isa DetectHostIsa() {
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return Isa::kBaseline;
  const Regs l1 = Cpuid(1, 0), l7 = Cpuid(7, 0), l7s1 = Cpuid(7, 1), ext = Cpuid(0x80000001u, 0);
  if (!Bit(l1.c, 27)) return Isa::kBaseline;  // OSXSAVE: no XGETBV, no AVX state
  const uint64_t xcr0 = Xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM, YMM
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;         // XTILECFG, XTILEDATA
  // x86-64-v3: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE (and AVX, POPCNT).
  const bool v3 = os_avx && Bit(l1.c, 28) && Bit(l1.c, 12) && Bit(l1.c, 29) && Bit(l1.c, 22) && Bit(l1.c, 23) &&
                  Bit(l7.b, 5) && Bit(l7.b, 3) && Bit(l7.b, 8) && Bit(ext.c, 5);
  if (!v3) return Isa::kBaseline;
  // x86-64-v4: AVX-512 F, DQ, CD, BW, VL.
  const bool v4 = os_avx512 && Bit(l7.b, 16) && Bit(l7.b, 17) && Bit(l7.b, 28) && Bit(l7.b, 30) && Bit(l7.b, 31);
  if (!v4) return Isa::kAvx2;
  if (!Bit(l7.c, 11)) return Isa::kAvx512;                                     // AVX512_VNNI
  if (!Bit(l7s1.a, 5)) return Isa::kAvx512Vnni;                                // AVX512_BF16
  const bool amx = os_amx && Bit(l7.d, 24) && Bit(l7.d, 25) && Bit(l7.d, 22);  // TILE, INT8, BF16
  return amx ? Isa::kAmx : Isa::kAvx512Bf16;
}
#else
Isa DetectHostIsa() {
  return Isa::kBaseline;
}
#endif

struct Choice {
  Isa active = Isa::kBaseline;
  bool capped = false;  // SAMPAN_CPU_ISA named a level
  Status status;
};

const Choice& GetChoice() {
  static const Choice choice = [] {
    Choice c;
    const Isa host = HostIsa();
    c.active = host;
    const char* env = std::getenv("SAMPAN_CPU_ISA");
    if (env == nullptr || *env == '\0' || std::string(env) == "native") return c;
    Isa want;
    if (!ParseIsa(env, &want)) {
      c.status = InvalidArgument("SAMPAN_CPU_ISA='", env, "' is not an instruction set level: use native or one of ",
                                 IsaNamesUpTo(Isa::kAmx), " (this CPU has ", IsaNamesUpTo(host), ")");
      return c;
    }
    if (static_cast<int>(want) > static_cast<int>(host)) {
      c.status =
          InvalidArgument("SAMPAN_CPU_ISA=", env, " is above what this CPU supports (it has ", IsaNamesUpTo(host), ")");
      return c;
    }
    c.active = want;
    c.capped = true;
    return c;
  }();
  return choice;
}

std::atomic<int> g_variant{-1};

int VariantOf(Isa isa) {
  return std::min(static_cast<int>(isa), static_cast<int>(Isa::kAvx512));
}

dnnl::cpu_isa OneDnnIsa(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return dnnl::cpu_isa::sse41;
    case Isa::kAvx2:
      return dnnl::cpu_isa::avx2;
    case Isa::kAvx512:
      return dnnl::cpu_isa::avx512_core;
    case Isa::kAvx512Vnni:
      return dnnl::cpu_isa::avx512_core_vnni;
    case Isa::kAvx512Bf16:
      return dnnl::cpu_isa::avx512_core_bf16;
    case Isa::kAmx:
      return dnnl::cpu_isa::avx512_core_amx;
  }
  return dnnl::cpu_isa::all;
}

}  // namespace

const char* IsaName(Isa isa) {
  const int i = static_cast<int>(isa);
  return i >= 0 && i < kLevels ? kNames[i] : "unknown";
}

bool ParseIsa(const std::string& name, Isa* isa) {
  for (int i = 0; i < kLevels; ++i)
    if (name == kNames[i]) {
      *isa = static_cast<Isa>(i);
      return true;
    }
  return false;
}

std::string IsaNamesUpTo(Isa top) {
  std::string s;
  for (int i = 0; i <= static_cast<int>(top) && i < kLevels; ++i) s += std::string(i ? ", " : "") + kNames[i];
  return s;
}

Isa HostIsa() {
  static const Isa host = DetectHostIsa();
  return host;
}

Isa ActiveIsa() {
  return GetChoice().active;
}

Status CheckIsa() {
  return GetChoice().status;
}

Status ApplyIsaToOneDnn() {
  static std::once_flag once;
  static Status result;
  std::call_once(once, [] {
    const Choice& c = GetChoice();
    if (!c.capped) return;
    try {
      if (dnnl::set_max_cpu_isa(OneDnnIsa(c.active)) != dnnl::status::success)
        result = Internal("oneDNN refused the instruction set cap ", IsaName(c.active));
    } catch (const dnnl::error& e) {
      // Set too late (a oneDNN kernel already ran in this process) or refused.
      result = Internal("oneDNN did not take the instruction set cap ", IsaName(c.active), ": ", e.what());
    }
  });
  return result;
}

std::string OneDnnIsaName() {
  (void)ApplyIsaToOneDnn();  // reading the effective ISA fixes it: apply the cap first
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::all:
      return "all";
  }
  return "unknown";
}

std::string IsaSummary() {
  const Choice& c = GetChoice();
  std::string s = std::string("kernels ") + IsaName(KernelVariant()) + ", instruction set " + IsaName(c.active);
  if (c.capped) s += std::string(" (SAMPAN_CPU_ISA cap; this CPU has ") + IsaName(HostIsa()) + ")";
  s += ", oneDNN " + OneDnnIsaName();
  return s;
}

Isa KernelVariant() {
  return static_cast<Isa>(isa_detail::CurrentVariant());
}

namespace isa_detail {
int CurrentVariant() {
  int v = g_variant.load(std::memory_order_relaxed);
  if (v < 0) {
    v = VariantOf(ActiveIsa());
    int expected = -1;
    if (!g_variant.compare_exchange_strong(expected, v)) v = expected;
  }
  return v;
}
}  // namespace isa_detail

ScopedKernelVariant::ScopedKernelVariant(Isa isa) : saved_(isa_detail::CurrentVariant()) {
  ok_ = static_cast<int>(isa) <= static_cast<int>(HostIsa());
  if (ok_) g_variant.store(VariantOf(isa));
}

ScopedKernelVariant::~ScopedKernelVariant() {
  g_variant.store(saved_);
}

}  // namespace sampan::cpu
