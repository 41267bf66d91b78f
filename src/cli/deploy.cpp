// `sampan deploy kubernetes`: a kustomize overlay for one model repository, sized from what was
// measured when its versions were published. Per model it reads the serving version's
// report.json (`sampan publish`: bench throughput and p99 of one instance, the memory one engine
// and context took, the plan's size) or a `sampan bench --json` report beside it (bench.json),
// the instance count and latency SLO of config.pbtxt, and from those sets the pod's resources
// (requests and limits, the GPU memory check), the HPA's replica range and saturation target,
// and the GPU product of the node affinity. Every figure lands in sizing.json with the file and
// field it came from, and what was assumed is printed and written to SIZING.md.
#include <rapidjson/document.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "base/file_util.h"
#include "base/report_util.h"
#include "cli/commands.h"
#include "server/core/canary.h"
#include "server/repository/repository.h"

namespace sampan::cli {

namespace fs = std::filesystem;

namespace {

struct DeployFlags {
  std::string repository, out, base, variant, gpu_product;
  double slo_ms = 0;
  int min_replicas = 2;
  int max_replicas = 0;  // 0: max(10, what the peaks need)
  double gpu_memory_gib = 0;
  double target = 0;               // 0: derived
  std::vector<std::string> peaks;  // MODEL=RPS
};

// GPU memory of the products GPU feature discovery names (nvidia.com/gpu.product), GiB.
struct GpuProduct {
  const char* label;
  double gib;
};
constexpr GpuProduct kGpus[] = {
    {"NVIDIA-H200", 141},
    {"NVIDIA-H100-80GB-HBM3", 80},
    {"NVIDIA-H100-PCIe", 80},
    {"NVIDIA-H100-NVL", 94},
    {"NVIDIA-A100-SXM4-80GB", 80},
    {"NVIDIA-A100-SXM4-40GB", 40},
    {"NVIDIA-A100-PCIE-40GB", 40},
    {"NVIDIA-A100-80GB-PCIe", 80},
    {"NVIDIA-L40S", 48},
    {"NVIDIA-L4", 24},
    {"NVIDIA-A10", 24},
    {"Tesla-T4", 16},
};

// "NVIDIA H100 80GB HBM3" (the CUDA device name a plan records) -> "NVIDIA-H100-80GB-HBM3" (the
// label GPU feature discovery puts on the node).
std::string ProductLabel(const std::string& device_name) {
  std::string s = device_name;
  for (char& c : s)
    if (c == ' ') c = '-';
  return s;
}

struct ModelSizing {
  std::string name;
  int64_t version = 0;
  std::string source;  // the file the figures came from
  std::string backend, device;
  int64_t batch = 1;
  double rate = 0;                             // inferences/s of one instance
  double p99_ms = 0;                           // of one inference at `batch`
  int64_t memory_bytes = 0;                    // per instance: device memory (GPU variants) or host memory
  std::string memory_from;                     // which field
  int64_t host_bytes = -1, device_bytes = -1;  // as measured (-1: not in the report)
  int64_t plan_bytes = 0;
  int instances = 1;
  double slo_ms = 0;
  std::string slo_from;
  double peak_rps = 0;
};

// A field's number; `fallback` when absent, not a number, or outside [0, 1e15] (no figure here is
// negative or that large, and larger ones would overflow the integers they become).
double Number(const rapidjson::Value& v, const char* key, double fallback = -1) {
  if (!v.IsObject()) return fallback;
  auto it = v.FindMember(key);
  if (it == v.MemberEnd() || !it->value.IsNumber()) return fallback;
  const double x = it->value.GetDouble();
  return std::isfinite(x) && x >= 0 && x <= 1e15 ? x : fallback;
}

std::string String(const rapidjson::Value& v, const char* key) {
  if (!v.IsObject()) return "";
  auto it = v.FindMember(key);
  return it != v.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
}

// The figures of one model's serving version.
Result<ModelSizing> ReadModel(const std::string& repository, const std::string& name) {
  ModelSizing m;
  m.name = name;
  const fs::path model_dir = fs::path(repository) / name;
  bool has_file = false;
  SP_ASSIGN_OR_RETURN(server::ModelConfig config, server::ReadModelConfig(model_dir.string(), name, &has_file));
  m.version = server::NewestNotRolledBack(model_dir.string());
  if (m.version == 0) return NotFound("model '", name, "': no version to size (", model_dir.string(), ")");
  const fs::path vdir = model_dir / std::to_string(m.version);
  m.instances = 0;
  for (const auto& g : config.instance_group()) m.instances += std::max(1, g.count());
  if (m.instances == 0) m.instances = 1;
  if (config.sampan().latency_slo_ms() > 0) {
    m.slo_ms = config.sampan().latency_slo_ms();
    m.slo_from = (model_dir / "config.pbtxt").string() + ": sampan.latency_slo_ms";
  }

  // report.json's bench (sampan publish), else bench.json (sampan bench --json).
  rapidjson::Document doc;
  const fs::path report = vdir / "report.json", bench_json = vdir / "bench.json";
  const bool from_report = fs::exists(report);
  const fs::path file = from_report ? report : bench_json;
  auto text = ReadFileBytes(file.string());
  if (!text.ok())
    return NotFound("model '", name, "' version ", m.version, ": no bench figures (", report.string(), " from `sampan ",
                    "publish --benchSecs S`, or ", bench_json.string(), " from `sampan bench --json`)");
  doc.Parse(text->data(), text->size());
  if (doc.HasParseError() || !doc.IsObject()) return InvalidArgument(file.string(), ": not a JSON object");
  m.source = file.string();
  const rapidjson::Value* bench = &doc;
  if (from_report) {
    auto b = doc.FindMember("bench");
    if (b == doc.MemberEnd() || !b->value.IsObject())
      return InvalidArgument(file.string(), ": \"bench\" is missing (published with --benchSecs 0?): model '", name,
                             "' cannot be sized");
    bench = &b->value;
    m.rate = Number(*bench, "inferences_per_second");
    if (bench->HasMember("latency_ms")) m.p99_ms = Number((*bench)["latency_ms"], "p99");
    m.device = String(*bench, "device");
    const rapidjson::Value& mem = bench->HasMember("memory") ? (*bench)["memory"] : *bench;
    m.device_bytes = static_cast<int64_t>(Number(mem, "device_bytes"));
    m.host_bytes = static_cast<int64_t>(Number(mem, "host_bytes"));
    // The plan's size (its weights), from the report's file list.
    auto files = doc.FindMember("files");
    if (files != doc.MemberEnd() && files->value.IsObject())
      for (auto f = files->value.MemberBegin(); f != files->value.MemberEnd(); ++f) {
        const std::string rel = f->name.GetString();
        if (rel.rfind(".sampan/", 0) == 0 && rel.size() > 5 && rel.compare(rel.size() - 5, 5, ".plan") == 0)
          m.plan_bytes += static_cast<int64_t>(Number(f->value, "bytes", 0));
      }
  } else {
    m.rate = Number(doc, "throughput_items_per_s");
    if (doc.HasMember("latency_ms")) m.p99_ms = Number(doc["latency_ms"], "p99");
  }
  m.backend = String(*bench, "backend");
  m.batch = static_cast<int64_t>(Number(*bench, "batch", 1));
  if (!(m.rate > 0) || !(m.p99_ms > 0))
    return InvalidArgument(file.string(), ": the bench figures (inferences per second, p99 latency) are missing or 0");
  return m;
}

// Memory per instance for the variant: the device memory one engine and context took (GPU) or the
// host memory (CPU), at least the plan's size (its weights: a measured delta can hide pages the
// process had already).
void ChooseMemory(ModelSizing& m, bool gpu) {
  const int64_t measured = gpu ? m.device_bytes : m.host_bytes;
  m.memory_bytes = std::max<int64_t>(0, measured);
  m.memory_from = measured >= 0 ? (gpu ? "bench.memory.device_bytes" : "bench.memory.host_bytes") : "";
  if (m.memory_bytes < m.plan_bytes) {
    m.memory_from =
        m.memory_from.empty() ? "the plan's size (no memory measured)" : m.memory_from + ", raised to the plan's size";
    m.memory_bytes = m.plan_bytes;
  }
}

std::string Mi(double bytes) {
  return StrCat(static_cast<int64_t>(std::ceil(bytes / (1024.0 * 1024.0))), "Mi");
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

Status Deploy(const DeployFlags& f) {
  std::error_code ec;
  if (!fs::is_directory(f.repository, ec)) return NotFound("--repository '", f.repository, "' is not a directory");
  if (f.out.empty()) return InvalidArgument("--out is required");
  if (!f.variant.empty() && f.variant != "cpu" && f.variant != "gpu" && f.variant != "mig")
    return InvalidArgument("--variant '", f.variant, "' is not one of cpu, gpu, mig");
  if (f.min_replicas < 1) return InvalidArgument("--min-replicas must be >= 1");
  if (f.max_replicas != 0 && f.max_replicas < f.min_replicas)
    return InvalidArgument("--max-replicas ", f.max_replicas, " is below --min-replicas ", f.min_replicas);
  if (f.slo_ms < 0 || !std::isfinite(f.slo_ms)) return InvalidArgument("--slo-p99-ms must be > 0");
  if (f.gpu_memory_gib < 0 || !std::isfinite(f.gpu_memory_gib) || f.gpu_memory_gib > 1e6)
    return InvalidArgument("--gpu-memory-gib must be a size in GiB");
  if (f.max_replicas < 0) return InvalidArgument("--max-replicas must be >= 1");
  if (!std::isfinite(f.target) || (f.target != 0 && !(f.target > 0 && f.target <= 1)))
    return InvalidArgument("--target-saturation must be in (0, 1]");
  std::map<std::string, double> peaks;
  for (const std::string& p : f.peaks) {
    const size_t eq = p.find('=');
    double v = 0;
    try {
      v = eq == std::string::npos ? 0 : std::stod(p.substr(eq + 1));
    } catch (...) {
      v = 0;
    }
    if (eq == std::string::npos || eq == 0 || !(v > 0) || !std::isfinite(v) || v > 1e12)
      return InvalidArgument("--peak-rps '", p, "': expected MODEL=REQUESTS_PER_SECOND (> 0)");
    peaks[p.substr(0, eq)] = v;
  }

  SP_ASSIGN_OR_RETURN(std::vector<std::string> names, server::ListModels(f.repository));
  std::vector<std::string> assumed;
  std::vector<ModelSizing> models;
  // The variant: as given, else gpu when the figures were measured on a GPU.
  std::string variant = f.variant;
  for (const std::string& n : names) {
    bool has_file = false;
    auto config = server::ReadModelConfig((fs::path(f.repository) / n).string(), n, &has_file);
    if (config.ok() && config->platform() == "ensemble") {
      assumed.push_back(StrCat("model '", n, "' is an ensemble: its composing models are sized, it adds nothing"));
      continue;
    }
    SP_ASSIGN_OR_RETURN(ModelSizing m, ReadModel(f.repository, n));
    if (variant.empty()) variant = m.backend == "cuda" ? "gpu" : "cpu";
    models.push_back(std::move(m));
  }
  if (models.empty()) return NotFound("--repository '", f.repository, "' holds no model to size");
  if (variant.empty()) variant = "cpu";
  const bool gpu = variant != "cpu";
  const std::string want_backend = gpu ? "cuda" : "cpu";
  std::string product = f.gpu_product;
  for (ModelSizing& m : models) {
    ChooseMemory(m, gpu);
    if (m.backend != want_backend)
      return FailedPrecondition("model '", m.name, "' version ", m.version, " was benchmarked on backend '", m.backend,
                                "' (", m.source, "); the ", variant, " overlay needs figures from backend '",
                                want_backend, "': publish it on such a machine");
    if (gpu) {
      const std::string label = ProductLabel(m.device);
      if (product.empty()) product = label;
      if (label != product)
        return FailedPrecondition("model '", m.name, "' was benchmarked on ", m.device, " (", m.source,
                                  "); the overlay is for ", product, ": figures from one GPU type do not carry over");
    }
    if (m.slo_ms == 0 && f.slo_ms > 0) m.slo_ms = f.slo_ms, m.slo_from = "--slo-p99-ms";
    if (peaks.count(m.name)) m.peak_rps = peaks[m.name], peaks.erase(m.name);
    if (m.memory_bytes == 0)
      return InvalidArgument(m.source, ": no memory figure (bench.memory) and no plan in the report's files: model '",
                             m.name, "' cannot be sized");
  }
  if (!peaks.empty())
    return NotFound("--peak-rps names model '", peaks.begin()->first, "', which is not in the repository");

  // The saturation target: the queueing headroom the tightest SLO leaves (1 - p99 / SLO),
  // between 0.3 and 0.7, or --target-saturation.
  double target = f.target;
  std::string target_from = "--target-saturation";
  if (target == 0) {
    target = 0.7;
    const bool any_slo = std::any_of(models.begin(), models.end(), [](const ModelSizing& m) { return m.slo_ms > 0; });
    target_from = any_slo ? "0.7, the most: every model's SLO leaves more headroom (1 - p99/SLO)"
                          : "default 0.7 (no model sets a latency SLO)";
    for (const ModelSizing& m : models) {
      if (m.slo_ms <= 0) continue;
      const double headroom = std::clamp(1.0 - m.p99_ms / m.slo_ms, 0.3, 0.7);
      if (headroom < target) {
        target = headroom;
        target_from = StrCat("1 - p99/SLO of model '", m.name, "' = 1 - ", Fixed(m.p99_ms, 2), "/", Fixed(m.slo_ms, 2),
                             ", kept within [0.3, 0.7]");
      }
    }
  }
  for (const ModelSizing& m : models)
    if (m.slo_ms > 0 && m.p99_ms > m.slo_ms)
      assumed.push_back(StrCat("model '", m.name, "': one inference at batch ", m.batch, " takes p99 ",
                               Fixed(m.p99_ms, 2), " ms, above its SLO of ", Fixed(m.slo_ms, 2),
                               " ms: no replica count meets it (lower max_batch_size or use a faster device)"));

  // Replicas: the peaks' share of one replica's time, Σ peak / rate, over the target.
  double load = 0;
  for (const ModelSizing& m : models) load += m.peak_rps / m.rate;
  const double replicas = std::ceil(load / target);
  if (replicas > 1e6)
    return InvalidArgument("the peaks need ", replicas, " replicas: check --peak-rps and the figures");
  const int need = load > 0 ? static_cast<int>(replicas) : 0;
  const int max_replicas = f.max_replicas > 0 ? f.max_replicas : std::max({10, need, f.min_replicas});
  if (need > max_replicas)
    assumed.push_back(StrCat("the peaks need ", need, " replicas at the target; --max-replicas ", max_replicas,
                             " caps the HPA below that"));
  assumed.push_back(
      "a replica's capacity for a model is one instance's measured rate: further instances of the "
      "config overlap host work but are not counted (conservative)");
  if (load > 0)
    assumed.push_back(
        "models share a replica's time: the replicas the peaks need are the sum over models of "
        "peak / rate, over the saturation target");

  // Resources.
  double mem_total = 0;
  int instances = 0;
  for (const ModelSizing& m : models)
    mem_total += static_cast<double>(m.memory_bytes) * m.instances, instances += m.instances;
  std::string gpu_line;
  double gpu_gib = f.gpu_memory_gib;
  if (variant == "mig" && gpu_gib == 0)
    return InvalidArgument("--variant mig: give --gpu-memory-gib, the memory of the MIG profile the pods get");
  if (gpu) {
    if (gpu_gib == 0)
      for (const GpuProduct& p : kGpus)
        if (product == p.label || product.rfind(std::string(p.label) + "-", 0) == 0) gpu_gib = p.gib;
    if (gpu_gib == 0)
      return InvalidArgument("GPU product '", product, "' is not in the built-in table: give --gpu-memory-gib");
    const double usable = 0.9 * gpu_gib * 1024 * 1024 * 1024;
    if (mem_total > usable)
      return FailedPrecondition("the models' instances need ", Fixed(mem_total / (1 << 30), 2),
                                " GiB of GPU memory, "
                                "more than 90% of the ",
                                product, "'s ", gpu_gib, " GiB: lower instance counts");
    gpu_line = StrCat(Fixed(mem_total / (1 << 30), 2), " GiB of ", gpu_gib, " GiB");
  }
  // Host memory: measured per instance for CPU pods; 2 GiB besides for the server, the mapped
  // model files and the plan cache's reads. GPU pods keep the gpu overlay's host figures unless more
  // is needed for the plans (mapped from the cache) and host copies.
  double host_bytes = 0;
  for (const ModelSizing& m : models)
    host_bytes += gpu ? static_cast<double>(m.plan_bytes) : static_cast<double>(m.memory_bytes) * m.instances;
  const double request = host_bytes + 2.0 * (1 << 30);
  const double base_request = gpu ? 16.0 * (1 << 30) : 4.0 * (1 << 30);
  const std::string mem_request = Mi(std::max(request, base_request));
  const std::string mem_limit = Mi(2 * std::max(request, base_request));
  const int cpus = gpu ? 4 : std::max(2, instances);
  assumed.push_back(StrCat("host memory request: ", gpu ? "the plans' sizes" : "measured memory x instances",
                           " + 2 GiB for the server, at least the ", variant, " overlay's ", Mi(base_request),
                           "; limit twice the request"));
  assumed.push_back(StrCat("CPU request: ", gpu ? "4 (the gpu overlay's)" : "one core per instance, at least 2"));

  // Where the overlay points: the variant's overlay, relative to --out.
  const fs::path base = f.base.empty() ? fs::path("deploy/kubernetes/overlays") / variant : fs::path(f.base);
  if (!fs::exists(base / "kustomization.yaml", ec))
    return NotFound("--base '", base.string(), "' holds no kustomization.yaml (the ", variant,
                    " overlay of deploy/kubernetes; run from the source tree or give --base)");
  fs::create_directories(f.out, ec);
  if (ec) return IoError("cannot create --out '", f.out, "': ", ec.message());
  const fs::path rel = fs::relative(fs::absolute(base), fs::absolute(f.out), ec);

  std::ostringstream k;
  k << "# Written by `sampan deploy kubernetes --repository " << f.repository << "` (sampan " << Version()
    << "): sized from the\n# bench figures of each model's serving version; sizing.json traces every number.\n"
    << "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " << rel.string()
    << "\npatches:\n  - path: deployment-patch.yaml\n  - path: hpa-patch.yaml\n";
  if (gpu)
    k << "configMapGenerator:\n  - name: sampan-accelerator\n    behavior: replace\n    literals:\n      - gpu-product="
      << product << "\n";
  std::ostringstream d;
  d << "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: sampan\nspec:\n  template:\n    spec:\n";
  if (gpu)
    d << "      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n"
      << "            nodeSelectorTerms:\n              - matchExpressions:\n                  - key: "
         "nvidia.com/gpu.product\n"
      << "                    operator: In\n                    values: [\"" << product << "\"]\n";
  d << "      containers:\n        - name: sampan\n          resources:\n            requests:\n              cpu: \""
    << cpus << "\"\n              memory: " << mem_request
    << "\n            limits:\n              memory: " << mem_limit << "\n";
  if (variant == "gpu") d << "              nvidia.com/gpu: 1\n";
  std::ostringstream h;
  const int target_milli = static_cast<int>(std::lround(target * 1000));
  h << "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: sampan\nspec:\n  minReplicas: "
    << f.min_replicas << "\n  maxReplicas: " << max_replicas
    << "\n  metrics:\n    - type: Pods\n      pods:\n        metric:\n          name: sampan_pod_saturation\n"
    << "        target:\n          type: AverageValue\n          averageValue: " << target_milli << "m\n";

  // sizing.json: every figure and where it came from.
  std::ostringstream j;
  j << "{\n  \"repository\": " << JsonQuote(f.repository) << ",\n  \"variant\": \"" << variant
    << "\",\n  \"gpu_product\": " << (gpu ? JsonQuote(product) : "null")
    << ",\n  \"gpu_memory_gib\": " << (gpu ? Fixed(gpu_gib, 1) : "null") << ",\n  \"models\": [";
  std::ostringstream md;
  md << "# Sizing of " << f.repository << " (" << variant << (gpu ? ", " + product : "") << ")\n\n"
     << "| model | version | source | backend | batch | inferences/s (one instance) | p99 ms | SLO ms | instances | "
        "memory per instance | max instances per GPU | peak rps |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < models.size(); ++i) {
    const ModelSizing& m = models[i];
    const std::string per_gpu = gpu && m.memory_bytes > 0
                                    ? std::to_string(static_cast<int64_t>(0.9 * gpu_gib * 1024 * 1024 * 1024 /
                                                                          static_cast<double>(m.memory_bytes)))
                                    : "null";
    j << (i ? "," : "") << "\n    {\"model\": " << JsonQuote(m.name) << ", \"version\": " << m.version
      << ", \"source\": " << JsonQuote(m.source) << ", \"backend\": " << JsonQuote(m.backend)
      << ", \"device\": " << JsonQuote(m.device) << ", \"batch\": " << m.batch
      << ", \"inferences_per_second\": " << m.rate << ", \"p99_ms\": " << m.p99_ms
      << ", \"memory_bytes_per_instance\": " << m.memory_bytes << ", \"memory_from\": " << JsonQuote(m.memory_from)
      << ", \"plan_bytes\": " << m.plan_bytes << ", \"instances\": " << m.instances
      << ", \"slo_ms\": " << (m.slo_ms > 0 ? Fixed(m.slo_ms, 3) : "null") << ", \"slo_from\": " << JsonQuote(m.slo_from)
      << ", \"peak_rps\": " << m.peak_rps << ", \"max_instances_per_gpu\": " << per_gpu << "}";
    md << "| " << m.name << " | " << m.version << " | `" << m.source << "` | " << m.backend << " | " << m.batch << " | "
       << Fixed(m.rate, 1) << " | " << Fixed(m.p99_ms, 3) << " | " << (m.slo_ms > 0 ? Fixed(m.slo_ms, 1) : "—") << " | "
       << m.instances << " | " << Mi(static_cast<double>(m.memory_bytes)) << " (" << m.memory_from << ") | "
       << (gpu ? per_gpu : "—") << " | " << (m.peak_rps > 0 ? Fixed(m.peak_rps, 1) : "—") << " |\n";
  }
  std::string assumed_json;
  for (const std::string& a : assumed) assumed_json += (assumed_json.empty() ? "" : ", ") + JsonQuote(a);
  j << "\n  ],\n  \"target_saturation\": " << Fixed(target, 3) << ",\n  \"target_from\": " << JsonQuote(target_from)
    << ",\n  \"load_replicas\": " << load << ",\n  \"replicas_needed_at_peak\": " << need
    << ",\n  \"min_replicas\": " << f.min_replicas << ",\n  \"max_replicas\": " << max_replicas
    << ",\n  \"instances\": " << instances
    << ",\n  \"gpu_memory_needed_bytes\": " << (gpu ? Fixed(mem_total, 0) : "null")
    << ",\n  \"requests\": {\"cpu\": " << cpus << ", \"memory\": \"" << mem_request
    << "\"},\n  \"limits\": {\"memory\": \"" << mem_limit << "\"" << (variant == "gpu" ? ", \"nvidia.com/gpu\": 1" : "")
    << "},\n  \"assumptions\": [" << assumed_json << "]\n}\n";
  md << "\nHPA: " << f.min_replicas << " to " << max_replicas << " replicas on `sampan_pod_saturation`, target "
     << Fixed(target, 3) << " (" << target_from << ")"
     << (need > 0
             ? StrCat("; the peaks need ", need, " replicas (load ", Fixed(load, 3), " replica-seconds per second)")
             : std::string())
     << ".\nPod: requests cpu " << cpus << ", memory " << mem_request << "; limit memory " << mem_limit
     << (gpu ? StrCat("; GPU memory for every instance ", gpu_line) : std::string()) << ".\n\nAssumed:\n";
  for (const std::string& a : assumed) md << "- " << a << "\n";

  const fs::path out(f.out);
  SP_RETURN_IF_ERROR(WriteFileAtomic((out / "kustomization.yaml").string(), k.str()));
  SP_RETURN_IF_ERROR(WriteFileAtomic((out / "deployment-patch.yaml").string(), d.str()));
  SP_RETURN_IF_ERROR(WriteFileAtomic((out / "hpa-patch.yaml").string(), h.str()));
  SP_RETURN_IF_ERROR(WriteFileAtomic((out / "sizing.json").string(), j.str()));
  SP_RETURN_IF_ERROR(WriteFileAtomic((out / "SIZING.md").string(), md.str()));
  std::printf("%s", md.str().c_str());
  std::printf("\nwrote %s (kubectl kustomize %s)\n", (out / "kustomization.yaml").string().c_str(), f.out.c_str());
  return Status::Ok();
}

}  // namespace

void AddDeployCommand(CLI::App& app) {
  auto* deploy = app.add_subcommand("deploy", "Write deployment manifests sized from a model repository's figures");
  deploy->require_subcommand(1);
  auto f = std::make_shared<DeployFlags>();
  auto* cmd =
      deploy->add_subcommand("kubernetes", "A kustomize overlay for the repository, sized from its bench reports");
  cmd->add_option("--repository,--model-repository", f->repository, "The model repository")->required();
  cmd->add_option("--out", f->out, "Directory to write the overlay into")->required();
  cmd->add_option("--variant", f->variant, "cpu, gpu or mig (default: gpu when the figures came from a GPU)");
  cmd->add_option("--base", f->base, "The variant's overlay to build on (default deploy/kubernetes/overlays/VARIANT)");
  cmd->add_option("--slo-p99-ms", f->slo_ms, "Latency SLO for models whose config sets no sampan.latency_slo_ms");
  cmd->add_option("--min-replicas", f->min_replicas, "The HPA's minimum (default 2)");
  cmd->add_option("--max-replicas", f->max_replicas, "The HPA's maximum (default: 10, or what the peaks need)");
  cmd->add_option("--peak-rps", f->peaks, "A model's peak request rate, MODEL=RPS (repeatable)");
  cmd->add_option("--gpu-product", f->gpu_product,
                  "nvidia.com/gpu.product of the nodes (default: the GPU the figures came from)");
  cmd->add_option("--gpu-memory-gib", f->gpu_memory_gib, "GPU memory when the product is not in the built-in table");
  cmd->add_option("--target-saturation", f->target, "The HPA's saturation target (default: from the SLOs)");
  AddDeployHaproxyCommand(deploy);
  cmd->callback([f] {
    Status st = Deploy(*f);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      ExitCode() = 1;
    }
  });
}

}  // namespace sampan::cli
