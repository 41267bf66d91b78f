// GPUs and MIG devices (server/core/gpu_placement.h): NVML's enumeration read through the fake
// NVML (tests/fixtures/fake_nvml) with a GPU in MIG mode, what CUDA_VISIBLE_DEVICES makes of
// it, and `serve --gpus` entries turned into CUDA_VISIBLE_DEVICES.
#include "server/core/gpu_placement.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace sampan::server {
namespace {

namespace fs = std::filesystem;
using metrics::GpuInfo;

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "in: " << (text)

// Two H100s: GPU 0 whole, GPU 1 in MIG mode with MIG devices in slots 0 and 2 (slot 1 empty).
constexpr char kState[] =
    "gpus 2\n"
    "gpu0.uuid GPU-aaaa1111-0000-0000-0000-000000000000\n"
    "gpu0.name NVIDIA H100 80GB HBM3\n"
    "gpu0.memory_used 0\n"
    "gpu0.memory_total 85520809984\n"
    "gpu1.uuid GPU-bbbb2222-0000-0000-0000-000000000000\n"
    "gpu1.name NVIDIA H100 80GB HBM3\n"
    "gpu1.memory_used 0\n"
    "gpu1.memory_total 85520809984\n"
    "gpu1.mig_mode 1\n"
    "gpu1.mig0.uuid MIG-cccc3333-0000-0000-0000-000000000000\n"
    "gpu1.mig0.name NVIDIA H100 80GB HBM3 MIG 3g.40gb\n"
    "gpu1.mig0.memory_used 0\n"
    "gpu1.mig0.memory_total 42949672960\n"
    "gpu1.mig2.uuid MIG-dddd4444-0000-0000-0000-000000000000\n"
    "gpu1.mig2.name NVIDIA H100 80GB HBM3 MIG 1g.10gb\n"
    "gpu1.mig2.memory_used 0\n"
    "gpu1.mig2.memory_total 10737418240\n";

class GpuPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sampan_gpu_placement_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "state") << kState;
    setenv("SAMPAN_FAKE_NVML_STATE", (dir_ / "state").c_str(), 1);
    auto m = metrics::GpuMonitor::OpenOrError(SAMPAN_FAKE_NVML_PATH);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    gpus_ = m.value()->Inventory();
  }
  void TearDown() override {
    unsetenv("SAMPAN_FAKE_NVML_STATE");
    fs::remove_all(dir_);
  }
  fs::path dir_;
  std::vector<GpuInfo> gpus_;
};

TEST_F(GpuPlacementTest, NvmlEnumeratesGpusAndTheMigDevicesOfThoseInMigMode) {
  ASSERT_EQ(gpus_.size(), 2u);
  EXPECT_EQ(gpus_[0].uuid, "GPU-aaaa1111-0000-0000-0000-000000000000");
  EXPECT_EQ(gpus_[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_FALSE(gpus_[0].mig_enabled);
  EXPECT_TRUE(gpus_[0].mig.empty());
  EXPECT_TRUE(gpus_[1].mig_enabled);
  ASSERT_EQ(gpus_[1].mig.size(), 2u) << "slot 1 is empty";
  EXPECT_EQ(gpus_[1].mig[0].index, 0u);
  EXPECT_EQ(gpus_[1].mig[0].uuid, "MIG-cccc3333-0000-0000-0000-000000000000");
  EXPECT_EQ(gpus_[1].mig[0].memory_total, 40ull << 30);
  EXPECT_EQ(gpus_[1].mig[1].index, 2u);
  EXPECT_EQ(gpus_[1].mig[1].name, "NVIDIA H100 80GB HBM3 MIG 1g.10gb");

  const std::vector<std::string> lines = GpuInventoryLines(gpus_);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "GPU 0 (NVIDIA H100 80GB HBM3, 79.6 GiB): GPU-aaaa1111-0000-0000-0000-000000000000");
  EXPECT_EQ(lines[1],
            "GPU 1 (NVIDIA H100 80GB HBM3, 79.6 GiB): GPU-bbbb2222-0000-0000-0000-000000000000, MIG mode, 2 MIG "
            "device(s)");
  EXPECT_EQ(lines[3],
            "  MIG device 2 of GPU 1 (NVIDIA H100 80GB HBM3 MIG 1g.10gb, 10.0 GiB): "
            "MIG-dddd4444-0000-0000-0000-000000000000");
}

TEST_F(GpuPlacementTest, WithoutCudaVisibleDevicesEveryWholeGpuAndANoteForMigMode) {
  GpuPlacement p = ResolveVisibleGpus(gpus_, std::nullopt);
  ASSERT_EQ(p.visible.size(), 1u);
  EXPECT_EQ(p.visible[0].ordinal, 0);
  EXPECT_EQ(p.visible[0].uuid, "GPU-aaaa1111-0000-0000-0000-000000000000");
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_CONTAINS(p.notes[0], "GPU 1 (GPU-bbbb2222-0000-0000-0000-000000000000) is in MIG mode");
}

TEST_F(GpuPlacementTest, CudaVisibleDevicesByMigUuidIndexAndPrefix) {
  // A MIG device by UUID: the process's ordinal 0.
  GpuPlacement mig = ResolveVisibleGpus(gpus_, "MIG-dddd4444-0000-0000-0000-000000000000");
  ASSERT_EQ(mig.visible.size(), 1u);
  EXPECT_TRUE(mig.visible[0].mig);
  EXPECT_EQ(mig.visible[0].ordinal, 0);
  EXPECT_CONTAINS(mig.visible[0].description, "MIG device 2 of GPU 1");
  EXPECT_TRUE(mig.notes.empty());

  // Prefixes, as CUDA takes them; a second MIG device is left out with a note.
  GpuPlacement two = ResolveVisibleGpus(gpus_, "MIG-cccc, MIG-dddd");
  ASSERT_EQ(two.visible.size(), 1u);
  EXPECT_EQ(two.visible[0].uuid, "MIG-cccc3333-0000-0000-0000-000000000000");
  ASSERT_EQ(two.notes.size(), 1u);
  EXPECT_CONTAINS(two.notes[0], "a second MIG device");

  // An unknown entry hides it and every entry after (CUDA's rule).
  GpuPlacement bad = ResolveVisibleGpus(gpus_, "GPU-aaaa,GPU-ffff,0");
  ASSERT_EQ(bad.visible.size(), 1u);
  ASSERT_EQ(bad.notes.size(), 1u);
  EXPECT_CONTAINS(bad.notes[0], "'GPU-ffff' matches no device: CUDA ignores it and every entry after it");

  // A GPU in MIG mode named whole.
  GpuPlacement whole = ResolveVisibleGpus(gpus_, "1");
  EXPECT_TRUE(whole.visible.empty());
  ASSERT_EQ(whole.notes.size(), 1u);
  EXPECT_CONTAINS(whole.notes[0], "which is in MIG mode: name one of its MIG devices");
  EXPECT_CONTAINS(whole.notes[0], "MIG-dddd4444");

  EXPECT_TRUE(ResolveVisibleGpus(gpus_, "").visible.empty()) << "set and empty: no device";
  GpuPlacement legacy = ResolveVisibleGpus(gpus_, "MIG-GPU-bbbb2222-0000-0000-0000-000000000000/1/0");
  EXPECT_TRUE(legacy.visible.empty());
  ASSERT_EQ(legacy.notes.size(), 1u);
  EXPECT_CONTAINS(legacy.notes[0], "MIG-GPU-UUID/GI/CI form");
}

TEST_F(GpuPlacementTest, GpusFlagBecomesCudaVisibleDevicesOrSaysWhyNot) {
  auto one = VisibleDevicesFor(gpus_, "MIG-dddd");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(*one, "MIG-dddd4444-0000-0000-0000-000000000000");
  auto whole = VisibleDevicesFor(gpus_, "0");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(*whole, "GPU-aaaa1111-0000-0000-0000-000000000000");
  auto by_uuid = VisibleDevicesFor(gpus_, "GPU-aaaa1111-0000-0000-0000-000000000000");
  ASSERT_TRUE(by_uuid.ok());
  EXPECT_EQ(*by_uuid, *whole);

  auto error = [&](const std::string& list) {
    auto r = VisibleDevicesFor(gpus_, list);
    EXPECT_FALSE(r.ok()) << list;
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_CONTAINS(error("GPU-ffff"), "--gpus entry 'GPU-ffff' matches no device");
  EXPECT_CONTAINS(error("GPU-ffff"), "NVML has 0 = GPU-aaaa1111");
  EXPECT_CONTAINS(error("GPU-"), "'GPU-' is neither an index nor a GPU-/MIG- UUID");
  EXPECT_CONTAINS(error("MIG-"), "is neither an index nor a GPU-/MIG- UUID");
  EXPECT_CONTAINS(error("GPU-aaaa1111,GPU-bbbb"), "'GPU-bbbb' is GPU 1, which is in MIG mode");
  EXPECT_CONTAINS(error("7"), "'7' is no GPU's index");
  EXPECT_CONTAINS(error("MIG-cccc,MIG-dddd"), "names 2 MIG devices: a CUDA process uses one MIG device");
  EXPECT_CONTAINS(error("0,MIG-dddd"), "mixes a MIG device with whole GPUs");
  EXPECT_CONTAINS(error("0,,1"), "an empty entry");
}

TEST_F(GpuPlacementTest, AmbiguousPrefixesAreRefused) {
  std::ofstream(dir_ / "state") << "gpus 2\ngpu0.uuid GPU-abc-1\ngpu1.uuid GPU-abc-2\n";
  auto m = metrics::GpuMonitor::OpenOrError(SAMPAN_FAKE_NVML_PATH);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const auto gpus = m.value()->Inventory();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_FALSE(gpus[0].mig_enabled) << "no mig_mode: MIG not supported";
  auto r = VisibleDevicesFor(gpus, "GPU-abc");
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "matches 2 devices");
  EXPECT_EQ(*VisibleDevicesFor(gpus, "GPU-abc-2,GPU-abc-1"), "GPU-abc-2,GPU-abc-1");
}

}  // namespace
}  // namespace sampan::server
