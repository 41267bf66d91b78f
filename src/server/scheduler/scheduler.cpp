#include "server/scheduler/scheduler.h"

#include <algorithm>
#include <utility>

namespace sampan::server::scheduler {

namespace {
thread_local bool t_in_model = false;
}  // namespace

bool InModelThread() {
  return t_in_model;
}

InModelScope::InModelScope() : prev_(t_in_model) {
  t_in_model = true;
}

InModelScope::~InModelScope() {
  t_in_model = prev_;
}

void InlineRun::Run() {
  if (owner_ == nullptr) return;
  Scheduler* owner = std::exchange(owner_, nullptr);
  owner->RunInline(instance_, batch_);
}

Scheduler::Scheduler(SchedulerOptions options, Executor executor)
    : options_(std::move(options)),
      executor_(std::move(executor)),
      levels_(std::max<uint32_t>(1, options_.priority_levels)) {
  if (options_.instances < 1) options_.instances = 1;
  if (options_.latency_slo_us > 0 && options_.dynamic_batching && options_.max_batch_size > 0 &&
      options_.preferred_batch_sizes.empty() && options_.max_queue_delay_us == 0) {
    SloConfig c;
    c.slo_us = options_.latency_slo_us;
    c.max_batch_size = options_.max_batch_size;
    c.buckets = options_.buckets;
    slo_ = std::make_unique<SloPolicy>(std::move(c));
    for (const auto& [bucket, times] : options_.measured_us)
      for (double us : times) exec_time_.Observe(slo_->Bucket(bucket), us);
    slo_stats_.enabled = true;
    slo_stats_.latency_slo_us = options_.latency_slo_us;
  }
  const size_t n = levels_.size();
  for (size_t i = 0; i < n; ++i) {
    auto it = options_.priority_policy.find(static_cast<uint32_t>(i + 1));
    levels_[i].policy = it != options_.priority_policy.end() ? it->second : options_.default_policy;
  }
  slots_.assign(static_cast<size_t>(options_.instances), kIdle);
  threads_.reserve(static_cast<size_t>(options_.instances));
  for (int i = 0; i < options_.instances; ++i) threads_.emplace_back([this, i] { InstanceLoop(i); });
}

Scheduler::~Scheduler() {
  Stop();
}

size_t Scheduler::LevelIndex(uint32_t priority) const {
  if (options_.priority_levels == 0) return 0;
  uint32_t p = priority == 0 ? options_.default_priority : priority;
  if (p == 0) p = 1;
  return std::min<size_t>(p, levels_.size()) - 1;
}

Clock::time_point Scheduler::Deadline(const Job& job, const QueuePolicy& policy) const {
  uint64_t us = policy.default_timeout_us;
  if (job.timeout_us != 0 && policy.allow_timeout_override) us = job.timeout_us;
  if (us == 0) return Clock::time_point::max();
  return job.enqueued + std::chrono::microseconds(us);
}

Status JobQueue::Enqueue(JobPtr job, JobPtr* refused, InlineRun* run) {
  bool wake = true;
  Status st = Admit(job, run, &wake);
  if (st.ok()) {
    if (wake) Wake();
    return st;
  }
  if (refused) {
    *refused = std::move(job);
  } else {
    job->Fail(st);  // outside the lock: the callback may do anything
  }
  return st;
}

// Queues `job` (moving it out) or returns why not (leaving it).
Status Scheduler::Admit(JobPtr& job, InlineRun* run, bool* wake) {
  Status st;
  if (options_.priority_levels > 0 && job->priority > options_.priority_levels)
    st = InvalidArgument(options_.name, ": priority ", job->priority, " is outside the model's priority levels 1..",
                         options_.priority_levels);
  else if (options_.max_batch_size > 0 && job->rows > options_.max_batch_size)
    st =
        InvalidArgument(options_.name, ": batch size ", job->rows, " exceeds max_batch_size ", options_.max_batch_size);
  if (st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    Level& level = levels_[LevelIndex(job->priority)];
    if (stopping_) {
      st = Unavailable(options_.name, " is unloading; request refused");
    } else if (!no_instance_.ok()) {
      st = no_instance_;
    } else if (level.policy.max_queue_size > 0 && level.jobs.size() >= level.policy.max_queue_size) {
      st = Unavailable("Exceeds maximum queue size (", level.policy.max_queue_size, ") of ", options_.name);
    } else {
      const auto now = Clock::now();
      if (TakeInline(job, now, run)) {
        *wake = false;
        return Status::Ok();
      }
      job->enqueued = now;
      if (job->received == Clock::time_point{} || job->received > job->enqueued) job->received = job->enqueued;
      if (slo_) {
        job->slo_deadline = slo_->Deadline(job->received, job->timeout_us);
        arrivals_.Add(job->enqueued, job->rows);
      }
      level.jobs.push_back(std::move(job));
      ++queued_;
      // Busy instance threads look at the queue when they finish, and so do inline runs: only
      // an idle thread needs waking.
      *wake = std::find(slots_.begin(), slots_.end(), kIdle) != slots_.end();
      return Status::Ok();
    }
  }
  return st;
}

bool Scheduler::TakeInline(JobPtr& job, Clock::time_point now, InlineRun* run) {
  if (run == nullptr || options_.inline_max_us == 0 || slo_ || queued_ != 0 || t_in_model) return false;
  // Short executions only: an inline run holds its submitting thread (an I/O thread) until it ends.
  if (exec_us_.samples() == 0 || exec_us_.mean() > static_cast<double>(options_.inline_max_us)) return false;
  // It must be what the instance thread would do now with it alone: run it at once.
  const auto& preferred = options_.preferred_batch_sizes;
  const bool at_once = !options_.dynamic_batching || options_.max_batch_size <= 0 || options_.max_queue_delay_us == 0 ||
                       job->rows >= options_.max_batch_size ||
                       (!preferred.empty() && job->rows >= *std::max_element(preferred.begin(), preferred.end()));
  if (!at_once || (job->cancelled && job->cancelled->load())) return false;
  auto idle = std::find(slots_.begin(), slots_.end(), kIdle);
  if (idle == slots_.end()) return false;
  const int instance = static_cast<int>(idle - slots_.begin());
  // An instance that can no longer run is left to its thread, which retires it.
  if (options_.instance_health && !options_.instance_health(instance).ok()) return false;
  *idle = kInline;
  ++executing_;
  job->enqueued = now;
  run->owner_ = this;
  run->instance_ = instance;
  run->batch_.clear();
  run->batch_.push_back(std::move(job));
  return true;
}

void Scheduler::RunInline(int instance, std::vector<JobPtr>& batch) {
  std::vector<JobPtr> done = std::move(batch);
  Clock::time_point start, end;
  {
    InModelScope in_model;
    start = Clock::now();
    executor_(instance, done);
    end = Clock::now();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[static_cast<size_t>(instance)] = kIdle;
    --executing_;
    exec_us_.Observe(std::chrono::duration<double, std::micro>(end - start).count());
    // Jobs queued meanwhile wait for an instance thread; Stop() waits for this instance.
    if (queued_ > 0 || stopping_) cv_.notify_all();
  }
  // `done` is destroyed here, outside the lock; its jobs may hold the last reference to the
  // owner of this scheduler, so nothing of it is touched after.
}

Clock::time_point Scheduler::Sweep(Clock::time_point now, std::vector<Failure>* failed) {
  Clock::time_point next = Clock::time_point::max();
  // The SLO batcher under overload: while a batch of the size the arrival rate needs is queued
  // (per shape key), a job that such a batch can no longer end in time leaves too, so that the
  // batches stay at that size instead of shrinking to serve the oldest jobs one by one (which
  // lowers the throughput and makes every job behind them late).
  int64_t target = 0;
  std::map<std::string, int64_t> queued_rows;
  if (slo_) {
    const int instances = std::max(1, options_.instances - retired_);
    target = slo_->Target(exec_time_, arrivals_.RowsPerSecond(now), instances, slo_->Cap(exec_time_, instances));
    for (const auto& level : levels_)
      for (const auto& j : level.jobs) queued_rows[j->shape_key] += j->rows;
  }
  for (auto& level : levels_) {
    for (auto it = level.jobs.begin(); it != level.jobs.end();) {
      Job& job = **it;
      if (job.cancelled && job.cancelled->load()) {
        failed->push_back({std::move(*it), Cancelled("request cancelled before it ran")});
        it = level.jobs.erase(it);
        --queued_;
        continue;
      }
      auto deadline = Deadline(job, level.policy);
      if (deadline <= now) {
        if (level.policy.delay_on_timeout) {
          job.slo_deadline = Clock::time_point::max();  // behind the others, no deadline to keep
          delayed_.push_back(std::move(*it));
        } else {
          auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - job.enqueued).count();
          failed->push_back({std::move(*it), DeadlineExceeded("request timed out in the queue of ", options_.name,
                                                              " after ", waited, " us")});
          --queued_;
        }
        it = level.jobs.erase(it);
        continue;
      }
      const bool late_alone = slo_ && slo_->Late(exec_time_, now, job.rows, job.slo_deadline);
      const bool late_in_batch = slo_ && !late_alone && target > job.rows && queued_rows[job.shape_key] >= target &&
                                 slo_->Late(exec_time_, now, target, job.slo_deadline);
      if (late_alone || late_in_batch) {
        // It would miss its deadline even alone now, or in a batch of the size the load needs
        // while one is queued: out of the way of the others.
        ++slo_stats_.shed;
        queued_rows[job.shape_key] -= job.rows;
        const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - job.received).count();
        const int64_t rows = late_alone ? job.rows : target;
        const auto exec = static_cast<int64_t>(exec_time_.At(slo_->Bucket(rows)).mean_us);
        Status why = DeadlineExceeded("request can no longer meet the latency SLO of ", options_.name, " (",
                                      options_.latency_slo_us, " us): received ", waited, " us ago, a batch of ",
                                      late_alone ? StrCat("its size") : StrCat(rows, " (what the load needs)"),
                                      " takes ", exec, " us");
        if (level.policy.delay_on_timeout) {  // runs when nothing else waits: only reported
          job.slo_deadline = Clock::time_point::max();
          failed->push_back({nullptr, Status::Ok(), true});
          delayed_.push_back(std::move(*it));
        } else {
          failed->push_back({std::move(*it), why, true});
          --queued_;
        }
        it = level.jobs.erase(it);
        continue;
      }
      next = std::min(next, deadline);
      if (slo_) next = std::min(next, slo_->LateAt(exec_time_, job.rows, job.slo_deadline));
      ++it;
    }
  }
  for (auto it = delayed_.begin(); it != delayed_.end();) {
    if ((*it)->cancelled && (*it)->cancelled->load()) {
      failed->push_back({std::move(*it), Cancelled("request cancelled before it ran")});
      it = delayed_.erase(it);
      --queued_;
    } else {
      ++it;
    }
  }
  return next;
}

std::vector<JobPtr> Scheduler::Form(Clock::time_point now, Clock::time_point* wake_at) {
  std::vector<JobPtr> batch;
  // Queues in the order they are served: priority levels, then delayed jobs.
  std::vector<std::deque<JobPtr>*> queues;
  for (auto& l : levels_) queues.push_back(&l.jobs);
  queues.push_back(&delayed_);
  std::deque<JobPtr>* head_queue = nullptr;
  for (auto* q : queues)
    if (!q->empty()) {
      head_queue = q;
      break;
    }
  if (!head_queue) return batch;

  if (!options_.dynamic_batching || options_.max_batch_size <= 0) {
    batch.push_back(std::move(head_queue->front()));
    head_queue->pop_front();
    --queued_;
    return batch;
  }

  // The candidate: the head job and the compatible jobs after it, in serving order.
  const Job& head = *head_queue->front();
  const int64_t max_rows = options_.max_batch_size;
  struct Pick {
    std::deque<JobPtr>* queue;
    Job* job;
  };
  std::vector<Pick> picks;
  std::vector<int64_t> prefix;  // rows after each pick
  int64_t rows = 0;
  Clock::time_point oldest = head.enqueued;
  bool blocked = false;  // a compatible job did not fit: the batch cannot grow
  for (auto* q : queues) {
    for (auto& j : *q) {
      if (j->shape_key != head.shape_key) continue;
      if (rows + j->rows > max_rows) {
        blocked = true;
        break;
      }
      rows += j->rows;
      picks.push_back({q, j.get()});
      prefix.push_back(rows);
      oldest = std::min(oldest, j->enqueued);
    }
    if (blocked) break;
  }

  const auto& preferred = options_.preferred_batch_sizes;
  const int64_t max_preferred = preferred.empty() ? 0 : *std::max_element(preferred.begin(), preferred.end());
  size_t take = 0;
  if (slo_) {
    std::vector<Job*> jobs;
    for (const Pick& p : picks) jobs.push_back(p.job);
    take = SloTake(now, jobs, rows >= max_rows || blocked || stopping_, wake_at);
    if (take == 0) return batch;
  } else if (rows >= max_rows || blocked) {
    take = picks.size();
  } else if (max_preferred > 0 && rows >= max_preferred) {
    // Each job has >= 1 row, so prefixes grow strictly: stop at the largest preferred size reached.
    for (size_t i = 0; i < prefix.size(); ++i)
      if (std::find(preferred.begin(), preferred.end(), prefix[i]) != preferred.end()) take = i + 1;
    if (take == 0) take = picks.size();
  } else {
    const auto due = oldest + std::chrono::microseconds(options_.max_queue_delay_us);
    if (now < due && !stopping_) {
      *wake_at = due;
      return batch;
    }
    for (size_t i = 0; i < prefix.size(); ++i)
      if (std::find(preferred.begin(), preferred.end(), prefix[i]) != preferred.end()) take = i + 1;
    if (take == 0) take = picks.size();
  }

  // Move the chosen jobs out of their queues (pointers identify them).
  for (size_t i = 0; i < take; ++i) {
    auto* q = picks[i].queue;
    auto it = std::find_if(q->begin(), q->end(), [&](const JobPtr& p) { return p.get() == picks[i].job; });
    batch.push_back(std::move(*it));
    q->erase(it);
    --queued_;
  }
  return batch;
}

size_t Scheduler::SloTake(Clock::time_point now, const std::vector<Job*>& picks, bool full,
                          Clock::time_point* wake_at) {
  std::vector<SloPick> view;
  view.reserve(picks.size());
  for (const Job* j : picks)
    view.push_back({j->rows, SloPolicy::PlanBy(j->received, j->slo_deadline), j->slo_deadline});
  const int instances = std::max(1, options_.instances - retired_);
  const double rate = arrivals_.RowsPerSecond(now);
  const SloDecision d =
      slo_->Decide(now, view, full, exec_time_, rate, instances, wake_late_.mean() + 2 * wake_late_.sd());
  slo_stats_.target_rows = d.target;
  slo_stats_.cap_rows = d.cap;
  slo_stats_.arrival_rows_per_s = rate;
  if (d.take == 0) {
    ++slo_stats_.waits;
    *wake_at = d.wake_at;
  }
  return d.take;
}

void Scheduler::Retire(int instance, const Status& why, std::unique_lock<std::mutex>& lock) {
  ++retired_;
  slots_[static_cast<size_t>(instance)] = kRetired;
  if (retired_ < options_.instances) return;
  no_instance_ =
      Unavailable(options_.name, ": no healthy instance left (instance ", instance, ": ", why.message(), ")");
  std::vector<JobPtr> orphans;
  for (auto& level : levels_) {
    for (auto& j : level.jobs) orphans.push_back(std::move(j));
    level.jobs.clear();
  }
  for (auto& j : delayed_) orphans.push_back(std::move(j));
  delayed_.clear();
  queued_ = 0;
  const Status failure = no_instance_;
  lock.unlock();
  for (auto& j : orphans) j->Fail(failure);
  orphans.clear();
  lock.lock();
}

void Scheduler::InstanceLoop(int instance) {
  InModelScope in_model;
  std::unique_lock<std::mutex> lock(mu_);
  auto& slot = slots_[static_cast<size_t>(instance)];
  for (;;) {
    if (slot == kInline) {  // a submitting thread runs a job on this instance
      cv_.wait(lock);
      continue;
    }
    if (options_.instance_health) {
      if (Status health = options_.instance_health(instance); !health.ok()) {
        Retire(instance, health, lock);
        break;
      }
    }
    std::vector<Failure> failed;
    const auto now = Clock::now();
    Clock::time_point wake_at = Sweep(now, &failed);
    std::vector<JobPtr> batch;
    if (failed.empty()) {
      Clock::time_point form_wake = Clock::time_point::max();
      batch = Form(now, &form_wake);
      wake_at = std::min(wake_at, form_wake);
    }
    if (!failed.empty()) {
      // Complete failures outside the lock, then look again.
      lock.unlock();
      for (auto& f : failed) {
        if (f.shed && options_.on_shed) options_.on_shed();
        if (f.job) f.job->Fail(f.status);
      }
      failed.clear();
      lock.lock();
      continue;
    }
    if (!batch.empty()) {
      ++executing_;
      slot = kThread;
      lock.unlock();
      const auto start = Clock::now();
      executor_(instance, batch);
      const auto end = Clock::now();
      int64_t rows = 0;
      uint64_t late = 0;
      if (slo_) {
        const auto slo = std::chrono::microseconds(options_.latency_slo_us);
        for (const auto& j : batch) {
          rows += j->rows;
          if (end - j->received > slo) ++late;
        }
      }
      batch.clear();  // jobs are destroyed outside the lock
      lock.lock();
      --executing_;
      slot = kIdle;
      exec_us_.Observe(std::chrono::duration<double, std::micro>(end - start).count());
      if (slo_) {
        const int64_t bucket = slo_->Bucket(rows);
        exec_time_.Observe(bucket, std::chrono::duration<double, std::micro>(end - start).count());
        ++slo_executions_[bucket];
        slo_stats_.late += late;
      }
      if (stopping_) cv_.notify_all();  // Stop() waits for queued_ + executing_ to reach 0
      continue;
    }
    if (stopping_ && queued_ == 0) break;
    if (wake_at == Clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, wake_at);
      // How late a timed wake-up comes (loaded machines: milliseconds): the SLO batcher starts
      // a waiting batch that much earlier.
      if (const auto woke = Clock::now(); slo_ && woke >= wake_at)
        wake_late_.Observe(std::chrono::duration<double, std::micro>(woke - wake_at).count());
    }
  }
  cv_.notify_all();
}

void Scheduler::Stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

size_t Scheduler::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

int Scheduler::active_instances() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_.instances - retired_;
}

SloSnapshot Scheduler::Slo() const {
  std::lock_guard<std::mutex> lock(mu_);
  SloSnapshot s = slo_stats_;
  if (!slo_) return s;
  const int instances = std::max(1, options_.instances - retired_);
  s.capacity_rows_per_s = slo_->Capacity(exec_time_, instances);
  s.arrival_rows_per_s = arrivals_.RowsPerSecond(Clock::now());
  for (const auto& [rows, e] : exec_time_.Measured()) {
    auto it = slo_executions_.find(rows);
    s.buckets.push_back({rows, e.mean_us, e.sd_us, e.samples, it == slo_executions_.end() ? 0 : it->second});
  }
  return s;
}

size_t Scheduler::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_ + executing_;
}

}  // namespace sampan::server::scheduler
