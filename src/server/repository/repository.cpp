#include "server/repository/repository.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace sampan::server {

namespace fs = std::filesystem;
namespace sc = ::sampan::serverconfig;

namespace {

bool Hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.empty() || name[0] == '.';
}

// A version directory name: a positive decimal integer without sign or leading zeros.
bool ParseVersion(const std::string& name, int64_t* v) {
  if (name.empty() || name.size() > 18 || name[0] == '0') return false;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), *v);
  return ec == std::errc() && end == name.data() + name.size() && *v > 0;
}

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += StrCat(i ? ", " : "", dims[i]);
  return s + "]";
}

template <class T>
std::vector<int64_t> ConfigDims(const T& t) {
  return std::vector<int64_t>(t.dims().begin(), t.dims().end());
}

// The shape the model sees for a config tensor (reshape wins over dims).
template <class T>
std::vector<int64_t> ModelSideDims(const T& t) {
  if (t.has_reshape()) return std::vector<int64_t>(t.reshape().shape().begin(), t.reshape().shape().end());
  return ConfigDims(t);
}

std::string Names(const std::vector<ModelTensorInfo>& list) {
  std::string s;
  for (const auto& t : list) s += (s.empty() ? "" : ", ") + t.name;
  return s.empty() ? "none" : s;
}

// Checks one configured tensor against the model's and narrows -1 dims the
// model fixes. `kind` is "input" or "output".
template <class T>
Status CheckAgainstModel(T* t, const ModelTensorInfo& m, int batch, const std::string& kind, const std::string& file,
                         const std::string& model) {
  const std::string what = StrCat(file, ": ", kind, " '", t->name(), "'");
  DType configured = DTypeFromConfig(t->data_type());
  if (t->data_type() != sc::TYPE_INVALID && configured != m.dtype)
    return InvalidArgument(what, ": data_type is ", DataTypeName(t->data_type()), " but model '", model, "' has ",
                           DataTypeName(ConfigDataType(m.dtype)));
  if (t->data_type() == sc::TYPE_INVALID) t->set_data_type(ConfigDataType(m.dtype));
  std::vector<int64_t> model_dims = m.dims;
  if (batch) {
    if (model_dims.empty())
      return InvalidArgument(what, ": max_batch_size > 0 needs a batch dimension, but the model's ", kind,
                             " is a scalar");
    if (model_dims[0] >= 0 && model_dims[0] != 1)
      return InvalidArgument(what, ": max_batch_size > 0 needs a dynamic leading (batch) dimension, but the model's ",
                             kind, " has shape ", DimsText(m.dims));
    model_dims.erase(model_dims.begin());
  }
  if (t->dims().empty() && !t->has_reshape()) {
    for (int64_t d : model_dims) t->add_dims(d);
    return Status::Ok();
  }
  std::vector<int64_t> seen = ModelSideDims(*t);
  if (seen.size() != model_dims.size())
    return InvalidArgument(what, ": has ", seen.size(), " dimensions ", DimsText(seen), " but model '", model, "' has ",
                           model_dims.size(), " ", DimsText(model_dims), batch ? " (without the batch dimension)" : "");
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] >= 0 && model_dims[i] >= 0 && seen[i] != model_dims[i])
      return InvalidArgument(what, ": dimension ", i, " is ", seen[i], " but model '", model, "' has ", model_dims[i],
                             " (model shape ", DimsText(model_dims), ")");
  // The model's fixed dims tighten the config's -1 (requests are checked against them).
  if (!t->has_reshape())
    for (size_t i = 0; i < seen.size(); ++i)
      if (seen[i] < 0 && model_dims[i] >= 0) t->set_dims(static_cast<int>(i), model_dims[i]);
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> ListModels(const std::string& repository) {
  std::error_code ec;
  if (!fs::is_directory(repository, ec)) return NotFound("model repository '", repository, "' is not a directory");
  std::vector<std::string> names;
  fs::directory_iterator it(repository, ec);
  if (ec) return IoError("cannot read model repository '", repository, "': ", ec.message());
  for (const auto& e : it) {
    std::error_code ec2;
    if (Hidden(e.path()) || !e.is_directory(ec2)) continue;
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<int64_t> ListVersions(const std::string& model_dir) {
  std::vector<int64_t> versions;
  std::error_code ec;
  fs::directory_iterator it(model_dir, ec);
  if (ec) return versions;
  for (const auto& e : it) {
    std::error_code ec2;
    int64_t v = 0;
    if (e.is_directory(ec2) && ParseVersion(e.path().filename().string(), &v)) versions.push_back(v);
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

std::vector<int64_t> SelectVersions(const sc::ModelVersionPolicy& policy, const std::vector<int64_t>& available) {
  std::vector<int64_t> out;
  if (policy.has_all()) return available;
  if (policy.has_specific()) {
    std::set<int64_t> wanted(policy.specific().versions().begin(), policy.specific().versions().end());
    for (int64_t v : available)
      if (wanted.count(v)) out.push_back(v);
    return out;
  }
  const size_t n = policy.has_latest() ? std::max<uint32_t>(1, policy.latest().num_versions()) : 1;
  const size_t skip = available.size() > n ? available.size() - n : 0;
  out.assign(available.begin() + static_cast<std::ptrdiff_t>(skip), available.end());
  return out;
}

Result<ModelConfig> ReadModelConfig(const std::string& model_dir, const std::string& model_name, bool* has_file) {
  const fs::path file = fs::path(model_dir) / "config.pbtxt";
  std::error_code ec;
  *has_file = fs::exists(file, ec);
  if (!*has_file) {
    ModelConfig config;
    config.set_name(model_name);
    config.mutable_version_policy()->mutable_latest()->set_num_versions(1);
    return config;
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return IoError("cannot read ", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  return ParseModelConfig(text.str(), file.string(), model_name);
}

Result<std::string> FindModelFile(const std::string& version_dir, const ModelConfig& config) {
  std::error_code ec;
  std::vector<std::string> candidates;
  if (!config.default_model_filename().empty()) {
    candidates.push_back(config.default_model_filename());
  } else {
    candidates = {"model.onnx", "model.plan"};
  }
  for (const auto& c : candidates) {
    fs::path p = fs::path(version_dir) / c;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  std::string tried;
  for (const auto& c : candidates) tried += (tried.empty() ? "" : " or ") + c;
  return NotFound(version_dir, ": no model file (looked for ", tried, ")");
}

std::string ModelDirFingerprint(const std::string& model_dir) {
  std::ostringstream os;
  std::error_code ec;
  std::vector<std::string> lines;
  fs::recursive_directory_iterator it(model_dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) return "unreadable";
  for (auto end = fs::recursive_directory_iterator(); it != end; it.increment(ec)) {
    if (ec) break;
    if (Hidden(it->path())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    std::string rel = fs::relative(it->path(), model_dir, ec).string();
    if (it->is_regular_file(ec)) {
      auto size = it->file_size(ec);
      auto mtime = it->last_write_time(ec).time_since_epoch().count();
      lines.push_back(StrCat(rel, " ", size, " ", mtime));
    } else {
      lines.push_back(rel + "/");
    }
  }
  std::sort(lines.begin(), lines.end());
  for (const auto& l : lines) os << l << '\n';
  return os.str();
}

DType DTypeFromConfig(sc::DataType type) {
  switch (type) {
    case sc::TYPE_BOOL:
      return DType::kBool;
    case sc::TYPE_UINT8:
      return DType::kUInt8;
    case sc::TYPE_UINT16:
      return DType::kUInt16;
    case sc::TYPE_UINT32:
      return DType::kUInt32;
    case sc::TYPE_UINT64:
      return DType::kUInt64;
    case sc::TYPE_INT8:
      return DType::kInt8;
    case sc::TYPE_INT16:
      return DType::kInt16;
    case sc::TYPE_INT32:
      return DType::kInt32;
    case sc::TYPE_INT64:
      return DType::kInt64;
    case sc::TYPE_FP16:
      return DType::kFloat16;
    case sc::TYPE_FP32:
      return DType::kFloat32;
    case sc::TYPE_FP64:
      return DType::kFloat64;
    case sc::TYPE_BF16:
      return DType::kBFloat16;
    case sc::TYPE_STRING:
      return DType::kString;
    default:
      return DType::kUndefined;
  }
}

sc::DataType ConfigDataType(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return sc::TYPE_BOOL;
    case DType::kUInt8:
      return sc::TYPE_UINT8;
    case DType::kUInt16:
      return sc::TYPE_UINT16;
    case DType::kUInt32:
      return sc::TYPE_UINT32;
    case DType::kUInt64:
      return sc::TYPE_UINT64;
    case DType::kInt8:
      return sc::TYPE_INT8;
    case DType::kInt16:
      return sc::TYPE_INT16;
    case DType::kInt32:
      return sc::TYPE_INT32;
    case DType::kInt64:
      return sc::TYPE_INT64;
    case DType::kFloat16:
      return sc::TYPE_FP16;
    case DType::kFloat32:
      return sc::TYPE_FP32;
    case DType::kFloat64:
      return sc::TYPE_FP64;
    case DType::kBFloat16:
      return sc::TYPE_BF16;
    case DType::kString:
      return sc::TYPE_STRING;
    default:
      return sc::TYPE_INVALID;
  }
}

Status AutoCompleteConfig(ModelConfig* config, bool has_file, const std::vector<ModelTensorInfo>& inputs,
                          const std::vector<ModelTensorInfo>& outputs, const std::string& file,
                          int default_max_batch_size) {
  const std::string& model = config->name();
  for (const auto* list : {&inputs, &outputs})
    for (const auto& t : *list)
      if (ConfigDataType(t.dtype) == sc::TYPE_INVALID)
        return Unsupported(file, ": model tensor '", t.name, "' has element type ", DTypeName(t.dtype),
                           ", which the server cannot exchange");
  if (!has_file && config->max_batch_size() == 0 && default_max_batch_size > 0) {
    bool batchable = !inputs.empty() && !outputs.empty();
    for (const auto* list : {&inputs, &outputs})
      for (const auto& t : *list) batchable = batchable && !t.dims.empty() && t.dims[0] < 0;
    if (batchable) {
      config->set_max_batch_size(default_max_batch_size);
      config->mutable_dynamic_batching();
    }
  }
  const int batch = config->max_batch_size() > 0 ? 1 : 0;

  // Inputs: the config lists all of them or none (but the control and state inputs the
  // sequence batcher feeds).
  SP_RETURN_IF_ERROR(CheckSequenceTensors(*config, inputs, outputs, file));
  const std::set<std::string> fed = SequenceInputNames(*config);
  if (config->input().empty()) {
    for (const auto& m : inputs) {
      if (fed.count(m.name)) continue;
      auto* t = config->add_input();
      t->set_name(m.name);
      SP_RETURN_IF_ERROR(CheckAgainstModel(t, m, batch, "input", file, model));
    }
  } else {
    std::set<std::string> listed;
    for (auto& t : *config->mutable_input()) {
      auto it = std::find_if(inputs.begin(), inputs.end(), [&](const auto& m) { return m.name == t.name(); });
      if (it == inputs.end())
        return InvalidArgument(file, ": input '", t.name(), "' is not an input of model '", model,
                               "' (model inputs: ", Names(inputs), ")");
      if (!listed.insert(t.name()).second) return InvalidArgument(file, ": input '", t.name(), "' is listed twice");
      SP_RETURN_IF_ERROR(CheckAgainstModel(&t, *it, batch, "input", file, model));
    }
    for (const auto& m : inputs)
      if (!listed.count(m.name) && !fed.count(m.name))
        return InvalidArgument(file, ": model '", model, "' input '", m.name, "' is missing from the config");
  }
  // Outputs: the config may list a subset (the others are not served).
  if (config->output().empty()) {
    for (const auto& m : outputs) {
      auto* t = config->add_output();
      t->set_name(m.name);
      SP_RETURN_IF_ERROR(CheckAgainstModel(t, m, batch, "output", file, model));
    }
  } else {
    std::set<std::string> listed;
    for (auto& t : *config->mutable_output()) {
      auto it = std::find_if(outputs.begin(), outputs.end(), [&](const auto& m) { return m.name == t.name(); });
      if (it == outputs.end())
        return InvalidArgument(file, ": output '", t.name(), "' is not an output of model '", model,
                               "' (model outputs: ", Names(outputs), ")");
      if (!listed.insert(t.name()).second) return InvalidArgument(file, ": output '", t.name(), "' is listed twice");
      SP_RETURN_IF_ERROR(CheckAgainstModel(&t, *it, batch, "output", file, model));
    }
  }
  return Status::Ok();
}

}  // namespace sampan::server
