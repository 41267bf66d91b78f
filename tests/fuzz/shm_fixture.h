// One registered system shared-memory region for the request fuzz targets:
// 4 KiB named "r0" (key "/sampan_fuzz_<pid>"), so offsets and sizes that point
// past it are exercised against a real mapping.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "server/core/shared_memory.h"

namespace sampan::fuzz {

inline server::SharedMemoryRegistry* FuzzSharedMemory() {
  static server::SharedMemoryRegistry* registry = [] {
    auto* r = new server::SharedMemoryRegistry();
    static const std::string key = "/sampan_fuzz_" + std::to_string(::getpid());
    const int fd = ::shm_open(key.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0 || ::ftruncate(fd, 4096) != 0) Fail("cannot create the shared-memory object " + key);
    ::close(fd);
    ExpectOk(r->Register("r0", key, 0, 4096), "registering the fuzz region");
    std::atexit([] { ::shm_unlink(key.c_str()); });
    return r;
  }();
  return registry;
}

}  // namespace sampan::fuzz
