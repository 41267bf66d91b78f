#include "plan/plan.h"

namespace sampan::plan {

std::string CpuIsaLevel() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  if (__builtin_cpu_supports("sse4.2")) return "sse4.2";
#elif defined(__aarch64__)
  return "neon";
#endif
  return "generic";
}

Fingerprint CurrentFingerprint(const std::string& backend) {
  Fingerprint f;
  f.backend = backend;
  // The reference backend is portable C++; only optimized backends bind to an ISA.
  if (backend == "cpu") f.isa = CpuIsaLevel();
  return f;
}

Status CheckFingerprint(const Fingerprint& plan, const Fingerprint& device) {
  std::string diffs;
  auto cmp = [&](const char* field, const std::string& p, const std::string& d) {
    if (!p.empty() && p != d) diffs += StrCat("\n  ", field, ": plan '", p, "', this machine '", d, "'");
  };
  cmp("backend", plan.backend, device.backend);
  cmp("isa", plan.isa, device.isa);
  cmp("gpu_name", plan.gpu_name, device.gpu_name);
  cmp("compute_capability", plan.compute_capability, device.compute_capability);
  cmp("cuda_version", plan.cuda_version, device.cuda_version);
  cmp("cudnn_version", plan.cudnn_version, device.cudnn_version);
  cmp("cublas_version", plan.cublas_version, device.cublas_version);
  if (diffs.empty()) return Status::Ok();
  return FailedPrecondition("the plan was built for a different device (rebuild it here, or build with --portable):",
                            diffs);
}

}  // namespace sampan::plan
