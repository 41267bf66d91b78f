// Helpers for the pass tests: parse a graph from the IR text form, run one pass
// (through the PassManager, every other pass switched off), compare printed IR,
// and run a graph before/after on random inputs with the reference executor.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/reference/executor.h"
#include "ir/graph.h"
#include "ir/text.h"
#include "ops/run_node.h"
#include "passes/pass.h"

namespace sampan::passes::testing {

//! Parses and type-checks a graph (as the importer leaves it).
inline std::unique_ptr<ir::Graph> MustParse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << text;
  if (!g.ok()) return std::make_unique<ir::Graph>();
  std::unique_ptr<ir::Graph> graph = std::move(g).value();
  Status st = ir::Verify(*graph);
  if (st.ok()) st = ops::InferTypes(*graph);
  EXPECT_TRUE(st.ok()) << st.ToString() << "\n" << text;
  return graph;
}

//! Options running only the named passes (in pipeline order).
inline PassManagerOptions OnlyPasses(const std::set<std::string>& enabled) {
  PassManagerOptions o;
  for (const PassDef* p : AllPasses())
    if (!enabled.count(p->name)) o.disabled.insert(p->name);
  return o;
}

struct PassRun {
  Status status;
  std::vector<Rewrite> rewrites;
  std::vector<PassStats> stats;
};

//! Runs the given passes on `graph` through a PassManager (verifying after each).
inline PassRun RunPasses(ir::Graph& graph, const std::set<std::string>& enabled) {
  for (const auto& name : enabled) EXPECT_NE(FindPass(name), nullptr) << "no pass " << name;
  PassManager pm(OnlyPasses(enabled));
  PassRun r;
  r.status = pm.Run(graph);
  r.rewrites = pm.context().rewrites;
  r.stats = pm.stats();
  return r;
}

//! The text form without types and without constant data (unless splat), for
//! comparing structure.
inline std::string Structure(const ir::Graph& g) {
  ir::PrintOptions o;
  o.print_types = false;
  o.max_elements = 0;
  return ir::PrintGraph(g, o);
}

//! Node op types in order, e.g. "Conv,Relu" ("sampan::FusedConv" for other domains).
inline std::string OpList(const ir::Graph& g) {
  std::string s;
  for (const auto& n : g.nodes()) {
    if (!s.empty()) s += ",";
    s += n->domain.empty() ? n->op_type : n->domain + "::" + n->op_type;
  }
  return s;
}

inline const ir::Node* FindNodeByOp(const ir::Graph& g, const std::string& op) {
  for (const auto& n : g.nodes())
    if (n->op_type == op) return n.get();
  return nullptr;
}

//! Random float inputs in [-2, 2] (f32, or f16/bf16 rounded from it; int64 inputs 0..3, 8-bit ones any value) for every
//! graph input (static shapes).
inline std::map<std::string, Tensor> RandomInputs(const ir::Graph& g, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> real(-2.f, 2.f);
  std::map<std::string, Tensor> out;
  for (const ir::Value* in : g.inputs()) {
    EXPECT_TRUE(in->type.is_static()) << in->name();
    if (!in->type.is_static()) continue;
    Tensor t = Tensor::Alloc(in->type.dtype, in->type.static_shape());
    if (in->type.dtype == DType::kFloat32) {
      float* p = t.mutable_data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = real(rng);
    } else if (in->type.dtype == DType::kInt64) {
      int64_t* p = t.mutable_data<int64_t>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<int64_t>(rng() % 4);
    } else if (in->type.dtype == DType::kFloat16 || in->type.dtype == DType::kBFloat16) {
      Tensor f = Tensor::Alloc(DType::kFloat32, in->type.static_shape());
      float* p = f.mutable_data<float>();
      for (int64_t i = 0; i < f.numel(); ++i) p[i] = real(rng);
      t = *CastTensor(f, in->type.dtype);
    } else if (in->type.dtype == DType::kUInt8 || in->type.dtype == DType::kInt8) {
      // The whole range: quantized activations.
      auto* p = static_cast<uint8_t*>(t.mutable_raw());
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>(rng() & 0xff);
    } else {
      ADD_FAILURE() << "RandomInputs: unsupported dtype for " << in->name();
    }
    out[in->name()] = t;
  }
  return out;
}

inline Result<std::vector<Tensor>> RunReference(std::unique_ptr<ir::Graph> graph,
                                                const std::map<std::string, Tensor>& inputs) {
  reference::Executor exec(std::shared_ptr<const ir::Graph>(std::move(graph)));
  return exec.Run(inputs);
}

//! |a - b| <= rtol * (|b| + 1) element-wise, same dtype/shape.
inline ::testing::AssertionResult AllClose(const Tensor& a, const Tensor& b, double rtol = 1e-5) {
  if (a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "dtype " << DTypeName(a.dtype()) << " vs " << DTypeName(b.dtype());
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shape " << ShapeToString(a.shape()) << " vs " << ShapeToString(b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = ElementAsDouble(a, i), y = ElementAsDouble(b, i);
    if (!(std::fabs(x - y) <= rtol * (std::fabs(y) + 1.0)))
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
  }
  return ::testing::AssertionSuccess();
}

//! Parses `text` twice, runs `passes` on one copy, checks the graph changed and
//! that both copies give the same outputs on random inputs. Returns the optimized
//! graph's structure for further checks.
inline std::string CheckNumerics(const std::string& text, const std::set<std::string>& passes, double rtol = 1e-5,
                                 uint64_t seed = 7) {
  auto before = MustParse(text);
  auto after = MustParse(text);
  PassRun r = RunPasses(*after, passes);
  EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  const std::string structure = Structure(*after);
  auto inputs = RandomInputs(*before, seed);
  std::vector<std::string> out_names_before, out_names_after;
  for (const ir::Value* v : before->outputs()) out_names_before.push_back(v->name());
  for (const ir::Value* v : after->outputs()) out_names_after.push_back(v->name());
  EXPECT_EQ(out_names_before, out_names_after) << "graph output names must be preserved";
  auto ref = RunReference(std::move(before), inputs);
  auto opt = RunReference(std::move(after), inputs);
  EXPECT_TRUE(ref.ok()) << ref.status().ToString();
  EXPECT_TRUE(opt.ok()) << opt.status().ToString() << "\n" << structure;
  if (ref.ok() && opt.ok()) {
    EXPECT_EQ(ref->size(), opt->size());
    for (size_t i = 0; i < ref->size() && i < opt->size(); ++i)
      EXPECT_TRUE(AllClose((*opt)[i], (*ref)[i], rtol)) << "output " << i << "\n" << structure;
  }
  return structure;
}

}  // namespace sampan::passes::testing

namespace sampan::passes::testing {

//! The node statements without types or large constant data, one per line.
inline std::string Nodes(const ir::Graph& g) {
  ir::PrintOptions o;
  o.print_types = false;
  o.max_elements = 0;
  std::string s;
  for (const auto& n : g.nodes()) s += (s.empty() ? "" : "\n") + ir::PrintNode(*n, o);
  return s;
}

inline std::vector<std::string> OutputNames(const ir::Graph& g) {
  std::vector<std::string> names;
  for (const ir::Value* v : g.outputs()) names.push_back(v->name());
  return names;
}

//! Parses, runs `passes`, expects success; returns the graph.
inline std::unique_ptr<ir::Graph> ParseAndRun(const std::string& text, const std::set<std::string>& passes,
                                              PassRun* run = nullptr) {
  auto g = MustParse(text);
  PassRun r = RunPasses(*g, passes);
  EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  if (run) *run = std::move(r);
  return g;
}

}  // namespace sampan::passes::testing
