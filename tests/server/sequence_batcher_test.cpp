// The sequence batcher alone (no tensors): one request of a sequence at a time
// and in order, START/END rules, direct slots with idle rows, the oldest
// strategy batching across sequences, the backlog, idle release, cancellation,
// stopping, and an instance going out of service.
#include "server/scheduler/sequence_batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace sampan::server::scheduler {
namespace {

using namespace std::chrono_literals;

class SeqJob final : public Job {
 public:
  SeqJob(std::string seq, int step, bool start = false, bool end = false) : step(step) {
    sequence = std::move(seq);
    sequence_start = start;
    sequence_end = end;
  }
  ~SeqJob() override {
    if (!done.exchange(true)) promise.set_value(Internal("job destroyed without an answer"));
  }
  void Fail(const Status& s) override {
    if (!done.exchange(true)) promise.set_value(s);
  }
  void Succeed() {
    if (!done.exchange(true)) promise.set_value(Status::Ok());
  }
  int step;
  std::atomic<bool> done{false};
  std::promise<Status> promise;
};

// Records batches as "seq:step" per row ("-" for an idle row) and counts each sequence's
// executions in its context (as the model version keeps state there).
class Recorder {
 public:
  explicit Recorder(std::chrono::milliseconds hold = 0ms) : hold_(hold) {}
  Executor executor() {
    return [this](int instance, std::vector<JobPtr>& batch) {
      std::vector<std::string> rows;
      for (auto& j : batch) {
        if (!j) {
          rows.push_back("-");
          continue;
        }
        auto* s = static_cast<SeqJob*>(j.get());
        if (!s->sequence_context->state || s->sequence_start) s->sequence_context->state = std::make_shared<int>(0);
        int& count = *static_cast<int*>(s->sequence_context->state.get());
        if (count != s->step) order_ok_ = false;  // steps of a sequence arrive in order, each once
        ++count;
        rows.push_back(s->sequence + ":" + std::to_string(s->step));
      }
      if (hold_ > 0ms) std::this_thread::sleep_for(hold_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        batches_.push_back({instance, rows});
      }
      for (auto& j : batch)
        if (j) static_cast<SeqJob*>(j.get())->Succeed();
    };
  }
  std::vector<std::pair<int, std::vector<std::string>>> batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  bool order_ok() const { return order_ok_; }

 private:
  std::chrono::milliseconds hold_;
  std::mutex mu_;
  std::vector<std::pair<int, std::vector<std::string>>> batches_;
  std::atomic<bool> order_ok_{true};
};

std::future<Status> Submit(SequenceBatcher& b, std::string seq, int step, bool start = false, bool end = false) {
  auto job = std::make_unique<SeqJob>(std::move(seq), step, start, end);
  auto f = job->promise.get_future();
  (void)b.Enqueue(std::move(job));
  return f;
}

Status Wait(std::future<Status>& f) {
  if (f.wait_for(10s) != std::future_status::ready) return DeadlineExceeded("no answer in 10 s");
  return f.get();
}

TEST(SequenceBatcher, StepsOfASequenceRunInOrderOneAtATime) {
  Recorder rec(1ms);
  SequenceOptions o;
  o.instances = 3;
  o.max_batch_size = 4;
  o.oldest = true;
  SequenceBatcher b(o, rec.executor());
  std::vector<std::future<Status>> fs;
  for (int seq = 0; seq < 6; ++seq)
    for (int step = 0; step < 20; ++step) fs.push_back(Submit(b, std::to_string(seq), step, step == 0, step == 19));
  for (auto& f : fs) ASSERT_TRUE(Wait(f).ok());
  EXPECT_TRUE(rec.order_ok());
  size_t rows = 0;
  for (const auto& [instance, batch] : rec.batches()) {
    std::set<std::string> seqs;
    for (const auto& r : batch)
      EXPECT_TRUE(seqs.insert(r.substr(0, r.find(':'))).second) << "two steps of one sequence in a batch";
    rows += batch.size();
  }
  EXPECT_EQ(rows, 120u);
  // Every sequence ended (a slot is freed just after its END request is answered).
  for (int i = 0; i < 200 && b.active_sequences() > 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(b.active_sequences(), 0u);
}

TEST(SequenceBatcher, StartRules) {
  Recorder rec;
  SequenceOptions o;
  SequenceBatcher b(o, rec.executor());
  auto none = Submit(b, "7", 0);
  Status st = Wait(none);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("must specify the START flag"), std::string::npos) << st.message();
  auto no_id = Submit(b, "", 0, true);
  EXPECT_NE(Wait(no_id).message().find("needs a sequence_id"), std::string::npos);
  auto a = Submit(b, "7", 0, true, true);
  ASSERT_TRUE(Wait(a).ok());
  auto after_end = Submit(b, "7", 1);
  EXPECT_EQ(Wait(after_end).code(), StatusCode::kInvalidArgument);
  auto again = Submit(b, "7", 0, true);
  auto more = Submit(b, "7", 1);
  auto restart = Submit(b, "7", 0, true);  // START on a running sequence: after its queued steps
  auto last = Submit(b, "7", 1, false, true);
  for (auto* f : {&again, &more, &restart, &last}) EXPECT_TRUE(Wait(*f).ok());
  EXPECT_TRUE(rec.order_ok());
}

TEST(SequenceBatcher, DirectRowsStayWithTheirSequenceAndIdleRowsAreNull) {
  Recorder rec;
  SequenceOptions o;
  o.instances = 1;
  o.max_batch_size = 3;
  SequenceBatcher b(o, rec.executor());
  for (const char* s : {"a", "b", "c"}) {
    auto f = Submit(b, s, 0, true);
    ASSERT_TRUE(Wait(f).ok());
  }
  // Only c (row 2) and a (row 0) have work: b's row 1 is idle.
  auto c1 = Submit(b, "c", 1);
  ASSERT_TRUE(Wait(c1).ok());
  auto a1 = Submit(b, "a", 1, false, true);
  ASSERT_TRUE(Wait(a1).ok());
  auto batches = rec.batches();
  ASSERT_EQ(batches.size(), 5u);
  EXPECT_EQ(batches[0].second, (std::vector<std::string>{"a:0"}));
  EXPECT_EQ(batches[1].second, (std::vector<std::string>{"-", "b:0"}));
  EXPECT_EQ(batches[2].second, (std::vector<std::string>{"-", "-", "c:0"}));
  EXPECT_EQ(batches[3].second, (std::vector<std::string>{"-", "-", "c:1"}));
  EXPECT_EQ(batches[4].second, (std::vector<std::string>{"a:1"}));
  // a ended: its row is free for the next sequence.
  auto d = Submit(b, "d", 0, true, true);
  ASSERT_TRUE(Wait(d).ok());
  EXPECT_EQ(rec.batches().back().second, (std::vector<std::string>{"d:0"}));
}

TEST(SequenceBatcher, MinimumSlotUtilizationWaitsForTheRows) {
  Recorder rec;
  SequenceOptions o;
  o.max_batch_size = 2;
  o.max_queue_delay_us = 2000000;
  o.minimum_slot_utilization = 1.0;
  SequenceBatcher b(o, rec.executor());
  auto a = Submit(b, "a", 0, true);
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(rec.batches().empty());  // one of two rows ready: waits
  auto c = Submit(b, "b", 0, true);
  ASSERT_TRUE(Wait(a).ok());
  ASSERT_TRUE(Wait(c).ok());
  ASSERT_EQ(rec.batches().size(), 1u);
  EXPECT_EQ(rec.batches()[0].second.size(), 2u);
}

TEST(SequenceBatcher, BacklogWaitsForAFreeSlot) {
  Recorder rec;
  SequenceOptions o;
  o.max_batch_size = 1;  // one slot
  SequenceBatcher b(o, rec.executor());
  auto a0 = Submit(b, "a", 0, true);
  ASSERT_TRUE(Wait(a0).ok());
  auto b0 = Submit(b, "b", 0, true, true);
  EXPECT_EQ(b0.wait_for(100ms), std::future_status::timeout);
  EXPECT_EQ(b.backlog_sequences(), 1u);
  auto a1 = Submit(b, "a", 1, false, true);
  ASSERT_TRUE(Wait(a1).ok());
  ASSERT_TRUE(Wait(b0).ok());
  EXPECT_EQ(b.backlog_sequences(), 0u);
}

TEST(SequenceBatcher, IdleSequencesAreReleased) {
  Recorder rec;
  SequenceOptions o;
  o.max_batch_size = 1;
  o.max_sequence_idle_us = 100000;
  SequenceBatcher b(o, rec.executor());
  auto a0 = Submit(b, "a", 0, true);
  ASSERT_TRUE(Wait(a0).ok());
  auto b0 = Submit(b, "b", 0, true, true);  // in the backlog until a is released
  ASSERT_TRUE(Wait(b0).ok());
  auto a1 = Submit(b, "a", 1);
  EXPECT_NE(Wait(a1).message().find("START"), std::string::npos);
}

TEST(SequenceBatcher, CancelledRequestsLeaveAndACancelledEndEndsTheSequence) {
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  SequenceOptions o;
  o.max_batch_size = 1;
  SequenceBatcher b(o, [&](int, std::vector<JobPtr>& batch) {
    gate.wait();
    for (auto& j : batch) static_cast<SeqJob*>(j.get())->Succeed();
  });
  auto a0 = Submit(b, "a", 0, true);  // holds the instance at the gate
  auto job = std::make_unique<SeqJob>("a", 1, false, true);
  job->cancelled = std::make_shared<std::atomic<bool>>(true);
  auto a1 = job->promise.get_future();
  ASSERT_TRUE(b.Enqueue(std::move(job)).ok());
  release.set_value();
  ASSERT_TRUE(Wait(a0).ok());
  EXPECT_EQ(Wait(a1).code(), StatusCode::kCancelled);
  for (int i = 0; i < 100 && b.active_sequences() > 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(b.active_sequences(), 0u);
}

TEST(SequenceBatcher, ACancelledStartPassesToTheNextRequest) {
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::vector<bool> starts;
  SequenceOptions o;
  o.max_batch_size = 1;
  SequenceBatcher b(o, [&](int, std::vector<JobPtr>& batch) {
    gate.wait();
    for (auto& j : batch) {
      starts.push_back(j->sequence_start);
      static_cast<SeqJob*>(j.get())->Succeed();
    }
  });
  auto x0 = Submit(b, "x", 0, true, true);  // holds the instance at the gate
  auto job = std::make_unique<SeqJob>("a", 0, true);
  job->cancelled = std::make_shared<std::atomic<bool>>(true);
  auto a0 = job->promise.get_future();
  ASSERT_TRUE(b.Enqueue(std::move(job)).ok());
  auto a1 = Submit(b, "a", 1, false, true);
  release.set_value();
  ASSERT_TRUE(Wait(x0).ok());
  EXPECT_EQ(Wait(a0).code(), StatusCode::kCancelled);
  ASSERT_TRUE(Wait(a1).ok());
  EXPECT_EQ(starts, (std::vector<bool>{true, true}));  // a's first request to run begins it
}

TEST(SequenceBatcher, StopRunsSlottedWorkAndFailsTheBacklog) {
  Recorder rec(20ms);
  SequenceOptions o;
  o.max_batch_size = 1;
  auto b = std::make_unique<SequenceBatcher>(o, rec.executor());
  auto a0 = Submit(*b, "a", 0, true);
  auto a1 = Submit(*b, "a", 1);
  auto c0 = Submit(*b, "c", 0, true);  // no slot
  b->Stop();
  EXPECT_TRUE(Wait(a0).ok());
  EXPECT_TRUE(Wait(a1).ok());
  Status st = Wait(c0);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("never got a slot"), std::string::npos) << st.message();
  auto late = Submit(*b, "d", 0, true);
  EXPECT_EQ(Wait(late).code(), StatusCode::kUnavailable);
}

TEST(SequenceBatcher, AnInstanceOutOfServiceEndsItsSequences) {
  Recorder rec;
  std::atomic<bool> sick{false};
  SequenceOptions o;
  o.instances = 2;
  o.max_batch_size = 1;
  o.instance_health = [&](int instance) { return instance == 0 && sick ? Unavailable("device lost") : Status::Ok(); };
  SequenceBatcher b(o, rec.executor());
  auto a0 = Submit(b, "a", 0, true);  // instance 0 (the first with a free slot)
  ASSERT_TRUE(Wait(a0).ok());
  auto x0 = Submit(b, "x", 0, true);  // instance 1
  ASSERT_TRUE(Wait(x0).ok());
  std::this_thread::sleep_for(50ms);  // both instances back to waiting: health is asked before a batch
  sick = true;
  auto a1 = Submit(b, "a", 1);  // wakes instance 0, which retires and ends sequence a
  Status st = Wait(a1);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("device lost"), std::string::npos) << st.message();
  auto x1 = Submit(b, "x", 1, false, true);
  EXPECT_TRUE(Wait(x1).ok());
  EXPECT_EQ(b.active_instances(), 1);
}

}  // namespace
}  // namespace sampan::server::scheduler
