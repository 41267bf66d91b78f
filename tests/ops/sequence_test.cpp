// Sequences and optionals (src/ops/sequence.cpp, optional.cpp): the list ops with hand-checked
// values, positions out of range and mismatched element types as errors naming the node, and
// the gate that keeps them away from ops that take tensors only. Whole graphs (If/Loop with
// sequences, SequenceMap) run in the ONNX node suites (sampan conformance).
#include <gtest/gtest.h>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)
using ir::Attribute;
using Attrs = std::map<std::string, Attribute>;

Tensor I64(std::vector<int64_t> v, Shape s) {
  return Tensor::FromVector(DType::kInt64, v, std::move(s));
}

Result<Tensor> Run1(const std::string& op, const std::vector<const Tensor*>& in, Attrs attrs = {}, int64_t opset = 18) {
  SP_ASSIGN_OR_RETURN(auto outs, RunOneNode(op, in, std::move(attrs), opset, 1));
  return outs.at(0);
}

std::vector<float> Floats(const Tensor& t) {
  return Values<float>(t);
}

TEST(Sequence, ConstructInsertAtEraseLength) {
  Tensor a = F32({1, 2}, {2}), b = F32({3}, {1}), c = F32({4, 5, 6}, {3});
  auto seq = Run1("SequenceConstruct", {&a, &b});
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  ASSERT_TRUE(seq->is_sequence());
  EXPECT_EQ(seq->items().size(), 2u);
  Tensor front = I64({0}, {});
  auto ins = Run1("SequenceInsert", {&*seq, &c, &front});
  ASSERT_TRUE(ins.ok()) << ins.status().ToString();
  ASSERT_EQ(ins->items().size(), 3u);
  EXPECT_EQ(Floats(ins->items()[0]), (std::vector<float>{4, 5, 6}));
  Tensor last = I64({-1}, {});
  auto at = Run1("SequenceAt", {&*ins, &last});
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(Floats(*at), (std::vector<float>{3}));
  auto er = Run1("SequenceErase", {&*ins});  // default: the last
  ASSERT_TRUE(er.ok()) << er.status().ToString();
  auto len = Run1("SequenceLength", {&*er});
  ASSERT_TRUE(len.ok()) << len.status().ToString();
  EXPECT_EQ(Values<int64_t>(*len), (std::vector<int64_t>{2}));
  // The input sequence is unchanged: sequences are values.
  EXPECT_EQ(ins->items().size(), 3u);
}

TEST(Sequence, BadPositionsAndTypesAreErrors) {
  Tensor a = F32({1}, {1});
  auto seq = Run1("SequenceConstruct", {&a});
  ASSERT_TRUE(seq.ok());
  Tensor far = I64({3}, {});
  auto at = Run1("SequenceAt", {&*seq, &far});
  ASSERT_FALSE(at.ok());
  EXPECT_NE(at.status().ToString().find("out of range"), std::string::npos) << at.status().ToString();
  EXPECT_NE(at.status().ToString().find("'n'"), std::string::npos) << at.status().ToString();
  Tensor i = I64({1}, {1});
  auto mixed = Run1("SequenceInsert", {&*seq, &i});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().ToString().find("into a sequence of f32"), std::string::npos) << mixed.status().ToString();
  auto empty = Run1("SequenceEmpty", {});
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  auto erase = Run1("SequenceErase", {&*empty});
  ASSERT_FALSE(erase.ok());
  auto concat = Run1("ConcatFromSequence", {&*empty}, {{"axis", Attribute::Int(0)}});
  ASSERT_FALSE(concat.ok());
  EXPECT_NE(concat.status().ToString().find("empty"), std::string::npos) << concat.status().ToString();
  // Ops that take tensors refuse a sequence, naming what they got.
  auto relu = Run1("Relu", {&*seq});
  ASSERT_FALSE(relu.ok());
  EXPECT_EQ(relu.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(relu.status().ToString().find("sequence"), std::string::npos) << relu.status().ToString();
}

TEST(Sequence, SplitAndConcatRoundTrip) {
  Tensor x = F32({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor two = I64({2}, {});
  auto parts = Run1("SplitToSequence", {&x, &two}, {{"axis", Attribute::Int(0)}});
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->items().size(), 2u);  // 2 rows, then the 1 left
  EXPECT_EQ(parts->items()[1].shape(), (Shape{1, 2}));
  auto rows = Run1("SplitToSequence", {&x}, {{"axis", Attribute::Int(1)}, {"keepdims", Attribute::Int(0)}});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->items().size(), 2u);
  EXPECT_EQ(rows->items()[0].shape(), (Shape{3}));
  EXPECT_EQ(Floats(rows->items()[1]), (std::vector<float>{2, 4, 6}));
  auto back = Run1("ConcatFromSequence", {&*parts}, {{"axis", Attribute::Int(0)}});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->shape(), (Shape{3, 2}));
  EXPECT_EQ(Floats(*back), Floats(x));
  auto stacked = Run1("ConcatFromSequence", {&*rows}, {{"axis", Attribute::Int(-1)}, {"new_axis", Attribute::Int(1)}});
  ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
  EXPECT_EQ(stacked->shape(), (Shape{3, 2}));
  EXPECT_EQ(Floats(*stacked), Floats(x));
  Tensor bad = I64({2, 2}, {2});  // sums to 4, axis 0 has 3
  auto wrong = Run1("SplitToSequence", {&x, &bad}, {{"axis", Attribute::Int(0)}});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().ToString().find("sum to 4"), std::string::npos) << wrong.status().ToString();
}

TEST(Optional, HasAndGetElement) {
  Tensor x = F32({7}, {1});
  auto full = Run1("Optional", {&x});
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  ASSERT_TRUE(full->is_optional());
  auto has = Run1("OptionalHasElement", {&*full});
  ASSERT_TRUE(has.ok()) << has.status().ToString();
  EXPECT_TRUE(Values<bool>(*has)[0]);
  auto get = Run1("OptionalGetElement", {&*full});
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  EXPECT_EQ(Floats(*get), (std::vector<float>{7}));
  const Tensor none = Tensor::Optional(DType::kFloat32, std::nullopt);
  has = Run1("OptionalHasElement", {&none});
  ASSERT_TRUE(has.ok());
  EXPECT_FALSE(Values<bool>(*has)[0]);
  get = Run1("OptionalGetElement", {&none});
  ASSERT_FALSE(get.ok());
  EXPECT_NE(get.status().ToString().find("empty"), std::string::npos) << get.status().ToString();
  // Opsets before 18 take only optionals.
  auto old = Run1("OptionalHasElement", {&x}, {}, 15);
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().ToString().find("opsets 15-17 take an optional"), std::string::npos)
      << old.status().ToString();
}

}  // namespace
}  // namespace sampan::ops
