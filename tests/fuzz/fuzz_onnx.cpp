// An ONNX model as `sampan build` and the server's repository read it:
// ImportModelBytes (external data resolved in a scratch directory holding one
// 4 KiB file, weights.bin), and for a model it imports, ir::Verify must hold and
// the optimizer plus the reference backend's lowering must either build a plan
// that serializes and parses back, or say why not.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "builder/builder.h"
#include "fuzz_util.h"
#include "onnx/importer.h"
#include "onnx/onnx_pb.h"
#include "plan/plan.h"
#include "proto_mutator.h"

using namespace sampan;

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return fuzz::MutateSerialized<onnx::ModelProto>(data, size, max_size, seed);
}

namespace {
const std::string& ScratchDir() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors would.
  static const std::string* dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("sampan_fuzz_onnx_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::ofstream(d / "weights.bin", std::ios::binary) << std::string(4096, '\x3f');
    auto* s = new std::string(d.string());
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*dir, ec);
    });
    return s;
  }();
  return *dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto graph = onnx_import::ImportModelBytes(bytes, ScratchDir());
  if (!graph.ok()) {
    fuzz::ExpectExplained(graph.status(), "ImportModelBytes");
    return 0;
  }
  fuzz::Reached("imported");
  fuzz::ExpectOk(ir::Verify(**graph), "ir::Verify(imported graph)");
  builder::BuildConfig config;
  config.backend = "reference";
  builder::BuildReport report;
  auto plan = builder::Build(std::move(*graph), config, &report);
  if (!plan.ok()) {
    fuzz::ExpectExplained(plan.status(), "Build");
    return 0;
  }
  fuzz::Reached("built");
  auto bytes_out = plan::SerializePlan(*plan);
  fuzz::ExpectOk(bytes_out.status(), "SerializePlan(built plan)");
  auto parsed = plan::ParsePlan(std::make_shared<const std::string>(std::move(*bytes_out)), "fuzz plan");
  fuzz::ExpectOk(parsed.status(), "ParsePlan(SerializePlan(built plan))");
  return 0;
}
