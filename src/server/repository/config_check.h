// What the config validators share: where a value was in config.pbtxt, and
// errors that name the file, line, column and field path
// (config.pbtxt:12:5: input[1].dims[0]: must be >= 1 or -1 (got 0)).
#pragma once

#include <google/protobuf/text_format.h>

#include <initializer_list>
#include <string>

#include "base/status.h"
#include "model_config.pb.h"

namespace sampan::server {

// Where a value was in the text; line < 0 when unknown.
struct ConfigLoc {
  int line = -1;
  int column = -1;
};

class ConfigChecker {
 public:
  using Tree = ::google::protobuf::TextFormat::ParseInfoTree;
  using Descriptor = ::google::protobuf::Descriptor;

  ConfigChecker(const std::string& file, const std::string& model_dir) : file_(file), model_dir_(model_dir) {}

  // The location of `field` (index-th value when repeated) in `tree`, falling
  // back to the field's first value (a list `[a, b]` records one location).
  static ConfigLoc At(const Tree* tree, const Descriptor* d, const char* field, int index = -1);
  // The parse tree of a nested message (null without one).
  static const Tree* Sub(const Tree* tree, const Descriptor* d, const char* field, int index = -1);
  // First known of several locations.
  static ConfigLoc First(std::initializer_list<ConfigLoc> locs) {
    for (const ConfigLoc& l : locs)
      if (l.line >= 0) return l;
    return {};
  }
  // InvalidArgument "FILE:LINE:COL: PATH: WHAT" (without the position when unknown).
  Status Fail(ConfigLoc loc, const std::string& path, const std::string& what) const {
    if (loc.line >= 0) return InvalidArgument(file_, ":", loc.line + 1, ":", loc.column + 1, ": ", path, ": ", what);
    return InvalidArgument(file_, ": ", path, ": ", what);
  }
  const std::string& file() const { return file_; }

 protected:
  std::string file_;
  std::string model_dir_;
};

//! sequence_batching (sequence_config.cpp): controls, states and strategy, each
//! error at its field. Needs no model: AutoCompleteConfig checks the tensors.
Status CheckSequenceBatching(const ConfigChecker& ck, const serverconfig::ModelConfig& c,
                             const ConfigChecker::Tree* root);

//! instance_group.rate_limiter (rate_limiter_config.cpp): names, counts >= 1, no resource
//! listed twice in a group nor global in one group and per device in another.
Status CheckRateLimiter(const ConfigChecker& ck, const serverconfig::ModelConfig& c, const ConfigChecker::Tree* root);

//! sampan (sampan_config.cpp): precision and INT8/FP8 calibration, image inputs, batch buckets,
//! the latency SLO and shape profiles (each against the model's inputs and max_batch_size).
Status CheckSampan(const ConfigChecker& ck, const serverconfig::ModelConfig& c, const ConfigChecker::Tree* root);

}  // namespace sampan::server
