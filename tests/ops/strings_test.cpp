// String tensors: storage (Tensor), Cast to and from text, Equal, the string ops
// (src/ops/strings.cpp), LabelEncoder and CategoryMapper (ml_label_encoder.cpp), the text
// form, and the gate that keeps string tensors away from ops that would move them as bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/npy.h"
#include "ir/text.h"
#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)
using ir::Attribute;
using Attrs = std::map<std::string, Attribute>;

Tensor Str(std::vector<std::string> v, Shape s) {
  return Tensor::FromStrings(std::move(v), std::move(s));
}
std::vector<std::string> Strs(const Tensor& t) {
  return std::vector<std::string>(t.strings(), t.strings() + t.numel());
}

Result<std::vector<Tensor>> RunIn(const std::string& domain, const std::string& op,
                                  const std::vector<const Tensor*>& in, Attrs attrs, size_t n_out = 1,
                                  int64_t opset = 22) {
  std::vector<ir::TensorType> types;
  for (const Tensor* t : in) types.push_back(ir::TensorType::Static(t->dtype(), t->shape()));
  auto m = MakeGraph(op, types, std::move(attrs), opset, n_out);
  m->node->domain = domain;
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, opset, in, &outs));
  return outs;
}

TEST(StringTensor, CloneIsDeepAndSharingIsShallow) {
  Tensor a = Str({"alpha", "", "γ"}, {3});
  Tensor shared = a;
  Tensor copy = a.Clone();
  a.mutable_strings()[0] = "changed";
  EXPECT_EQ(shared.strings()[0], "changed");
  EXPECT_EQ(Strs(copy), (std::vector<std::string>{"alpha", "", "γ"}));
  EXPECT_EQ(a.nbytes(), 0u);
  EXPECT_EQ(ContentBytes(copy), 7u);
  auto z = Tensor::Zeros(DType::kString, {2, 2});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(Strs(*z), (std::vector<std::string>(4, "")));
}

TEST(StringTensor, CastToStringWritesPythonRepr) {
  Tensor f = F32({0.1f, 1e-5f, 100.f, -2.5f, 1e16f, std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::infinity(), 0.f},
                 {8});
  auto s = CastTensor(f, DType::kString);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Strs(*s), (std::vector<std::string>{"0.1", "1e-05", "100.0", "-2.5", "1e+16", "nan", "-inf", "0.0"}));
  Tensor i = Tensor::FromVector(DType::kInt64, std::vector<int64_t>{-7, 0, 1234567890123}, {3});
  EXPECT_EQ(Strs(*CastTensor(i, DType::kString)), (std::vector<std::string>{"-7", "0", "1234567890123"}));
  Tensor b = Tensor::FromVector(DType::kBool, std::vector<int>{1, 0}, {2});
  EXPECT_EQ(Strs(*CastTensor(b, DType::kString)), (std::vector<std::string>{"True", "False"}));
}

TEST(StringTensor, CastFromStringParsesNumbers) {
  Tensor s = Str({"3.14", "1E3", " -2 ", "+INF", "-inf", "NaN", "100.5"}, {7});
  auto f = CastTensor(s, DType::kFloat32);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const float* p = f->data<float>();
  EXPECT_FLOAT_EQ(p[0], 3.14f);
  EXPECT_FLOAT_EQ(p[1], 1000.f);
  EXPECT_FLOAT_EQ(p[2], -2.f);
  EXPECT_TRUE(std::isinf(p[3]) && p[3] > 0);
  EXPECT_TRUE(std::isinf(p[4]) && p[4] < 0);
  EXPECT_TRUE(std::isnan(p[5]));
  auto i = CastTensor(Str({"100.5", "-3"}, {2}), DType::kInt32);
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(Values<int32_t>(*i), (std::vector<int32_t>{100, -3}));
  auto bad = CastTensor(Str({"12", "twelve"}, {2}), DType::kFloat32);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("\"twelve\""), std::string::npos) << bad.status().ToString();
}

TEST(StringOps, CastNodeBothWays) {
  Tensor f = F32({1.5f, 2.f}, {2});
  auto s = RunFirst("Cast", {f}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kString))}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Strs(*s), (std::vector<std::string>{"1.5", "2.0"}));
  auto back = RunFirst("Cast", {*s}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kFloat64))}});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(Values<double>(*back), (std::vector<double>{1.5, 2.0}));
}

TEST(StringOps, EqualBroadcasts) {
  auto y = RunFirst("Equal", {Str({"a", "b", "c", "a"}, {2, 2}), Str({"a", "c"}, {2})});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Values<bool>(*y), (std::vector<bool>{true, false, false, false}));
}

TEST(StringOps, StringConcatBroadcastsAndKeepsUtf8) {
  auto y = RunFirst("StringConcat", {Str({"a", "β", ""}, {3}), Str({"_x"}, {1})}, {}, 20);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Strs(*y), (std::vector<std::string>{"a_x", "β_x", "_x"}));
  auto wrong = RunFirst("StringConcat", {Str({"a"}, {1}), F32({1.f}, {1})}, {}, 20);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().ToString().find("'n'"), std::string::npos) << wrong.status().ToString();
}

TEST(StringOps, StringSplitPadsAndCounts) {
  Tensor x = Str({"a,b,,c", "one", ""}, {3});
  auto r = RunValues("StringSplit", {x}, {{"delimiter", Attribute::String(",")}}, 20, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{3, 4}));
  EXPECT_EQ(Strs((*r)[0]), (std::vector<std::string>{"a", "b", "", "c", "one", "", "", "", "", "", "", ""}));
  EXPECT_EQ(Values<int64_t>((*r)[1]), (std::vector<int64_t>{4, 1, 1}));
  // No delimiter: runs of whitespace, and maxsplit keeps the rest whole (trailing space included).
  auto w = RunValues("StringSplit", {Str({"  a b  c  ", "   "}, {2})}, {{"maxsplit", Attribute::Int(1)}}, 20, 2);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(Strs((*w)[0]), (std::vector<std::string>{"a", "b  c  ", "", ""}));
  EXPECT_EQ(Values<int64_t>((*w)[1]), (std::vector<int64_t>{2, 0}));
  auto empty = RunValues("StringSplit", {Str({}, {0})}, {}, 20, 2);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ((*empty)[0].shape(), (Shape{0, 0}));
}

TEST(StringOps, RegexFullMatchUsesRe2) {
  Tensor x = Str({"www.google.com", "www.facebook.com", "www.bbc.co.uk", "google.com"}, {4});
  auto y = RunFirst("RegexFullMatch", {x}, {{"pattern", Attribute::String(R"(www\.[\w.-]+\.\bcom\b)")}}, 20);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Values<bool>(*y), (std::vector<bool>{true, true, false, false}));
  auto bad = RunFirst("RegexFullMatch", {x}, {{"pattern", Attribute::String("(unclosed")}}, 20);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("not a valid RE2 expression"), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().ToString().find("'n'"), std::string::npos) << bad.status().ToString();
  // Backreferences are not RE2: refused, not run with another engine's meaning.
  EXPECT_FALSE(RunFirst("RegexFullMatch", {x}, {{"pattern", Attribute::String(R"((a)\1)")}}, 20).ok());
}

TEST(StringOps, StringNormalizerDropsStopwordsAndChangesCase) {
  Tensor x = Str({"Monday", "tuesday", "MONDAY", "Élan"}, {4});
  Attrs a = {{"stopwords", Attribute::Strings({"monday"})},
             {"case_change_action", Attribute::String("UPPER")},
             {"is_case_sensitive", Attribute::Int(0)}};
  auto y = RunFirst("StringNormalizer", {x}, a, 10);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(Strs(*y), (std::vector<std::string>{"TUESDAY", "ÉLAN"}));
  a["is_case_sensitive"] = Attribute::Int(1);
  a["case_change_action"] = Attribute::String("LOWER");
  y = RunFirst("StringNormalizer", {x}, a, 10);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(Strs(*y), (std::vector<std::string>{"monday", "tuesday", "monday", "élan"}));
  // Everything dropped: one empty string, keeping the [1, C] form.
  auto all = RunFirst("StringNormalizer", {Str({"a", "A"}, {1, 2})}, {{"stopwords", Attribute::Strings({"a"})}}, 10);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->shape(), (Shape{1, 1}));
  EXPECT_EQ(Strs(*all), (std::vector<std::string>{""}));
  EXPECT_FALSE(RunFirst("StringNormalizer", {Str({"a", "b"}, {2, 1})}, {}, 10).ok());
  EXPECT_FALSE(RunFirst("StringNormalizer", {x}, {{"case_change_action", Attribute::String("TITLE")}}, 10).ok());
}

TEST(StringOps, LabelEncoderMapsEveryDirection) {
  Tensor s = Str({"a", "b", "zz"}, {3});
  Attrs a = {{"keys_strings", Attribute::Strings({"a", "b"})}, {"values_int64s", Attribute::Ints({5, 7})}};
  auto r = RunIn("ai.onnx.ml", "LabelEncoder", {&s}, a, 1, 17);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values<int64_t>((*r)[0]), (std::vector<int64_t>{5, 7, -1}));
  Tensor i = Tensor::FromVector(DType::kInt64, std::vector<int64_t>{7, 3}, {2});
  Attrs b = {{"keys_int64s", Attribute::Ints({7})}, {"values_strings", Attribute::Strings({"seven"})}};
  r = RunIn("ai.onnx.ml", "LabelEncoder", {&i}, b, 1, 17);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Strs((*r)[0]), (std::vector<std::string>{"seven", "_Unused"}));
  // Float keys: NaN finds NaN, -0 finds 0.
  Tensor f = F32({std::numeric_limits<float>::quiet_NaN(), -0.f, 2.f}, {3});
  Attrs c = {{"keys_floats", Attribute::Floats({std::numeric_limits<float>::quiet_NaN(), 0.f})},
             {"values_int64s", Attribute::Ints({1, 2})},
             {"default_int64", Attribute::Int(9)}};
  r = RunIn("ai.onnx.ml", "LabelEncoder", {&f}, c, 1, 17);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values<int64_t>((*r)[0]), (std::vector<int64_t>{1, 2, 9}));
  // Mismatched key type and key/value counts are errors naming the node.
  Attrs bad = {{"keys_strings", Attribute::Strings({"a"})}, {"values_int64s", Attribute::Ints({1, 2})}};
  r = RunIn("ai.onnx.ml", "LabelEncoder", {&s}, bad, 1, 17);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("1 keys but 2 values"), std::string::npos) << r.status().ToString();
  r = RunIn("ai.onnx.ml", "LabelEncoder", {&i}, a, 1, 17);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("'n'"), std::string::npos) << r.status().ToString();
}

TEST(StringOps, CategoryMapperBothWays) {
  Attrs a = {{"cats_strings", Attribute::Strings({"cat", "dog"})}, {"cats_int64s", Attribute::Ints({1, 2})}};
  Tensor s = Str({"dog", "cow"}, {2});
  auto r = RunIn("ai.onnx.ml", "CategoryMapper", {&s}, a, 1, 17);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values<int64_t>((*r)[0]), (std::vector<int64_t>{2, -1}));
  Tensor i = Tensor::FromVector(DType::kInt64, std::vector<int64_t>{1, 5}, {2});
  r = RunIn("ai.onnx.ml", "CategoryMapper", {&i}, a, 1, 17);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Strs((*r)[0]), (std::vector<std::string>{"cat", "_Unused"}));
}

TEST(StringOps, LinearClassifierWithStringLabels) {
  Tensor x = F32({1.f, 0.f, 0.f, 1.f, 3.f, 2.f}, {3, 2});
  Attrs a = {{"coefficients", Attribute::Floats({1.f, 0.f, 0.f, 1.f})},
             {"intercepts", Attribute::Floats({0.f, 0.f})},
             {"classlabels_strings", Attribute::Strings({"cat", "dog"})}};
  auto r = RunIn("ai.onnx.ml", "LinearClassifier", {&x}, a, 2, 17);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Strs((*r)[0]), (std::vector<std::string>{"cat", "dog", "cat"}));
  EXPECT_EQ((*r)[1].shape(), (Shape{3, 2}));
  a["classlabels_ints"] = Attribute::Ints({1, 2});
  r = RunIn("ai.onnx.ml", "LinearClassifier", {&x}, a, 2, 17);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("both given"), std::string::npos) << r.status().ToString();
}

TEST(StringOps, OpsThatMoveBytesRefuseStrings) {
  Tensor s = Str({"a", "b"}, {2});
  for (const char* op : {"Relu", "Transpose", "Concat", "Neg"}) {
    Attrs attrs;
    if (std::string(op) == "Concat") attrs["axis"] = Attribute::Int(0);
    auto r = RunFirst(op, {s}, attrs);
    ASSERT_FALSE(r.ok()) << op;
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << op << ": " << r.status().ToString();
    EXPECT_NE(r.status().ToString().find("string tensor"), std::string::npos) << r.status().ToString();
  }
  // Ops that only look at the shape or share storage take them.
  auto id = RunFirst("Identity", {s});
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(Strs(*id), (std::vector<std::string>{"a", "b"}));
  auto rs = RunFirst("Reshape", {s, Tensor::FromVector(DType::kInt64, std::vector<int64_t>{1, 2}, {2})});
  ASSERT_TRUE(rs.ok()) << rs.status().ToString();
  EXPECT_EQ(rs->shape(), (Shape{1, 2}));
  auto shape = RunFirst("Shape", {s});
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(Values<int64_t>(*shape), (std::vector<int64_t>{2}));
}

TEST(StringTensor, NpyRoundTripsUnicodeAndBytes) {
  Tensor u = Str({"a", "été", "", "日本"}, {2, 2});
  const std::string bytes = SerializeNpy(u);
  EXPECT_NE(bytes.find("'descr': '<U3'"), std::string::npos);
  auto back = ParseNpy(bytes, "u.npy");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->shape(), (Shape{2, 2}));
  EXPECT_EQ(Strs(*back), Strs(u));
  // Not UTF-8: written as a bytes array, read back byte for byte.
  Tensor b = Str({std::string("\xff\x00x", 3), "ok"}, {2});
  const std::string bb = SerializeNpy(b);
  EXPECT_NE(bb.find("'descr': '|S3'"), std::string::npos);
  auto bback = ParseNpy(bb, "b.npy");
  ASSERT_TRUE(bback.ok()) << bback.status().ToString();
  EXPECT_EQ(bback->strings()[1], "ok");
  EXPECT_EQ(bback->strings()[0], std::string("\xff\x00x", 3));
  // Pickled object arrays and truncated data are refused with the file named.
  std::string obj = bytes;
  obj.replace(obj.find("'<U3'"), 5, "'|O' ");
  auto o = ParseNpy(obj, "o.npy");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().ToString().find("o.npy"), std::string::npos);
  EXPECT_NE(o.status().ToString().find("pickled"), std::string::npos) << o.status().ToString();
  auto cut = ParseNpy(bytes.substr(0, bytes.size() - 5), "cut.npy");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().ToString().find("cut.npy"), std::string::npos);
}

TEST(StringTensor, TextFormRoundTrips) {
  auto g = ir::ParseGraph(R"(graph g (x: string[2]) -> (y: bool[2]) {
    c = const string[2] {"a\"b", "é"}
    y = Equal(x, c)
  })");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::string text = ir::PrintGraph(**g);
  EXPECT_NE(text.find(R"("a\"b")"), std::string::npos) << text;
  auto again = ir::ParseGraph(text);
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << text;
  EXPECT_EQ(ir::PrintGraph(**again), text);
}

TEST(StringOps, CompressKeepsTheChosenStrings) {
  const Tensor text = Tensor::FromStrings({"a", "bb", "", "dddd", "e", "f"}, {3, 2});
  const Tensor rows = Tensor::FromVector<bool>(DType::kBool, {true, false, true}, {3});
  auto r = RunValues("Compress", {text, rows}, {{"axis", Attribute::Int(0)}}, 17);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(std::vector<std::string>((*r)[0].strings(), (*r)[0].strings() + 4),
            (std::vector<std::string>{"a", "bb", "e", "f"}));
  // No axis: over the flattened elements; axis 1.
  const Tensor pick = Tensor::FromVector<bool>(DType::kBool, {false, true, false, true}, {4});
  auto flat = RunValues("Compress", {text, pick}, {}, 17);
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  EXPECT_EQ(std::vector<std::string>((*flat)[0].strings(), (*flat)[0].strings() + 2),
            (std::vector<std::string>{"bb", "dddd"}));
  auto cols = RunValues("Compress", {text, Tensor::FromVector<bool>(DType::kBool, {false, true}, {2})},
                        {{"axis", Attribute::Int(1)}}, 17);
  ASSERT_TRUE(cols.ok()) << cols.status().ToString();
  EXPECT_EQ(std::vector<std::string>((*cols)[0].strings(), (*cols)[0].strings() + 3),
            (std::vector<std::string>{"bb", "dddd", "f"}));
}

}  // namespace
}  // namespace sampan::ops
