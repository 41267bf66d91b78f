// Helpers for op unit tests: a graph holding one node, short type/dim builders,
// and random tensors.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/run_node.h"

namespace sampan::ops::testing {

struct OneNode {
  ir::Graph g;
  ir::Node* node = nullptr;
};

//! Graph with one `op` node: inputs in0.. (a kUndefined type = omitted input), outputs out0..out{n_out-1}.
inline std::unique_ptr<OneNode> MakeGraph(const std::string& op, const std::vector<ir::TensorType>& inputs,
                                          std::map<std::string, ir::Attribute> attrs, int64_t opset, size_t n_out) {
  auto m = std::make_unique<OneNode>();
  m->g.opsets[""] = opset;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype == DType::kUndefined) {
      ins.push_back(nullptr);
      continue;
    }
    ir::Value* v = m->g.AddValue("in" + std::to_string(i), inputs[i]).value();
    m->g.inputs().push_back(v);
    ins.push_back(v);
  }
  std::vector<ir::Value*> outs;
  for (size_t i = 0; i < n_out; ++i) {
    outs.push_back(m->g.AddValue("out" + std::to_string(i)).value());
    m->g.outputs().push_back(outs.back());
  }
  m->node = m->g.AddNode(op, ins, outs, "n").value();
  m->node->attrs = std::move(attrs);
  return m;
}

//! Runs `op` once on `inputs` (nullptr = omitted) through RunNode: inference with the
//! inputs' values, then the reference kernel. Returns its outputs or the error.
inline Result<std::vector<Tensor>> RunOneNode(const std::string& op, const std::vector<const Tensor*>& inputs,
                                              std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 22,
                                              size_t n_out = 1) {
  std::vector<ir::TensorType> types;
  for (const Tensor* t : inputs) types.push_back(t ? ir::TensorType::Static(t->dtype(), t->shape()) : ir::TensorType{});
  auto m = MakeGraph(op, types, std::move(attrs), opset, n_out);
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, opset, inputs, &outs));
  return outs;
}

//! The inferred types of out0..out{n_out-1} of a one-node graph (no values: shapes only).
inline Result<std::vector<ir::TensorType>> InferOneNode(const std::string& op,
                                                        const std::vector<ir::TensorType>& inputs,
                                                        std::map<std::string, ir::Attribute> attrs = {},
                                                        int64_t opset = 22, size_t n_out = 1) {
  auto m = MakeGraph(op, inputs, std::move(attrs), opset, n_out);
  SP_RETURN_IF_ERROR(InferTypes(m->g));
  std::vector<ir::TensorType> r;
  for (size_t i = 0; i < n_out; ++i) r.push_back(m->g.FindValue("out" + std::to_string(i))->type);
  return r;
}
//! InferOneNode's first output.
inline Result<ir::TensorType> InferFirst(const std::string& op, const std::vector<ir::TensorType>& inputs,
                                         std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 22) {
  SP_ASSIGN_OR_RETURN(auto types, InferOneNode(op, inputs, std::move(attrs), opset, 1));
  return types.at(0);
}
//! RunOneNode on tensors given by value (every input present).
inline Result<std::vector<Tensor>> RunValues(const std::string& op, const std::vector<Tensor>& inputs,
                                             std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 22,
                                             size_t n_out = 1) {
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  return RunOneNode(op, ptrs, std::move(attrs), opset, n_out);
}
//! RunValues' first output.
inline Result<Tensor> RunFirst(const std::string& op, const std::vector<Tensor>& inputs,
                               std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 22) {
  SP_ASSIGN_OR_RETURN(auto outs, RunValues(op, inputs, std::move(attrs), opset, 1));
  return outs.at(0);
}

inline Tensor F32(std::vector<float> v, Shape s) {
  return Tensor::FromVector(DType::kFloat32, v, std::move(s));
}
//! The elements of `t` (of C++ type E).
template <class E>
std::vector<E> Values(const Tensor& t) {
  return std::vector<E>(t.data<E>(), t.data<E>() + t.numel());
}

inline ir::TensorType TT(std::vector<ir::Dim> dims, DType dt = DType::kFloat32) {
  return ir::TensorType{dt, std::move(dims)};
}
inline ir::Dim K(int64_t v) {
  return ir::Dim::Known(v);
}
inline ir::Dim S(const std::string& s) {
  return ir::Dim::Symbol(s);
}

//! f32 tensor with values uniform in [-1, 1).
inline Tensor Random(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor t = Tensor::Alloc(DType::kFloat32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

}  // namespace sampan::ops::testing
