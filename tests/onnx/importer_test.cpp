// ONNX import: models built with the protobuf API, good and malformed.
#include "onnx/importer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ir/text.h"
#include "onnx/onnx_pb.h"

namespace sampan::onnx_import {
namespace {

namespace fs = std::filesystem;

onnx::ModelProto NewModel(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

// dims: numbers are fixed sizes, anything else a symbol ("" = unknown).
void SetType(onnx::ValueInfoProto* vi, const std::string& name, int elem, const std::vector<std::string>& dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (const auto& d : dims) {
    auto* dim = shape->add_dim();
    if (d.empty()) continue;
    if (std::isdigit(static_cast<unsigned char>(d[0])))
      dim->set_dim_value(std::stoll(d));
    else
      dim->set_dim_param(d);
  }
}

void AddInput(onnx::ModelProto& m, const std::string& name, const std::vector<std::string>& dims,
              int elem = onnx::TensorProto::FLOAT) {
  SetType(m.mutable_graph()->add_input(), name, elem, dims);
}

void AddOutput(onnx::ModelProto& m, const std::string& name) {
  m.mutable_graph()->add_output()->set_name(name);
}

onnx::NodeProto* AddNode(onnx::ModelProto& m, const std::string& op, const std::vector<std::string>& in,
                         const std::vector<std::string>& out, const std::string& name = "") {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

onnx::TensorProto FloatTensor(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float f : v) t.add_float_data(f);
  return t;
}

Result<std::unique_ptr<ir::Graph>> Import(const onnx::ModelProto& m, const std::string& dir = "") {
  return ImportModelBytes(m.SerializeAsString(), dir);
}

std::string ErrorOf(const onnx::ModelProto& m, const std::string& dir = "") {
  auto g = Import(m, dir);
  EXPECT_FALSE(g.ok()) << "imported:\n" << (g.ok() ? ir::PrintGraph(**g) : "");
  return g.ok() ? "" : g.status().ToString();
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

// x + w with w an initializer, then y = sum + c with c a Constant node.
onnx::ModelProto AddModel() {
  onnx::ModelProto m = NewModel();
  AddInput(m, "x", {"N", "2"});
  *m.mutable_graph()->add_initializer() = FloatTensor("w", {2}, {1.5f, -2.f});
  auto* c = AddNode(m, "Constant", {}, {"c"}, "const");
  auto* a = c->add_attribute();
  a->set_name("value_floats");
  a->set_type(onnx::AttributeProto::FLOATS);
  a->add_floats(10.f);
  a->add_floats(20.f);
  AddNode(m, "Add", {"x", "w"}, {"sum"}, "add1");
  AddNode(m, "Add", {"sum", "c"}, {"y"}, "add2");
  AddOutput(m, "y");
  return m;
}

TEST(OnnxImport, InitializersConstantsAndSymbolicDims) {
  auto g = Import(AddModel());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const ir::Graph& graph = **g;
  EXPECT_EQ(graph.opset(), 17);
  ASSERT_EQ(graph.inputs().size(), 1u);
  EXPECT_EQ(ir::PrintType(graph.inputs()[0]->type), "f32[N,2]");
  const ir::Value* w = graph.FindValue("w");
  ASSERT_TRUE(w && w->is_constant());
  EXPECT_EQ(w->data.data<float>()[1], -2.f);
  const ir::Value* c = graph.FindValue("c");
  ASSERT_TRUE(c && c->is_constant()) << "Constant nodes become constants";
  EXPECT_EQ(c->data.data<float>()[1], 20.f);
  ASSERT_EQ(graph.nodes().size(), 2u) << "Constant nodes are not kept as nodes";
  // Types were inferred and keep the symbol.
  EXPECT_EQ(ir::PrintType(graph.outputs()[0]->type), "f32[N,2]");
  EXPECT_TRUE(ir::Verify(graph).ok());
}

TEST(OnnxImport, ConstantNodeForms) {
  onnx::ModelProto m = NewModel();
  AddInput(m, "x", {"1"}, onnx::TensorProto::INT64);
  auto* c1 = AddNode(m, "Constant", {}, {"i"});
  auto* a1 = c1->add_attribute();
  a1->set_name("value_int");
  a1->set_type(onnx::AttributeProto::INT);
  a1->set_i(42);
  auto* c2 = AddNode(m, "Constant", {}, {"t"});
  auto* a2 = c2->add_attribute();
  a2->set_name("value");
  a2->set_type(onnx::AttributeProto::TENSOR);
  a2->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  a2->mutable_t()->add_dims(1);
  a2->mutable_t()->add_int64_data(-5);
  AddNode(m, "Add", {"x", "i"}, {"s"});
  AddNode(m, "Add", {"s", "t"}, {"y"});
  AddOutput(m, "y");
  auto g = Import(m);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->FindValue("i")->data.rank(), 0);
  EXPECT_EQ((*g)->FindValue("i")->data.data<int64_t>()[0], 42);
  EXPECT_EQ((*g)->FindValue("t")->data.data<int64_t>()[0], -5);
}

TEST(OnnxImport, UnknownDimsAndNodesOutOfOrder) {
  onnx::ModelProto m = NewModel();
  AddInput(m, "x", {"", "3"});
  AddInput(m, "z", {"", "3"});
  AddNode(m, "Add", {"t", "x"}, {"y"}, "second");
  AddNode(m, "Add", {"x", "z"}, {"t"}, "first");
  AddOutput(m, "y");
  auto g = Import(m);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(ir::PrintType((*g)->inputs()[0]->type), "f32[?,3]");
  EXPECT_EQ((*g)->nodes()[0]->name, "first") << "nodes are sorted topologically";
}

class TempDir {
 public:
  TempDir() {
    path_ =
        fs::temp_directory_path() / ("sampan_import_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_ / "model");
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path model_dir() const { return path_ / "model"; }
  fs::path root() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

void WriteFile(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

onnx::ModelProto ExternalModel(const std::string& location, int64_t offset, int64_t length) {
  onnx::ModelProto m = NewModel();
  AddInput(m, "x", {"2"});
  onnx::TensorProto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto kv = [&](const char* k, const std::string& v) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  kv("location", location);
  if (offset >= 0) kv("offset", std::to_string(offset));
  if (length >= 0) kv("length", std::to_string(length));
  AddNode(m, "Add", {"x", "w"}, {"y"});
  AddOutput(m, "y");
  return m;
}

TEST(OnnxImport, ExternalDataInSideFile) {
  TempDir tmp;
  WriteFile(tmp.model_dir() / "weights.bin", FloatBytes({0.f, 7.f, 8.f, 9.f}));
  WriteFile(tmp.model_dir() / "model.onnx", ExternalModel("weights.bin", 4, 8).SerializeAsString());
  auto g = ImportModelFile((tmp.model_dir() / "model.onnx").string());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const Tensor& w = (*g)->FindValue("w")->data;
  EXPECT_EQ(w.data<float>()[0], 7.f);
  EXPECT_EQ(w.data<float>()[1], 8.f);
  // Without offset/length the tensor starts at 0 and takes its own size.
  auto g2 = ImportModelBytes(ExternalModel("weights.bin", -1, -1).SerializeAsString(), tmp.model_dir().string());
  ASSERT_TRUE(g2.ok()) << g2.status().ToString();
  EXPECT_EQ((*g2)->FindValue("w")->data.data<float>()[1], 7.f);
}

TEST(OnnxImport, ExternalDataErrors) {
  TempDir tmp;
  WriteFile(tmp.model_dir() / "weights.bin", FloatBytes({1.f, 2.f}));
  WriteFile(tmp.root() / "secret.bin", FloatBytes({1.f, 2.f}));
  const std::string dir = tmp.model_dir().string();
  // Outside the model's directory.
  EXPECT_CONTAINS(ErrorOf(ExternalModel("../secret.bin", 0, 8), dir),
                  "must be a relative path inside the model's directory");
  EXPECT_CONTAINS(ErrorOf(ExternalModel((tmp.root() / "secret.bin").string(), 0, 8), dir), "must be a relative path");
  // Past the end of the file.
  EXPECT_CONTAINS(ErrorOf(ExternalModel("weights.bin", 4, 8), dir), "is outside");
  EXPECT_CONTAINS(ErrorOf(ExternalModel("weights.bin", 100, -1), dir), "is outside");
  EXPECT_CONTAINS(ErrorOf(ExternalModel("weights.bin", -1, 1000), dir), "is outside");
  // Wrong length for the tensor, negative offset, non-numeric offset, missing file, no base dir.
  EXPECT_CONTAINS(ErrorOf(ExternalModel("weights.bin", 0, 4), dir), "does not match the tensor's 8 bytes");
  {
    auto m = ExternalModel("weights.bin", -1, -1);
    auto* e = m.mutable_graph()->mutable_initializer(0)->add_external_data();
    e->set_key("offset");
    e->set_value("12abc");
    // std::stoll accepts a numeric prefix; either way it must not crash.
    (void)Import(m, dir);
    e->set_value("abc");
    EXPECT_CONTAINS(ErrorOf(m, dir), "is not a number");
  }
  EXPECT_CONTAINS(ErrorOf(ExternalModel("missing.bin", 0, 8), dir), "cannot be opened");
  EXPECT_CONTAINS(ErrorOf(ExternalModel("weights.bin", 0, 8), ""), "not loaded from a file");
}

TEST(OnnxImport, UnsupportedOpsListedTogether) {
  onnx::ModelProto m = NewModel();
  AddInput(m, "x", {"2"});
  AddNode(m, "FrobnicateA", {"x"}, {"a"}, "fa1");
  AddNode(m, "FrobnicateB", {"a"}, {"b"}, "fb");
  AddNode(m, "FrobnicateA", {"b"}, {"c"}, "fa2");
  auto* custom = AddNode(m, "Widget", {"c"}, {"y"}, "w");
  custom->set_domain("com.example");
  auto* op = m.add_opset_import();
  op->set_domain("com.example");
  op->set_version(1);
  AddOutput(m, "y");
  const std::string e = ErrorOf(m);
  EXPECT_CONTAINS(e, "Unsupported");
  EXPECT_CONTAINS(e, "FrobnicateA");
  EXPECT_CONTAINS(e, "FrobnicateB");
  EXPECT_CONTAINS(e, "Widget");
  EXPECT_CONTAINS(e, "fa1");
  EXPECT_CONTAINS(e, "fa2");
}

TEST(OnnxImport, DanglingInputsListedTogether) {
  onnx::ModelProto m = NewModel();
  AddInput(m, "x", {"2"});
  AddNode(m, "Add", {"x", "ghost"}, {"a"}, "add1");
  AddNode(m, "Add", {"a", "phantom"}, {"y"}, "add2");
  AddOutput(m, "y");
  const std::string e = ErrorOf(m);
  EXPECT_CONTAINS(e, "2 node inputs are not a graph input, an initializer, or any node's output");
  EXPECT_CONTAINS(e, "'ghost'");
  EXPECT_CONTAINS(e, "'phantom'");
}

TEST(OnnxImport, MissingRequiredAttribute) {
  onnx::ModelProto m = NewModel();
  AddInput(m, "x", {"2"});
  AddNode(m, "Cast", {"x"}, {"y"}, "cast_without_to");
  AddOutput(m, "y");
  const std::string e = ErrorOf(m);
  EXPECT_CONTAINS(e, "Cast 'cast_without_to': missing required attribute 'to'");
}

TEST(OnnxImport, InconsistentDeclaredOutputShape) {
  onnx::ModelProto m = NewModel();
  AddInput(m, "x", {"2", "3"});
  AddNode(m, "Add", {"x", "x"}, {"y"}, "add");
  SetType(m.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {"2", "4"});
  const std::string e = ErrorOf(m);
  EXPECT_CONTAINS(e, "Add 'add': output 'y' is declared f32[2,4]");
  EXPECT_CONTAINS(e, "f32[2,3]");
  // Declared element type disagreeing is caught too.
  onnx::ModelProto m2 = NewModel();
  AddInput(m2, "x", {"2"});
  AddNode(m2, "Add", {"x", "x"}, {"y"}, "add");
  SetType(m2.mutable_graph()->add_output(), "y", onnx::TensorProto::INT64, {"2"});
  EXPECT_CONTAINS(ErrorOf(m2), "'y'");
}

TEST(OnnxImport, TruncatedAndGarbageBytes) {
  const std::string good = AddModel().SerializeAsString();
  ASSERT_TRUE(ImportModelBytes(good, "").ok());
  auto empty = ImportModelBytes("", "");
  ASSERT_FALSE(empty.ok());
  EXPECT_CONTAINS(empty.status().message(), "empty");
  // Every truncation is an error (or, rarely, a smaller valid model) — never a crash.
  int errors = 0;
  for (size_t n = 1; n < good.size(); ++n) errors += !ImportModelBytes(good.substr(0, n), "").ok();
  EXPECT_GT(errors, static_cast<int>(good.size()) / 2);
  auto half = ImportModelBytes(good.substr(0, good.size() / 2), "");
  ASSERT_FALSE(half.ok());
  std::string garbage;
  uint32_t s = 99;
  for (int i = 0; i < 4096; ++i) {
    s = s * 1664525u + 1013904223u;
    garbage += static_cast<char>(s >> 24);
  }
  auto bad = ImportModelBytes(garbage, "");
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), "not an ONNX model");
  auto text = ImportModelBytes("this is a text file, not a model\n", "");
  ASSERT_FALSE(text.ok());
  EXPECT_CONTAINS(text.status().message(), "not an ONNX model");
  // Random byte flips in a valid model.
  for (int iter = 0; iter < 1500; ++iter) {
    std::string m = good;
    for (int e = 0; e < 2; ++e) {
      s = s * 1664525u + 1013904223u;
      m[(s >> 8) % m.size()] = static_cast<char>(s >> 24);
    }
    (void)ImportModelBytes(m, "");
  }
}

TEST(OnnxImport, HeaderChecks) {
  onnx::ModelProto m = AddModel();
  m.clear_ir_version();
  EXPECT_CONTAINS(ErrorOf(m), "ir_version is missing");
  m = AddModel();
  m.set_ir_version(99);
  EXPECT_CONTAINS(ErrorOf(m), "IR version 99");
  m = AddModel();
  m.mutable_opset_import(0)->set_version(1);
  EXPECT_CONTAINS(ErrorOf(m), "opset 1 is outside");
  m = AddModel();
  m.clear_opset_import();
  EXPECT_CONTAINS(ErrorOf(m), "no opset_import");
  m = AddModel();
  m.clear_graph();
  EXPECT_CONTAINS(ErrorOf(m), "graph is missing");
  m = AddModel();
  m.mutable_graph()->clear_output();
  EXPECT_CONTAINS(ErrorOf(m), "has no outputs");
}

// IR 13/14 (onnx 1.20-1.23) and default-domain opsets up to 28 import; newer ones get
// the clear refusal, naming the supported range.
TEST(OnnxImport, NewestIrAndOpsetVersions) {
  for (int64_t irv : {3, 13, 14}) {
    onnx::ModelProto m = AddModel();
    m.set_ir_version(irv);
    EXPECT_TRUE(Import(m).ok()) << "IR " << irv << ": " << Import(m).status().ToString();
  }
  for (int64_t opset : {7, 25, 26, 27, 28}) {
    onnx::ModelProto m = AddModel();
    m.mutable_opset_import(0)->set_version(opset);
    EXPECT_TRUE(Import(m).ok()) << "opset " << opset << ": " << Import(m).status().ToString();
  }
  onnx::ModelProto m = AddModel();
  m.set_ir_version(15);
  EXPECT_CONTAINS(ErrorOf(m), "ONNX IR version 15 is outside the supported range 3..14");
  m = AddModel();
  m.mutable_opset_import(0)->set_version(29);
  EXPECT_CONTAINS(ErrorOf(m), "default-domain opset 29 is outside the supported range 7..28");
  // IR 13 added INT2/UINT2 (25, 26), IR 14 FLOAT6E2M3/FLOAT6E3M2 (27, 28): graph inputs of these
  // types import; Add, which has no kernel for them, refuses them by name.
  for (int elem : {25, 26, 27, 28}) {
    m = AddModel();
    m.set_ir_version(14);
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    EXPECT_CONTAINS(ErrorOf(m), std::string("of type ") + DTypeName(static_cast<DType>(elem)));
  }
  m = AddModel();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(29);
  EXPECT_CONTAINS(ErrorOf(m), "element type 29");
}

TEST(OnnxImport, MalformedTensorsAndNames) {
  onnx::ModelProto m = AddModel();
  m.mutable_graph()->mutable_initializer(0)->add_float_data(3.f);  // 3 values for dims [2]
  EXPECT_CONTAINS(ErrorOf(m), "float_data holds 3 values but the dims need 2");
  m = AddModel();
  m.mutable_graph()->mutable_initializer(0)->set_raw_data("abc");
  EXPECT_CONTAINS(ErrorOf(m), "raw_data has 3 bytes");
  m = AddModel();
  m.mutable_graph()->mutable_initializer(0)->set_data_type(12345);
  EXPECT_CONTAINS(ErrorOf(m), "unknown data_type 12345");
  m = AddModel();
  m.mutable_graph()->mutable_initializer(0)->set_data_type(onnx::TensorProto::COMPLEX64);
  EXPECT_CONTAINS(ErrorOf(m), "Unsupported");
  m = AddModel();  // strings travel in string_data only, one per element
  m.mutable_graph()->mutable_initializer(0)->set_data_type(onnx::TensorProto::STRING);
  m.mutable_graph()->mutable_initializer(0)->set_raw_data("ab");
  EXPECT_CONTAINS(ErrorOf(m), "string tensors must use string_data");
  m.mutable_graph()->mutable_initializer(0)->clear_raw_data();
  m.mutable_graph()->mutable_initializer(0)->clear_float_data();
  m.mutable_graph()->mutable_initializer(0)->add_string_data("a");
  EXPECT_CONTAINS(ErrorOf(m), "string_data holds 1 values but the dims need");
  m = AddModel();
  m.mutable_graph()->mutable_initializer(0)->add_dims(-3);
  EXPECT_CONTAINS(ErrorOf(m), "negative dimension");
  m = AddModel();
  m.mutable_graph()->mutable_initializer(0)->clear_dims();
  m.mutable_graph()->mutable_initializer(0)->add_dims(int64_t{1} << 40);
  m.mutable_graph()->mutable_initializer(0)->add_dims(int64_t{1} << 40);
  EXPECT_CONTAINS(ErrorOf(m), "elements");
  m = AddModel();
  AddNode(m, "Add", {"x", "x"}, {"sum"}, "dup");  // 'sum' produced twice
  EXPECT_CONTAINS(ErrorOf(m), "'sum' is already defined");
  m = AddModel();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(777);
  EXPECT_CONTAINS(ErrorOf(m), "unknown elem_type 777");
  m = AddModel();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(40);
  EXPECT_CONTAINS(ErrorOf(m), "type 40");
  // Some exporters write -1 for an unknown dimension of a value type: read as unknown.
  m = AddModel();
  m.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_value(-4);
  {
    auto g = Import(m);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(ir::PrintType((*g)->inputs()[0]->type), "f32[N,?]");
  }
  m = AddModel();
  m.mutable_graph()->mutable_node(1)->clear_op_type();
  EXPECT_CONTAINS(ErrorOf(m), "op_type is empty");
  m = AddModel();
  m.mutable_graph()->mutable_output(0)->set_name("nowhere");
  EXPECT_CONTAINS(ErrorOf(m), "graph output 0 'nowhere': is not produced");
  m = AddModel();
  auto* attr = m.mutable_graph()->mutable_node(1)->add_attribute();
  attr->set_name("g");
  attr->set_type(onnx::AttributeProto::GRAPH);
  attr->mutable_g();
  EXPECT_CONTAINS(ErrorOf(m), "attribute 'g': graph 'g' has no outputs");  // subgraphs are imported (control flow)
}

TEST(OnnxImport, MissingFile) {
  auto g = ImportModelFile("/nonexistent/dir/model.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(g.status().message(), "/nonexistent/dir/model.onnx");
}

TEST(OnnxImport, ImportedGraphPrintsAndReparses) {
  auto g = Import(AddModel());
  ASSERT_TRUE(g.ok());
  const std::string text = ir::PrintGraph(**g);
  auto back = ir::ParseGraph(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(ir::PrintGraph(**back), text);
  EXPECT_CONTAINS(text, "c = const f32[2] {10, 20}");
  EXPECT_CONTAINS(text, "sum: f32[N,2] = Add(x, w) @add1");
}

}  // namespace
}  // namespace sampan::onnx_import
