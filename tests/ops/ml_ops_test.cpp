// TfIdfVectorizer (src/ops/tfidf.cpp) and the ai.onnx.ml ops (ml_linear.cpp, ml_tree.cpp):
// hand-checked values, and malformed attributes (cycles, child ids out of range, pools that
// do not split into n-grams, string labels) giving errors that name the node instead of
// crashing. Whole scikit-learn models against onnxruntime: tests/models/test_ml_models.py.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)
using ir::Attribute;
using Attrs = std::map<std::string, Attribute>;

Result<std::vector<Tensor>> RunMl(const std::string& domain, const std::string& op,
                                  const std::vector<const Tensor*>& in, Attrs attrs, size_t n_out = 1) {
  std::vector<ir::TensorType> types;
  for (const Tensor* t : in) types.push_back(ir::TensorType::Static(t->dtype(), t->shape()));
  auto m = MakeGraph(op, types, std::move(attrs), 17, n_out);
  m->node->domain = domain;
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, 17, in, &outs));
  return outs;
}

std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<float>(ElementAsDouble(t, i)));
  return v;
}

void ExpectError(const Result<std::vector<Tensor>>& r, StatusCode code, const std::string& text) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().ToString().find("'n'"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().ToString().find(text), std::string::npos) << r.status().ToString();
}

// ---- TfIdfVectorizer: pool = unigrams {1, 2}, bigram (1, 2); columns 0, 1, 2.

Attrs TfIdfAttrs(const std::string& mode, int64_t max_skip) {
  return {{"mode", Attribute::String(mode)},
          {"min_gram_length", Attribute::Int(1)},
          {"max_gram_length", Attribute::Int(2)},
          {"max_skip_count", Attribute::Int(max_skip)},
          {"ngram_counts", Attribute::Ints({0, 2})},
          {"ngram_indexes", Attribute::Ints({0, 1, 2})},
          {"pool_int64s", Attribute::Ints({1, 2, 1, 2})}};
}

TEST(TfIdfVectorizer, CountsUnigramsOnceAndBigramsPerSkip) {
  const Tensor x = Tensor::FromVector<int64_t>(DType::kInt64, {1, 2, 1, 2, 3, 1, 3, 2, 9, 9}, {2, 5});
  auto r = RunMl("", "TfIdfVectorizer", {&x}, TfIdfAttrs("TF", 0));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{2, 2, 2, 1, 1, 0}));
  // One skip: row 1's (1, 2) at distance 2 counts; unigrams are not counted again.
  r = RunMl("", "TfIdfVectorizer", {&x}, TfIdfAttrs("TF", 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{2, 2, 2, 1, 1, 1}));
}

TEST(TfIdfVectorizer, IdfAndTfIdfWeights) {
  const Tensor x = Tensor::FromVector<int32_t>(DType::kInt32, {1, 2, 1, 3}, {4});
  Attrs a = TfIdfAttrs("IDF", 0);
  a["weights"] = Attribute::Floats({0.5f, 2.f, 3.f});
  auto r = RunMl("", "TfIdfVectorizer", {&x}, a);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{3}));
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{0.5f, 2.f, 3.f}));
  a["mode"] = Attribute::String("TFIDF");
  r = RunMl("", "TfIdfVectorizer", {&x}, a);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{1.f, 2.f, 3.f}));
}

TEST(TfIdfVectorizer, BadAttributesNameTheNode) {
  const Tensor x = Tensor::FromVector<int64_t>(DType::kInt64, {1, 2}, {2});
  ExpectError(RunMl("", "TfIdfVectorizer", {&x}, TfIdfAttrs("BM25", 0)), StatusCode::kInvalidArgument, "mode");
  Attrs a = TfIdfAttrs("TF", 0);
  a["ngram_counts"] = Attribute::Ints({0, 3});  // one bigram item left over
  ExpectError(RunMl("", "TfIdfVectorizer", {&x}, a), StatusCode::kInvalidArgument, "whole number of 2-grams");
  a = TfIdfAttrs("TF", 0);
  a["ngram_indexes"] = Attribute::Ints({0, 1});
  ExpectError(RunMl("", "TfIdfVectorizer", {&x}, a), StatusCode::kInvalidArgument, "ngram_indexes");
  a = TfIdfAttrs("TF", 0);
  a.erase("pool_int64s");
  a["pool_strings"] = Attribute::Strings({"a", "b", "a", "b"});
  ExpectError(RunMl("", "TfIdfVectorizer", {&x}, a), StatusCode::kUnsupported, "pool_strings");
}

// ---- Tree ensembles

// A stump: x[0] <= 0.5 ? (target 0, weight 1) : (target 1, weight 2).
Attrs StumpV5(bool missing_true) {
  Attrs a = {{"n_targets", Attribute::Int(2)},
             {"tree_roots", Attribute::Ints({0})},
             {"nodes_featureids", Attribute::Ints({0})},
             {"nodes_splits", Attribute::OfTensor(Tensor::FromVector<float>(DType::kFloat32, {0.5f}, {1}))},
             {"nodes_modes", Attribute::OfTensor(Tensor::FromVector<uint8_t>(DType::kUInt8, {0}, {1}))},
             {"nodes_truenodeids", Attribute::Ints({0})},
             {"nodes_trueleafs", Attribute::Ints({1})},
             {"nodes_falsenodeids", Attribute::Ints({1})},
             {"nodes_falseleafs", Attribute::Ints({1})},
             {"leaf_targetids", Attribute::Ints({0, 1})},
             {"leaf_weights", Attribute::OfTensor(Tensor::FromVector<float>(DType::kFloat32, {1.f, 2.f}, {2}))}};
  if (missing_true) a["nodes_missing_value_tracks_true"] = Attribute::Ints({1});
  return a;
}

TEST(TreeEnsemble, StumpWithMissingValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {0.f, 1.f, nan}, {3, 1});
  auto r = RunMl("ai.onnx.ml", "TreeEnsemble", {&x}, StumpV5(false));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{1, 0, 0, 2, 0, 2}));
  r = RunMl("ai.onnx.ml", "TreeEnsemble", {&x}, StumpV5(true));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{1, 0, 0, 2, 1, 0}));
}

TEST(TreeEnsemble, MalformedTreesAreErrors) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {0.f}, {1, 1});
  Attrs a = StumpV5(false);
  a["nodes_falsenodeids"] = Attribute::Ints({7});
  ExpectError(RunMl("ai.onnx.ml", "TreeEnsemble", {&x}, a), StatusCode::kInvalidArgument, "false leaf id 7");
  a = StumpV5(false);
  a["nodes_featureids"] = Attribute::Ints({3});
  ExpectError(RunMl("ai.onnx.ml", "TreeEnsemble", {&x}, a), StatusCode::kInvalidArgument, "feature 3");
  a = StumpV5(false);
  a["leaf_targetids"] = Attribute::Ints({0, 2});
  ExpectError(RunMl("ai.onnx.ml", "TreeEnsemble", {&x}, a), StatusCode::kInvalidArgument, "leaf_targetids[1]");
}

// Regressor (v1/v3): tree 0 = node 0 (x[1] < 0 ? node 1 : node 2), leaves 1 and 2.
Attrs RegressorV3() {
  return {{"n_targets", Attribute::Int(1)},
          {"nodes_treeids", Attribute::Ints({0, 0, 0})},
          {"nodes_nodeids", Attribute::Ints({0, 1, 2})},
          {"nodes_featureids", Attribute::Ints({1, 0, 0})},
          {"nodes_values", Attribute::Floats({0.f, 0.f, 0.f})},
          {"nodes_modes", Attribute::Strings({"BRANCH_LT", "LEAF", "LEAF"})},
          {"nodes_truenodeids", Attribute::Ints({1, 0, 0})},
          {"nodes_falsenodeids", Attribute::Ints({2, 0, 0})},
          {"target_treeids", Attribute::Ints({0, 0})},
          {"target_nodeids", Attribute::Ints({1, 2})},
          {"target_ids", Attribute::Ints({0, 0})},
          {"target_weights", Attribute::Floats({-1.f, 4.f})},
          {"base_values", Attribute::Floats({0.5f})}};
}

TEST(TreeEnsembleRegressor, BaseValueAndIntegerFeatures) {
  const Tensor x = Tensor::FromVector<int64_t>(DType::kInt64, {9, -3, 9, 3}, {2, 2});
  auto r = RunMl("ai.onnx.ml", "TreeEnsembleRegressor", {&x}, RegressorV3());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].dtype(), DType::kFloat32);
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{-0.5f, 4.5f}));
}

TEST(TreeEnsembleRegressor, CyclesAndDanglingIdsAreErrors) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {0.f, 0.f}, {1, 2});
  Attrs a = RegressorV3();
  a["nodes_modes"] = Attribute::Strings({"BRANCH_LT", "BRANCH_LEQ", "LEAF"});  // node 1 branches back to 0
  a["target_nodeids"] = Attribute::Ints({2, 2});
  ExpectError(RunMl("ai.onnx.ml", "TreeEnsembleRegressor", {&x}, a), StatusCode::kInvalidArgument, "cycle");
  a = RegressorV3();
  a["nodes_falsenodeids"] = Attribute::Ints({5, 0, 0});
  ExpectError(RunMl("ai.onnx.ml", "TreeEnsembleRegressor", {&x}, a), StatusCode::kInvalidArgument,
              "branches to node 5");
  a = RegressorV3();
  a["nodes_modes"] = Attribute::Strings({"BRANCH_LT", "LEAF", "BRANCH_SOMETIMES"});
  ExpectError(RunMl("ai.onnx.ml", "TreeEnsembleRegressor", {&x}, a), StatusCode::kInvalidArgument, "BRANCH_SOMETIMES");
}

// String labels work (tests/ops/strings_test.cpp); a single string label does not: it would mean a
// binary model that names only its positive class.
TEST(TreeEnsembleClassifier, OneStringLabelIsUnsupported) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {0.f, 0.f}, {1, 2});
  Attrs a = RegressorV3();
  for (const char* k : {"treeids", "nodeids", "ids", "weights"}) {
    a[std::string("class_") + k] = a[std::string("target_") + k];
    a.erase(std::string("target_") + k);
  }
  a.erase("base_values");
  a["classlabels_strings"] = Attribute::Strings({"cat"});
  ExpectError(RunMl("ai.onnx.ml", "TreeEnsembleClassifier", {&x}, a, 2), StatusCode::kUnsupported, "one class label");
  a["classlabels_int64s"] = Attribute::Ints({1});
  ExpectError(RunMl("ai.onnx.ml", "TreeEnsembleClassifier", {&x}, a, 2), StatusCode::kInvalidArgument,
              "exactly one of classlabels_int64s and classlabels_strings");
}

// ---- Linear and preprocessing ops

TEST(MlOps, ScalerBinarizerNormalizer) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1.f, -2.f, 3.f, 4.f}, {2, 2});
  auto r = RunMl("ai.onnx.ml", "Scaler", {&x},
                 {{"offset", Attribute::Floats({1.f, 0.f})}, {"scale", Attribute::Floats({2.f})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{0.f, -4.f, 4.f, 8.f}));
  r = RunMl("ai.onnx.ml", "Binarizer", {&x}, {{"threshold", Attribute::Float(1.f)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{0.f, 0.f, 1.f, 1.f}));
  r = RunMl("ai.onnx.ml", "Normalizer", {&x}, {{"norm", Attribute::String("L1")}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<float> l1 = {1.f / 3, -2.f / 3, 3.f / 7, 4.f / 7};
  for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(Floats((*r)[0])[i], l1[i], 1e-7);
  ExpectError(RunMl("ai.onnx.ml", "Scaler", {&x}, {{"scale", Attribute::Floats({1.f, 2.f, 3.f})}}),
              StatusCode::kInvalidArgument, "scale has 3 values for 2 columns");
}

TEST(MlOps, ArrayFeatureExtractorAndOneHotEncoder) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  const Tensor idx = Tensor::FromVector<int64_t>(DType::kInt64, {2, 0}, {2});
  auto r = RunMl("ai.onnx.ml", "ArrayFeatureExtractor", {&x, &idx}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{3.f, 1.f, 6.f, 4.f}));
  const Tensor bad = Tensor::FromVector<int64_t>(DType::kInt64, {3}, {1});
  ExpectError(RunMl("ai.onnx.ml", "ArrayFeatureExtractor", {&x, &bad}, {}), StatusCode::kInvalidArgument, "index 3");
  const Tensor cats = Tensor::FromVector<int64_t>(DType::kInt64, {5, 7, 9}, {3});
  r = RunMl("ai.onnx.ml", "OneHotEncoder", {&cats}, {{"cats_int64s", Attribute::Ints({7, 5})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(Floats((*r)[0]), (std::vector<float>{0, 1, 1, 0, 0, 0}));
  ExpectError(RunMl("ai.onnx.ml", "OneHotEncoder", {&cats},
                    {{"cats_int64s", Attribute::Ints({7, 5})}, {"zeros", Attribute::Int(0)}}),
              StatusCode::kInvalidArgument, "not one of the categories");
}

TEST(MlOps, LinearClassifierBinaryFromOneRow) {
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1.f, 1.f, -1.f, 0.f}, {2, 2});
  auto r = RunMl("ai.onnx.ml", "LinearClassifier", {&x},
                 {{"coefficients", Attribute::Floats({1.f, 2.f})},
                  {"intercepts", Attribute::Floats({-0.5f})},
                  {"classlabels_ints", Attribute::Ints({10, 20})},
                  {"post_transform", Attribute::String("LOGISTIC")}},
                 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].dtype(), DType::kInt64);
  EXPECT_EQ((*r)[0].data<int64_t>()[0], 20);  // score 2.5
  EXPECT_EQ((*r)[0].data<int64_t>()[1], 10);  // score -1.5
  EXPECT_EQ((*r)[1].shape(), (Shape{2, 2}));
  EXPECT_NEAR((*r)[1].data<float>()[1], 1 / (1 + std::exp(-2.5)), 1e-6);
  EXPECT_NEAR((*r)[1].data<float>()[0], 1 / (1 + std::exp(2.5)), 1e-6);
}

}  // namespace
}  // namespace sampan::ops
