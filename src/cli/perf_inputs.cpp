// `sampan perf`'s request data: random or zero tensors of each input's datatype, and
// perf_analyzer's --input-data JSON (values, shapes, base64 binary data) read into data sets.
#include <rapidjson/document.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "base/base64.h"
#include "base/half.h"
#include "base/tensor.h"
#include "cli/perf.h"

namespace sampan::cli {

namespace {

// A BYTES element as KServe carries it: a 4-byte little-endian length, then the bytes.
void AppendBytesElement(const std::string& v, std::string* out) {
  const uint32_t n = static_cast<uint32_t>(v.size());
  char len[4];
  std::memcpy(len, &n, 4);
  out->append(len, 4);
  out->append(v);
}

}  // namespace

Status FillTensor(const std::string& datatype, int64_t numel, bool random, std::mt19937_64& rng, std::string* bytes,
                  int string_length, const std::string& string_data) {
  if (datatype == "BYTES") {
    static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    bytes->clear();
    std::string v;
    for (int64_t i = 0; i < numel; ++i) {
      if (!string_data.empty()) {
        v = string_data;
      } else if (random) {
        v.resize(static_cast<size_t>(string_length));
        for (char& c : v) c = kChars[rng() % (sizeof(kChars) - 1)];
      } else {
        v.clear();
      }
      AppendBytesElement(v, bytes);
    }
    return Status::Ok();
  }
  const size_t esize = client::DatatypeSize(datatype);
  if (esize == 0) return Unsupported("input datatype '", datatype, "' (perf generates numeric tensors only)");
  bytes->assign(static_cast<size_t>(numel) * esize, '\0');
  if (!random) return Status::Ok();
  std::uniform_real_distribution<float> uf(0.f, 1.f);
  std::uniform_int_distribution<int> ui(0, 100);
  char* p = bytes->data();
  for (int64_t i = 0; i < numel; ++i, p += esize) {
    if (datatype == "FP32") {
      float v = uf(rng);
      std::memcpy(p, &v, 4);
    } else if (datatype == "FP64") {
      double v = uf(rng);
      std::memcpy(p, &v, 8);
    } else if (datatype == "FP16") {
      uint16_t v = Half(uf(rng)).bits;
      std::memcpy(p, &v, 2);
    } else if (datatype == "BF16") {
      uint16_t v = BFloat16(uf(rng)).bits;
      std::memcpy(p, &v, 2);
    } else if (datatype == "BOOL") {
      *p = static_cast<char>(ui(rng) & 1);
    } else {
      int64_t v = ui(rng);
      std::memcpy(p, &v, esize);
    }  // little-endian: low bytes of a small value
  }
  return Status::Ok();
}

Status LoadJsonInputs(const std::string& path, std::vector<std::vector<client::InputData>>* sets,
                      const std::vector<client::InputData>& templ) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot read --input-data file '", path, "'");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  rapidjson::Document d;
  d.Parse(text.data(), text.size());
  if (d.HasParseError()) return InvalidArgument(path, ": not valid JSON (offset ", d.GetErrorOffset(), ")");
  if (!d.IsObject() || !d.HasMember("data") || !d["data"].IsArray() || d["data"].Empty())
    return InvalidArgument(path, ": want {\"data\": [{\"INPUT\": [values...]}, ...]}");
  size_t idx = 0;
  for (const auto& entry : d["data"].GetArray()) {
    if (!entry.IsObject()) return InvalidArgument(path, ": data[", idx, "] is not an object");
    std::vector<client::InputData> set = templ;
    for (auto& in : set) {
      if (!entry.HasMember(in.name.c_str()))
        return InvalidArgument(path, ": data[", idx, "] has no input '", in.name, "'");
      const rapidjson::Value* values = &entry[in.name.c_str()];
      if (values->IsObject()) {
        if (values->HasMember("shape") && (*values)["shape"].IsArray()) {
          std::vector<int64_t> shape;
          for (const auto& s : (*values)["shape"].GetArray()) {
            if (!s.IsInt64() || s.GetInt64() < 0)
              return InvalidArgument(path, ": data[", idx, "].", in.name, ".shape holds something other than a size");
            shape.push_back(s.GetInt64());
          }
          if (!in.shape.empty() && in.shape.size() == shape.size() + 1) shape.insert(shape.begin(), in.shape[0]);
          in.shape = shape;
        }
        if (values->HasMember("b64")) {
          if (!(*values)["b64"].IsString())
            return InvalidArgument(path, ": data[", idx, "].", in.name, ".b64 is not a string");
          const rapidjson::Value& b = (*values)["b64"];
          auto raw = DecodeBase64(std::string_view(b.GetString(), b.GetStringLength()));
          if (!raw.ok()) return raw.status().WithContext(StrCat(path, ": data[", idx, "].", in.name, ".b64"));
          int64_t numel = 1;
          for (int64_t dd : in.shape) numel *= dd;
          in.bytes.clear();
          if (in.datatype == "BYTES") {
            for (int64_t rep = 0; rep < numel; ++rep) AppendBytesElement(*raw, &in.bytes);
          } else {
            const size_t want = static_cast<size_t>(numel) * client::DatatypeSize(in.datatype);
            if (raw->size() != want)
              return InvalidArgument(path, ": data[", idx, "].", in.name, ".b64 holds ", raw->size(), " bytes; ",
                                     in.datatype, ShapeToString(in.shape), " is ", want);
            in.bytes = std::move(*raw);
          }
          continue;
        }
        if (!values->HasMember("content") || !(*values)["content"].IsArray())
          return InvalidArgument(path, ": data[", idx, "].", in.name, " has no \"content\" array");
        values = &(*values)["content"];
      }
      if (!values->IsArray()) return InvalidArgument(path, ": data[", idx, "].", in.name, " is not an array");
      int64_t numel = 1;
      for (int64_t dd : in.shape) numel *= dd;
      const int64_t per_batch = in.shape.empty() ? 1 : numel / std::max<int64_t>(1, in.shape[0]);
      const int64_t n = static_cast<int64_t>(values->Size());
      if (n == 0 || numel == 0)
        return InvalidArgument(path, ": data[", idx, "].", in.name, " is empty (", n, " values for shape ",
                               ShapeToString(in.shape), ")");
      if (n != numel && n != per_batch)
        return InvalidArgument(path, ": data[", idx, "].", in.name, " has ", n, " values; the shape needs ", per_batch,
                               " per batch item");
      std::string one;
      if (in.datatype == "BYTES") {
        for (const auto& v : values->GetArray()) {
          if (v.IsObject() && v.HasMember("b64") && v["b64"].IsString()) {
            auto raw = DecodeBase64(std::string_view(v["b64"].GetString(), v["b64"].GetStringLength()));
            if (!raw.ok()) return raw.status().WithContext(StrCat(path, ": data[", idx, "].", in.name));
            AppendBytesElement(*raw, &one);
            continue;
          }
          if (!v.IsString())
            return InvalidArgument(path, ": data[", idx, "].", in.name,
                                   " is a BYTES input: give strings (\"text\") or {\"b64\": \"...\"}");
          AppendBytesElement(std::string(v.GetString(), v.GetStringLength()), &one);
        }
        in.bytes.clear();
        for (int64_t rep = 0; rep < numel / n; ++rep) in.bytes += one;
        continue;
      }
      const size_t esize = client::DatatypeSize(in.datatype);
      for (const auto& v : values->GetArray()) {
        if (!v.IsNumber() && !v.IsBool())
          return InvalidArgument(path, ": data[", idx, "].", in.name, " holds a non-number");
        char buf[8] = {};
        const double x = v.IsBool() ? (v.GetBool() ? 1 : 0) : v.GetDouble();
        if (in.datatype == "FP32") {
          float y = static_cast<float>(x);
          std::memcpy(buf, &y, 4);
        } else if (in.datatype == "FP64")
          std::memcpy(buf, &x, 8);
        else if (in.datatype == "FP16") {
          uint16_t y = Half(static_cast<float>(x)).bits;
          std::memcpy(buf, &y, 2);
        } else if (in.datatype == "BF16") {
          uint16_t y = BFloat16(static_cast<float>(x)).bits;
          std::memcpy(buf, &y, 2);
        } else {
          int64_t y = static_cast<int64_t>(x);
          std::memcpy(buf, &y, esize);
        }
        one.append(buf, esize);
      }
      in.bytes.clear();
      for (int64_t rep = 0; rep < numel / n; ++rep) in.bytes += one;
    }
    sets->push_back(std::move(set));
    ++idx;
  }
  return Status::Ok();
}

}  // namespace sampan::cli
