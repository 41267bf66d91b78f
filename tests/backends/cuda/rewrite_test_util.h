// Shared by the tests of the CUDA backend's lowering rewrites (fuse_*_test.cpp): a plan
// around a parsed graph, and the check that a rewritten graph computes what the original
// does on the reference executor. Graph work only: no GPU needed.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "passes/pass_test_util.h"
#include "plan/plan.h"

namespace sampan::cuda::testing {

//! A plan holding `text` with every node's precision recorded as fp32 (as the builder does).
inline plan::Plan PlanOf(const std::string& text) {
  plan::Plan p;
  p.graph = std::shared_ptr<ir::Graph>(passes::testing::MustParse(text));
  for (const auto& n : p.graph->nodes()) p.choices[n->name].precision = "fp32";
  return p;
}

//! The rewritten plan's outputs equal those of `text` on random inputs, within `tol`.
inline void ExpectSameOutputs(const std::string& text, const plan::Plan& p, double tol, uint64_t seed = 7) {
  auto before = passes::testing::MustParse(text);
  auto inputs = passes::testing::RandomInputs(*before, seed);
  auto want = passes::testing::RunReference(std::move(before), inputs);
  reference::Executor exec(p.graph);
  auto got = exec.Run(inputs);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i)
    EXPECT_TRUE(passes::testing::AllClose((*got)[i], (*want)[i], tol)) << "output " << i;
}

}  // namespace sampan::cuda::testing
