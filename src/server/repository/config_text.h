// config.pbtxt text into a ModelConfig message: protobuf's text-format parser with each
// field's position recorded, and its error messages rewritten into ours (config_text.cpp):
//   config.pbtxt:7:3: unknown field 'max_batchsize' in ModelConfig (did you mean 'max_batch_size'?)
#pragma once

#include <google/protobuf/text_format.h>

#include <string>

#include "base/status.h"
#include "model_config.pb.h"

namespace sampan::server {

//! Parses `text` (the contents of `file`, used only in messages) into `config`, writing where
//! each field was to `tree`. Syntax only: no defaults, no checks. A text that does not parse
//! gives InvalidArgument "FILE:LINE:COL: what" for its first error (an unknown field or enum
//! value at the word itself, with the closest name), counting the others.
Status ParseConfigText(const std::string& text, const std::string& file, serverconfig::ModelConfig* config,
                       ::google::protobuf::TextFormat::ParseInfoTree* tree);

}  // namespace sampan::server
