// The scheduler of a sequence (stateful) model, Triton's sequence batcher
// (docs/config.md, sequence_batching). Like the Scheduler it moves Jobs and
// knows nothing of tensors: the executor feeds the control and state tensors.
//
// Every job names its sequence (Job::sequence, the correlation ID) and carries
// START/END flags. The jobs of one sequence execute in arrival order, one at a
// time: a job is only taken once the one before it has completed, so the
// executor always sees the state the previous request left. A request that
// does not start a sequence must name one in progress; START on a sequence in
// progress begins it again (after its queued requests; the executor resets the
// state on START). A sequence ends when its END request completes, or when it
// has been idle (no request queued or executing) for max_sequence_idle.
//
// Slots: a sequence holds a slot from its first request to its end.
//   - direct: a slot is (instance, row): instance i runs batches of the heads of
//     its own slots' sequences, each in its row; rows below the highest one that
//     runs are null (idle slots, see Executor). A batch runs when at least
//     minimum_slot_utilization of the rows are ready, or once the oldest ready
//     head has waited max_queue_delay.
//   - oldest: max_candidate_sequences slots shared by every instance; a free
//     instance batches the ready heads, oldest first, with equal shape keys, up
//     to max_batch_size rows, as the dynamic batcher does (preferred sizes,
//     max_queue_delay).
// A sequence that finds no free slot waits in the backlog, in arrival order,
// until a slot is released.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/scheduler/scheduler.h"

namespace sampan::server::scheduler {

struct SequenceOptions {
  std::string name = "model";  //!< for messages
  int instances = 1;
  int64_t max_batch_size = 0;  //!< 0: one request per execution (one slot per instance)
  bool oldest = false;         //!< the strategy: false = direct
  uint64_t max_queue_delay_us = 0;
  double minimum_slot_utilization = 0;         //!< direct
  int max_candidate_sequences = 0;             //!< oldest; 0 = instances x max(1, max_batch_size)
  std::vector<int64_t> preferred_batch_sizes;  //!< oldest
  uint64_t max_sequence_idle_us = 1000000;     //!< 0 = never
  //! As SchedulerOptions::instance_health (called under the lock).
  std::function<Status(int instance)> instance_health;
};

class SequenceBatcher final : public JobQueue {
 public:
  SequenceBatcher(SequenceOptions options, Executor executor);
  ~SequenceBatcher() override;

  //! Enqueue (JobQueue) refuses with kInvalidArgument: no sequence, or not START and no
  //! such sequence in progress; kUnavailable: stopping, or no healthy instance.
  //! Refuses new jobs, fails the backlog's (they may never get a slot), runs the
  //! slotted sequences' queued jobs, joins the threads.
  void Stop() override;
  size_t queued() const override;
  size_t pending() const override;
  int active_instances() const override;
  //! Sequences holding a slot, and waiting for one.
  size_t active_sequences() const;
  size_t backlog_sequences() const;

 private:
  struct Sequence {
    std::string key;
    std::deque<JobPtr> jobs;
    bool running = false;
    bool ended = false;    //!< its last queued request carries END
    bool restart = false;  //!< a START was cancelled before it ran: the next request starts the sequence
    int instance = -1;     //!< direct: the slot's instance (oldest: 0); -1 in the backlog
    int slot = -1;
    Clock::time_point last;  //!< last arrival or completion
    std::shared_ptr<SequenceContext> context = std::make_shared<SequenceContext>();
  };
  using Failures = std::vector<std::pair<JobPtr, Status>>;

  Status Admit(JobPtr& job, InlineRun* run, bool* wake) override;
  void Wake() override { cv_.notify_all(); }
  void InstanceLoop(int instance);
  void ReaperLoop();
  // Under mu_: a free slot for a new sequence (false: none).
  bool TakeSlot(Sequence* s);
  // Under mu_: ends `s` (slot freed, handed to the backlog's first), failing what it still queues.
  void Release(Sequence* s, const Status& why, Failures* failed);
  // Under mu_: removes cancelled jobs (releasing a sequence whose END was cancelled with nothing after it).
  void Sweep(Failures* failed);
  // Under mu_: the next batch for `instance`, or empty with *wake_at set.
  std::vector<JobPtr> Form(int instance, Clock::time_point now, Clock::time_point* wake_at);
  std::vector<JobPtr> FormDirect(int instance, Clock::time_point now, Clock::time_point* wake_at);
  std::vector<JobPtr> FormOldest(Clock::time_point now, Clock::time_point* wake_at);
  // Under mu_: takes the head of `s` for execution.
  JobPtr TakeHead(Sequence* s);
  void Retire(int instance, const Status& why, Failures* failed);
  static void FailAll(Failures& failed);

  SequenceOptions options_;
  Executor executor_;
  int slots_per_row_ = 1;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Sequence>> sequences_;
  std::vector<std::vector<Sequence*>> slots_;  // direct: [instance][row]; oldest: [0][candidate]
  std::deque<Sequence*> backlog_;
  std::vector<bool> retired_;
  int retired_count_ = 0;
  Status no_instance_;
  size_t queued_ = 0;
  size_t executing_ = 0;
  bool stopping_ = false;
  std::mutex stop_mu_;
  std::vector<std::thread> threads_;
  std::thread reaper_;
};

}  // namespace sampan::server::scheduler
