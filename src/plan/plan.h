// The plan file: an optimized graph plus everything needed to run it without
// the source model, bound to the device it was built for.
//
// Layout (all integers little-endian):
//   PlanHeader (64 bytes) | PlanProto metadata (proto/plan.proto) | pad to 64 |
//   weights blob (every tensor 64-byte aligned, so a mapped file is used in place)
// The checksum covers metadata and blob; any flipped byte is detected on load.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace sampan::plan {

inline constexpr char kMagic[8] = {'S', 'A', 'M', 'P', 'L', 'A', 'N', '\x1a'};
//! Bumped when the layout or the meaning of a field changes incompatibly.
inline constexpr uint32_t kFormatVersion = 1;
//! Oldest format version this build still loads.
inline constexpr uint32_t kMinFormatVersion = 1;
inline constexpr size_t kAlignment = 64;

struct PlanHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_size;
  uint64_t meta_offset;
  uint64_t meta_size;
  uint64_t blob_offset;
  uint64_t blob_size;
  uint64_t checksum;  //!< Hash64 over [meta_offset, blob_offset + blob_size)
  uint8_t reserved[8];
};
static_assert(sizeof(PlanHeader) == 64);

//! What a plan is bound to. Empty fields are not compared.
struct Fingerprint {
  std::string backend;
  std::string isa;
  std::string gpu_name;
  std::string compute_capability;
  std::string cuda_version;
  std::string cudnn_version;
  std::string cublas_version;
};

//! The machine this process runs on, for a backend ("reference", "cpu", "cuda").
Fingerprint CurrentFingerprint(const std::string& backend);
//! Ok when `device` can run a plan bound to `plan`; otherwise names each differing field.
Status CheckFingerprint(const Fingerprint& plan, const Fingerprint& device);
//! The CPU's best vector ISA level: "avx512", "avx2", "sse4.2", "generic".
std::string CpuIsaLevel();

struct ShapeRange {
  Shape min, opt, max;
};
//! One optimization profile: input name -> shape range.
using Profile = std::map<std::string, ShapeRange>;

struct BuildOptions {
  std::string precision = "fp32";
  std::vector<std::string> layer_precision;
  std::vector<std::string> disabled_passes;
  uint64_t workspace_bytes = 0;
  bool portable = false;
  //! Implicit INT8: "int8 calibration=entropy samples=16 cache=fnv1a64:... layers=53"; "" = none.
  std::string quantization;
};

//! The kernel a backend chose for a node at build time (TensorRT's tactic), as fields:
//! what runs the node, which of its algorithms the builder timed fastest, the math mode
//! and the storage layout of the node's output. Backends read the fields; the text form
//! is for reports and the CUDA timing cache.
struct Tactic {
  std::string family;  //!< kernel family: "cudnn conv", "cublaslt gemm", "onednn:conv", "host", "folded"; "" = none
  int algo = -1;       //!< the family's algorithm (the family's own numbering); -1 = the family's default choice
  bool tf32 = false;   //!< math mode: FP32 products may run on TF32 tensor cores
  bool nhwc = false;   //!< layout: the node's output is stored channels-last (the CUDA backend's 4-D activations)
  bool empty() const { return family.empty() && algo < 0 && !tf32 && !nhwc; }
  //! "cudnn conv algo=5000 tf32 nhwc" (fields that are unset are left out).
  std::string ToString() const;
  //! The inverse of ToString; an "algo=" that is not a non-negative integer is an error.
  static Result<Tactic> Parse(const std::string& text);
  bool operator==(const Tactic&) const = default;
};

//! Per-node build decisions, keyed by node name.
struct NodeChoice {
  std::string precision;
  Tactic tactic;
};

struct Plan {
  uint32_t format_version = kFormatVersion;
  std::string builder_version;
  std::string source_model;
  std::string created_utc;
  Fingerprint fingerprint;
  BuildOptions options;
  std::vector<Profile> profiles;
  std::shared_ptr<ir::Graph> graph;
  std::map<std::string, NodeChoice> choices;
  std::vector<std::string> rewrites;
  //! Backend-specific build results by key ("sim.latency": the sim backend's latency table);
  //! a backend reads its own keys and ignores none it wrote.
  std::map<std::string, std::string> backend_data;
};

//! 64-bit hash used for the plan checksum (fast, not cryptographic).
uint64_t Hash64(const void* data, size_t size);

//! Serializes a plan to bytes / a file.
Result<std::string> SerializePlan(const Plan& plan);
Status WritePlan(const Plan& plan, const std::string& path);
//! Writes serialized (possibly signed) plan bytes to `path` atomically (beside it, then renamed).
Status WritePlanBytes(const std::string& bytes, const std::string& path);
//! Loads a plan file; weights are mapped from the file, not copied.
//! Fails with a clear message on wrong magic, unsupported version, truncation or checksum mismatch.
Result<Plan> ReadPlan(const std::string& path);
//! Parses plan bytes held by `owner` (which must outlive the tensors).
Result<Plan> ParsePlan(std::shared_ptr<const std::string> bytes, const std::string& what);
//! True when the file starts with the plan magic.
bool LooksLikePlan(const std::string& path);

}  // namespace sampan::plan
