#include "server/core/sequence_state.h"

#include <cstring>
#include <filesystem>
#include <limits>

#include "base/tensor_rows.h"
#include "server/core/model_version.h"
#include "server/repository/repository.h"

namespace sampan::server {

namespace sc = ::sampan::serverconfig;
using SB = sc::ModelSequenceBatching;
namespace fs = std::filesystem;

namespace {

// Config spelling of an element type (TYPE_FP32).
const char* TypeName(DType t) {
  return DataTypeName(ConfigDataType(t));
}

// What a sequence keeps between its requests: each state input's next value.
struct SavedState {
  std::map<std::string, Tensor> tensors;
};

Result<std::string> ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return NotFound("cannot open '", path, "'");
  std::string bytes;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
  std::fclose(f);
  return bytes;
}

void SetElement(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kBool:
      t.mutable_data<bool>()[i] = v != 0;
      break;
    case DType::kInt32:
      t.mutable_data<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::kFloat32:
      t.mutable_data<float>()[i] = static_cast<float>(v);
      break;
    default:
      break;
  }
}

}  // namespace

Result<std::unique_ptr<SequenceTensors>> SequenceTensors::Create(const ModelConfig& config,
                                                                 const std::string& model_dir,
                                                                 const std::vector<std::string>& graph_outputs) {
  auto out = std::unique_ptr<SequenceTensors>(new SequenceTensors());
  out->batching_ = config.max_batch_size() > 0;
  const SB& sb = config.sequence_batching();
  for (const auto& ci : sb.control_input()) {
    const auto& ctl = ci.control(0);
    Control c;
    c.input = ci.name();
    c.kind = ctl.kind();
    c.dtype = SequenceControlDType(ctl);
    if (ctl.int32_false_true_size() == 2)
      c.false_value = ctl.int32_false_true(0), c.true_value = ctl.int32_false_true(1);
    if (ctl.fp32_false_true_size() == 2) c.false_value = ctl.fp32_false_true(0), c.true_value = ctl.fp32_false_true(1);
    if (ctl.bool_false_true_size() == 2) c.false_value = ctl.bool_false_true(0), c.true_value = ctl.bool_false_true(1);
    out->controls_.push_back(c);
  }
  for (const auto& s : sb.state()) {
    State st;
    st.input = s.input_name();
    st.output = s.output_name();
    for (size_t i = 0; i < graph_outputs.size(); ++i)
      if (graph_outputs[i] == st.output) st.output_index = static_cast<int>(i);
    if (st.output_index < 0) return Internal("state output '", st.output, "' is not an output of the model");
    const DType dtype = DTypeFromConfig(s.data_type());
    Shape shape(s.dims().begin(), s.dims().end());
    if (s.initial_state_size() == 1) shape.assign(s.initial_state(0).dims().begin(), s.initial_state(0).dims().end());
    SP_ASSIGN_OR_RETURN(st.initial, Tensor::Zeros(dtype, shape));
    if (s.initial_state_size() == 1 && s.initial_state(0).has_data_file()) {
      const std::string path = (fs::path(model_dir) / "initial_state" / s.initial_state(0).data_file()).string();
      const std::string where = StrCat("sequence_batching.state '", st.input, "' initial_state");
      auto bytes = ReadFile(path);
      if (!bytes.ok()) return bytes.status().WithContext(where);
      if (bytes->size() != st.initial.nbytes())
        return InvalidArgument(where, ": '", path, "' holds ", bytes->size(), " bytes, but ", TypeName(dtype), " ",
                               ShapeToString(shape), " needs ", st.initial.nbytes());
      std::memcpy(st.initial.mutable_raw(), bytes->data(), bytes->size());
    }
    out->states_.push_back(std::move(st));
  }
  return out;
}

Result<std::string> SequenceTensors::SequenceKey(const SequenceRef& ref, const std::string& model) const {
  for (const Control& c : controls_) {
    if (c.kind != SB::Control::CONTROL_SEQUENCE_CORRID) continue;
    if (!ref.text.empty() && c.dtype != DType::kString)
      return InvalidArgument(model, " takes numeric correlation IDs (its CONTROL_SEQUENCE_CORRID input '", c.input,
                             "' is ", TypeName(c.dtype), "), got sequence_id \"", ref.text, "\"");
    const uint64_t limit = c.dtype == DType::kInt32    ? std::numeric_limits<int32_t>::max()
                           : c.dtype == DType::kUInt32 ? std::numeric_limits<uint32_t>::max()
                           : c.dtype == DType::kInt64  ? static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                                                       : std::numeric_limits<uint64_t>::max();
    if (ref.text.empty() && ref.number > limit)
      return InvalidArgument(model, ": sequence_id ", ref.number, " does not fit its CONTROL_SEQUENCE_CORRID input '",
                             c.input, "' (", TypeName(c.dtype), ")");
  }
  return ref.text.empty() ? std::to_string(ref.number) : StrCat("\"", ref.text, "\"");
}

Tensor SequenceTensors::Batched(const Tensor& t) const {
  if (!batching_) return t;
  Shape s = t.shape();
  s.insert(s.begin(), 1);
  return t.Reshaped(s);
}

Tensor SequenceTensors::ControlTensor(const Control& c, bool value, const SequenceRef* ref) const {
  Tensor t = Tensor::Zeros(c.dtype, Shape{1}).value();
  if (c.kind == SB::Control::CONTROL_SEQUENCE_CORRID) {
    if (ref != nullptr) {
      switch (c.dtype) {
        case DType::kString:
          t.mutable_strings()[0] = ref->text.empty() ? std::to_string(ref->number) : ref->text;
          break;
        case DType::kUInt64:
          t.mutable_data<uint64_t>()[0] = ref->number;
          break;
        case DType::kInt64:
          t.mutable_data<int64_t>()[0] = static_cast<int64_t>(ref->number);
          break;
        case DType::kUInt32:
          t.mutable_data<uint32_t>()[0] = static_cast<uint32_t>(ref->number);
          break;
        case DType::kInt32:
          t.mutable_data<int32_t>()[0] = static_cast<int32_t>(ref->number);
          break;
        default:
          break;
      }
    }
  } else {
    SetElement(t, 0, value ? c.true_value : c.false_value);
  }
  return Batched(t);
}

void SequenceTensors::AddInputs(InferJob& job) const {
  const SequenceRef& ref = job.request.sequence;
  for (const Control& c : controls_) {
    bool value = false;
    switch (c.kind) {
      case SB::Control::CONTROL_SEQUENCE_START:
        value = job.sequence_start;
        break;
      case SB::Control::CONTROL_SEQUENCE_END:
        value = ref.end;
        break;
      case SB::Control::CONTROL_SEQUENCE_READY:
        value = true;
        break;
      default:
        break;
    }
    job.inputs[c.input] = ControlTensor(c, value, &ref);
  }
  if (states_.empty()) return;
  auto& slot = job.sequence_context->state;
  // START begins the sequence again: the initial state, whatever the context held.
  if (job.sequence_start || !slot) slot = std::make_shared<SavedState>();
  auto* saved = static_cast<SavedState*>(slot.get());
  for (const State& s : states_) {
    auto it = saved->tensors.find(s.input);
    job.inputs[s.input] = Batched(it != saved->tensors.end() ? it->second : s.initial);
  }
}

Result<std::map<std::string, Tensor>> SequenceTensors::FillerInputs(const InferJob& like) const {
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, t] : like.inputs) {
    Shape s = t.shape();
    if (batching_ && !s.empty()) s[0] = 1;
    SP_ASSIGN_OR_RETURN(Tensor z, Tensor::Zeros(t.dtype(), s));
    inputs.emplace(name, std::move(z));
  }
  for (const Control& c : controls_) inputs[c.input] = ControlTensor(c, false, nullptr);
  for (const State& s : states_) inputs[s.input] = Batched(s.initial);
  return inputs;
}

Status SequenceTensors::SaveState(InferJob& job, const std::vector<Tensor>& outputs, int64_t row, bool batched) const {
  if (states_.empty() || !job.sequence_context) return Status::Ok();
  auto& slot = job.sequence_context->state;
  if (job.request.sequence.end) {  // the sequence ends with this request
    slot.reset();
    return Status::Ok();
  }
  for (const State& s : states_) {
    const size_t i = static_cast<size_t>(s.output_index);
    if (i >= outputs.size() || (batched && (outputs[i].rank() < 1 || outputs[i].dim(0) <= row)))
      return Internal("state output '", s.output, "' is missing or has too few rows (", row + 1, " needed)");
  }
  if (!slot) slot = std::make_shared<SavedState>();
  auto* saved = static_cast<SavedState*>(slot.get());
  for (const State& s : states_) {
    const Tensor& full = outputs[static_cast<size_t>(s.output_index)];
    Tensor mine = batched ? RowSlice(full, row, 1) : full;
    if (batching_) {  // kept without the batch dimension
      Shape shape = mine.shape();
      shape.erase(shape.begin());
      mine = mine.Reshaped(shape);
    }
    saved->tensors[s.input] = mine.Clone();
  }
  return Status::Ok();
}

}  // namespace sampan::server
