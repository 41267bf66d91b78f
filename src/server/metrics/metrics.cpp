#include "server/metrics/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace sampan::server::metrics {

namespace {

void AtomicAdd(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

const char* TypeName(Type t) {
  switch (t) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"}` (empty when there are no labels); `extra` is appended last (histogram "le").
std::string LabelText(const Labels& labels, const std::pair<std::string, std::string>* extra = nullptr) {
  if (labels.empty() && !extra) return "";
  std::string s = "{";
  bool first = true;
  auto add = [&](const std::string& k, const std::string& v) {
    if (!first) s += ',';
    first = false;
    s += k;
    s += "=\"";
    s += EscapeLabelValue(v);
    s += '"';
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (extra) add(extra->first, extra->second);
  return s + "}";
}

}  // namespace

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

std::string EscapeLabelValue(const std::string& v) {
  std::string s;
  s.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      s += "\\\\";
    else if (c == '"')
      s += "\\\"";
    else if (c == '\n')
      s += "\\n";
    else
      s += c;
  }
  return s;
}

std::string EscapeHelp(const std::string& v) {
  std::string s;
  for (char c : v) {
    if (c == '\\')
      s += "\\\\";
    else if (c == '\n')
      s += "\\n";
    else
      s += c;
  }
  return s;
}

void Counter::Increment(double v) {
  if (v > 0) AtomicAdd(value_, v);
}

void Gauge::Add(double v) {
  AtomicAdd(value_, v);
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double v) {
  // Bucket i counts v <= bounds[i] (Prometheus "le" is inclusive).
  size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

Family::Series& Family::Get(const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series_[labels];
  if (!s.counter && !s.gauge && !s.histogram) {
    switch (type_) {
      case Type::kCounter:
        s.counter = std::make_unique<Counter>();
        break;
      case Type::kGauge:
        s.gauge = std::make_unique<Gauge>();
        break;
      case Type::kHistogram:
        s.histogram = std::make_unique<Histogram>(bounds_);
        break;
    }
  }
  return s;
}

// A type mismatch is a programming error in the server; a dummy keeps the process alive.
Counter& Family::counter(const Labels& labels) {
  static Counter dummy;
  Series& s = Get(labels);
  return s.counter ? *s.counter : dummy;
}

Gauge& Family::gauge(const Labels& labels) {
  static Gauge dummy;
  Series& s = Get(labels);
  return s.gauge ? *s.gauge : dummy;
}

Histogram& Family::histogram(const Labels& labels) {
  static Histogram dummy({});
  Series& s = Get(labels);
  return s.histogram ? *s.histogram : dummy;
}

void Family::Remove(const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  series_.erase(labels);
}

void Family::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  series_.clear();
}

void Family::Render(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (series_.empty()) return;
  *out += "# HELP " + name_ + " " + EscapeHelp(help_) + "\n";
  *out += "# TYPE " + name_ + " " + TypeName(type_) + "\n";
  for (const auto& [labels, s] : series_) {
    if (s.counter || s.gauge) {
      *out += name_ + LabelText(labels) + " " + FormatValue(s.counter ? s.counter->value() : s.gauge->value()) + "\n";
      continue;
    }
    Histogram::Snapshot snap = s.histogram->snapshot();
    for (size_t i = 0; i <= snap.bounds.size(); ++i) {
      std::pair<std::string, std::string> le{"le", i < snap.bounds.size() ? FormatValue(snap.bounds[i]) : "+Inf"};
      *out += name_ + "_bucket" + LabelText(labels, &le) + " " + std::to_string(snap.cumulative[i]) + "\n";
    }
    *out += name_ + "_sum" + LabelText(labels) + " " + FormatValue(snap.sum) + "\n";
    *out += name_ + "_count" + LabelText(labels) + " " + std::to_string(snap.count) + "\n";
  }
}

Family& Registry::Add(const std::string& name, const std::string& help, Type type, std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& f : families_)
    if (f->name() == name) return *f;
  families_.push_back(std::make_unique<Family>(name, help, type, std::move(bounds)));
  return *families_.back();
}

Family& Registry::AddCounter(const std::string& name, const std::string& help) {
  return Add(name, help, Type::kCounter, {});
}
Family& Registry::AddGauge(const std::string& name, const std::string& help) {
  return Add(name, help, Type::kGauge, {});
}
Family& Registry::AddHistogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  return Add(name, help, Type::kHistogram, std::move(bounds));
}

Family* Registry::Find(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& f : families_)
    if (f->name() == name) return f.get();
  return nullptr;
}

std::string Registry::Render() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& f : families_) f->Render(&out);
  return out;
}

}  // namespace sampan::server::metrics
