// The model repository on disk, Triton's layout:
//
//   <repository>/<model>/config.pbtxt        (optional: auto-completed from the model)
//   <repository>/<model>/<version>/model.onnx (or model.plan, or default_model_filename)
//
// Version directories are positive integers; anything else in a model
// directory is ignored (as Triton does). Hidden entries (".name") are never
// models or versions: the server keeps its plan cache in <version>/.sampan/.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "server/repository/model_config.h"

namespace sampan::server {

//! Model directory names in the repository, sorted. Fails only when the
//! repository itself cannot be read.
Result<std::vector<std::string>> ListModels(const std::string& repository);

//! Numbered version directories of a model, ascending.
std::vector<int64_t> ListVersions(const std::string& model_dir);

//! The versions `policy` selects from `available` (ascending).
std::vector<int64_t> SelectVersions(const serverconfig::ModelVersionPolicy& policy,
                                    const std::vector<int64_t>& available);

//! Reads and parses <model_dir>/config.pbtxt. When there is none, returns a
//! config holding only the name (and Triton's defaults), with *has_file = false.
Result<ModelConfig> ReadModelConfig(const std::string& model_dir, const std::string& model_name, bool* has_file);

//! The model file of a version: default_model_filename if set, else model.onnx,
//! else model.plan. kNotFound names what was looked for.
Result<std::string> FindModelFile(const std::string& version_dir, const ModelConfig& config);

//! A fingerprint of everything that makes up a model on disk (config text,
//! version directories, each file's size and mtime; hidden entries skipped).
//! Poll mode reloads a model when it changes.
std::string ModelDirFingerprint(const std::string& model_dir);

//! config DataType <-> DType (kUndefined / TYPE_INVALID when there is none).
DType DTypeFromConfig(serverconfig::DataType type);
serverconfig::DataType ConfigDataType(DType dtype);

//! One input or output as the model itself declares it (full shape: a batch
//! dimension, if any, included; -1 = dynamic).
struct ModelTensorInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
};

//! Fills in what the config leaves out from the model's own inputs/outputs,
//! as Triton's auto-complete does, and checks what it does give against the
//! model (names, types, dims). `has_file` = a config.pbtxt existed: without
//! one, a model whose every input and output has a dynamic leading dimension
//! gets max_batch_size `default_max_batch_size` and dynamic batching.
//! Errors name `file` and the tensor.
Status AutoCompleteConfig(ModelConfig* config, bool has_file, const std::vector<ModelTensorInfo>& inputs,
                          const std::vector<ModelTensorInfo>& outputs, const std::string& file,
                          int default_max_batch_size = 4);

//! sequence_batching (sequence_config.cpp): the model inputs the server feeds (control and
//! state inputs), which clients do not send and the config's `input` does not list.
std::set<std::string> SequenceInputNames(const ModelConfig& config);
//! The control and state tensors against the model: each control input is a model input of
//! the control's type and shape [1] ([-1,1] when batching); each state's input and output are
//! a model input and output of its type and dims. Errors name `file` and the tensor.
Status CheckSequenceTensors(const ModelConfig& config, const std::vector<ModelTensorInfo>& inputs,
                            const std::vector<ModelTensorInfo>& outputs, const std::string& file);
//! The element type of a control's tensor: CORRID its data_type; the others the type of
//! their *_false_true list.
DType SequenceControlDType(const serverconfig::ModelSequenceBatching::Control& control);

}  // namespace sampan::server
