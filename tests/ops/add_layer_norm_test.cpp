// sampan::AddLayerNorm's optional forms: B absent (a plain LayerNormalization) and the quantized
// copy (YScale -> YQ), which must equal QuantizeLinear of the norm's output bit for bit; and the
// inference errors of a half-given or per-axis copy.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>

#include "ir/text.h"
#include "ops/run_node.h"
#include "passes/pass_test_util.h"

namespace sampan::ops {
namespace {

using passes::testing::MustParse;
using passes::testing::RunReference;

std::map<std::string, Tensor> NormInputs() {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.f, 2.f);
  std::map<std::string, Tensor> in;
  for (const auto& [name, shape] :
       std::map<std::string, Shape>{{"x", {3, 16}}, {"r", {3, 16}}, {"sc", {16}}, {"bi", {16}}}) {
    Tensor t = Tensor::Alloc(DType::kFloat32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = n(rng);
    in[name] = std::move(t);
  }
  return in;
}

TEST(AddLayerNorm, QuantizedCopyIsQuantizeLinearOfTheNorm) {
  for (const char* b : {"r", "_"}) {
    const std::string fused = StrCat(R"(
      opset 21
      graph g (x: f32[3,16], r: f32[3,16], sc: f32[16], bi: f32[16]) -> (y, yq) {
        ys = const f32[] {0.0125}
        y, yq = sampan::AddLayerNorm(x, )",
                                     b, R"(, sc, bi, ys) {axis=-1, epsilon=1e-5, output_dtype=17}
      })");
    const std::string sum = std::string(b) == "r" ? "s = Add(x, r)\n" : "s = Identity(x)\n";
    const std::string plain = StrCat(R"(
      opset 21
      graph g (x: f32[3,16], r: f32[3,16], sc: f32[16], bi: f32[16]) -> (y, yq) {
        ys = const f32[] {0.0125}
        )",
                                     sum, R"(
        y = LayerNormalization(s, sc, bi) {axis=-1, epsilon=1e-5}
        yq = sampan::QuantizeLinear(y, ys) {output_dtype=17}
      })");
    const auto in = NormInputs();
    auto got = RunReference(MustParse(fused), in);
    auto want = RunReference(MustParse(plain), in);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ASSERT_EQ(got->size(), 2u);
    EXPECT_EQ((*got)[1].dtype(), DType::kFloat8E4M3FN);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ((*got)[i].nbytes(), (*want)[i].nbytes());
      EXPECT_EQ(0, std::memcmp((*got)[i].raw(), (*want)[i].raw(), (*want)[i].nbytes())) << "B " << b << " output " << i;
    }
  }
}

TEST(AddLayerNorm, QuantizedCopyErrors) {
  auto infer = [](const std::string& body) {
    auto g = ir::ParseGraph(StrCat("opset 21\ngraph g (x: f32[3,16], sc: f32[16]) -> (y, yq) {\n", body, "\n}\n"));
    return g.ok() ? ops::InferTypes(**g) : g.status();
  };
  Status half = infer("y, yq = sampan::AddLayerNorm(x, _, sc) {output_dtype=17}");
  EXPECT_FALSE(half.ok());
  EXPECT_NE(half.message().find("come together"), std::string::npos) << half.ToString();
  Status per_axis = infer(
      "ys = const f32[16] {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}\n"
      "y, yq = sampan::AddLayerNorm(x, _, sc, _, ys) {output_dtype=17}");
  EXPECT_FALSE(per_axis.ok());
  EXPECT_NE(per_axis.message().find("one value"), std::string::npos) << per_axis.ToString();
  Status no_scale = infer("y = sampan::AddLayerNorm(x, sc)");
  EXPECT_FALSE(no_scale.ok());
}

}  // namespace
}  // namespace sampan::ops
