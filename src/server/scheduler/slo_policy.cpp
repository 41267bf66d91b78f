#include "server/scheduler/slo_policy.h"

#include <algorithm>
#include <cmath>

namespace sampan::server::scheduler {
namespace {

SloClock::duration Us(double us) {
  return std::chrono::duration_cast<SloClock::duration>(std::chrono::duration<double, std::micro>(std::max(0.0, us)));
}

}  // namespace

// ---------------------------------------------------------------- Ewma

void Ewma::Observe(double x) {
  if (!std::isfinite(x)) return;
  if (n_ == 0) {
    mean_ = x;
    var_ = 0;
  } else {
    // West's exponentially weighted mean and variance.
    const double diff = x - mean_;
    const double inc = alpha_ * diff;
    mean_ += inc;
    var_ = (1 - alpha_) * (var_ + diff * inc);
  }
  ++n_;
}

double Ewma::sd() const {
  return std::sqrt(std::max(0.0, var_));
}

// ---------------------------------------------------------------- ExecTimeModel

void ExecTimeModel::Observe(int64_t bucket, double us) {
  if (bucket < 1 || !std::isfinite(us) || us < 0) return;
  stats_.try_emplace(bucket, alpha_).first->second.Observe(us);
}

ExecTimeModel::Estimate ExecTimeModel::At(int64_t bucket) const {
  Estimate e;
  if (stats_.empty() || bucket < 1) return e;
  e.known = true;
  auto above = stats_.lower_bound(bucket);
  if (above != stats_.end() && above->first == bucket) {
    e.mean_us = above->second.mean();
    e.sd_us = above->second.sd();
    e.samples = above->second.samples();
    return e;
  }
  const auto scaled = [&](const std::pair<const int64_t, Ewma>& s) {
    const double f = static_cast<double>(bucket) / static_cast<double>(s.first);
    e.mean_us = s.second.mean() * f;
    e.sd_us = s.second.sd() * f;
  };
  if (above == stats_.end()) {
    scaled(*std::prev(above));
  } else if (above == stats_.begin()) {
    scaled(*above);
  } else {
    const auto below = std::prev(above);
    const double f = static_cast<double>(bucket - below->first) / static_cast<double>(above->first - below->first);
    e.mean_us = below->second.mean() + f * (above->second.mean() - below->second.mean());
    e.sd_us = below->second.sd() + f * (above->second.sd() - below->second.sd());
  }
  return e;
}

std::vector<std::pair<int64_t, ExecTimeModel::Estimate>> ExecTimeModel::Measured() const {
  std::vector<std::pair<int64_t, Estimate>> out;
  for (const auto& [b, s] : stats_) out.emplace_back(b, At(b));
  return out;
}

// ---------------------------------------------------------------- ArrivalRate

void ArrivalRate::Add(SloClock::time_point t, int64_t rows) {
  events_.emplace_back(t, std::max<int64_t>(rows, 1));
  while (events_.size() > max_events_ || (!events_.empty() && events_.front().first < t - window_)) events_.pop_front();
}

double ArrivalRate::RowsPerSecond(SloClock::time_point now) const {
  auto first = std::find_if(events_.begin(), events_.end(), [&](const auto& e) { return e.first >= now - window_; });
  const size_t n = static_cast<size_t>(events_.end() - first);
  if (n == 0) return 0;
  double rows = 0;
  for (auto it = first; it != events_.end(); ++it) rows += static_cast<double>(it->second);
  if (n < max_events_) return rows / std::chrono::duration<double>(window_).count();
  // More arrivals than the buffer holds within the window: the rate over their span.
  const double span = std::chrono::duration<double>(now - first->first).count();
  if (span <= 0) return rows / 1e-6;
  return (rows - static_cast<double>(first->second)) / span;
}

// ---------------------------------------------------------------- SloPolicy

SloPolicy::SloPolicy(SloConfig config) : config_(std::move(config)) {
  config_.max_batch_size = std::max<int64_t>(config_.max_batch_size, 1);
  std::sort(config_.buckets.begin(), config_.buckets.end());
}

int64_t SloPolicy::Bucket(int64_t rows) const {
  for (int64_t b : config_.buckets)
    if (b >= rows) return b;
  return rows;
}

uint64_t SloPolicy::Tail(uint64_t budget_us) {
  return std::min(budget_us, std::max<uint64_t>(200, budget_us / 20));
}

SloClock::time_point SloPolicy::Deadline(SloClock::time_point enqueued, uint64_t client_timeout_us) const {
  uint64_t budget = config_.slo_us;
  if (client_timeout_us > 0) budget = std::min(budget, client_timeout_us);
  return enqueued + std::chrono::microseconds(budget);
}

SloClock::time_point SloPolicy::PlanBy(SloClock::time_point enqueued, SloClock::time_point deadline) {
  if (deadline == SloClock::time_point::max()) return deadline;
  const auto budget = std::chrono::duration_cast<std::chrono::microseconds>(deadline - enqueued).count();
  return deadline - std::chrono::microseconds(Tail(static_cast<uint64_t>(std::max<int64_t>(budget, 0))));
}

bool SloPolicy::Late(const ExecTimeModel& model, SloClock::time_point now, int64_t rows,
                     SloClock::time_point deadline) const {
  return now > LateAt(model, rows, deadline);
}

SloClock::time_point SloPolicy::LateAt(const ExecTimeModel& model, int64_t rows, SloClock::time_point deadline) const {
  if (deadline == SloClock::time_point::max()) return deadline;
  return deadline - Us(model.At(Bucket(rows)).mean_us);
}

std::vector<int64_t> SloPolicy::Sizes(int64_t limit) const {
  std::vector<int64_t> sizes;
  if (!config_.buckets.empty()) {
    for (int64_t b : config_.buckets)
      if (b <= limit) sizes.push_back(b);
    if (sizes.empty()) sizes.push_back(config_.buckets.front());
    return sizes;
  }
  for (int64_t p = 1; p < limit; p *= 2) {
    sizes.push_back(p);
    if (p >= 2 && p + p / 2 < limit) sizes.push_back(p + p / 2);
  }
  sizes.push_back(limit);
  return sizes;
}

int64_t SloPolicy::Cap(const ExecTimeModel& model, int instances) const {
  const std::vector<int64_t> sizes = Sizes(config_.max_batch_size);
  if (model.empty()) return sizes.back();
  const double budget = static_cast<double>(config_.slo_us) - static_cast<double>(Tail(config_.slo_us));
  const double wait = 1.0 + 1.0 / std::max(instances, 1);
  int64_t cap = sizes.front();
  for (int64_t b : sizes) {
    const auto e = model.At(b);
    if (e.mean_us * wait + config_.sigmas * e.sd_us <= budget) cap = b;
  }
  return cap;
}

double SloPolicy::Capacity(const ExecTimeModel& model, int instances) const {
  const int64_t cap = Cap(model, instances);
  const double mean = model.At(cap).mean_us;
  if (mean <= 0) return 0;
  return std::max(instances, 1) * static_cast<double>(cap) / mean * 1e6;
}

int64_t SloPolicy::Target(const ExecTimeModel& model, double rows_per_s, int instances, int64_t cap) const {
  const std::vector<int64_t> sizes = Sizes(cap);
  if (rows_per_s <= 0 || model.empty()) return sizes.front();
  int64_t best = sizes.front();
  double best_rate = -1;
  for (int64_t b : sizes) {
    const double mean = model.At(b).mean_us;
    if (mean <= 0) return b;
    const double rate = std::max(instances, 1) * static_cast<double>(b) / mean * 1e6;
    if (rate * config_.utilization >= rows_per_s) return b;
    if (rate >= best_rate) best = b, best_rate = rate;
  }
  return best;
}

SloDecision SloPolicy::Decide(SloClock::time_point now, const std::vector<SloPick>& picks, bool full,
                              const ExecTimeModel& model, double rows_per_s, int instances,
                              double wake_margin_us) const {
  SloDecision d;
  if (picks.empty()) return d;
  d.cap = Cap(model, instances);
  d.target = std::min(Target(model, rows_per_s, instances, d.cap), d.cap);

  // Rows after each pick; the picks within the cap (at least the first: a job larger than the
  // cap still runs, alone).
  std::vector<int64_t> prefix;
  int64_t rows = 0;
  for (const SloPick& p : picks) prefix.push_back(rows += p.rows);
  size_t within = 0;
  while (within < prefix.size() && prefix[within] <= d.cap) ++within;
  within = std::max<size_t>(within, 1);
  const bool reached_cap = within < picks.size() || prefix[within - 1] >= d.cap;

  SloClock::time_point earliest = SloClock::time_point::max();
  for (size_t i = 0; i < within; ++i) earliest = std::min(earliest, picks[i].plan_by);

  bool run = full || reached_cap || prefix[within - 1] >= d.target || earliest == SloClock::time_point::max();
  if (!run) {
    const SloClock::time_point latest = earliest - Us(Upper(model.At(Bucket(d.target))) + wake_margin_us);
    if (now >= latest) {
      run = true;
    } else {
      d.wake_at = latest;
      return d;
    }
  }

  // Which prefix: the most rows per second expected to end by their deadlines; ties go to the larger.
  size_t best = 0;
  double best_rate = -1;
  SloClock::time_point dmin = SloClock::time_point::max();
  for (size_t i = 0; i < within; ++i) {
    dmin = std::min(dmin, picks[i].deadline);
    const auto e = model.At(Bucket(prefix[i]));
    double on_time = 1;
    if (dmin != SloClock::time_point::max()) {
      const double slack = std::chrono::duration<double, std::micro>(dmin - now).count();
      on_time = e.sd_us > 0 ? 0.5 * std::erfc(-(slack - e.mean_us) / (e.sd_us * std::sqrt(2.0)))
                            : (slack >= e.mean_us ? 1.0 : 0.0);
    }
    const double rate = static_cast<double>(prefix[i]) * on_time / std::max(e.mean_us, 1.0);
    if (rate >= best_rate) best = i + 1, best_rate = rate;
  }
  d.take = best;
  d.bucket = Bucket(prefix[best - 1]);
  return d;
}

}  // namespace sampan::server::scheduler
