// Helpers for the CPU backend tests: build a graph written in the IR text form
// for the cpu backend (passes off, so the graph runs as written), run it on
// random inputs, and compare with the reference executor on the same inputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_engine.h"
#include "backends/reference/executor.h"
#include "builder/builder.h"
#include "ir/text.h"
#include "ops/run_node.h"
#include "passes/pass.h"
#include "runtime/engine.h"

namespace sampan::cpu::testing {

inline std::unique_ptr<ir::Graph> Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << text;
  if (!g.ok()) return std::make_unique<ir::Graph>();
  std::unique_ptr<ir::Graph> graph = std::move(g).value();
  Status st = ir::Verify(*graph);
  if (st.ok()) st = ops::InferTypes(*graph);
  EXPECT_TRUE(st.ok()) << st.ToString() << "\n" << text;
  return graph;
}

//! The graph as a cpu plan, with every pass switched off (unless `optimize`).
inline std::shared_ptr<runtime::Engine> CpuEngineFor(const std::string& text, int threads = 2, bool optimize = false) {
  builder::BuildConfig config;
  config.backend = "cpu";
  if (!optimize)
    for (const passes::PassDef* p : passes::AllPasses()) config.disabled_passes.insert(p->name);
  auto plan = builder::Build(Parse(text), config, nullptr);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return nullptr;
  runtime::EngineOptions options;
  options.threads = threads;
  auto engine = runtime::Engine::Create(std::move(plan).value(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? *engine : nullptr;
}

inline Tensor RandomTensor(DType dtype, const Shape& shape, std::mt19937_64& rng, double lo = -2, double hi = 2) {
  Tensor t = Tensor::Alloc(dtype, shape);
  std::uniform_real_distribution<double> real(lo, hi);
  (void)DispatchDType(dtype, [&]<class T>() {
    T* p = t.mutable_data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = ConvertElement<T>(real(rng));
  });
  return t;
}

//! Max |a-b| / (atol + rtol*|b|) over all elements (<= 1 passes).
inline double Mismatch(const Tensor& a, const Tensor& b, double rtol = 1e-4, double atol = 1e-4) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = ElementAsDouble(a, i), y = ElementAsDouble(b, i);
    if (std::isnan(x) && std::isnan(y)) continue;
    worst = std::max(worst, std::fabs(x - y) / (atol + rtol * std::fabs(y)));
  }
  return worst;
}

//! Sets an environment variable for the life of the object (then restores it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

//! The labels of the steps the cpu context prepared for `inputs`.
inline std::vector<std::string> StepLabels(runtime::Engine& engine, const std::map<std::string, Tensor>& inputs) {
  auto& cpu = dynamic_cast<CpuEngine&>(engine.backend_engine());
  CpuContext ctx(cpu);
  auto prog = ctx.ProgramFor(inputs);
  EXPECT_TRUE(prog.ok()) << prog.status().ToString();
  if (!prog.ok() || *prog == nullptr) return {};
  return (*prog)->labels();
}

//! One cross-backend case: the graph runs on the cpu backend and the reference executor on the
//! same random inputs, for each set of input shapes; every output must agree.
struct Case {
  std::string name;
  std::string graph;
  std::vector<std::map<std::string, Shape>> shapes;
  std::string expect_label;  //!< substring of a step label proving the fast kernel ran
  double rtol = 1e-4, atol = 1e-4;
};

inline void RunCase(const Case& c) {
  SCOPED_TRACE(c.name);
  auto engine = CpuEngineFor(c.graph);
  ASSERT_NE(engine, nullptr);
  auto ref_graph = std::shared_ptr<const ir::Graph>(Parse(c.graph));
  reference::Executor ref(ref_graph);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  std::mt19937_64 rng(42);
  for (const auto& shapes : c.shapes) {
    std::map<std::string, Tensor> inputs;
    for (const ir::Value* in : ref_graph->inputs()) {
      auto it = shapes.find(in->name());
      ASSERT_NE(it, shapes.end()) << "no shape for " << in->name();
      inputs[in->name()] = in->type.dtype == DType::kInt64 ? RandomTensor(DType::kInt64, it->second, rng, 0, 3.99)
                                                           : RandomTensor(in->type.dtype, it->second, rng);
    }
    std::string where;
    for (const auto& [n, s] : shapes) where += n + "=" + ShapeToString(s) + " ";
    SCOPED_TRACE(where);
    auto want = ref.Run(inputs);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    for (int rep = 0; rep < 2; ++rep) {  // twice: the second run reuses the prepared program
      auto got = (*ctx)->Run(inputs);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(got->size(), want->size());
      for (size_t i = 0; i < got->size(); ++i)
        EXPECT_LE(Mismatch((*got)[i], (*want)[i], c.rtol, c.atol), 1.0)
            << "output " << i << " " << (*got)[i].Describe() << " vs " << (*want)[i].Describe();
    }
    if (!c.expect_label.empty()) {
      std::string all;
      bool found = false;
      for (const auto& l : StepLabels(*engine, inputs)) {
        all += l + "\n";
        found |= l.find(c.expect_label) != std::string::npos;
      }
      EXPECT_TRUE(found) << "no step labelled '" << c.expect_label << "':\n" << all;
    }
  }
}

}  // namespace sampan::cpu::testing
