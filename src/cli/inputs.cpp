#include "cli/inputs.h"

#include <algorithm>
#include <random>

#include "base/npy.h"

namespace sampan::cli {

namespace {
Result<std::pair<std::string, std::string>> SplitPair(const std::string& arg, const char* flag) {
  size_t eq = arg.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
    return InvalidArgument(flag, " '", arg, "' must look like NAME=VALUE");
  return std::make_pair(arg.substr(0, eq), arg.substr(eq + 1));
}
}  // namespace

Result<std::map<std::string, Shape>> ParseShapeArgs(const std::vector<std::string>& args) {
  std::map<std::string, Shape> out;
  for (const auto& a : args) {
    SP_ASSIGN_OR_RETURN(auto kv, SplitPair(a, "--shape"));
    Shape shape;
    size_t pos = 0;
    const std::string& text = kv.second;
    while (pos <= text.size()) {
      size_t x = text.find('x', pos);
      std::string item = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
      char* end = nullptr;
      long long v = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < 0)
        return InvalidArgument("--shape '", a, "': '", item, "' is not a dimension (use e.g. 1x3x224x224)");
      shape.push_back(v);
      if (x == std::string::npos) break;
      pos = x + 1;
    }
    if (!out.emplace(kv.first, shape).second) return InvalidArgument("--shape given twice for '", kv.first, "'");
  }
  return out;
}

Result<std::map<std::string, std::string>> ParseFileArgs(const std::vector<std::string>& args) {
  std::map<std::string, std::string> out;
  for (const auto& a : args) {
    SP_ASSIGN_OR_RETURN(auto kv, SplitPair(a, "--input"));
    if (!out.emplace(kv.first, kv.second).second) return InvalidArgument("--input given twice for '", kv.first, "'");
  }
  return out;
}

Result<std::map<std::string, Tensor>> PrepareInputs(const ir::Graph& graph, const InputSpec& spec) {
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, path] : spec.files) {
    if (!graph.FindValue(name) ||
        std::find(graph.inputs().begin(), graph.inputs().end(), graph.FindValue(name)) == graph.inputs().end())
      return InvalidArgument("--input '", name, "': the model has no input of that name");
  }
  for (const auto& [name, shape] : spec.shapes) {
    if (!graph.FindValue(name) ||
        std::find(graph.inputs().begin(), graph.inputs().end(), graph.FindValue(name)) == graph.inputs().end())
      return InvalidArgument("--shape '", name, "': the model has no input of that name");
  }
  std::mt19937_64 rng(spec.seed);
  for (const ir::Value* in : graph.inputs()) {
    auto file = spec.files.find(in->name());
    if (file != spec.files.end()) {
      SP_ASSIGN_OR_RETURN(Tensor t, ReadNpy(file->second));
      inputs[in->name()] = std::move(t);
      continue;
    }
    if (!spec.random)
      return InvalidArgument("input '", in->name(), "' (", in->type.ToString(), ") has no value: pass --input ",
                             in->name(), "=FILE.npy or --random-inputs");
    Shape shape;
    auto given = spec.shapes.find(in->name());
    if (given != spec.shapes.end()) {
      shape = given->second;
      if (in->type.dims) {
        const ir::Dims& dims = *in->type.dims;
        bool ok = dims.size() == shape.size();
        for (size_t d = 0; ok && d < dims.size(); ++d) ok = !dims[d].known() || dims[d].value == shape[d];
        if (!ok)
          return InvalidArgument("--shape ", in->name(), "=", ShapeToString(shape), " does not fit the input's ",
                                 in->type.ToString());
      }
    } else {
      if (!in->type.dims)
        return InvalidArgument("input '", in->name(), "' has unknown rank: give its shape with --shape ", in->name(),
                               "=DxDxD");
      for (const ir::Dim& d : *in->type.dims) {
        if (!d.known())
          return InvalidArgument("input '", in->name(), "' (", in->type.ToString(), ") has symbolic dimension '",
                                 d.param.empty() ? "?" : d.param, "': give its shape with --shape ", in->name(),
                                 "=DxDxD");
        shape.push_back(d.value);
      }
    }
    SP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(in->type.dtype, shape));
    if (t.is_string()) {  // random lower-case words of 1..8 letters
      std::uniform_int_distribution<int> len(1, 8), letter('a', 'z');
      for (int64_t i = 0; i < t.numel(); ++i) {
        std::string& w = t.mutable_strings()[i];
        for (int k = len(rng); k > 0; --k) w += static_cast<char>(letter(rng));
      }
      inputs[in->name()] = std::move(t);
      continue;
    }
    Status st = DispatchDType(t.dtype(), [&]<class T>() {
      T* p = t.mutable_data<T>();
      std::uniform_real_distribution<float> real(-1.f, 1.f);
      std::uniform_int_distribution<int> small(0, 9);
      for (int64_t i = 0; i < t.numel(); ++i) {
        if constexpr (std::is_same_v<T, bool>)
          p[i] = small(rng) < 5;
        else if constexpr (std::is_integral_v<T>)
          p[i] = static_cast<T>(small(rng));
        else
          p[i] = ConvertElement<T>(real(rng));
      }
    });
    SP_RETURN_IF_ERROR(st);
    inputs[in->name()] = std::move(t);
  }
  return inputs;
}

}  // namespace sampan::cli
