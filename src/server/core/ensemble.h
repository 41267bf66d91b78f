// An ensemble model (platform "ensemble", Triton's ensemble_scheduling): a DAG of steps
// over named tensors. Each step is one request to a composing model, sent through the
// core (Core::Infer) and so through that model's own scheduler and dynamic batcher:
// requests of many pipelines batch together at every model. A step is sent as soon as
// every tensor it reads exists; steps that do not depend on each other run at once.
// A fan-out step (sampan.fan_out) sends the N rows of its inputs as requests of at most
// max_rows rows each and gathers the answers back in row order.
//
// The repository checks the DAG's shape (model_config.cpp: one producer per tensor, every
// read tensor produced, no cycle); Ensemble::Create checks it against the composing
// models as they serve when the ensemble loads (inputs and outputs exist, every required
// input is fed, data types and dims agree, batch sizes fit).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "server/core/core.h"
#include "server/repository/model_config.h"

namespace sampan::server {

//! The config of the version a step names ("" = the newest ready one), as it serves now.
using ConfigLookup = std::function<Result<ModelConfig>(const std::string& model, const std::string& version)>;
//! Sends one request (Core::Infer); the callback runs exactly once.
using Dispatch = std::function<void(InferRequest, InferCallback)>;
//! Ensemble outputs by name, or the error that ended the request.
using EnsembleDone = std::function<void(Result<std::map<std::string, Tensor>>)>;

//! The models an ensemble config's steps send to, each once, in step order.
std::vector<std::string> EnsembleComposingModels(const ModelConfig& config);

class Ensemble : public std::enable_shared_from_this<Ensemble> {
 public:
  //! `config` has passed the repository's checks. Errors name the step, the model and the tensor.
  static Result<std::shared_ptr<const Ensemble>> Create(const ModelConfig& config, const ConfigLookup& lookup);

  //! Runs one request. `inputs`: the ensemble inputs by name (validated against the config);
  //! `request` gives id, priority, timeout, cancellation and keep-alive to every step;
  //! `wanted`: the ensemble outputs to return. `done` runs exactly once: on the first step
  //! error (the status names the step), on cancellation, or with the outputs.
  void Run(std::map<std::string, Tensor> inputs, const InferRequest& request, std::vector<std::string> wanted,
           const Dispatch& dispatch, EnsembleDone done) const;

  size_t steps() const { return steps_.size(); }
  //! The first composing model that is a sequence model ("" = none). Such an ensemble takes
  //! requests with a sequence ID (required then) and forwards the ID and its start/end flags
  //! to every sequence-model step, as Triton forwards correlation IDs.
  const std::string& sequence_model() const { return sequence_model_; }

 private:
  struct Step {
    std::string model;
    std::string version;                                       //!< "" = newest ready
    std::vector<std::pair<std::string, std::string>> inputs;   //!< (model input, ensemble tensor)
    std::vector<std::pair<std::string, std::string>> outputs;  //!< (model output, ensemble tensor)
    //! Fan-out (sampan.fan_out): the rows of the inputs go out as requests of at most max_rows.
    bool fan_out = false;
    int64_t max_rows = 0, max_total_rows = 0;
    //! The model is a sequence model: its requests carry the ensemble request's sequence.
    bool sequence = false;
    //! Each output's type and dims without the batch dim (a fan-out step's answer to 0 rows).
    std::vector<std::pair<DType, std::vector<int64_t>>> output_types;
    std::string Label(size_t index) const;
  };
  struct Flight;  //!< one request on its way through the steps
  std::string name_;
  std::string sequence_model_;
  std::vector<Step> steps_;
  //! Ensemble outputs: data type and dims (batch dim included) as the config declares them.
  std::map<std::string, std::pair<DType, std::vector<int64_t>>> outputs_;
};

}  // namespace sampan::server
