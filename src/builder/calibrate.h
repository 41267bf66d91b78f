// Implicit INT8 quantization (post-training calibration), TensorRT's `--int8 --calib` flow:
//
//   1. choose the layers to quantize in the optimized float graph: Conv, MatMul and Gemm (and
//      their fused forms) with a constant float32 weight, unless --layer-precision keeps them
//      in a float precision;
//   2. run the float graph (cpu backend when built, else the reference kernels) on the
//      calibration samples and record, per input activation of those layers, its largest
//      magnitude and then a 2048-bin histogram of |x| over [0, max];
//   3. choose each activation's threshold: `minmax` (the max), `percentile=P` (P% of the
//      values below it) or `entropy` (the threshold whose 8-bit distribution is closest to the
//      float one in KL divergence: TensorRT's entropy calibrator); scale = threshold / 127
//      for signed tensors, / 255 for tensors never negative in calibration (uint8, zero
//      point 0);
//   4. write Q/DQ around them (activations per tensor, weights symmetric per output channel),
//      which fuse_quantized then turns into integer kernels (passes/fuse_quantized.cpp).
//
// With CalibrationConfig::fp8 the same steps quantize MatMul/Gemm to float8 e4m3fn: scale =
// threshold / 448 (minmax by default), weights per tensor, cache type `fp8e4m3`.
//
// The calibration cache is a text file, one activation per line (`name scale int8|uint8|fp8e4m3`, in
// graph order; `name 0 float` for one that was 0 in every sample, whose readers stay float) after a header naming the
// method and sample count. It is written after calibrating and read instead of calibrating when its tensors are exactly
// those the graph needs; any other cache is refused, naming the first tensor that differs. Everything is deterministic:
// the same samples give the same bytes.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"

namespace sampan::builder {

struct BuildConfig;

enum class CalibMethod { kEntropy, kMinMax, kPercentile };

struct CalibrationConfig {
  bool int8 = false;  //!< quantize (needs data_dir or a matching cache_file)
  //! Quantize to float8 e4m3fn instead (`--fp8`): MatMul/Gemm only, activations and weights per
  //! tensor (scale = amax / 448), Q/DQ of domain sampan (the newest opset's semantics at any
  //! model opset); FP8 products on the cuda backend (cuBLASLt), convolutions stay float.
  bool fp8 = false;
  bool quantize() const { return int8 || fp8; }
  std::string data_dir;  //!< INPUT.K.npy files, one per graph input per sample
  CalibMethod method = CalibMethod::kEntropy;
  double percentile = 99.99;  //!< kPercentile
  int max_batches = 0;        //!< samples used (0: every one in data_dir)
  std::string cache_file;     //!< read when it exists, written after calibrating
  // The accuracy gate (optional): held-out samples, metric and bound; misses fall back to float
  // layer by layer (BuildConfig::strict: refuse instead).
  std::string accuracy_dir;                //!< INPUT.K.npy like data_dir, disjoint from it
  std::string accuracy_metric = "cosine";  //!< cosine, rel_l2, top1
  double accuracy_bound = std::nan("");
};

//! Parses "entropy", "minmax", "percentile" or "percentile=99.9" (0 < P <= 100).
Status ParseCalibMethod(const std::string& text, CalibrationConfig* config);
std::string CalibMethodName(const CalibrationConfig& config);

//! An activation's quantization: scale and whether it is stored unsigned (never negative).
struct ActivationScale {
  float scale = 1.f;
  bool is_unsigned = false;
  bool keep_float = false;  //!< 0 in every calibration sample: no scale, its readers stay float
  bool fp8 = false;         //!< float8 e4m3fn (cache type `fp8e4m3`), else int8/uint8
};

//! A calibration cache (see the top of this file).
struct CalibrationCache {
  std::string method;
  int64_t samples = 0;
  std::vector<std::pair<std::string, ActivationScale>> tensors;  //!< graph order
  std::string Serialize() const;
  static Result<CalibrationCache> Parse(const std::string& text, const std::string& what);
};

//! What quantization did, for the build report and the plan.
struct QuantizationReport {
  std::string method;      //!< "entropy", "minmax", "percentile=99.99"; "cache" when read
  std::string cache_hash;  //!< "fnv1a64:..." of the cache's bytes
  int64_t samples = 0;
  std::vector<std::string> quantized;  //!< node names
  std::vector<std::string> skipped;    //!< "node: reason"
  bool cache_read = false;
  bool cache_written = false;
  // The accuracy gate, when it ran.
  std::string metric;
  double bound = 0;
  double accuracy = std::nan("");                            //!< the final figure
  std::vector<std::pair<std::string, double>> layer_errors;  //!< own error per layer, graph order
  std::vector<std::pair<size_t, double>> evaluations;        //!< layers in float -> figure
  std::vector<std::string> fell_back;                        //!< layers the gate put back in float
};

//! The nodes step 1 chooses, and the activation (input 0) each reads, in graph order.
struct QuantizableLayer {
  ir::Node* node;
  std::string activation;
};
std::vector<QuantizableLayer> SelectQuantizable(ir::Graph& graph, const BuildConfig& config,
                                                std::vector<std::string>* skipped);

//! Reads DIR/NAME.K.npy for every graph input (K = 0, 1, ... while all inputs have a file; at
//! most calibration.max_batches), checking each against the input's type and the profiles.
//! Errors name the file; `flag` names the option DIR came from.
Result<std::vector<std::map<std::string, Tensor>>> LoadSamples(const ir::Graph& graph, const BuildConfig& config,
                                                               const std::string& dir, const std::string& flag);

//! Steps 1-4 on the optimized float graph; on return the graph holds Q/DQ nodes (fuse_quantized
//! still has to run).
Result<QuantizationReport> QuantizeGraph(ir::Graph& graph, const BuildConfig& config);

}  // namespace sampan::builder
