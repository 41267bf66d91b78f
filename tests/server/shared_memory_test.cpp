// SharedMemoryRegistry against real POSIX shared memory: ranges, and an object
// the client shrinks after registering (an access past its end would be a
// SIGBUS in the server: refused with an error instead).
#include "server/core/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace sampan::server {
namespace {

class ShmObject {
 public:
  explicit ShmObject(size_t size) : key_("/sampan_shm_test_" + std::to_string(::getpid())) {
    fd_ = ::shm_open(key_.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(::ftruncate(fd_, static_cast<off_t>(size)), 0);
  }
  ~ShmObject() {
    ::close(fd_);
    ::shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  void Resize(size_t size) { ASSERT_EQ(::ftruncate(fd_, static_cast<off_t>(size)), 0); }

 private:
  std::string key_;
  int fd_ = -1;
};

TEST(SharedMemoryRegistry, ViewsStayInsideTheRegion) {
  ShmObject obj(8192);
  SharedMemoryRegistry reg;
  ASSERT_TRUE(reg.Register("r", obj.key(), 4096 + 16, 1024).ok());
  auto v = reg.View("r", 8, 64);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  std::memset(v->data, 7, v->size);  // mapped and writable
  auto past = reg.View("r", 1000, 64);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("beyond its 1024 bytes"), std::string::npos) << past.status().ToString();
  auto wraps = reg.View("r", ~uint64_t{0} - 4, 16);
  EXPECT_FALSE(wraps.ok());
  EXPECT_FALSE(reg.Register("r", obj.key(), 0, 16).ok()) << "already registered";
  EXPECT_FALSE(reg.Register("s", obj.key(), 8000, 1024).ok()) << "past the object's end";
  EXPECT_FALSE(reg.Register("t", "/sampan_no_such_object", 0, 16).ok());
}

TEST(SharedMemoryRegistry, AnObjectShrunkAfterRegisteringIsRefusedNotAccessed) {
  ShmObject obj(8192);
  SharedMemoryRegistry reg;
  ASSERT_TRUE(reg.Register("r", obj.key(), 4096, 4096).ok());
  obj.Resize(4096 + 100);  // the client truncates its object under the server's mapping
  auto inside = reg.View("r", 0, 64);
  EXPECT_TRUE(inside.ok()) << inside.status().ToString();
  auto beyond = reg.View("r", 0, 1024);
  ASSERT_FALSE(beyond.ok()) << "reading it would be a SIGBUS";
  EXPECT_NE(beyond.status().message().find("is now 4196 bytes"), std::string::npos) << beyond.status().ToString();
  obj.Resize(8192);
  EXPECT_TRUE(reg.View("r", 0, 1024).ok()) << "grown back: usable again";
}

}  // namespace
}  // namespace sampan::server
