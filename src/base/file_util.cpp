#include "base/file_util.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sampan {

namespace fs = std::filesystem;

Result<std::string> ReadFileBytes(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFound("'", path, "' does not exist");
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot read '", path, "'");
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) return IoError("error reading '", path, "'");
  return os.str();
}

namespace {

// A temporary name beside `path` that no other process or call uses.
std::string TempName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return StrCat(path, ".tmp.", ::getpid(), ".", counter++);
}

Status WriteTemp(const std::string& tmp, const std::string& bytes) {
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return IoError("cannot write '", tmp, "'");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return IoError("error writing '", tmp, "'");
  }
  return Status::Ok();
}

}  // namespace

Status WriteFileAtomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = TempName(path);
  SP_RETURN_IF_ERROR(WriteTemp(tmp, bytes));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return IoError("cannot rename '", tmp, "' to '", path, "': ", ec.message());
  }
  return Status::Ok();
}

Status WriteFileOnce(const std::string& path, const std::string& bytes) {
  const std::string tmp = TempName(path);
  SP_RETURN_IF_ERROR(WriteTemp(tmp, bytes));
  // link() fails with EEXIST when the name is taken: the first writer wins, whole.
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  std::error_code ignored;
  fs::remove(tmp, ignored);
  if (rc == 0) return Status::Ok();
  if (err == EEXIST) return FailedPrecondition("'", path, "' exists already");
  return IoError("cannot create '", path, "': ", std::strerror(err));
}

}  // namespace sampan
