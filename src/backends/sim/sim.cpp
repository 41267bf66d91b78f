#include "backends/sim/sim.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/file_util.h"

namespace sampan::sim {

namespace {

constexpr int kMaxDevices = 64;
constexpr uint64_t kDefaultMemoryMib = 143771;  // an H200, as nvidia-smi reports it

// A positive integer in [lo, hi] from the environment; `fallback` when unset.
Result<int64_t> EnvInt(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < lo || x > hi)
    return InvalidArgument(name, "='", v, "': the sim backend needs a whole number from ", lo, " to ", hi);
  return static_cast<int64_t>(x);
}

const rapidjson::Value* Member(const rapidjson::Value& obj, const char* name) {
  auto it = obj.FindMember(name);
  return it == obj.MemberEnd() ? nullptr : &it->value;
}

Result<double> PositiveNumber(const rapidjson::Value& obj, const char* name, const std::string& where) {
  const rapidjson::Value* v = Member(obj, name);
  if (v == nullptr || !v->IsNumber()) return InvalidArgument(where, ": '", name, "' is missing or not a number");
  const double x = v->GetDouble();
  if (!(x > 0) || !std::isfinite(x)) return InvalidArgument(where, ": '", name, "' must be > 0 (it is ", x, ")");
  return x;
}

}  // namespace

// ---- latency table ------------------------------------------------------------------

LatencyPoint LatencyTable::At(int64_t batch) const {
  batch = std::max<int64_t>(batch, 1);
  if (points.empty()) return {batch, 0, 0};
  const LatencyPoint& lo = points.front();
  const LatencyPoint& hi = points.back();
  if (batch <= lo.batch) return {batch, lo.latency_ms, lo.occupancy_ms};
  if (batch >= hi.batch) {
    const double k = static_cast<double>(batch) / static_cast<double>(hi.batch);
    return {batch, hi.latency_ms * k, hi.occupancy_ms * k};
  }
  auto next = std::lower_bound(points.begin(), points.end(), batch,
                               [](const LatencyPoint& p, int64_t b) { return p.batch < b; });
  if (next->batch == batch) return *next;
  const LatencyPoint& a = *(next - 1);
  const LatencyPoint& b = *next;
  const double t = static_cast<double>(batch - a.batch) / static_cast<double>(b.batch - a.batch);
  return {batch, a.latency_ms + t * (b.latency_ms - a.latency_ms),
          a.occupancy_ms + t * (b.occupancy_ms - a.occupancy_ms)};
}

std::string LatencyTable::Serialize() const {
  std::ostringstream s;
  s.precision(17);
  s << "source " << source << "\n";
  for (const LatencyPoint& p : points) s << p.batch << " " << p.latency_ms << " " << p.occupancy_ms << "\n";
  return s.str();
}

Result<LatencyTable> LatencyTable::Parse(const std::string& text) {
  LatencyTable t;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.rfind("source ", 0) == 0) {
      t.source = line.substr(7);
      continue;
    }
    std::istringstream ls(line);
    LatencyPoint p;
    std::string rest;
    if (!(ls >> p.batch >> p.latency_ms >> p.occupancy_ms) || (ls >> rest) || p.batch < 1 || !(p.latency_ms > 0) ||
        !(p.occupancy_ms > 0) || p.occupancy_ms > p.latency_ms)
      return InvalidArgument("sim latency table, line ", n, ": '", line,
                             "' is not BATCH LATENCY_MS OCCUPANCY_MS (batch >= 1, 0 < occupancy <= latency)");
    if (!t.points.empty() && p.batch <= t.points.back().batch)
      return InvalidArgument("sim latency table, line ", n, ": batch ", p.batch, " is not above the line before");
    t.points.push_back(p);
  }
  if (t.points.empty()) return InvalidArgument("sim latency table: no batch sizes");
  return t;
}

Result<LatencyTable> LatencyTable::FromBenchFiles(const std::vector<std::string>& paths) {
  if (paths.empty())
    return InvalidArgument(
        "--backend sim needs the latency it simulates: --sim-profile FILE, a `sampan bench --json` file of the "
        "GPU plan (one per batch size, repeatable)");
  LatencyTable t;
  std::map<int64_t, std::string> seen;
  std::vector<std::string> names, gpus;
  for (const std::string& path : paths) {
    const std::string where = StrCat("--sim-profile '", path, "'");
    auto read = ReadFileBytes(path);
    if (!read.ok()) return read.status().WithContext(where);
    const std::string& text = *read;
    rapidjson::Document d;
    d.Parse(text.data(), text.size());
    if (d.HasParseError())
      return InvalidArgument(where, ": not JSON (", rapidjson::GetParseError_En(d.GetParseError()), " at byte ",
                             d.GetErrorOffset(), ")");
    if (!d.IsObject()) return InvalidArgument(where, ": not a `sampan bench --json` object");
    const rapidjson::Value* batch = Member(d, "batch");
    if (batch == nullptr || !batch->IsInt64() || batch->GetInt64() < 1)
      return InvalidArgument(where, ": 'batch' is missing or not a whole number >= 1");
    const rapidjson::Value* latency = Member(d, "latency_ms");
    if (latency == nullptr || !latency->IsObject())
      return InvalidArgument(where, ": 'latency_ms' is missing or not an object of statistics");
    SP_ASSIGN_OR_RETURN(double median, PositiveNumber(*latency, "median", where + " latency_ms"));
    SP_ASSIGN_OR_RETURN(double qps, PositiveNumber(d, "throughput_qps", where));
    if (const rapidjson::Value* b = Member(d, "backend");
        b != nullptr && b->IsString() && b->GetString() == std::string("sim"))
      return InvalidArgument(where, ": this profile was measured on a sim plan; record one of the real GPU plan");
    LatencyPoint p;
    p.batch = batch->GetInt64();
    p.latency_ms = median;
    // bench pipelines runs (or runs several streams): a run then holds the device for less than
    // its latency. Never more: a run cannot keep the device busy after it has ended.
    p.occupancy_ms = std::min(median, 1000.0 / qps);
    if (auto [it, fresh] = seen.emplace(p.batch, path); !fresh)
      return InvalidArgument(where, ": batch ", p.batch, " is given twice (also in '", it->second, "')");
    t.points.push_back(p);
    names.push_back(std::filesystem::path(path).filename().string());
    if (const rapidjson::Value* r = Member(d, "runs_on"); r != nullptr && r->IsString() && r->GetStringLength() > 0)
      if (std::find(gpus.begin(), gpus.end(), r->GetString()) == gpus.end()) gpus.push_back(r->GetString());
  }
  std::sort(t.points.begin(), t.points.end(),
            [](const LatencyPoint& a, const LatencyPoint& b) { return a.batch < b.batch; });
  std::string src;
  for (const auto& n : names) src += (src.empty() ? "" : ", ") + n;
  if (!gpus.empty()) {
    src += " (measured on ";
    for (size_t i = 0; i < gpus.size(); ++i) src += (i ? "; " : "") + gpus[i];
    src += ")";
  }
  // One line in the plan: no newline may enter the source text.
  std::replace(src.begin(), src.end(), '\n', ' ');
  t.source = src;
  return t;
}

// ---- the machine ----------------------------------------------------------------------

SimMachine& SimMachine::Get() {
  static SimMachine* machine = new SimMachine();  // never destroyed: engines may outlive statics
  return *machine;
}

SimMachine::SimMachine() {
  auto devices = EnvInt("SAMPAN_SIM_DEVICES", 1, 1, kMaxDevices);
  auto mib = EnvInt("SAMPAN_SIM_DEVICE_MEMORY_MIB", static_cast<int64_t>(kDefaultMemoryMib), 1, int64_t{1} << 30);
  if (!devices.ok()) status_ = devices.status();
  if (!mib.ok() && status_.ok()) status_ = mib.status();
  devices_ = devices.ok() ? static_cast<int>(*devices) : 1;
  memory_bytes_ = (mib.ok() ? static_cast<uint64_t>(*mib) : kDefaultMemoryMib) << 20;
  used_.assign(static_cast<size_t>(devices_), 0);
  free_at_.assign(static_cast<size_t>(devices_), std::chrono::steady_clock::time_point{});
  broken_.assign(static_cast<size_t>(devices_), "");
  if (const char* f = std::getenv("SAMPAN_SIM_FAULT_FILE")) fault_file_ = f;
}

SimMachine::SimMachine(int devices, uint64_t memory_bytes, std::string fault_file)
    : devices_(devices), memory_bytes_(memory_bytes), fault_file_(std::move(fault_file)) {
  used_.assign(static_cast<size_t>(devices_), 0);
  free_at_.assign(static_cast<size_t>(devices_), std::chrono::steady_clock::time_point{});
  broken_.assign(static_cast<size_t>(devices_), "");
}

Status SimMachine::DeviceHealth(int device) const {
  if (device < 0 || device >= devices_) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& why = broken_[static_cast<size_t>(device)];
  return why.empty() ? Status::Ok() : Internal(why);
}

Status SimMachine::CheckFault(int device) {
  if (device < 0 || device >= devices_) return Status::Ok();
  if (Status s = DeviceHealth(device); !s.ok() || fault_file_.empty()) return s;
  std::ifstream in(fault_file_);
  if (!in) return Status::Ok();  // no file: no fault
  std::string word;
  bool listed = false, any = false, transient = false;
  while (in >> word) {
    if (word == "transient") {
      transient = true;
      continue;
    }
    any = true;
    listed = listed || word == std::to_string(device);
  }
  if (any && !listed) return Status::Ok();
  if (transient)
    return Internal("sim device ", device, ": simulated transient device error (fault injected: ", fault_file_,
                    " exists)");
  std::lock_guard<std::mutex> lock(mu_);
  std::string& why = broken_[static_cast<size_t>(device)];
  if (why.empty())
    why = StrCat("sim device ", device, ": simulated sticky device error: an illegal memory access was encountered ",
                 "(fault injected: ", fault_file_, " exists)");
  return Internal(why);
}

Status SimMachine::Reserve(int device, uint64_t bytes, const std::string& what) {
  if (device < 0 || device >= devices_)
    return InvalidArgument("sim device ", device, " does not exist: this simulated machine has ", devices_,
                           " (SAMPAN_SIM_DEVICES)");
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t& used = used_[static_cast<size_t>(device)];
  if (bytes > memory_bytes_ - used)
    return Unavailable("sim device ", device, " is out of memory: ", what, " needs ", bytes, " bytes, ", used, " of ",
                       memory_bytes_, " are in use (SAMPAN_SIM_DEVICE_MEMORY_MIB)");
  used += bytes;
  return Status::Ok();
}

void SimMachine::Release(int device, uint64_t bytes) {
  if (device < 0 || device >= devices_) return;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t& used = used_[static_cast<size_t>(device)];
  used -= std::min(used, bytes);
}

uint64_t SimMachine::used(int device) const {
  if (device < 0 || device >= devices_) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  return used_[static_cast<size_t>(device)];
}

std::chrono::steady_clock::time_point SimMachine::Book(int device, double latency_ms, double occupancy_ms) {
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  const auto now = std::chrono::steady_clock::now();
  const auto lat = duration_cast<nanoseconds>(std::chrono::duration<double, std::milli>(latency_ms));
  const auto occ = duration_cast<nanoseconds>(std::chrono::duration<double, std::milli>(occupancy_ms));
  std::lock_guard<std::mutex> lock(mu_);
  auto& free_at = free_at_[static_cast<size_t>(std::clamp(device, 0, devices_ - 1))];
  const auto start = std::max(now, free_at);
  free_at = start + occ;
  return start + lat;
}

void WaitUntil(std::chrono::steady_clock::time_point t) {
  // libstdc++'s steady_clock is CLOCK_MONOTONIC.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  if (ns <= 0) return;
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

int64_t BatchOf(const std::vector<const Tensor*>& inputs) {
  for (const Tensor* t : inputs)
    if (t != nullptr && t->rank() >= 1) return t->dim(0);
  return 1;
}

uint64_t SeedOf(const std::vector<const Tensor*>& inputs) {
  // Bounded work per run whatever the inputs' size (a run's host time must stay far below the
  // latency it simulates): each input's type, element count and its first and last 4 KiB.
  constexpr size_t kEdge = 4096;
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  };
  auto edges = [&](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    mix(p, std::min(n, kEdge));
    if (n > kEdge) mix(p + n - std::min(n - kEdge, kEdge), std::min(n - kEdge, kEdge));
  };
  for (const Tensor* t : inputs) {
    if (t == nullptr) continue;
    const int64_t meta[2] = {static_cast<int64_t>(t->dtype()), t->numel()};
    mix(meta, sizeof(meta));
    if (t->is_string()) {
      const auto n = static_cast<size_t>(t->numel());
      for (size_t i = 0; i < n; i = (i + 1 == 64 && n > 128) ? n - 64 : i + 1)
        edges(t->strings()[i].data(), t->strings()[i].size());
    } else if (!IsObjectDType(t->dtype()) && t->nbytes() > 0) {
      edges(t->raw(), t->nbytes());
    }
  }
  return h;
}

Status FillDeterministic(uint64_t seed, Tensor* out) {
  const int64_t n = out->numel();
  if (out->is_string()) {
    std::string* s = out->mutable_strings();
    for (int64_t i = 0; i < n; ++i) s[i] = StrCat("sim-", (seed + static_cast<uint64_t>(i)) % 1000003);
    return Status::Ok();
  }
  if (IsObjectDType(out->dtype()))
    return Unsupported("the sim backend makes no ", DTypeName(out->dtype()), " outputs (sequences, optionals)");
  // The first kHead elements from the seed, the rest zero (`out` comes zero-filled from
  // Tensor::Alloc): bounded work per run, as SeedOf. Values in [0, 1) for floats, [0, 100) for
  // integers, 0/1 for bool: any dtype from one small float tensor through ONNX Cast.
  constexpr int64_t kHead = 64;
  const int64_t head = std::min(n, kHead);
  if (head == 0) return Status::Ok();
  Tensor f = Tensor::Alloc(DType::kFloat32, {head});
  float* p = f.mutable_data<float>();
  const bool integral = !IsFloatDType(out->dtype()) && !IsSmallFloatDType(out->dtype());
  for (int64_t i = 0; i < head; ++i) {
    uint64_t x = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x >> 40) / static_cast<float>(1 << 24);
    p[i] = integral ? std::floor(u * 100.0f) : u;
  }
  SP_ASSIGN_OR_RETURN(Tensor cast, CastTensor(f, out->dtype()));
  std::memcpy(out->mutable_raw(), cast.raw(), cast.nbytes());
  return Status::Ok();
}

}  // namespace sampan::sim
