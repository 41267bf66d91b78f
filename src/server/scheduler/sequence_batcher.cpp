#include "server/scheduler/sequence_batcher.h"

#include <algorithm>

namespace sampan::server::scheduler {

SequenceBatcher::SequenceBatcher(SequenceOptions options, Executor executor)
    : options_(std::move(options)), executor_(std::move(executor)) {
  if (options_.instances < 1) options_.instances = 1;
  // Past ~31 years a duration means "never" (and microseconds past 2^63 ns would overflow).
  constexpr uint64_t kNever = uint64_t{1} << 50;
  if (options_.max_sequence_idle_us >= kNever) options_.max_sequence_idle_us = 0;
  options_.max_queue_delay_us = std::min(options_.max_queue_delay_us, kNever);
  slots_per_row_ = static_cast<int>(std::max<int64_t>(1, options_.max_batch_size));
  if (options_.oldest) {
    const int candidates =
        options_.max_candidate_sequences > 0 ? options_.max_candidate_sequences : options_.instances * slots_per_row_;
    slots_.assign(1, std::vector<Sequence*>(static_cast<size_t>(candidates), nullptr));
  } else {
    slots_.assign(static_cast<size_t>(options_.instances),
                  std::vector<Sequence*>(static_cast<size_t>(slots_per_row_), nullptr));
  }
  retired_.assign(static_cast<size_t>(options_.instances), false);
  threads_.reserve(static_cast<size_t>(options_.instances));
  for (int i = 0; i < options_.instances; ++i) threads_.emplace_back([this, i] { InstanceLoop(i); });
  reaper_ = std::thread([this] { ReaperLoop(); });
}

SequenceBatcher::~SequenceBatcher() {
  Stop();
}

void SequenceBatcher::FailAll(Failures& failed) {
  for (auto& [job, status] : failed) job->Fail(status);
  failed.clear();
}

Status SequenceBatcher::Admit(JobPtr& job, InlineRun* /*run: never inline*/, bool* /*wake*/) {
  if (job->sequence.empty())
    return InvalidArgument(options_.name,
                           " is a sequence model: the request needs a sequence_id (a nonzero "
                           "correlation ID) with sequence_start on its first request");
  if (options_.max_batch_size > 0 && job->rows != 1)
    return InvalidArgument(options_.name, ": a request of a sequence holds one row (batch size 1), got ", job->rows);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Unavailable(options_.name, " is unloading; request refused");
  if (!no_instance_.ok()) return no_instance_;
  auto it = sequences_.find(job->sequence);
  Sequence* s = it == sequences_.end() ? nullptr : it->second.get();
  if (!job->sequence_start && (s == nullptr || s->ended))
    return InvalidArgument("inference request for sequence ", job->sequence, " to ", options_.name,
                           " must specify the START flag on the first request of the sequence",
                           s == nullptr ? " (no such sequence is in progress: it never started, ended, or was "
                                          "released after max_sequence_idle_microseconds)"
                                        : " (its END request is already queued)");
  if (s == nullptr) {
    auto owned = std::make_unique<Sequence>();
    s = owned.get();
    s->key = job->sequence;
    sequences_.emplace(s->key, std::move(owned));
    if (!TakeSlot(s)) backlog_.push_back(s);
  }
  s->ended = job->sequence_end;
  const auto now = Clock::now();
  job->enqueued = now;
  s->last = now;
  s->jobs.push_back(std::move(job));
  ++queued_;
  return Status::Ok();
}

bool SequenceBatcher::TakeSlot(Sequence* s) {
  int best_row = -1, best_free = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!options_.oldest && retired_[i]) continue;
    const int free = static_cast<int>(std::count(slots_[i].begin(), slots_[i].end(), nullptr));
    if (free > best_free) best_row = static_cast<int>(i), best_free = free;
  }
  if (best_row < 0) return false;
  auto& row = slots_[static_cast<size_t>(best_row)];
  const auto slot = std::find(row.begin(), row.end(), nullptr);
  *slot = s;
  s->instance = best_row;
  s->slot = static_cast<int>(slot - row.begin());
  return true;
}

void SequenceBatcher::Release(Sequence* s, const Status& why, Failures* failed) {
  for (auto& job : s->jobs) failed->emplace_back(std::move(job), why);
  queued_ -= s->jobs.size();
  s->jobs.clear();
  if (s->instance >= 0) {
    slots_[static_cast<size_t>(s->instance)][static_cast<size_t>(s->slot)] = nullptr;
    while (!backlog_.empty()) {
      Sequence* next = backlog_.front();
      if (!TakeSlot(next)) break;
      backlog_.pop_front();
    }
  } else {
    backlog_.erase(std::remove(backlog_.begin(), backlog_.end(), s), backlog_.end());
  }
  sequences_.erase(s->key);  // destroys s
}

void SequenceBatcher::Sweep(Failures* failed) {
  std::vector<Sequence*> done;
  for (auto& [key, seq] : sequences_) {
    Sequence* s = seq.get();
    bool removed = false;
    for (auto it = s->jobs.begin(); it != s->jobs.end();) {
      if ((*it)->cancelled && (*it)->cancelled->load()) {
        removed = true;
        s->restart = s->restart || (*it)->sequence_start;
        failed->emplace_back(std::move(*it), Cancelled("request cancelled before it ran"));
        it = s->jobs.erase(it);
        --queued_;
      } else {
        ++it;
      }
    }
    // A cancelled END with nothing after it still ends the sequence.
    if (removed && s->ended && s->jobs.empty() && !s->running) done.push_back(s);
  }
  for (Sequence* s : done) Release(s, Status::Ok(), failed);
}

JobPtr SequenceBatcher::TakeHead(Sequence* s) {
  JobPtr job = std::move(s->jobs.front());
  s->jobs.pop_front();
  --queued_;
  s->running = true;
  if (s->restart) {  // the START before it was cancelled: this one begins the sequence
    job->sequence_start = true;
    s->restart = false;
  }
  job->sequence_context = s->context;
  return job;
}

std::vector<JobPtr> SequenceBatcher::FormDirect(int instance, Clock::time_point now, Clock::time_point* wake_at) {
  std::vector<JobPtr> batch;
  auto& row = slots_[static_cast<size_t>(instance)];
  std::vector<size_t> ready;
  for (size_t r = 0; r < row.size(); ++r)
    if (row[r] && !row[r]->running && !row[r]->jobs.empty()) ready.push_back(r);
  if (ready.empty()) return batch;
  // Rows batch together only when their heads' shapes match the oldest ready head's.
  size_t first = ready[0];
  for (size_t r : ready)
    if (row[r]->jobs.front()->enqueued < row[first]->jobs.front()->enqueued) first = r;
  const std::string& key = row[first]->jobs.front()->shape_key;
  std::vector<size_t> take;
  Clock::time_point oldest = Clock::time_point::max();
  for (size_t r : ready)
    if (row[r]->jobs.front()->shape_key == key) {
      take.push_back(r);
      oldest = std::min(oldest, row[r]->jobs.front()->enqueued);
    }
  const double used = static_cast<double>(take.size()) / static_cast<double>(row.size());
  if (options_.max_queue_delay_us > 0 && take.size() < row.size() && used < options_.minimum_slot_utilization) {
    const auto due = oldest + std::chrono::microseconds(options_.max_queue_delay_us);
    if (now < due) {
      *wake_at = due;
      return batch;
    }
  }
  batch.resize(take.back() + 1);
  for (size_t r : take) batch[r] = TakeHead(row[r]);
  return batch;
}

std::vector<JobPtr> SequenceBatcher::FormOldest(Clock::time_point now, Clock::time_point* wake_at) {
  std::vector<JobPtr> batch;
  std::vector<Sequence*> heads;
  for (Sequence* s : slots_[0])
    if (s && !s->running && !s->jobs.empty()) heads.push_back(s);
  if (heads.empty()) return batch;
  std::stable_sort(heads.begin(), heads.end(), [](const Sequence* a, const Sequence* b) {
    return a->jobs.front()->enqueued < b->jobs.front()->enqueued;
  });
  const std::string& key = heads[0]->jobs.front()->shape_key;
  const size_t max_rows = static_cast<size_t>(std::max<int64_t>(1, options_.max_batch_size));
  std::vector<Sequence*> pick;
  for (Sequence* s : heads)
    if (pick.size() < max_rows && s->jobs.front()->shape_key == key) pick.push_back(s);
  size_t largest_preferred = 0;
  for (int64_t p : options_.preferred_batch_sizes)
    largest_preferred = std::max(largest_preferred, static_cast<size_t>(p));
  const bool full = pick.size() >= max_rows || (largest_preferred > 0 && pick.size() >= largest_preferred);
  size_t count = pick.size();
  if (!full) {
    const auto due = pick[0]->jobs.front()->enqueued + std::chrono::microseconds(options_.max_queue_delay_us);
    if (options_.max_queue_delay_us > 0 && now < due) {
      *wake_at = due;
      return batch;
    }
    size_t best = 0;
    for (int64_t p : options_.preferred_batch_sizes)
      if (static_cast<size_t>(p) <= count) best = std::max(best, static_cast<size_t>(p));
    if (best > 0) count = best;
  } else if (largest_preferred > 0) {
    count = std::min(count, largest_preferred);
  }
  for (size_t i = 0; i < count; ++i) batch.push_back(TakeHead(pick[i]));
  return batch;
}

std::vector<JobPtr> SequenceBatcher::Form(int instance, Clock::time_point now, Clock::time_point* wake_at) {
  return options_.oldest ? FormOldest(now, wake_at) : FormDirect(instance, now, wake_at);
}

void SequenceBatcher::Retire(int instance, const Status& why, Failures* failed) {
  retired_[static_cast<size_t>(instance)] = true;
  ++retired_count_;
  if (retired_count_ >= options_.instances) {
    no_instance_ =
        Unavailable(options_.name, ": no healthy instance left (instance ", instance, ": ", why.message(), ")");
    std::vector<Sequence*> all;
    for (auto& [key, s] : sequences_) all.push_back(s.get());
    for (Sequence* s : all) Release(s, no_instance_, failed);
    return;
  }
  if (options_.oldest) return;  // the other instances serve the shared slots
  std::vector<Sequence*> mine;
  for (Sequence* s : slots_[static_cast<size_t>(instance)])
    if (s) mine.push_back(s);
  for (Sequence* s : mine)
    Release(s,
            Unavailable(options_.name, ": instance ", instance, " of sequence ", s->key, " is out of service (",
                        why.message(), "); the sequence ended"),
            failed);
}

void SequenceBatcher::InstanceLoop(int instance) {
  InModelScope in_model;  // a job submitted from here (an ensemble's next step) is never run inline
  std::unique_lock<std::mutex> lock(mu_);
  Failures failed;
  for (;;) {
    if (options_.instance_health) {
      if (Status health = options_.instance_health(instance); !health.ok()) {
        Retire(instance, health, &failed);
        lock.unlock();
        FailAll(failed);
        cv_.notify_all();
        return;
      }
    }
    Sweep(&failed);
    if (!failed.empty()) {
      lock.unlock();
      FailAll(failed);
      cv_.notify_all();  // a released sequence may have moved the backlog into another instance's row
      lock.lock();
      continue;
    }
    const auto now = Clock::now();
    Clock::time_point wake_at = Clock::time_point::max();
    std::vector<JobPtr> batch = Form(instance, now, &wake_at);
    if (!batch.empty()) {
      ++executing_;
      lock.unlock();
      executor_(instance, batch);
      lock.lock();
      --executing_;
      const auto done = Clock::now();
      for (const JobPtr& job : batch) {
        if (!job) continue;
        auto it = sequences_.find(job->sequence);
        if (it == sequences_.end()) continue;
        Sequence* s = it->second.get();
        s->running = false;
        s->last = done;
        // Ended: its END request ran, or was cancelled while this one ran.
        if ((job->sequence_end || s->ended) && s->jobs.empty()) Release(s, Status::Ok(), &failed);
      }
      lock.unlock();
      batch.clear();  // jobs are destroyed outside the lock
      FailAll(failed);
      cv_.notify_all();  // the sequences' next requests may run elsewhere; slots may have been freed
      lock.lock();
      continue;
    }
    if (stopping_) {
      bool left = false;
      if (options_.oldest) {
        left = queued_ > 0;
      } else {
        for (Sequence* s : slots_[static_cast<size_t>(instance)]) left = left || (s && !s->jobs.empty());
      }
      if (!left) break;
    }
    if (wake_at == Clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, wake_at);
    }
  }
  lock.unlock();
  cv_.notify_all();
}

void SequenceBatcher::ReaperLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  Failures failed;
  while (!stopping_) {
    const auto now = Clock::now();
    Clock::time_point next = Clock::time_point::max();
    std::vector<Sequence*> idle;
    if (options_.max_sequence_idle_us > 0) {
      const auto limit = std::chrono::microseconds(options_.max_sequence_idle_us);
      for (auto& [key, s] : sequences_) {
        if (s->running || !s->jobs.empty()) continue;
        if (s->last + limit <= now) {
          idle.push_back(s.get());
        } else {
          next = std::min(next, s->last + limit);
        }
      }
    }
    for (Sequence* s : idle) Release(s, Status::Ok(), &failed);
    if (!idle.empty()) {
      lock.unlock();
      FailAll(failed);
      cv_.notify_all();  // the backlog may have moved into the freed slots
      lock.lock();
      continue;
    }
    if (next == Clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, next);
    }
  }
}

void SequenceBatcher::Stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  Failures failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      const std::vector<Sequence*> waiting(backlog_.begin(), backlog_.end());
      for (Sequence* s : waiting)
        Release(s, Unavailable(options_.name, " is unloading; sequence ", s->key, " never got a slot"), &failed);
    }
  }
  FailAll(failed);
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  if (reaper_.joinable()) reaper_.join();
}

size_t SequenceBatcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

size_t SequenceBatcher::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_ + executing_;
}

int SequenceBatcher::active_instances() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_.instances - retired_count_;
}

size_t SequenceBatcher::active_sequences() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sequences_.size() - backlog_.size();
}

size_t SequenceBatcher::backlog_sequences() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backlog_.size();
}

}  // namespace sampan::server::scheduler
