// A small metrics registry: counters, gauges and histograms with labels,
// rendered in the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Families are created once and live as long as the registry; a series
// (one label set) is created on first use and its address stays valid until
// the family drops it, so hot paths keep a pointer and update it lock-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sampan::server::metrics {

//! Label name/value pairs, in the order they are rendered.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  //! `v` must be >= 0 (counters only go up); negative values are ignored.
  void Increment(double v = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  //! `bounds`: upper bounds of the buckets, ascending (+Inf is implied).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  //!< one per bound, then +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last = +Inf
  double sum_ = 0;
};

enum class Type { kCounter, kGauge, kHistogram };

//! One metric name: its help, its type, and a series per label set.
class Family {
 public:
  Family(std::string name, std::string help, Type type, std::vector<double> bounds = {})
      : name_(std::move(name)), help_(std::move(help)), type_(type), bounds_(std::move(bounds)) {}
  const std::string& name() const { return name_; }
  Type type() const { return type_; }

  //! The series with these labels, created on first use. The type must match the family.
  Counter& counter(const Labels& labels);
  Gauge& gauge(const Labels& labels);
  Histogram& histogram(const Labels& labels);
  //! Drops one series / every series (their references become invalid).
  void Remove(const Labels& labels);
  void Clear();

  void Render(std::string* out) const;

 private:
  struct Series {
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  Series& Get(const Labels& labels);

  std::string name_, help_;
  Type type_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<Labels, Series> series_;
};

class Registry {
 public:
  //! Registers a family; registering a name twice returns the first one.
  Family& AddCounter(const std::string& name, const std::string& help);
  Family& AddGauge(const std::string& name, const std::string& help);
  Family& AddHistogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  //! nullptr when there is no family of that name.
  Family* Find(const std::string& name);

  //! Every family with at least one series, in registration order.
  std::string Render() const;

 private:
  Family& Add(const std::string& name, const std::string& help, Type type, std::vector<double> bounds);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;
};

//! Prometheus number text: shortest round-trip form, "+Inf", "-Inf", "NaN".
std::string FormatValue(double v);
//! A label value with \, " and newline escaped.
std::string EscapeLabelValue(const std::string& v);
//! HELP text with \ and newline escaped.
std::string EscapeHelp(const std::string& v);

}  // namespace sampan::server::metrics
