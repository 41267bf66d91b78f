// The Scheduler with the SLO batcher on (latency_slo_us, no preferred sizes, no queue delay):
// real threads and an executor that takes a known time. It runs at once at low load, waits for
// a larger batch while the deadline allows when the arrival rate asks for one, sheds only the
// jobs that are already late (REJECT) or moves them behind the others (DELAY), honours the
// client's timeout, learns each bucket's execution time, and gives way to hand-set knobs.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "server/scheduler/scheduler.h"

namespace sampan::server::scheduler {
namespace {

using namespace std::chrono_literals;

class SloJob final : public Job {
 public:
  SloJob(int id, std::string key = "") : id(id) { shape_key = std::move(key); }
  ~SloJob() override {
    if (!done.exchange(true)) promise.set_value(Internal("job destroyed without an answer"));
  }
  void Fail(const Status& s) override {
    if (!done.exchange(true)) promise.set_value(s);
  }
  void Succeed() {
    *finished = Clock::now();
    if (!done.exchange(true)) promise.set_value(Status::Ok());
  }
  int id;
  bool blocker = false;
  //! Outlives the job (the scheduler destroys it after the batch): read after the result.
  std::shared_ptr<Clock::time_point> finished = std::make_shared<Clock::time_point>();
  std::atomic<bool> done{false};
  std::promise<Status> promise;
};

// Runs every batch for `sleep`, records the batches (ids), and holds the instance on a blocker.
class Device {
 public:
  explicit Device(std::chrono::microseconds sleep) : sleep_(sleep) {}
  Executor executor() {
    return [this](int, std::vector<JobPtr>& batch) {
      std::vector<int> ids;
      bool block = false;
      for (auto& j : batch) {
        auto* t = static_cast<SloJob*>(j.get());
        ids.push_back(t->id);
        block = block || t->blocker;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        batches_.push_back(ids);
        blocked_ = block;
      }
      cv_.notify_all();
      if (block) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return released_; });
      }
      std::this_thread::sleep_for(sleep_);
      for (auto& j : batch) static_cast<SloJob*>(j.get())->Succeed();
    };
  }
  void WaitBlocked() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return blocked_; });
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  std::vector<std::vector<int>> batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }

 private:
  std::chrono::microseconds sleep_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<int>> batches_;
  bool blocked_ = false, released_ = false;
};

SchedulerOptions SloOptions(uint64_t slo_us, int64_t max_batch, std::map<int64_t, std::vector<double>> measured) {
  SchedulerOptions o;
  o.name = "model 'm' version 1";
  o.max_batch_size = max_batch;
  o.dynamic_batching = true;
  o.latency_slo_us = slo_us;
  o.measured_us = std::move(measured);
  return o;
}

struct Submitted {
  std::shared_ptr<Clock::time_point> finished;
  std::future<Status> result;
  Clock::time_point at;
};

Submitted Submit(Scheduler& s, int id, std::string key = "", uint64_t timeout_us = 0, bool blocker = false) {
  auto job = std::make_unique<SloJob>(id, std::move(key));
  job->timeout_us = timeout_us;
  job->blocker = blocker;
  Submitted r{job->finished, job->promise.get_future(), Clock::now()};
  EXPECT_TRUE(s.Enqueue(std::move(job)).ok());
  return r;
}

TEST(SchedulerSloTest, HandSetKnobsWin) {
  Device dev(0us);
  auto o = SloOptions(10000, 8, {});
  o.preferred_batch_sizes = {4};
  EXPECT_FALSE(Scheduler(o, dev.executor()).slo_enabled());
  o.preferred_batch_sizes.clear();
  o.max_queue_delay_us = 100;
  EXPECT_FALSE(Scheduler(o, dev.executor()).slo_enabled());
  o.max_queue_delay_us = 0;
  Scheduler s(o, dev.executor());
  EXPECT_TRUE(s.slo_enabled());
  EXPECT_EQ(s.Slo().latency_slo_us, 10000u);
}

TEST(SchedulerSloTest, RunsAtOnceAtLowLoad) {
  Device dev(1000us);
  Scheduler s(SloOptions(100000, 64, {{1, {1000}}, {64, {1000}}}), dev.executor());
  auto a = Submit(s, 1);
  ASSERT_TRUE(a.result.get().ok());
  EXPECT_LT(*a.finished - a.at, 40ms);  // no reason to wait: nothing else arrives
}

TEST(SchedulerSloTest, WaitsForALargerBatchWhileTheDeadlineAllows) {
  Device dev(1000us);
  // A 300 ms SLO (15 ms tail, which also absorbs a loaded test machine's late wake-ups): a
  // 64-row batch takes about 1 ms, so a job may wait ~283 ms for company.
  auto o = SloOptions(300000, 64, {{1, {1000}}, {64, {1000}}});
  o.buckets = {1, 64};
  Scheduler s(o, dev.executor());
  // A burst of 300 arrivals: the arrival rate asks for 64-row batches from now on.
  std::vector<Submitted> burst;
  for (int i = 0; i < 300; ++i) burst.push_back(Submit(s, 1000 + i, "burst"));
  for (auto& b : burst) {
    Status st = b.result.get();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  // Three more (another shape): they wait for company until their latest start, then run together.
  std::vector<Submitted> late;
  for (int i = 0; i < 3; ++i) late.push_back(Submit(s, i, "x"));
  for (auto& l : late) ASSERT_TRUE(l.result.get().ok());
  const auto waited = *late[0].finished - late[0].at;
  const auto batches = dev.batches();
  EXPECT_GT(waited, 150ms) << std::chrono::duration<double, std::milli>(waited).count() << " ms";
  EXPECT_LT(waited, 300ms) << std::chrono::duration<double, std::milli>(waited).count() << " ms";
  EXPECT_EQ(batches.back(), (std::vector<int>{0, 1, 2}));
  EXPECT_GT(s.Slo().waits, 0u);
  EXPECT_EQ(s.Slo().shed, 0u);
}

TEST(SchedulerSloTest, ShedsOnlyTheJobsThatAreAlreadyLate) {
  Device dev(0us);
  std::atomic<int> shed{0};
  auto o = SloOptions(20000, 8, {{1, {2000}}});  // a 1-row batch takes 2 ms: late 17 ms after arrival
  o.on_shed = [&] { ++shed; };
  Scheduler s(o, dev.executor());
  auto blocker = Submit(s, 0, "", 0, /*blocker=*/true);
  dev.WaitBlocked();
  auto a = Submit(s, 1);
  std::this_thread::sleep_for(25ms);  // a can no longer make it
  auto b = Submit(s, 2);              // b can
  dev.Release();
  Status sa = a.result.get();
  EXPECT_EQ(sa.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(sa.message().find("can no longer meet the latency SLO"), std::string::npos) << sa.message();
  EXPECT_TRUE(b.result.get().ok());
  EXPECT_TRUE(blocker.result.get().ok());
  EXPECT_EQ(shed.load(), 1);
  EXPECT_EQ(s.Slo().shed, 1u);
}

TEST(SchedulerSloTest, UnderDelayTheLateJobRunsBehindTheOthers) {
  Device dev(0us);
  std::atomic<int> shed{0};
  auto o = SloOptions(20000, 8, {{1, {2000}}});
  o.default_policy.delay_on_timeout = true;
  o.on_shed = [&] { ++shed; };
  Scheduler s(o, dev.executor());
  auto blocker = Submit(s, 0, "", 0, true);
  dev.WaitBlocked();
  auto a = Submit(s, 1);
  std::this_thread::sleep_for(25ms);
  auto b = Submit(s, 2);
  dev.Release();
  EXPECT_TRUE(a.result.get().ok());  // delayed, not failed
  EXPECT_TRUE(b.result.get().ok());
  EXPECT_EQ(shed.load(), 1);
  // b runs first, or a rides behind b in the same batch.
  const auto batches = dev.batches();
  ASSERT_GE(batches.size(), 2u);
  EXPECT_EQ(batches[1].front(), 2);
}

TEST(SchedulerSloTest, TheClientTimeoutTightensTheDeadline) {
  Device dev(0us);
  Scheduler s(SloOptions(1000000, 8, {{1, {1000}}}), dev.executor());  // a 1 s SLO
  auto blocker = Submit(s, 0, "", 0, true);
  dev.WaitBlocked();
  auto a = Submit(s, 1, "", /*timeout_us=*/5000);
  std::this_thread::sleep_for(20ms);
  dev.Release();
  EXPECT_EQ(a.result.get().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(blocker.result.get().ok());
}

TEST(SchedulerSloTest, LearnsEachBucketsTimeFromTheExecutions) {
  Device dev(3000us);
  Scheduler s(SloOptions(200000, 8, {}), dev.executor());
  EXPECT_EQ(s.Slo().capacity_rows_per_s, 0);  // nothing measured yet
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Submit(s, i).result.get().ok());
  while (s.pending() > 0) std::this_thread::sleep_for(1ms);  // the last execution is recorded
  const SloSnapshot snap = s.Slo();
  ASSERT_EQ(snap.buckets.size(), 1u);
  EXPECT_EQ(snap.buckets[0].rows, 1);
  EXPECT_EQ(snap.buckets[0].executions, 10u);
  EXPECT_EQ(snap.buckets[0].samples, 10u);
  EXPECT_GE(snap.buckets[0].mean_us, 3000);
  EXPECT_GT(snap.capacity_rows_per_s, 0);
  EXPECT_EQ(snap.shed, 0u);
}

}  // namespace
}  // namespace sampan::server::scheduler
