// SharedMemoryRegistry against real POSIX shared memory: ranges, and an object
// the client shrinks after registering (an access past its end would be a
// SIGBUS in the server: refused with an error instead). CUDA regions on any
// machine: what registration refuses before CUDA is asked, what a build
// without CUDA or a machine without a GPU answers, and the one namespace of
// names both kinds share (real device memory: cuda_shared_memory_test.cpp).
#include "server/core/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <string>
#include <vector>

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

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(SharedMemoryRegistry, CudaRegistrationIsCheckedBeforeCudaIsAsked) {
  SharedMemoryRegistry reg;
  const std::string handle(64, '\x5a');  // well formed; no process exported it
  const std::string prefix = "failed to register CUDA shared memory region 'g': ";
  Status s = reg.RegisterCuda("", handle, 0, 64);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "region name is empty")) << s.ToString();
  s = reg.RegisterCuda("g", handle.substr(0, 63), 0, 64);
  EXPECT_EQ(s.message(), prefix + "'raw_handle' must be a cudaIpcMemHandle_t of 64 bytes, got 63");
  s = reg.RegisterCuda("g", handle + "x", 0, 64);
  EXPECT_EQ(s.message(), prefix + "'raw_handle' must be a cudaIpcMemHandle_t of 64 bytes, got 65");
  s = reg.RegisterCuda("g", handle, 0, 0);
  EXPECT_EQ(s.message(), prefix + "byte_size must be > 0");
  s = reg.RegisterCuda("g", handle, -1, 64);
  EXPECT_EQ(s.message(), prefix + "device_id must be >= 0, got -1");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);

  s = reg.RegisterCuda("g", handle, 0, 64);
  ASSERT_FALSE(s.ok()) << "64 bytes no process exported must not open";
  if (!SharedMemoryRegistry::CudaBuilt()) {
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_EQ(s.message(), prefix + "CUDA shared memory is not supported: this server was built without CUDA");
  } else {
    // No GPU: "CUDA device 0 is not available: <CUDA's reason>"; a GPU: CUDA refuses the handle.
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s, prefix + "CUDA device 0 is not available: cuda") ||
                Contains(s, prefix + "cannot open the CUDA IPC handle on CUDA device 0: cuda"))
        << s.ToString();
    s = reg.RegisterCuda("g", handle, int64_t{INT_MAX} + 1, 64);
    EXPECT_EQ(s.message(), prefix + "CUDA device 2147483648 does not exist");
  }
  auto listed = reg.Regions("", SharedMemoryKind::kCuda);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

TEST(SharedMemoryRegistry, BothKindsShareNamesAndListApart) {
  ShmObject obj(4096);
  SharedMemoryRegistry reg;
  ASSERT_TRUE(reg.Register("r", obj.key(), 0, 64).ok());
  Status s = reg.RegisterCuda("r", std::string(64, '\0'), 0, 64);
  EXPECT_TRUE(Contains(s, "'r' is already registered")) << s.ToString();
  auto cuda = reg.Regions("", SharedMemoryKind::kCuda);
  ASSERT_TRUE(cuda.ok());
  EXPECT_TRUE(cuda->empty());
  auto one = reg.Regions("r", SharedMemoryKind::kCuda);
  EXPECT_EQ(one.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(one.status().message(),
            "The region named 'r' is registered as system shared memory, not CUDA shared memory");
  EXPECT_EQ(reg.Regions("q", SharedMemoryKind::kCuda).status().message(),
            "Unable to find cuda shared memory region: 'q'");
  EXPECT_EQ(reg.Regions("q", SharedMemoryKind::kSystem).status().message(),
            "Unable to find system shared memory region: 'q'");
  // Unregistering the other kind, by name or all, leaves the region.
  EXPECT_TRUE(reg.Unregister("r", SharedMemoryKind::kCuda).ok());
  EXPECT_TRUE(reg.Unregister("", SharedMemoryKind::kCuda).ok());
  auto sys = reg.Regions("", SharedMemoryKind::kSystem);
  ASSERT_TRUE(sys.ok());
  ASSERT_EQ(sys->size(), 1u);
  EXPECT_EQ((*sys)[0].kind, SharedMemoryKind::kSystem);
  EXPECT_EQ((*sys)[0].device_id, -1);
  auto v = reg.View("r", 0, 64);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->device, -1);
  EXPECT_EQ(reg.View("nope", 0, 4).status().message(), "Unable to find shared memory region: 'nope'");
  EXPECT_TRUE(reg.Unregister("r", SharedMemoryKind::kSystem).ok());
  EXPECT_FALSE(reg.View("r", 0, 4).ok());
}

TEST(SharedMemoryRegistry, CopiesThroughASystemViewStayInsideIt) {
  ShmObject obj(4096);
  SharedMemoryRegistry reg;
  ASSERT_TRUE(reg.Register("r", obj.key(), 0, 64).ok());
  SharedMemoryView v = reg.View("r", 16, 8).value();
  const char in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(CopyToView(v, in, sizeof in).ok());
  char out[8] = {};
  ASSERT_TRUE(CopyFromView(reg.View("r", 16, 8).value(), out, sizeof out).ok());
  EXPECT_EQ(std::memcmp(in, out, sizeof in), 0);
  char big[9] = {};
  EXPECT_EQ(CopyToView(v, big, sizeof big).code(), StatusCode::kInternal);
  EXPECT_EQ(CopyFromView(v, big, sizeof big).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace sampan::server
