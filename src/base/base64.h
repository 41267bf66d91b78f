// Base64 (RFC 4648), for binary data inside JSON (perf_analyzer's {"b64": ...} input data).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace sampan {

//! Decodes strict base64: a multiple of 4 characters of A-Z a-z 0-9 + /, '=' only as the last one
//! or two. An error names the offending character and its offset.
Result<std::string> DecodeBase64(std::string_view s);

}  // namespace sampan
