// The Prometheus text exposition (format 0.0.4): HELP/TYPE lines, label
// escaping, number formatting, histogram buckets (cumulative, le inclusive,
// +Inf), and families without series left out.
#include "server/metrics/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "server/metrics/gpu_metrics.h"

namespace sampan::server::metrics {
namespace {

TEST(MetricsTest, CounterAndGaugeRender) {
  Registry r;
  Family& c = r.AddCounter("nv_inference_count", "Number of inferences performed");
  Family& g = r.AddGauge("nv_inference_pending_request_count", "Pending requests");
  c.counter({{"model", "resnet"}, {"version", "1"}}).Increment(3);
  c.counter({{"model", "resnet"}, {"version", "1"}}).Increment(2);
  c.counter({{"model", "resnet"}, {"version", "1"}}).Increment(-7);  // counters never go down
  g.gauge({{"model", "resnet"}, {"version", "1"}}).Set(4);
  g.gauge({{"model", "resnet"}, {"version", "1"}}).Add(-1.5);
  EXPECT_EQ(r.Render(),
            "# HELP nv_inference_count Number of inferences performed\n"
            "# TYPE nv_inference_count counter\n"
            "nv_inference_count{model=\"resnet\",version=\"1\"} 5\n"
            "# HELP nv_inference_pending_request_count Pending requests\n"
            "# TYPE nv_inference_pending_request_count gauge\n"
            "nv_inference_pending_request_count{model=\"resnet\",version=\"1\"} 2.5\n");
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  Registry r;
  Family& c = r.AddCounter("x_total", "line one\nback\\slash");
  c.counter({{"model", "a\"b\\c\nd"}}).Increment();
  EXPECT_EQ(r.Render(),
            "# HELP x_total line one\\nback\\\\slash\n"
            "# TYPE x_total counter\n"
            "x_total{model=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(MetricsTest, NumbersUsePrometheusSpelling) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(12345678), "12345678");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(1e21), "1e+21");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatValue(0.0 / 0.0), "NaN");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndInclusive) {
  Registry r;
  Family& h = r.AddHistogram("sampan_request_latency_seconds", "Latency", {0.25, 0.5, 1});
  Histogram& s = h.histogram({{"model", "m"}});
  for (double v : {0.125, 0.25, 0.375, 0.75, 4.0}) s.Observe(v);
  EXPECT_EQ(r.Render(),
            "# HELP sampan_request_latency_seconds Latency\n"
            "# TYPE sampan_request_latency_seconds histogram\n"
            "sampan_request_latency_seconds_bucket{model=\"m\",le=\"0.25\"} 2\n"
            "sampan_request_latency_seconds_bucket{model=\"m\",le=\"0.5\"} 3\n"
            "sampan_request_latency_seconds_bucket{model=\"m\",le=\"1\"} 4\n"
            "sampan_request_latency_seconds_bucket{model=\"m\",le=\"+Inf\"} 5\n"
            "sampan_request_latency_seconds_sum{model=\"m\"} 5.5\n"
            "sampan_request_latency_seconds_count{model=\"m\"} 5\n");
}

TEST(MetricsTest, FamiliesWithoutSeriesAreLeftOutAndRemovalWorks) {
  Registry r;
  Family& gpu = r.AddGauge("nv_gpu_utilization", "GPU utilization");
  EXPECT_EQ(r.Render(), "");
  gpu.gauge({{"gpu_uuid", "GPU-1"}}).Set(0.5);
  EXPECT_NE(r.Render().find("nv_gpu_utilization{gpu_uuid=\"GPU-1\"} 0.5"), std::string::npos);
  gpu.Remove({{"gpu_uuid", "GPU-1"}});
  EXPECT_EQ(r.Render(), "");
  // Registering the same name again returns the same family.
  EXPECT_EQ(&r.AddGauge("nv_gpu_utilization", "other help"), &gpu);
  EXPECT_EQ(r.Find("nv_gpu_utilization"), &gpu);
  EXPECT_EQ(r.Find("absent"), nullptr);
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  Registry r;
  Counter& c = r.AddCounter("c", "c").counter({});
  Histogram& h = r.AddHistogram("h", "h", {1}).histogram({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(0.5);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 80000);
  EXPECT_EQ(h.snapshot().count, 80000u);
  EXPECT_EQ(h.snapshot().cumulative[0], 80000u);
}

TEST(MetricsTest, GpuMonitorSamplesEveryGpuOrIsAbsent) {
  auto gpus = GpuMonitor::Open();
  if (!gpus) GTEST_SKIP() << "no NVML or no GPU on this machine: GPU series are absent, as intended";
  auto samples = gpus->Sample();
  ASSERT_FALSE(samples.empty());
  for (const auto& s : samples) {
    EXPECT_EQ(s.uuid.rfind("GPU-", 0), 0u) << s.uuid;
    EXPECT_GT(s.memory_total, 0);
    EXPECT_LE(s.memory_used, s.memory_total);
    EXPECT_GE(s.utilization, 0);
    EXPECT_LE(s.utilization, 1);
  }
}

}  // namespace
}  // namespace sampan::server::metrics
