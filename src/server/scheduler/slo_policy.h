// The SLO batcher's decisions (sampan { latency_slo_ms } without dynamic-batching knobs):
// how long one execution of each batch bucket takes, how fast rows arrive, and, at each
// dispatch, whether to run now or wait and with how many of the queued jobs.
//
// Everything here is a pure function of its inputs (times are passed in), so the decisions
// are tested on deterministic traces; the Scheduler holds the state under its lock.
//
// The rule, at each decision point with a free instance:
//   - every queued job has a deadline, arrival + SLO (or + the client's `timeout` when that is
//     earlier), and batches are planned to end a tail before it (0.2 ms or 5% of the budget,
//     whichever is larger) for the response;
//   - a job that would miss the SLO itself (or its timeout) even if it ran alone, now (now +
//     mean time of its bucket > arrival + SLO), is late: the queue policy rejects or delays it
//     (Sweep), so that it does not hold up the others; so does, under overload (a batch of the
//     target size queued), a job that a target-sized batch can no longer end in time, so that
//     batches keep the size the load needs rather than shrinking to serve the oldest one by one;
//   - the cap is the largest bucket whose execution, plus the wait for a busy instance, fits
//     the SLO: mean x (1 + 1/instances) + 2 sd <= SLO - tail;
//   - the target is the smallest bucket (up to the cap) whose throughput over the instances,
//     at 80% utilisation, keeps up with the arrival rate; above every bucket's, the cap;
//   - the batch runs now when it is full, reached the cap or the target, or when waiting any
//     longer would make its earliest deadline unreachable by a target-sized batch (mean + 2 sd,
//     and how late a waiting instance wakes: mean + 2 sd of what was measured); otherwise the
//     instance waits until that latest start (an arrival wakes it earlier);
//   - when it runs, it takes the prefix of the queued jobs (in serving order) with the most
//     rows per second of execution expected to end by their deadlines (rows x the chance, from
//     the bucket's mean and sd, that the batch ends by the earliest deadline in it, / mean):
//     which bucket to run, so that padding is not paid for when a smaller bucket is as good,
//     and a batch that would run late is cut rather than making every job in it late.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

namespace sampan::server::scheduler {

using SloClock = std::chrono::steady_clock;

//! Exponentially weighted mean and variance of a series of times.
class Ewma {
 public:
  explicit Ewma(double alpha = 0.2) : alpha_(alpha) {}
  void Observe(double x);
  double mean() const { return mean_; }
  double sd() const;
  uint64_t samples() const { return n_; }

 private:
  double alpha_;
  double mean_ = 0, var_ = 0;
  uint64_t n_ = 0;
};

//! Execution time per batch bucket: exponentially weighted mean and variance of what each
//! execution of that bucket took (measured at warm-up, then online).
class ExecTimeModel {
 public:
  explicit ExecTimeModel(double alpha = 0.2) : alpha_(alpha) {}

  struct Estimate {
    double mean_us = 0;
    double sd_us = 0;
    uint64_t samples = 0;  //!< executions of this very bucket (0: interpolated, or nothing known)
    bool known = false;    //!< some bucket has been measured
  };
  void Observe(int64_t bucket, double us);
  //! The estimate for `bucket`: its own when measured; else interpolated linearly between the
  //! nearest measured buckets below and above, or, outside them, scaled in proportion to rows
  //! from the nearest one (sd likewise). Zero, `known` false, when nothing was measured.
  Estimate At(int64_t bucket) const;
  bool empty() const { return stats_.empty(); }
  //! Measured buckets: (bucket, estimate).
  std::vector<std::pair<int64_t, Estimate>> Measured() const;

 private:
  double alpha_;
  std::map<int64_t, Ewma> stats_;
};

//! Rows per second arriving, over the last `window` (or, when more than `max_events` arrived
//! in it, over the span of the last `max_events`, so a burst shows within milliseconds).
class ArrivalRate {
 public:
  explicit ArrivalRate(std::chrono::microseconds window = std::chrono::milliseconds(500), size_t max_events = 256)
      : window_(window), max_events_(max_events) {}
  void Add(SloClock::time_point t, int64_t rows);
  double RowsPerSecond(SloClock::time_point now) const;

 private:
  std::chrono::microseconds window_;
  size_t max_events_;
  std::deque<std::pair<SloClock::time_point, int64_t>> events_;
};

struct SloConfig {
  uint64_t slo_us = 0;           //!< the latency SLO
  int64_t max_batch_size = 1;    //!< the model's max_batch_size
  std::vector<int64_t> buckets;  //!< batch sizes the engine runs, ascending; empty: every size runs as it is
  double sigmas = 2.0;           //!< margin in standard deviations of an execution's time
  double utilization = 0.8;      //!< the target bucket keeps the instances this busy at the arrival rate
};

//! One queued job as the decision sees it, in serving order.
struct SloPick {
  int64_t rows = 1;
  //! When its batch is planned to end (PlanBy); max(): no deadline (a delayed job).
  SloClock::time_point plan_by = SloClock::time_point::max();
  //! Its deadline (Deadline); max(): none.
  SloClock::time_point deadline = SloClock::time_point::max();
};

struct SloDecision {
  size_t take = 0;                                             //!< jobs to run now (a prefix of the picks); 0: wait
  SloClock::time_point wake_at = SloClock::time_point::max();  //!< when waiting: decide again then
  int64_t bucket = 0;                                          //!< the bucket the taken rows run in
  int64_t target = 0;                                          //!< rows the arrival rate asks a batch to reach
  int64_t cap = 0;                                             //!< the largest bucket that fits the SLO
};

class SloPolicy {
 public:
  explicit SloPolicy(SloConfig config);
  const SloConfig& config() const { return config_; }

  //! The bucket `rows` runs in: the smallest bucket >= rows (rows itself without buckets or above them).
  int64_t Bucket(int64_t rows) const;
  //! What the response takes after the execution, kept out of the deadline batches are planned
  //! to: 5% of a job's time budget, at least 0.2 ms (and at most the budget).
  static uint64_t Tail(uint64_t budget_us);
  //! A job's deadline: arrival + SLO, or arrival + the client's timeout when earlier (0: none).
  SloClock::time_point Deadline(SloClock::time_point enqueued, uint64_t client_timeout_us) const;
  //! When a batch holding that job must end: its deadline minus the tail of its budget.
  static SloClock::time_point PlanBy(SloClock::time_point enqueued, SloClock::time_point deadline);
  //! True when a batch of `rows` started now cannot end by `deadline` (from Deadline): now + its
  //! bucket's mean > deadline (a job's own rows: it cannot make it even alone). (The tail is for planning batches; it
  //! is not held against a job that can still make it.)
  bool Late(const ExecTimeModel& model, SloClock::time_point now, int64_t rows, SloClock::time_point deadline) const;
  //! When a job of `rows` with `deadline` becomes late (max() when it never does).
  SloClock::time_point LateAt(const ExecTimeModel& model, int64_t rows, SloClock::time_point deadline) const;
  //! The largest bucket that fits the SLO with `instances` instances (see the header comment).
  int64_t Cap(const ExecTimeModel& model, int instances) const;
  //! Rows per second `instances` instances complete at the cap (0 before anything is measured).
  double Capacity(const ExecTimeModel& model, int instances) const;
  //! The smallest bucket up to `cap` whose throughput keeps up with `rows_per_s`.
  int64_t Target(const ExecTimeModel& model, double rows_per_s, int instances, int64_t cap) const;
  //! The decision for `picks` (compatible queued jobs in serving order, already limited to
  //! max_batch_size); `full`: a compatible job did not fit, so the batch cannot grow;
  //! `wake_margin_us`: how late a waiting instance wakes (the latest start is that much earlier).
  SloDecision Decide(SloClock::time_point now, const std::vector<SloPick>& picks, bool full, const ExecTimeModel& model,
                     double rows_per_s, int instances, double wake_margin_us = 0) const;

 private:
  //! Sizes a batch can be run at up to `limit`: the buckets, or without buckets a ladder
  //! (1, 2, 3, 4, 6, 8, 12, ...) and `limit` itself.
  std::vector<int64_t> Sizes(int64_t limit) const;
  double Upper(const ExecTimeModel::Estimate& e) const { return e.mean_us + config_.sigmas * e.sd_us; }

  SloConfig config_;
};

}  // namespace sampan::server::scheduler
