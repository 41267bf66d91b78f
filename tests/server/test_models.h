// What the server's in-process tests put in model repositories: a fresh directory per test and
// small ONNX models.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace sampan::server {

//! A fresh, empty directory for the running test: <tmp>/sampan_<prefix>_<pid>_<test name>.
inline std::filesystem::path FreshTestDirectory(const std::string& prefix) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sampan_" + prefix + "_" + std::to_string(::getpid()) + "_" +
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// y = x + bias, x: f32[N?, dims...]; N is a dynamic leading dimension when `batch`.
inline std::string AddModel(const std::vector<int64_t>& dims, bool batch, float bias) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("add");
  auto value = [&](onnx::ValueInfoProto* vi, const char* name) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    auto* shape = tt->mutable_shape();
    if (batch) shape->add_dim()->set_dim_param("N");
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  };
  value(g->add_input(), "x");
  value(g->add_output(), "y");
  auto* init = g->add_initializer();
  init->set_name("bias");
  init->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) init->add_dims(d), n *= d;
  for (int64_t i = 0; i < n; ++i) init->add_float_data(bias);
  auto* node = g->add_node();
  node->set_op_type("Add");
  node->set_name("add");
  node->add_input("x");
  node->add_input("bias");
  node->add_output("y");
  return m.SerializeAsString();
}

}  // namespace sampan::server
