// The builder: ONNX graph -> optimized, precision-assigned plan.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "builder/calibrate.h"
#include "ir/graph.h"
#include "passes/pass.h"
#include "plan/plan.h"

namespace sampan::builder {

//! Float precisions a layer can run in. INT8 is not one of them: a layer runs in int8 when the
//! graph quantizes it (a Q/DQ model, or --int8 calibration: calibrate.h).
enum class Precision { kFP32, kTF32, kFP16, kBF16 };
const char* PrecisionName(Precision p);
Result<Precision> ParsePrecision(const std::string& name);

struct LayerPrecision {
  std::string pattern;  //!< glob over node names (* and ?)
  Precision precision;
};
//! Parses "NAME_GLOB:fp32".
Result<LayerPrecision> ParseLayerPrecision(const std::string& arg);

//! Raw-image input: the plan takes uint8 [N, H, W, C] for a float [N, C, H, W]
//! input and normalises on the device: (x - mean[c]) / std[c], x in 0..255.
struct InputFormat {
  std::string input;        //!< graph input; "" = every float input of rank 4
  std::vector<float> mean;  //!< per channel, in pixel units (e.g. 123.675,116.28,103.53); empty = 0
  std::vector<float> std;   //!< per channel, in pixel units (e.g. 58.395,57.12,57.375); empty = 1
};

struct BuildConfig {
  std::string backend = "reference";
  Precision precision = Precision::kFP32;
  bool allow_tf32 = true;
  std::vector<LayerPrecision> layer_precision;  //!< later entries win
  std::vector<plan::Profile> profiles;
  std::vector<InputFormat> input_formats;  //!< applied first: profiles then give the uint8 NHWC shapes
  std::set<std::string> disabled_passes;
  uint64_t workspace_bytes = 0;  //!< cuda: tactics needing more device scratch than this are not chosen; 0 = no limit
  std::string timing_cache_file;
  //! Implicit INT8 (--int8): calibration and Q/DQ placement before precision assignment.
  CalibrationConfig calibration;
  bool portable = false;
  int device = 0;              //!< device the plan is built (and tuned) for
  int optimization_level = 3;  //!< builder effort 0..5 (trtexec --builderOptimizationLevel): bounds tactic timing
  //! Refuse the build when the backend's capability query leaves any node on the host.
  bool strict = false;
  //! Stop after the capability query: passes, precision and the per-node answer, no
  //! lowering (no device needed, nothing is timed); the returned plan is not runnable.
  bool dry_run = false;
  //! --backend sim (backends/sim): `sampan bench --json` files of the GPU plan to simulate, one
  //! per batch size; the plan records their latency table. Refused with any other backend.
  std::vector<std::string> sim_profiles;
  std::string source_model;
  //! Progress lines ("pass fold_batchnorm", ...).
  std::function<void(const std::string&)> progress;
  //! After each pass (for --dump-ir).
  std::function<void(const std::string&, const ir::Graph&)> after_pass;
};

//! A node a device backend leaves on the host, and why (from its capability query).
struct HostNode {
  std::string node;    //!< the node's label
  std::string op;      //!< its op type (domain::op outside the default domain)
  std::string reason;  //!< the backend's answer ("Resize: no CUDA kernel for Resize")
};

struct BuildReport {
  size_t nodes_before = 0;
  size_t nodes_after = 0;
  std::vector<passes::PassStats> passes;
  std::vector<passes::Rewrite> rewrites;
  std::map<std::string, size_t> precision_counts;  //!< precision -> nodes
  std::map<std::string, size_t> kernel_counts;     //!< backend kernel family -> nodes ("onednn conv", "reference")
  std::vector<std::string> backend_notes;          //!< lines for --verbose (ops on fallback kernels, tactics chosen)
  std::vector<HostNode> host_nodes;                //!< nodes a device backend leaves on the host (capability query)
  bool capability_checked = false;                 //!< the backend answered the capability query
  double tuning_ms = 0;                            //!< part of build_ms spent timing tactics
  bool int8 = false;                               //!< --int8 ran (quantization holds what it did)
  QuantizationReport quantization;
  double build_ms = 0;
};

//! Ok, or (with `strict`) Unsupported listing every node of report.host_nodes with its reason.
Status CheckStrict(const BuildConfig& config, const BuildReport& report);

//! Glob match with * and ?.
bool GlobMatch(const std::string& pattern, const std::string& text);

//! Validates profiles against the graph inputs (names, ranks, fixed dims,
//! min <= opt <= max) and specializes inputs whose range is a single shape.
Status ApplyProfiles(ir::Graph& graph, const std::vector<plan::Profile>& profiles);

//! Puts a sampan::ImageInput node in front of each input named by `formats`
//! (see InputFormat); errors name the input and say what it needs to be.
Status ApplyInputFormats(ir::Graph& graph, const std::vector<InputFormat>& formats);

//! Runs passes and precision assignment on `graph` and wraps it as a plan.
Result<plan::Plan> Build(std::unique_ptr<ir::Graph> graph, const BuildConfig& config, BuildReport* report);

//! Rewrites float layers to the precision chosen for them (casts at the borders,
//! weights converted once); graph inputs and outputs keep their types.
//! Returns node name -> precision.
//! With `lowers_bf16` (BackendBuilder::lowers_bf16) BF16 layers keep FP32 tensors and only their
//! choice is returned.
Result<std::map<std::string, Precision>> AssignPrecision(ir::Graph& graph, const BuildConfig& config,
                                                         bool lowers_bf16 = false);

}  // namespace sampan::builder
