// The accuracy gate of INT8/FP8 calibration (CalibrationConfig::accuracy_dir, internal to
// builder/): runs the float graph and the quantized one on held-out samples, compares their
// outputs by a metric (cosine, rel_l2, top1) and, while the bound is missed, puts layers back in
// float, largest own error first (BuildConfig::strict: refuses instead).
//
// It measures exactly what the build will run, so it quantizes with calibrate.cpp's own weight
// quantization and Q/DQ insertion, declared at the bottom of this header.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "builder/calibrate.h"
#include "ir/graph.h"

namespace sampan::builder {

//! The layers of `layers` to quantize: all of them when the quantized graph meets
//! calibration.accuracy_bound on the samples of calibration.accuracy_dir, else all but the
//! fewest largest-error ones it takes to meet it. Fills rep's gate fields (metric, bound,
//! accuracy, layer_errors, evaluations, fell_back) and adds a `skipped` line per layer put back.
Result<std::vector<QuantizableLayer>> RunAccuracyGate(const ir::Graph& graph,
                                                      const std::vector<QuantizableLayer>& layers,
                                                      const std::map<std::string, ActivationScale>& scales,
                                                      const BuildConfig& config, QuantizationReport* rep);

//! The gate's figure for `got` against `want`, per sample and output (float32 outputs only;
//! others are skipped): cosine and top1 (the worst sample / the agreement share of the first
//! output's rows; higher is better), rel_l2 (the worst sample; lower is better). `sampan
//! publish` gates a new model version with it too.
double AccuracyFigure(const std::string& metric, const std::vector<std::vector<Tensor>>& got,
                      const std::vector<std::vector<Tensor>>& want, size_t outputs);
//! Whether `figure` meets `bound` for `metric` (at most for rel_l2, at least otherwise).
bool AccuracyMeets(const std::string& metric, double figure, double bound);

// Quantization shared with calibrate.cpp (defined there).

//! The float8 type FP8 quantization stores (e4m3fn: TensorRT's and cuBLASLt's forward format).
constexpr DType kFp8 = DType::kFloat8E4M3FN;
constexpr double kFp8Max = 448.0;  //!< kFp8's largest finite value

//! The output-channel axis of a product's weight.
int64_t WeightAxis(const ir::Node& n);
//! Per-channel symmetric int8 weights: q = round(w / s_c), s_c = max|w_c| / 127 (1 when all 0);
//! returns q (int8, w's shape) and s (float32 [channels]).
std::pair<Tensor, Tensor> QuantizeWeight(const Tensor& w, int64_t axis);
//! Per-tensor float8 e4m3fn weights: q = fp8(w / s), s = amax / 448 (1 when 0); `amax` is the
//! weight's own, or the largest over the products that read the same activation (their weights
//! then share one scale, so a backend may concatenate them: the Q/K/V projections of attention).
std::pair<Tensor, Tensor> QuantizeWeightFp8(const Tensor& w, float amax);
//! Per activation, the largest |w| over the weights of the layers reading it (FP8 weight scales).
std::map<std::string, float> SharedWeightAmax(const std::vector<QuantizableLayer>& layers);
//! Q/DQ around the named layers' activation and weight: one pair per activation, shared by its
//! quantized readers; weights per output channel. Layers whose activation has no scale are
//! skipped (with a line in rep->skipped when rep is given).
Status InsertQdq(ir::Graph& graph, const std::vector<QuantizableLayer>& chosen,
                 const std::map<std::string, ActivationScale>& scales, QuantizationReport* rep);

}  // namespace sampan::builder
