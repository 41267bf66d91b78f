// Importing subgraphs (GRAPH attributes of If, Loop, Scan): outer-scope names resolved through
// every level, the fuzz seeds running with the values onnxruntime gives, and clear errors for
// malformed control flow.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "backends/reference/executor.h"
#include "ir/text.h"
#include "onnx/importer.h"
#include "onnx/onnx_pb.h"

namespace sampan::onnx_import {
namespace {

// Graph-level builders: a subgraph is a GraphProto like the model's.
void Typed(onnx::ValueInfoProto* vi, const std::string& name, int elem, const std::vector<int64_t>& dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

onnx::NodeProto* Node(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& in,
                      const std::vector<std::string>& out, const std::string& name = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

onnx::GraphProto* GraphAttr(onnx::NodeProto* n, const std::string& key) {
  auto* a = n->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name(key);
  return a->mutable_g();
}

void IntsAttr(onnx::NodeProto* n, const std::string& key, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void IntAttr(onnx::NodeProto* n, const std::string& key, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

onnx::ModelProto Model(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

constexpr int kF32 = onnx::TensorProto::FLOAT, kI64 = onnx::TensorProto::INT64, kBool = onnx::TensorProto::BOOL;

std::string ErrorOf(const onnx::ModelProto& m) {
  auto g = ImportModelBytes(m.SerializeAsString(), "");
  EXPECT_FALSE(g.ok()) << ir::PrintGraph(**g);
  return g.ok() ? "" : g.status().ToString();
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

// y = If(c) then: Neg(x) else: Abs(x), with x a graph input read by both branches.
onnx::ModelProto IfModel() {
  onnx::ModelProto m = Model();
  auto* g = m.mutable_graph();
  Typed(g->add_input(), "c", kBool, {});
  Typed(g->add_input(), "x", kF32, {2});
  Typed(g->add_output(), "y", kF32, {2});
  auto* n = Node(g, "If", {"c"}, {"y"}, "pick");
  auto* t = GraphAttr(n, "then_branch");
  Node(t, "Neg", {"x"}, {"t"});
  Typed(t->add_output(), "t", kF32, {2});
  auto* e = GraphAttr(n, "else_branch");
  Node(e, "Abs", {"x"}, {"e"});
  Typed(e->add_output(), "e", kF32, {2});
  return m;
}

TEST(ControlFlowImport, IfBranchesReadOuterValues) {
  auto g = ImportModelBytes(IfModel().SerializeAsString(), "");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const ir::Node& n = *(*g)->nodes()[0];
  ASSERT_EQ(n.num_captures(), 1u);
  EXPECT_EQ(n.input(1), (*g)->FindValue("x"));
  reference::Executor exec(std::shared_ptr<const ir::Graph>(std::move(g).value()));
  auto out = exec.Run({{"c", Tensor::FromVector<bool>(DType::kBool, {false}, {})},
                       {"x", Tensor::FromVector<float>(DType::kFloat32, {-1, 2}, {2})}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].data<float>()[0], 1.f);
}

TEST(ControlFlowImport, UnknownOuterValueIsNamed) {
  onnx::ModelProto m = IfModel();
  m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g()->mutable_node(0)->set_input(0, "nowhere");
  const std::string err = ErrorOf(m);
  EXPECT_CONTAINS(err, "not defined in the subgraph or any graph enclosing it");
  EXPECT_CONTAINS(err, "attribute 'then_branch'");
  EXPECT_CONTAINS(err, "'nowhere'");
}

TEST(ControlFlowImport, IfBranchesOfDifferentTypesAreAnError) {
  onnx::ModelProto m = IfModel();
  auto* e = m.mutable_graph()->mutable_node(0)->mutable_attribute(1)->mutable_g();
  e->mutable_node(0)->set_op_type("Cast");
  IntAttr(e->mutable_node(0), "to", kI64);
  e->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(kI64);
  const std::string err = ErrorOf(m);
  EXPECT_CONTAINS(err, "If 'pick': output 0 is f32 from then_branch but i64 from else_branch");
}

// Loop(M, "", x): body (i, cond, acc) -> (cond, acc + w, ...) with w from the outer graph.
onnx::ModelProto LoopModel(bool wrong_arity) {
  onnx::ModelProto m = Model();
  auto* g = m.mutable_graph();
  Typed(g->add_input(), "m", kI64, {});
  Typed(g->add_input(), "x", kF32, {2});
  Typed(g->add_input(), "w", kF32, {2});
  Typed(g->add_output(), "y", kF32, {2});
  auto* n = Node(g, "Loop", {"m", "", "x"}, {"y"}, "lp");
  auto* b = GraphAttr(n, "body");
  Typed(b->add_input(), "i", kI64, {});
  if (!wrong_arity) Typed(b->add_input(), "c", kBool, {});
  Typed(b->add_input(), "acc", kF32, {2});
  Node(b, "Add", {"acc", "w"}, {"acc2"});
  Node(b, "Cast", {"i"}, {"go"});
  IntAttr(b->mutable_node(1), "to", kBool);
  Typed(b->add_output(), "go", kBool, {});
  Typed(b->add_output(), "acc2", kF32, {2});
  return m;
}

TEST(ControlFlowImport, LoopBodyArityIsChecked) {
  EXPECT_TRUE(ImportModelBytes(LoopModel(false).SerializeAsString(), "").ok());
  const std::string err = ErrorOf(LoopModel(true));
  EXPECT_CONTAINS(err, "Loop 'lp': body takes 2 inputs, expected 2 + 1");
}

TEST(ControlFlowImport, ScanWithMismatchedAxesIsAnError) {
  onnx::ModelProto m = Model(16);
  auto* g = m.mutable_graph();
  Typed(g->add_input(), "s0", kF32, {3});
  Typed(g->add_input(), "x", kF32, {3, 4});
  Typed(g->add_output(), "s", kF32, {3});
  auto* n = Node(g, "Scan", {"s0", "x"}, {"s"}, "sc");
  IntAttr(n, "num_scan_inputs", 1);
  IntsAttr(n, "scan_input_axes", {0, 1});
  auto* b = GraphAttr(n, "body");
  Typed(b->add_input(), "st", kF32, {3});
  Typed(b->add_input(), "xs", kF32, {3});
  Node(b, "Add", {"st", "xs"}, {"st2"});
  Typed(b->add_output(), "st2", kF32, {3});
  EXPECT_CONTAINS(ErrorOf(m), "Scan 'sc': attribute 'scan_input_axes' has 2 entries, expected 1");
}

// The fuzz seeds with subgraphs (tests/fuzz/make_seeds.py), run on the inputs whose
// onnxruntime results are quoted.
std::shared_ptr<const ir::Graph> Seed(const std::string& name) {
  std::ifstream f(std::string(SAMPAN_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_onnx/" + name, std::ios::binary);
  std::stringstream bytes;
  bytes << f.rdbuf();
  auto g = ImportModelBytes(bytes.str(), "");
  EXPECT_TRUE(g.ok()) << name << ": " << g.status().ToString();
  return g.ok() ? std::shared_ptr<const ir::Graph>(std::move(g).value()) : nullptr;
}

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(ControlFlowImport, SeedsRunAsOnnxruntimeRunsThem) {
  auto loop = Seed("loop_outer_scope.onnx");
  ASSERT_TRUE(loop);
  auto out = reference::Executor(loop).Run({{"m", Tensor::FromVector<int64_t>(DType::kInt64, {3}, {})},
                                            {"x", Tensor::FromVector<float>(DType::kFloat32, {1, 2}, {2})}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{1.5f, 1}));
  EXPECT_EQ(Floats((*out)[1]), (std::vector<float>{2.5f, 3, 2.5f}));

  auto scan = Seed("scan_axes.onnx");
  ASSERT_TRUE(scan);
  std::vector<float> x(12);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  out = reference::Executor(scan).Run({{"s0", Tensor::FromVector<float>(DType::kFloat32, {0, 0, 0}, {3})},
                                       {"x", Tensor::FromVector<float>(DType::kFloat32, x, {3, 4})}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{6, 22, 38}));
  EXPECT_EQ(Floats((*out)[1]), (std::vector<float>{3, 3, 2.5f, 1.5f, 11, 9, 6.5f, 3.5f, 19, 15, 10.5f, 5.5f}));

  EXPECT_TRUE(Seed("scan8_batch.onnx"));
  EXPECT_TRUE(Seed("if_subgraph.onnx"));
}

}  // namespace
}  // namespace sampan::onnx_import
