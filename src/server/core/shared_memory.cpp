#include "server/core/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "server/core/cuda_ipc.h"

namespace sampan::server {

struct SharedMemoryRegistry::Mapping {
  void* addr = nullptr;
  size_t length = 0;
  int fd = -1;  //!< kept open: View checks the object was not shrunk under the mapping
  ~Mapping() {
    if (addr) munmap(addr, length);
    if (fd >= 0) close(fd);
  }
};

Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key, uint64_t offset,
                                      uint64_t byte_size) {
  if (name.empty()) return InvalidArgument("shared-memory region name is empty");
  if (key.empty()) return InvalidArgument("shared-memory region '", name, "': key is empty");
  if (byte_size == 0) return InvalidArgument("shared-memory region '", name, "': byte_size must be > 0");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (regions_.count(name)) return AlreadyRegistered(name);
  }
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0)
    return InvalidArgument("shared-memory region '", name, "': unable to open shared memory key '", key,
                           "': ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return IoError("shared-memory region '", name, "': fstat of '", key, "': ", std::strerror(e));
  }
  if (offset + byte_size < offset || offset + byte_size > static_cast<uint64_t>(st.st_size)) {
    close(fd);
    return InvalidArgument("shared-memory region '", name, "': offset ", offset, " + byte_size ", byte_size,
                           " is beyond the ", st.st_size, " bytes of '", key, "'");
  }
  // mmap offsets must be page aligned: map from the page holding `offset`.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  auto m = std::make_shared<Mapping>();
  m->length = static_cast<size_t>(offset + byte_size - start);
  void* addr = mmap(nullptr, m->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  const int e = errno;
  if (addr == MAP_FAILED) {
    close(fd);
    return IoError("shared-memory region '", name, "': cannot map '", key, "': ", std::strerror(e));
  }
  m->addr = addr;
  m->fd = fd;
  Region r;
  r.info.name = name;
  r.info.key = key;
  r.info.offset = offset;
  r.info.byte_size = byte_size;
  r.mapping = std::move(m);
  r.base = static_cast<char*>(addr) + (offset - start);
  std::lock_guard<std::mutex> lock(mu_);
  if (regions_.count(name)) return AlreadyRegistered(name);  // lost a race with another register
  regions_.emplace(name, std::move(r));
  return Status::Ok();
}

Status SharedMemoryRegistry::AlreadyRegistered(const std::string& name) {
  return InvalidArgument("shared-memory region '", name, "' is already registered (unregister it first)");
}

bool SharedMemoryRegistry::CudaBuilt() {
  return cuda_ipc::Built();
}

Status SharedMemoryRegistry::RegisterCuda(const std::string& name, std::string_view raw_handle, int64_t device_id,
                                          uint64_t byte_size) {
  if (name.empty()) return InvalidArgument("CUDA shared-memory region name is empty");
  const std::string what = "failed to register CUDA shared memory region '" + name + "'";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (regions_.count(name)) return AlreadyRegistered(name);
  }
  if (raw_handle.size() != cuda_ipc::kHandleSize)
    return InvalidArgument(what, ": 'raw_handle' must be a cudaIpcMemHandle_t of ", cuda_ipc::kHandleSize,
                           " bytes, got ", raw_handle.size());
  if (byte_size == 0) return InvalidArgument(what, ": byte_size must be > 0");
  if (device_id < 0) return InvalidArgument(what, ": device_id must be >= 0, got ", device_id);
  if (!cuda_ipc::Built()) return cuda_ipc::NotBuilt().WithContext(what);
  if (device_id > std::numeric_limits<int>::max())
    return InvalidArgument(what, ": CUDA device ", device_id, " does not exist");
  // Opened outside the lock: CUDA may take a while (the device's context is made on first use).
  Result<std::shared_ptr<cuda_ipc::Mapping>> m =
      cuda_ipc::Mapping::Open(raw_handle, static_cast<int>(device_id), byte_size);
  if (!m.ok()) return m.status().WithContext(what);
  Region r;
  r.info.name = name;
  r.info.kind = SharedMemoryKind::kCuda;
  r.info.byte_size = byte_size;
  r.info.device_id = device_id;
  r.base = (*m)->data();
  r.cuda = std::move(m).value();
  std::lock_guard<std::mutex> lock(mu_);
  if (regions_.count(name)) return AlreadyRegistered(name);  // lost a race; the handle closes with `r`
  regions_.emplace(name, std::move(r));
  return Status::Ok();
}

Status SharedMemoryRegistry::Unregister(const std::string& name, SharedMemoryKind kind) {
  std::vector<Region> released;  // closed after the lock: a CUDA handle's close may take a while
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if ((name.empty() || it->first == name) && it->second.info.kind == kind) {
        released.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<SharedMemoryRegionInfo>> SharedMemoryRegistry::Regions(const std::string& name,
                                                                          SharedMemoryKind kind) const {
  const bool cuda = kind == SharedMemoryKind::kCuda;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SharedMemoryRegionInfo> out;
  if (!name.empty()) {
    auto it = regions_.find(name);
    if (it == regions_.end())
      return NotFound("Unable to find ", cuda ? "cuda" : "system", " shared memory region: '", name, "'");
    if (it->second.info.kind != kind)
      return NotFound("The region named '", name, "' is registered as ", cuda ? "system" : "CUDA",
                      " shared memory, not ", cuda ? "CUDA" : "system", " shared memory");
    out.push_back(it->second.info);
    return out;
  }
  for (const auto& [n, r] : regions_)
    if (r.info.kind == kind) out.push_back(r.info);
  return out;
}

Result<SharedMemoryView> SharedMemoryRegistry::View(const std::string& name, uint64_t offset, uint64_t size) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) return InvalidArgument("Unable to find shared memory region: '", name, "'");
  const Region& r = it->second;
  if (offset + size < offset || offset + size > r.info.byte_size)
    return InvalidArgument("shared-memory region '", name, "': offset ", offset, " + byte size ", size,
                           " is beyond its ", r.info.byte_size, " bytes");
  if (r.info.kind == SharedMemoryKind::kCuda)
    return SharedMemoryView{r.base + offset, size, static_cast<int>(r.info.device_id), r.cuda};
  // The object belongs to the client: one truncated after registering would make
  // every access past its new end a SIGBUS in the server.
  struct stat st {};
  if (fstat(r.mapping->fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < r.info.offset + offset + size)
    return InvalidArgument("shared-memory region '", name, "': the shared-memory object '", r.info.key, "' is now ",
                           st.st_size, " bytes, shorter than the region registered (", r.info.offset + r.info.byte_size,
                           "); register it again");
  return SharedMemoryView{r.base + offset, size, -1, r.mapping};
}

Status CopyFromView(const SharedMemoryView& view, void* dst, size_t n) {
  if (n > view.size) return Internal("CopyFromView: ", n, " bytes from a view of ", view.size);
  if (view.device >= 0) return cuda_ipc::CopyToHost(view.device, dst, view.data, n);
  if (n > 0) std::memcpy(dst, view.data, n);
  return Status::Ok();
}

Status CopyToView(const SharedMemoryView& view, const void* src, size_t n) {
  if (n > view.size) return Internal("CopyToView: ", n, " bytes into a view of ", view.size);
  if (view.device >= 0) return cuda_ipc::CopyToDevice(view.device, view.data, src, n);
  if (n > 0) std::memcpy(view.data, src, n);
  return Status::Ok();
}

}  // namespace sampan::server
