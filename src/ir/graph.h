// The intermediate representation: a Graph of Nodes connected by Values.
// A Value is produced by at most one Node (or is a graph input / constant) and
// used by any number of Nodes. Graph owns everything; pointers stay valid until
// the owning Graph is destroyed or the object is erased from it.
//
// Subgraphs (control flow: If branches, Loop and Scan bodies) are graph-valued
// attributes owned by their node. A subgraph reads values of enclosing graphs
// through its captures(): placeholder values of its own (no producer, no data),
// bound by position to the owning node's trailing inputs. Every subgraph of a
// node has the same number of captures, so those trailing inputs are ordinary
// uses in the enclosing graph (dead-node elimination, topological order,
// lifetimes and planning see them with no special case), and the node's own
// (explicit) inputs are the first num_explicit_inputs().
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace sampan::ir {

class Graph;
class Node;

//! One dimension: a known size, a named symbol ("batch"), or unknown.
struct Dim {
  int64_t value = -1;  //!< >= 0 when known
  std::string param;   //!< symbol name when value is unknown; empty = anonymous

  static Dim Known(int64_t v) { return Dim{v, {}}; }
  static Dim Symbol(std::string name) { return Dim{-1, std::move(name)}; }
  static Dim Unknown() { return Dim{}; }
  bool known() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && param == o.param; }
};

using Dims = std::vector<Dim>;

//! Element type plus shape; `dims` is empty-optional when even the rank is unknown.
struct TensorType {
  DType dtype = DType::kUndefined;
  std::optional<Dims> dims;

  bool has_rank() const { return dims.has_value(); }
  bool is_static() const;      //!< rank known and every dim known
  Shape static_shape() const;  //!< requires is_static()
  static TensorType Static(DType dtype, const Shape& shape);
  std::string ToString() const;  //!< "f32[N,3,224,224]", "f32[?]" (unknown rank: "f32[*]")
};

class Value {
 public:
  const std::string& name() const { return name_; }
  TensorType type;
  //! Weights and constants: the data. Undefined for computed values and inputs.
  Tensor data;
  bool is_constant() const { return data.defined(); }

  Node* producer() const { return producer_; }
  int producer_output() const { return producer_output_; }
  //! (node, input index) pairs that read this value.
  const std::vector<std::pair<Node*, int>>& uses() const { return uses_; }

 private:
  friend class Graph;
  friend class Node;
  std::string name_;
  Node* producer_ = nullptr;
  int producer_output_ = -1;
  std::vector<std::pair<Node*, int>> uses_;
};

enum class AttrType { kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings, kTensors, kGraphs };
const char* AttrTypeName(AttrType t);

struct Attribute {
  AttrType type = AttrType::kInt;
  float f = 0.f;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;

  static Attribute Int(int64_t v) {
    Attribute a;
    a.type = AttrType::kInt;
    a.i = v;
    return a;
  }
  static Attribute Float(float v) {
    Attribute a;
    a.type = AttrType::kFloat;
    a.f = v;
    return a;
  }
  static Attribute String(std::string v) {
    Attribute a;
    a.type = AttrType::kString;
    a.s = std::move(v);
    return a;
  }
  static Attribute Ints(std::vector<int64_t> v) {
    Attribute a;
    a.type = AttrType::kInts;
    a.ints = std::move(v);
    return a;
  }
  static Attribute Floats(std::vector<float> v) {
    Attribute a;
    a.type = AttrType::kFloats;
    a.floats = std::move(v);
    return a;
  }
  static Attribute Strings(std::vector<std::string> v) {
    Attribute a;
    a.type = AttrType::kStrings;
    a.strings = std::move(v);
    return a;
  }
  static Attribute OfTensor(Tensor v) {
    Attribute a;
    a.type = AttrType::kTensor;
    a.t = std::move(v);
    return a;
  }
  static Attribute OfGraph(std::shared_ptr<Graph> v) {
    Attribute a;
    a.type = AttrType::kGraph;
    a.g = std::move(v);
    return a;
  }
};

class Node {
 public:
  std::string name;
  std::string op_type;
  std::string domain;  //!< "" is the default ONNX domain
  std::map<std::string, Attribute> attrs;

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  //! Input i, or nullptr when absent (omitted optional input or i past the end).
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  //! Re-points input i to `v` (nullptr to omit it), keeping use lists right.
  void SetInput(size_t i, Value* v);

  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  const Attribute* attr(const std::string& key) const;
  int64_t attr_int(const std::string& key, int64_t dflt) const;
  float attr_float(const std::string& key, float dflt) const;
  std::string attr_string(const std::string& key, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> dflt = {}) const;
  std::vector<float> attr_floats(const std::string& key, std::vector<float> dflt = {}) const;
  //! Required attributes: an error naming the node and attribute when missing or of the wrong type.
  Result<int64_t> required_int(const std::string& key) const;
  Result<float> required_float(const std::string& key) const;
  Result<std::vector<int64_t>> required_ints(const std::string& key) const;
  //! "Conv 'conv1'" — used at the start of error messages.
  std::string Label() const;

  //! Subgraph attributes (kGraph and each of kGraphs), in attribute-name order.
  std::vector<Graph*> subgraphs() const;
  //! Subgraph `key` (kGraph), or nullptr.
  Graph* subgraph(const std::string& key) const;
  //! Trailing inputs bound to the subgraphs' captures (0 for a node without subgraphs).
  size_t num_captures() const;
  //! The inputs the op itself defines: num_inputs() - num_captures().
  size_t num_explicit_inputs() const { return inputs_.size() - num_captures(); }

 private:
  friend class Graph;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  std::string name;
  //! Opset version per domain ("" = default ONNX domain).
  std::map<std::string, int64_t> opsets;
  int64_t opset() const;  //!< default-domain opset (0 if none)

  //! Creates a value; fails if the name is taken. Empty name gets a fresh one.
  Result<Value*> AddValue(const std::string& name, TensorType type = {});
  //! Creates a constant value holding `data`.
  Result<Value*> AddConstant(const std::string& name, Tensor data);
  //! Creates a placeholder for an enclosing graph's value and appends it to captures().
  Result<Value*> AddCapture(const std::string& name, TensorType type = {});
  Value* FindValue(const std::string& name) const;
  //! A name not used by any value, derived from `hint`.
  std::string FreshName(const std::string& hint);

  //! Appends a node. Outputs must not already have a producer.
  Result<Node*> AddNode(const std::string& op_type, const std::vector<Value*>& inputs,
                        const std::vector<Value*>& outputs, const std::string& name = {});
  //! Removes a node (its outputs stay, without producer).
  void RemoveNode(Node* node);
  //! Every use of `from` (and graph outputs) now refers to `to`.
  void ReplaceAllUsesWith(Value* from, Value* to);
  //! Renames a value; fails if the new name is taken.
  Status RenameValue(Value* v, const std::string& new_name);
  //! Deletes values that are not used, produced, inputs or outputs.
  void RemoveUnusedValues();

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Value*>& inputs() { return inputs_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  std::vector<Value*>& outputs() { return outputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  //! Subgraphs only: placeholders for enclosing graphs' values, bound by position to the
  //! owning node's trailing inputs (see the top of this file). Empty for a top-level graph.
  std::vector<Value*>& captures() { return captures_; }
  const std::vector<Value*>& captures() const { return captures_; }
  bool is_capture(const Value* v) const;
  //! All values in creation order.
  std::vector<Value*> values() const;

  //! Orders nodes so producers come before users; error names a node on a cycle.
  Status TopologicalSort();

  //! A deep copy: values, nodes, constants' data (shared, immutable), subgraphs (copied).
  std::unique_ptr<Graph> Clone() const;
  //! Calls `fn` on every subgraph at any depth, each before the subgraphs nested in it.
  void ForEachSubgraph(const std::function<void(Graph&)>& fn) const;

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<Value*> captures_;
  int64_t fresh_counter_ = 0;
};

//! Structural checks: every input defined, single producer, acyclic, graph outputs
//! produced, constants' data matching their type; subgraphs checked too (captures bound
//! to the node's trailing inputs, the same count in every subgraph of a node). Lists
//! every problem at once.
Status Verify(const Graph& graph);

}  // namespace sampan::ir
