#include "server/core/response_cache.h"

#include <algorithm>
#include <cstring>

namespace sampan::server {

namespace {

void Append(std::string* out, const void* p, size_t n) {
  out->append(static_cast<const char*>(p), n);
}
void AppendU64(std::string* out, uint64_t v) {
  Append(out, &v, sizeof(v));
}
void AppendText(std::string* out, const std::string& s) {
  AppendU64(out, s.size());
  out->append(s);
}

size_t TensorBytes(const Tensor& t) {
  if (t.dtype() != DType::kString) return t.nbytes();
  size_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += t.strings()[i].size() + sizeof(std::string);
  return n;
}

}  // namespace

Result<size_t> ParseCacheConfig(const std::string& spec) {
  const auto comma = spec.find(',');
  const std::string kind = spec.substr(0, comma);
  if (kind != "local")
    return InvalidArgument("--cache-config '", spec, "': the cache type '", kind,
                           "' is not supported (only the in-process cache: local,size=BYTES)");
  const std::string rest = comma == std::string::npos ? "" : spec.substr(comma + 1);
  if (rest.rfind("size=", 0) != 0 || rest.find(',') != std::string::npos)
    return InvalidArgument("--cache-config '", spec, "': expected local,size=BYTES");
  const std::string num = rest.substr(5);
  char* end = nullptr;
  const unsigned long long v = std::strtoull(num.c_str(), &end, 10);
  if (num.empty() || *end != '\0' || num[0] == '-' || v == 0)
    return InvalidArgument("--cache-config '", spec, "': size must be a whole number of bytes > 0");
  return static_cast<size_t>(v);
}

std::string ResponseCache::Key(const std::string& model, const std::string& version, const InferRequest& request) {
  std::string key;
  AppendText(&key, model);
  AppendText(&key, version);
  std::vector<const InferTensor*> inputs;
  for (const auto& in : request.inputs) inputs.push_back(&in);
  std::sort(inputs.begin(), inputs.end(), [](const InferTensor* a, const InferTensor* b) { return a->name < b->name; });
  AppendU64(&key, inputs.size());
  for (const InferTensor* in : inputs) {
    AppendText(&key, in->name);
    AppendU64(&key, static_cast<uint64_t>(in->dtype));
    AppendU64(&key, in->shape.size());
    for (int64_t d : in->shape) AppendU64(&key, static_cast<uint64_t>(d));
    if (in->data.dtype() == DType::kString) {
      for (int64_t i = 0; i < in->data.numel(); ++i) AppendText(&key, in->data.strings()[i]);
    } else if (in->data.defined()) {
      AppendU64(&key, in->data.nbytes());
      Append(&key, in->data.raw(), in->data.nbytes());
    }
  }
  AppendU64(&key, request.outputs.size());
  for (const auto& o : request.outputs) AppendText(&key, o);
  return key;
}

std::optional<std::vector<InferTensor>> ResponseCache::Lookup(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->outputs;  // tensors are immutable once stored: shared, not copied
}

void ResponseCache::Insert(const std::string& key, const std::vector<InferTensor>& outputs) {
  Entry e;
  e.key = key;
  e.bytes = key.size() + sizeof(Entry);
  for (const InferTensor& o : outputs) {
    InferTensor c{o.name, o.dtype, o.shape, o.data.defined() ? o.data.Clone() : Tensor()};
    e.bytes += TensorBytes(c.data) + o.name.size() + sizeof(InferTensor);
    e.outputs.push_back(std::move(c));
  }
  if (e.bytes > capacity_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key)) return;  // another request stored it first
  while (bytes_ + e.bytes > capacity_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  bytes_ += e.bytes;
  lru_.push_front(std::move(e));
  index_[lru_.front().key] = lru_.begin();
}

size_t ResponseCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ResponseCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace sampan::server
