// A model's config: config.pbtxt (parsed by config_text.cpp) or its JSON form, Triton's
// defaults filled in, then the validator: the checks of the top-level fields, tensors, instance
// groups, dynamic batching, version policy and ensembles, and the refusal of fields whose
// behaviour Sampan lacks; the sequence_batching, rate_limiter and sampan sections have files of
// their own (config_check.h).
#include "server/repository/model_config.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "server/repository/config_check.h"
#include "server/repository/config_text.h"

namespace sampan::server {

namespace pb = ::google::protobuf;
namespace sc = ::sampan::serverconfig;
using Tree = pb::TextFormat::ParseInfoTree;

ConfigLoc ConfigChecker::At(const Tree* tree, const Descriptor* d, const char* field, int index) {
  if (!tree) return {};
  const pb::FieldDescriptor* f = d->FindFieldByName(field);
  if (!f) return {};
  int i = f->is_repeated() ? std::max(index, 0) : -1;
  auto loc = tree->GetLocation(f, i);
  if (loc.line < 0 && f->is_repeated() && i > 0) loc = tree->GetLocation(f, 0);
  return {loc.line, loc.column};
}

const ConfigChecker::Tree* ConfigChecker::Sub(const Tree* tree, const Descriptor* d, const char* field, int index) {
  if (!tree) return nullptr;
  const pb::FieldDescriptor* f = d->FindFieldByName(field);
  if (!f) return nullptr;
  return tree->GetTreeForNested(f, f->is_repeated() ? index : -1);
}

namespace {

using Loc = ConfigLoc;

// Validation with positions: each check names the field path and, when the
// text was parsed, the line and column of the value at fault.
class Validator : public ConfigChecker {
 public:
  Validator(const std::string& file, const std::string& model_dir) : ConfigChecker(file, model_dir) {}

  Status Run(const sc::ModelConfig& c, const Tree* root);

 private:
  template <class T>
  Status CheckTensors(const pb::RepeatedPtrField<T>& list, const char* list_name, const Tree* root);
  Status CheckInstanceGroups(const sc::ModelConfig& c, const Tree* root);
  Status CheckDynamicBatching(const sc::ModelConfig& c, const Tree* root);
  Status CheckVersionPolicy(const sc::ModelConfig& c, const Tree* root);
  Status CheckServedAsWritten(const sc::ModelConfig& c, const Tree* root);
  Status CheckEnsemble(const sc::ModelConfig& c, const Tree* root);
};

Status Validator::Run(const sc::ModelConfig& c, const Tree* root) {
  const pb::Descriptor* d = sc::ModelConfig::descriptor();
  if (c.name().empty()) return Fail({}, "name", "must be given (the model's name)");
  if (!model_dir_.empty() && c.name() != model_dir_)
    return Fail(At(root, d, "name"), "name",
                StrCat("'", c.name(), "' does not match the model directory '", model_dir_, "'"));
  if (c.max_batch_size() < 0)
    return Fail(At(root, d, "max_batch_size"), "max_batch_size", StrCat("must be >= 0 (got ", c.max_batch_size(), ")"));
  SP_RETURN_IF_ERROR(CheckTensors(c.input(), "input", root));
  SP_RETURN_IF_ERROR(CheckTensors(c.output(), "output", root));
  SP_RETURN_IF_ERROR(CheckInstanceGroups(c, root));
  SP_RETURN_IF_ERROR(CheckRateLimiter(*this, c, root));
  SP_RETURN_IF_ERROR(CheckDynamicBatching(c, root));
  SP_RETURN_IF_ERROR(CheckSequenceBatching(*this, c, root));
  SP_RETURN_IF_ERROR(CheckVersionPolicy(c, root));
  // The text format takes an enum's number too, and proto3 keeps numbers it has no name for.
  if (c.has_optimization() && !sc::ModelOptimizationPolicy::ModelPriority_IsValid(c.optimization().priority()))
    return Fail(
        First({At(Sub(root, d, "optimization"), sc::ModelOptimizationPolicy::descriptor(), "priority"),
               At(root, d, "optimization")}),
        "optimization.priority",
        StrCat(c.optimization().priority(), " is none of PRIORITY_DEFAULT (0), PRIORITY_MAX (1), PRIORITY_MIN (2)"));
  SP_RETURN_IF_ERROR(CheckSampan(*this, c, root));
  SP_RETURN_IF_ERROR(CheckServedAsWritten(c, root));
  SP_RETURN_IF_ERROR(CheckEnsemble(c, root));
  return Status::Ok();
}

// An ensemble's own fields: the steps form a DAG over tensor names in which every tensor
// has one producer (an ensemble input or one step's output), every step input and
// ensemble output is produced, and every ensemble input is read. Whether the composing
// models have the inputs, outputs and types the steps name is checked when the ensemble
// loads (server/core/ensemble.h), against the versions that serve then.
Status Validator::CheckEnsemble(const sc::ModelConfig& c, const Tree* root) {
  const pb::Descriptor* cd = sc::ModelConfig::descriptor();
  const pb::Descriptor* ed = sc::ModelEnsembling::descriptor();
  const pb::Descriptor* sd = sc::ModelEnsembling::Step::descriptor();
  const bool is_ensemble = c.platform() == "ensemble";
  if (!is_ensemble) {
    if (c.has_ensemble_scheduling())
      return Fail(At(root, cd, "ensemble_scheduling"), "ensemble_scheduling",
                  StrCat("needs platform: \"ensemble\"",
                         c.platform().empty() ? "" : StrCat(" (platform is '", c.platform(), "')")));
    return Status::Ok();
  }
  Loc here = First({At(root, cd, "platform")});
  if (!c.backend().empty())
    return Fail(At(root, cd, "backend"), "backend", "an ensemble has no backend (leave it empty)");
  if (!c.has_ensemble_scheduling() || c.ensemble_scheduling().step_size() == 0)
    return Fail(First({At(root, cd, "ensemble_scheduling"), here}), "ensemble_scheduling",
                "an ensemble needs at least one step");
  // Fields that mean something for a model that runs, not for a DAG of other models' requests.
  const std::pair<const char*, bool> not_for_ensembles[] = {
      {"instance_group", c.instance_group_size() > 0}, {"default_model_filename", !c.default_model_filename().empty()},
      {"parameters", !c.parameters().empty()},         {"optimization", c.has_optimization()},
      {"model_warmup", c.model_warmup_size() > 0},
  };
  for (const auto& [field, set] : not_for_ensembles)
    if (set)
      return Fail(First({At(root, cd, field), here}), field,
                  "is not used by an ensemble (its steps run on the composing models' own instances); remove it");
  if (c.has_sampan()) {
    sc::SampanConfig ensemble_fields;
    ensemble_fields.set_latency_slo_ms(c.sampan().latency_slo_ms());
    *ensemble_fields.mutable_fan_out() = c.sampan().fan_out();
    if (c.sampan().SerializeAsString() != ensemble_fields.SerializeAsString())
      return Fail(At(root, cd, "sampan"), "sampan",
                  "an ensemble takes only sampan.latency_slo_ms and sampan.fan_out (the build settings belong to the "
                  "composing models)");
    const pb::Descriptor* sd2 = sc::SampanConfig::descriptor();
    const Tree* st2 = Sub(root, cd, "sampan");
    std::set<int> fanned;
    for (int i = 0; i < c.sampan().fan_out_size(); ++i) {
      const auto& f = c.sampan().fan_out(i);
      Loc floc = First({At(st2, sd2, "fan_out", i), At(root, cd, "sampan")});
      const std::string path = StrCat("sampan.fan_out[", i, "]");
      const int steps = c.has_ensemble_scheduling() ? c.ensemble_scheduling().step_size() : 0;
      if (f.step() < 0 || f.step() >= steps)
        return Fail(floc, path + ".step", StrCat("is ", f.step(), " but the ensemble has steps 0..", steps - 1));
      if (!fanned.insert(f.step()).second)
        return Fail(floc, path + ".step", StrCat("step ", f.step(), " is listed twice"));
      if (f.max_total_rows() > 0 && f.max_rows() > f.max_total_rows())
        return Fail(floc, path + ".max_rows",
                    StrCat("is ", f.max_rows(), ", more than max_total_rows (", f.max_total_rows(), ")"));
    }
  }
  if (c.input_size() == 0) return Fail(here, "input", "an ensemble must declare its inputs");
  if (c.output_size() == 0) return Fail(here, "output", "an ensemble must declare its outputs");
  for (int i = 0; i < c.input_size(); ++i)
    if (c.input(i).has_reshape())
      return Fail(At(root, cd, "input", i), StrCat("input '", c.input(i).name(), "': reshape"),
                  "is not supported on an ensemble's tensors");
  for (int i = 0; i < c.output_size(); ++i)
    if (c.output(i).has_reshape())
      return Fail(At(root, cd, "output", i), StrCat("output '", c.output(i).name(), "': reshape"),
                  "is not supported on an ensemble's tensors");
  const auto& e = c.ensemble_scheduling();
  const Tree* et = Sub(root, cd, "ensemble_scheduling");
  // Producer of each tensor: -1 = an ensemble input, else the step index.
  std::map<std::string, int> producer;
  for (const auto& in : c.input()) producer[in.name()] = -1;
  for (int i = 0; i < e.step_size(); ++i) {
    const auto& st = e.step(i);
    const Tree* stt = Sub(et, ed, "step", i);
    Loc sloc = First({At(stt, sd, "model_name"), At(et, ed, "step", i), here});
    const std::string path = StrCat("ensemble_scheduling.step[", i, "]");
    if (st.model_name().empty()) return Fail(sloc, path + ".model_name", "must be given");
    if (st.model_name() == c.name()) return Fail(sloc, path + ".model_name", "an ensemble cannot run itself");
    if (!st.model_namespace().empty())
      return Fail(First({At(stt, sd, "model_namespace"), sloc}), path + ".model_namespace",
                  "model namespaces are not supported (leave it empty)");
    if (st.model_version() < -1)
      return Fail(First({At(stt, sd, "model_version"), sloc}), path + ".model_version",
                  StrCat("must be -1 (the newest ready version) or a version number, got ", st.model_version()));
    if (st.input_map().empty()) return Fail(sloc, path + ".input_map", "must map at least one model input");
    if (st.output_map().empty()) return Fail(sloc, path + ".output_map", "must map at least one model output");
    for (const auto& [model_out, tensor] : st.output_map()) {
      if (tensor.empty())
        return Fail(First({At(stt, sd, "output_map"), sloc}), path + ".output_map",
                    StrCat("model output '", model_out, "' maps to an empty tensor name"));
      auto [it, fresh] = producer.emplace(tensor, i);
      if (!fresh)
        return Fail(First({At(stt, sd, "output_map"), sloc}), path + ".output_map",
                    it->second < 0 ? StrCat("tensor '", tensor, "' is an ensemble input; a step cannot write it")
                                   : StrCat("tensor '", tensor, "' is already written by step ", it->second,
                                            " (model '", e.step(it->second).model_name(), "')"));
    }
  }
  std::set<std::string> read;
  std::vector<std::vector<int>> after(static_cast<size_t>(e.step_size()));  // step -> steps that read its outputs
  std::vector<int> waits(static_cast<size_t>(e.step_size()), 0);
  for (int i = 0; i < e.step_size(); ++i) {
    const auto& st = e.step(i);
    Loc mloc = First({At(Sub(et, ed, "step", i), sd, "input_map"), At(et, ed, "step", i), here});
    std::set<int> from;
    for (const auto& [model_in, tensor] : st.input_map()) {
      auto it = producer.find(tensor);
      if (it == producer.end())
        return Fail(mloc, StrCat("ensemble_scheduling.step[", i, "].input_map"),
                    StrCat("model input '", model_in, "' reads tensor '", tensor,
                           "', which no ensemble input or step output provides"));
      read.insert(tensor);
      if (it->second >= 0 && from.insert(it->second).second) {
        after[static_cast<size_t>(it->second)].push_back(i);
        ++waits[static_cast<size_t>(i)];
      }
    }
  }
  for (int i = 0; i < c.input_size(); ++i)
    if (!read.count(c.input(i).name()))
      return Fail(At(root, cd, "input", i), StrCat("input '", c.input(i).name(), "'"), "is not read by any step");
  for (int i = 0; i < c.output_size(); ++i) {
    auto it = producer.find(c.output(i).name());
    if (it == producer.end() || it->second < 0)
      return Fail(At(root, cd, "output", i), StrCat("output '", c.output(i).name(), "'"),
                  it == producer.end() ? "is not written by any step (name it in a step's output_map)"
                                       : "is an ensemble input; an output must come from a step");
  }
  // Kahn's order: steps left over lie on a cycle.
  std::vector<int> ready;
  for (int i = 0; i < e.step_size(); ++i)
    if (waits[static_cast<size_t>(i)] == 0) ready.push_back(i);
  int ordered = 0;
  while (!ready.empty()) {
    const int s = ready.back();
    ready.pop_back();
    ++ordered;
    for (int n : after[static_cast<size_t>(s)])
      if (--waits[static_cast<size_t>(n)] == 0) ready.push_back(n);
  }
  if (ordered < e.step_size()) {
    std::string cycle;
    for (int i = 0; i < e.step_size(); ++i)
      if (waits[static_cast<size_t>(i)] > 0)
        cycle += StrCat(cycle.empty() ? "" : ", ", i, " ('", e.step(i).model_name(), "')");
    return Fail(At(root, cd, "ensemble_scheduling"), "ensemble_scheduling",
                StrCat("the steps form a cycle (steps ", cycle, " wait on each other's outputs)"));
  }
  return Status::Ok();
}

// Fields of Triton's schema that parse but whose behaviour Sampan does not have: a config that
// sets them is refused (naming the field and why), never served as if they were not there.
// Metadata that changes nothing a client sees (instance_group.name, input.format,
// output.label_filename, used by the classification extension only, which requests cannot ask
// for) stays accepted.
Status Validator::CheckServedAsWritten(const sc::ModelConfig& c, const Tree* root) {
  const pb::Descriptor* cd = sc::ModelConfig::descriptor();
  static const std::set<std::string> kPlatforms = {"onnxruntime_onnx", "sampan_plan", "ensemble"};
  static const std::set<std::string> kBackends = {"onnxruntime", "sampan"};
  const std::string served =
      "Sampan serves ONNX models (platform onnxruntime_onnx, backend onnxruntime), its "
      "own plans (platform sampan_plan, backend sampan) and ensembles (platform ensemble)";
  auto tensorrt = [](const std::string& what) {
    return StrCat(what,
                  ": TensorRT engines cannot be loaded; put the ONNX model in the version directory "
                  "(model.onnx) and Sampan builds its own plan from it");
  };
  if (!c.platform().empty() && !kPlatforms.count(c.platform()))
    return Fail(At(root, cd, "platform"), "platform",
                c.platform() == "tensorrt_plan" ? tensorrt("'tensorrt_plan'")
                                                : StrCat("'", c.platform(), "' is not served: ", served));
  if (!c.backend().empty() && !kBackends.count(c.backend()))
    return Fail(
        At(root, cd, "backend"), "backend",
        c.backend() == "tensorrt" ? tensorrt("'tensorrt'") : StrCat("'", c.backend(), "' is not served: ", served));
  if (!c.runtime().empty())
    return Fail(At(root, cd, "runtime"), "runtime",
                StrCat("'", c.runtime(), "': Sampan has no backend libraries to choose from (leave it empty)"));
  if (!c.cc_model_filenames().empty())
    return Fail(At(root, cd, "cc_model_filenames"), "cc_model_filenames",
                "is not supported: one model file serves every GPU (Sampan builds a plan per device type)");
  if (!c.metric_tags().empty())
    return Fail(At(root, cd, "metric_tags"), "metric_tags",
                "is not supported: metrics carry model and version labels only");
  if (c.model_transaction_policy().decoupled()) {
    // Each response is one row of the outputs' leading dimension (docs/config.md).
    const Loc loc = At(root, cd, "model_transaction_policy");
    if (c.max_batch_size() > 0)
      return Fail(loc, "model_transaction_policy.decoupled",
                  "needs max_batch_size 0: the responses are the rows of the outputs' leading dimension");
    if (c.has_sequence_batching() || c.response_cache().enable())
      return Fail(loc, "model_transaction_policy.decoupled",
                  c.has_sequence_batching() ? "is not supported on a sequence model" : "cannot use response_cache");
    for (int i = 0; i < c.output_size(); ++i)
      if (c.output(i).dims_size() > 0 && c.output(i).dims(0) != -1)
        return Fail(First({At(root, cd, "output", i), loc}), StrCat("output '", c.output(i).name(), "'"),
                    "a decoupled model streams the rows of its outputs' leading dimension, which must be variable "
                    "(-1)");
  }
  for (int i = 0; i < c.input_size(); ++i) {
    const auto& in = c.input(i);
    const Loc loc = At(root, cd, "input", i);
    const std::string path = StrCat("input '", in.name(), "'");
    if (in.allow_ragged_batch())
      return Fail(loc, path + ": allow_ragged_batch",
                  "ragged batching is not supported: requests batch together when their non-batch dims are equal");
    if (in.is_shape_tensor()) return Fail(loc, path + ": is_shape_tensor", "shape tensors are not supported");
    if (in.optional())
      return Fail(loc, path + ": optional",
                  "optional inputs are not supported: every input of an ONNX model or plan must be given");
  }
  for (int i = 0; i < c.output_size(); ++i)
    if (c.output(i).is_shape_tensor())
      return Fail(At(root, cd, "output", i), StrCat("output '", c.output(i).name(), "': is_shape_tensor"),
                  "shape tensors are not supported");
  for (int i = 0; i < c.instance_group_size(); ++i) {
    const auto& g = c.instance_group(i);
    const Loc loc = At(root, cd, "instance_group", i);
    const std::string path = StrCat("instance_group[", i, "]");
    if (g.passive())
      return Fail(loc, path + ".passive", "passive instances are not supported: every instance takes requests");
    if (!g.profile().empty())
      return Fail(loc, path + ".profile",
                  "is not supported: every instance uses every profile of the plan (chosen per request by shape)");
    if (!g.host_policy().empty()) return Fail(loc, path + ".host_policy", "host policies are not supported");
  }
  for (const auto& [key, value] : c.parameters()) {
    if (key != "intra_op_thread_count")
      return Fail(At(root, cd, "parameters"), StrCat("parameters '", key, "'"),
                  "is not a parameter Sampan reads (it reads intra_op_thread_count: CPU threads per instance)");
    const std::string& v = value.string_value();
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 1 || n > 4096)
      return Fail(At(root, cd, "parameters"), "parameters 'intra_op_thread_count'",
                  StrCat("must be a whole number of threads >= 1, as a string (got \"", v, "\")"));
  }
  return Status::Ok();
}

template <class T>
Status Validator::CheckTensors(const pb::RepeatedPtrField<T>& list, const char* list_name, const Tree* root) {
  const pb::Descriptor* cd = sc::ModelConfig::descriptor();
  const pb::Descriptor* td = T::descriptor();
  std::set<std::string> seen;
  for (int i = 0; i < list.size(); ++i) {
    const T& t = list[i];
    const Tree* tt = Sub(root, cd, list_name, i);
    Loc here = First({At(tt, td, "name"), At(root, cd, list_name, i)});
    std::string path = StrCat(list_name, "[", i, "]");
    if (t.name().empty()) return Fail(here, path, "name must be given");
    if (!seen.insert(t.name()).second)
      return Fail(here, path, StrCat("name '", t.name(), "' is used by an earlier ", list_name));
    path = StrCat(list_name, " '", t.name(), "'");
    if (t.data_type() == sc::TYPE_INVALID)
      return Fail(First({At(tt, td, "data_type"), here}), path, "data_type must be given (e.g. TYPE_FP32)");
    if (t.dims().empty()) return Fail(First({At(tt, td, "dims"), here}), path, "dims must not be empty");
    bool dims_static = true;
    int64_t dims_count = 1;
    for (int j = 0; j < t.dims().size(); ++j) {
      int64_t v = t.dims(j);
      if (v < 1 && v != -1)
        return Fail(First({At(tt, td, "dims", j), here}), StrCat(path, ": dims[", j, "]"),
                    StrCat("must be >= 1 or -1 (got ", v, ")"));
      if (v == -1)
        dims_static = false;
      else
        dims_count *= v;
    }
    if (t.has_reshape()) {
      const Tree* rt = Sub(tt, td, "reshape");
      const pb::Descriptor* rd = sc::ModelTensorReshape::descriptor();
      Loc rloc = First({At(rt, rd, "shape"), At(tt, td, "reshape"), here});
      bool reshape_static = true;
      int64_t reshape_count = 1;
      for (int j = 0; j < t.reshape().shape().size(); ++j) {
        int64_t v = t.reshape().shape(j);
        if (v < 1 && v != -1)
          return Fail(First({At(rt, rd, "shape", j), rloc}), StrCat(path, ": reshape.shape[", j, "]"),
                      StrCat("must be >= 1 or -1 (got ", v, ")"));
        if (v == -1)
          reshape_static = false;
        else
          reshape_count *= v;
      }
      if (dims_static && reshape_static && dims_count != reshape_count)
        return Fail(rloc, StrCat(path, ": reshape"),
                    StrCat("has ", reshape_count, " elements but dims have ", dims_count));
    }
  }
  return Status::Ok();
}

Status Validator::CheckInstanceGroups(const sc::ModelConfig& c, const Tree* root) {
  const pb::Descriptor* cd = sc::ModelConfig::descriptor();
  const pb::Descriptor* gd = sc::ModelInstanceGroup::descriptor();
  for (int i = 0; i < c.instance_group_size(); ++i) {
    const auto& g = c.instance_group(i);
    const Tree* gt = Sub(root, cd, "instance_group", i);
    Loc here = First({At(root, cd, "instance_group", i), At(gt, gd, "kind"), At(gt, gd, "count")});
    std::string path = StrCat("instance_group[", i, "]");
    if (g.count() < 1)
      return Fail(First({At(gt, gd, "count"), here}), StrCat(path, ".count"),
                  StrCat("must be >= 1 (got ", g.count(), ")"));
    if (!g.gpus().empty() && g.kind() != sc::ModelInstanceGroup::KIND_GPU &&
        g.kind() != sc::ModelInstanceGroup::KIND_AUTO)
      return Fail(
          First({At(gt, gd, "gpus"), here}), StrCat(path, ".gpus"),
          StrCat("only allowed with kind KIND_GPU (kind is ", sc::ModelInstanceGroup::Kind_Name(g.kind()), ")"));
    std::set<int> seen;
    for (int j = 0; j < g.gpus_size(); ++j) {
      if (g.gpus(j) < 0)
        return Fail(First({At(gt, gd, "gpus", j), here}), StrCat(path, ".gpus[", j, "]"),
                    StrCat("must be >= 0 (got ", g.gpus(j), ")"));
      if (!seen.insert(g.gpus(j)).second)
        return Fail(First({At(gt, gd, "gpus", j), here}), StrCat(path, ".gpus[", j, "]"),
                    StrCat("GPU ", g.gpus(j), " is listed twice"));
    }
  }
  return Status::Ok();
}

Status Validator::CheckDynamicBatching(const sc::ModelConfig& c, const Tree* root) {
  if (!c.has_dynamic_batching()) return Status::Ok();
  const pb::Descriptor* cd = sc::ModelConfig::descriptor();
  const pb::Descriptor* bd = sc::ModelDynamicBatching::descriptor();
  const auto& b = c.dynamic_batching();
  const Tree* bt = Sub(root, cd, "dynamic_batching");
  Loc here = At(root, cd, "dynamic_batching");
  if (c.max_batch_size() <= 0)
    return Fail(here, "dynamic_batching", "needs max_batch_size > 0 (the model does not batch)");
  for (int i = 0; i < b.preferred_batch_size_size(); ++i) {
    int v = b.preferred_batch_size(i);
    Loc loc = First({At(bt, bd, "preferred_batch_size", i), here});
    std::string path = StrCat("dynamic_batching.preferred_batch_size[", i, "]");
    if (v < 1) return Fail(loc, path, StrCat("must be >= 1 (got ", v, ")"));
    if (v > c.max_batch_size()) return Fail(loc, path, StrCat(v, " exceeds max_batch_size ", c.max_batch_size()));
  }
  const uint64_t levels = b.priority_levels();
  if (levels == 0) {
    if (b.default_priority_level() != 0)
      return Fail(First({At(bt, bd, "default_priority_level"), here}), "dynamic_batching.default_priority_level",
                  StrCat(b.default_priority_level(), " exceeds priority_levels 0 (priorities are off)"));
    if (!b.priority_queue_policy().empty())
      return Fail(First({At(bt, bd, "priority_queue_policy"), here}), "dynamic_batching.priority_queue_policy",
                  "needs priority_levels > 0");
  } else {
    if (b.default_priority_level() < 1 || b.default_priority_level() > levels)
      return Fail(First({At(bt, bd, "default_priority_level"), At(bt, bd, "priority_levels"), here}),
                  "dynamic_batching.default_priority_level",
                  StrCat("must be in [1, priority_levels = ", levels, "] (got ", b.default_priority_level(), ")"));
    // Report the lowest bad key, so the message does not depend on map order.
    std::set<uint64_t> keys;
    for (const auto& [k, v] : b.priority_queue_policy()) keys.insert(k);
    for (uint64_t k : keys)
      if (k < 1 || k > levels)
        return Fail(First({At(bt, bd, "priority_queue_policy"), here}), "dynamic_batching.priority_queue_policy",
                    StrCat("key ", k, " is not a priority level in [1, ", levels, "]"));
  }
  return Status::Ok();
}

Status Validator::CheckVersionPolicy(const sc::ModelConfig& c, const Tree* root) {
  if (!c.has_version_policy()) return Status::Ok();
  const pb::Descriptor* cd = sc::ModelConfig::descriptor();
  const pb::Descriptor* vd = sc::ModelVersionPolicy::descriptor();
  const auto& p = c.version_policy();
  const Tree* vt = Sub(root, cd, "version_policy");
  Loc here = At(root, cd, "version_policy");
  if (p.has_latest() && p.latest().num_versions() < 1)
    return Fail(First({At(vt, vd, "latest"), here}), "version_policy.latest.num_versions", "must be >= 1");
  if (p.has_specific()) {
    const Tree* st = Sub(vt, vd, "specific");
    const pb::Descriptor* sd = sc::ModelVersionPolicy::Specific::descriptor();
    Loc sloc = First({At(vt, vd, "specific"), here});
    if (p.specific().versions().empty()) return Fail(sloc, "version_policy.specific.versions", "must not be empty");
    std::set<int64_t> seen;
    for (int i = 0; i < p.specific().versions_size(); ++i) {
      int64_t v = p.specific().versions(i);
      Loc loc = First({At(st, sd, "versions", i), sloc});
      std::string path = StrCat("version_policy.specific.versions[", i, "]");
      if (v < 1) return Fail(loc, path, StrCat("must be >= 1 (got ", v, ")"));
      if (!seen.insert(v).second) return Fail(loc, path, StrCat("version ", v, " is listed twice"));
    }
  }
  return Status::Ok();
}

}  // namespace

const char* DataTypeName(sc::DataType type) {
  const std::string& name = sc::DataType_Name(type);
  return name.empty() ? "TYPE_?" : name.c_str();
}

Result<ModelConfig> ParseModelConfig(const std::string& text, const std::string& file, const std::string& model_dir) {
  ModelConfig config;
  Tree tree;
  SP_RETURN_IF_ERROR(ParseConfigText(text, file, &config, &tree));

  // Triton's defaults, applied where the text leaves a field out.
  const pb::Descriptor* cd = sc::ModelConfig::descriptor();
  if (config.name().empty() && !model_dir.empty()) config.set_name(model_dir);
  const pb::FieldDescriptor* groups = cd->FindFieldByName("instance_group");
  const pb::FieldDescriptor* count = sc::ModelInstanceGroup::descriptor()->FindFieldByName("count");
  for (int i = 0; i < config.instance_group_size(); ++i) {
    const Tree* gt = tree.GetTreeForNested(groups, i);
    bool written = gt && gt->GetLocation(count, -1).line >= 0;
    if (!written && config.instance_group(i).count() == 0) config.mutable_instance_group(i)->set_count(1);
  }
  if (!config.has_version_policy()) config.mutable_version_policy()->mutable_latest()->set_num_versions(1);

  Validator validator(file, model_dir);
  SP_RETURN_IF_ERROR(validator.Run(config, &tree));
  return config;
}

Result<ModelConfig> ParseModelConfig(const std::string& text, const std::string& file) {
  return ParseModelConfig(text, file, "");
}

Result<ModelConfig> ParseModelConfigJson(const std::string& json, const std::string& what,
                                         const std::string& model_dir) {
  ModelConfig config;
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto st = pb::util::JsonStringToMessage(json, &config, options);
  if (!st.ok()) return InvalidArgument(what, ": not a valid model configuration: ", std::string(st.message()));
  if (config.name().empty() && !model_dir.empty()) config.set_name(model_dir);
  // JSON cannot tell a count written as 0 from one left out; 0 is never valid, so it is absent.
  for (int i = 0; i < config.instance_group_size(); ++i)
    if (config.instance_group(i).count() == 0) config.mutable_instance_group(i)->set_count(1);
  if (!config.has_version_policy()) config.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  SP_RETURN_IF_ERROR(Validator(what, model_dir).Run(config, nullptr));
  return config;
}

Status ValidateModelConfig(const ModelConfig& config, const std::string& file, const std::string& model_dir) {
  return Validator(file, model_dir).Run(config, nullptr);
}

}  // namespace sampan::server
