// The "sim" backend: a SIMULATED GPU for cluster rehearsals (issue #22). A sim plan runs by
// waiting, on a precise timer, for the time a recorded profile of a real GPU plan gives for the
// batch size, and produces deterministic outputs of the right types and shapes. Eight GPU
// nodes can so be rehearsed on two cores with realistic batching, saturation and scaling.
//
//   sampan bench --loadEngine resnet50_b8.plan --json b8.json ...        (on the real GPU, per batch)
//   sampan build resnet50.onnx --backend sim --sim-profile b1.json --sim-profile b8.json ...
//
// The profile: per batch size, the latency of one run (bench's `latency_ms.median`) and the
// time it keeps the device busy (1000 / `throughput_qps`, which is shorter when bench pipelined
// runs). Between recorded batch sizes both are interpolated linearly; below the smallest the
// smallest's apply; above the largest they grow in proportion to the batch.
//
// The machine: SAMPAN_SIM_DEVICES simulated devices (default 1, at most 64), each with
// SAMPAN_SIM_DEVICE_MEMORY_MIB MiB (default 143771, an H200). An engine takes its plan's
// weight bytes on its device (load fails when the device is full). Each device runs one batch
// at a time in arrival order: a run starts when the device is free, keeps it busy for the
// occupancy and returns after the latency.
//
// Fault injection (the rehearsal's "GPU fault"): while the file SAMPAN_SIM_FAULT_FILE names
// exists, the next run on each device hits a simulated sticky device error, as a CUDA context does
// after an illegal memory access: that run fails (kInternal) and the device stays broken for the
// process's life (the engine's Health() says why; the server retires it and its model goes not
// ready). The file may list device indexes (whitespace-separated); empty, every device breaks.
// With the word `transient` in it, runs fail while the file exists but nothing is sticky (a
// flaky model: the server's error-rate rule, server/core/model_health.h, is what drains it).
//
// Everything about it says "simulated": `sampan info`,
// `--help`, the engine's description (bench, the server's log) and the metrics' backend label.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace sampan::sim {

//! One recorded batch size.
struct LatencyPoint {
  int64_t batch = 0;
  double latency_ms = 0;    //!< one run, start to end
  double occupancy_ms = 0;  //!< how long the run keeps the device busy (<= latency_ms)
  bool operator==(const LatencyPoint&) const = default;
};

//! What the plan records: points in increasing batch order, and where they came from.
struct LatencyTable {
  std::vector<LatencyPoint> points;
  std::string source;  //!< the profile files' names and the GPU they ran on, for reports

  //! The latency and occupancy of a run of `batch` (>= 1): see the header comment.
  LatencyPoint At(int64_t batch) const;
  //! Text form kept in plan::Plan::backend_data["sim.latency"]: a "source ..." line, then
  //! "BATCH LATENCY_MS OCCUPANCY_MS" lines.
  std::string Serialize() const;
  static Result<LatencyTable> Parse(const std::string& text);
  //! From `sampan bench --json` files, one batch size each (a batch given twice is refused).
  //! Errors name the file and the field.
  static Result<LatencyTable> FromBenchFiles(const std::vector<std::string>& paths);
};

//! The key of the latency table in plan::Plan::backend_data.
inline constexpr char kLatencyKey[] = "sim.latency";

//! The simulated machine: its devices and each device's memory and run queue.
class SimMachine {
 public:
  //! The process's machine, from SAMPAN_SIM_DEVICES and SAMPAN_SIM_DEVICE_MEMORY_MIB (read once).
  static SimMachine& Get();
  //! Error naming the variable when either is malformed or out of range.
  Status config_status() const { return status_; }
  int devices() const { return devices_; }
  uint64_t memory_bytes() const { return memory_bytes_; }

  //! Takes `bytes` of `device`'s memory (an engine's weights); fails when it does not fit.
  Status Reserve(int device, uint64_t bytes, const std::string& what);
  void Release(int device, uint64_t bytes);
  uint64_t used(int device) const;

  //! Books one run on `device`: it starts when the device is free (or now), holds it for
  //! `occupancy_ms` and ends `latency_ms` after its start. Returns the end, which the caller
  //! waits for (WaitUntil); the device is free for the next run at start + occupancy.
  std::chrono::steady_clock::time_point Book(int device, double latency_ms, double occupancy_ms);

  //! Before each run on `device`: Ok, or its sticky error (the fault file exists and names it
  //! now, or did at an earlier run).
  Status CheckFault(int device);
  //! Ok, or the sticky error `device` hit at an earlier run (no file access).
  Status DeviceHealth(int device) const;

  //! For tests: a machine with this configuration (not the process's); `fault_file` as
  //! SAMPAN_SIM_FAULT_FILE.
  SimMachine(int devices, uint64_t memory_bytes, std::string fault_file = "");

 private:
  SimMachine();
  Status status_;
  int devices_ = 1;
  uint64_t memory_bytes_ = 0;
  mutable std::mutex mu_;
  std::vector<uint64_t> used_;
  std::vector<std::chrono::steady_clock::time_point> free_at_;
  std::string fault_file_;
  std::vector<std::string> broken_;  // per device: "" healthy, else its sticky error
};

//! Sleeps until `t` on the monotonic clock (clock_nanosleep, absolute: no drift from the
//! time spent before the call).
void WaitUntil(std::chrono::steady_clock::time_point t);

//! The batch size of a run: the leading dimension of the first input of rank >= 1 (1 when
//! every input is a scalar), as `sampan bench` counts it.
int64_t BatchOf(const std::vector<const Tensor*>& inputs);

//! Fills `out` (any storable dtype, zero-filled as Tensor::Alloc makes it) deterministically:
//! its first 64 elements from `seed` and the element index, the rest stay 0 (strings: every
//! element). Bounded work per run, whatever the output's size.
Status FillDeterministic(uint64_t seed, Tensor* out);

//! FNV-1a over every input's type, element count and first and last 4 KiB of bytes (of a string
//! tensor, of its first and last 64 elements), in order: bounded work per run.
uint64_t SeedOf(const std::vector<const Tensor*>& inputs);

}  // namespace sampan::sim
