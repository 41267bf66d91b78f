// config.pbtxt as text: protobuf's text-format parser, its errors rewritten into ours
// ("unknown field 'X' in ModelConfig (did you mean 'Y'?)", unknown enum values with their
// NumPy/ONNX spellings mapped) and placed at the word at fault, not the token after it.
#include "server/repository/config_text.h"

#include <google/protobuf/io/tokenizer.h>

#include <algorithm>
#include <vector>

#include "server/repository/config_check.h"

namespace sampan::server {

namespace pb = ::google::protobuf;
namespace sc = ::sampan::serverconfig;

namespace {

using Loc = ConfigLoc;

// Edit distance counting a swap of neighbours as one edit (FP23 -> FP32).
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The closest of `names` to `word`, or "" when none is close.
std::string Closest(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  if (word.size() > 64) return best;  // no field is that long; keep garbage cheap
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& n : names) {
    size_t d = EditDistance(word, n);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

const pb::Descriptor* FindMessage(const std::string& full_name) {
  return pb::DescriptorPool::generated_pool()->FindMessageTypeByName(full_name);
}

// The strings between double quotes in `message`, in order.
std::vector<std::string> QuotedParts(const std::string& message) {
  std::vector<std::string> parts;
  for (size_t open = message.find('"'); open != std::string::npos;) {
    size_t close = message.find('"', open + 1);
    if (close == std::string::npos) break;
    parts.push_back(message.substr(open + 1, close - open - 1));
    open = message.find('"', close + 1);
  }
  return parts;
}

// Error text may echo a token of any size; keep messages readable.
std::string Clip(const std::string& s, size_t max = 80) {
  return s.size() <= max ? s : s.substr(0, max - 3) + "...";
}

bool StartsWith(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// The word protobuf's message is about, when it is an unknown field name or
// enum value ("" otherwise).
std::string WordOf(const std::string& message) {
  auto parts = QuotedParts(message);
  if (StartsWith(message, "Message type \"") && message.find("has no field named") != std::string::npos &&
      parts.size() >= 2)
    return parts[1];
  if (StartsWith(message, "Unknown enumeration value of \"") && parts.size() >= 2) return parts[0];
  return "";
}

// Rewrites protobuf's text-format messages into ours; anything not recognised
// passes through unchanged (clipped).
std::string Explain(const std::string& message) {
  // Only an unsigned field refuses a '-' (a signed one reads it as the sign).
  if (message == "Expected integer, got: -") return "must be a whole number >= 0 (this field cannot be negative)";
  auto parts = QuotedParts(message);
  if (StartsWith(message, "Message type \"") && message.find("has no field named") != std::string::npos &&
      parts.size() >= 2) {
    std::string type = parts[0], field = parts[1];
    std::string out = StrCat("unknown field '", Clip(field), "'");
    std::string short_type = type.substr(type.rfind('.') + 1);
    out += StrCat(" in ", short_type);
    if (const pb::Descriptor* d = FindMessage(type)) {
      std::vector<std::string> names;
      for (int i = 0; i < d->field_count(); ++i) names.push_back(d->field(i)->name());
      std::string near = Closest(field, names);
      if (!near.empty()) out += StrCat(" (did you mean '", near, "'?)");
    }
    return out;
  }
  if (StartsWith(message, "Unknown enumeration value of \"") && parts.size() >= 2) {
    std::string value = parts[0], field = parts[1];
    std::string out = StrCat("unknown value '", Clip(value), "' for field '", field, "'");
    // Field names are unique enough in this schema to find the enum by name.
    const pb::FileDescriptor* file = sc::ModelConfig::descriptor()->file();
    std::vector<std::string> values;
    for (int t = 0; t < file->message_type_count() && values.empty(); ++t) {
      std::vector<const pb::Descriptor*> stack{file->message_type(t)};
      while (!stack.empty() && values.empty()) {
        const pb::Descriptor* d = stack.back();
        stack.pop_back();
        for (int i = 0; i < d->nested_type_count(); ++i) stack.push_back(d->nested_type(i));
        const pb::FieldDescriptor* f = d->FindFieldByName(field);
        if (f && f->enum_type())
          for (int i = 0; i < f->enum_type()->value_count(); ++i) values.push_back(f->enum_type()->value(i)->name());
      }
    }
    if (!values.empty()) {
      // ONNX/NumPy spellings that edit distance alone would map badly.
      static const std::pair<const char*, const char*> kAliases[] = {
          {"TYPE_FLOAT", "TYPE_FP32"},    {"TYPE_FLOAT32", "TYPE_FP32"}, {"TYPE_FLOAT16", "TYPE_FP16"},
          {"TYPE_HALF", "TYPE_FP16"},     {"TYPE_FLOAT64", "TYPE_FP64"}, {"TYPE_DOUBLE", "TYPE_FP64"},
          {"TYPE_BFLOAT16", "TYPE_BF16"}, {"TYPE_INT", "TYPE_INT32"},    {"TYPE_BYTES", "TYPE_STRING"}};
      std::string near;
      for (const auto& [alias, name] : kAliases)
        if (value == alias && std::find(values.begin(), values.end(), name) != values.end()) near = name;
      if (near.empty()) near = Closest(value, values);
      if (!near.empty()) {
        out += StrCat(" (did you mean '", near, "'?)");
      } else {
        out += " (expected one of";
        for (size_t i = 0; i < values.size(); ++i) out += StrCat(i ? ", " : " ", values[i]);
        out += ")";
      }
    }
    return out;
  }
  return Clip(message, 200);
}

// The text-format parser reports an unknown field name or enum value at the
// token after it. Moves `at` back to the start of `word` when `word` ends just
// before `at` on the same line (columns as the tokenizer counts them: 0-based,
// a tab advancing to the next multiple of 8).
Loc StartOfWord(const std::string& text, Loc at, const std::string& word) {
  if (at.line < 0 || word.empty()) return at;
  size_t begin = 0;
  for (int l = 0; l < at.line; ++l) {
    begin = text.find('\n', begin);
    if (begin == std::string::npos) return at;
    ++begin;
  }
  size_t end = text.find('\n', begin);
  std::string line = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  std::vector<int> column(line.size() + 1, 0);  // column of each byte
  for (size_t i = 0; i < line.size(); ++i) column[i + 1] = line[i] == '\t' ? (column[i] / 8 + 1) * 8 : column[i] + 1;
  Loc best = at;
  for (size_t pos = line.find(word); pos != std::string::npos; pos = line.find(word, pos + 1))
    if (column[pos + word.size()] <= at.column) best = Loc{at.line, column[pos]};
  return best;
}

class Collector : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!has_error) {
      has_error = true;
      first = Loc{line, column};
      first_message = message;
    }
    ++count;
  }
  bool has_error = false;
  Loc first;
  std::string first_message;
  int count = 0;
};

}  // namespace

Status ParseConfigText(const std::string& text, const std::string& file, sc::ModelConfig* config,
                       pb::TextFormat::ParseInfoTree* tree) {
  Collector errors;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(tree);
  parser.SetRecursionLimit(32);  // the schema nests 4 deep; garbage may nest far more
  if (!parser.ParseFromString(text, config) || errors.has_error) {
    if (!errors.has_error) return InvalidArgument(file, ": not a valid model configuration");
    Loc at = StartOfWord(text, errors.first, WordOf(errors.first_message));
    std::string where = at.line >= 0 ? StrCat(file, ":", at.line + 1, ":", at.column + 1) : file;
    std::string more = errors.count > 1 ? StrCat(" (and ", errors.count - 1, " more errors)") : "";
    return InvalidArgument(where, ": ", Explain(errors.first_message), more);
  }
  return Status::Ok();
}

}  // namespace sampan::server
