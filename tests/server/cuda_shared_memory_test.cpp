// CUDA shared memory on a GPU: a device allocation made and exported by another process (this
// test binary started again as the "exporter": SAMPAN_CUDA_SHM_EXPORTER=1 makes it export, serve
// and exit before main), registered by its IPC handle, read and written through the registry's
// views and through the gRPC front end's conversions, the bytes checked on the exporter's side.
// Skips where the build has no CUDA or the machine no GPU (bench/gpu_peers/check_on_gpu.sh runs it).
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "server/core/shared_memory.h"
#include "server/grpc/grpc_convert.h"

extern char** environ;

namespace sampan::server {
namespace {

constexpr size_t kBytes = 4096;      // the exporter's allocation: float i at element i
constexpr size_t kOutOffset = 1024;  // where outputs go
constexpr const char* kExporterEnv = "SAMPAN_CUDA_SHM_EXPORTER";

int Fail(cudaError_t e) {
  std::printf("error: %s\n", cudaGetErrorString(e));
  std::fflush(stdout);  // the exporter leaves with _Exit, which flushes nothing
  return 1;
}

// The exporter: prints the handle (128 hex digits), waits for a line on stdin, prints the 16
// floats at kOutOffset, frees the allocation. Errors print "error: ...".
int RunExporter() {
  void* p = nullptr;
  cudaIpcMemHandle_t h;
  std::vector<float> host(kBytes / sizeof(float));
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  cudaError_t e = cudaMalloc(&p, kBytes);
  if (e == cudaSuccess) e = cudaMemcpy(p, host.data(), kBytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaIpcGetMemHandle(&h, p);
  if (e != cudaSuccess) return Fail(e);
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&h);
  for (size_t i = 0; i < sizeof h; ++i) std::printf("%02x", b[i]);
  std::printf("\n");
  std::fflush(stdout);
  char line[64];
  if (std::fgets(line, sizeof line, stdin) == nullptr) return 1;
  e = cudaMemcpy(host.data(), p, kBytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return Fail(e);
  for (size_t i = 0; i < 16; ++i) std::printf("%g ", host[kOutOffset / sizeof(float) + i]);
  std::printf("\n");
  std::fflush(stdout);
  cudaFree(p);
  return 0;
}

// Before main: the exporter never runs the tests.
[[maybe_unused]] const bool kExporterRan = [] {
  if (std::getenv(kExporterEnv) == nullptr) return false;
  std::_Exit(RunExporter());
}();

class Exporter {
 public:
  bool Start() {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<std::string> env_strings = {std::string(kExporterEnv) + "=1"};
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
    std::vector<char*> env;
    for (auto& s : env_strings) env.push_back(s.data());
    env.push_back(nullptr);
    char exe[] = "/proc/self/exe";
    char* argv[] = {exe, nullptr};
    const int rc = posix_spawn(&pid_, exe, &fa, nullptr, argv, env.data());
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
    return rc == 0 && to_ && from_;
  }
  std::string ReadLine() {
    char buf[1024];
    return std::fgets(buf, sizeof buf, from_) ? std::string(buf) : std::string();
  }
  void WriteLine(const char* s) {
    std::fputs(s, to_);
    std::fflush(to_);
  }
  ~Exporter() {
    if (to_) std::fclose(to_);
    if (from_) std::fclose(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size() && std::isxdigit(static_cast<unsigned char>(hex[i])); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(CudaSharedMemory, ExportedDeviceMemoryThroughRegistryAndGrpcConversions) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "needs a GPU";
  }
  Exporter exporter;
  ASSERT_TRUE(exporter.Start());
  const std::string line = exporter.ReadLine();
  // Exporting is the client's side: a machine whose CUDA cannot (a sandbox without IPC) skips.
  if (line.rfind("error", 0) == 0) GTEST_SKIP() << "the exporter process could not export device memory: " << line;
  const std::string handle = FromHex(line);
  ASSERT_EQ(handle.size(), 64u) << line;

  SharedMemoryRegistry reg;
  ASSERT_TRUE(reg.RegisterCuda("g", handle, 0, kBytes).ok());
  auto listed = reg.Regions("", SharedMemoryKind::kCuda).value();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].device_id, 0);
  EXPECT_EQ(listed[0].byte_size, kBytes);
  // Beyond the allocation: refused at registration.
  Status big = reg.RegisterCuda("huge", handle, 0, uint64_t{1} << 40);
  EXPECT_NE(big.message().find("bytes of the device allocation the handle names"), std::string::npos) << big.ToString();
  // The same handle under a second name, then unregistered: the first still works.
  ASSERT_TRUE(reg.RegisterCuda("g2", handle, 0, 64).ok());
  ASSERT_TRUE(reg.Unregister("g2", SharedMemoryKind::kCuda).ok());

  // Reads: the exporter's pattern, through the device.
  SharedMemoryView v = reg.View("g", 16, 64).value();
  EXPECT_EQ(v.device, 0);
  float got[16];
  ASSERT_TRUE(CopyFromView(v, got, sizeof got).ok());
  EXPECT_EQ(got[0], 4.0f);
  EXPECT_EQ(got[15], 19.0f);

  // A view outlives an unregister: the handle stays open until the view goes.
  SharedMemoryView out = reg.View("g", kOutOffset, 64).value();
  ASSERT_TRUE(reg.Unregister("", SharedMemoryKind::kCuda).ok());
  EXPECT_TRUE(reg.Regions("", SharedMemoryKind::kCuda).value().empty());
  const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  ASSERT_TRUE(CopyToView(out, ones, sizeof ones).ok());
  out = SharedMemoryView();
  v = SharedMemoryView();

  // The gRPC front end's conversions: input x from offset 0, output y to kOutOffset.
  ASSERT_TRUE(reg.RegisterCuda("g", handle, 0, kBytes).ok());
  {
    auto msg = std::make_shared<inference::ModelInferRequest>();
    msg->set_model_name("m");
    auto* in = msg->add_inputs();
    in->set_name("x");
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(16);
    (*in->mutable_parameters())["shared_memory_region"].set_string_param("g");
    (*in->mutable_parameters())["shared_memory_byte_size"].set_int64_param(64);
    auto* o = msg->add_outputs();
    o->set_name("y");
    (*o->mutable_parameters())["shared_memory_region"].set_string_param("g");
    (*o->mutable_parameters())["shared_memory_byte_size"].set_int64_param(64);
    (*o->mutable_parameters())["shared_memory_offset"].set_int64_param(kOutOffset);
    std::vector<SharedMemoryOutput> shm_outputs;
    Result<InferRequest> r = InferRequestFromProto(msg, &reg, &shm_outputs);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->inputs[0].data.data<float>()[7], 7.0f);
    ASSERT_EQ(shm_outputs.size(), 1u);
    InferResponse resp;
    resp.model_name = "m";
    std::vector<float> y(16);
    for (size_t i = 0; i < y.size(); ++i) y[i] = 200.0f + static_cast<float>(i);
    resp.outputs.push_back({"y", DType::kFloat32, {1, 16}, Tensor::FromVector<float>(DType::kFloat32, y, {1, 16})});
    int before = -1, after = -2;
    ASSERT_EQ(cudaGetDevice(&before), cudaSuccess);
    inference::ModelInferResponse proto;
    Status s = InferResponseToProto(resp, &proto, shm_outputs);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(cudaGetDevice(&after), cudaSuccess);
    EXPECT_EQ(before, after) << "the thread's device is restored";
    EXPECT_EQ(proto.outputs(0).parameters().at("shared_memory_region").string_param(), "g");
  }  // the request and its output views go: with the unregister below, the handle closes
  ASSERT_TRUE(reg.Unregister("g", SharedMemoryKind::kCuda).ok());

  // What the exporter sees in its own allocation.
  exporter.WriteLine("done\n");
  std::istringstream values(exporter.ReadLine());
  for (int i = 0; i < 16; ++i) {
    float f = -1;
    values >> f;
    EXPECT_EQ(f, 200.0f + static_cast<float>(i)) << "element " << i;
  }
}

}  // namespace
}  // namespace sampan::server

#endif  // SAMPAN_HAVE_CUDA
