// Which x86 instruction set the CPU backend runs: one mechanism for our kernels and oneDNN's.
//
//   HostIsa()    the best level this CPU and OS support (CPUID + XGETBV: the OS must save the
//                AVX-512 / AMX register state, or the instructions fault);
//   ActiveIsa()  HostIsa() capped by SAMPAN_CPU_ISA=baseline|avx2|avx512|avx512_vnni|avx512_bf16|amx
//                (read once per process; `native` or unset: no cap);
//   CheckIsa()   why SAMPAN_CPU_ISA is wrong (not a level, or above what this CPU has), for the
//                engine and the builder to refuse with.
//
// The cap also caps oneDNN (dnnl::set_max_cpu_isa, applied before its first primitive: call
// ApplyIsaToOneDnn() before creating any oneDNN engine), so `SAMPAN_CPU_ISA=avx2` runs AVX2
// code everywhere on an AVX-512 machine.
//
// Our own kernels come in three compilations of one body (SP_ISA_DISPATCH): baseline x86-64,
// AVX2+FMA (x86-64-v3) and AVX-512 F/BW/VL/DQ/CD (x86-64-v4); KernelVariant() picks among them
// by ActiveIsa() on every call (one load and a switch). Tests pin a variant in-process with
// ScopedKernelVariant; oneDNN's cap can only be set once per process (tests use subprocesses).
#pragma once

#include <string>

#include "base/status.h"

namespace sampan::cpu {

enum class Isa : int { kBaseline = 0, kAvx2, kAvx512, kAvx512Vnni, kAvx512Bf16, kAmx };

//! "baseline", "avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx".
const char* IsaName(Isa isa);
//! The level named `name` (IsaName's spelling); false when none is.
bool ParseIsa(const std::string& name, Isa* isa);
//! Every level, lowest first, up to and including `top`, as "baseline, avx2, ...".
std::string IsaNamesUpTo(Isa top);

Isa HostIsa();
//! HostIsa() capped by SAMPAN_CPU_ISA (HostIsa() when the variable is unset or wrong:
//! CheckIsa() says why, and the engine refuses to run).
Isa ActiveIsa();
//! Ok, or InvalidArgument naming SAMPAN_CPU_ISA, its value and the levels this CPU has.
Status CheckIsa();
//! Caps oneDNN at ActiveIsa() (once per process; later calls return the first call's status).
Status ApplyIsaToOneDnn();
//! oneDNN's effective ISA as its name ("avx512_core_amx", ...).
std::string OneDnnIsaName();
//! One line for `sampan bench` and `sampan build --verbose`: the kernels' variant, the host's
//! level, the cap, and oneDNN's ISA.
std::string IsaSummary();

//! The compilation of our kernels that runs: kBaseline, kAvx2 or kAvx512 (the levels above
//! kAvx512 add instructions only oneDNN's and the int8 kernels use).
Isa KernelVariant();

//! Pins KernelVariant() for a test (fails, leaving it as is, above HostIsa()).
class ScopedKernelVariant {
 public:
  explicit ScopedKernelVariant(Isa isa);
  ~ScopedKernelVariant();
  bool ok() const { return ok_; }
  ScopedKernelVariant(const ScopedKernelVariant&) = delete;
  ScopedKernelVariant& operator=(const ScopedKernelVariant&) = delete;

 private:
  int saved_;
  bool ok_;
};

namespace isa_detail {
int CurrentVariant();  // KernelVariant() as an int, without the Isa cast
}  // namespace isa_detail

}  // namespace sampan::cpu

#if defined(__x86_64__) && defined(__GNUC__)  // GCC and clang
#define SP_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt")))
#define SP_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512cd,avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt")))
#define SP_HAVE_ISA_VARIANTS 1
#else
#define SP_TARGET_AVX2
#define SP_TARGET_AVX512
#define SP_HAVE_ISA_VARIANTS 0
#endif

// Defines `Ret Name Params` (declared elsewhere, e.g. in a header) as three compilations of
// `Name##Body Args`, an always_inline function taking the same arguments, and a switch on
// KernelVariant() among them. Name##Body must not call non-inline code in its loops, or that
// code runs in the baseline compilation.
#define SP_ISA_DISPATCH(Ret, Name, Params, Args)           \
  SP_TARGET_AVX512 static Ret Name##_avx512 Params {       \
    return Name##Body Args;                                \
  }                                                        \
  SP_TARGET_AVX2 static Ret Name##_avx2 Params {           \
    return Name##Body Args;                                \
  }                                                        \
  static Ret Name##_baseline Params {                      \
    return Name##Body Args;                                \
  }                                                        \
  Ret Name Params {                                        \
    switch (::sampan::cpu::isa_detail::CurrentVariant()) { \
      case static_cast<int>(::sampan::cpu::Isa::kAvx512):  \
        return Name##_avx512 Args;                         \
      case static_cast<int>(::sampan::cpu::Isa::kAvx2):    \
        return Name##_avx2 Args;                           \
      default:                                             \
        return Name##_baseline Args;                       \
    }                                                      \
  }

// SP_ISA_DISPATCH for a body templated on <bool kWide>: the AVX-512 compilation gets
// Name##Body<true> (register tiles of 16-float vectors), the others Name##Body<false>.
#define SP_ISA_DISPATCH_WIDE(Ret, Name, Params, Args)      \
  SP_TARGET_AVX512 static Ret Name##_avx512 Params {       \
    return Name##Body<true> Args;                          \
  }                                                        \
  SP_TARGET_AVX2 static Ret Name##_avx2 Params {           \
    return Name##Body<false> Args;                         \
  }                                                        \
  static Ret Name##_baseline Params {                      \
    return Name##Body<false> Args;                         \
  }                                                        \
  Ret Name Params {                                        \
    switch (::sampan::cpu::isa_detail::CurrentVariant()) { \
      case static_cast<int>(::sampan::cpu::Isa::kAvx512):  \
        return Name##_avx512 Args;                         \
      case static_cast<int>(::sampan::cpu::Isa::kAvx2):    \
        return Name##_avx2 Args;                           \
      default:                                             \
        return Name##_baseline Args;                       \
    }                                                      \
  }
