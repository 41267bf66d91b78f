// The SLO batcher's decisions on deterministic traces (time is passed in): it waits when the
// deadline allows, runs now when it does not, picks the bucket with the best throughput, sheds
// only jobs that are already late, and follows a bucket whose measured time changes mid-run.
#include "server/scheduler/slo_policy.h"

#include <gtest/gtest.h>

namespace sampan::server::scheduler {
namespace {

using namespace std::chrono_literals;
using TP = SloClock::time_point;

// A model where a batch of b takes base + per_row * b microseconds, every bucket measured `n` times.
ExecTimeModel Linear(const std::vector<int64_t>& buckets, double base, double per_row, int n = 5) {
  ExecTimeModel m;
  for (int k = 0; k < n; ++k)
    for (int64_t b : buckets) m.Observe(b, base + per_row * static_cast<double>(b));
  return m;
}

SloPolicy Policy(uint64_t slo_us, int64_t max_batch, std::vector<int64_t> buckets) {
  SloConfig c;
  c.slo_us = slo_us;
  c.max_batch_size = max_batch;
  c.buckets = std::move(buckets);
  return SloPolicy(c);
}

std::vector<SloPick> Fresh(const SloPolicy& p, TP enqueued, int n, int64_t rows = 1) {
  std::vector<SloPick> picks;
  for (int i = 0; i < n; ++i)
    picks.push_back({rows, SloPolicy::PlanBy(enqueued, p.Deadline(enqueued, 0)), p.Deadline(enqueued, 0)});
  return picks;
}

const std::vector<int64_t> kBuckets = {1, 2, 4, 8, 16, 32, 64};

TEST(ExecTimeModelTest, MeanAndSpreadFollowTheMeasurements) {
  ExecTimeModel m;
  EXPECT_FALSE(m.At(8).known);
  for (int i = 0; i < 20; ++i) m.Observe(8, i % 2 ? 900 : 1100);
  auto e = m.At(8);
  EXPECT_TRUE(e.known);
  EXPECT_EQ(e.samples, 20u);
  EXPECT_NEAR(e.mean_us, 1000, 40);
  EXPECT_GT(e.sd_us, 50);
  EXPECT_LT(e.sd_us, 150);
}

TEST(ExecTimeModelTest, InterpolatesBetweenAndScalesOutsideTheMeasuredBuckets) {
  ExecTimeModel m;
  m.Observe(8, 1000);
  m.Observe(32, 4000);
  EXPECT_DOUBLE_EQ(m.At(16).mean_us, 2000);  // a third of the way from 8 to 32
  EXPECT_EQ(m.At(16).samples, 0u);
  EXPECT_DOUBLE_EQ(m.At(64).mean_us, 8000);  // in proportion to rows from 32
  EXPECT_DOUBLE_EQ(m.At(4).mean_us, 500);    // and from 8
}

TEST(ExecTimeModelTest, AdaptsWhenABucketSlowsDownMidRun) {
  ExecTimeModel m;
  for (int i = 0; i < 30; ++i) m.Observe(32, 5000);
  for (int i = 0; i < 15; ++i) m.Observe(32, 9000);
  EXPECT_GT(m.At(32).mean_us, 8800);
}

TEST(ArrivalRateTest, RowsPerSecondOverTheWindowAndOverABurst) {
  ArrivalRate r(500ms, 256);
  const TP t0{};
  // 100 arrivals of 2 rows, 1 ms apart: 200 rows within the last 0.5 s.
  for (int i = 0; i < 100; ++i) r.Add(t0 + std::chrono::milliseconds(i), 2);
  EXPECT_NEAR(r.RowsPerSecond(t0 + 100ms), 400, 1);
  // Long after: nothing arrived in the window.
  EXPECT_EQ(r.RowsPerSecond(t0 + 2s), 0);
  // A burst of 300 within 3 ms: the buffer holds its last 256, the rate is over their span.
  ArrivalRate b(500ms, 256);
  for (int i = 0; i < 300; ++i) b.Add(t0 + std::chrono::microseconds(i * 10), 1);
  EXPECT_GT(b.RowsPerSecond(t0 + 3ms), 50000);
}

TEST(SloPolicyTest, DeadlineKeepsTheResponseTailAndTheClientTimeout) {
  SloPolicy p = Policy(15000, 64, kBuckets);
  const TP t0{};
  EXPECT_EQ(p.Deadline(t0, 0), t0 + 15ms);
  EXPECT_EQ(SloPolicy::PlanBy(t0, p.Deadline(t0, 0)), t0 + 14250us);  // a tail of 5%
  EXPECT_EQ(p.Deadline(t0, 5000), t0 + 5ms);                          // an earlier client timeout wins
  EXPECT_EQ(SloPolicy::PlanBy(t0, p.Deadline(t0, 5000)), t0 + 4750us);
  EXPECT_EQ(p.Deadline(t0, 60000), t0 + 15ms);  // a later one does not
  EXPECT_EQ(SloPolicy::Tail(2000), 200u);       // at least 0.2 ms
  EXPECT_EQ(SloPolicy::Tail(100), 100u);        // and at most the budget
}

TEST(SloPolicyTest, CapIsTheLargestBucketThatFitsTheSlo) {
  SloPolicy p = Policy(15000, 64, kBuckets);
  // b rows take 1000 + 200 b us: with one instance 2 x that must fit 14.25 ms: b <= 30 -> 16.
  ExecTimeModel m = Linear(kBuckets, 1000, 200);
  EXPECT_EQ(p.Cap(m, 1), 16);
  // With three instances the wait for one is a third: 1.33 x (1000 + 200 b) <= 14250 -> b <= 48 -> 32.
  EXPECT_EQ(p.Cap(m, 3), 32);
  // Nothing measured: every bucket is allowed.
  EXPECT_EQ(p.Cap(ExecTimeModel(), 1), 64);
  EXPECT_NEAR(p.Capacity(m, 1), 16 / 4200e-6, 1);
}

TEST(SloPolicyTest, RunsAtOnceAtLowLoad) {
  SloPolicy p = Policy(15000, 64, kBuckets);
  ExecTimeModel m = Linear(kBuckets, 1000, 200);
  const TP now = TP{} + 1s;
  auto d = p.Decide(now, Fresh(p, now, 1), false, m, /*rows_per_s=*/50, 1);
  EXPECT_EQ(d.target, 1);
  EXPECT_EQ(d.take, 1u);
  EXPECT_EQ(d.bucket, 1);
}

TEST(SloPolicyTest, WaitsForTheTargetWhileTheDeadlineAllows) {
  SloPolicy p = Policy(15000, 64, kBuckets);
  ExecTimeModel m = Linear(kBuckets, 1000, 200);
  const TP now = TP{} + 1s;
  // 3,000 rows/s: one instance needs b / (1000 + 200 b) us x 0.8 >= 3000 / 1e6 -> 8 rows (8/2600us
  // = 3,077/s x 0.8 = 2,462 < 3000; 16/4200us = 3,810 x 0.8 = 3,048 >= 3000): the target is 16.
  auto d = p.Decide(now, Fresh(p, now, 3), false, m, 3000, 1);
  EXPECT_EQ(d.target, 16);
  EXPECT_EQ(d.take, 0u);
  // It waits until the latest start of a 16-row batch: deadline - 4.2 ms (sd 0).
  EXPECT_EQ(d.wake_at, now + 14250us - 4200us);
  // Once the target is queued it runs at once, all of it.
  d = p.Decide(now, Fresh(p, now, 16), false, m, 3000, 1);
  EXPECT_EQ(d.take, 16u);
  EXPECT_EQ(d.bucket, 16);
}

TEST(SloPolicyTest, RunsNowWhenWaitingLongerWouldMissTheDeadline) {
  SloPolicy p = Policy(15000, 64, kBuckets);
  ExecTimeModel m = Linear(kBuckets, 1000, 200);
  const TP t0 = TP{} + 1s;
  auto picks = Fresh(p, t0, 3);
  // At the latest start (deadline 14.25 ms - 4.2 ms = 10.05 ms after arrival) it runs what it has.
  auto d = p.Decide(t0 + 10050us, picks, false, m, 3000, 1);
  EXPECT_EQ(d.take, 3u);
  EXPECT_EQ(d.bucket, 4);
  // Just before, it still waits.
  d = p.Decide(t0 + 10000us, picks, false, m, 3000, 1);
  EXPECT_EQ(d.take, 0u);
  // An instance that wakes 0.5 ms late starts that much earlier.
  d = p.Decide(t0 + 9000us, picks, false, m, 3000, 1, /*wake_margin_us=*/500);
  EXPECT_EQ(d.wake_at, t0 + 9550us);
  EXPECT_EQ(p.Decide(t0 + 9550us, picks, false, m, 3000, 1, 500).take, 3u);
}

TEST(SloPolicyTest, AFullBatchOrOneAtTheCapRunsAtOnce) {
  SloPolicy p = Policy(15000, 64, kBuckets);
  ExecTimeModel m = Linear(kBuckets, 1000, 200);
  const TP now = TP{} + 1s;
  // full: a compatible job did not fit max_batch_size.
  EXPECT_EQ(p.Decide(now, Fresh(p, now, 2), true, m, 3000, 1).take, 2u);
  // 20 queued, the cap is 16: 16 run now (the best rows per second that fits), 4 stay.
  auto d = p.Decide(now, Fresh(p, now, 20), false, m, 1e6, 1);
  EXPECT_EQ(d.cap, 16);
  EXPECT_EQ(d.take, 16u);
}

TEST(SloPolicyTest, TakesTheBucketWithTheBestThroughputRatherThanPadding) {
  // Buckets 32 and 64 only: 40 queued rows either run as 32 (5 ms) or padded to 64 (9 ms).
  SloPolicy p = Policy(30000, 64, {32, 64});
  ExecTimeModel m;
  for (int k = 0; k < 5; ++k) m.Observe(32, 5000), m.Observe(64, 9000);
  const TP now = TP{} + 1s;
  // At 1,000 rows/s the target is 32, so 40 queued rows run now.
  auto d = p.Decide(now, Fresh(p, now, 40), false, m, 1000, 1);
  EXPECT_EQ(d.target, 32);
  EXPECT_EQ(d.take, 32u);  // 32 / 5 ms = 6.4 rows/ms beats 40 / 9 ms = 4.4
  EXPECT_EQ(d.bucket, 32);
  // 60 queued: 60 / 9 ms = 6.7 rows/ms beats 6.4: padded to 64.
  d = p.Decide(now, Fresh(p, now, 60), false, m, 1000, 1);
  EXPECT_EQ(d.take, 60u);
  EXPECT_EQ(d.bucket, 64);
}

TEST(SloPolicyTest, ABatchKeepsEveryDeadlineInIt) {
  SloPolicy p = Policy(15000, 64, kBuckets);
  ExecTimeModel m = Linear(kBuckets, 1000, 200);
  const TP now = TP{} + 1s;
  // The head has 3 ms left: a 16-row batch (4.2 ms) would miss it, an 8-row one (2.6 ms) does not.
  std::vector<SloPick> picks = Fresh(p, now, 16);
  picks[0].deadline = now + 3ms;
  auto d = p.Decide(now, picks, false, m, 1e6, 1);
  EXPECT_EQ(d.take, 8u);
}

TEST(SloPolicyTest, AfterALateStartTheWholeBatchRunsRatherThanOneJobAtATime) {
  SloPolicy p = Policy(15000, 64, {1, 64});
  ExecTimeModel m;
  for (int k = 0; k < 5; ++k) m.Observe(1, 1000), m.Observe(64, 1000 + 400 * (k % 2));  // 64: sd ~200
  const TP t0 = TP{} + 1s;
  auto picks = Fresh(p, t0, 40);
  // Woken 1 ms after the latest start: 40 rows in the 64 bucket still end before the deadline
  // (15 ms) on average, a single row surely does; 40 expected on time beat 1.
  const auto at = t0 + 14250us - 1200us - 400us + 1ms;
  auto d = p.Decide(at, picks, false, m, 1e6, 1);
  EXPECT_EQ(d.take, 40u);
  EXPECT_EQ(d.bucket, 64);
}

TEST(SloPolicyTest, OnlyJobsThatCannotMeetTheirDeadlineAloneAreLate) {
  SloPolicy p = Policy(15000, 64, kBuckets);
  ExecTimeModel m = Linear(kBuckets, 1000, 200);  // one row: 1.2 ms
  const TP t0 = TP{} + 1s;
  const TP deadline = p.Deadline(t0, 0);  // t0 + 15 ms (batches are planned to end by 14.25)
  // Late only when it cannot end by the deadline itself even alone, now.
  EXPECT_FALSE(p.Late(m, t0 + 13800us, 1, deadline));
  EXPECT_TRUE(p.Late(m, t0 + 13801us, 1, deadline));
  EXPECT_EQ(p.LateAt(m, 1, deadline), t0 + 13800us);
  // A job of 8 rows is late sooner (2.6 ms).
  EXPECT_FALSE(p.Late(m, t0 + 12300us, 8, deadline));
  EXPECT_TRUE(p.Late(m, t0 + 12500us, 8, deadline));
  // A delayed job (no deadline) never is.
  EXPECT_FALSE(p.Late(m, t0 + 1h, 1, TP::max()));
}

TEST(SloPolicyTest, FollowsABucketWhoseTimeChangesMidRun) {
  SloPolicy p = Policy(15000, 64, kBuckets);
  ExecTimeModel m = Linear(kBuckets, 1000, 200);
  EXPECT_EQ(p.Cap(m, 1), 16);
  // The 16-row bucket turns 2x slower (another model now shares the device): it no longer
  // fits, so the batcher caps at 8 and runs 8-row batches at the same queue.
  for (int i = 0; i < 20; ++i) m.Observe(16, 8400);
  EXPECT_EQ(p.Cap(m, 1), 8);
  const TP now = TP{} + 1s;
  auto d = p.Decide(now, Fresh(p, now, 20), false, m, 1e6, 1);
  EXPECT_EQ(d.take, 8u);
}

TEST(SloPolicyTest, WithoutBucketsEveryBatchSizeRunsAsItIs) {
  SloPolicy p = Policy(15000, 50, {});
  EXPECT_EQ(p.Bucket(37), 37);
  ExecTimeModel m;
  for (int k = 0; k < 5; ++k) m.Observe(1, 1000), m.Observe(10, 2000);
  // Sizes 1, 2, 3, 4, 6, 8, 12, ..., 32, 48, 50; above 10 rows the time grows in proportion
  // (200 us a row): 2 x 6.4 ms fits 14.25 ms at 32, 2 x 9.6 ms does not at 48.
  EXPECT_EQ(p.Cap(m, 1), 32);
  const TP now = TP{} + 1s;
  auto d = p.Decide(now, Fresh(p, now, 7), false, m, 50, 1);
  EXPECT_EQ(d.take, 7u);
  EXPECT_EQ(d.bucket, 7);
}

}  // namespace
}  // namespace sampan::server::scheduler
