// A server::Core test double for the gRPC front-end tests: models are
// behaviours, not engines, so every protocol path can be driven on purpose.
//
//   "double"  x (FP32 or INT64, any shape) -> y = 2x, n = INT64[1]{numel};
//             completed on a pool thread after a random 0-1 ms, so responses
//             of concurrent requests finish out of order.
//   "slow"    never completes on its own: waits until the request's cancelled
//             flag is set (client cancel / deadline), then kCancelled.
//   "busy"    kUnavailable (queue full), inline.
//   anything else: kNotFound, inline.
//
// Also ShmObject: a POSIX shared-memory object for the shared-memory tests.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "server/core/core.h"

namespace sampan::server::testing {

class FakeCore final : public Core {
 public:
  FakeCore() {
    for (int i = 0; i < 4; ++i) workers_.emplace_back([this, i] { Work(i); });
  }
  ~FakeCore() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  bool Shutdown(std::chrono::milliseconds) override { return true; }
  bool Live() const override { return true; }
  bool Ready() const override { return ready.load(); }
  bool ShuttingDown() const override { return false; }
  double Saturation() const override { return 0; }

  ServerMetadata GetServerMetadata() const override {
    ServerMetadata md;
    md.version = "9.9.9";
    md.extensions = {"model_repository", "statistics"};
    return md;
  }
  Result<bool> ModelReady(const std::string& name, const std::string& version) const override {
    if (name != "double") return NotFound("unknown model '", name, "'");
    return version.empty() || version == "1";
  }
  Result<ModelMetadata> GetModelMetadata(const std::string& name, const std::string& version) const override {
    if (name != "double") return NotFound("unknown model '", name, "'");
    ModelMetadata md;
    md.name = name;
    md.versions = {"1"};
    md.platform = "onnxruntime_onnx";
    md.inputs = {{"x", "FP32", {-1, 4}}};
    md.outputs = {{"y", "FP32", {-1, 4}}, {"n", "INT64", {1}}};
    return md;
  }
  Result<ModelConfig> GetModelConfig(const std::string& name, const std::string& version) const override {
    if (name != "double") return NotFound("unknown model '", name, "'");
    ModelConfig c;
    c.set_name(name);
    c.set_platform("onnxruntime_onnx");
    c.set_max_batch_size(8);
    auto* in = c.add_input();
    in->set_name("x");
    in->set_data_type(serverconfig::TYPE_FP32);
    in->add_dims(4);
    auto* db = c.mutable_dynamic_batching();
    db->add_preferred_batch_size(4);
    db->set_max_queue_delay_microseconds(100);
    c.mutable_sampan()->set_precision("fp16");
    return c;
  }

  void Infer(InferRequest request, InferCallback done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_priority = request.priority;
      last_timeout_us = request.timeout_us;
      last_parameters = request.parameters;
      last_outputs = request.outputs;
      last_keepalive = request.keepalive;
      last_input_data = request.inputs.empty() ? nullptr : request.inputs[0].data.raw();
    }
    if (request.model_name == "busy") return done(Unavailable("model 'busy': queue is full"));
    if (request.model_name == "slow") {
      auto cancelled = request.cancelled;
      Post([this, cancelled, done] {
        // Returns once the front end reports the cancel (or after 10 s: a test bug).
        for (int i = 0; i < 10000 && !(cancelled && cancelled->load()); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (cancelled && cancelled->load()) ++cancels_seen;
        done(Cancelled("request cancelled"));
      });
      return;
    }
    if (request.model_name != "double") return done(NotFound("unknown model '", request.model_name, "'"));
    if (request.inputs.size() != 1 || request.inputs[0].name != "x")
      return done(InvalidArgument("model 'double' takes one input, 'x'"));
    const InferTensor& x = request.inputs[0];
    if (x.dtype != DType::kFloat32 && x.dtype != DType::kInt64)
      return done(InvalidArgument("input 'x': expected FP32 or INT64, got ", KServeDatatype(x.dtype)));
    auto req = std::make_shared<InferRequest>(std::move(request));
    Post([req, done = std::move(done)] {
      const InferTensor& in = req->inputs[0];
      InferResponse resp;
      resp.model_name = req->model_name;
      resp.model_version = "1";
      resp.id = req->id;
      resp.parameters["fake"] = "yes";
      InferTensor y{"y", in.dtype, in.shape, Tensor::Alloc(in.dtype, in.shape)};
      const int64_t n = in.data.numel();
      if (in.dtype == DType::kFloat32) {
        for (int64_t i = 0; i < n; ++i) y.data.mutable_data<float>()[i] = 2 * in.data.data<float>()[i];
      } else {
        for (int64_t i = 0; i < n; ++i) y.data.mutable_data<int64_t>()[i] = 2 * in.data.data<int64_t>()[i];
      }
      InferTensor count{"n", DType::kInt64, {1}, Tensor::FromVector<int64_t>(DType::kInt64, {n}, {1})};
      std::vector<std::string> wanted = req->outputs.empty() ? std::vector<std::string>{"y", "n"} : req->outputs;
      for (const auto& w : wanted) {
        if (w == "y")
          resp.outputs.push_back(y);
        else if (w == "n")
          resp.outputs.push_back(count);
        else
          return done(InvalidArgument("unknown output '", w, "'"));
      }
      done(std::move(resp));
    });
  }

  Result<std::vector<ModelStats>> Statistics(const std::string& name, const std::string& version) const override {
    if (!name.empty() && name != "double") return NotFound("unknown model '", name, "'");
    ModelStats s;
    s.name = "double";
    s.version = "1";
    s.last_inference_ms = 1234;
    s.inference_count = 10;
    s.execution_count = 3;
    s.inference_stats.success = {10, 5000};
    s.inference_stats.queue = {10, 700};
    s.batch_stats.push_back({4, {2, 100}, {2, 200}, {2, 300}});
    s.memory_usage = {{"GPU", 2, 1u << 20}};
    return std::vector<ModelStats>{s};
  }

  std::vector<RepositoryEntry> RepositoryIndex(bool ready_only) const override {
    std::vector<RepositoryEntry> v = {{"double", "1", ModelState::kReady, ""}};
    if (!ready_only) v.push_back({"broken", "1", ModelState::kUnavailable, "config.pbtxt:1:1: bad"});
    return v;
  }
  Status LoadModel(const std::string& name, const std::string& = "") override {
    std::lock_guard<std::mutex> lock(mu_);
    loads.push_back(name);
    if (name == "broken") return InvalidArgument("config.pbtxt:1:1: bad");
    return Status::Ok();
  }
  Status UnloadModel(const std::string& name, bool = false) override {
    std::lock_guard<std::mutex> lock(mu_);
    unloads.push_back(name);
    if (name != "double") return NotFound("unknown model '", name, "'");
    return Status::Ok();
  }
  std::string RenderMetrics() const override { return ""; }

  // What the last Infer call received (guarded by mu_).
  std::mutex mu_;
  uint32_t last_priority = 0;
  uint64_t last_timeout_us = 0;
  Parameters last_parameters;
  std::vector<std::string> last_outputs;
  std::shared_ptr<void> last_keepalive;
  const void* last_input_data = nullptr;
  std::vector<std::string> loads, unloads;
  std::atomic<int> cancels_seen{0};
  std::atomic<bool> ready{true};

 private:
  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }
  void Work(int seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 1000));
      fn();
    }
  }

  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

//! A POSIX shared-memory object of `size` bytes (key "/sampan_grpc_<tag>_<pid>"),
//! mapped here as a client maps it; unlinked at the end.
class ShmObject {
 public:
  ShmObject(const std::string& tag, size_t size)
      : key_("/sampan_grpc_" + tag + "_" + std::to_string(getpid())), size_(size) {
    const int fd = shm_open(key_.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0) return;
    void* p = ftruncate(fd, static_cast<off_t>(size)) == 0
                  ? mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    if (p != MAP_FAILED) base_ = static_cast<char*>(p);
  }
  ~ShmObject() {
    if (base_) munmap(base_, size_);
    shm_unlink(key_.c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;
  const std::string& key() const { return key_; }
  char* base() const { return base_; }  //!< nullptr when the object could not be made

 private:
  std::string key_;
  size_t size_;
  char* base_ = nullptr;
};

}  // namespace sampan::server::testing
