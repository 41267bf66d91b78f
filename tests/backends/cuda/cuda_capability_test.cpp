// The CUDA backend's capability query (capability.h) and channels-last planning
// (layout.h). Both are pure functions of the graph and need no device, so these tests
// run everywhere the CUDA backend is built, GPU or not: `sampan build --dry-run`
// answers node by node, `--strict` refuses a build that would leave a node on the host
// and names it with the reason, and layouts stay channels-last through the ops that
// allow it. (That the runtime lowers what the query accepts is checked on the GPU: a
// context refuses a plan whose node the query accepted but lowering does not.)
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/capability.h"
#include "backends/cuda/layout.h"
#include "builder/builder.h"
#include "passes/pass_test_util.h"

namespace sampan::cuda {
namespace {

using passes::testing::MustParse;

Result<builder::BuildReport> DryRun(const std::string& text, bool strict = false,
                                    builder::Precision precision = builder::Precision::kFP32) {
  builder::BuildConfig config;
  config.backend = "cuda";
  config.dry_run = true;
  config.strict = strict;
  config.precision = precision;
  builder::BuildReport report;
  SP_RETURN_IF_ERROR(builder::Build(MustParse(text), config, &report).status());
  return report;
}

// The backend's lowering rewrites are passes of the pass manager (kLowering): reported with
// their names and times, and switched off by name like the shared pipeline's.
TEST(CudaLowering, RewritesArePassesSwitchedOffByName) {
  const char* text = R"(
    opset 17
    graph g (x: f32[2,8,16], r: f32[2,8,16]) -> (y) {
      s = Add(x, r) @residual
      sc = const f32[16] random
      bi = const f32[16] random
      y = LayerNormalization(s, sc, bi) {axis=-1, epsilon=1e-5} @ln
    })";
  std::vector<std::string> names;
  for (const passes::PassDef* p : passes::LoweringPasses("cuda")) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"fuse_add_layer_norm", "fuse_qkv", "fuse_norm_quantize",
                                             "fold_attention_views", "fuse_attention_quantize", "fuse_norm_activation",
                                             "fuse_conv_pool", "fuse_gemm_residual"}));
  EXPECT_TRUE(passes::LoweringPasses("no_such_backend").empty());
  auto count_op = [](const ir::Graph& g, const std::string& op) {
    size_t n = 0;
    for (const auto& node : g.nodes()) n += node->op_type == op;
    return n;
  };
  // A dry-run build (the capability query runs the lowering passes without a device).
  auto build = [&](std::set<std::string> disabled, std::vector<std::string>* ran, builder::BuildReport* report) {
    builder::BuildConfig config;
    config.backend = "cuda";
    config.dry_run = true;
    config.disabled_passes = std::move(disabled);
    config.after_pass = [ran](const std::string& name, const ir::Graph&) { ran->push_back(name); };
    return builder::Build(MustParse(text), config, report);
  };
  {
    std::vector<std::string> ran;
    builder::BuildReport report;
    auto p = build({}, &ran, &report);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(count_op(*p->graph, "Add"), 0u);
    EXPECT_EQ(std::count(ran.begin(), ran.end(), "fuse_add_layer_norm"), 1);
    auto st = std::find_if(report.passes.begin(), report.passes.end(),
                           [](const passes::PassStats& s) { return s.name == "fuse_add_layer_norm"; });
    ASSERT_NE(st, report.passes.end());
    EXPECT_TRUE(st->enabled && st->changed);
    EXPECT_EQ(st->nodes_before, st->nodes_after + 1);
    EXPECT_TRUE(std::any_of(report.rewrites.begin(), report.rewrites.end(),
                            [](const passes::Rewrite& r) { return r.pass == "fuse_add_layer_norm"; }));
  }
  {
    std::vector<std::string> ran;
    builder::BuildReport report;
    auto p = build({"fuse_add_layer_norm"}, &ran, &report);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(count_op(*p->graph, "Add"), 1u);  // the residual stays its own node
    EXPECT_EQ(count_op(*p->graph, "LayerNormalization"), 1u);
    EXPECT_EQ(std::count(ran.begin(), ran.end(), "fuse_add_layer_norm"), 0);
    EXPECT_EQ(std::count(ran.begin(), ran.end(), "fuse_qkv"), 1);  // ran (changing nothing)
  }
  // A lowering pass needs the plan: outside RunLowering it refuses instead of guessing.
  ir::Graph g;
  passes::PassContext ctx;
  ctx.current_pass = "fuse_qkv";
  auto r = passes::FindPass("fuse_qkv")->run(g, ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("RunLowering"), std::string::npos) << r.status().ToString();
}

TEST(CudaCapability, EveryNodeOfACnnGetsADeviceKernel) {
  auto r = DryRun(R"(
    opset 17
    graph g (x: f32[2,3,16,16]) -> (y) {
      w1 = const f32[8,3,3,3] random
      c1 = Conv(x, w1) {pads=[0,0,1,1]}
      r1 = Relu(c1)
      p = MaxPool(r1) {kernel_shape=[2,2], strides=[2,2]}
      w2 = const f32[8,1,3,3] random
      d = Conv(p, w2) {pads=[1,1,1,1], group=8}
      s = Add(d, p)
      t = Transpose(s) {perm=[0,2,3,1]}
      u = Transpose(t) {perm=[0,3,1,2]}
      gp = GlobalAveragePool(u)
      f = Flatten(gp)
      wf = const f32[8,4] random
      y = MatMul(f, wf)
    })",
                  true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->capability_checked);
  EXPECT_TRUE(r->host_nodes.empty()) << r->host_nodes[0].node << ": " << r->host_nodes[0].reason;
  EXPECT_EQ(r->kernel_counts.count("host"), 0u);
  EXPECT_GE(r->kernel_counts["cudnn conv"], 2u) << "the asymmetric-pad and the depthwise convolution run on cuDNN";
}

// An FP16 build casts the f32 graph input once; the cast output stays NCHW (its input
// is) and every convolution region after it is channels-last: no node may disagree with
// the layout plan, which would send the whole graph back to NCHW.
TEST(CudaCapability, Fp16CnnKeepsItsChannelsLastRegions) {
  auto r = DryRun(R"(
    opset 17
    graph g (x: f32[2,3,16,16]) -> (y) {
      w1 = const f32[8,3,3,3] random
      c1 = Conv(x, w1) {pads=[1,1,1,1]}
      r1 = Relu(c1)
      w2 = const f32[8,8,3,3] random
      c2 = Conv(r1, w2) {pads=[1,1,1,1]}
      s = Add(c2, r1)
      p = MaxPool(s) {kernel_shape=[2,2], strides=[2,2]}
      gp = GlobalAveragePool(p)
      y = Flatten(gp)
    })",
                  true, builder::Precision::kFP16);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const std::string& note : r->backend_notes) EXPECT_EQ(note.find("stays NCHW"), std::string::npos) << note;
  bool counted = false;
  for (const std::string& note : r->backend_notes)
    counted = counted || (note.find("activations channels-last") != std::string::npos &&
                          note.find(" 0 activations") == std::string::npos);
  EXPECT_TRUE(counted) << "no channels-last activations reported";
}

// The plan records each node's layout (plan::Tactic::nhwc), the channels-last plan the
// CUDA context then runs with, and its kernel family.
TEST(CudaCapability, PlanRecordsEachNodesFamilyAndLayout) {
  builder::BuildConfig config;
  config.backend = "cuda";
  config.dry_run = true;
  config.precision = builder::Precision::kFP16;
  auto p = builder::Build(MustParse(R"(
    opset 17
    graph g (x: f32[2,3,16,16]) -> (y) {
      w1 = const f32[8,3,3,3] random
      c1 = Conv(x, w1) {pads=[1,1,1,1]}
      r1 = Relu(c1)
      w2 = const f32[8,8,3,3] random
      c2 = Conv(r1, w2) {pads=[1,1,1,1]}
      s = Add(c2, r1)
      gp = GlobalAveragePool(s)
      y = Flatten(gp)
    })"),
                          config, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto nhwc = ChannelsLastValues(*p->graph);
  EXPECT_FALSE(nhwc.empty());
  for (const auto& n : p->graph->nodes()) {
    const plan::Tactic& t = p->choices.at(n->name).tactic;
    EXPECT_FALSE(t.family.empty()) << n->name;
    EXPECT_EQ(t.nhwc, nhwc.count(n->output(0)) > 0) << n->name << ": " << t.ToString();
  }
}

TEST(CudaCapability, StrictNamesEveryHostNodeWithItsReason) {
  const char* text = R"(
    opset 17
    graph g (x: f32[4,6], t: i64[4]) -> (y) {
      a = Relu(x)
      b = LogSoftmax(a) {axis=1}
      y = NegativeLogLikelihoodLoss(b, t)
    })";
  // Without --strict the query answers and the build goes on.
  {
    builder::BuildConfig config;
    config.backend = "cuda";
    config.dry_run = true;
    builder::BuildReport report;
    auto p = builder::Build(MustParse(text), config, &report);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_EQ(report.host_nodes.size(), 1u);
    EXPECT_NE(report.host_nodes[0].reason.find("no CUDA kernel for NegativeLogLikelihoodLoss"), std::string::npos)
        << report.host_nodes[0].reason;
  }
  auto strict = DryRun(text, true);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kUnsupported);
  const std::string msg = strict.status().ToString();
  EXPECT_NE(msg.find("--strict"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NegativeLogLikelihoodLoss"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 node(s) on the host"), std::string::npos) << msg;
}

TEST(CudaCapability, UnsupportedTypeIsAHostNodeWithTheType) {
  auto r = DryRun(R"(
    opset 17
    graph g (x: f64[4,6]) -> (y) {
      y = Relu(x)
    })");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->host_nodes.size(), 1u);
  EXPECT_NE(r->host_nodes[0].reason.find("f64"), std::string::npos) << r->host_nodes[0].reason;
}

TEST(CudaCapability, StringNodesAreHostStepsAndTheNumbersStayOnTheDevice) {
  // A classifier whose class index is turned into text at its end: the product and the
  // ArgMax are device kernels, the cast to string and the string comparison host steps,
  // named with why.
  const char* text = R"(
    opset 17
    graph g (x: f32[4,6], want: string[4]) -> (label, same) {
      w = const f32[6,3] random
      logits = MatMul(x, w)
      k = ArgMax(logits) {axis=1, keepdims=0}
      label = Cast(k) {to=8}
      same = Equal(label, want)
    })";
  auto r = DryRun(text);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->host_nodes.size(), 2u);
  for (const auto& h : r->host_nodes) {
    EXPECT_TRUE(h.node.find("Cast") != std::string::npos || h.node.find("Equal") != std::string::npos) << h.node;
    EXPECT_NE(h.reason.find("string"), std::string::npos) << h.reason;
    EXPECT_NE(h.reason.find("host memory"), std::string::npos) << h.reason;
  }
  EXPECT_EQ(r->kernel_counts.count("host"), 1u);
  EXPECT_EQ(r->kernel_counts["host"], 2u);
  // --strict refuses them by name.
  auto strict = DryRun(text, true);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().ToString().find("2 node(s) on the host"), std::string::npos) << strict.status().ToString();
}

TEST(CudaCapability, DataDependentShapeSendsTheWholeGraphToTheHost) {
  auto r = DryRun(R"(
    opset 17
    graph g (x: f32[8]) -> (y) {
      r = Relu(x)
      nz = NonZero(r)
      y = Cast(nz) {to=1}
    })");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->host_nodes.size(), 3u) << "Relu before the NonZero runs on the host too (the runtime cannot plan)";
  for (const auto& h : r->host_nodes)
    EXPECT_NE(h.reason.find("depends on values computed at run time"), std::string::npos) << h.node << ": " << h.reason;
}

// A detection pipeline's processing ops (#18) get device kernels: ResizeImage before the network,
// EfficientNMS_TRT (static output shapes; both domains it is written in) after it.
TEST(CudaCapability, ResizeImageAndEfficientNmsRunOnTheDevice) {
  auto r = DryRun(R"(
    opset 17
    graph g (img: u8[2,48,64,3], boxes: f32[2,100,4], scores: f32[2,100,3], one: u8[30,20,1])
        -> (x, t, y, num, db, ds, dc, num2, db2, ds2, dc2) {
      x, t = sampan::ResizeImage(img) {mode="letterbox", size=[32,32]}
      y = sampan::ResizeImage(one) {limit_type="max", limit_side_len=64}
      num, db, ds, dc = EfficientNMS_TRT(boxes, scores) {max_output_boxes=10}
      num2, db2, ds2, dc2 = TRT::EfficientNMS_TRT(boxes, scores) {max_output_boxes=10, score_activation=1}
    })",
                  true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->host_nodes.empty()) << r->host_nodes[0].node << ": " << r->host_nodes[0].reason;
  EXPECT_EQ(r->kernel_counts["resize image"], 2u);
  EXPECT_EQ(r->kernel_counts["efficient nms"], 2u);
}

// ONNX NonMaxSuppression's output, [selected, 3], has a data-dependent shape: it has no device
// kernel, and its graph runs on the host with the reason named.
TEST(CudaCapability, NonMaxSuppressionKeepsItsGraphOnTheHostSayingWhy) {
  auto r = DryRun(R"(
    opset 17
    graph g (boxes: f32[1,50,4], scores: f32[1,3,50]) -> (sel) {
      m = const i64[1] {10}
      sel = NonMaxSuppression(boxes, scores, m)
    })");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->host_nodes.size(), 1u);
  const std::string& why = r->host_nodes[0].reason;
  EXPECT_NE(why.find("NonMaxSuppression"), std::string::npos) << why;
  EXPECT_NE(why.find("depends on values computed at run time"), std::string::npos) << why;
}

TEST(CudaCapability, ShapeArithmeticIsFoldedNotHost) {
  auto r = DryRun(R"(
    opset 17
    graph g (x: f32[N,6]) -> (y) {
      s = Shape(x)
      i = const i64[1] {0}
      n = Gather(s, i) {axis=0}
      m = const i64[1] {-1}
      sh = Concat(n, m) {axis=0}
      y = Reshape(x, sh)
    })");
  // No profile: the graph keeps its symbolic batch, so the query cannot answer at a shape.
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& h : r->host_nodes)
    EXPECT_NE(h.reason.find("not known before run time"), std::string::npos) << h.node << ": " << h.reason;

  builder::BuildConfig config;
  config.backend = "cuda";
  config.dry_run = true;
  config.strict = true;
  config.profiles = {plan::Profile{{"x", plan::ShapeRange{{1, 6}, {4, 6}, {8, 6}}}}};
  builder::BuildReport report;
  auto p = builder::Build(MustParse(R"(
    opset 17
    graph g (x: f32[N,6]) -> (y) {
      s = Shape(x)
      i = const i64[1] {0}
      n = Gather(s, i) {axis=0}
      m = const i64[1] {-1}
      sh = Concat(n, m) {axis=0}
      r = Reshape(x, sh)
      y = Relu(r)
    })"),
                          config, &report);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(report.host_nodes.empty());
  EXPECT_GE(report.kernel_counts["folded"], 1u);
}

TEST(CudaCapability, StrictAndDryRunNeedABackendThatAnswers) {
  builder::BuildConfig config;
  config.backend = "reference";
  config.strict = true;
  auto p = builder::Build(MustParse(R"(
    opset 17
    graph g (x: f32[2]) -> (y) {
      y = Relu(x)
    })"),
                          config, nullptr);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().ToString().find("no capability query"), std::string::npos) << p.status().ToString();
}

// ---------------------------------------------------------------- channels-last regions

std::set<std::string> NhwcNames(const ir::Graph& g) {
  std::set<std::string> names;
  for (const ir::Value* v : ChannelsLastValues(g)) names.insert(v->name());
  return names;
}

TEST(CudaLayout, StaysChannelsLastThroughConcatActivationsAndStridedOps) {
  auto g = MustParse(R"(
    opset 17
    graph g (x: f16[2,8,16,16]) -> (y) {
      w1 = const f16[8,8,3,3] random
      a = Conv(x, w1) {pads=[1,1,1,1]}
      w2 = const f16[8,8,1,1] random
      b = Conv(x, w2)
      c = Concat(a, b) {axis=1}
      r = Relu(c)
      k = const f16[1,16,1,1] random
      m = Mul(r, k)
      st = const i64[1] {0}
      en = const i64[1] {8}
      ax = const i64[1] {1}
      s = Slice(m, st, en, ax)
      w3 = const f16[4,8,3,3] random
      y = Conv(s, w3) {pads=[1,1,1,1]}
    })");
  const auto nhwc = NhwcNames(*g);
  for (const char* v : {"a", "b", "c", "r", "m", "s"}) EXPECT_TRUE(nhwc.count(v)) << v << " should be channels-last";
  EXPECT_FALSE(nhwc.count("y")) << "graph outputs stay NCHW";
}

TEST(CudaLayout, OpsThatNeedNchwEndTheRegion) {
  auto g = MustParse(R"(
    opset 17
    graph g (x: f16[2,8,4,4]) -> (y) {
      w1 = const f16[8,8,3,3] random
      a = Conv(x, w1) {pads=[1,1,1,1]}
      r = Relu(a)
      sm = Softmax(r) {axis=1}
      e = Exp(sm)
      w2 = const f16[8,8,1,1] random
      y = Conv(e, w2)
    })");
  const auto nhwc = NhwcNames(*g);
  EXPECT_FALSE(nhwc.count("r")) << "Softmax reads NCHW, so Relu (one layout in and out) keeps a's layout NCHW too";
  EXPECT_FALSE(nhwc.count("a"));
  EXPECT_FALSE(nhwc.count("sm"));
  EXPECT_FALSE(nhwc.count("e")) << "Exp's input is NCHW";
}

TEST(CudaLayout, TransformerTensorsWithoutConvolutionsStayPacked) {
  auto g = MustParse(R"(
    opset 17
    graph g (q: f16[2,4,8,16], k: f16[2,4,16,8]) -> (y) {
      s = MatMul(q, k)
      q4 = const f16[] {0.25}
      t = Mul(s, q4)
      u = Add(t, t)
      y = Softmax(u) {axis=-1}
    })");
  EXPECT_TRUE(NhwcNames(*g).empty());
}

TEST(CudaLayout, Fp32ActivationsStayPacked) {
  auto g = MustParse(R"(
    opset 17
    graph g (x: f32[2,8,4,4]) -> (y) {
      w1 = const f32[8,8,3,3] random
      a = Conv(x, w1) {pads=[1,1,1,1]}
      r = Relu(a)
      w2 = const f32[8,8,1,1] random
      y = Conv(r, w2)
    })");
  EXPECT_TRUE(NhwcNames(*g).empty());
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
