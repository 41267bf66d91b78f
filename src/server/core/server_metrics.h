// The server's metric families (Triton's names where Triton has one) and the
// per-model-version series handles the hot path updates.
#pragma once

#include <memory>
#include <string>

#include "server/metrics/gpu_metrics.h"
#include "server/metrics/metrics.h"

namespace sampan::server {

struct ServerMetrics {
  ServerMetrics();
  metrics::Registry registry;
  metrics::Family& success;
  metrics::Family& failure;
  metrics::Family& count;
  metrics::Family& exec_count;
  metrics::Family& pending;
  metrics::Family& request_duration;
  metrics::Family& queue_duration;
  metrics::Family& compute_input;
  metrics::Family& compute_infer;
  metrics::Family& compute_output;
  metrics::Family& latency;
  metrics::Family& queue_seconds;    //!< histogram of queue time per request
  metrics::Family& compute_seconds;  //!< histogram of compute time (input + infer + output) per request
  metrics::Family& inflight;         //!< requests queued or executing
  metrics::Family& saturation;       //!< inflight / what the instances complete within the latency SLO
  metrics::Family& latency_slo;      //!< sampan.latency_slo_ms in seconds (models that set it)
  metrics::Family& slo_misses;       //!< successful requests answered after the latency SLO
  metrics::Family& slo_shed;         //!< requests the SLO batcher took out of the queue as late
  metrics::Family& slo_target;       //!< the SLO batcher's target batch size
  metrics::Family& slo_capacity;     //!< inferences per second the instances complete within the SLO
  metrics::Family& slo_arrivals;     //!< inferences per second arriving (the SLO batcher's estimate)
  metrics::Family& batch_buckets;    //!< executions per batch bucket (the padded size that ran)
  metrics::Family& cache_hits;       //!< response cache, per model (Triton's names)
  metrics::Family& cache_misses;
  metrics::Family& cache_hit_duration;   //!< us: lookups that hit
  metrics::Family& cache_miss_duration;  //!< us: lookups that missed plus the insertion
  metrics::Family& canary_percent;       //!< per version: its share of unversioned requests as a canary (0: none)
  metrics::Family& canary_requests;      //!< per version and outcome: requests the canary split sent it
  metrics::Family& promotions;           //!< per model: canaries promoted
  metrics::Family& rollbacks;            //!< per model: canaries rolled back
  metrics::Family& device_count;         //!< per device: nv_inference_count split by where it ran
  metrics::Family& device_exec_count;    //!< per device: nv_inference_exec_count split likewise
  metrics::Family& gpu_utilization;
  metrics::Family& gpu_memory_used;
  metrics::Family& gpu_memory_total;
  metrics::Family& gpu_power;
  std::unique_ptr<metrics::GpuMonitor> gpus;  //!< nullptr without NVML or a GPU
  //! Refreshes the GPU gauges (called before each render).
  void SampleGpus();
};

//! A model version's series, resolved once at load.
struct VersionMetrics {
  VersionMetrics(ServerMetrics& m, const std::string& model, const std::string& version);
  metrics::Counter &success, &count, &exec_count, &request_us, &queue_us, &input_us, &infer_us, &output_us;
  metrics::Counter &fail_rejected, &fail_canceled, &fail_backend, &fail_other;
  metrics::Gauge& pending;
  metrics::Histogram& latency;
  metrics::Histogram &queue_seconds, &compute_seconds;
  metrics::Gauge &inflight, &saturation;
  //! Set only for a model with sampan.latency_slo_ms.
  metrics::Counter* slo_misses = nullptr;
  //! Set only when the SLO batcher schedules the model.
  metrics::Counter* slo_shed = nullptr;
  metrics::Gauge *slo_target = nullptr, *slo_capacity = nullptr, *slo_arrivals = nullptr;
  //! The family of executions per bucket (label `bucket`), for this version's labels.
  metrics::Family* batch_buckets = nullptr;
  //! Set only for a model whose config enables the response cache.
  metrics::Counter *cache_hits = nullptr, *cache_misses = nullptr, *cache_hit_us = nullptr, *cache_miss_us = nullptr;
};

//! A model version's series for one device it runs on (label device="0"...).
struct DeviceMetrics {
  DeviceMetrics(ServerMetrics& m, const std::string& model, const std::string& version, const std::string& backend,
                int device);
  metrics::Counter &count, &exec_count;
};

}  // namespace sampan::server
