#include "server/core/model_loader.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "base/file_util.h"
#include "base/report_util.h"
#include "builder/builder.h"
#include "onnx/importer.h"
#include "plan/plan.h"
#include "plan/signature.h"
#include "server/core/log.h"
#include "server/repository/repository.h"

namespace sampan::server {

namespace fs = std::filesystem;
namespace sc = ::sampan::serverconfig;

namespace {

std::vector<ModelTensorInfo> TensorInfos(const std::vector<ir::Value*>& values) {
  std::vector<ModelTensorInfo> out;
  for (const ir::Value* v : values) {
    if (v->is_constant()) continue;
    ModelTensorInfo t;
    t.name = v->name();
    t.dtype = v->type.dtype;
    if (v->type.dims)
      for (const auto& d : *v->type.dims) t.dims.push_back(d.known() ? d.value : -1);
    out.push_back(std::move(t));
  }
  return out;
}

std::string ProfilesText(const std::vector<plan::Profile>& profiles) {
  std::string s;
  for (const auto& p : profiles) {
    s += "{";
    for (const auto& [name, r] : p)
      s += StrCat(name, ":", ShapeToString(r.min), ShapeToString(r.opt), ShapeToString(r.max), ";");
    s += "}";
  }
  return s;
}

// Profiles from the config's sampan section; without one, a batching model whose
// other dimensions are all fixed gets a profile over the batch dimension
// 1..max_batch_size (so backends can plan for the largest batch).
std::vector<plan::Profile> ProfilesFor(const ModelConfig& c) {
  std::vector<plan::Profile> out;
  if (c.sampan().profiles_size() > 0) {
    plan::Profile p;
    for (const auto& sp : c.sampan().profiles())
      p[sp.input()] = plan::ShapeRange{Shape(sp.min().begin(), sp.min().end()), Shape(sp.opt().begin(), sp.opt().end()),
                                       Shape(sp.max().begin(), sp.max().end())};
    out.push_back(std::move(p));
    return out;
  }
  if (c.max_batch_size() <= 0) return out;
  plan::Profile p;
  auto add = [&](const std::string& name, const std::vector<int64_t>& dims) {
    if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; })) return false;
    Shape lo = dims, hi = dims;
    lo.insert(lo.begin(), 1);
    hi.insert(hi.begin(), c.max_batch_size());
    p[name] = plan::ShapeRange{lo, hi, hi};
    return true;
  };
  for (const auto& in : c.input()) {
    std::vector<int64_t> dims = in.has_reshape()
                                    ? std::vector<int64_t>(in.reshape().shape().begin(), in.reshape().shape().end())
                                    : std::vector<int64_t>(in.dims().begin(), in.dims().end());
    if (!add(in.name(), dims)) return {};
  }
  // A sequence model's control inputs ([batch, 1]) and state inputs ([batch, state dims]).
  if (c.has_sequence_batching()) {
    for (const auto& ci : c.sequence_batching().control_input()) add(ci.name(), {1});
    for (const auto& s : c.sequence_batching().state())
      if (!add(s.input_name(), std::vector<int64_t>(s.dims().begin(), s.dims().end()))) return {};
  }
  out.push_back(std::move(p));
  return out;
}

struct Placement {
  std::string backend;
  int device = 0;
  int count = 1;
  int group = 0;         //!< index into config.instance_group
  std::string plan_key;  //!< backend + device fingerprint: placements with equal keys share a plan
};

// The devices an instance group places `count` instances on.
Result<std::vector<int>> GroupDevices(const sc::ModelInstanceGroup& g, const std::string& backend_name,
                                      const std::string& where) {
  if (g.kind() == sc::ModelInstanceGroup::KIND_CPU) return std::vector<int>{0};
  const runtime::Backend* backend = runtime::FindBackend(backend_name);
  const int n = backend ? runtime::DeviceCount(*backend) : 1;
  if (n < 1) return Unavailable(where, ": backend '", backend_name, "' sees no device");
  std::vector<int> devices;
  if (g.gpus().empty()) {
    for (int d = 0; d < n; ++d) devices.push_back(d);
    return devices;
  }
  for (int d : g.gpus()) {
    if (d < 0 || d >= n)
      return InvalidArgument(where, ": GPU ", d, " does not exist: backend '", backend_name, "' sees ", n, " device",
                             n == 1 ? "" : "s", " (0..", n - 1, ")");
    devices.push_back(d);
  }
  return devices;
}

plan::Fingerprint DeviceFingerprintOf(const std::string& backend_name, int device) {
  const runtime::Backend* b = runtime::FindBackend(backend_name);
  if (b && b->fingerprint) return b->fingerprint(device);
  plan::Fingerprint f;
  f.backend = backend_name;
  return f;
}

// Every field: devices with equal text run the same plan.
std::string MachineText(const plan::Fingerprint& f) {
  return StrCat(f.backend, "|", f.isa, "|", f.gpu_name, "|", f.compute_capability, "|", f.cuda_version, "|",
                f.cudnn_version, "|", f.cublas_version);
}

std::string DeviceTypeText(const plan::Fingerprint& f) {
  return f.compute_capability.empty() ? f.gpu_name : StrCat(f.gpu_name, ", compute capability ", f.compute_capability);
}

// "model.cuda.NVIDIA_H200_sm90": one cache file per backend and device type
// (library versions live in the key, so an upgrade rebuilds in place).
std::string CacheStem(const std::string& backend, const plan::Fingerprint& f) {
  std::string stem = "model." + backend;
  if (f.gpu_name.empty()) return stem;
  std::string type = "." + f.gpu_name + (f.compute_capability.empty() ? "" : "_sm" + f.compute_capability);
  for (char& c : type)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  type.erase(std::remove(type.begin() + 1, type.end(), '.'), type.end());
  return stem + type;
}

// Triton's optimization.priority: the priority of the instances' CUDA streams.
runtime::StreamPriority StreamPriorityOf(const ModelConfig& config) {
  if (!config.has_optimization()) return runtime::StreamPriority::kDefault;
  switch (config.optimization().priority()) {
    case sc::ModelOptimizationPolicy::PRIORITY_MAX:
      return runtime::StreamPriority::kHigh;
    case sc::ModelOptimizationPolicy::PRIORITY_MIN:
      return runtime::StreamPriority::kLow;
    default:
      return runtime::StreamPriority::kDefault;
  }
}

}  // namespace

Result<std::string> ChooseBackend(const ModelConfig& config, sc::ModelInstanceGroup::Kind kind,
                                  const std::string& default_backend) {
  auto usable = [](const std::string& name) {
    const runtime::Backend* b = runtime::FindBackend(name);
    return b && (!b->available || b->available().ok());
  };
  std::string name;
  if (!config.sampan().backend().empty()) {
    name = config.sampan().backend();
  } else if (kind == sc::ModelInstanceGroup::KIND_GPU) {
    name = "cuda";
  } else if (kind == sc::ModelInstanceGroup::KIND_CPU) {
    name = runtime::FindBackend("cpu") ? "cpu" : "reference";
  } else if (!default_backend.empty()) {
    name = default_backend;
  } else {
    name = usable("cuda") ? "cuda" : runtime::FindBackend("cpu") ? "cpu" : "reference";
  }
  const runtime::Backend* b = runtime::FindBackend(name);
  if (!b) {
    std::string names;
    for (const auto& n : runtime::BackendNames()) names += (names.empty() ? "" : ", ") + n;
    return Unsupported("backend '", name, "' (for ", sc::ModelInstanceGroup::Kind_Name(kind),
                       ") is not in this build (available: ", names, ")");
  }
  if (b->available) {
    Status st = b->available();
    if (!st.ok()) return st.WithContext(StrCat("backend '", name, "'"));
  }
  return name;
}

Result<LoadedModel> LoadModelFiles(const std::string& model_dir, int64_t version, ModelConfig config,
                                   bool has_config_file, const VersionLoadOptions& options) {
  const std::string vdir = (fs::path(model_dir) / std::to_string(version)).string();
  const std::string config_file = (fs::path(model_dir) / "config.pbtxt").string();
  SP_ASSIGN_OR_RETURN(std::string file, FindModelFile(vdir, config));
  const bool is_plan = plan::LooksLikePlan(file);
  auto log = [&](const std::string& line) {
    LogVerbose(1, "model '", config.name(), "' version ", version, ": ", line);
  };

  LoadedModel out;
  // The source: a plan as it is, or the ONNX graph (imported once; built per backend).
  std::optional<plan::Plan> given_plan;
  std::string onnx_bytes;
  std::unique_ptr<ir::Graph> graph;
  const ir::Graph* io_graph = nullptr;
  if (is_plan) {
    if (options.plan_trust) SP_RETURN_IF_ERROR(plan::VerifyPlanFile(file, *options.plan_trust));
    SP_ASSIGN_OR_RETURN(plan::Plan p, plan::ReadPlan(file));
    given_plan = std::move(p);
    io_graph = given_plan->graph.get();
  } else {
    SP_ASSIGN_OR_RETURN(onnx_bytes, ReadFileBytes(file));
    auto g = onnx_import::ImportModelBytes(onnx_bytes, vdir);
    if (!g.ok()) return g.status().WithContext(file);
    graph = std::move(g).value();
    // Raw-image inputs change the model's interface, so they apply before the
    // config is compared with (or completed from) the model's inputs.
    std::vector<builder::InputFormat> formats;
    for (const auto& im : config.sampan().image_input())
      formats.push_back({im.input(), std::vector<float>(im.mean().begin(), im.mean().end()),
                         std::vector<float>(im.std().begin(), im.std().end())});
    Status applied = builder::ApplyInputFormats(*graph, formats);
    if (!applied.ok()) return applied.WithContext(StrCat(config_file, ": sampan.image_input"));
    io_graph = graph.get();
  }
  SP_RETURN_IF_ERROR(AutoCompleteConfig(&config, has_config_file, TensorInfos(io_graph->inputs()),
                                        TensorInfos(io_graph->outputs()),
                                        has_config_file ? config_file : model_dir + " (no config.pbtxt)"));
  out.platform = !config.platform().empty() ? config.platform() : is_plan ? "sampan_plan" : "onnxruntime_onnx";
  if (config.platform().empty() && config.backend().empty()) config.set_platform(out.platform);
  for (const auto& co : config.output()) {
    int index = -1;
    for (size_t i = 0; i < io_graph->outputs().size(); ++i)
      if (io_graph->outputs()[i]->name() == co.name()) index = static_cast<int>(i);
    if (index < 0) return Internal("output '", co.name(), "' vanished from the model");
    out.output_index.push_back(index);
  }

  // Placements: `count` instances on each device of the group: the listed GPUs,
  // every device the backend sees when none are listed, one host for KIND_CPU.
  std::vector<Placement> placements;
  if (config.instance_group().empty()) config.add_instance_group()->set_count(1);
  for (int gi = 0; gi < config.instance_group_size(); ++gi) {
    const auto& g = config.instance_group(gi);
    const std::string where = StrCat(config_file, ": instance_group[", gi, "]");
    auto backend = ChooseBackend(config, g.kind(), options.default_backend);
    if (!backend.ok()) return backend.status().WithContext(where);
    SP_ASSIGN_OR_RETURN(std::vector<int> devices, GroupDevices(g, *backend, where));
    for (int d : devices) placements.push_back({*backend, d, std::max(1, g.count()), gi, {}});
  }
  int instances = 0;
  for (const auto& p : placements) instances += p.count;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // CPU threads per instance: the config's intra_op_thread_count (Triton's onnxruntime backend
  // parameter; validated in model_config.cpp), else `serve --threads-per-instance`, else the
  // cores shared out between the instances.
  int threads = options.threads_per_instance > 0 ? options.threads_per_instance
                                                 : std::max(1, static_cast<int>(cores) / std::max(1, instances));
  if (auto it = config.parameters().find("intra_op_thread_count"); it != config.parameters().end())
    threads = std::atoi(it->second.string_value().c_str());

  // One plan per (backend, device type): identical GPUs share one build and one
  // cache file; each other type gets its own (tuned on its first device).
  std::map<std::string, plan::Plan> plans;  // by Placement::plan_key
  builder::BuildConfig bc;
  std::string calibration_key;  // what the plan cache must also match for an INT8 build
  if (config.sampan().precision() == "int8" || config.sampan().precision() == "fp8") {
    // sampan build --int8 (the other layers stay fp32) or --fp8 (MatMul/Gemm in FP8, the others
    // fp16). Paths are inside the model's directory (the validator refused anything else); the
    // calibration cache lives with the plan cache.
    const auto& s = config.sampan();
    const fs::path mdir(model_dir);
    bc.calibration.int8 = s.precision() == "int8";
    bc.calibration.fp8 = s.precision() == "fp8";
    if (bc.calibration.fp8) {
      bc.precision = builder::Precision::kFP16;
      bc.calibration.method = builder::CalibMethod::kMinMax;
    }
    bc.calibration.data_dir = (mdir / s.calibration_data()).string();
    if (!s.calibration_method().empty())
      SP_RETURN_IF_ERROR(builder::ParseCalibMethod(s.calibration_method(), &bc.calibration).WithContext(config_file));
    if (!s.accuracy_data().empty()) {
      bc.calibration.accuracy_dir = (mdir / s.accuracy_data()).string();
      bc.calibration.accuracy_bound = s.accuracy_bound();
      if (!s.accuracy_metric().empty()) bc.calibration.accuracy_metric = s.accuracy_metric();
    }
    // The samples' names and bytes: new data rebuilds the plan.
    for (const std::string& dir : {bc.calibration.data_dir, bc.calibration.accuracy_dir}) {
      if (dir.empty()) continue;
      std::vector<std::string> files;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.is_regular_file()) files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) {
        auto bytes = ReadFileBytes(f);
        if (bytes.ok())
          calibration_key +=
              StrCat(fs::path(f).filename().string(), " ", plan::Hash64(bytes->data(), bytes->size()), "\n");
      }
    }
  } else if (!config.sampan().precision().empty()) {
    SP_ASSIGN_OR_RETURN(bc.precision, builder::ParsePrecision(config.sampan().precision()));
  }
  bc.profiles = ProfilesFor(config);
  bc.source_model = fs::path(file).filename().string();
  for (auto& pl : placements) {
    const plan::Fingerprint machine = DeviceFingerprintOf(pl.backend, pl.device);
    pl.plan_key = StrCat(pl.backend, "\n", MachineText(machine));
    const std::string& plan_key = pl.plan_key;
    if (plans.count(plan_key)) continue;
    if (given_plan) {
      plans.emplace(plan_key, *given_plan);
      continue;
    }
    bc.backend = pl.backend;
    bc.device = pl.device;
    // The machine is part of the key: a plan tuned for another device type is rebuilt, not loaded.
    const std::string sampan_section = config.sampan().SerializeAsString();  // image inputs, backend...
    const std::string key =
        StrCat("sampan plan cache 2\nbuilder sampan ", Version(), "\nmachine ", MachineText(machine), "\nonnx ",
               plan::Hash64(onnx_bytes.data(), onnx_bytes.size()), " ", onnx_bytes.size(), "\nbackend ", pl.backend,
               "\nprecision ", builder::PrecisionName(bc.precision), "\nprofiles ", ProfilesText(bc.profiles),
               "\nsampan section ", plan::Hash64(sampan_section.data(), sampan_section.size()), "\n",
               calibration_key.empty() ? "" : "int8 samples\n", calibration_key);
    const fs::path cache_dir = fs::path(vdir) / ".sampan";
    const std::string stem = CacheStem(pl.backend, machine);
    const std::string plan_path = (cache_dir / (stem + ".plan")).string();
    const std::string key_path = (cache_dir / (stem + ".key")).string();
    auto cached_key = ReadFileBytes(key_path);
    if (cached_key.ok() && *cached_key == key) {
      auto p = plan::ReadPlan(plan_path);
      if (p.ok()) {
        log("using cached plan " + plan_path);
        plans.emplace(plan_key, std::move(p).value());
        continue;
      }
      log("cached plan unusable, rebuilding: " + p.status().message());
    }
    if (!graph) {  // consumed by an earlier build
      auto g = onnx_import::ImportModelBytes(onnx_bytes, vdir);
      if (!g.ok()) return g.status().WithContext(file);
      graph = std::move(g).value();
      std::vector<builder::InputFormat> formats;
      for (const auto& im : config.sampan().image_input())
        formats.push_back({im.input(), std::vector<float>(im.mean().begin(), im.mean().end()),
                           std::vector<float>(im.std().begin(), im.std().end())});
      SP_RETURN_IF_ERROR(builder::ApplyInputFormats(*graph, formats));
    }
    const std::string target =
        StrCat("backend '", pl.backend, "'",
               machine.gpu_name.empty() ? "" : StrCat(" (", DeviceTypeText(machine), ", device ", pl.device, ")"));
    log("building plan for " + target);
    auto built = builder::Build(std::move(graph), bc, nullptr);
    if (!built.ok()) return built.status().WithContext(StrCat(file, ": building for ", target));
    // The cache is an optimisation: a read-only repository only costs a rebuild next time.
    std::error_code ec;
    fs::create_directories(cache_dir, ec);
    auto bytes = plan::SerializePlan(*built);
    Status written = ec            ? IoError("cannot create ", cache_dir.string(), ": ", ec.message())
                     : !bytes.ok() ? bytes.status()
                                   : WriteFileAtomic(plan_path, *bytes);
    if (written.ok()) written = WriteFileAtomic(key_path, key);
    if (!written.ok())
      LogWarning("model '", config.name(), "' version ", version, ": plan not cached: ", written.message());
    plans.emplace(plan_key, std::move(built).value());
  }

  // One engine per (backend, device); instances share it.
  std::map<std::pair<std::string, int>, size_t> engine_of;
  for (const auto& pl : placements) {
    auto key = std::make_pair(pl.backend, pl.device);
    if (!engine_of.count(key)) {
      runtime::EngineOptions eo;
      eo.device = pl.device;
      eo.threads = threads;
      // CUDA graphs unless the config turns them off (model_config.proto: on by default).
      eo.use_cuda_graph =
          !(config.has_optimization() && config.optimization().has_cuda()) || config.optimization().cuda().graphs();
      eo.stream_priority = StreamPriorityOf(config);
      auto engine = runtime::Engine::Create(plans.at(pl.plan_key), eo);
      if (!engine.ok())
        return engine.status().WithContext(StrCat(file, ": backend '", pl.backend, "' device ", pl.device));
      engine_of[key] = out.engines.size();
      out.engines.push_back(std::move(engine).value());
    }
    for (int i = 0; i < pl.count; ++i) {
      out.instance_engine.push_back(engine_of[key]);
      out.instance_group.push_back(pl.group);
    }
  }
  log(StrCat("loaded: ", out.instance_engine.size(), " instance(s), ", out.engines.size(), " engine(s), ", plans.size(),
             " plan(s), backend ", placements.front().backend, ", max_batch_size ", config.max_batch_size(),
             StreamPriorityOf(config) == runtime::StreamPriority::kDefault
                 ? ""
                 : StrCat(", stream priority ", runtime::StreamPriorityName(StreamPriorityOf(config)))));
  out.config = std::move(config);
  return out;
}

}  // namespace sampan::server
