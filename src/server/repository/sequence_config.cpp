// sequence_batching in config.pbtxt: the checks that need only the config
// (CheckSequenceBatching, called by the validator) and those that need the
// model's own tensors (CheckSequenceTensors, called when the config is
// completed from the model). Triton's rules, with Sampan's limits named.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "server/repository/config_check.h"
#include "server/repository/model_config.h"
#include "server/repository/repository.h"

namespace sampan::server {

namespace sc = ::sampan::serverconfig;
using SB = sc::ModelSequenceBatching;

namespace {

// Config spelling of an element type (TYPE_FP32).
const char* TypeName(DType t) {
  return DataTypeName(ConfigDataType(t));
}

const char* KindName(SB::Control::Kind k) {
  switch (k) {
    case SB::Control::CONTROL_SEQUENCE_START:
      return "CONTROL_SEQUENCE_START";
    case SB::Control::CONTROL_SEQUENCE_READY:
      return "CONTROL_SEQUENCE_READY";
    case SB::Control::CONTROL_SEQUENCE_END:
      return "CONTROL_SEQUENCE_END";
    case SB::Control::CONTROL_SEQUENCE_CORRID:
      return "CONTROL_SEQUENCE_CORRID";
    default:
      return "CONTROL_?";
  }
}

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += StrCat(i ? "," : "", dims[i]);
  return s + "]";
}

}  // namespace

DType SequenceControlDType(const SB::Control& c) {
  if (c.kind() == SB::Control::CONTROL_SEQUENCE_CORRID) return DTypeFromConfig(c.data_type());
  if (c.int32_false_true_size() > 0) return DType::kInt32;
  if (c.fp32_false_true_size() > 0) return DType::kFloat32;
  return DType::kBool;
}

Status CheckSequenceBatching(const ConfigChecker& ck, const sc::ModelConfig& c, const ConfigChecker::Tree* root) {
  if (!c.has_sequence_batching()) return Status::Ok();
  const auto* cd = sc::ModelConfig::descriptor();
  const auto* sd = SB::descriptor();
  const SB& sb = c.sequence_batching();
  const ConfigChecker::Tree* st = ConfigChecker::Sub(root, cd, "sequence_batching");
  const ConfigLoc here = ConfigChecker::At(root, cd, "sequence_batching");
  if (c.platform() == "ensemble")
    return ck.Fail(here, "sequence_batching", "an ensemble has no scheduler of its own (its steps' models batch)");
  if (sb.iterative_sequence())
    return ck.Fail(ConfigChecker::First({ConfigChecker::At(st, sd, "iterative_sequence"), here}),
                   "sequence_batching.iterative_sequence", "is not supported (it serves decoupled generative models)");
  std::set<std::string> inputs;
  for (const auto& in : c.input()) inputs.insert(in.name());

  std::set<std::string> names;  // control and state inputs
  std::set<int> kinds;
  for (int i = 0; i < sb.control_input_size(); ++i) {
    const auto& ci = sb.control_input(i);
    const ConfigChecker::Tree* it = ConfigChecker::Sub(st, sd, "control_input", i);
    const ConfigLoc loc = ConfigChecker::First({ConfigChecker::At(st, sd, "control_input", i), here});
    const std::string path = StrCat("sequence_batching.control_input[", i, "]");
    if (ci.name().empty())
      return ck.Fail(loc, path + ".name", "must be given (the model input that takes the control)");
    if (inputs.count(ci.name()))
      return ck.Fail(loc, path,
                     StrCat("'", ci.name(),
                            "' is also listed in `input`: the server feeds control inputs, "
                            "clients do not send them"));
    if (!names.insert(ci.name()).second)
      return ck.Fail(loc, path, StrCat("'", ci.name(), "' is named by more than one control or state input"));
    if (ci.control_size() != 1)
      return ck.Fail(loc, path,
                     StrCat("'", ci.name(), "' must hold exactly one control (got ", ci.control_size(), ")"));
    const auto& ctl = ci.control(0);
    const ConfigLoc cloc =
        ConfigChecker::First({ConfigChecker::At(it, SB::ControlInput::descriptor(), "control", 0), loc});
    if (!kinds.insert(ctl.kind()).second)
      return ck.Fail(cloc, path, StrCat(KindName(ctl.kind()), " is given to more than one control input"));
    const int lists =
        (ctl.int32_false_true_size() > 0) + (ctl.fp32_false_true_size() > 0) + (ctl.bool_false_true_size() > 0);
    if (ctl.kind() == SB::Control::CONTROL_SEQUENCE_CORRID) {
      if (lists > 0) return ck.Fail(cloc, path, "CONTROL_SEQUENCE_CORRID takes data_type, not *_false_true values");
      const auto t = ctl.data_type();
      if (t != sc::TYPE_UINT64 && t != sc::TYPE_INT64 && t != sc::TYPE_UINT32 && t != sc::TYPE_INT32 &&
          t != sc::TYPE_STRING)
        return ck.Fail(cloc, path,
                       StrCat("CONTROL_SEQUENCE_CORRID needs data_type TYPE_UINT64, TYPE_INT64, "
                              "TYPE_UINT32, TYPE_INT32 or TYPE_STRING (got ",
                              DataTypeName(t), ")"));
      continue;
    }
    if (lists != 1)
      return ck.Fail(cloc, path,
                     StrCat(KindName(ctl.kind()),
                            " needs exactly one of int32_false_true, "
                            "fp32_false_true or bool_false_true (got ",
                            lists, ")"));
    const int n = std::max({ctl.int32_false_true_size(), ctl.fp32_false_true_size(), ctl.bool_false_true_size()});
    if (n != 2)
      return ck.Fail(cloc, path,
                     StrCat(KindName(ctl.kind()),
                            ": the *_false_true list holds 2 values, "
                            "[false, true] (got ",
                            n, ")"));
    if (ctl.data_type() != sc::TYPE_INVALID)
      return ck.Fail(cloc, path,
                     StrCat(KindName(ctl.kind()),
                            ": data_type is for CONTROL_SEQUENCE_CORRID only "
                            "(the *_false_true list gives the type)"));
  }

  std::set<std::string> outputs;
  for (int i = 0; i < sb.state_size(); ++i) {
    const auto& s = sb.state(i);
    const auto* std_ = SB::State::descriptor();
    const ConfigChecker::Tree* tt = ConfigChecker::Sub(st, sd, "state", i);
    const ConfigLoc loc = ConfigChecker::First({ConfigChecker::At(st, sd, "state", i), here});
    const std::string path = StrCat("sequence_batching.state[", i, "]");
    if (s.input_name().empty() || s.output_name().empty())
      return ck.Fail(loc, path, "needs input_name and output_name (the model's state input and output)");
    if (inputs.count(s.input_name()))
      return ck.Fail(loc, path,
                     StrCat("input_name '", s.input_name(),
                            "' is also listed in `input`: the server "
                            "feeds the state, clients do not send it"));
    if (!names.insert(s.input_name()).second)
      return ck.Fail(loc, path, StrCat("'", s.input_name(), "' is named by more than one control or state input"));
    if (!outputs.insert(s.output_name()).second)
      return ck.Fail(loc, path, StrCat("output_name '", s.output_name(), "' is named by more than one state"));
    if (DTypeFromConfig(s.data_type()) == DType::kUndefined)
      return ck.Fail(ConfigChecker::First({ConfigChecker::At(tt, std_, "data_type"), loc}), path + ".data_type",
                     "must be given (the state's element type)");
    if (s.dims_size() == 0)
      return ck.Fail(loc, path + ".dims", "must be given (the state's shape, without the batch dimension)");
    bool variable = false;
    for (int d = 0; d < s.dims_size(); ++d) {
      if (s.dims(d) < -1 || s.dims(d) == 0)
        return ck.Fail(ConfigChecker::First({ConfigChecker::At(tt, std_, "dims", d), loc}),
                       StrCat(path, ".dims[", d, "]"), StrCat("must be >= 1 or -1 (got ", s.dims(d), ")"));
      variable = variable || s.dims(d) < 0;
    }
    if (s.use_same_buffer_for_input_output() || s.use_growable_memory())
      return ck.Fail(loc, path,
                     StrCat(s.use_growable_memory() ? "use_growable_memory" : "use_same_buffer_for_input_output",
                            " is not supported: Sampan keeps each sequence's state in host memory and copies it "
                            "into the batch (leave it out)"));
    if (s.initial_state_size() > 1)
      return ck.Fail(loc, path + ".initial_state", StrCat("give at most one (got ", s.initial_state_size(), ")"));
    if (variable && c.max_batch_size() > 0)
      return ck.Fail(loc, path + ".dims",
                     "a batching sequence model's state needs fixed dims (the rows of a batch "
                     "share one shape; max_batch_size 0 allows variable ones)");
    if (s.initial_state_size() == 0) {
      if (variable)
        return ck.Fail(loc, path,
                       StrCat("dims ", DimsText({s.dims().begin(), s.dims().end()}),
                              " have a variable dimension: give initial_state with the first "
                              "request's shape"));
      continue;
    }
    const auto& is = s.initial_state(0);
    const ConfigLoc iloc = ConfigChecker::First({ConfigChecker::At(tt, std_, "initial_state", 0), loc});
    const std::string ipath = path + ".initial_state[0]";
    if (is.data_type() != s.data_type())
      return ck.Fail(iloc, ipath,
                     StrCat("data_type ", DataTypeName(is.data_type()), " differs from the state's ",
                            DataTypeName(s.data_type())));
    if (is.dims_size() != s.dims_size())
      return ck.Fail(iloc, ipath, StrCat("dims have ", is.dims_size(), " dimensions, the state ", s.dims_size()));
    for (int d = 0; d < is.dims_size(); ++d)
      if (is.dims(d) < 1 || (s.dims(d) > 0 && is.dims(d) != s.dims(d)))
        return ck.Fail(iloc, StrCat(ipath, ".dims[", d, "]"),
                       StrCat(is.dims(d), " does not fit the state's dims ",
                              DimsText({s.dims().begin(), s.dims().end()}), " (each >= 1, equal where fixed)"));
    if (is.state_data_case() == SB::InitialState::STATE_DATA_NOT_SET || (is.has_zero_data() && !is.zero_data()))
      return ck.Fail(iloc, ipath, "needs zero_data: true or data_file");
    if (is.has_data_file()) {
      const std::string& f = is.data_file();
      if (f.empty() || f.front() == '/' || f.find("..") != std::string::npos)
        return ck.Fail(iloc, ipath + ".data_file",
                       StrCat("'", f, "' must be a file name inside the model's initial_state/ directory"));
      if (DTypeFromConfig(s.data_type()) == DType::kString)
        return ck.Fail(iloc, ipath + ".data_file", "a TYPE_STRING state starts from zero_data (empty strings)");
    }
  }

  if (sb.has_direct()) {
    const auto& d = sb.direct();
    if (!(d.minimum_slot_utilization() >= 0.f && d.minimum_slot_utilization() <= 1.f))
      return ck.Fail(here, "sequence_batching.direct.minimum_slot_utilization",
                     StrCat("must be in [0, 1] (got ", d.minimum_slot_utilization(), ")"));
  }
  if (sb.has_oldest()) {
    const auto& o = sb.oldest();
    if (o.max_candidate_sequences() < 0)
      return ck.Fail(here, "sequence_batching.oldest.max_candidate_sequences",
                     StrCat("must be >= 0 (got ", o.max_candidate_sequences(), ")"));
    for (int i = 0; i < o.preferred_batch_size_size(); ++i) {
      const int v = o.preferred_batch_size(i);
      if (v < 1 || (c.max_batch_size() > 0 && v > c.max_batch_size()) || (c.max_batch_size() == 0 && v > 1))
        return ck.Fail(here, StrCat("sequence_batching.oldest.preferred_batch_size[", i, "]"),
                       StrCat(v, " is not in [1, max_batch_size = ", std::max(1, c.max_batch_size()), "]"));
    }
  }
  if (c.response_cache().enable())
    return ck.Fail(here, "sequence_batching",
                   "a sequence model cannot use response_cache (its answers depend on the sequence's state)");
  if (c.model_warmup_size() > 0)
    return ck.Fail(here, "sequence_batching",
                   "model_warmup is not supported on a sequence model (a sample has no sequence to belong to)");
  return Status::Ok();
}

std::set<std::string> SequenceInputNames(const ModelConfig& c) {
  std::set<std::string> names;
  if (!c.has_sequence_batching()) return names;
  for (const auto& ci : c.sequence_batching().control_input()) names.insert(ci.name());
  for (const auto& s : c.sequence_batching().state()) names.insert(s.input_name());
  return names;
}

Status CheckSequenceTensors(const ModelConfig& c, const std::vector<ModelTensorInfo>& inputs,
                            const std::vector<ModelTensorInfo>& outputs, const std::string& file) {
  if (!c.has_sequence_batching()) return Status::Ok();
  const bool batch = c.max_batch_size() > 0;
  auto find = [](const std::vector<ModelTensorInfo>& list, const std::string& name) -> const ModelTensorInfo* {
    for (const auto& t : list)
      if (t.name == name) return &t;
    return nullptr;
  };
  // The model's dims must accept `want` (per request, without the batch dimension).
  auto fits = [&](const ModelTensorInfo& m, std::vector<int64_t> want) {
    if (batch) want.insert(want.begin(), -1);
    if (m.dims.size() != want.size()) return false;
    for (size_t i = 0; i < want.size(); ++i)
      if (m.dims[i] >= 0 && want[i] >= 0 && m.dims[i] != want[i]) return false;
    if (batch && m.dims[0] >= 0 && m.dims[0] != 1) return false;
    return true;
  };
  const std::string model = c.name();
  for (const auto& ci : c.sequence_batching().control_input()) {
    const ModelTensorInfo* m = find(inputs, ci.name());
    const std::string what = StrCat(file, ": sequence_batching control input '", ci.name(), "'");
    if (!m) return InvalidArgument(what, " is not an input of model '", model, "'");
    const DType want = SequenceControlDType(ci.control(0));
    if (m->dtype != want)
      return InvalidArgument(what, " is ", TypeName(want), " but the model's input is ", TypeName(m->dtype));
    if (!fits(*m, {1}))
      return InvalidArgument(what, ": the model's input has shape ", DimsText(m->dims), ", expected ",
                             batch ? "[-1,1] (batch, 1)" : "[1]");
  }
  for (const auto& s : c.sequence_batching().state()) {
    const std::vector<int64_t> dims(s.dims().begin(), s.dims().end());
    const DType want = DTypeFromConfig(s.data_type());
    const ModelTensorInfo* in = find(inputs, s.input_name());
    const ModelTensorInfo* out = find(outputs, s.output_name());
    const std::string what =
        StrCat(file, ": sequence_batching state '", s.input_name(), "' -> '", s.output_name(), "'");
    if (!in) return InvalidArgument(what, ": '", s.input_name(), "' is not an input of model '", model, "'");
    if (!out) return InvalidArgument(what, ": '", s.output_name(), "' is not an output of model '", model, "'");
    for (const ModelTensorInfo* m : {in, out}) {
      if (m->dtype != want)
        return InvalidArgument(what, ": the model's '", m->name, "' is ", TypeName(m->dtype), ", the state ",
                               TypeName(want));
      if (!fits(*m, dims))
        return InvalidArgument(what, ": the model's '", m->name, "' has shape ", DimsText(m->dims), ", the state ",
                               DimsText(dims), batch ? " after the batch dimension" : "");
    }
  }
  return Status::Ok();
}

}  // namespace sampan::server
