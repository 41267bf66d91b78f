// `sampan publish`: puts a new version of a model into a model repository the way a release
// pipeline needs it. It stages the version in a hidden directory beside the others, builds the
// plans the server will load (the loader's own plan cache, so a serving server picks them up
// without building), runs the accuracy gate against the version that serves now, benchmarks
// the new one, writes report.json (accuracy, bench, SHA-256 of every file), and only then
// renames the directory into place: a polling server sees the whole version or nothing. With
// --canary, report.json asks the servers to run it as a canary release (server/core/canary.h).
// `--rollback` moves the newest versions out of the repository, so the previous one serves.
#include <fcntl.h>
#include <onnx/onnx_pb.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <set>

#include "base/file_util.h"
#include "base/report_util.h"
#include "builder/accuracy_gate.h"
#include "builder/builder.h"
#include "builder/calibrate.h"
#include "cli/commands.h"
#include "runtime/engine.h"
#include "server/core/canary.h"
#include "server/core/model_loader.h"
#include "server/repository/model_config.h"
#include "server/repository/repository.h"

namespace sampan::cli {

namespace fs = std::filesystem;

namespace {

struct PublishFlags {
  std::string onnx, repository, model, config;
  std::string accuracy_data, accuracy_metric = "cosine";
  double accuracy_bound = std::nan("");
  double canary = 0;
  double canary_window = 60;
  int64_t canary_min_requests = 20;
  double canary_max_error_rate = 0.01;
  double canary_max_p99_ratio = 1.5;
  double canary_p99_slack_ms = 1.0;
  double bench_secs = 2;
  std::string backend;
  int threads = 0;
  bool rollback = false;
  int64_t rollback_to = 0;
};

std::string Sha256Hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) out += kHex[md[i] >> 4], out += kHex[md[i] & 15];
  return out;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// One publish or rollback per model at a time: an flock on <repository>/.publish-<model>.lock
// (beside the model, so a model that does not exist yet can be locked too).
class ModelLock {
 public:
  static Result<ModelLock> Take(const fs::path& repository, const std::string& model) {
    const std::string path = (repository / StrCat(".publish-", model, ".lock")).string();
    const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) return IoError("cannot open ", path);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      std::fprintf(stderr, "publish: waiting for another publish of this model to finish (%s)\n", path.c_str());
      if (::flock(fd, LOCK_EX) != 0) {
        ::close(fd);
        return IoError("cannot lock ", path);
      }
    }
    return ModelLock(fd);
  }
  ModelLock(ModelLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  ~ModelLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  explicit ModelLock(int fd) : fd_(fd) {}
  int fd_;
};

// Removes the staging directory unless released (the version was renamed into place).
struct Staging {
  fs::path dir;
  ~Staging() {
    if (dir.empty()) return;
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// The external data files an ONNX model names (relative to the model file), so the version
// directory gets them too.
void ExternalFiles(const onnx::GraphProto& g, std::set<std::string>* out) {
  auto add = [&](const onnx::TensorProto& t) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) return;
    for (const auto& kv : t.external_data())
      if (kv.key() == "location") out->insert(kv.value());
  };
  for (const auto& t : g.initializer()) add(t);
  for (const auto& n : g.node())
    for (const auto& a : n.attribute()) {
      if (a.has_t()) add(a.t());
      if (a.has_g()) ExternalFiles(a.g(), out);
      for (const auto& sub : a.graphs()) ExternalFiles(sub, out);
    }
}

Status ValidateName(const std::string& model) {
  if (model.empty() || model[0] == '.' || model.find('/') != std::string::npos)
    return InvalidArgument("--model '", model, "' is not a model directory name (no '/', no leading '.')");
  return Status::Ok();
}

// Runs every sample through the first engine of `m` (outputs in graph order).
Result<std::vector<std::vector<Tensor>>> RunSamples(const server::LoadedModel& m,
                                                    const std::vector<std::map<std::string, Tensor>>& samples) {
  SP_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Context> ctx, m.engines.front()->CreateContext());
  std::vector<std::vector<Tensor>> out;
  for (const auto& s : samples) {
    SP_ASSIGN_OR_RETURN(std::vector<Tensor> o, ctx->Run(s));
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<std::string> OutputNames(const server::LoadedModel& m) {
  std::vector<std::string> names;
  for (const ir::Value* v : m.engines.front()->graph().outputs()) names.push_back(v->name());
  return names;
}

struct Bench {
  int64_t iterations = 0;
  int64_t batch = 1;
  double p50_ms = 0, p99_ms = 0, throughput = 0;
  int64_t host_bytes = -1;    //!< resident memory one engine and context added (-1: not measured)
  int64_t device_bytes = -1;  //!< device memory likewise (device backends)
};

// What this process holds now: resident host memory, and for a device backend the memory in use
// on the engine's device (-1 where not measurable).
std::pair<int64_t, int64_t> MemoryInUse(const std::string& backend, int device) {
  int64_t host = -1, dev = -1;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    long long pages = 0, resident = 0;
    if (std::fscanf(f, "%lld %lld", &pages, &resident) == 2) host = resident * ::sysconf(_SC_PAGESIZE);
    std::fclose(f);
  }
  const runtime::Backend* b = runtime::FindBackend(backend);
  if (b && b->device_memory_used) {
    auto used = b->device_memory_used(device);
    if (used.ok()) dev = static_cast<int64_t>(*used);
  }
  return {host, dev};
}

// Times runs of `feed` on one context for about `secs` seconds (at least 10 runs). `before` is
// MemoryInUse from before the engine was loaded: what the engine and this context added is
// measured after the warm-up run.
Result<Bench> RunBench(const server::LoadedModel& m, const std::map<std::string, Tensor>& feed, double secs,
                       int64_t batch, std::pair<int64_t, int64_t> before) {
  SP_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Context> ctx, m.engines.front()->CreateContext());
  SP_RETURN_IF_ERROR(ctx->Run(feed).status());  // warm-up
  const runtime::Engine& e = *m.engines.front();
  const auto after = MemoryInUse(e.plan().fingerprint.backend, e.options().device);
  Bench b;
  if (before.first >= 0 && after.first >= 0) b.host_bytes = std::max<int64_t>(0, after.first - before.first);
  if (before.second >= 0 && after.second >= 0) b.device_bytes = std::max<int64_t>(0, after.second - before.second);
  std::vector<double> ms;
  const auto start = std::chrono::steady_clock::now();
  while (ms.size() < 10 || std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < secs) {
    const auto t0 = std::chrono::steady_clock::now();
    SP_RETURN_IF_ERROR(ctx->Run(feed).status());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (ms.size() >= 100000) break;
  }
  double total = 0;
  for (double v : ms) total += v;
  b.iterations = static_cast<int64_t>(ms.size());
  b.batch = batch;
  b.p50_ms = NearestRankPercentile(ms, 50);
  b.p99_ms = NearestRankPercentile(ms, 99);
  b.throughput = total > 0 ? 1000.0 * static_cast<double>(batch) * static_cast<double>(ms.size()) / total : 0;
  return b;
}

// A feed for the bench when no samples were given: every input filled with small values at
// its profile's opt shape (or the declared shape, variable dims 1).
Result<std::map<std::string, Tensor>> SyntheticFeed(const server::LoadedModel& m) {
  const runtime::Engine& e = *m.engines.front();
  std::map<std::string, Tensor> feed;
  std::mt19937 rng(1);
  for (const ir::Value* in : e.graph().inputs()) {
    Shape shape;
    if (!e.plan().profiles.empty() && e.plan().profiles.front().count(in->name())) {
      shape = e.plan().profiles.front().at(in->name()).opt;
    } else if (in->type.dims) {
      for (const auto& d : *in->type.dims) shape.push_back(d.known() ? d.value : 1);
    }
    Tensor t = Tensor::Alloc(in->type.dtype, shape);
    if (in->type.dtype == DType::kFloat32) {
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = u(rng);
    } else if (in->type.dtype == DType::kString) {
      return Unsupported("input '", in->name(), "' is a string tensor: give samples with --accuracyData to bench it");
    } else {
      std::fill_n(static_cast<char*>(t.mutable_raw()), t.nbytes(), 0);
    }
    feed[in->name()] = std::move(t);
  }
  return feed;
}

// Staging directories of publishes whose process is gone (killed, crashed): removed under the lock.
void RemoveStaleStaging(const fs::path& repository, const std::string& model, const fs::path& model_dir) {
  auto stale = [](const std::string& name, const std::string& prefix) {
    if (name.rfind(prefix, 0) != 0) return false;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return false;
    return ::kill(static_cast<pid_t>(std::stoll(pid)), 0) != 0 && errno == ESRCH;
  };
  std::error_code ec;
  for (const auto& [dir, prefix] :
       {std::pair{repository, StrCat(".publish-", model, "-")}, std::pair{model_dir, std::string(".publish-")}}) {
    if (!fs::is_directory(dir, ec)) continue;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_directory(ec) && stale(e.path().filename().string(), prefix)) {
        std::fprintf(stderr, "publish: removing %s, left by a publish that did not finish\n", e.path().c_str());
        fs::remove_all(e.path(), ec);
      }
  }
}

// The highest version number --rollback moved to <model>/.rolled-back/ (0: none).
int64_t HighestRolledBack(const fs::path& model_dir) {
  int64_t highest = 0;
  std::error_code ec;
  if (!fs::is_directory(model_dir / ".rolled-back", ec)) return 0;
  for (const auto& e : fs::directory_iterator(model_dir / ".rolled-back", ec)) {
    const std::string name = e.path().filename().string();
    const size_t digits = name.find_first_not_of("0123456789");
    if (digits == 0 || name.empty()) continue;
    try {
      highest = std::max<int64_t>(highest, std::stoll(name.substr(0, digits)));
    } catch (...) {
    }
  }
  return highest;
}

Status Rollback(const PublishFlags& f) {
  const fs::path model_dir = fs::path(f.repository) / f.model;
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    return NotFound("model '", f.model, "' is not in repository '", f.repository, "'");
  SP_ASSIGN_OR_RETURN(ModelLock lock, ModelLock::Take(f.repository, f.model));
  const std::vector<int64_t> versions = server::ListVersions(model_dir.string());
  if (versions.size() < 2 && f.rollback_to == 0)
    return FailedPrecondition(model_dir.string(), ": nothing to roll back to (versions: ",
                              versions.empty() ? std::string("none") : std::to_string(versions.front()), ")");
  const int64_t target = f.rollback_to > 0 ? f.rollback_to : versions[versions.size() - 2];
  if (std::find(versions.begin(), versions.end(), target) == versions.end())
    return NotFound(
        model_dir.string(), ": version ", target, " is not there (versions: ",
        [&] {
          std::string s;
          for (int64_t v : versions) s += (s.empty() ? "" : ", ") + std::to_string(v);
          return s;
        }(),
        ")");
  if (target == versions.back()) return FailedPrecondition("version ", target, " is the newest already");
  // Kept, not deleted: <model>/.rolled-back/<version>-<time> (hidden, so servers ignore it).
  const fs::path keep = model_dir / ".rolled-back";
  fs::create_directories(keep, ec);
  if (ec) return IoError("cannot create ", keep.string(), ": ", ec.message());
  const std::string stamp = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  std::string moved;
  for (auto it = versions.rbegin(); it != versions.rend() && *it > target; ++it) {
    const fs::path from = model_dir / std::to_string(*it);
    const fs::path to = keep / StrCat(*it, "-", stamp);
    fs::rename(from, to, ec);
    if (ec) return IoError("cannot move ", from.string(), " to ", to.string(), ": ", ec.message());
    moved += (moved.empty() ? "" : ", ") + std::to_string(*it);
  }
  std::printf("rolled back model '%s': version%s %s moved to %s; version %lld is the newest\n", f.model.c_str(),
              moved.find(',') == std::string::npos ? "" : "s", moved.c_str(), keep.string().c_str(),
              static_cast<long long>(target));
  return Status::Ok();
}

Status Publish(const PublishFlags& f) {
  const fs::path model_dir = fs::path(f.repository) / f.model;
  std::error_code ec;
  if (f.onnx.empty()) return InvalidArgument("--onnx is required (or --rollback)");
  if (!fs::is_regular_file(f.onnx, ec)) return NotFound("--onnx '", f.onnx, "' is not a file");
  const bool gate = !f.accuracy_data.empty();
  if (gate != (f.accuracy_bound == f.accuracy_bound))
    return InvalidArgument("--accuracyData and --accuracyBound go together");
  if (f.accuracy_metric != "cosine" && f.accuracy_metric != "rel_l2" && f.accuracy_metric != "top1")
    return InvalidArgument("--accuracyMetric '", f.accuracy_metric, "' is not one of cosine, rel_l2, top1");
  for (const auto& [name, v] :
       {std::pair{"--canary", f.canary}, std::pair{"--canaryWindowSecs", f.canary_window},
        std::pair{"--canaryMaxErrorRateIncrease", f.canary_max_error_rate},
        std::pair{"--canaryMaxP99Ratio", f.canary_max_p99_ratio},
        std::pair{"--canaryP99SlackMs", f.canary_p99_slack_ms}, std::pair{"--benchSecs", f.bench_secs}})
    if (!std::isfinite(v)) return InvalidArgument(name, " must be a finite number");
  if (gate && !std::isfinite(f.accuracy_bound)) return InvalidArgument("--accuracyBound must be a finite number");
  if (f.canary < 0 || f.canary >= 100)
    return InvalidArgument("--canary ", f.canary, ": a percentage in (0, 100) (0: no canary)");
  if (!(f.canary_window > 0)) return InvalidArgument("--canaryWindowSecs must be > 0");
  if (f.canary_min_requests < 1) return InvalidArgument("--canaryMinRequests must be >= 1");
  if (!(f.canary_max_error_rate >= 0 && f.canary_max_error_rate <= 1))
    return InvalidArgument("--canaryMaxErrorRateIncrease must be in [0, 1]");
  if (!(f.canary_max_p99_ratio >= 1)) return InvalidArgument("--canaryMaxP99Ratio must be >= 1");
  if (!(f.canary_p99_slack_ms >= 0 && f.canary_p99_slack_ms <= 1.0e9))
    return InvalidArgument("--canaryP99SlackMs must be in [0, 1e9]");
  if (!(f.bench_secs >= 0)) return InvalidArgument("--benchSecs must be >= 0");
  if (!fs::is_directory(f.repository, ec)) return NotFound("--repository '", f.repository, "' is not a directory");

  // The config: --config (validated, and written as the model's config.pbtxt on success), or
  // the model's own, or none (completed from the model, as the server does).
  std::string config_text;
  if (!f.config.empty()) {
    SP_ASSIGN_OR_RETURN(config_text, ReadFileBytes(f.config));
    SP_RETURN_IF_ERROR(server::ParseModelConfig(config_text, f.config, f.model).status());
  }
  SP_ASSIGN_OR_RETURN(ModelLock lock, ModelLock::Take(f.repository, f.model));
  const bool new_model = !fs::exists(model_dir, ec);
  if (new_model && f.canary > 0)
    return FailedPrecondition("--canary needs a version that serves now to compare with; model '", f.model,
                              "' has none (publish the first version without --canary)");
  RemoveStaleStaging(f.repository, f.model, model_dir);

  // The version that serves now: the newest one a canary did not roll back. One still being
  // judged must be decided first: a new release on top of it would serve it unjudged.
  const std::vector<int64_t> versions = server::ListVersions(model_dir.string());
  const int64_t current = server::NewestNotRolledBack(model_dir.string());
  if (current > 0) {
    auto policy = server::ReadCanaryPolicy((model_dir / std::to_string(current)).string(), current);
    auto decided = server::ReadCanaryDecision((model_dir / std::to_string(current)).string());
    if (policy.ok() && *policy && decided.ok() && !*decided)
      return FailedPrecondition("model '", f.model, "' version ", current, " is a canary still being judged (no ",
                                "decision yet): wait for its verdict, or move it out with --rollback");
  }
  // Numbers are never reused: versions moved out by --rollback count too, so a decision or a cached
  // plan of an old version never meets a new one.
  const int64_t next = std::max(versions.empty() ? 0 : versions.back(), HighestRolledBack(model_dir)) + 1;
  if (f.canary > 0 && current == 0)
    return FailedPrecondition("--canary needs a version that serves now to compare with; model '", f.model,
                              "' has none (publish the first version without --canary)");

  // Stage in a hidden directory servers ignore: for a new model the whole model directory
  // (<repository>/.publish-<model>-<pid>/, renamed into place at the end, so servers never see a
  // model without a version), else <model>/.publish-<pid>/ holding the version directory.
  Staging staging;
  staging.dir = new_model ? fs::path(f.repository) / StrCat(".publish-", f.model, "-", ::getpid())
                          : model_dir / StrCat(".publish-", ::getpid());
  fs::remove_all(staging.dir, ec);
  const fs::path vdir = staging.dir / std::to_string(next);
  fs::create_directories(vdir, ec);
  if (ec) return IoError("cannot create ", vdir.string(), ": ", ec.message());
  bool has_file = false;
  std::string stage_config;
  if (!config_text.empty()) {
    SP_RETURN_IF_ERROR(WriteFileAtomic((staging.dir / "config.pbtxt").string(), config_text));
  } else if (fs::is_regular_file(model_dir / "config.pbtxt", ec)) {
    fs::copy_file(model_dir / "config.pbtxt", staging.dir / "config.pbtxt", ec);
    if (ec) return IoError("cannot copy ", (model_dir / "config.pbtxt").string(), ": ", ec.message());
  }
  SP_ASSIGN_OR_RETURN(server::ModelConfig config, server::ReadModelConfig(staging.dir.string(), f.model, &has_file));
  const std::string model_file =
      config.default_model_filename().empty() ? "model.onnx" : config.default_model_filename();
  SP_ASSIGN_OR_RETURN(std::string onnx_bytes, ReadFileBytes(f.onnx));
  {
    onnx::ModelProto proto;
    if (!proto.ParseFromString(onnx_bytes)) return InvalidArgument("--onnx '", f.onnx, "' is not an ONNX model");
    std::set<std::string> external;
    ExternalFiles(proto.graph(), &external);
    for (const std::string& rel : external) {
      if (fs::path(rel).is_absolute() || rel.find("..") != std::string::npos)
        return InvalidArgument("--onnx '", f.onnx, "': external data location '", rel,
                               "' leaves the model's directory");
      const fs::path from = fs::path(f.onnx).parent_path() / rel;
      fs::create_directories((vdir / rel).parent_path(), ec);
      fs::copy_file(from, vdir / rel, ec);
      if (ec)
        return IoError("--onnx '", f.onnx, "': cannot copy its external data ", from.string(), ": ", ec.message());
    }
  }
  SP_RETURN_IF_ERROR(WriteFileAtomic((vdir / model_file).string(), onnx_bytes));

  // Build as the server will (its loader, its plan cache inside the version directory).
  server::VersionLoadOptions vo;
  vo.default_backend = f.backend;
  vo.threads_per_instance = f.threads;
  std::printf("publish: building model '%s' version %lld\n", f.model.c_str(), static_cast<long long>(next));
  std::fflush(stdout);
  SP_ASSIGN_OR_RETURN(server::LoadedModel candidate,
                      server::LoadModelFiles(staging.dir.string(), next, config, has_file, vo));

  // The accuracy gate: the new version against the one that serves now, on the same samples.
  std::string accuracy_json = "null";
  std::vector<std::map<std::string, Tensor>> samples;
  if (gate) {
    builder::BuildConfig bc;
    bc.profiles = candidate.engines.front()->plan().profiles;
    SP_ASSIGN_OR_RETURN(
        samples, builder::LoadSamples(candidate.engines.front()->graph(), bc, f.accuracy_data, "--accuracyData"));
    if (samples.empty())
      return InvalidArgument("--accuracyData '", f.accuracy_data, "' holds no samples (INPUT.0.npy, INPUT.1.npy, ...)");
    if (current == 0) {
      std::printf("accuracy:  no version serves yet: nothing to compare with, gate skipped\n");
      accuracy_json = StrCat("{\"against_version\": null, \"metric\": ", JsonQuote(f.accuracy_metric),
                             ", \"bound\": ", Num(f.accuracy_bound), ", \"samples\": ", samples.size(),
                             ", \"skipped\": \"no version to compare with\"}");
    } else {
      bool cur_has_file = false;
      SP_ASSIGN_OR_RETURN(server::ModelConfig cur_config,
                          server::ReadModelConfig(model_dir.string(), f.model, &cur_has_file));
      auto serving = server::LoadModelFiles(model_dir.string(), current, cur_config, cur_has_file, vo);
      if (!serving.ok())
        return serving.status().WithContext(StrCat("the accuracy gate loads version ", current, " to compare with"));
      if (OutputNames(*serving) != OutputNames(candidate))
        return InvalidArgument("the new model's outputs differ from version ", current,
                               "'s: the accuracy gate compares outputs of the same names");
      SP_ASSIGN_OR_RETURN(auto want, RunSamples(*serving, samples));
      SP_ASSIGN_OR_RETURN(auto got, RunSamples(candidate, samples));
      for (size_t k = 0; k < want.size(); ++k)
        for (size_t o = 0; o < want[k].size() && o < got[k].size(); ++o)
          if (got[k][o].dtype() != want[k][o].dtype() || got[k][o].shape() != want[k][o].shape())
            return InvalidArgument("accuracy gate: output '", OutputNames(candidate)[o], "' of sample ", k, " is ",
                                   DTypeName(got[k][o].dtype()), " ", ShapeToString(got[k][o].shape()), ", version ",
                                   current, "'s is ", DTypeName(want[k][o].dtype()), " ",
                                   ShapeToString(want[k][o].shape()), ": the outputs cannot be compared");
      const size_t outputs = want.empty() ? 0 : want.front().size();
      size_t comparable = 0;
      for (size_t o = 0; o < outputs; ++o) comparable += want.front()[o].dtype() == DType::kFloat32;
      if (comparable == 0)
        return Unsupported("the accuracy gate compares float32 outputs; model '", f.model, "' has none");
      const double figure = builder::AccuracyFigure(f.accuracy_metric, got, want, outputs);
      const bool pass = builder::AccuracyMeets(f.accuracy_metric, figure, f.accuracy_bound);
      std::printf("accuracy:  %s = %.6g against version %lld on %zu samples (bound %g, %s)\n",
                  f.accuracy_metric.c_str(), figure, static_cast<long long>(current), samples.size(), f.accuracy_bound,
                  f.accuracy_metric == "rel_l2" ? "at most" : "at least");
      if (!pass)
        return FailedPrecondition("accuracy gate: ", f.accuracy_metric, " = ", figure, " against version ", current,
                                  " misses the bound ", f.accuracy_bound, "; version ", next,
                                  " is not published and version ", current, " is untouched");
      accuracy_json = StrCat("{\"against_version\": ", current, ", \"metric\": ", JsonQuote(f.accuracy_metric),
                             ", \"bound\": ", Num(f.accuracy_bound), ", \"value\": ", Num(figure),
                             ", \"samples\": ", samples.size(), ", \"passed\": true}");
    }
  }

  // The bench: one context, the first sample (or a synthetic feed), about --benchSecs.
  std::string bench_json = "null";
  if (f.bench_secs > 0) {
    std::map<std::string, Tensor> feed;
    if (!samples.empty()) {
      feed = samples.front();
    } else {
      SP_ASSIGN_OR_RETURN(feed, SyntheticFeed(candidate));
    }
    int64_t batch = 1;
    if (candidate.config.max_batch_size() > 0 && !feed.empty() && !feed.begin()->second.shape().empty())
      batch = feed.begin()->second.shape()[0];
    // Loaded again from the plan cache the build filled, so the memory measured is one engine's
    // and one context's, not what the build's tactic timing used.
    const std::string backend = candidate.engines.front()->plan().fingerprint.backend;
    const int device = candidate.engines.front()->options().device;
    candidate = server::LoadedModel{};
    const auto before = MemoryInUse(backend, device);
    SP_ASSIGN_OR_RETURN(candidate, server::LoadModelFiles(staging.dir.string(), next, config, has_file, vo));
    SP_ASSIGN_OR_RETURN(Bench b, RunBench(candidate, feed, f.bench_secs, batch, before));
    const plan::Fingerprint& ran = candidate.engines.front()->plan().fingerprint;
    std::printf(
        "bench:     batch %lld, %lld runs on one instance: p50 %.3f ms, p99 %.3f ms, %.1f inferences/s (%s%s%s)\n",
        static_cast<long long>(b.batch), static_cast<long long>(b.iterations), b.p50_ms, b.p99_ms, b.throughput,
        ran.backend.c_str(), ", ", ran.gpu_name.empty() ? ran.isa.c_str() : ran.gpu_name.c_str());
    bench_json = StrCat(
        "{\"batch\": ", b.batch, ", \"iterations\": ", b.iterations, ", \"latency_ms\": {\"p50\": ", Num(b.p50_ms),
        ", \"p99\": ", Num(b.p99_ms), "}, \"inferences_per_second\": ", Num(b.throughput),
        ", \"instances\": 1, \"backend\": ", JsonQuote(ran.backend), ", \"isa\": ", JsonQuote(ran.isa),
        ", \"device\": ", JsonQuote(ran.gpu_name),
        ", \"memory\": {\"host_bytes\": ", b.host_bytes < 0 ? std::string("null") : std::to_string(b.host_bytes),
        ", \"device_bytes\": ", b.device_bytes < 0 ? std::string("null") : std::to_string(b.device_bytes), "}}");
  }
  candidate = server::LoadedModel{};  // engines released before the files move

  // Hashes of every file the version holds (its plans included) and of the config.
  std::string files_json;
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(vdir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) files.push_back(fs::relative(it->path(), vdir, ec).string());
  std::sort(files.begin(), files.end());
  for (const std::string& rel : files) {
    if (rel.size() >= 5 && rel.compare(rel.size() - 5, 5, ".lock") == 0) continue;
    SP_ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes((vdir / rel).string()));
    files_json += StrCat(files_json.empty() ? "" : ", ", JsonQuote(rel), ": {\"sha256\": \"", Sha256Hex(bytes),
                         "\", \"bytes\": ", bytes.size(), "}");
  }
  std::string config_hash = "null";
  if (fs::is_regular_file(staging.dir / "config.pbtxt", ec)) {
    SP_ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes((staging.dir / "config.pbtxt").string()));
    config_hash = "\"" + Sha256Hex(bytes) + "\"";
  }

  std::string canary_json = "null";
  if (f.canary > 0) {
    server::CanaryPolicy p;
    p.version = next;
    p.baseline = current;
    p.percent = f.canary;
    p.window_secs = f.canary_window;
    p.min_requests = f.canary_min_requests;
    p.max_error_rate_increase = f.canary_max_error_rate;
    p.max_p99_ratio = f.canary_max_p99_ratio;
    p.p99_slack_ms = f.canary_p99_slack_ms;
    canary_json = server::CanaryPolicyJson(p);
  }
  const std::string report = StrCat(
      "{\n  \"model\": ", JsonQuote(f.model), ",\n  \"version\": ", next,
      ",\n  \"previous_version\": ", current == 0 ? std::string("null") : std::to_string(current),
      ",\n  \"published_utc\": \"", UtcNow(), "\",\n  \"sampan_version\": \"", Version(),
      "\",\n  \"source\": {\"onnx\": ", JsonQuote(f.onnx), ", \"sha256\": \"", Sha256Hex(onnx_bytes),
      "\"},\n  \"config_sha256\": ", config_hash, ",\n  \"files\": {", files_json,
      "},\n  \"accuracy\": ", accuracy_json, ",\n  \"bench\": ", bench_json, ",\n  \"canary\": ", canary_json, "\n}\n");
  SP_RETURN_IF_ERROR(WriteFileAtomic((vdir / "report.json").string(), report));

  // The servers will read the canary object back: a value they would refuse is refused here.
  if (f.canary > 0) SP_RETURN_IF_ERROR(server::ReadCanaryPolicy(vdir.string(), next).status());

  // Into place in one rename: a new model's whole directory, or the version (after the config,
  // when --config gave one).
  if (new_model) {
    fs::rename(staging.dir, model_dir, ec);
    if (ec) return IoError("cannot move ", staging.dir.string(), " to ", model_dir.string(), ": ", ec.message());
  } else {
    std::string old_config;
    const bool had_config = fs::is_regular_file(model_dir / "config.pbtxt", ec);
    if (!config_text.empty()) {
      if (had_config) {
        SP_ASSIGN_OR_RETURN(old_config, ReadFileBytes((model_dir / "config.pbtxt").string()));
      }
      SP_RETURN_IF_ERROR(WriteFileAtomic((model_dir / "config.pbtxt").string(), config_text));
    }
    fs::rename(vdir, model_dir / std::to_string(next), ec);
    if (ec) {
      // The config goes back as it was: nothing of this publish stays.
      std::error_code ignored;
      if (!config_text.empty() && had_config) (void)WriteFileAtomic((model_dir / "config.pbtxt").string(), old_config);
      if (!config_text.empty() && !had_config) fs::remove(model_dir / "config.pbtxt", ignored);
      return IoError("cannot move ", vdir.string(), " into ", model_dir.string(), ": ", ec.message());
    }
  }
  std::printf("published model '%s' version %lld%s (report: %s)\n", f.model.c_str(), static_cast<long long>(next),
              f.canary > 0 ? StrCat(" as a canary: ", f.canary, "% of unversioned requests for ", f.canary_window,
                                    " s against version ", current)
                                 .c_str()
                           : "",
              (model_dir / std::to_string(next) / "report.json").string().c_str());
  return Status::Ok();
}

}  // namespace

void AddPublishCommand(CLI::App& app) {
  auto f = std::make_shared<PublishFlags>();
  auto* cmd = app.add_subcommand(
      "publish", "Add a model version to a repository: build, accuracy gate, bench, report, atomic; canary; rollback");
  cmd->add_option("--onnx", f->onnx, "The model to publish as the next version");
  cmd->add_option("--repository,--model-repository", f->repository, "The model repository")->required();
  cmd->add_option("--model", f->model, "The model's directory name in the repository")->required();
  cmd->add_option("--config", f->config, "config.pbtxt for the model (replaces the model's on success)");
  cmd->add_option("--accuracyData", f->accuracy_data,
                  "Samples (INPUT.K.npy) the new version and the serving one both run for the accuracy gate");
  cmd->add_option("--accuracyMetric", f->accuracy_metric, "Gate metric: cosine (default), rel_l2, top1");
  cmd->add_option("--accuracyBound", f->accuracy_bound,
                  "The gate's bound: at least this (cosine, top1) or at most this (rel_l2)");
  cmd->add_option("--canary", f->canary, "Release as a canary taking this percentage of unversioned requests");
  cmd->add_option("--canaryWindowSecs", f->canary_window, "How long the servers compare the canary (default 60)");
  cmd->add_option("--canaryMinRequests", f->canary_min_requests, "Canary requests a verdict needs (default 20)");
  cmd->add_option("--canaryMaxErrorRateIncrease", f->canary_max_error_rate,
                  "Error rate above the baseline's that rolls the canary back (default 0.01)");
  cmd->add_option("--canaryMaxP99Ratio", f->canary_max_p99_ratio,
                  "p99 over this many times the baseline's rolls the canary back (default 1.5)");
  cmd->add_option("--canaryP99SlackMs", f->canary_p99_slack_ms,
                  "...unless the canary's p99 is within this many ms of the baseline's (default 1)");
  cmd->add_option("--benchSecs", f->bench_secs, "Seconds the new version is benchmarked for report.json (0: none)");
  cmd->add_option("--backend", f->backend, "Backend for configs that do not choose one (as sampan serve's)");
  cmd->add_option("--threads", f->threads, "CPU threads per engine (0 = all cores)");
  cmd->add_flag("--rollback", f->rollback, "Move the newest version out of the repository (kept in .rolled-back)");
  cmd->add_option("--rollbackTo", f->rollback_to, "With --rollback: the version to go back to (newer ones move out)");
  cmd->callback([f] {
    Status st = ValidateName(f->model);
    if (st.ok()) {
      if (f->rollback && !f->onnx.empty())
        st = InvalidArgument("--rollback takes no --onnx");
      else if (!f->rollback && f->rollback_to != 0)
        st = InvalidArgument("--rollbackTo goes with --rollback");
      else if (f->rollback_to < 0)
        st = InvalidArgument("--rollbackTo ", f->rollback_to, " is not a version (1, 2, ...)");
      else
        st = f->rollback ? Rollback(*f) : Publish(*f);
    }
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      ExitCode() = 1;
    }
  });
}

}  // namespace sampan::cli
