// The scheduler's inline runs (scheduler.h, "Inline runs"): a submitting thread runs its job on
// an idle instance only when nothing is queued, the job would run alone at once and recent
// executions were short; never more executions than instances; Stop() waits for them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "server/scheduler/scheduler.h"

namespace sampan::server::scheduler {
namespace {

using namespace std::chrono_literals;

class InlineJob final : public Job {
 public:
  explicit InlineJob(int64_t rows_ = 1) { rows = rows_; }
  ~InlineJob() override {
    if (!done.exchange(true)) promise.set_value(Internal("job destroyed without an answer"));
  }
  void Fail(const Status& s) override {
    if (!done.exchange(true)) promise.set_value(s);
  }
  void Succeed() {
    if (!done.exchange(true)) promise.set_value(Status::Ok());
  }
  std::atomic<bool> done{false};
  std::promise<Status> promise;
};

// Records where each job ran, and how many executions overlapped (in all and per instance).
struct Runs {
  std::mutex mu;
  std::vector<std::thread::id> threads;
  std::vector<int> instances;
  std::vector<Clock::time_point> enqueued;
  std::atomic<int> running{0}, max_running{0};
  std::atomic<int> per_instance[4] = {};
  std::atomic<bool> overlap_on_instance{false};
  std::atomic<bool> hold{false};

  Executor executor() {
    return [this](int instance, std::vector<JobPtr>& batch) {
      const int now = ++running;
      for (int m = max_running.load(); now > m && !max_running.compare_exchange_weak(m, now);) {
      }
      if (++per_instance[instance] > 1) overlap_on_instance = true;
      {
        std::lock_guard<std::mutex> lock(mu);
        threads.push_back(std::this_thread::get_id());
        instances.push_back(instance);
        for (auto& j : batch) enqueued.push_back(j->enqueued);
      }
      while (hold.load()) std::this_thread::sleep_for(1ms);
      --per_instance[instance];
      --running;
      for (auto& j : batch) static_cast<InlineJob*>(j.get())->Succeed();
    };
  }
  std::thread::id last_thread() {
    std::lock_guard<std::mutex> lock(mu);
    return threads.back();
  }
};

SchedulerOptions Inline(int instances = 1) {
  SchedulerOptions o;
  o.name = "model 'inline' version 1";
  o.instances = instances;
  o.inline_max_us = 1'000'000;
  return o;
}

// Submits with an InlineRun; returns whether it was handed back to run here (and runs it).
bool SubmitInline(Scheduler& s, std::future<Status>* answer, bool run_now = true) {
  auto job = std::make_unique<InlineJob>();
  *answer = job->promise.get_future();
  InlineRun run;
  EXPECT_TRUE(s.Enqueue(std::move(job), nullptr, &run).ok());
  const bool taken = static_cast<bool>(run);
  if (run_now) run.Run();
  return taken;
}

// Until the instance that answered has also been given back (answers come before that).
void WaitIdle(Scheduler& s) {
  while (s.pending() != 0) std::this_thread::sleep_for(100us);
}

// One execution on the instance thread, so that the scheduler has measured one.
void Warm(Scheduler& s) {
  auto job = std::make_unique<InlineJob>();
  auto answer = job->promise.get_future();
  ASSERT_TRUE(s.Enqueue(std::move(job)).ok());
  ASSERT_TRUE(answer.get().ok());
  WaitIdle(s);
}

TEST(SchedulerInlineTest, RunsOnTheSubmittingThreadOnceAnExecutionWasMeasured) {
  Runs runs;
  Scheduler s(Inline(), runs.executor());
  std::future<Status> first;
  EXPECT_FALSE(SubmitInline(s, &first)) << "nothing measured yet: the instance thread runs it";
  ASSERT_TRUE(first.get().ok());
  EXPECT_NE(runs.last_thread(), std::this_thread::get_id());
  WaitIdle(s);

  auto job = std::make_unique<InlineJob>();
  auto answer = job->promise.get_future();
  const auto before = Clock::now();
  InlineRun run;
  ASSERT_TRUE(s.Enqueue(std::move(job), nullptr, &run).ok());
  ASSERT_TRUE(run);
  EXPECT_EQ(s.pending(), 1u) << "an inline run counts as executing";
  EXPECT_EQ(s.queued(), 0u);
  run.Run();
  EXPECT_FALSE(run);
  ASSERT_TRUE(answer.get().ok());
  EXPECT_EQ(runs.last_thread(), std::this_thread::get_id());
  EXPECT_EQ(s.pending(), 0u);
  std::lock_guard<std::mutex> lock(runs.mu);
  EXPECT_GE(runs.enqueued.back(), before) << "the job's enqueue time is set, for its queue statistics";
  EXPECT_EQ(runs.instances.back(), 0);
}

TEST(SchedulerInlineTest, OffByDefault) {
  Runs runs;
  SchedulerOptions o = Inline();
  o.inline_max_us = 0;
  Scheduler s(o, runs.executor());
  Warm(s);
  std::future<Status> answer;
  EXPECT_FALSE(SubmitInline(s, &answer));
  ASSERT_TRUE(answer.get().ok());
  EXPECT_NE(runs.last_thread(), std::this_thread::get_id());
}

TEST(SchedulerInlineTest, NotWhenRecentExecutionsWereLong) {
  Runs runs;
  SchedulerOptions o = Inline();
  o.inline_max_us = 1;  // any execution here takes longer than 1 us
  Scheduler s(o, runs.executor());
  runs.hold = true;  // the warm-up execution takes milliseconds
  auto job = std::make_unique<InlineJob>();
  auto warm = job->promise.get_future();
  ASSERT_TRUE(s.Enqueue(std::move(job)).ok());
  std::this_thread::sleep_for(5ms);
  runs.hold = false;
  ASSERT_TRUE(warm.get().ok());
  WaitIdle(s);
  std::future<Status> answer;
  EXPECT_FALSE(SubmitInline(s, &answer));
  ASSERT_TRUE(answer.get().ok());
}

TEST(SchedulerInlineTest, NotWhileTheInstanceIsBusyNorWhileJobsAreQueued) {
  Runs runs;
  Scheduler s(Inline(), runs.executor());
  Warm(s);
  runs.hold = true;
  auto blocker = std::make_unique<InlineJob>();
  auto blocked = blocker->promise.get_future();
  ASSERT_TRUE(s.Enqueue(std::move(blocker)).ok());
  while (runs.running.load() == 0) std::this_thread::sleep_for(1ms);
  std::future<Status> a, b;
  EXPECT_FALSE(SubmitInline(s, &a)) << "the only instance is busy";
  EXPECT_FALSE(SubmitInline(s, &b)) << "a job is queued: running this one first would overtake it";
  runs.hold = false;
  for (auto* f : {&blocked, &a, &b}) ASSERT_TRUE(f->get().ok());
  EXPECT_EQ(runs.max_running.load(), 1);
}

TEST(SchedulerInlineTest, NotWhenTheBatcherWouldWaitForMoreJobs) {
  Runs runs;
  SchedulerOptions o = Inline();
  o.max_batch_size = 4;
  o.dynamic_batching = true;
  o.max_queue_delay_us = 2000;
  Scheduler s(o, runs.executor());
  Warm(s);  // waits out the delay
  std::future<Status> answer;
  EXPECT_FALSE(SubmitInline(s, &answer)) << "a batch of 1 of 4 waits up to 2 ms for company";
  ASSERT_TRUE(answer.get().ok());
  WaitIdle(s);
  // A full batch runs at once: inline.
  auto full = std::make_unique<InlineJob>(4);
  auto full_answer = full->promise.get_future();
  InlineRun run;
  ASSERT_TRUE(s.Enqueue(std::move(full), nullptr, &run).ok());
  EXPECT_TRUE(run);
  run.Run();
  ASSERT_TRUE(full_answer.get().ok());
}

TEST(SchedulerInlineTest, NotFromAThreadThatRunsAModel) {
  Runs runs;
  Scheduler s(Inline(), runs.executor());
  Warm(s);
  InModelScope in_model;
  EXPECT_TRUE(InModelThread());
  std::future<Status> answer;
  EXPECT_FALSE(SubmitInline(s, &answer));
  ASSERT_TRUE(answer.get().ok());
}

TEST(SchedulerInlineTest, NeverMoreExecutionsThanInstances) {
  Runs runs;
  Scheduler s(Inline(2), runs.executor());
  Warm(s);
  std::atomic<int> inline_runs{0};
  std::vector<std::thread> submitters;
  for (int t = 0; t < 6; ++t)
    submitters.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        std::future<Status> answer;
        if (SubmitInline(s, &answer)) ++inline_runs;
        EXPECT_TRUE(answer.get().ok());
      }
    });
  for (auto& t : submitters) t.join();
  EXPECT_GT(inline_runs.load(), 0);
  EXPECT_LE(runs.max_running.load(), 2);
  EXPECT_FALSE(runs.overlap_on_instance.load());
  std::lock_guard<std::mutex> lock(runs.mu);
  EXPECT_EQ(runs.instances.size(), 1u + 6 * 300);
}

TEST(SchedulerInlineTest, StopWaitsForAnInlineRunAndAnUnrunOneRunsWhenDestroyed) {
  Runs runs;
  Scheduler s(Inline(), runs.executor());
  Warm(s);
  auto job = std::make_unique<InlineJob>();
  auto answer = job->promise.get_future();
  auto run = std::make_unique<InlineRun>();
  ASSERT_TRUE(s.Enqueue(std::move(job), nullptr, run.get()).ok());
  ASSERT_TRUE(*run);
  auto stopped = std::async(std::launch::async, [&] { s.Stop(); });
  EXPECT_EQ(stopped.wait_for(50ms), std::future_status::timeout) << "the instance is still taken";
  run.reset();  // runs it
  ASSERT_TRUE(answer.get().ok());
  stopped.get();
  auto late = std::make_unique<InlineJob>();
  auto refused = late->promise.get_future();
  InlineRun none;
  EXPECT_EQ(s.Enqueue(std::move(late), nullptr, &none).code(), StatusCode::kUnavailable);
  EXPECT_FALSE(none);
  EXPECT_EQ(refused.get().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sampan::server::scheduler
