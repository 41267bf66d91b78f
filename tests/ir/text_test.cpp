// The IR text form: printer/parser round trips, every attribute type, errors with positions,
// and garbage that must never crash the parser.
#include "ir/text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "ir/graph.h"

namespace sampan::ir {
namespace {

std::unique_ptr<Graph> MustParse(std::string_view text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << text;
  if (!g.ok()) return std::make_unique<Graph>();
  return std::move(g).value();
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
}

bool SameAttr(const Attribute& a, const Attribute& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case AttrType::kInt:
      return a.i == b.i;
    case AttrType::kFloat:
      return SameFloat(a.f, b.f);
    case AttrType::kString:
      return a.s == b.s;
    case AttrType::kTensor:
      return SameTensor(a.t, b.t);
    case AttrType::kInts:
      return a.ints == b.ints;
    case AttrType::kFloats:
      if (a.floats.size() != b.floats.size()) return false;
      for (size_t i = 0; i < a.floats.size(); ++i)
        if (!SameFloat(a.floats[i], b.floats[i])) return false;
      return true;
    case AttrType::kStrings:
      return a.strings == b.strings;
    case AttrType::kTensors:
      if (a.tensors.size() != b.tensors.size()) return false;
      for (size_t i = 0; i < a.tensors.size(); ++i)
        if (!SameTensor(a.tensors[i], b.tensors[i])) return false;
      return true;
    default:
      return false;
  }
}

bool SameType(const TensorType& a, const TensorType& b) {
  return a.dtype == b.dtype && a.dims == b.dims;
}

std::string Name(const Value* v) {
  return v ? v->name() : "<none>";
}

// Structural equality: names, types, constant data, inputs/outputs, nodes in order.
::testing::AssertionResult SameGraph(const Graph& a, const Graph& b) {
  auto fail = [](auto... what) { return ::testing::AssertionFailure() << StrCat(what...); };
  if (a.name != b.name) return fail("name ", a.name, " vs ", b.name);
  if (a.opsets != b.opsets) return fail("opsets differ");
  auto same_value = [&](const Value* x, const Value* y) -> std::string {
    if (!x || !y) return (x == y) ? "" : StrCat("value ", Name(x), " vs ", Name(y));
    if (x->name() != y->name()) return StrCat("value ", x->name(), " vs ", y->name());
    if (!SameType(x->type, y->type))
      return StrCat("type of ", x->name(), ": ", PrintType(x->type), " vs ", PrintType(y->type));
    if (!SameTensor(x->data, y->data)) return StrCat("data of ", x->name());
    return "";
  };
  if (a.inputs().size() != b.inputs().size()) return fail("input count");
  for (size_t i = 0; i < a.inputs().size(); ++i)
    if (auto d = same_value(a.inputs()[i], b.inputs()[i]); !d.empty()) return fail("input: ", d);
  if (a.outputs().size() != b.outputs().size()) return fail("output count");
  for (size_t i = 0; i < a.outputs().size(); ++i)
    if (auto d = same_value(a.outputs()[i], b.outputs()[i]); !d.empty()) return fail("output: ", d);
  if (a.nodes().size() != b.nodes().size()) return fail("node count ", a.nodes().size(), " vs ", b.nodes().size());
  for (size_t n = 0; n < a.nodes().size(); ++n) {
    const Node& x = *a.nodes()[n];
    const Node& y = *b.nodes()[n];
    if (x.op_type != y.op_type || x.domain != y.domain || x.name != y.name)
      return fail("node ", n, ": ", x.domain, "::", x.op_type, " '", x.name, "' vs ", y.domain, "::", y.op_type, " '",
                  y.name, "'");
    if (x.num_inputs() != y.num_inputs() || x.num_outputs() != y.num_outputs()) return fail("node ", n, " arity");
    for (size_t i = 0; i < x.num_inputs(); ++i)
      if (auto d = same_value(x.input(i), y.input(i)); !d.empty()) return fail("node ", n, " input ", i, ": ", d);
    for (size_t i = 0; i < x.num_outputs(); ++i)
      if (auto d = same_value(x.output(i), y.output(i)); !d.empty()) return fail("node ", n, " output ", i, ": ", d);
    if (x.attrs.size() != y.attrs.size()) return fail("node ", n, " attribute count");
    for (const auto& [k, v] : x.attrs) {
      auto it = y.attrs.find(k);
      if (it == y.attrs.end() || !SameAttr(v, it->second)) return fail("node ", n, " attribute ", k);
    }
  }
  // Constants (including unused ones).
  size_t ca = 0, cb = 0;
  for (const Value* v : a.values()) {
    if (!v->is_constant()) continue;
    ++ca;
    if (auto d = same_value(v, b.FindValue(v->name())); !d.empty()) return fail("constant: ", d);
  }
  for (const Value* v : b.values()) cb += v->is_constant();
  if (ca != cb) return fail("constant count ", ca, " vs ", cb);
  return ::testing::AssertionSuccess();
}

TEST(IrText, ExampleReadsAndPrintsBack) {
  const std::string text =
      "opset 17\n"
      "graph resnet_block (x: f32[N,64,56,56]) -> (y) {\n"
      "  w1 = const f32[64,64,3,3]\n"
      "  b = const f32[3] {0.5, 1, -2}\n"
      "  c = Conv(x, w1) {pads=[1, 1, 1, 1], strides=[1, 1]}\n"
      "  y = Relu(c)\n"
      "}\n";
  auto g = MustParse(text);
  EXPECT_EQ(PrintGraph(*g), text);
  EXPECT_EQ(g->name, "resnet_block");
  EXPECT_EQ(g->opset(), 17);
  ASSERT_EQ(g->inputs().size(), 1u);
  EXPECT_EQ(PrintType(g->inputs()[0]->type), "f32[N,64,56,56]");
  EXPECT_EQ((*g->inputs()[0]->type.dims)[0], Dim::Symbol("N"));
  const Value* w1 = g->FindValue("w1");
  ASSERT_TRUE(w1 && w1->is_constant());
  EXPECT_EQ(w1->data.shape(), (Shape{64, 64, 3, 3}));
  EXPECT_EQ(w1->data.data<float>()[100], 0.f);  // no data: zeros
  const Value* b = g->FindValue("b");
  ASSERT_TRUE(b && b->is_constant());
  EXPECT_EQ(b->data.data<float>()[0], 0.5f);
  EXPECT_EQ(b->data.data<float>()[2], -2.f);
  ASSERT_EQ(g->nodes().size(), 2u);
  const Node& conv = *g->nodes()[0];
  EXPECT_EQ(conv.op_type, "Conv");
  EXPECT_EQ(conv.attr_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(conv.input(0), g->inputs()[0]);
  EXPECT_EQ(g->outputs()[0], g->nodes()[1]->output(0));
  EXPECT_TRUE(Verify(*g).ok()) << Verify(*g).ToString();
}

TEST(IrText, NormalizesSpacingCommentsAndSyntaxVariants) {
  auto g = MustParse(R"(# leading comment
    opset 13 graph g(x:f32[2,3],  "my input" : i64)->(y,z){
      y=Relu( x )   # trailing comment
      z = ai.onnx::Identity("my input") {alpha = 2, beta=1e-3, gamma=-0.5, s="a\tb", fs = floats[1, 2]}
    })");
  EXPECT_EQ(PrintGraph(*g),
            "opset 13\n"
            "graph g (x: f32[2,3], \"my input\": i64[*]) -> (y, z) {\n"
            "  y = Relu(x)\n"
            "  z = Identity(\"my input\") {alpha=2, beta=0.001, fs=[1.0, 2.0], gamma=-0.5, s=\"a\\tb\"}\n"
            "}\n");
}

// A graph exercising every printable feature, built through the API.
std::unique_ptr<Graph> BuildEverything() {
  auto g = std::make_unique<Graph>();
  g->name = "every thing";
  g->opsets[""] = 18;
  g->opsets["com.microsoft"] = 1;
  TensorType xt;
  xt.dtype = DType::kFloat16;
  xt.dims = Dims{Dim::Symbol("batch"), Dim::Known(3), Dim::Unknown(), Dim::Symbol("seq len")};
  Value* x = g->AddValue("x", xt).value();
  TensorType mt;
  mt.dtype = DType::kBool;  // unknown rank
  Value* mask = g->AddValue("/model/mask:0", mt).value();
  Value* untyped = g->AddValue("_").value();  // named like the omitted-input marker
  g->inputs() = {x, mask, untyped};

  Value* c_f32 =
      g->AddConstant("c_f32", Tensor::FromVector<float>(DType::kFloat32, {0.1f, -0.f, 1e-40f, 3.4e38f}, {2, 2}))
          .value();
  Tensor specials = Tensor::Alloc(DType::kFloat32, {3});
  specials.mutable_data<float>()[0] = INFINITY;
  specials.mutable_data<float>()[1] = -INFINITY;
  specials.mutable_data<float>()[2] = NAN;
  Value* c_special = g->AddConstant("c_special", specials).value();
  Value* c_f16 =
      g->AddConstant("c_f16", Tensor::FromVector<float>(DType::kFloat16, {0.1f, 65504.f, 6e-8f}, {3})).value();
  Value* c_bf16 = g->AddConstant("c_bf16", Tensor::FromVector<float>(DType::kBFloat16, {0.1f, -3.5f}, {2})).value();
  Value* c_f64 = g->AddConstant("c_f64", Tensor::FromVector<double>(DType::kFloat64, {0.1, 1e300}, {2})).value();
  Value* c_i64 =
      g->AddConstant(
           "c_i64", Tensor::FromVector<int64_t>(
                        DType::kInt64, {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}, {2}))
          .value();
  Value* c_u64 =
      g->AddConstant("c_u64", Tensor::FromVector<uint64_t>(DType::kUInt64, {std::numeric_limits<uint64_t>::max()}, {1}))
          .value();
  Value* c_i8 = g->AddConstant("c_i8", Tensor::FromVector<int>(DType::kInt8, {-128, 127}, {2})).value();
  Value* c_u8 = g->AddConstant("c_u8", Tensor::FromVector<int>(DType::kUInt8, {0, 255}, {2})).value();
  Value* c_bool = g->AddConstant("c_bool", Tensor::FromVector<int>(DType::kBool, {1, 0}, {2})).value();
  Value* c_scalar = g->AddConstant("c_scalar", Tensor::FromVector<int32_t>(DType::kInt32, {-7}, {})).value();
  Value* c_empty = g->AddConstant("c_empty", Tensor::Alloc(DType::kInt64, {0})).value();
  Tensor big = Tensor::Alloc(DType::kFloat32, {4, 8});
  for (int i = 0; i < 32; ++i) big.mutable_data<float>()[i] = 0.25f;
  Value* c_splat = g->AddConstant("c_splat", big).value();
  (void)c_special;

  auto node = [&](const std::string& op, std::vector<Value*> in, std::vector<Value*> out) {
    return g->AddNode(op, in, out).value();
  };
  TensorType at;
  at.dtype = DType::kFloat32;
  at.dims = Dims{Dim::Symbol("batch"), Dim::Known(4)};
  Value* a = g->AddValue("a", at).value();
  Value* b = g->AddValue("b").value();
  Value* cc = g->AddValue("graph").value();  // a keyword as a name
  Node* n1 = node("Split", {x, nullptr, c_f32}, {a, nullptr, b});
  n1->name = "split/0";
  n1->attrs["axis"] = Attribute::Int(-1);
  n1->attrs["f"] = Attribute::Float(1.f);
  n1->attrs["f_small"] = Attribute::Float(1e-7f);
  n1->attrs["f_inf"] = Attribute::Float(-INFINITY);
  n1->attrs["s"] = Attribute::String("quote\" back\\ nl\n ctl\x01 utf8 \xc3\xa9");
  n1->attrs["ints"] = Attribute::Ints({1, -2, 3});
  n1->attrs["floats"] = Attribute::Floats({0.5f, -1.f, 3.f});
  n1->attrs["strings"] = Attribute::Strings({"a", "", "c d"});
  n1->attrs["no_ints"] = Attribute::Ints({});
  n1->attrs["no_floats"] = Attribute::Floats({});
  n1->attrs["no_strings"] = Attribute::Strings({});
  n1->attrs["value"] = Attribute::OfTensor(Tensor::FromVector<int64_t>(DType::kInt64, {1, 2, 3}, {3}));
  Attribute ts;
  ts.type = AttrType::kTensors;
  ts.tensors = {Tensor::FromVector<float>(DType::kFloat32, {1.5f}, {}),
                Tensor::FromVector<int>(DType::kInt32, {4, 5}, {2})};
  n1->attrs["tensors"] = ts;
  Attribute no_tensors;
  no_tensors.type = AttrType::kTensors;
  n1->attrs["no_tensors"] = no_tensors;
  n1->attrs["weird key"] = Attribute::Int(0);
  Node* n2 = node(
      "FusedThing",
      {a, mask, c_f16, c_bf16, c_f64, c_i64, c_u64, c_i8, c_u8, c_bool, c_scalar, c_empty, c_splat, untyped}, {cc});
  n2->domain = "com.microsoft";
  Node* n3 = node("Custom Op", {b}, {});  // an op type needing quotes, no outputs
  n3->domain = "my domain";
  g->outputs() = {cc, a};
  return g;
}

TEST(IrText, ApiGraphRoundTripsStructurally) {
  auto g = BuildEverything();
  const std::string text = PrintGraph(*g);
  auto back = ParseGraph(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_TRUE(SameGraph(*g, **back)) << text;
  // And the printed form is a fixed point.
  EXPECT_EQ(PrintGraph(**back), text);
}

TEST(IrText, PrintedFormOfEverything) {
  const std::string text = PrintGraph(*BuildEverything());
  EXPECT_NE(text.find("opset 18\nopset com.microsoft 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("graph \"every thing\" (x: f16[batch,3,?,\"seq len\"], \"/model/mask:0\": bool[*], \"_\")"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("-> (graph, a)"), std::string::npos) << text;
  EXPECT_NE(text.find("c_special = const f32[3] {inf, -inf, nan}"), std::string::npos) << text;
  EXPECT_NE(text.find("c_bool = const bool[2] {true, false}"), std::string::npos) << text;
  EXPECT_NE(text.find("c_u64 = const u64[1] {18446744073709551615}"), std::string::npos) << text;
  EXPECT_NE(text.find("c_i64 = const i64[2] {-9223372036854775808, 9223372036854775807}"), std::string::npos) << text;
  EXPECT_NE(text.find("c_scalar = const i32[] {-7}"), std::string::npos) << text;
  EXPECT_NE(text.find("c_empty = const i64[0] {}"), std::string::npos) << text;
  EXPECT_NE(text.find("c_splat = const f32[4,8] {0.25}"), std::string::npos) << text;
  EXPECT_NE(text.find("a: f32[batch,4], _, b = Split(x, _, c_f32) {"), std::string::npos) << text;
  EXPECT_NE(text.find("f=1.0,"), std::string::npos) << text;
  EXPECT_NE(text.find("no_floats=floats[]"), std::string::npos) << text;
  EXPECT_NE(text.find("tensors=[tensor f32[] {1.5}, tensor i32[2] {4, 5}]"), std::string::npos) << text;
  EXPECT_NE(text.find("value=tensor i64[3] {1, 2, 3}"), std::string::npos) << text;
  EXPECT_NE(text.find("} @\"split/0\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("graph = com.microsoft::FusedThing(a, \"/model/mask:0\""), std::string::npos) << text;
  EXPECT_NE(text.find("  \"my domain\"::\"Custom Op\"(b)\n"), std::string::npos) << text;
}

TEST(IrText, LargeConstantsPrintWithoutDataUnlessAsked) {
  auto g = std::make_unique<Graph>();
  Tensor t = Tensor::Alloc(DType::kFloat32, {5, 5});
  for (int i = 0; i < 25; ++i) t.mutable_data<float>()[i] = static_cast<float>(i);
  Value* w = g->AddConstant("w", t).value();
  Value* y = g->AddValue("y").value();
  (void)g->AddNode("Identity", {w}, {y}).value();
  g->outputs() = {y};
  const std::string brief = PrintGraph(*g);
  EXPECT_NE(brief.find("w = const f32[5,5]\n"), std::string::npos) << brief;
  PrintOptions all;
  all.max_elements = -1;
  const std::string full = PrintGraph(*g, all);
  EXPECT_NE(full.find("{0, 1, 2, 3,"), std::string::npos) << full;
  auto back = ParseGraph(full);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(SameGraph(*g, **back));
}

TEST(IrText, HalfAndBFloat16ValuesRoundTripExactly) {
  // Every finite half and a sweep of bfloat16 bit patterns survive print -> parse.
  auto g = std::make_unique<Graph>();
  Tensor h = Tensor::Alloc(DType::kFloat16, {0x7c00});
  for (int i = 0; i < 0x7c00; ++i) h.mutable_data<Half>()[i].bits = static_cast<uint16_t>(i);
  Tensor bf = Tensor::Alloc(DType::kBFloat16, {0x7f80 / 7});
  for (int i = 0; i < 0x7f80 / 7; ++i) bf.mutable_data<BFloat16>()[i].bits = static_cast<uint16_t>(0x8000 | (i * 7));
  (void)g->AddConstant("h", h).value();
  (void)g->AddConstant("bf", bf).value();
  PrintOptions all;
  all.max_elements = -1;
  auto back = ParseGraph(PrintGraph(*g, all));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(SameGraph(*g, **back));
}

TEST(IrText, SplatRandomAndZeros) {
  auto g = MustParse(R"(graph (x: f32[3]) -> (y) {
      ones = const f32[2,3] {1}
      r = const f32[64] random
      r2 = const f32[64] random
      ri = const i32[16] random
      z = const i64[4]
      y = Add(x, ones)
    })");
  const Tensor& ones = g->FindValue("ones")->data;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ones.data<float>()[i], 1.f);
  const Tensor& r = g->FindValue("r")->data;
  bool differs = false;
  for (int i = 0; i < 64; ++i) {
    EXPECT_GE(r.data<float>()[i], -1.f);
    EXPECT_LE(r.data<float>()[i], 1.f);
    differs |= r.data<float>()[i] != g->FindValue("r2")->data.data<float>()[i];
  }
  EXPECT_TRUE(differs) << "random constants with different names should differ";
  for (int i = 0; i < 16; ++i) {
    EXPECT_GE(g->FindValue("ri")->data.data<int32_t>()[i], 0);
    EXPECT_LE(g->FindValue("ri")->data.data<int32_t>()[i], 9);
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(g->FindValue("z")->data.data<int64_t>()[i], 0);
  // Deterministic: the same text gives the same random data.
  auto g2 = MustParse(R"(graph (x: f32[3]) -> (r) { r = const f32[64] random })");
  EXPECT_TRUE(SameTensor(r, g2->FindValue("r")->data));
}

TEST(IrText, ForwardReferencesAndCyclesParseButDoNotVerify) {
  // Out of order is fine: the parser keeps node order, TopologicalSort fixes it.
  auto g = MustParse("graph (x: f32[2]) -> (z) {\n  z = Relu(y)\n  y = Neg(x)\n}\n");
  EXPECT_FALSE(Verify(*g).ok());
  ASSERT_TRUE(g->TopologicalSort().ok());
  EXPECT_TRUE(Verify(*g).ok()) << Verify(*g).ToString();
  EXPECT_EQ(g->nodes()[0]->op_type, "Neg");

  auto cyc = MustParse("graph (x: f32[2]) -> (b) {\n  a = Add(x, b)\n  b = Relu(a)\n}\n");
  Status st = Verify(*cyc);
  EXPECT_FALSE(st.ok());
  Status topo = cyc->TopologicalSort();
  EXPECT_FALSE(topo.ok());
  EXPECT_NE(topo.message().find("cycle"), std::string::npos) << topo.ToString();
}

TEST(IrText, OutputTypeDeclarations) {
  auto g = MustParse("graph (x: f32[2]) -> (y: f32[2]) { y = Relu(x) }");
  EXPECT_EQ(PrintType(g->outputs()[0]->type), "f32[2]");
  auto bad = ParseGraph("graph (x: f32[2]) -> (y: f32[3]) {\n  y: f32[2] = Relu(x)\n}");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("1:23: graph output 'y' is declared f32[3] but was defined as f32[2]"),
            std::string::npos)
      << bad.status().message();
}

TEST(IrText, GraphOutputMayBeAnInputOrConstant) {
  auto g = MustParse("graph (x: f32[2]) -> (x, c) { c = const i64[1] {5} }");
  EXPECT_EQ(g->outputs()[0], g->inputs()[0]);
  EXPECT_TRUE(g->outputs()[1]->is_constant());
  EXPECT_TRUE(Verify(*g).ok());
}

TEST(IrText, ParseTypeForms) {
  struct Case {
    const char* text;
    const char* printed;
  } cases[] = {
      {"f32[N,3,224,224]", "f32[N,3,224,224]"},
      {"i64[]", "i64[]"},
      {"f16[*]", "f16[*]"},
      {"bool", "bool[*]"},
      {"?[2,?]", "?[2,?]"},
      {"bf16[\"a b\", 1]", "bf16[\"a b\",1]"},
      {"u8[0]", "u8[0]"},
      {"c64[2]", "c64[2]"},
  };
  for (const auto& c : cases) {
    auto t = ParseType(c.text);
    ASSERT_TRUE(t.ok()) << c.text << ": " << t.status().ToString();
    EXPECT_EQ(PrintType(*t), c.printed);
  }
  auto t = ParseType("f32[?, N]");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t->dims)[0], Dim::Unknown());
  EXPECT_EQ((*t->dims)[1], Dim::Symbol("N"));
  EXPECT_FALSE(ParseType("float[2]").ok());
  EXPECT_FALSE(ParseType("f32[-1]").ok());
  EXPECT_FALSE(ParseType("f32[2").ok());
  EXPECT_FALSE(ParseType("f32[2] x").ok());
}

TEST(IrText, PrintNodeForMessages) {
  auto g = MustParse("graph (x: f32[2]) -> (y) { y: f32[2] = Clip(x, _, _) {} @clip1 }");
  EXPECT_EQ(PrintNode(*g->nodes()[0]), "y: f32[2] = Clip(x, _, _) @clip1");
  PrintOptions no_types;
  no_types.print_types = false;
  EXPECT_EQ(PrintNode(*g->nodes()[0], no_types), "y = Clip(x, _, _) @clip1");
}

struct ErrorCase {
  const char* text;
  const char* expected;  // substring of the message, including LINE:COL
};

class IrTextErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(IrTextErrors, ReportsPositionAndExpectation) {
  auto g = ParseGraph(GetParam().text);
  ASSERT_FALSE(g.ok()) << "parsed: " << GetParam().text;
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find(GetParam().expected), std::string::npos)
      << "message: " << g.status().message() << "\nwanted: " << GetParam().expected;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, IrTextErrors,
    ::testing::Values(
        ErrorCase{"", "1:1: expected 'graph' (or an 'opset' line), got end of input"},
        ErrorCase{"grpah g () -> () {}", "1:1: expected 'graph'"},
        ErrorCase{"opset x\ngraph () -> () {}", "2:1: expected an opset version number, got 'graph'"},
        ErrorCase{"opset 17\nopset 18\ngraph () -> () {}", "2:7: opset for domain '' is given twice"},
        ErrorCase{"graph g (x: f32[2] -> (y) {}", "1:20: expected ',' or ')' in the graph inputs, got '->'"},
        ErrorCase{"graph g (x: float[2]) -> (y) {}", "1:13: unknown element type 'float'"},
        ErrorCase{"graph g (x: f32[2,-1]) -> (y) {}", "1:19: dimensions cannot be negative"},
        ErrorCase{"graph g (x: f32[2]) (y) {}", "1:21: expected '->' after the graph inputs, got '('"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x\n}",
                  "3:1: expected ',' or ')' in the op's inputs, got '}'"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x)\n",
                  "3:1: expected a statement or '}' closing the graph body, got end of input"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(q)\n}", "2:12: value 'q' is used but never defined"},
        ErrorCase{"graph g (x: f32[2]) -> (z) {\n  y = Relu(x)\n}", "1:25: graph output 'z' is never defined"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x)\n  y = Neg(x)\n}",
                  "3:3: value 'y' is defined twice (first at 2:3)"},
        ErrorCase{"graph g (x: f32[2]) -> (x) {\n  x = Relu(x)\n}", "2:3: value 'x' is defined twice (first at 1:10)"},
        ErrorCase{"graph g (x: f32[2], x: f32[2]) -> (x) {}", "1:21: value 'x' is defined twice"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) {alpha=}\n}", "2:22: expected an attribute value"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) {a=1, a=2}\n}", "2:21: attribute 'a' is given twice"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) {a=[]}\n}", "2:18: an empty list needs its type"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) {a=[1, \"s\"]}\n}",
                  "a list must hold only numbers, only strings or only tensors"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) {a=99999999999999999999}\n}",
                  "2:18: value 99999999999999999999 does not fit i64"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) {a=true}\n}", "2:18: expected an attribute value"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) {a=\"abc}\n}", "2:18: unterminated string"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) {a=\"\\q\"}\n}", "unknown escape '\\q'"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) $\n}", "2:15: unexpected character '$'"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = 3Relu(x)\n}", "2:7: malformed number '3Relu'"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const f32[2] {1, 2, 3}\n}", "2:27: too many values for f32[2]"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const f32[3] {1, 2}\n}",
                  "2:20: f32[3] needs 3 values (or one to fill it), got 2"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const f32[N]\n}", "2:13: a tensor needs a fully known shape"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const u8[2] {1, 256}\n}", "2:23: value 256 does not fit u8"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const u8[2] {1, -1}\n}", "value -1 does not fit u8"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const i32[2] {1, 2.5}\n}",
                  "2:24: expected an integer for a i32 element, got number 2.5"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const bool[1] {2}\n}", "expected true, false, 0 or 1"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const c64[1]\n}",
                  "2:13: tensors of element type c64 cannot be written"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const string[2] {1, 2}\n}",
                  "2:24: expected a quoted string element"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c = const f32[100000,100000]\n}", "too large for the text form"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c: f32[1] = const f32[1]\n}", "a constant's type follows 'const'"},
        ErrorCase{"graph g (x: f32[2]) -> (c) {\n  c, d = const f32[1]\n}",
                  "2:3: a constant defines exactly one named value"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(\"\")\n}",
                  "2:12: expected an input name or _ (omitted input) (names cannot be empty"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = com.microsoft::(x)\n}",
                  "2:22: expected an op type after 'com.microsoft::'"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) @\n}", "3:1: expected a node name after '@', got '}'"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x)\n} extra",
                  "3:3: expected end of input after the graph's closing '}', got 'extra'"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y Relu(x)\n}",
                  "2:5: expected ',' or '=' after an output name, got 'Relu'"},
        ErrorCase{"graph g (x: f32[2]) -> (y) {\n  y = Relu(x) {t=tensor f32[2] {1, x}}\n}",
                  "2:36: expected a tensor element"}));

// Garbage must produce errors, never crashes (run under ASan/UBSan in CI).
TEST(IrText, GarbageNeverCrashes) {
  const std::string seed_text = PrintGraph(*BuildEverything());
  std::mt19937 rng(1234);
  // Every prefix.
  for (size_t n = 0; n < seed_text.size(); n += 3) (void)ParseGraph(std::string_view(seed_text).substr(0, n));
  // Random byte mutations.
  const std::string alphabet = "()[]{},=:-@*?\"\\#_ \n0123456789.eE-abcxyzf32i64[]";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = seed_text;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0:
          s[pos] = static_cast<char>(rng() & 0xff);
          break;
        case 1:
          s.erase(pos, 1 + rng() % 8);
          break;
        case 2:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 3:
          s[pos] = alphabet[rng() % alphabet.size()];
          break;
      }
      if (s.empty()) s = "x";
    }
    auto g = ParseGraph(s);
    if (g.ok()) (void)PrintGraph(**g);  // whatever parses must also print
  }
  // Pure noise.
  for (int iter = 0; iter < 500; ++iter) {
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xff);
    EXPECT_FALSE(ParseGraph(s).ok());
  }
}

}  // namespace
}  // namespace sampan::ir
