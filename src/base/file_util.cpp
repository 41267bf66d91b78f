#include "base/file_util.h"

#include <fcntl.h>
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

// The bytes on disk (fsync) before the rename or link makes them visible: after a crash the
// name holds the old file or the whole new one, never an empty one.
Status WriteTemp(const std::string& tmp, const std::string& bytes) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot write '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool ok = done == bytes.size() && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return IoError("error writing '", tmp, "': ", std::strerror(err));
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
