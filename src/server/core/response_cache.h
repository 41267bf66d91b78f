// The response cache (Triton's `local` cache): one LRU for the whole server, bounded in
// bytes, used by models whose config sets response_cache { enable: true }. The key is the
// model, its version, every input's name, data type, shape and bytes, and the outputs asked
// for; the whole key is kept and compared (a hash collision can never answer with another
// request's outputs). A hit answers without queueing; a miss stores the outputs once the
// model has answered.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "server/core/core.h"

namespace sampan::server {

//! `--cache-config local,size=BYTES` -> BYTES (> 0); errors name what is wrong.
Result<size_t> ParseCacheConfig(const std::string& spec);

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  //! The key of `request` for `version` of `model` (inputs in name order).
  static std::string Key(const std::string& model, const std::string& version, const InferRequest& request);

  //! The outputs stored under `key` (most recently used from now), or nothing.
  std::optional<std::vector<InferTensor>> Lookup(const std::string& key);
  //! Stores deep copies of `outputs` under `key`, evicting the least recently used entries
  //! until it fits; an entry larger than the whole cache is not stored.
  void Insert(const std::string& key, const std::vector<InferTensor>& outputs);

  size_t capacity() const { return capacity_; }
  size_t bytes() const;
  size_t entries() const;

 private:
  struct Entry {
    std::string key;
    std::vector<InferTensor> outputs;
    size_t bytes = 0;
  };
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace sampan::server
