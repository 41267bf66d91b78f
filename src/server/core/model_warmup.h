// Triton's model_warmup: the config's samples as request inputs, checked against the model's
// (completed) config. ModelVersion::Load runs each on every instance, `count` times, before the
// model is READY; a sample that does not fit the model fails the load, naming the sample, the
// input and what is wrong.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "server/repository/model_config.h"

namespace sampan::server {

struct WarmupSample {
  std::string where;  //!< "model_warmup[0] 'zeros'"
  std::map<std::string, Tensor> inputs;
  int count = 1;
};

//! Every sample of config.model_warmup. `model_dir` holds the `warmup/` folder that sample files
//! are read from (names relative to it; absolute paths and `..` are refused).
Result<std::vector<WarmupSample>> MakeWarmupSamples(const ModelConfig& config, const std::string& model_dir);

}  // namespace sampan::server
