// The planning walk every backend goes through (runtime/plan_walk.h): what it folds,
// where it stops for data-dependent shapes, what it hands the backend, the shared
// lifetime helper, and the reference and CPU backends planning through it alike.
#include "runtime/plan_walk.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "backends/cpu/cpu_test_util.h"
#include "backends/cpu/kernels.h"
#include "backends/reference/executor.h"
#include "onnx/importer.h"
#include "ops/draw_test_op.h"
#include "ops/fold_limits.h"
#include "ops/op.h"
#include "runtime/reference_context.h"

namespace sampan::runtime {
namespace {

using cpu::testing::Parse;
using cpu::testing::RandomTensor;

//! node name -> fate, for every node the walk reached.
std::map<std::string, NodeFate> Fates(const std::vector<WalkedNode>& nodes) {
  std::map<std::string, NodeFate> fates;
  for (const WalkedNode& n : nodes) fates[n.node->name] = n.fate;
  return fates;
}

std::string Describe(const std::vector<WalkedNode>& nodes) {
  std::string s;
  for (const WalkedNode& n : nodes)
    s += StrCat("\n  ", n.node->Label(), ": ", NodeFateName(n.fate), n.reason.empty() ? "" : " (" + n.reason + ")");
  return s;
}

//! A walk whose lowering accepts every node and lists what it was asked.
struct RecordingWalk {
  std::vector<std::string> lowered;
  std::map<std::string, std::vector<Shape>> output_shapes;
  std::map<std::string, std::vector<bool>> inputs_known;
  Result<PlanWalk> Run(const ir::Graph& g, const std::map<std::string, ConcreteType>& inputs) {
    return WalkPlan(g, inputs, [&](const LowerRequest& r) {
      lowered.push_back(r.node.name);
      for (const PlanValue* o : r.outputs) output_shapes[r.node.name].push_back(o ? o->shape : Shape{});
      for (const PlanValue* in : r.inputs) inputs_known[r.node.name].push_back(in && in->known);
      return Status::Ok();
    });
  }
};

//! A graph parsed and verified, without type inference (which refuses ops this build cannot run).
std::unique_ptr<ir::Graph> ParseUninferred(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return std::make_unique<ir::Graph>();
  EXPECT_TRUE(ir::Verify(**g).ok());
  return std::move(g).value();
}

std::vector<int64_t> Int64s(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(ElementAsInt64(t, i));
  return v;
}

// ---- the walk --------------------------------------------------------------------

// Flatten written the way exporters do: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
const char* kShapeArithmetic = R"(
  opset 17
  graph g (x: f32[N,3,4,4]) -> (y) {
    s = Shape(x) @shape
    i0 = const i64[] {0}
    d0 = Gather(s, i0) {axis=0} @gather
    ax = const i64[1] {0}
    d0u = Unsqueeze(d0, ax) @unsqueeze
    minus1 = const i64[1] {-1}
    target = Concat(d0u, minus1) {axis=0} @concat
    r = Reshape(x, target) @reshape
    y = Relu(r) @relu
  }
)";

TEST(PlanWalk, FoldsShapeArithmeticAndLowersTheRest) {
  auto g = Parse(kShapeArithmetic);
  RecordingWalk rec;
  auto walk = rec.Run(*g, {{"x", {DType::kFloat32, {2, 3, 4, 4}}}});
  ASSERT_TRUE(walk.ok()) << walk.status().ToString();
  EXPECT_FALSE(walk->dynamic);
  const auto fates = Fates(walk->nodes);
  for (const char* folded : {"shape", "gather", "unsqueeze", "concat"})
    EXPECT_EQ(fates.at(folded), NodeFate::kFolded) << folded << Describe(walk->nodes);
  EXPECT_EQ(rec.lowered, (std::vector<std::string>{"reshape", "relu"}));
  const Tensor* target = walk->known(g->FindValue("target"));
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(Int64s(*target), (std::vector<int64_t>{2, -1}));
  // The backend sees the concrete output shape and the known shape input.
  EXPECT_EQ(rec.output_shapes.at("reshape"), (std::vector<Shape>{{2, 48}}));
  EXPECT_EQ(rec.inputs_known.at("reshape"), (std::vector<bool>{false, true}));
  EXPECT_EQ(walk->count(NodeFate::kFolded), 4u);
  EXPECT_EQ(walk->count(NodeFate::kLowered), 2u);
}

TEST(PlanWalk, KnownResultsAboveTheShapeFoldLimitAreLowered) {
  const int64_t n = ops::kMaxShapeFoldElements;
  auto g = Parse(R"(
    opset 17
    graph g (x: f32[1]) -> (y, z) {
      small = const i64[1] {)" +
                 std::to_string(n) + R"(}
      large = const i64[1] {)" +
                 std::to_string(n + 1) + R"(}
      a = ConstantOfShape(small) @at_limit
      b = ConstantOfShape(large) @over_limit
      y = Add(x, a) @add_a
      z = Add(x, b) @add_b
    }
  )");
  RecordingWalk rec;
  auto walk = rec.Run(*g, {{"x", {DType::kFloat32, {1}}}});
  ASSERT_TRUE(walk.ok()) << walk.status().ToString();
  const auto fates = Fates(walk->nodes);
  EXPECT_EQ(fates.at("at_limit"), NodeFate::kFolded);
  EXPECT_EQ(fates.at("over_limit"), NodeFate::kLowered);
  EXPECT_EQ(walk->known(g->FindValue("b")), nullptr);
  EXPECT_EQ(rec.inputs_known.at("over_limit"), (std::vector<bool>{true}));
}

TEST(PlanWalk, NondeterministicNodesAreNeverFolded) {
  // sampan.test::Draw is flagged kRandom like RandomNormal (whose kernel this build does not
  // have: its inference answers kUnsupported). Its inputs are all known (none, or constants),
  // yet every run must draw anew; the deterministic node beside it on the same constant folds.
  ASSERT_TRUE(ops::testing::kDrawRegistered);
  auto g = Parse(R"(
    opset 17
    graph g (x: i64[1]) -> (y, z, w) {
      d = sampan.test::Draw() @draw
      y = Add(x, d) @add_draw
      c = const i64[1] {5}
      e = sampan.test::Draw(c) @draw_of_constant
      z = Add(x, e) @add_e
      n = Neg(c) @neg_of_constant
      w = Add(x, n) @add_n
    }
  )");
  for (const auto& n : g->nodes()) EXPECT_EQ(ops::IsNondeterministic(*n), n->op_type == "Draw") << n->Label();
  RecordingWalk rec;
  auto walk = rec.Run(*g, {{"x", {DType::kInt64, {1}}}});
  ASSERT_TRUE(walk.ok()) << walk.status().ToString();
  const auto fates = Fates(walk->nodes);
  EXPECT_EQ(fates.at("draw"), NodeFate::kLowered) << Describe(walk->nodes);
  EXPECT_EQ(fates.at("draw_of_constant"), NodeFate::kLowered) << Describe(walk->nodes);
  EXPECT_EQ(fates.at("neg_of_constant"), NodeFate::kFolded) << Describe(walk->nodes);
  EXPECT_EQ(walk->known(g->FindValue("d")), nullptr);

  auto normal = ParseUninferred(R"(
    opset 17
    graph g (x: f32[2,3]) -> (y) {
      n = RandomNormal() {shape=[2, 3]} @normal
      y = Add(x, n) @add_normal
    }
  )");
  ASSERT_TRUE(ops::IsNondeterministic(*normal->nodes()[0]));
  auto refused = rec.Run(*normal, {{"x", {DType::kFloat32, {2, 3}}}});
  if (refused.ok()) {
    EXPECT_EQ(Fates(refused->nodes).at("normal"), NodeFate::kLowered) << Describe(refused->nodes);
  } else {
    EXPECT_NE(refused.status().message().find("normal"), std::string::npos) << refused.status().ToString();
  }
}

TEST(PlanWalk, DataDependentShapeStopsTheWalk) {
  auto g = Parse(R"(
    opset 17
    graph g (x: f32[6]) -> (y) {
      a = Relu(x) @relu
      nz = NonZero(a) @nonzero
      shape = const i64[1] {-1}
      y = Reshape(nz, shape) @reshape
    }
  )");
  RecordingWalk rec;
  auto walk = rec.Run(*g, {{"x", {DType::kFloat32, {6}}}});
  ASSERT_TRUE(walk.ok()) << walk.status().ToString();
  EXPECT_TRUE(walk->dynamic);
  ASSERT_NE(walk->dynamic_node, nullptr);
  EXPECT_EQ(walk->dynamic_node->name, "nonzero");
  EXPECT_NE(walk->dynamic_reason.find("nonzero"), std::string::npos) << walk->dynamic_reason;
  EXPECT_NE(walk->dynamic_reason.find("'nz'"), std::string::npos) << walk->dynamic_reason;
  // Nodes before it were planned; the stop and what follows were not.
  EXPECT_EQ(rec.lowered, (std::vector<std::string>{"relu"}));
  EXPECT_EQ(walk->nodes.size(), 1u);
}

TEST(PlanWalk, DataDependentOpOnKnownInputsIsEvaluated) {
  // NonZero of a constant: its shape is learnt by running it while planning.
  auto g = Parse(R"(
    opset 17
    graph g (x: i64[N]) -> (y) {
      c = const f32[5] {0, 1, 0, 2, 3}
      nz = NonZero(c) @nonzero
      shape = const i64[1] {-1}
      flat = Reshape(nz, shape) @reshape
      y = Add(x, flat) @add
    }
  )");
  RecordingWalk rec;
  auto walk = rec.Run(*g, {{"x", {DType::kInt64, {3}}}});
  ASSERT_TRUE(walk.ok()) << walk.status().ToString();
  EXPECT_FALSE(walk->dynamic) << walk->dynamic_reason;
  EXPECT_EQ(Fates(walk->nodes).at("nonzero"), NodeFate::kFolded);
  ASSERT_NE(walk->known(g->FindValue("flat")), nullptr);
  EXPECT_EQ(Int64s(*walk->known(g->FindValue("flat"))), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(rec.lowered, (std::vector<std::string>{"add"}));
}

TEST(PlanWalk, UnsupportedNodesGoToTheFallbackAndErrorsStopTheWalk) {
  auto g = Parse(R"(
    opset 17
    graph g (x: f32[2,3]) -> (y) {
      a = Relu(x) @relu
      b = Sigmoid(a) @sigmoid
      y = Neg(b) @neg
    }
  )");
  std::vector<std::string> fell_back;
  auto lower = [](const LowerRequest& r) -> Status {
    if (r.node.op_type == "Sigmoid") return Unsupported(r.node.Label(), ": no kernel for these shapes");
    return Status::Ok();
  };
  auto fallback = [&](const LowerRequest& r) {
    fell_back.push_back(r.node.name);
    return Status::Ok();
  };
  const std::map<std::string, ConcreteType> in = {{"x", {DType::kFloat32, {2, 3}}}};
  auto walk = WalkPlan(*g, in, lower, fallback);
  ASSERT_TRUE(walk.ok()) << walk.status().ToString();
  EXPECT_EQ(fell_back, (std::vector<std::string>{"sigmoid"}));
  ASSERT_EQ(walk->nodes.size(), 3u);
  EXPECT_EQ(walk->nodes[1].fate, NodeFate::kUnsupported);
  EXPECT_NE(walk->nodes[1].reason.find("no kernel for these shapes"), std::string::npos);
  EXPECT_EQ(walk->nodes[2].fate, NodeFate::kLowered);

  auto failing = [](const LowerRequest& r) -> Status {
    if (r.node.op_type == "Sigmoid") return Internal("kernel creation failed");  // the walk names the node
    return Status::Ok();
  };
  auto stopped = WalkPlan(*g, in, failing, fallback);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.status().code(), StatusCode::kInternal);
  EXPECT_NE(stopped.status().message().find("sigmoid"), std::string::npos) << stopped.status().ToString();

  auto missing = WalkPlan(*g, {}, lower, fallback);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'x'"), std::string::npos) << missing.status().ToString();
}

TEST(PlanWalk, InferenceErrorsNameTheNode) {
  auto g = Parse(R"(
    opset 17
    graph g (x: f32[N,4]) -> (y) {
      shape = const i64[2] {3, 5}
      y = Reshape(x, shape) @bad_reshape
    }
  )");
  RecordingWalk rec;
  auto walk = rec.Run(*g, {{"x", {DType::kFloat32, {2, 4}}}});
  ASSERT_FALSE(walk.ok());
  EXPECT_NE(walk.status().message().find("bad_reshape"), std::string::npos) << walk.status().ToString();
}

// ---- lifetimes -----------------------------------------------------------------

const char* kViewChain = R"(
  opset 17
  graph g (x: f32[4,6]) -> (y, keep) {
    a = Relu(x) @relu
    shape = const i64[2] {6, 4}
    v = Reshape(a, shape) @view
    b = Sigmoid(x) @sigmoid
    c = Neg(b) @neg
    keep = Abs(c) @abs
    y = Transpose(v) @late_reader
  }
)";

//! Steps for every node, Reshape a view of its input 0.
std::vector<StepMemory> StepsWithReshapeViews(const ir::Graph& g) {
  std::vector<StepMemory> steps;
  for (const auto& n : g.nodes())
    steps.push_back(StepMemory{n.get(), n->op_type == "Reshape" ? std::vector<int>{0} : std::vector<int>{}});
  return steps;
}

const ValueLifetime* Find(const Lifetimes& l, const std::string& name) {
  for (const ValueLifetime& v : l.owners)
    if (v.value->name() == name) return &v;
  return nullptr;
}

TEST(Lifetimes, ViewsExtendTheirRootsLifetime) {
  auto g = Parse(kViewChain);
  const Lifetimes l = ComputeLifetimes(*g, StepsWithReshapeViews(*g));
  // The view owns no memory: its reads keep `a` alive until the last reader of `v`.
  EXPECT_EQ(Find(l, "v"), nullptr);
  EXPECT_EQ(l.RootOf(g->FindValue("v")), g->FindValue("a"));
  const ValueLifetime* a = Find(l, "a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->first, 0);
  EXPECT_EQ(a->last, 5) << "a's own last read is the Reshape (step 1); y = Transpose(v) reads it at step 5";
  const ValueLifetime* b = Find(l, "b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->first, 2);
  EXPECT_EQ(b->last, 3);
  // Without the view, `a` would die at the Reshape.
  std::vector<StepMemory> no_views;
  for (const auto& n : g->nodes()) no_views.push_back(StepMemory{n.get(), {}});
  const Lifetimes plain = ComputeLifetimes(*g, no_views);
  EXPECT_EQ(Find(plain, "a")->last, 1);
  EXPECT_EQ(Find(plain, "v")->last, 5);
}

TEST(Lifetimes, GraphInputsAndOutputsLiveToTheEnd) {
  auto g = Parse(R"(
    opset 17
    graph g (x: f32[4]) -> (early, y) {
      early = Relu(x) @first
      shape = const i64[2] {2, 2}
      e2 = Reshape(early, shape) @view
      y = Neg(e2) @second
      z = Abs(y) @third
      w = Sigmoid(z) @fourth
    }
  )");
  const Lifetimes l = ComputeLifetimes(*g, StepsWithReshapeViews(*g));
  const int end = static_cast<int>(g->nodes().size());
  ASSERT_NE(Find(l, "x"), nullptr);
  EXPECT_EQ(Find(l, "x")->first, 0);
  EXPECT_EQ(Find(l, "x")->last, end);
  EXPECT_EQ(Find(l, "early")->last, end);
  EXPECT_EQ(Find(l, "y")->last, end);
  EXPECT_EQ(Find(l, "z")->last, 4);
  EXPECT_EQ(Find(l, "w")->first, 4);
  EXPECT_EQ(Find(l, "w")->last, 4) << "written, never read: its own step only";
  // An output reached only through a view keeps the view's root to the end.
  auto v = Parse(R"(
    opset 17
    graph g (x: f32[4]) -> (out) {
      a = Relu(x) @relu
      shape = const i64[2] {2, 2}
      out = Reshape(a, shape) @view
    }
  )");
  const Lifetimes lv = ComputeLifetimes(*v, StepsWithReshapeViews(*v));
  EXPECT_EQ(Find(lv, "a")->last, 2);
}

TEST(Lifetimes, ArenaOffsetsNeverOverlapForOverlappingLifetimes) {
  // A chain with fan-out and views (Reshape there and back), every value its own size.
  std::string text =
      "opset 17\ngraph g (x: f32[64]) -> (out) {\n  flat = const i64[1] {64}\n  square = const i64[2] {8, 8}\n";
  std::mt19937 rng(7);
  std::vector<std::string> live = {"x"};
  for (int i = 0; i < 40; ++i) {
    const std::string a = live[rng() % live.size()], b = live[rng() % live.size()];
    const std::string v = "v" + std::to_string(i);
    if (i % 5 == 4) {
      text += StrCat("  ", v, "s = Reshape(", a, ", square)\n  ", v, " = Reshape(", v, "s, flat)\n");
    } else {
      text += StrCat("  ", v, " = Add(", a, ", ", b, ")\n");
    }
    live.push_back(v);
  }
  text += "  out = Add(" + live.back() + ", " + live[live.size() / 2] + ")\n}\n";
  auto g = Parse(text);
  ASSERT_FALSE(g->nodes().empty());
  const Lifetimes l = ComputeLifetimes(*g, StepsWithReshapeViews(*g));
  std::map<const ir::Value*, size_t> size;
  size_t k = 0;
  for (const ValueLifetime& o : l.owners) size[o.value] = 100 + 37 * (k++ % 11);
  const ArenaRequest req = ArenaBlocksFor(l, [&](const ir::Value* v) -> std::optional<size_t> {
    if (v == g->inputs()[0]) return std::nullopt;  // the caller's memory
    return size.at(v);
  });
  EXPECT_EQ(req.values.size(), l.owners.size() - 1);
  const ArenaLayout layout = PlanArena(req.blocks);
  size_t shared = 0;
  for (size_t i = 0; i < req.blocks.size(); ++i)
    for (size_t j = i + 1; j < req.blocks.size(); ++j) {
      const ArenaBlock& a = req.blocks[i];
      const ArenaBlock& b = req.blocks[j];
      const bool alive_together = !(a.last < b.first || b.last < a.first);
      const bool overlap =
          layout.offsets[i] < layout.offsets[j] + b.size && layout.offsets[j] < layout.offsets[i] + a.size;
      if (alive_together) {
        EXPECT_FALSE(overlap) << req.values[i]->name() << " [" << a.first << "," << a.last << "] and "
                              << req.values[j]->name() << " [" << b.first << "," << b.last << "] share memory";
      }
      shared += overlap;
    }
  EXPECT_GT(shared, 0u) << "values with disjoint lifetimes should reuse memory";
}

// ---- backends through the walk ----------------------------------------------------

//! Small graphs both backends plan: shape arithmetic feeding a conv / matmul / reshape net.
struct Case {
  const char* name;
  std::string text;
  std::map<std::string, Shape> shapes;
};

std::vector<Case> BackendCases() {
  return {
      {"flatten", kShapeArithmetic, {{"x", {2, 3, 4, 4}}}},
      {"conv_reshape_matmul",
       R"(
        opset 17
        graph g (x: f32[N,3,8,8]) -> (y) {
          w = const f32[8,3,3,3] random
          b = const f32[8] random
          c = Conv(x, w, b) {pads=[1, 1, 1, 1]} @conv
          r = Relu(c) @relu
          p = MaxPool(r) {kernel_shape=[2, 2], strides=[2, 2]} @pool
          s = Shape(p) @shape
          i0 = const i64[1] {0}
          n = Gather(s, i0) {axis=0} @batch
          m1 = const i64[1] {-1}
          t = Concat(n, m1) {axis=0} @target
          f = Reshape(p, t) @flatten
          fw = const f32[128,10] random
          mm = MatMul(f, fw) @matmul
          y = Softmax(mm) {axis=1} @softmax
        }
      )",
       {{"x", {2, 3, 8, 8}}}},
      {"gemm_transpose_concat",
       R"(
        opset 17
        graph g (x: f32[N,16], z: f32[N,4]) -> (y, shape_out) {
          w = const f32[8,16] random
          b = const f32[8] random
          h = Gemm(x, w, b) {transB=1} @gemm
          a = Sigmoid(h) @sigmoid
          cat = Concat(a, z) {axis=1} @concat
          tr = Transpose(cat) {perm=[1, 0]} @transpose
          y = Add(tr, tr) @add
          s = Shape(tr) @shape
          shape_out = Mul(s, s) @shape_mul
        }
      )",
       {{"x", {3, 16}}, {"z", {3, 4}}}},
  };
}

std::map<std::string, Tensor> RandomInputs(const std::map<std::string, Shape>& shapes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::map<std::string, Tensor> in;
  for (const auto& [name, shape] : shapes) in[name] = RandomTensor(DType::kFloat32, shape, rng);
  return in;
}

//! The CPU program's walk, and the reference context's walk, for one case.
struct BothWalks {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<cpu::CpuContext> cpu_ctx;
  cpu::Program* program = nullptr;
  std::unique_ptr<ReferenceContext> ref;
};

void WalkBoth(const Case& c, BothWalks* out) {
  out->engine = cpu::testing::CpuEngineFor(c.text);
  ASSERT_NE(out->engine, nullptr);
  auto& cpu_engine = dynamic_cast<cpu::CpuEngine&>(out->engine->backend_engine());
  out->cpu_ctx = std::make_unique<cpu::CpuContext>(cpu_engine);
  const auto inputs = RandomInputs(c.shapes, 1);
  auto prog = out->cpu_ctx->ProgramFor(inputs);
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  ASSERT_NE(*prog, nullptr) << c.name << ": the cpu program found a data-dependent shape";
  out->program = *prog;
  out->ref = std::make_unique<ReferenceContext>(out->engine->plan().graph);
  Timing timing;
  auto ran = out->ref->Run(inputs, &timing);
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  ASSERT_NE(out->ref->last_walk(), nullptr);
}

TEST(PlanWalkBackends, ReferenceAndCpuAgreeOnWhatIsFolded) {
  for (const Case& c : BackendCases()) {
    SCOPED_TRACE(c.name);
    BothWalks both;
    WalkBoth(c, &both);
    if (HasFatalFailure()) return;
    const std::vector<WalkedNode>& cpu_nodes = both.program->walked();
    const std::vector<WalkedNode>& ref_nodes = both.ref->last_walk()->nodes;
    ASSERT_EQ(cpu_nodes.size(), both.engine->plan().graph->nodes().size()) << Describe(cpu_nodes);
    ASSERT_EQ(ref_nodes.size(), cpu_nodes.size()) << Describe(ref_nodes);
    size_t folded = 0;
    for (size_t i = 0; i < cpu_nodes.size(); ++i) {
      EXPECT_EQ(cpu_nodes[i].node, ref_nodes[i].node);
      EXPECT_EQ(cpu_nodes[i].fate == NodeFate::kFolded, ref_nodes[i].fate == NodeFate::kFolded)
          << cpu_nodes[i].node->Label() << ": cpu " << NodeFateName(cpu_nodes[i].fate) << ", reference "
          << NodeFateName(ref_nodes[i].fate);
      folded += cpu_nodes[i].fate == NodeFate::kFolded;
    }
    EXPECT_GT(folded, 0u) << "every case has shape arithmetic" << Describe(cpu_nodes);
    // Folded nodes are no steps of the CPU program.
    for (const std::string& label : both.program->labels())
      for (const WalkedNode& n : cpu_nodes)
        if (n.fate == NodeFate::kFolded) {
          EXPECT_EQ(label.find(" " + n.node->name + " "), std::string::npos) << label;
        }
  }
}

TEST(PlanWalkBackends, CapabilitySaysSupportedThenLoweringSucceeds) {
  // The CPU builder's capability answer is the kernel family it records per node (or
  // "reference"). A family it chose must then lower the node at the shapes planned: a
  // node it claimed that ends on the reference fallback is a capability bug. The
  // reference backend claims every node and must lower every one.
  for (const Case& c : BackendCases()) {
    SCOPED_TRACE(c.name);
    BothWalks both;
    WalkBoth(c, &both);
    if (HasFatalFailure()) return;
    const auto& choices = both.engine->plan().choices;
    size_t claimed = 0;
    for (const WalkedNode& n : both.program->walked()) {
      auto it = choices.find(n.node->name);
      ASSERT_NE(it, choices.end()) << n.node->Label() << " has no recorded choice";
      const std::string& family = it->second.tactic.family;
      if (family.empty() || family == cpu::kReferenceTactic || n.fate == NodeFate::kFolded) continue;
      ++claimed;
      EXPECT_EQ(n.fate, NodeFate::kLowered)
          << n.node->Label() << ": the capability query chose '" << family << "' but lowering answered: " << n.reason;
    }
    EXPECT_GT(claimed, 0u);
    EXPECT_EQ(both.ref->last_walk()->count(NodeFate::kUnsupported), 0u) << Describe(both.ref->last_walk()->nodes);
  }
}

TEST(PlanWalkBackends, CpuMatchesReferenceOnTheCases) {
  for (const Case& c : BackendCases()) {
    SCOPED_TRACE(c.name);
    auto engine = cpu::testing::CpuEngineFor(c.text);
    ASSERT_NE(engine, nullptr);
    auto ctx = engine->CreateContext();
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    ReferenceContext ref(engine->plan().graph);
    for (uint64_t seed : {1, 2}) {
      const auto inputs = RandomInputs(c.shapes, seed);
      auto got = (*ctx)->Run(inputs);
      Timing timing;
      auto want = ref.Run(inputs, &timing);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      ASSERT_EQ(got->size(), want->size());
      for (size_t i = 0; i < got->size(); ++i)
        EXPECT_LE(cpu::testing::Mismatch((*got)[i], (*want)[i]), 1.0) << "output " << i;
    }
  }
}

// ---- the reference context -------------------------------------------------------

::testing::AssertionResult BitwiseEqual(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure() << a.Describe() << " vs " << b.Describe();
  if (a.nbytes() > 0 && std::memcmp(a.raw(), b.raw(), a.nbytes()) != 0)
    return ::testing::AssertionFailure() << a.Describe() << ": contents differ";
  return ::testing::AssertionSuccess();
}

//! Runs `inputs` in order through one ReferenceContext and through the executor; every
//! output of every run must be identical, also after later runs (no output in the arena).
void ExpectSameAsExecutor(std::shared_ptr<const ir::Graph> g, const std::vector<std::map<std::string, Tensor>>& runs,
                          ReferenceContext* ctx) {
  reference::Executor exec(g);
  std::vector<std::vector<Tensor>> got, want;
  for (const auto& inputs : runs) {
    Timing timing;
    auto out = ctx->Run(inputs, &timing);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    auto ref = exec.Run(inputs);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    got.push_back(*out);
    want.push_back(*ref);
  }
  for (size_t r = 0; r < runs.size(); ++r)
    for (size_t i = 0; i < got[r].size(); ++i)
      EXPECT_TRUE(BitwiseEqual(got[r][i], want[r][i])) << "run " << r << " output " << i;
}

TEST(ReferenceContextPlan, StaticShapesArePlannedByTheWalk) {
  std::shared_ptr<const ir::Graph> g = Parse(kViewChain);
  ReferenceContext ctx(g);
  ExpectSameAsExecutor(
      g, {RandomInputs({{"x", {4, 6}}}, 1), RandomInputs({{"x", {4, 6}}}, 2), RandomInputs({{"x", {4, 6}}}, 3)}, &ctx);
  ASSERT_NE(ctx.last_walk(), nullptr);
  EXPECT_FALSE(ctx.last_walk()->dynamic);
  EXPECT_EQ(ctx.last_walk()->count(NodeFate::kLowered), g->nodes().size());
  // Intermediates only (a, v, b, c: 96 bytes, 128 aligned), sharing memory where their
  // lifetimes allow: outputs and inputs are not in the arena.
  EXPECT_GT(ctx.arena_bytes(), 0u);
  EXPECT_LT(ctx.arena_bytes(), 4u * 128);
}

TEST(ReferenceContextPlan, ViewsOfArenaMemoryOutliveTheirSource) {
  // `v` is a view (Reshape) of `a`, whose own last read is the Reshape; the slot of
  // `a` is free for `b` and `c` afterwards, while `v` is read at the end.
  std::shared_ptr<const ir::Graph> g = Parse(R"(
    opset 17
    graph g (x: f32[64]) -> (y) {
      a = Relu(x) @relu
      shape = const i64[2] {8, 8}
      v = Reshape(a, shape) @view
      b = Neg(x) @neg
      c = Abs(b) @abs
      shape2 = const i64[2] {8, 8}
      c2 = Reshape(c, shape2) @view2
      y = Add(v, c2) @add
    }
  )");
  ReferenceContext ctx(g);
  ExpectSameAsExecutor(g, {RandomInputs({{"x", {64}}}, 4), RandomInputs({{"x", {64}}}, 5)}, &ctx);
}

TEST(ReferenceContextPlan, FoldedShapeArithmeticAndFoldedOutputs) {
  std::shared_ptr<const ir::Graph> g = Parse(R"(
    opset 17
    graph g (x: f32[N,3]) -> (y, s2) {
      s = Shape(x) @shape
      s2 = Add(s, s) @shape_sum
      m1 = const i64[1] {-1}
      y = Reshape(x, m1) @flatten
    }
  )");
  ReferenceContext ctx(g);
  ExpectSameAsExecutor(
      g, {RandomInputs({{"x", {2, 3}}}, 6), RandomInputs({{"x", {5, 3}}}, 7), RandomInputs({{"x", {2, 3}}}, 8)}, &ctx);
  ASSERT_NE(ctx.last_walk(), nullptr);
  EXPECT_EQ(Fates(ctx.last_walk()->nodes).at("shape_sum"), NodeFate::kFolded);
  // A folded output handed to the caller is a copy: changing it leaves the plan's value alone.
  Timing timing;
  auto first = ctx.Run(RandomInputs({{"x", {2, 3}}}, 9), &timing);
  ASSERT_TRUE(first.ok());
  (*first)[1].mutable_data<int64_t>()[0] = 12345;
  auto second = ctx.Run(RandomInputs({{"x", {2, 3}}}, 9), &timing);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)[1].data<int64_t>()[0], 4);
}

TEST(ReferenceContextPlan, NondeterministicStepsDrawOnEveryRun) {
  ASSERT_TRUE(ops::testing::kDrawRegistered);
  std::shared_ptr<const ir::Graph> g = Parse(R"(
    opset 17
    graph g (x: i64[1]) -> (y) {
      d = sampan.test::Draw() @draw
      y = Add(x, d) @add
    }
  )");
  ReferenceContext ctx(g);
  std::map<std::string, Tensor> in = {{"x", Tensor::Zeros(DType::kInt64, {1}).value()}};
  Timing timing;
  auto a = ctx.Run(in, &timing);
  auto b = ctx.Run(in, &timing);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)[0].data<int64_t>()[0], (*b)[0].data<int64_t>()[0]);
}

TEST(ReferenceContextPlan, DataDependentShapesKeepTheRecordedPath) {
  std::shared_ptr<const ir::Graph> g = Parse(R"(
    opset 17
    graph g (x: f32[8]) -> (y, z) {
      a = Relu(x) @relu
      nz = NonZero(a) @nonzero
      m1 = const i64[1] {-1}
      y = Reshape(nz, m1) @reshape
      b = Neg(a) @neg
      z = Abs(b) @abs
    }
  )");
  ReferenceContext ctx(g);
  // Same shapes, different numbers of non-zeros: the second run outgrows the recorded slots.
  auto few = RandomInputs({{"x", {8}}}, 10);
  auto many = RandomInputs({{"x", {8}}}, 11);
  for (int i = 0; i < 8; ++i) {
    few["x"].mutable_data<float>()[i] = i == 3 ? 1.f : -1.f;
    many["x"].mutable_data<float>()[i] = 1.f + static_cast<float>(i);
  }
  ExpectSameAsExecutor(g, {few, many, few}, &ctx);
  ASSERT_NE(ctx.last_walk(), nullptr);
  EXPECT_TRUE(ctx.last_walk()->dynamic);
  EXPECT_EQ(ctx.last_walk()->dynamic_node->name, "nonzero");
}

// Slow tier: every case of an ONNX node suite through the reference context (planned by
// the walk, or recorded) must give exactly the executor's outputs, on a first and a
// second (arena-reusing) run. SAMPAN_NODE_SUITE=<folder of test_* cases> turns it on.
TEST(PlanWalkSlow, ReferenceContextMatchesExecutorOnTheNodeSuite) {
  const char* suite = std::getenv("SAMPAN_NODE_SUITE");
  if (suite == nullptr) GTEST_SKIP() << "set SAMPAN_NODE_SUITE to an ONNX node-test folder";
  namespace fs = std::filesystem;
  size_t compared = 0, planned = 0;
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(suite))
    if (e.is_directory()) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  for (const fs::path& dir : cases) {
    auto imported = onnx_import::ImportModelFile((dir / "model.onnx").string());
    if (!imported.ok()) continue;
    std::shared_ptr<const ir::Graph> g(std::move(imported).value());
    bool random = false;
    for (const auto& n : g->nodes()) random |= ops::IsNondeterministic(*n);
    if (random) continue;
    std::map<std::string, Tensor> inputs;
    bool readable = true;
    for (size_t i = 0; i < g->inputs().size() && readable; ++i) {
      auto t = onnx_import::ReadTensorProtoFile((dir / "test_data_set_0" / StrCat("input_", i, ".pb")).string());
      readable = t.ok();
      if (readable) inputs[g->inputs()[i]->name()] = std::move(t->second);
    }
    if (!readable) continue;
    reference::Executor exec(g);
    auto want = exec.Run(inputs);
    if (!want.ok()) continue;
    ReferenceContext ctx(g);
    Timing timing;
    for (int run = 0; run < 2; ++run) {
      auto got = ctx.Run(inputs, &timing);
      ASSERT_TRUE(got.ok()) << dir.filename() << " run " << run << ": " << got.status().ToString();
      ASSERT_EQ(got->size(), want->size());
      for (size_t i = 0; i < got->size(); ++i)
        EXPECT_TRUE(BitwiseEqual((*got)[i], (*want)[i])) << dir.filename() << " run " << run << " output " << i;
    }
    ++compared;
    planned += ctx.last_walk() != nullptr && !ctx.last_walk()->dynamic;
  }
  EXPECT_GT(compared, 0u);
  std::printf(
      "node suite through the reference context: %zu cases identical to the executor, %zu planned by the walk\n",
      compared, planned);
}

}  // namespace
}  // namespace sampan::runtime
