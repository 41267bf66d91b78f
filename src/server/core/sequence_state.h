// The tensors the sequence batcher feeds a sequence model besides the
// request's own (sequence_batching in config.pbtxt, Triton's semantics):
//   - control inputs: START (1 on a sequence's first request), END (on its
//     last), READY (1 for a request, 0 for an idle batch slot), CORRID (the
//     correlation ID), each [1] per request ([rows, 1] in a batch), with the
//     config's false/true values;
//   - implicit state: the state input of a request is what the state output of
//     the sequence's previous request was (the initial state on START: zeros
//     or the initial_state file), kept per sequence between requests.
// The scheduler (server/scheduler/sequence_batcher.h) runs one request of a
// sequence at a time, so a sequence's state is never read and written at once.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "server/core/core.h"
#include "server/repository/model_config.h"

namespace sampan::server {

class InferJob;

class SequenceTensors {
 public:
  //! From the config (validated) and the model's graph output names (for the state outputs);
  //! reads initial_state data files from <model_dir>/initial_state/.
  static Result<std::unique_ptr<SequenceTensors>> Create(const ModelConfig& config, const std::string& model_dir,
                                                         const std::vector<std::string>& graph_outputs);

  //! The job's scheduler key for its sequence ("42", or "\"abc\"" for a string ID); checks the
  //! ID against the CORRID control's type. kInvalidArgument naming the model and the value.
  Result<std::string> SequenceKey(const SequenceRef& ref, const std::string& model) const;
  //! Adds the control inputs and the state inputs of `job` to job.inputs (READY true).
  void AddInputs(InferJob& job) const;
  //! The inputs of an idle batch slot: `like`'s request inputs as zeros, READY false,
  //! START/END false, CORRID 0, the initial state.
  Result<std::map<std::string, Tensor>> FillerInputs(const InferJob& like) const;
  //! After the job's execution: its rows [row, row + 1) of the state outputs become its
  //! sequence's state (copied; `batched`: the outputs hold several rows).
  Status SaveState(InferJob& job, const std::vector<Tensor>& outputs, int64_t row, bool batched) const;

 private:
  struct Control {
    std::string input;
    int kind = 0;  // ModelSequenceBatching::Control::Kind
    DType dtype = DType::kUndefined;
    double false_value = 0, true_value = 1;
  };
  struct State {
    std::string input, output;
    int output_index = -1;  // in the graph's outputs
    Tensor initial;         // one request's state (no batch dimension)
  };
  Tensor ControlTensor(const Control& c, bool value, const SequenceRef* ref) const;
  Tensor Batched(const Tensor& t) const;

  bool batching_ = false;
  std::vector<Control> controls_;
  std::vector<State> states_;
};

}  // namespace sampan::server
