// The scheduler of one model version: priority queues, a dynamic batcher and
// a pool of instance threads (docs/architecture.md: server/scheduler).
//
// It knows nothing of tensors or protocols: it moves Jobs. Each Job says how
// many rows (batch-dimension size) it carries and a `shape_key`; only jobs with
// equal keys are batched together. An instance thread takes a batch as soon
// as it is free, and hands it to the Executor, which runs it and completes
// every job of it.
//
// Batch formation (dynamic batching on), at every decision point:
//   - jobs that were cancelled or whose queue timeout expired leave the queue
//     first (timeout_action REJECT: kDeadlineExceeded; DELAY: they move
//     behind every job that has not timed out);
//   - the candidate batch is the oldest job of the highest priority level,
//     followed by the jobs with its shape key in priority-then-age order, as
//     long as they fit max_batch_size;
//   - it runs at once when full, or when it reaches the largest preferred
//     batch size; otherwise it waits for more until the oldest job has waited
//     max_queue_delay, then runs the largest prefix that is a preferred size
//     (everything, when none is).
// Without dynamic batching each job runs alone, in priority-then-age order.
//
// The SLO batcher (latency_slo_us set, no preferred sizes nor queue delay given): the same
// candidate batch, but when to run it and with how many of its jobs follows slo_policy.h from
// each bucket's measured execution time and the arrival rate; jobs that can no longer meet
// their deadline leave the queue by its policy (REJECT: kDeadlineExceeded; DELAY: behind the
// others), so that they do not delay the rest.
//
// Inline runs (SchedulerOptions::inline_max_us): a submitting thread that is not itself
// running a model may run its job at once on an idle instance, with no hand-over to the
// instance thread and back, when nothing is queued, the job would run alone at once (no
// batching delay to honour, no SLO batcher) and the model's recent executions were short.
// The instance is taken for the run as its thread would take it: no more executions than
// instances, the same executor, the same timings.
//
// Instance health (optional): before taking each batch an instance asks
// whether it can still run (its device may have hit a sticky error). One that
// cannot retires for good and the others carry on; when the last one retires,
// every queued job fails with kUnavailable and new ones are refused.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "server/scheduler/slo_policy.h"

namespace sampan::server::scheduler {

using Clock = std::chrono::steady_clock;

//! What the executor keeps for one sequence between its requests (SequenceBatcher):
//! the executor sets and reads `state`; the batcher drops it when the sequence ends.
struct SequenceContext {
  std::shared_ptr<void> state;
};

//! One queued request, as the scheduler sees it.
class Job {
 public:
  virtual ~Job() = default;
  //! Completes the job with an error (called at most once, by the scheduler or
  //! the executor; a job completed with Fail is never executed).
  virtual void Fail(const Status& status) = 0;

  int64_t rows = 1;         //!< batch-dimension size this job contributes (1 without batching)
  std::string shape_key;    //!< jobs batch together only when keys are equal
  uint32_t priority = 0;    //!< 0 = the default level
  uint64_t timeout_us = 0;  //!< 0 = the queue policy's default
  std::shared_ptr<std::atomic<bool>> cancelled;
  Clock::time_point enqueued;  //!< set by Enqueue
  //! When the front end received the request (unset: when it was enqueued). The latency SLO runs
  //! from here: time spent reading, parsing and copying inputs before the queue counts.
  Clock::time_point received;
  //! The SLO batcher's deadline for this job (set by Enqueue; max() without an SLO).
  Clock::time_point slo_deadline = Clock::time_point::max();
  //! Sequence models only (SequenceBatcher): the correlation ID as a printable key
  //! (42, or "abc" quoted), the request's START/END flags, and, while it executes,
  //! its sequence's context.
  std::string sequence;
  bool sequence_start = false;
  bool sequence_end = false;
  std::shared_ptr<SequenceContext> sequence_context;
};

using JobPtr = std::unique_ptr<Job>;

class Scheduler;

//! A job its submitting thread runs itself (JobQueue::Enqueue with `run`; see "Inline runs"
//! above): its instance is taken until Run() ends. Run() it after releasing the locks held
//! around Enqueue (the job's callbacks may call back in); one destroyed unrun runs then.
class InlineRun {
 public:
  InlineRun() = default;
  InlineRun(const InlineRun&) = delete;
  InlineRun& operator=(const InlineRun&) = delete;
  ~InlineRun() { Run(); }
  //! Executes the job on this thread and frees the instance; no-op when there is none.
  void Run();
  explicit operator bool() const { return owner_ != nullptr; }

 private:
  friend class Scheduler;
  Scheduler* owner_ = nullptr;
  int instance_ = -1;
  std::vector<JobPtr> batch_;
};

//! True on a thread that is running a batch of some model (an instance thread, or a
//! submitting thread in InlineRun::Run): such a thread never runs another job inline.
bool InModelThread();

//! Marks this thread as running a model's batch while it lives (InModelThread()).
class InModelScope {
 public:
  InModelScope();
  ~InModelScope();
  InModelScope(const InModelScope&) = delete;
  InModelScope& operator=(const InModelScope&) = delete;

 private:
  bool prev_;
};

//! Runs one batch on instance `instance` (0-based) and completes every job. A null entry
//! (SequenceBatcher's direct strategy only) is an idle batch slot: one row the executor fills
//! with a READY-false control and zeros, and whose outputs it drops.
using Executor = std::function<void(int instance, std::vector<JobPtr>& batch)>;

//! What a model version queues its jobs into: the Scheduler, or the SequenceBatcher.
class JobQueue {
 public:
  virtual ~JobQueue() = default;
  //! Queues a job; when it cannot, returns why and hands the job back through `refused`
  //! when given (the caller fails it, e.g. after releasing its locks), else fails it here.
  //! With `run`, the queue may instead take an idle instance for the job and hand it back
  //! there to be run by the caller (`*run` true; only the Scheduler does).
  Status Enqueue(JobPtr job, JobPtr* refused = nullptr, InlineRun* run = nullptr);
  //! Refuses new jobs, runs or fails the queued ones, joins the threads. Idempotent.
  virtual void Stop() = 0;
  virtual size_t queued() const = 0;   //!< queued, not yet executing
  virtual size_t pending() const = 0;  //!< queued or executing
  virtual int active_instances() const = 0;

 protected:
  //! Queues `job` (moving it out, possibly into `*run` when given) or returns why not
  //! (leaving it); clears `*wake` when no instance thread needs waking.
  virtual Status Admit(JobPtr& job, InlineRun* run, bool* wake) = 0;
  //! Wakes the instance threads after a job was queued.
  virtual void Wake() = 0;
};

struct QueuePolicy {
  bool delay_on_timeout = false;    //!< timeout_action DELAY (else REJECT)
  uint64_t default_timeout_us = 0;  //!< 0 = no timeout
  bool allow_timeout_override = false;
  uint32_t max_queue_size = 0;  //!< 0 = unbounded
};

struct SchedulerOptions {
  std::string name = "model";  //!< for messages: "model 'm' version 1"
  int instances = 1;
  int64_t max_batch_size = 0;  //!< 0 = the model does not batch (one job per execution)
  bool dynamic_batching = false;
  std::vector<int64_t> preferred_batch_sizes;
  uint64_t max_queue_delay_us = 0;
  uint32_t priority_levels = 0;   //!< 0 = one level
  uint32_t default_priority = 0;  //!< used for jobs with priority 0 (1..levels when levels > 0)
  QueuePolicy default_policy;
  std::map<uint32_t, QueuePolicy> priority_policy;
  //! The SLO batcher (slo_policy.h) when > 0 and dynamic_batching with neither preferred sizes
  //! nor a queue delay (hand-set knobs win): the latency target in microseconds.
  uint64_t latency_slo_us = 0;
  //! The batch sizes the engine runs (a batch is padded up to the next one); empty: any size.
  std::vector<int64_t> buckets;
  //! Execution times measured before serving (warm-up), in microseconds, per bucket: the
  //! SLO batcher's first estimates.
  std::map<int64_t, std::vector<double>> measured_us;
  //! (optional, SLO batcher) Called outside the lock once for each job that left the queue
  //! because it could no longer meet its deadline (rejected, or delayed behind the others).
  std::function<void()> on_shed;
  //! (optional) Ok while `instance` can run batches; an error retires it (sticky). Called
  //! under the scheduler's lock, so it must be cheap and must not call back into it.
  std::function<Status(int instance)> instance_health;
  //! Inline runs ("Inline runs" above) while the mean of the recent executions is at most this
  //! many microseconds; 0: never (e.g. when executions may block, as under a rate limiter).
  uint64_t inline_max_us = 0;
};

//! What the SLO batcher knows and chose (statistics and metrics).
struct SloSnapshot {
  bool enabled = false;
  uint64_t latency_slo_us = 0;
  int64_t target_rows = 0;  //!< the batch the arrival rate asked for at the last decision
  int64_t cap_rows = 0;     //!< the largest bucket that fits the SLO
  double arrival_rows_per_s = 0;
  double capacity_rows_per_s = 0;  //!< what the instances complete at the cap (0: nothing measured)
  uint64_t shed = 0;               //!< jobs that left the queue because they could not meet their deadline
  uint64_t late = 0;               //!< jobs that ran but finished after arrival + SLO
  uint64_t waits = 0;              //!< decisions to wait for a larger batch
  struct Bucket {
    int64_t rows = 0;
    double mean_us = 0, sd_us = 0;
    uint64_t samples = 0;     //!< executions measured (warm-up included)
    uint64_t executions = 0;  //!< batches the batcher ran in this bucket
  };
  std::vector<Bucket> buckets;
};

class Scheduler final : public JobQueue {
 public:
  //! Starts `options.instances` instance threads.
  Scheduler(SchedulerOptions options, Executor executor);
  //! Stop(): drains the queue, then joins the instance threads.
  ~Scheduler() override;

  //! Enqueue (JobQueue) fails a job with kUnavailable when stopping or the queue of
  //! its priority level is full, kInvalidArgument for a priority outside the levels or
  //! too many rows.

  //! Refuses new jobs, runs every queued one, waits for the executions in
  //! flight and joins the threads. Idempotent.
  void Stop() override;

  //! Jobs queued but not yet taken by an instance.
  size_t queued() const override;
  //! Jobs queued or executing.
  size_t pending() const override;
  //! Instances that still take batches (all but the retired ones).
  int active_instances() const override;
  //! The SLO batcher's state (enabled false when it is off).
  SloSnapshot Slo() const;
  bool slo_enabled() const { return slo_ != nullptr; }

 private:
  struct Level {
    QueuePolicy policy;
    std::deque<JobPtr> jobs;
  };
  friend class InlineRun;
  Status Admit(JobPtr& job, InlineRun* run, bool* wake) override;
  void Wake() override { cv_.notify_all(); }
  void InstanceLoop(int instance);
  // Under mu_: takes an idle instance for `job` into `run` when an inline run is allowed.
  bool TakeInline(JobPtr& job, Clock::time_point now, InlineRun* run);
  // InlineRun::Run: executes `batch` on `instance`, then frees the instance.
  void RunInline(int instance, std::vector<JobPtr>& batch);
  // Under mu_ (held through `lock`): takes `instance` out of service; the last one fails the queue.
  void Retire(int instance, const Status& why, std::unique_lock<std::mutex>& lock);
  // Under mu_: removes cancelled and timed-out jobs (failures appended to `failed`);
  // returns the earliest future timeout among the remaining ones.
  struct Failure {
    JobPtr job;
    Status status;
    bool shed = false;  // by the SLO batcher
  };
  Clock::time_point Sweep(Clock::time_point now, std::vector<Failure>* failed);
  // Under mu_: takes a batch to run now, or returns empty and sets *wake_at.
  std::vector<JobPtr> Form(Clock::time_point now, Clock::time_point* wake_at);
  // Under mu_: how many of `picks` the SLO batcher runs now (0: wait until *wake_at).
  size_t SloTake(Clock::time_point now, const std::vector<Job*>& picks, bool full, Clock::time_point* wake_at);
  size_t LevelIndex(uint32_t priority) const;
  Clock::time_point Deadline(const Job& job, const QueuePolicy& policy) const;

  SchedulerOptions options_;
  Executor executor_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Level> levels_;   // index 0 = highest priority
  std::deque<JobPtr> delayed_;  // timed out under DELAY: run after everything else
  size_t queued_ = 0;
  size_t executing_ = 0;
  // Per instance, what runs on it (kIdle: its thread waits for work).
  enum Slot : uint8_t { kIdle, kThread, kInline, kRetired };
  std::vector<Slot> slots_;
  Ewma exec_us_;  // recent executions' durations (inline runs are allowed while short)
  int retired_ = 0;
  Status no_instance_;  // set when every instance retired: why jobs are refused
  bool stopping_ = false;
  std::mutex stop_mu_;
  std::vector<std::thread> threads_;
  // The SLO batcher (null when off) and its state, under mu_.
  std::unique_ptr<SloPolicy> slo_;
  ExecTimeModel exec_time_;
  Ewma wake_late_;  // how late timed wake-ups come, in microseconds
  ArrivalRate arrivals_;
  SloSnapshot slo_stats_;
  std::map<int64_t, uint64_t> slo_executions_;
};

}  // namespace sampan::server::scheduler
