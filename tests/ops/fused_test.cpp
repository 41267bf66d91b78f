// The fused ops' activation (ops/fused.h): its one parser, names, parameter counts and the
// errors a fused node's inference reports for a bad `activation` / `activation_params`.
#include "ops/fused.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

struct Known {
  const char* name;
  Activation kind;
  std::vector<float> params;
};

// Every activation the fused epilogues run, with a valid parameter list.
const std::vector<Known>& AllKnown() {
  static const std::vector<Known> k = {
      {"", Activation::kNone, {}},
      {"Relu", Activation::kRelu, {}},
      {"LeakyRelu", Activation::kLeakyRelu, {0.1f}},
      {"Clip", Activation::kClip, {-0.5f, 6.f}},
      {"Sigmoid", Activation::kSigmoid, {}},
      {"SiLU", Activation::kSiLU, {}},
      {"Tanh", Activation::kTanh, {}},
      {"HardSigmoid", Activation::kHardSigmoid, {0.2f, 0.5f}},
      {"HardSwish", Activation::kHardSwish, {}},
      {"Gelu", Activation::kGelu, {}},
      {"GeluTanh", Activation::kGeluTanh, {}},
  };
  return k;
}

TEST(FusedActivation, ParsesEveryName) {
  for (const Known& k : AllKnown()) {
    SCOPED_TRACE(k.name);
    auto a = ParseActivation(k.name, k.params);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->kind, k.kind);
    EXPECT_EQ(a->p0, k.params.size() > 0 ? k.params[0] : 0.f);
    EXPECT_EQ(a->p1, k.params.size() > 1 ? k.params[1] : 0.f);
    EXPECT_EQ(std::string(ActivationName(k.kind)), k.name);
    EXPECT_EQ(ActivationParamCount(k.kind), k.params.size());
    EXPECT_EQ(ActivationParams(*a), k.params);
  }
}

TEST(FusedActivation, AttributesRoundTrip) {
  for (const Known& k : AllKnown()) {
    if (k.kind == Activation::kNone) continue;
    SCOPED_TRACE(k.name);
    auto m = MakeGraph("FusedMatMul", {TT({K(2), K(3)}), TT({K(3), K(4)})}, {}, 17, 1);
    const FusedActivation act{k.kind, k.params.size() > 0 ? k.params[0] : 0.f, k.params.size() > 1 ? k.params[1] : 0.f};
    SetActivationAttrs(act, m->node->attrs);
    EXPECT_EQ(m->node->attr_string("activation", "?"), k.name);
    EXPECT_EQ(m->node->has_attr("activation_params"), !k.params.empty());
    auto a = ReadActivation(*m->node);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->kind, k.kind);
    EXPECT_EQ(ActivationParams(*a), k.params);
  }
}

TEST(FusedActivation, AbsentIsNone) {
  auto m = MakeGraph("FusedMatMul", {TT({K(2), K(3)}), TT({K(3), K(4)})}, {}, 17, 1);
  auto a = ReadActivation(*m->node);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->kind, Activation::kNone);
  EXPECT_EQ(a->p0, 0.f);
  EXPECT_EQ(a->p1, 0.f);
}

// The attributes have no defaults: ONNX's (LeakyRelu alpha 0.01, HardSigmoid 0.2/0.5, Clip's
// open range) are filled in by the pass that fuses the ONNX op (passes/fusion_util.cpp).
TEST(FusedActivation, WrongParameterCount) {
  const std::vector<std::pair<std::string, std::vector<float>>> wrong = {
      {"LeakyRelu", {}}, {"Clip", {0.f}}, {"HardSigmoid", {}}, {"Relu", {1.f}}, {"", {1.f}}, {"Clip", {0.f, 1.f, 2.f}}};
  for (const auto& [name, params] : wrong) {
    SCOPED_TRACE(name);
    auto a = ParseActivation(name, params);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find("activation_params"), std::string::npos) << a.status().message();
    EXPECT_NE(a.status().message().find(StrCat("got ", params.size())), std::string::npos) << a.status().message();
  }
}

TEST(FusedActivation, UnknownName) {
  for (const char* name : {"relu", "Swish", "Elu", "None", "PRelu"}) {
    auto a = ParseActivation(name, {});
    ASSERT_FALSE(a.ok()) << name;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find(StrCat("unknown fused activation '", name, "'")), std::string::npos)
        << a.status().message();
  }
}

TEST(FusedActivation, ErrorsNameTheNode) {
  auto m = MakeGraph("FusedMatMul", {TT({K(2), K(3)}), TT({K(3), K(4)})},
                     {{"activation", ir::Attribute::String("LeakyRelu")}}, 17, 1);
  m->node->domain = kSampanDomain;
  m->g.opsets[kSampanDomain] = 1;
  auto a = ReadActivation(*m->node);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find(m->node->Label()), std::string::npos) << a.status().message();
  EXPECT_NE(a.status().message().find("activation_params"), std::string::npos) << a.status().message();
  // The fused op's inference refuses it with the same reason.
  Status st = InferTypes(m->g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(m->node->Label()), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("takes 1 value, got 0"), std::string::npos) << st.message();
}

TEST(FusedActivation, Apply) {
  const float x = -1.5f, y = 2.f;
  auto at = [](Activation kind, float v, float p0 = 0.f, float p1 = 0.f) {
    return ApplyActivation(FusedActivation{kind, p0, p1}, v);
  };
  EXPECT_EQ(at(Activation::kNone, x), x);
  EXPECT_EQ(at(Activation::kRelu, x), 0.f);
  EXPECT_EQ(at(Activation::kRelu, y), y);
  EXPECT_FLOAT_EQ(at(Activation::kLeakyRelu, x, 0.1f), -0.15f);
  EXPECT_EQ(at(Activation::kClip, x, -1.f, 1.f), -1.f);
  EXPECT_EQ(at(Activation::kClip, y, -1.f, 1.f), 1.f);
  EXPECT_FLOAT_EQ(at(Activation::kSigmoid, y), 1.f / (1.f + std::exp(-y)));
  EXPECT_FLOAT_EQ(at(Activation::kSiLU, y), y / (1.f + std::exp(-y)));
  EXPECT_FLOAT_EQ(at(Activation::kTanh, x), std::tanh(x));
  EXPECT_FLOAT_EQ(at(Activation::kHardSigmoid, x, 0.2f, 0.5f), 0.2f);
  EXPECT_FLOAT_EQ(at(Activation::kHardSwish, x), x * (x / 6.f + 0.5f));
  EXPECT_FLOAT_EQ(at(Activation::kGelu, y), 0.5f * y * (1.f + std::erf(y / std::sqrt(2.f))));
  EXPECT_NEAR(at(Activation::kGeluTanh, y), 1.9545977f, 1e-6f);
}

}  // namespace
}  // namespace sampan::ops
