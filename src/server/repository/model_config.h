// The model configuration of a model repository entry: parsing and validating
// a Triton-style config.pbtxt (schema in proto/model_config.proto).
//
// Every error is an InvalidArgument whose message starts with the file name
// and, where the text gives one, the 1-based line and column:
//   config.pbtxt:7:3: unknown field 'max_batchsize' in ModelConfig (did you mean 'max_batch_size'?)
//   config.pbtxt:12:5: input[1].dims[0]: must be >= 1 or -1 (got 0)
#pragma once

#include <string>

#include "base/status.h"
#include "model_config.pb.h"

namespace sampan::server {

using ModelConfig = ::sampan::serverconfig::ModelConfig;

//! Parses `text` (the contents of `file`, used only in messages) and
//! validates it. `model_dir` is the name of the model's directory in the
//! repository, or empty when there is none: when given, an absent `name`
//! takes it (as in Triton) and a present one must equal it.
//!
//! Defaults filled in, as Triton does: `name` from `model_dir`; an
//! instance_group whose `count` is absent gets 1; an absent version_policy is
//! `latest { num_versions: 1 }`.
Result<ModelConfig> ParseModelConfig(const std::string& text, const std::string& file, const std::string& model_dir);

//! A config given as Triton's JSON form (the repository extension's load parameter `config`):
//! protobuf's JSON mapping of the same schema (field names as in config.pbtxt or lowerCamel,
//! enums by name), unknown fields refused, then the defaults and checks of ParseModelConfig.
//! `what` starts every message ("load request config").
Result<ModelConfig> ParseModelConfigJson(const std::string& json, const std::string& what,
                                         const std::string& model_dir);

//! ParseModelConfig without a model directory: `name` is required.
Result<ModelConfig> ParseModelConfig(const std::string& text, const std::string& file);

//! The semantic checks alone, for a config built in code (no locations: the
//! messages name the file and the field path only). `model_dir` as above.
Status ValidateModelConfig(const ModelConfig& config, const std::string& file, const std::string& model_dir = "");

//! "TYPE_FP32" etc.
const char* DataTypeName(serverconfig::DataType type);

}  // namespace sampan::server
