#include "server/core/server_metrics.h"

namespace sampan::server {

namespace {
// Request latency buckets (seconds): 100 us .. 60 s, about 2-2.5x apart, fine enough for p95/p99
// with histogram_quantile, and closer between 5 and 25 ms, where GPU latency SLOs sit (a 15 ms
// SLO's misses are a bucket count).
const std::vector<double> kLatencyBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075,
                                             0.01,   0.015,   0.02,   0.025, 0.05,   0.1,   0.25,
                                             0.5,    1,       2.5,    5,     10,     30,    60};
}  // namespace

ServerMetrics::ServerMetrics()
    : success(registry.AddCounter("nv_inference_request_success",
                                  "Number of successful inference requests, all batch sizes")),
      failure(
          registry.AddCounter("nv_inference_request_failure", "Number of failed inference requests, all batch sizes")),
      count(registry.AddCounter("nv_inference_count",
                                "Number of inferences performed (does not include cached requests)")),
      exec_count(registry.AddCounter("nv_inference_exec_count",
                                     "Number of model executions performed (does not include cached requests)")),
      pending(registry.AddGauge("nv_inference_pending_request_count",
                                "Instantaneous number of pending requests awaiting execution per-model.")),
      request_duration(
          registry.AddCounter("nv_inference_request_duration_us",
                              "Cumulative inference request duration in microseconds (includes cached requests)")),
      queue_duration(
          registry.AddCounter("nv_inference_queue_duration_us",
                              "Cumulative inference queuing duration in microseconds (includes cached requests)")),
      compute_input(
          registry.AddCounter("nv_inference_compute_input_duration_us",
                              "Cumulative compute input duration in microseconds (does not include cached requests)")),
      compute_infer(registry.AddCounter(
          "nv_inference_compute_infer_duration_us",
          "Cumulative compute inference duration in microseconds (does not include cached requests)")),
      compute_output(registry.AddCounter(
          "nv_inference_compute_output_duration_us",
          "Cumulative inference compute output duration in microseconds (does not include cached requests)")),
      latency(registry.AddHistogram("sampan_request_latency_seconds",
                                    "End-to-end inference request latency in seconds, from receipt to response",
                                    kLatencyBuckets)),
      queue_seconds(registry.AddHistogram("sampan_queue_duration_seconds",
                                          "Time a request waited in the queue, in seconds", kLatencyBuckets)),
      compute_seconds(registry.AddHistogram("sampan_compute_duration_seconds",
                                            "Compute time of a request (input, inference, output), in seconds",
                                            kLatencyBuckets)),
      inflight(registry.AddGauge("sampan_inflight_requests", "Requests queued or executing per model version")),
      saturation(registry.AddGauge("sampan_model_saturation",
                                   "Requests queued or executing / requests the instances complete within the "
                                   "latency SLO at their measured rate (1 = at capacity)")),
      latency_slo(registry.AddGauge("sampan_model_latency_slo_seconds",
                                    "The model's latency target (config.pbtxt sampan.latency_slo_ms), in seconds")),
      slo_misses(registry.AddCounter("sampan_slo_deadline_misses_total",
                                     "Successful requests answered later than the model's latency SLO after "
                                     "their receipt")),
      slo_shed(registry.AddCounter("sampan_slo_shed_total",
                                   "Requests the SLO batcher took out of the queue because they could no longer "
                                   "meet the latency SLO (rejected, or delayed behind the others by the queue "
                                   "policy)")),
      slo_target(registry.AddGauge("sampan_slo_target_batch_size",
                                   "The batch size the SLO batcher aims for at the current arrival rate")),
      slo_capacity(registry.AddGauge("sampan_slo_capacity_inferences_per_second",
                                     "Inferences per second the instances complete within the latency SLO, from "
                                     "the measured execution times (0 before the first)")),
      slo_arrivals(registry.AddGauge("sampan_slo_arrival_inferences_per_second",
                                     "Inferences per second arriving, as the SLO batcher estimates them")),
      batch_buckets(registry.AddCounter("sampan_batch_bucket_executions_total",
                                        "Executions per batch bucket (the padded batch size that ran)")),
      cache_hits(registry.AddCounter("nv_cache_num_hits_per_model", "Number of cache hits per model")),
      cache_misses(registry.AddCounter("nv_cache_num_misses_per_model", "Number of cache misses per model")),
      cache_hit_duration(registry.AddCounter("nv_cache_hit_duration_per_model",
                                             "Total cache hit duration per model, in microseconds")),
      cache_miss_duration(
          registry.AddCounter("nv_cache_miss_duration_per_model",
                              "Total cache miss (lookup and insertion) duration per model, in microseconds")),
      canary_percent(registry.AddGauge("sampan_version_canary_percent",
                                       "Share of the model's unversioned requests this version takes as a canary "
                                       "(percent; 0 when no canary runs)")),
      canary_requests(registry.AddCounter("sampan_version_canary_requests_total",
                                          "Unversioned requests the canary split sent to this version (the canary "
                                          "or its baseline), by outcome")),
      promotions(registry.AddCounter("sampan_version_promotions_total",
                                     "Canary versions promoted to serve every unversioned request")),
      rollbacks(registry.AddCounter("sampan_version_rollbacks_total", "Canary versions rolled back")),
      device_count(registry.AddCounter("sampan_device_inference_count",
                                       "Number of inferences performed on each device (sums to nv_inference_count)")),
      device_exec_count(
          registry.AddCounter("sampan_device_execution_count",
                              "Number of model executions on each device (sums to nv_inference_exec_count)")),
      gpu_utilization(registry.AddGauge("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)")),
      gpu_memory_used(registry.AddGauge("nv_gpu_memory_used_bytes", "GPU used memory, in bytes")),
      gpu_memory_total(registry.AddGauge("nv_gpu_memory_total_bytes", "GPU total memory, in bytes")),
      gpu_power(registry.AddGauge("nv_gpu_power_usage", "GPU power usage in watts")),
      gpus(metrics::GpuMonitor::Open()) {}

void ServerMetrics::SampleGpus() {
  if (!gpus) return;
  for (metrics::Family* f : {&gpu_utilization, &gpu_memory_used, &gpu_memory_total, &gpu_power}) f->Clear();
  for (const auto& s : gpus->Sample()) {
    metrics::Labels l = {{"gpu_uuid", s.uuid}};
    gpu_utilization.gauge(l).Set(s.utilization);
    gpu_memory_used.gauge(l).Set(s.memory_used);
    gpu_memory_total.gauge(l).Set(s.memory_total);
    if (s.has_power) gpu_power.gauge(l).Set(s.power_watts);
  }
}

VersionMetrics::VersionMetrics(ServerMetrics& m, const std::string& model, const std::string& version)
    : success(m.success.counter({{"model", model}, {"version", version}})),
      count(m.count.counter({{"model", model}, {"version", version}})),
      exec_count(m.exec_count.counter({{"model", model}, {"version", version}})),
      request_us(m.request_duration.counter({{"model", model}, {"version", version}})),
      queue_us(m.queue_duration.counter({{"model", model}, {"version", version}})),
      input_us(m.compute_input.counter({{"model", model}, {"version", version}})),
      infer_us(m.compute_infer.counter({{"model", model}, {"version", version}})),
      output_us(m.compute_output.counter({{"model", model}, {"version", version}})),
      fail_rejected(m.failure.counter({{"model", model}, {"reason", "REJECTED"}, {"version", version}})),
      fail_canceled(m.failure.counter({{"model", model}, {"reason", "CANCELED"}, {"version", version}})),
      fail_backend(m.failure.counter({{"model", model}, {"reason", "BACKEND"}, {"version", version}})),
      fail_other(m.failure.counter({{"model", model}, {"reason", "OTHER"}, {"version", version}})),
      pending(m.pending.gauge({{"model", model}, {"version", version}})),
      latency(m.latency.histogram({{"model", model}, {"version", version}})),
      queue_seconds(m.queue_seconds.histogram({{"model", model}, {"version", version}})),
      compute_seconds(m.compute_seconds.histogram({{"model", model}, {"version", version}})),
      inflight(m.inflight.gauge({{"model", model}, {"version", version}})),
      saturation(m.saturation.gauge({{"model", model}, {"version", version}})) {}

DeviceMetrics::DeviceMetrics(ServerMetrics& m, const std::string& model, const std::string& version,
                             const std::string& backend, int device)
    : count(m.device_count.counter(
          {{"model", model}, {"version", version}, {"device", std::to_string(device)}, {"backend", backend}})),
      exec_count(m.device_exec_count.counter(
          {{"model", model}, {"version", version}, {"device", std::to_string(device)}, {"backend", backend}})) {}

}  // namespace sampan::server
