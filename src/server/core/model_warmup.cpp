#include "server/core/model_warmup.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "server/repository/repository.h"

namespace sampan::server {
namespace {

namespace fs = std::filesystem;
namespace sc = ::sampan::serverconfig;

bool Inside(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : fs::path(name))
    if (part == "..") return false;
  return true;
}

Result<std::string> ReadBytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot read '", path.string(), "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One batch element of an input: zeros, random values, or a file's bytes.
Result<Tensor> Element(const sc::ModelWarmup::Input& in, DType dtype, const Shape& dims, const fs::path& warmup_dir,
                       uint64_t seed, const std::string& where) {
  const int64_t n = NumElements(dims);
  if (dtype == DType::kString) {
    std::vector<std::string> values(static_cast<size_t>(n));
    if (in.has_input_data_file()) {
      SP_ASSIGN_OR_RETURN(std::string bytes, ReadBytes(warmup_dir / in.input_data_file()));
      size_t at = 0;
      for (auto& v : values) {
        uint32_t len = 0;
        if (at + 4 > bytes.size())
          return InvalidArgument(where, ": input_data_file '", in.input_data_file(), "' ends before element ",
                                 &v - values.data(), " of ", n, " (each a 4-byte length and its bytes)");
        std::memcpy(&len, bytes.data() + at, 4);
        at += 4;
        if (len > bytes.size() - at)
          return InvalidArgument(where, ": input_data_file '", in.input_data_file(), "': element ", &v - values.data(),
                                 " says ", len, " bytes, ", bytes.size() - at, " are left");
        v.assign(bytes.data() + at, len);
        at += len;
      }
      if (at != bytes.size())
        return InvalidArgument(where, ": input_data_file '", in.input_data_file(), "' has ", bytes.size() - at,
                               " bytes after its ", n, " elements");
    } else if (in.random_data()) {
      std::mt19937_64 rng(seed);
      for (auto& v : values) {
        v.resize(8);
        for (char& c : v) c = static_cast<char>('a' + rng() % 26);
      }
    }
    return Tensor::FromStrings(std::move(values), dims);
  }
  Tensor t = Tensor::Alloc(dtype, dims);
  if (in.has_input_data_file()) {
    SP_ASSIGN_OR_RETURN(std::string bytes, ReadBytes(warmup_dir / in.input_data_file()));
    if (bytes.size() != t.nbytes())
      return InvalidArgument(where, ": input_data_file '", in.input_data_file(), "' has ", bytes.size(),
                             " bytes, but one batch element of ", DTypeName(dtype), ShapeToString(dims), " is ",
                             t.nbytes(), " bytes");
    std::memcpy(t.mutable_raw(), bytes.data(), bytes.size());
  } else if (in.random_data()) {
    // Values every type holds exactly and every model can take: [0, 1) for floats, 0..99 for integers.
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> v(static_cast<size_t>(n));
    const bool real =
        dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
    for (double& x : v) x = real ? u(rng) : static_cast<double>(rng() % (dtype == DType::kBool ? 2 : 100));
    t = Tensor::FromVector(dtype, v, dims);
  } else {
    std::memset(t.mutable_raw(), 0, t.nbytes());
  }
  return t;
}

}  // namespace

Result<std::vector<WarmupSample>> MakeWarmupSamples(const ModelConfig& config, const std::string& model_dir) {
  std::vector<WarmupSample> samples;
  const bool batching = config.max_batch_size() > 0;
  const fs::path warmup_dir = fs::path(model_dir) / "warmup";
  for (int s = 0; s < config.model_warmup_size(); ++s) {
    const sc::ModelWarmup& w = config.model_warmup(s);
    WarmupSample sample;
    sample.where = StrCat("model_warmup[", s, "]", w.name().empty() ? "" : StrCat(" '", w.name(), "'"));
    if (w.name().empty()) return InvalidArgument(sample.where, ": name must be given");
    int64_t batch = 0;
    if (batching) {
      if (w.batch_size() < 1 || w.batch_size() > static_cast<uint32_t>(config.max_batch_size()))
        return InvalidArgument(sample.where, ": batch_size ", w.batch_size(), " must be 1..", config.max_batch_size(),
                               " (max_batch_size)");
      batch = w.batch_size();
    } else if (w.batch_size() > 1) {
      return InvalidArgument(sample.where, ": batch_size ", w.batch_size(),
                             " for a model that does not batch (max_batch_size 0): use 0 or 1");
    }
    sample.count = std::max<int>(1, static_cast<int>(w.count()));
    for (const auto& [name, in] : w.inputs()) {
      bool known = false;
      for (const auto& ci : config.input()) known |= ci.name() == name;
      if (!known) return InvalidArgument(sample.where, ": '", name, "' is not an input of the model");
    }
    for (int i = 0; i < config.input_size(); ++i) {
      const auto& ci = config.input(i);
      const std::string where = StrCat(sample.where, ": input '", ci.name(), "'");
      auto it = w.inputs().find(ci.name());
      if (it == w.inputs().end()) return InvalidArgument(where, " is not given (a sample gives every input)");
      const sc::ModelWarmup::Input& in = it->second;
      if (in.data_type() != ci.data_type())
        return InvalidArgument(where, ": data_type ", sc::DataType_Name(in.data_type()), " differs from the input's ",
                               sc::DataType_Name(ci.data_type()));
      if (in.input_data_type_case() == sc::ModelWarmup::Input::INPUT_DATA_TYPE_NOT_SET ||
          (in.has_zero_data() && !in.zero_data()) || (in.has_random_data() && !in.random_data()))
        return InvalidArgument(where, ": give its data: zero_data: true, random_data: true or input_data_file");
      if (in.has_input_data_file() && !Inside(in.input_data_file()))
        return InvalidArgument(where, ": input_data_file '", in.input_data_file(),
                               "' must name a file inside the model's warmup/ folder (no absolute path, no ..)");
      if (in.dims_size() != ci.dims_size())
        return InvalidArgument(where, ": dims have ", in.dims_size(), " entries, the input has ", ci.dims_size(),
                               batching ? " (without the batch dimension)" : "");
      Shape dims;
      for (int d = 0; d < in.dims_size(); ++d) {
        if (in.dims(d) < 1) return InvalidArgument(where, ": dims[", d, "] must be >= 1 (got ", in.dims(d), ")");
        if (ci.dims(d) != -1 && ci.dims(d) != in.dims(d))
          return InvalidArgument(where, ": dims[", d, "] is ", in.dims(d), ", the input's is ", ci.dims(d));
        dims.push_back(in.dims(d));
      }
      // A reshaped input: the model sees reshape.shape.
      Shape model_dims = dims;
      if (ci.has_reshape()) {
        model_dims.assign(ci.reshape().shape().begin(), ci.reshape().shape().end());
        for (int64_t& d : model_dims)
          if (d == -1) return InvalidArgument(where, ": a reshape with -1 cannot be warmed up (give static dims)");
        if (NumElements(model_dims) != NumElements(dims))
          return InvalidArgument(where, ": dims hold ", NumElements(dims), " elements, reshape ",
                                 NumElements(model_dims));
      }
      const DType dtype = DTypeFromConfig(ci.data_type());
      SP_ASSIGN_OR_RETURN(Tensor one, Element(in, dtype, model_dims, warmup_dir, 1000 * s + i, where));
      if (!batching) {
        sample.inputs.emplace(ci.name(), std::move(one));
        continue;
      }
      // Every batch element is the sample's element.
      Shape shape = model_dims;
      shape.insert(shape.begin(), batch);
      if (dtype == DType::kString) {
        std::vector<std::string> all;
        for (int64_t b = 0; b < batch; ++b) all.insert(all.end(), one.strings(), one.strings() + one.numel());
        sample.inputs.emplace(ci.name(), Tensor::FromStrings(std::move(all), shape));
      } else {
        Tensor t = Tensor::Alloc(dtype, shape);
        for (int64_t b = 0; b < batch; ++b)
          std::memcpy(static_cast<char*>(t.mutable_raw()) + b * one.nbytes(), one.raw(), one.nbytes());
        sample.inputs.emplace(ci.name(), std::move(t));
      }
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace sampan::server
