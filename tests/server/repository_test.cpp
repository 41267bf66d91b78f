// The model repository on disk: model and version discovery, version
// policies, config reading, model files, change fingerprints, and Triton-style
// auto-complete of a config from the model's own inputs and outputs.
#include "server/repository/repository.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "server/test_models.h"

namespace sampan::server {
namespace {

namespace fs = std::filesystem;
namespace sc = ::sampan::serverconfig;

class RepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = FreshTestDirectory("repo"); }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const fs::path& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel, std::ios::binary) << text;
  }
  fs::path root_;
};

TEST_F(RepositoryTest, ListsModelDirectoriesSortedSkippingHiddenAndFiles) {
  fs::create_directories(root_ / "zeta");
  fs::create_directories(root_ / "alpha");
  fs::create_directories(root_ / ".cache");
  Write("README.md", "not a model");
  auto names = ListModels(root_.string());
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, (std::vector<std::string>{"alpha", "zeta"}));
  auto missing = ListModels((root_ / "nope").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
}

TEST_F(RepositoryTest, VersionsAreNumberedDirectoriesOnly) {
  for (const char* d : {"m/1", "m/2", "m/10", "m/abc", "m/0", "m/01", "m/-3", "m/.sampan"})
    fs::create_directories(root_ / d);
  Write("m/7", "a file, not a directory");
  EXPECT_EQ(ListVersions((root_ / "m").string()), (std::vector<int64_t>{1, 2, 10}));
  EXPECT_TRUE(ListVersions((root_ / "absent").string()).empty());
}

TEST_F(RepositoryTest, VersionPolicies) {
  const std::vector<int64_t> available = {1, 2, 5};
  sc::ModelVersionPolicy latest;
  latest.mutable_latest()->set_num_versions(2);
  EXPECT_EQ(SelectVersions(latest, available), (std::vector<int64_t>{2, 5}));
  latest.mutable_latest()->set_num_versions(9);
  EXPECT_EQ(SelectVersions(latest, available), available);
  sc::ModelVersionPolicy all;
  all.mutable_all();
  EXPECT_EQ(SelectVersions(all, available), available);
  sc::ModelVersionPolicy specific;
  for (int64_t v : {5, 1, 7}) specific.mutable_specific()->add_versions(v);
  EXPECT_EQ(SelectVersions(specific, available), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(SelectVersions(sc::ModelVersionPolicy(), available), (std::vector<int64_t>{5}));  // default: latest 1
}

TEST_F(RepositoryTest, ReadsConfigOrDefaultsWithoutOne) {
  fs::create_directories(root_ / "plain");
  bool has_file = true;
  auto c = ReadModelConfig((root_ / "plain").string(), "plain", &has_file);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(has_file);
  EXPECT_EQ(c->name(), "plain");
  EXPECT_EQ(c->version_policy().latest().num_versions(), 1u);

  Write("good/config.pbtxt", "max_batch_size: 8\ndynamic_batching { preferred_batch_size: [4] }\n");
  c = ReadModelConfig((root_ / "good").string(), "good", &has_file);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(has_file);
  EXPECT_EQ(c->name(), "good");
  EXPECT_EQ(c->max_batch_size(), 8);

  Write("bad/config.pbtxt", "max_batch_size: 8\nthis is { not a config\n");
  c = ReadModelConfig((root_ / "bad").string(), "bad", &has_file);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("config.pbtxt:2:"), std::string::npos) << c.status().message();
}

TEST_F(RepositoryTest, FindsTheModelFile) {
  ModelConfig c;
  Write("m/1/model.plan", "plan");
  Write("m/2/model.onnx", "onnx");
  Write("m/2/model.plan", "plan");
  Write("m/3/custom.bin", "x");
  auto f = FindModelFile((root_ / "m/1").string(), c);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(fs::path(*f).filename(), "model.plan");
  f = FindModelFile((root_ / "m/2").string(), c);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(fs::path(*f).filename(), "model.onnx");  // ONNX first
  f = FindModelFile((root_ / "m/3").string(), c);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("model.onnx or model.plan"), std::string::npos) << f.status().message();
  c.set_default_model_filename("custom.bin");
  f = FindModelFile((root_ / "m/3").string(), c);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(fs::path(*f).filename(), "custom.bin");
}

TEST_F(RepositoryTest, FingerprintSeesModelChangesButNotThePlanCache) {
  Write("m/config.pbtxt", "max_batch_size: 0\n");
  Write("m/1/model.onnx", "one");
  const std::string before = ModelDirFingerprint((root_ / "m").string());
  Write("m/1/.sampan/model.reference.plan", "cache");
  EXPECT_EQ(ModelDirFingerprint((root_ / "m").string()), before);
  Write("m/2/model.onnx", "two");
  const std::string added = ModelDirFingerprint((root_ / "m").string());
  EXPECT_NE(added, before);
  Write("m/config.pbtxt", "max_batch_size: 16\n");  // a different size
  EXPECT_NE(ModelDirFingerprint((root_ / "m").string()), added);
}

ModelTensorInfo Info(const std::string& name, DType dtype, std::vector<int64_t> dims) {
  return ModelTensorInfo{name, dtype, std::move(dims)};
}

TEST(AutoCompleteTest, WithoutConfigABatchableModelGetsBatching) {
  ModelConfig c;
  c.set_name("m");
  Status st = AutoCompleteConfig(&c, false, {Info("x", DType::kFloat32, {-1, 3, 224, 224})},
                                 {Info("y", DType::kFloat32, {-1, 1000})}, "m (no config.pbtxt)");
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(c.max_batch_size(), 4);
  EXPECT_TRUE(c.has_dynamic_batching());
  ASSERT_EQ(c.input_size(), 1);
  EXPECT_EQ(c.input(0).data_type(), sc::TYPE_FP32);
  EXPECT_EQ(std::vector<int64_t>(c.input(0).dims().begin(), c.input(0).dims().end()),
            (std::vector<int64_t>{3, 224, 224}));
  EXPECT_EQ(std::vector<int64_t>(c.output(0).dims().begin(), c.output(0).dims().end()), (std::vector<int64_t>{1000}));
}

TEST(AutoCompleteTest, FixedLeadingDimensionMeansNoBatching) {
  ModelConfig c;
  c.set_name("m");
  ASSERT_TRUE(
      AutoCompleteConfig(&c, false, {Info("x", DType::kInt64, {1, 16})}, {Info("y", DType::kInt64, {1, 16})}, "m")
          .ok());
  EXPECT_EQ(c.max_batch_size(), 0);
  EXPECT_FALSE(c.has_dynamic_batching());
  EXPECT_EQ(std::vector<int64_t>(c.input(0).dims().begin(), c.input(0).dims().end()), (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(c.input(0).data_type(), sc::TYPE_INT64);
}

TEST(AutoCompleteTest, AConfigWithoutTensorsKeepsItsBatchSize) {
  ModelConfig c;
  c.set_name("m");
  c.set_max_batch_size(0);
  ASSERT_TRUE(AutoCompleteConfig(&c, true, {Info("x", DType::kFloat32, {-1, 4})}, {Info("y", DType::kFloat32, {-1, 4})},
                                 "config.pbtxt")
                  .ok());
  EXPECT_EQ(c.max_batch_size(), 0);  // the file said no batching: the batch dim stays in dims
  EXPECT_EQ(std::vector<int64_t>(c.input(0).dims().begin(), c.input(0).dims().end()), (std::vector<int64_t>{-1, 4}));
}

TEST(AutoCompleteTest, ConfiguredTensorsAreCheckedAgainstTheModel) {
  auto run = [](const std::string& text) {
    auto c = ParseModelConfig(text, "config.pbtxt", "m");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    ModelConfig config = *c;
    Status st = AutoCompleteConfig(&config, true, {Info("x", DType::kFloat32, {-1, 3, -1})},
                                   {Info("y", DType::kFloat32, {-1, 10})}, "config.pbtxt");
    return std::make_pair(st, config);
  };
  auto [ok, config] = run(R"(max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [-1, 32] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [10] }])");
  ASSERT_TRUE(ok.ok()) << ok.ToString();
  // The model fixes dimension 0 at 3: the config's -1 narrows to it.
  EXPECT_EQ(config.input(0).dims(0), 3);

  auto [wrong_name, c1] = run(R"(max_batch_size: 8
input [{ name: "image" data_type: TYPE_FP32 dims: [3, 32] }])");
  EXPECT_NE(wrong_name.message().find("input 'image' is not an input of model 'm' (model inputs: x)"),
            std::string::npos)
      << wrong_name.message();
  auto [wrong_type, c2] = run(R"(max_batch_size: 8
input [{ name: "x" data_type: TYPE_INT32 dims: [3, 32] }])");
  EXPECT_NE(wrong_type.message().find("data_type is TYPE_INT32 but model 'm' has TYPE_FP32"), std::string::npos)
      << wrong_type.message();
  auto [wrong_dim, c3] = run(R"(max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [4, 32] }])");
  EXPECT_NE(wrong_dim.message().find("dimension 0 is 4 but model 'm' has 3"), std::string::npos) << wrong_dim.message();
  auto [wrong_rank, c4] = run(R"(max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [3] }])");
  EXPECT_NE(wrong_rank.message().find("has 1 dimensions"), std::string::npos) << wrong_rank.message();
  auto [bad_output, c5] = run(R"(max_batch_size: 8
output [{ name: "z" data_type: TYPE_FP32 dims: [10] }])");
  EXPECT_NE(bad_output.message().find("output 'z' is not an output"), std::string::npos) << bad_output.message();
}

TEST(AutoCompleteTest, BatchingNeedsADynamicLeadingDimension) {
  ModelConfig c;
  c.set_name("m");
  c.set_max_batch_size(4);
  Status st = AutoCompleteConfig(&c, true, {Info("x", DType::kFloat32, {2, 3})}, {Info("y", DType::kFloat32, {2, 3})},
                                 "config.pbtxt");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs a dynamic leading (batch) dimension"), std::string::npos) << st.message();
}

TEST(AutoCompleteTest, DataTypesRoundTrip) {
  for (DType d : {DType::kBool, DType::kUInt8, DType::kInt8, DType::kInt32, DType::kInt64, DType::kFloat16,
                  DType::kFloat32, DType::kFloat64, DType::kBFloat16})
    EXPECT_EQ(DTypeFromConfig(ConfigDataType(d)), d) << DTypeName(d);
  EXPECT_EQ(ConfigDataType(DType::kComplex64), sc::TYPE_INVALID);
}

}  // namespace
}  // namespace sampan::server
