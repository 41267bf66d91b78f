#include "server/http/http_json.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string>

namespace sampan::server::http {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;
namespace pb = google::protobuf;

void Key(Writer& w, std::string_view key) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
}
void Str(Writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

std::string Take(const rapidjson::StringBuffer& buffer) {
  return std::string(buffer.GetString(), buffer.GetSize());
}

void WriteTensorMetadata(Writer& w, const std::vector<TensorMetadata>& tensors) {
  w.StartArray();
  for (const TensorMetadata& t : tensors) {
    w.StartObject();
    Key(w, "name");
    Str(w, t.name);
    Key(w, "datatype");
    Str(w, t.datatype);
    Key(w, "shape");
    w.StartArray();
    for (int64_t d : t.shape) w.Int64(d);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
}

void WriteMessage(Writer& w, const pb::Message& message);

// One value of `field` (element `index` when repeated, else -1).
void WriteValue(Writer& w, const pb::Message& m, const pb::FieldDescriptor* f, int index) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      w.Int(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_INT64:
      w.Int64(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      w.Uint(rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      w.Uint64(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      w.Double(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      w.Double(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      w.Bool(rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      Str(w, (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name());
      break;
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      std::string scratch;
      Str(w, rep ? r->GetRepeatedStringReference(m, f, index, &scratch) : r->GetStringReference(m, f, &scratch));
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      WriteMessage(w, rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
      break;
  }
}

// A map<K, V> field: an object keyed by the key's text (as protobuf's JSON does).
void WriteMap(Writer& w, const pb::Message& m, const pb::FieldDescriptor* f) {
  const pb::Reflection* r = m.GetReflection();
  const pb::FieldDescriptor* key_field = f->message_type()->map_key();
  const pb::FieldDescriptor* value_field = f->message_type()->map_value();
  w.StartObject();
  for (int i = 0; i < r->FieldSize(m, f); ++i) {
    const pb::Message& entry = r->GetRepeatedMessage(m, f, i);
    const pb::Reflection* er = entry.GetReflection();
    std::string key;
    switch (key_field->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_STRING:
        key = er->GetString(entry, key_field);
        break;
      case pb::FieldDescriptor::CPPTYPE_INT32:
        key = std::to_string(er->GetInt32(entry, key_field));
        break;
      case pb::FieldDescriptor::CPPTYPE_INT64:
        key = std::to_string(er->GetInt64(entry, key_field));
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT32:
        key = std::to_string(er->GetUInt32(entry, key_field));
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT64:
        key = std::to_string(er->GetUInt64(entry, key_field));
        break;
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        key = er->GetBool(entry, key_field) ? "true" : "false";
        break;
      default:
        break;  // protobuf allows no other key types
    }
    Key(w, key);
    WriteValue(w, entry, value_field, -1);
  }
  w.EndObject();
}

void WriteMessage(Writer& w, const pb::Message& m) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  w.StartObject();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->is_map()) {
      Key(w, f->name());
      WriteMap(w, m, f);
    } else if (f->is_repeated()) {
      Key(w, f->name());
      w.StartArray();
      for (int j = 0; j < r->FieldSize(m, f); ++j) WriteValue(w, m, f, j);
      w.EndArray();
    } else {
      // Unset messages and unset oneof members are absent, as in Triton's output.
      const bool in_oneof = f->real_containing_oneof() != nullptr;
      if ((f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE || in_oneof) && !r->HasField(m, f)) continue;
      Key(w, f->name());
      WriteValue(w, m, f, -1);
    }
  }
  w.EndObject();
}

void WriteDuration(Writer& w, const char* name, const DurationStat& d) {
  Key(w, name);
  w.StartObject();
  Key(w, "count");
  w.Uint64(d.count);
  Key(w, "ns");
  w.Uint64(d.ns);
  w.EndObject();
}

// The SLO batcher's state (a Sampan extension of the statistics object; clients ignore unknown keys).
void WriteSloStats(Writer& w, const SloStats& o) {
  Key(w, "slo_batcher");
  w.StartObject();
  Key(w, "latency_slo_ms");
  w.Double(o.latency_slo_ms);
  Key(w, "target_batch_size");
  w.Int64(o.target_batch_size);
  Key(w, "max_batch_size");
  w.Int64(o.max_batch_size);
  Key(w, "arrival_per_s");
  w.Double(o.arrival_per_s);
  Key(w, "capacity_per_s");
  w.Double(o.capacity_per_s);
  Key(w, "shed");
  w.Uint64(o.shed);
  Key(w, "late");
  w.Uint64(o.late);
  Key(w, "waits");
  w.Uint64(o.waits);
  Key(w, "buckets");
  w.StartArray();
  for (const auto& b : o.buckets) {
    w.StartObject();
    Key(w, "batch_size");
    w.Int64(b.batch_size);
    Key(w, "mean_us");
    w.Double(b.mean_us);
    Key(w, "stddev_us");
    w.Double(b.stddev_us);
    Key(w, "samples");
    w.Uint64(b.samples);
    Key(w, "executions");
    w.Uint64(b.executions);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

}  // namespace

std::string ErrorJson(std::string_view message) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Key(w, "error");
  Str(w, message);
  w.EndObject();
  return Take(buffer);
}

std::string ServerMetadataJson(const ServerMetadata& metadata) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Key(w, "name");
  Str(w, metadata.name);
  Key(w, "version");
  Str(w, metadata.version);
  Key(w, "extensions");
  w.StartArray();
  for (const std::string& e : metadata.extensions) Str(w, e);
  w.EndArray();
  w.EndObject();
  return Take(buffer);
}

std::string ModelMetadataJson(const ModelMetadata& metadata) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Key(w, "name");
  Str(w, metadata.name);
  Key(w, "versions");
  w.StartArray();
  for (const std::string& v : metadata.versions) Str(w, v);
  w.EndArray();
  Key(w, "platform");
  Str(w, metadata.platform);
  Key(w, "inputs");
  WriteTensorMetadata(w, metadata.inputs);
  Key(w, "outputs");
  WriteTensorMetadata(w, metadata.outputs);
  w.EndObject();
  return Take(buffer);
}

std::string ModelConfigJson(const ModelConfig& config) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  WriteMessage(w, config);
  return Take(buffer);
}

std::string StatisticsJson(const std::vector<ModelStats>& stats) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  Key(w, "model_stats");
  w.StartArray();
  for (const ModelStats& s : stats) {
    w.StartObject();
    Key(w, "name");
    Str(w, s.name);
    Key(w, "version");
    Str(w, s.version);
    Key(w, "last_inference");
    w.Uint64(s.last_inference_ms);
    Key(w, "inference_count");
    w.Uint64(s.inference_count);
    Key(w, "execution_count");
    w.Uint64(s.execution_count);
    Key(w, "inference_stats");
    w.StartObject();
    const InferStats& is = s.inference_stats;
    WriteDuration(w, "success", is.success);
    WriteDuration(w, "fail", is.fail);
    WriteDuration(w, "queue", is.queue);
    WriteDuration(w, "compute_input", is.compute_input);
    WriteDuration(w, "compute_infer", is.compute_infer);
    WriteDuration(w, "compute_output", is.compute_output);
    WriteDuration(w, "cache_hit", is.cache_hit);
    WriteDuration(w, "cache_miss", is.cache_miss);
    w.EndObject();
    // Triton's decoupled-model response statistics, by response index (empty for other models).
    Key(w, "response_stats");
    w.StartObject();
    for (const auto& [index, r] : s.response_stats) {
      Key(w, std::to_string(index).c_str());
      w.StartObject();
      WriteDuration(w, "compute_infer", r.compute_infer);
      WriteDuration(w, "compute_output", r.compute_output);
      WriteDuration(w, "success", r.success);
      WriteDuration(w, "fail", r.fail);
      WriteDuration(w, "empty_response", r.empty_response);
      WriteDuration(w, "cancel", r.cancel);
      w.EndObject();
    }
    w.EndObject();
    Key(w, "batch_stats");
    w.StartArray();
    for (const BatchStat& b : s.batch_stats) {
      w.StartObject();
      Key(w, "batch_size");
      w.Uint64(b.batch_size);
      WriteDuration(w, "compute_input", b.compute_input);
      WriteDuration(w, "compute_infer", b.compute_infer);
      WriteDuration(w, "compute_output", b.compute_output);
      w.EndObject();
    }
    w.EndArray();
    Key(w, "memory_usage");
    w.StartArray();
    for (const MemoryUsage& m : s.memory_usage) {
      w.StartObject();
      Key(w, "type");
      Str(w, m.type);
      Key(w, "id");
      w.Int64(m.id);
      Key(w, "byte_size");
      w.Uint64(m.byte_size);
      w.EndObject();
    }
    w.EndArray();
    if (s.slo) WriteSloStats(w, *s.slo);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Take(buffer);
}

std::string RepositoryIndexJson(const std::vector<RepositoryEntry>& entries) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartArray();
  for (const RepositoryEntry& e : entries) {
    w.StartObject();
    Key(w, "name");
    Str(w, e.name);
    if (!e.version.empty()) {
      Key(w, "version");
      Str(w, e.version);
    }
    if (e.state != ModelState::kUnknown) {
      Key(w, "state");
      Str(w, ModelStateName(e.state));
    }
    if (!e.reason.empty()) {
      Key(w, "reason");
      Str(w, e.reason);
    }
    w.EndObject();
  }
  w.EndArray();
  return Take(buffer);
}

}  // namespace sampan::server::http
