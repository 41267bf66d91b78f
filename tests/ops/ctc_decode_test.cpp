// sampan::CtcGreedyDecoder (src/ops/ctc_decode.cpp): the blank dropped, repeats merged unless a
// blank separates them (or merge_repeated is 0), the first of equal maxima taken, the score as
// the kept steps' mean probability, float16 probabilities, and the errors of bad inputs. The
// real OCR recognizer's text: tests/models/test_models.py::test_ocr_rec_answers_text_with_ctc_decoder.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

// probs [N, T, C] whose step k of row i puts `p` on class cls[i][k] and spreads the rest.
Tensor Probs(const std::vector<std::vector<int>>& cls, int64_t c, float p = 0.9f) {
  const int64_t n = static_cast<int64_t>(cls.size()), t = static_cast<int64_t>(cls[0].size());
  Tensor x = Tensor::Alloc(DType::kFloat32, {n, t, c});
  float* d = x.mutable_data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < t; ++k)
      for (int64_t j = 0; j < c; ++j)
        d[(i * t + k) * c + j] =
            j == cls[static_cast<size_t>(i)][static_cast<size_t>(k)] ? p : (1 - p) / static_cast<float>(c - 1);
  return x;
}

Result<std::vector<Tensor>> Decode(const Tensor& probs, const Tensor& classes,
                                   std::map<std::string, ir::Attribute> attrs = {}) {
  auto m = MakeGraph(
      "CtcGreedyDecoder",
      {ir::TensorType::Static(probs.dtype(), probs.shape()), ir::TensorType::Static(classes.dtype(), classes.shape())},
      std::move(attrs), 17, 2);
  m->node->domain = "sampan";
  m->g.opsets["sampan"] = 1;
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, 17, {&probs, &classes}, &outs));
  return outs;
}

const Tensor kClasses = Tensor::FromStrings({"<blank>", "a", "b", "c"}, {4});

TEST(CtcGreedyDecoder, DropsBlanksAndMergesRepeats) {
  // Row 0: a a _ a b b c  -> "aabc"; row 1: all blank -> ""; row 2: c _ c -> "cc".
  auto r = Decode(Probs({{1, 1, 0, 1, 2, 2, 3}, {0, 0, 0, 0, 0, 0, 0}, {3, 0, 3, 0, 0, 0, 0}}, 4), kClasses);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tensor& text = (*r)[0];
  ASSERT_EQ(text.dtype(), DType::kString);
  ASSERT_EQ(text.shape(), (Shape{3}));
  EXPECT_EQ(text.strings()[0], "aabc");
  EXPECT_EQ(text.strings()[1], "");
  EXPECT_EQ(text.strings()[2], "cc");
  const Tensor& score = (*r)[1];
  EXPECT_FLOAT_EQ(score.data<float>()[0], 0.9f);
  EXPECT_EQ(score.data<float>()[1], 0.f);  // nothing kept
  // merge_repeated = 0 keeps every non-blank step.
  auto all = Decode(Probs({{1, 1, 0, 1, 2, 2, 3}}, 4), kClasses, {{"merge_repeated", ir::Attribute::Int(0)}});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)[0].strings()[0], "aaabbc");
  // Another blank index: class 3 is the blank, class 0's text is used.
  auto other = Decode(Probs({{0, 3, 0, 1}}, 4), kClasses, {{"blank", ir::Attribute::Int(3)}});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)[0].strings()[0], "<blank><blank>a");
}

TEST(CtcGreedyDecoder, TiesTakeTheFirstClassAndFloat16Works) {
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {0.1f, 0.4f, 0.4f, 0.1f}, {1, 1, 4});
  auto r = Decode(x, kClasses);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].strings()[0], "a");
  auto h = CastTensor(Probs({{2, 2, 0, 3}}, 4), DType::kFloat16);
  ASSERT_TRUE(h.ok());
  auto rh = Decode(*h, kClasses);
  ASSERT_TRUE(rh.ok()) << rh.status().ToString();
  EXPECT_EQ((*rh)[0].strings()[0], "bc");
}

TEST(CtcGreedyDecoder, BadInputsAreErrors) {
  const Tensor probs = Probs({{1, 2}}, 4);
  auto short_dict = Decode(probs, Tensor::FromStrings({"_", "a"}, {2}));
  ASSERT_FALSE(short_dict.ok());
  EXPECT_NE(short_dict.status().message().find("classes has 2 entries but probs has 4 classes"), std::string::npos)
      << short_dict.status().ToString();
  auto rank2 = Decode(Tensor::Alloc(DType::kFloat32, {2, 4}), kClasses);
  EXPECT_FALSE(rank2.ok());
  auto ints = Decode(Tensor::Alloc(DType::kInt32, {1, 2, 4}), kClasses);
  EXPECT_FALSE(ints.ok());
  auto blank = Decode(probs, kClasses, {{"blank", ir::Attribute::Int(9)}});
  ASSERT_FALSE(blank.ok());
  EXPECT_NE(blank.status().message().find("blank 9 is not a class"), std::string::npos) << blank.status().ToString();
  auto not_strings = Decode(probs, Tensor::Alloc(DType::kFloat32, {4}));
  EXPECT_FALSE(not_strings.ok());
}

}  // namespace
}  // namespace sampan::ops
