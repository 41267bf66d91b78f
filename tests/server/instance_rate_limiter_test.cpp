// Triton's rate limiter (server/core/instance_rate_limiter.h): the --rate-limit-resource
// syntax, loads refused when a resource is short, waiters served by executions x priority,
// and, through server::Core, two models sharing a resource of count 1 never running at once
// (while with --rate-limit=off they do).
#include "server/core/instance_rate_limiter.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include "runtime/engine.h"
#include "server/core/core.h"
#include "server/test_backends.h"
#include "server/test_models.h"

namespace sampan::server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

#define EXPECT_CONTAINS(hay, needle) EXPECT_NE(std::string(hay).find(needle), std::string::npos) << (hay)

InstanceRateLimiter::Instance Needs(int device, uint32_t priority,
                                    std::vector<std::tuple<std::string, uint32_t, bool>> resources) {
  InstanceRateLimiter::Instance in;
  in.device = device;
  in.config.set_priority(priority);
  in.group = "instance_group[0]";
  for (const auto& [name, count, global] : resources) {
    auto* r = in.config.add_resources();
    r->set_name(name);
    r->set_count(count);
    r->set_global(global);
  }
  return in;
}

std::shared_ptr<InstanceRateLimiter> Limiter(std::vector<std::string> flags = {}) {
  RateLimiterOptions o;
  o.execution_count = true;
  for (const auto& f : flags) o.resources.push_back(*ParseRateLimitResource(f));
  return std::make_shared<InstanceRateLimiter>(o);
}

std::unique_ptr<InstanceRateLimiter::Group> Registered(InstanceRateLimiter& l,
                                                       const std::vector<InstanceRateLimiter::Instance>& instances) {
  auto r = l.Register(instances);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

void WaitForWaiters(const InstanceRateLimiter& l, size_t n) {
  for (int spin = 0; l.waiting() < n && spin < 5000; ++spin) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(l.waiting(), n);
}

TEST(InstanceRateLimiterTest, ParsesTheResourceFlag) {
  auto r = ParseRateLimitResource("R1:10");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->name, "R1");
  EXPECT_EQ(r->count, 10u);
  EXPECT_EQ(r->device, -1);
  r = ParseRateLimitResource("gpu_mem:2:1");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->device, 1);
  const std::pair<const char*, const char*> bad[] = {{"R1", "has 1 part(s)"},
                                                     {"R1:1:0:2", "has 4 part(s)"},
                                                     {":3", "the resource name is empty"},
                                                     {"R1:-1", "count '-1' is not a whole number >= 0"},
                                                     {"R1:two", "count 'two'"},
                                                     {"R1:1:gpu0", "device 'gpu0' is not a device number"},
                                                     {"R1:99999999999", "count '99999999999'"}};
  for (const auto& [text, want] : bad) {
    auto e = ParseRateLimitResource(text);
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_CONTAINS(e.status().message(), StrCat("--rate-limit-resource=", text, ": "));
    EXPECT_CONTAINS(e.status().message(), want);
  }
}

TEST(InstanceRateLimiterTest, RefusesAnInstanceThatNeedsMoreThanTheFlagGives) {
  auto l = Limiter({"R:2", "R:5:1", "G:1"});
  auto g = l->Register({Needs(1, 0, {{"R", 4, false}})});  // device 1 has 5
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  auto e = l->Register({Needs(0, 0, {{"R", 3, false}})});  // device 0 has 2
  ASSERT_FALSE(e.ok());
  EXPECT_CONTAINS(e.status().message(),
                  "instance_group[0].rate_limiter: resource 'R' on device 0 is limited to 2 by "
                  "--rate-limit-resource, which would keep an instance that needs 3 from ever running");
  e = l->Register({Needs(0, 0, {{"G", 2, true}})});
  ASSERT_FALSE(e.ok());
  EXPECT_CONTAINS(e.status().message(), "resource 'G' (global) is limited to 1");
  // Global in one model, per device in another: one name cannot be both.
  e = l->Register({Needs(0, 0, {{"R", 1, true}})});
  ASSERT_FALSE(e.ok());
  EXPECT_CONTAINS(
      e.status().message(),
      "instance_group[0].rate_limiter: resource 'R' is global here but per device in a model loaded before");
  // Without a flag the count is the most any instance needs: any need fits.
  EXPECT_TRUE(l->Register({Needs(0, 0, {{"X", 1000, false}})}).ok());
}

// Two instances of count-1 needs on one resource never hold it together; a per-device resource
// on another device is another pool; a global one is shared by every device.
TEST(InstanceRateLimiterTest, ResourcesArePerDeviceUnlessGlobal) {
  auto l = Limiter({"R:1"});
  auto g =
      Registered(*l, {Needs(0, 0, {{"R", 1, false}}), Needs(0, 0, {{"R", 1, false}}), Needs(1, 0, {{"R", 1, false}})});
  auto held = g->Acquire(0);
  auto other_device = g->Acquire(2);  // device 1's R: free
  std::promise<void> second;
  std::thread t([&] {
    auto grant = g->Acquire(1);  // device 0's R: waits for `held`
    second.set_value();
  });
  WaitForWaiters(*l, 1);
  EXPECT_EQ(second.get_future().wait_for(50ms), std::future_status::timeout);
  held.Release();
  t.join();
  auto lg = Registered(*l, {Needs(0, 0, {{"S", 1, true}}), Needs(1, 0, {{"S", 1, true}})});
  auto on0 = lg->Acquire(0);
  std::thread t2([&] { auto grant = lg->Acquire(1); });  // device 1, but S is one pool
  WaitForWaiters(*l, 1);
  on0.Release();
  t2.join();
}

// Waiters are served by executions x priority (lower first), then by arrival; not by arrival alone.
TEST(InstanceRateLimiterTest, PriorityOrdersTheWaiters) {
  for (const uint32_t late_priority : {1u, 3u}) {
    auto l = Limiter();
    // Instance 0 holds R; instance 1 (priority 1) and instance 2 (priority late_priority) have run
    // once each, so they wait with keys 1 and late_priority.
    auto g = Registered(*l, {Needs(0, 1, {{"R", 1, false}}), Needs(0, 1, {{"R", 1, false}}),
                             Needs(0, late_priority, {{"R", 1, false}})});
    g->Acquire(1).Release();
    g->Acquire(2).Release();
    auto held = g->Acquire(0);
    std::mutex mu;
    std::vector<int> order;
    auto run = [&](int instance) {
      auto grant = g->Acquire(instance);
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(instance);
    };
    std::thread first(run, 2);  // arrives first
    WaitForWaiters(*l, 1);
    std::thread second(run, 1);
    WaitForWaiters(*l, 2);
    held.Release();
    first.join();
    second.join();
    // Equal weights: the first to arrive. Priority 3 against 1: the later arrival goes first.
    EXPECT_EQ(order, late_priority == 1 ? (std::vector<int>{2, 1}) : (std::vector<int>{1, 2}))
        << "priority " << late_priority;
  }
}

// Three instances contending for one resource: the lower the priority value, the more turns.
TEST(InstanceRateLimiterTest, PriorityIsAWeight) {
  auto l = Limiter();
  auto g =
      Registered(*l, {Needs(0, 1, {{"R", 1, false}}), Needs(0, 2, {{"R", 1, false}}), Needs(0, 4, {{"R", 1, false}})});
  std::atomic<bool> stop{false};
  std::atomic<int> turns[3] = {0, 0, 0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i)
    threads.emplace_back([&, i] {
      while (!stop) {
        auto grant = g->Acquire(i);
        turns[i]++;
        std::this_thread::sleep_for(3ms);  // the other two are waiting when it ends
      }
    });
  for (int spin = 0; turns[0] + turns[1] + turns[2] < 60 && spin < 5000; ++spin) std::this_thread::sleep_for(1ms);
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_GT(turns[0].load(), turns[1].load());
  EXPECT_GT(turns[1].load(), turns[2].load());
  EXPECT_GE(turns[2].load(), 1) << "a heavy weight is served less, never starved";
}

// ---- Through server::Core -----------------------------------------------------------------

// A backend for this test: the reference backend counting the runs in progress across every
// engine, each run taking at least 20 ms.
std::atomic<int> g_running{0}, g_most_running{0};

class CountingContext : public runtime::ContextImpl {
 public:
  explicit CountingContext(std::unique_ptr<runtime::ContextImpl> inner) : inner_(std::move(inner)) {}
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, runtime::Timing* timing) override {
    const int now = ++g_running;
    for (int most = g_most_running; now > most && !g_most_running.compare_exchange_weak(most, now);) {
    }
    std::this_thread::sleep_for(20ms);
    --g_running;
    return inner_->Run(inputs, timing);
  }

 private:
  std::unique_ptr<runtime::ContextImpl> inner_;
};

class CountingEngine : public runtime::BackendEngine {
 public:
  explicit CountingEngine(std::unique_ptr<runtime::BackendEngine> inner) : inner_(std::move(inner)) {}
  Result<std::unique_ptr<runtime::ContextImpl>> CreateContext() override {
    SP_ASSIGN_OR_RETURN(auto inner, inner_->CreateContext());
    return std::unique_ptr<runtime::ContextImpl>(std::make_unique<CountingContext>(std::move(inner)));
  }

 private:
  std::unique_ptr<runtime::BackendEngine> inner_;
};

SAMPAN_REGISTER_TEST_BACKEND(counting_test, CountingEngine)

class RateLimitedCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ = FreshTestDirectory("rate_limit");
    // Two models, one instance each, sharing resource R (count 1 each).
    for (const char* model : {"a", "b"}) {
      fs::create_directories(repo_ / model / "1");
      std::ofstream(repo_ / model / "1" / "model.onnx", std::ios::binary) << AddModel({4}, true, 1.0f);
      std::ofstream(repo_ / model / "config.pbtxt")
          << "max_batch_size: 1\nsampan { backend: \"counting_test\" }\n"
             "instance_group [{ kind: KIND_CPU count: 1\n"
             "  rate_limiter { resources [{ name: \"R\" count: 1 }] priority: 1 } }]\n";
    }
  }
  void TearDown() override {
    core_.reset();
    fs::remove_all(repo_);
  }
  void Start(const std::string& mode, std::vector<std::string> flags = {}) {
    CoreOptions o;
    o.repository = repo_.string();
    o.default_backend = "reference";
    o.threads_per_instance = 1;
    o.rate_limiter.execution_count = mode == "execution_count";
    for (const auto& f : flags) o.rate_limiter.resources.push_back(*ParseRateLimitResource(f));
    auto core = Core::Start(o);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    core_ = std::move(core).value();
  }
  // Sends `n` requests to each model at once; returns the most runs that were in progress together.
  int MostAtOnce(int n) {
    g_running = 0;
    g_most_running = 0;
    std::atomic<int> answered{0}, failed{0};
    for (int i = 0; i < n; ++i)
      for (const char* model : {"a", "b"}) {
        InferRequest r;
        r.model_name = model;
        InferTensor t;
        t.name = "x";
        t.dtype = DType::kFloat32;
        t.shape = {1, 4};
        t.data = Tensor::FromVector(DType::kFloat32, std::vector<float>{1, 2, 3, 4}, t.shape);
        r.inputs.push_back(std::move(t));
        core_->Infer(std::move(r), [&](Result<InferResponse> res) {
          if (!res.ok()) failed++;
          answered++;
        });
      }
    for (int spin = 0; answered < 2 * n && spin < 3000; ++spin) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(answered.load(), 2 * n);
    EXPECT_EQ(failed.load(), 0);
    return g_most_running.load();
  }

  fs::path repo_;
  std::unique_ptr<Core> core_;
};

TEST_F(RateLimitedCoreTest, TwoModelsSharingAResourceOfOneNeverRunTogether) {
  Start("execution_count");
  ASSERT_TRUE(core_->Ready());
  EXPECT_EQ(MostAtOnce(8), 1);
}

TEST_F(RateLimitedCoreTest, OffMeansNoLimiting) {
  Start("off");
  ASSERT_TRUE(core_->Ready());
  EXPECT_EQ(MostAtOnce(8), 2);
}

TEST_F(RateLimitedCoreTest, TheFlagSetsTheCount) {
  Start("execution_count", {"R:2"});
  ASSERT_TRUE(core_->Ready());
  EXPECT_EQ(MostAtOnce(8), 2);
}

TEST_F(RateLimitedCoreTest, AModelNeedingMoreThanTheFlagGivesFailsToLoad) {
  std::ofstream(repo_ / "b" / "config.pbtxt")
      << "max_batch_size: 1\nsampan { backend: \"counting_test\" }\n"
         "instance_group [{ kind: KIND_CPU rate_limiter { resources [{ name: \"R\" count: 3 }] } }]\n";
  Start("execution_count", {"R:2"});
  std::map<std::string, std::string> reasons;
  for (const auto& e : core_->RepositoryIndex(false)) reasons[e.name] = e.reason;
  EXPECT_EQ(reasons["a"], "");
  EXPECT_CONTAINS(reasons["b"],
                  "instance_group[0].rate_limiter: resource 'R' on device 0 is limited to 2 by --rate-limit-resource");
  EXPECT_EQ(*core_->ModelReady("a", ""), true);
}

}  // namespace
}  // namespace sampan::server
