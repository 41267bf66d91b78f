// The scheduler alone (no tensors): batch formation, preferred sizes, the
// queue delay, priorities, queue timeouts (REJECT and DELAY), queue size
// limits, cancellation, shape keys, draining, and results routed to the
// right job under many concurrent submitters.
#include "server/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace sampan::server::scheduler {
namespace {

using namespace std::chrono_literals;

// A job carrying a value; the executor writes value * 2 + batch size marker into `result`.
class TestJob final : public Job {
 public:
  TestJob(int id, int64_t rows_, std::string key = "") : id(id) {
    rows = rows_;
    shape_key = std::move(key);
  }
  ~TestJob() override {
    if (!done.exchange(true)) promise.set_value(Internal("job destroyed without an answer"));
  }
  void Fail(const Status& s) override {
    if (!done.exchange(true)) promise.set_value(s);
  }
  void Succeed(int64_t r) {
    result = r;
    if (!done.exchange(true)) promise.set_value(Status::Ok());
  }
  int id;
  bool blocker = false;
  int64_t result = -1;
  std::atomic<bool> done{false};
  std::promise<Status> promise;
};

// Records every batch (job ids in order) and can hold the instance on a "blocker" job.
class Recorder {
 public:
  Executor executor() {
    return [this](int instance, std::vector<JobPtr>& batch) {
      std::vector<int> ids;
      bool block = false;
      for (auto& j : batch) {
        auto* t = static_cast<TestJob*>(j.get());
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
      for (auto& j : batch) {
        auto* t = static_cast<TestJob*>(j.get());
        t->Succeed(t->id * 2);
      }
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
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<int>> batches_;
  bool blocked_ = false;
  bool released_ = false;
};

struct Submitted {
  std::future<Status> status;
  TestJob* job;
};

Submitted Submit(Scheduler& s, std::unique_ptr<TestJob> job, Status* enqueue_status = nullptr) {
  Submitted out{job->promise.get_future(), job.get()};
  Status st = s.Enqueue(std::move(job));
  if (enqueue_status) *enqueue_status = st;
  return out;
}

// Occupies the only instance: a full batch (so it runs at once) that waits for Release().
Submitted Block(Scheduler& s, Recorder& rec, int64_t rows, const std::string& key = "blocker") {
  auto job = std::make_unique<TestJob>(-1, rows, key);
  job->blocker = true;
  auto sub = Submit(s, std::move(job));
  rec.WaitBlocked();
  return sub;
}

SchedulerOptions Batching(int64_t max_batch, uint64_t delay_us) {
  SchedulerOptions o;
  o.name = "model 'test' version 1";
  o.max_batch_size = max_batch;
  o.dynamic_batching = true;
  o.max_queue_delay_us = delay_us;
  return o;
}

TEST(SchedulerTest, WithoutDynamicBatchingEachJobRunsAlone) {
  Recorder rec;
  SchedulerOptions o;
  o.max_batch_size = 8;
  Scheduler s(o, rec.executor());
  std::vector<Submitted> subs;
  for (int i = 0; i < 10; ++i) subs.push_back(Submit(s, std::make_unique<TestJob>(i, 1)));
  for (auto& sub : subs) EXPECT_TRUE(sub.status.get().ok());
  s.Stop();
  auto b = rec.batches();
  ASSERT_EQ(b.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(b[i], std::vector<int>{i});  // FIFO
}

TEST(SchedulerTest, FullBatchesRunWithoutWaitingForTheDelay) {
  Recorder rec;
  Scheduler s(Batching(8, 10'000'000), rec.executor());  // 10 s delay: only a full batch runs early
  Submitted blocker = Block(s, rec, 8);
  std::vector<Submitted> subs;
  for (int i = 0; i < 16; ++i) subs.push_back(Submit(s, std::make_unique<TestJob>(i, 1)));
  const auto t0 = std::chrono::steady_clock::now();
  rec.Release();
  for (auto& sub : subs) EXPECT_TRUE(sub.status.get().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  auto b = rec.batches();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1], (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(b[2], (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_TRUE(blocker.status.get().ok());
}

TEST(SchedulerTest, RowsCountTowardsTheBatchAndABatchNeverExceedsMax) {
  Recorder rec;
  Scheduler s(Batching(8, 10'000'000), rec.executor());
  Block(s, rec, 8);
  std::vector<Submitted> subs;
  // 3 + 3 + 3: the third does not fit beside the first two, so {0,1} run (6 rows) and {2} later.
  for (int i = 0; i < 3; ++i) subs.push_back(Submit(s, std::make_unique<TestJob>(i, 3)));
  rec.Release();
  EXPECT_TRUE(subs[0].status.get().ok());
  EXPECT_TRUE(subs[1].status.get().ok());
  s.Stop();  // the lone {2} runs when the scheduler drains
  EXPECT_TRUE(subs[2].status.get().ok());
  auto b = rec.batches();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1], (std::vector<int>{0, 1}));
  EXPECT_EQ(b[2], (std::vector<int>{2}));
}

TEST(SchedulerTest, PreferredBatchSizeRunsAtOnceAndTheRestWaitsForTheDelay) {
  Recorder rec;
  SchedulerOptions o = Batching(8, 300'000);  // 300 ms
  o.preferred_batch_sizes = {4};
  Scheduler s(o, rec.executor());
  Block(s, rec, 8);
  std::vector<Submitted> subs;
  for (int i = 0; i < 6; ++i) subs.push_back(Submit(s, std::make_unique<TestJob>(i, 1)));
  const auto t0 = std::chrono::steady_clock::now();
  rec.Release();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(subs[i].status.get().ok());
  const auto first = std::chrono::steady_clock::now() - t0;
  for (int i = 4; i < 6; ++i) EXPECT_TRUE(subs[i].status.get().ok());
  auto b = rec.batches();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1], (std::vector<int>{0, 1, 2, 3}));  // the preferred size, not all 6
  EXPECT_EQ(b[2], (std::vector<int>{4, 5}));
  EXPECT_LT(first, 250ms);  // the preferred batch did not wait for the delay
}

TEST(SchedulerTest, PartialBatchWaitsForTheQueueDelay) {
  Recorder rec;
  Scheduler s(Batching(8, 300'000), rec.executor());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Submitted> subs;
  for (int i = 0; i < 3; ++i) subs.push_back(Submit(s, std::make_unique<TestJob>(i, 1)));
  for (auto& sub : subs) EXPECT_TRUE(sub.status.get().ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 290ms);
  auto b = rec.batches();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0], (std::vector<int>{0, 1, 2}));
}

TEST(SchedulerTest, HigherPriorityRunsFirst) {
  Recorder rec;
  SchedulerOptions o = Batching(1, 0);
  o.priority_levels = 2;
  o.default_priority = 2;
  Scheduler s(o, rec.executor());
  Block(s, rec, 1);
  std::vector<Submitted> subs;
  for (int i = 0; i < 2; ++i) subs.push_back(Submit(s, std::make_unique<TestJob>(i, 1)));  // default: level 2
  for (int i = 2; i < 4; ++i) {
    auto j = std::make_unique<TestJob>(i, 1);
    j->priority = 1;
    subs.push_back(Submit(s, std::move(j)));
  }
  rec.Release();
  for (auto& sub : subs) EXPECT_TRUE(sub.status.get().ok());
  auto b = rec.batches();
  ASSERT_EQ(b.size(), 5u);
  EXPECT_EQ(b[1], std::vector<int>{2});
  EXPECT_EQ(b[2], std::vector<int>{3});
  EXPECT_EQ(b[3], std::vector<int>{0});
  EXPECT_EQ(b[4], std::vector<int>{1});
  // A priority outside the levels is refused.
  auto bad = std::make_unique<TestJob>(9, 1);
  bad->priority = 3;
  Status st;
  auto sub = Submit(s, std::move(bad), &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sub.status.get().code(), StatusCode::kInvalidArgument);
}

TEST(SchedulerTest, QueueTimeoutRejects) {
  Recorder rec;
  SchedulerOptions o = Batching(4, 0);
  o.default_policy.default_timeout_us = 50'000;
  o.default_policy.allow_timeout_override = true;
  Scheduler s(o, rec.executor());
  Block(s, rec, 4);
  auto expires = Submit(s, std::make_unique<TestJob>(0, 1));
  auto patient = std::make_unique<TestJob>(1, 1);
  patient->timeout_us = 60'000'000;  // overrides the 50 ms default
  auto survives = Submit(s, std::move(patient));
  std::this_thread::sleep_for(150ms);
  rec.Release();
  Status st = expires.status.get();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("timed out"), std::string::npos);
  EXPECT_TRUE(survives.status.get().ok());
  auto b = rec.batches();
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1], std::vector<int>{1});
}

TEST(SchedulerTest, TimeoutOverrideIgnoredUnlessAllowed) {
  Recorder rec;
  SchedulerOptions o = Batching(4, 0);
  o.default_policy.default_timeout_us = 50'000;  // allow_timeout_override = false
  Scheduler s(o, rec.executor());
  Block(s, rec, 4);
  auto j = std::make_unique<TestJob>(0, 1);
  j->timeout_us = 60'000'000;
  auto sub = Submit(s, std::move(j));
  std::this_thread::sleep_for(150ms);
  rec.Release();
  EXPECT_EQ(sub.status.get().code(), StatusCode::kDeadlineExceeded);
}

TEST(SchedulerTest, QueueTimeoutDelayMovesTheJobBehindTheOthers) {
  Recorder rec;
  SchedulerOptions o = Batching(1, 0);
  o.default_policy.delay_on_timeout = true;
  o.default_policy.default_timeout_us = 50'000;
  o.default_policy.allow_timeout_override = true;
  Scheduler s(o, rec.executor());
  Block(s, rec, 1);
  auto late = Submit(s, std::make_unique<TestJob>(0, 1));  // will time out: delayed, not rejected
  std::this_thread::sleep_for(120ms);
  auto j = std::make_unique<TestJob>(1, 1);
  j->timeout_us = 60'000'000;
  auto fresh = Submit(s, std::move(j));
  rec.Release();
  EXPECT_TRUE(late.status.get().ok());
  EXPECT_TRUE(fresh.status.get().ok());
  auto b = rec.batches();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1], std::vector<int>{1});
  EXPECT_EQ(b[2], std::vector<int>{0});
}

TEST(SchedulerTest, FullQueueIsRefusedWithAClearError) {
  Recorder rec;
  SchedulerOptions o = Batching(4, 10'000'000);
  o.default_policy.max_queue_size = 2;
  Scheduler s(o, rec.executor());
  Block(s, rec, 4);
  Status st;
  auto a = Submit(s, std::make_unique<TestJob>(0, 1), &st);
  EXPECT_TRUE(st.ok());
  auto b = Submit(s, std::make_unique<TestJob>(1, 1), &st);
  EXPECT_TRUE(st.ok());
  auto c = Submit(s, std::make_unique<TestJob>(2, 1), &st);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("maximum queue size"), std::string::npos) << st.message();
  EXPECT_EQ(c.status.get().code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.queued(), 2u);
  rec.Release();
  s.Stop();
  EXPECT_TRUE(a.status.get().ok());
  EXPECT_TRUE(b.status.get().ok());
}

TEST(SchedulerTest, CancelledJobsNeverRun) {
  Recorder rec;
  Scheduler s(Batching(4, 0), rec.executor());
  Block(s, rec, 4);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  auto j = std::make_unique<TestJob>(0, 1);
  j->cancelled = flag;
  auto cancelled = Submit(s, std::move(j));
  auto kept = Submit(s, std::make_unique<TestJob>(1, 1));
  flag->store(true);
  rec.Release();
  EXPECT_EQ(cancelled.status.get().code(), StatusCode::kCancelled);
  EXPECT_TRUE(kept.status.get().ok());
  for (const auto& batch : rec.batches())
    for (int id : batch) EXPECT_NE(id, 0);
}

TEST(SchedulerTest, OnlyEqualShapeKeysBatchTogether) {
  Recorder rec;
  Scheduler s(Batching(8, 100'000), rec.executor());
  Block(s, rec, 8);
  std::vector<Submitted> subs;
  for (int i = 0; i < 8; ++i) subs.push_back(Submit(s, std::make_unique<TestJob>(i, 1, i % 2 ? "[3]" : "[5]")));
  rec.Release();
  for (auto& sub : subs) EXPECT_TRUE(sub.status.get().ok());
  auto b = rec.batches();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1], (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(b[2], (std::vector<int>{1, 3, 5, 7}));
}

TEST(SchedulerTest, StopRunsWhatIsQueuedThenRefuses) {
  Recorder rec;
  Scheduler s(Batching(4, 60'000'000), rec.executor());  // would wait a minute for a full batch
  std::vector<Submitted> subs;
  for (int i = 0; i < 6; ++i) subs.push_back(Submit(s, std::make_unique<TestJob>(i, 1)));
  s.Stop();
  for (auto& sub : subs) EXPECT_TRUE(sub.status.get().ok());
  Status st;
  auto late = Submit(s, std::make_unique<TestJob>(9, 1), &st);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(late.status.get().code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.pending(), 0u);
}

TEST(SchedulerTest, ManyConcurrentSubmittersEachGetExactlyOneAnswer) {
  constexpr int kThreads = 16, kPerThread = 100, kJobs = kThreads * kPerThread;
  std::vector<std::atomic<int>> executed(kJobs);
  std::atomic<int> executions{0}, oversized{0};
  SchedulerOptions o = Batching(8, 2'000);
  o.instances = 3;
  Scheduler s(o, [&](int instance, std::vector<JobPtr>& batch) {
    executions++;
    if (batch.size() > 8) oversized++;
    for (auto& j : batch) {
      auto* t = static_cast<TestJob*>(j.get());
      executed[static_cast<size_t>(t->id)]++;
      t->Succeed(t->id);
    }
  });
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < kPerThread; ++k)
        if (!Submit(s, std::make_unique<TestJob>(t * kPerThread + k, 1)).status.get().ok()) failed++;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(oversized.load(), 0);
  for (int i = 0; i < kJobs; ++i) ASSERT_EQ(executed[static_cast<size_t>(i)].load(), 1) << "job " << i;
  EXPECT_LT(executions.load(), kJobs);  // 16 concurrent submitters do get batched
}

}  // namespace
}  // namespace sampan::server::scheduler

namespace sampan::server::scheduler {
namespace {

// Instance health: an instance whose device failed takes no more batches; the
// others go on; when none is left, the queue fails and new jobs are refused.
TEST(SchedulerTest, UnhealthyInstanceTakesNoBatchesWhileTheOthersServe) {
  std::atomic<bool> one_healthy{true};
  std::mutex mu;
  std::vector<int> ran_on;  // instance of each executed job
  SchedulerOptions o;
  o.instances = 2;
  o.instance_health = [&](int instance) {
    return instance == 1 && !one_healthy ? Internal("device 1 fell over") : Status::Ok();
  };
  Scheduler s(o, [&](int instance, std::vector<JobPtr>& batch) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ran_on.push_back(instance);
    }
    std::this_thread::sleep_for(1ms);  // keeps the queue long enough for both instances to take jobs
    for (auto& j : batch) static_cast<TestJob*>(j.get())->Succeed(0);
  });
  auto run_all = [&](int n, int first_id) {
    std::vector<Submitted> subs;
    for (int i = 0; i < n; ++i) subs.push_back(Submit(s, std::make_unique<TestJob>(first_id + i, 1)));
    for (auto& sub : subs) EXPECT_TRUE(sub.status.get().ok());
  };
  run_all(40, 0);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_GT(std::count(ran_on.begin(), ran_on.end(), 1), 0) << "both instances serve while healthy";
    ran_on.clear();
  }
  one_healthy = false;
  run_all(40, 100);
  s.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(ran_on.size(), 40u);
  EXPECT_EQ(std::count(ran_on.begin(), ran_on.end(), 1), 0) << "instance 1 is out of service";
  EXPECT_EQ(s.active_instances(), 1);
}

TEST(SchedulerTest, WhenTheLastInstanceRetiresQueuedJobsFailAndNewOnesAreRefused) {
  std::atomic<bool> healthy{true};
  Recorder rec;
  SchedulerOptions o;
  o.name = "model 'test' version 1";
  o.instance_health = [&](int) { return healthy ? Status::Ok() : Internal("illegal memory access (test)"); };
  Scheduler s(o, rec.executor());
  auto blocker = Block(s, rec, 1);
  std::vector<Submitted> queued;
  for (int i = 0; i < 5; ++i) queued.push_back(Submit(s, std::make_unique<TestJob>(i, 1)));
  healthy = false;  // the device fails while the blocker runs
  rec.Release();
  EXPECT_TRUE(blocker.status.get().ok()) << "the batch already running completes as the executor decides";
  for (auto& q : queued) {
    Status st = q.status.get();
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_NE(st.message().find("no healthy instance left"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("illegal memory access (test)"), std::string::npos) << st.message();
  }
  Status refused;
  auto late = Submit(s, std::make_unique<TestJob>(9, 1), &refused);
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.ToString();
  EXPECT_EQ(late.status.get().code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.active_instances(), 0);
  EXPECT_EQ(s.queued(), 0u);
  s.Stop();  // returns: nothing is left to run
  EXPECT_EQ(rec.batches().size(), 1u);
}

}  // namespace
}  // namespace sampan::server::scheduler
