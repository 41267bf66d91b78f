// Turning a version directory into engines: find the model file, complete the
// config from the model (Triton's auto-complete), choose backends and devices
// from instance_group, build ONNX into a plan (cached next to the model) and
// bind it once per device.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/engine.h"
#include "server/core/model_version.h"

namespace sampan::server {

struct LoadedModel {
  ModelConfig config;    //!< completed
  std::string platform;  //!< "onnxruntime_onnx" / "sampan_plan" unless the config names one
  std::vector<std::shared_ptr<runtime::Engine>> engines;
  std::vector<size_t> instance_engine;  //!< per instance: index into engines
  std::vector<int> instance_group;      //!< per instance: index into config.instance_group
  std::vector<int> output_index;        //!< per config output: graph output index
};

Result<LoadedModel> LoadModelFiles(const std::string& model_dir, int64_t version, ModelConfig config,
                                   bool has_config_file, const VersionLoadOptions& options);

//! The backend an instance group runs on (see the rules in model_loader.cpp).
Result<std::string> ChooseBackend(const ModelConfig& config, serverconfig::ModelInstanceGroup::Kind kind,
                                  const std::string& default_backend);

}  // namespace sampan::server
