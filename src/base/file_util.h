// Whole-file reads and crash-safe writes, for the small files the tools and the server keep
// (plan caches and their keys, reports, canary decisions).
#pragma once

#include <string>

#include "base/status.h"

namespace sampan {

//! The file's bytes; kNotFound when it does not exist, kIoError when it cannot be read.
Result<std::string> ReadFileBytes(const std::string& path);

//! Writes through a temporary file beside `path` (unique to this process and call) and a
//! rename, so readers see the old file or the new one, never half of one.
Status WriteFileAtomic(const std::string& path, const std::string& bytes);

//! Creates `path` with `bytes` only when it does not exist yet (the file is complete before it
//! appears); kFailedPrecondition when the file exists (another writer was first).
Status WriteFileOnce(const std::string& path, const std::string& bytes);

}  // namespace sampan
