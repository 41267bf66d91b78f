// Cross-backend test of the CPU kernels: every kernel family against the
// reference kernels on random inputs of several shapes, and a check that the
// fast kernel (not the reference fallback) actually ran.
//
// Quick start for a new kernel: add a Case {name, graph text, input shape sets,
// label the fast step carries}; the harness builds the graph for the cpu
// backend (passes off), runs it and the reference executor on the same random
// inputs and compares every output (rtol/atol 1e-4).
#include "backends/cpu/cpu_test_util.h"
#include "backends/cpu/isa.h"

namespace sampan::cpu::testing {
namespace {

using S = std::map<std::string, Shape>;

TEST(CpuKernels, Conv) {
  ScopedEnv onednn_only("SAMPAN_CPU_WINOGRAD", "0");  // 3x3 stride 1 might time faster on Winograd (own test)
  RunCase({"conv3x3",
           R"(opset 17
    graph g (x: f32[N,8,H,W]) -> (y) {
      w = const f32[16,8,3,3] random
      b = const f32[16] random
      y = Conv(x, w, b) {pads=[1,1,1,1]} @c
    })",
           {S{{"x", {1, 8, 9, 9}}}, S{{"x", {2, 8, 16, 12}}}, S{{"x", {3, 8, 5, 7}}}},
           "Conv c [onednn"});
  RunCase({"conv_strided_dilated",
           R"(opset 17
    graph g (x: f32[N,6,H,W]) -> (y) {
      w = const f32[10,6,3,3] random
      y = Conv(x, w) {strides=[2,2], dilations=[2,1], pads=[2,1,0,1]} @c
    })",
           {S{{"x", {1, 6, 15, 15}}}, S{{"x", {2, 6, 20, 11}}}},
           "Conv c [onednn"});
  RunCase({"conv_grouped_same_upper",
           R"(opset 17
    graph g (x: f32[N,8,H,W]) -> (y) {
      w = const f32[12,2,3,3] random
      y = Conv(x, w) {group=4, auto_pad="SAME_UPPER", strides=[2,2]} @c
    })",
           {S{{"x", {1, 8, 10, 10}}}, S{{"x", {2, 8, 7, 9}}}},
           "Conv c [onednn"});
  RunCase({"conv_depthwise",
           R"(opset 17
    graph g (x: f32[N,32,H,W]) -> (y) {
      w = const f32[32,1,3,3] random
      b = const f32[32] random
      y = Conv(x, w, b) {group=32, pads=[1,1,1,1], strides=[2,2]} @c
    })",
           {S{{"x", {1, 32, 14, 14}}}, S{{"x", {4, 32, 9, 8}}}},
           "Conv c [onednn"});
  RunCase({"conv1d",
           R"(opset 17
    graph g (x: f32[N,4,L]) -> (y) {
      w = const f32[6,4,5] random
      y = Conv(x, w) {pads=[2,2]} @c
    })",
           {S{{"x", {1, 4, 20}}}, S{{"x", {3, 4, 7}}}},
           "Conv c [onednn"});
  // A chain keeps the blocked layout between convolutions and reorders only at the end.
  RunCase({"conv_chain_pool",
           R"(opset 17
    graph g (x: f32[N,3,H,W]) -> (y) {
      w1 = const f32[16,3,3,3] random
      w2 = const f32[16,16,1,1] random
      c1 = Conv(x, w1) {pads=[1,1,1,1], strides=[2,2]} @c1
      r = Relu(c1)
      c2 = Conv(r, w2) @c2
      p = MaxPool(c2) {kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]} @p
      y = GlobalAveragePool(p) @gap
    })",
           {S{{"x", {1, 3, 32, 32}}}, S{{"x", {2, 3, 17, 23}}}},
           "MaxPool p [cpu "});
}

TEST(CpuKernels, FusedConvEpilogues) {
  ScopedEnv onednn_only("SAMPAN_CPU_WINOGRAD", "0");  // Winograd has its own test
  for (const std::string act : {"Relu", "Sigmoid", "SiLU", "Tanh", "HardSwish", "Gelu", "GeluTanh"}) {
    RunCase({"fused_" + act,
             R"(opset 17
      opset sampan 1
      graph g (x: f32[N,8,H,W], z: f32[N,16,H,W]) -> (y) {
        w = const f32[16,8,3,3] random
        b = const f32[16] random
        y = sampan::FusedConv(x, w, b, z) {pads=[1,1,1,1], activation=")" +
                 act + R"("} @fc
      })",
             {S{{"x", {1, 8, 8, 8}}, {"z", {1, 16, 8, 8}}}, S{{"x", {2, 8, 5, 9}}, {"z", {2, 16, 5, 9}}}},
             "FusedConv fc [onednn"});
  }
  RunCase({"fused_clip_no_residual",
           R"(opset 17
    opset sampan 1
    graph g (x: f32[N,8,H,W]) -> (y) {
      w = const f32[8,1,3,3] random
      y = sampan::FusedConv(x, w) {group=8, pads=[1,1,1,1], activation="Clip", activation_params=[0.0, 0.5]} @fc
    })",
           {S{{"x", {1, 8, 8, 8}}}, S{{"x", {3, 8, 6, 4}}}},
           "FusedConv fc [onednn"});
  RunCase({"fused_leaky_hardsigmoid",
           R"(opset 17
    opset sampan 1
    graph g (x: f32[N,4,H,W]) -> (y, v) {
      w = const f32[8,4,1,1] random
      y = sampan::FusedConv(x, w) {activation="LeakyRelu", activation_params=[0.1]} @fc
      v = sampan::FusedConv(x, w) {activation="HardSigmoid", activation_params=[0.2, 0.5]} @fc2
    })",
           {S{{"x", {1, 4, 8, 8}}}, S{{"x", {2, 4, 3, 5}}}},
           "FusedConv fc2 [onednn"});
}

// The residual's buffer is taken over by the output when the fused conv is its last
// reader, and copied when something reads it later.
TEST(CpuKernels, ResidualInPlaceOnlyAtLastUse) {
  const std::string graph = R"(opset 17
    opset sampan 1
    graph g (x: f32[N,8,H,W]) -> (y, z) {
      w = const f32[8,8,3,3] random
      bb = const f32[8] random
      a = Conv(x, w, bb) {pads=[1,1,1,1]} @ca
      c = Conv(a, w, bb) {pads=[1,1,1,1]} @cb
      y = sampan::FusedConv(c, w, bb, a) {pads=[1,1,1,1], activation="Relu"} @cy
      z = sampan::FusedConv(y, w, bb, a) {pads=[1,1,1,1]} @cz
    })";
  // Four chained 3x3 convs of random weights reach values in the thousands: float rounding needs 1e-3.
  RunCase({"residual", graph, {S{{"x", {1, 8, 6, 6}}}, S{{"x", {2, 8, 9, 7}}}}, "FusedConv cz [onednn", 1e-3, 1e-3});
  auto engine = CpuEngineFor(graph);
  ASSERT_NE(engine, nullptr);
  std::mt19937_64 rng(1);
  int copies = 0;
  for (const std::string& l : StepLabels(*engine, {{"x", RandomTensor(DType::kFloat32, {1, 8, 6, 6}, rng)}}))
    copies += l.rfind("residual a", 0) == 0;
  EXPECT_EQ(copies, 1);  // for cy (a is read later); cz writes into a's buffer
}

TEST(CpuKernels, ConvTranspose) {
  RunCase({"deconv_stride2",
           R"(opset 17
    graph g (x: f32[N,8,H,W]) -> (y) {
      w = const f32[8,4,4,4] random
      b = const f32[4] random
      y = ConvTranspose(x, w, b) {strides=[2,2], pads=[1,1,1,1]} @d
    })",
           {S{{"x", {1, 8, 5, 5}}}, S{{"x", {2, 8, 4, 7}}}},
           "ConvTranspose d [onednn"});
  RunCase({"deconv_grouped_outpad",
           R"(opset 17
    graph g (x: f32[N,6,H,W]) -> (y) {
      w = const f32[6,2,3,3] random
      y = ConvTranspose(x, w) {group=3, strides=[2,2], pads=[1,1,1,1], output_padding=[1,1]} @d
    })",
           {S{{"x", {1, 6, 5, 5}}}, S{{"x", {2, 6, 3, 4}}}},
           "ConvTranspose d [onednn"});
}

void MaxPoolAfterConvCases() {
  // MaxPool after a convolution takes its output in the layout it has (nChw8c on AVX2,
  // nhwc or nChw16c on AVX-512) as it is (our blocked kernel):
  // windows clipped by pads, asymmetric pads, ceil_mode, overlapping and disjoint windows,
  // input rows past the last window.
  for (const std::string attrs :
       {"kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]", "kernel_shape=[2,3], strides=[2,1], pads=[0,2,1,0]",
        "kernel_shape=[3,3], strides=[2,2], ceil_mode=1", "kernel_shape=[2,2], strides=[2,2]"}) {
    RunCase({"maxpool_blocked " + attrs,
             R"(opset 17
      graph g (x: f32[N,4,H,W]) -> (y) {
        w = const f32[16,4,1,1] random
        c = Conv(x, w) @c
        y = MaxPool(c) {)" +
                 attrs + R"(} @p
      })",
             {S{{"x", {1, 4, 12, 12}}}, S{{"x", {2, 4, 9, 14}}}, S{{"x", {1, 4, 3, 4}}}},
             "MaxPool p [cpu "});
  }
}

TEST(CpuKernels, Pooling) {
  RunCase({"maxpool_ceil",
           R"(opset 17
    graph g (x: f32[N,C,H,W]) -> (y) {
      y = MaxPool(x) {kernel_shape=[3,3], strides=[2,2], ceil_mode=1} @p
    })",
           {S{{"x", {1, 4, 10, 10}}}, S{{"x", {2, 3, 9, 12}}}},
           "MaxPool p [onednn"});
  RunCase({"avgpool_exclude",
           R"(opset 17
    graph g (x: f32[N,C,H,W]) -> (y) {
      y = AveragePool(x) {kernel_shape=[3,3], strides=[1,1], pads=[1,1,1,1]} @p
    })",
           {S{{"x", {1, 4, 10, 10}}}, S{{"x", {2, 3, 7, 5}}}},
           "AveragePool p [onednn"});
  RunCase({"avgpool_include",
           R"(opset 17
    graph g (x: f32[N,C,H,W]) -> (y) {
      y = AveragePool(x) {kernel_shape=[2,2], strides=[2,2], pads=[1,1,1,1], count_include_pad=1} @p
    })",
           {S{{"x", {1, 4, 10, 10}}}, S{{"x", {2, 3, 7, 5}}}},
           "AveragePool p [onednn"});
  RunCase({"globalmax",
           R"(opset 17
    graph g (x: f32[N,C,H,W]) -> (y) {
      y = GlobalMaxPool(x) @p
    })",
           {S{{"x", {1, 4, 10, 10}}}, S{{"x", {2, 3, 7, 5}}}},
           "GlobalMaxPool p [onednn"});
  MaxPoolAfterConvCases();
}

TEST(CpuKernels, MatMulGemm) {
  // Products by constant weights on the packed GEMM (the timed choice against oneDNN's matmul
  // has its own test, cpu_product_algo_test.cpp).
  ScopedEnv packed("SAMPAN_CPU_PACKED_GEMM", "1");
  RunCase({"matmul_const_rhs",
           R"(opset 17
    graph g (a: f32[B,S,K]) -> (y) {
      w = const f32[24,40] random
      y = MatMul(a, w) @m
    })",
           {S{{"a", {1, 5, 24}}}, S{{"a", {3, 17, 24}}}},
           "MatMul m [cpu packed gemm]"});
  RunCase({"matmul_batched_broadcast",
           R"(opset 17
    graph g (a: f32[B,H,S,D], b: f32[1,H,D,T]) -> (y) {
      y = MatMul(a, b) @m
    })",
           {S{{"a", {1, 2, 5, 8}}, {"b", {1, 2, 8, 6}}}, S{{"a", {3, 4, 7, 16}}, {"b", {1, 4, 16, 9}}}},
           "MatMul m [onednn"});
  RunCase({"fused_matmul_bias_gelu",
           R"(opset 17
    opset sampan 1
    graph g (a: f32[B,S,32]) -> (y) {
      w = const f32[32,48] random
      bias = const f32[48] random
      y = sampan::FusedMatMul(a, w, bias) {activation="Gelu"} @m
    })",
           {S{{"a", {1, 7, 32}}}, S{{"a", {2, 128, 32}}}},
           "FusedMatMul m [cpu packed gemm]"});
  RunCase({"gemm_trans_bias",
           R"(opset 17
    graph g (a: f32[12,M]) -> (y, z) {
      w = const f32[10,12] random
      c = const f32[10] random
      y = Gemm(a, w, c) {transA=1, transB=1} @g1
      z = Gemm(a, w) {transA=1, transB=1} @g2
    })",
           {S{{"a", {12, 6}}}, S{{"a", {12, 1}}}},
           "Gemm g1 [onednn"});
  RunCase({"fused_gemm_matrix_c",
           R"(opset 17
    opset sampan 1
    graph g (a: f32[4,16]) -> (y) {
      w = const f32[16,8] random
      c = const f32[4,8] random
      y = sampan::FusedGemm(a, w, c) {activation="Relu"} @g
    })",
           {S{{"a", {4, 16}}}},
           "FusedGemm g [onednn"});
}

// The label of a step the packed GEMM runs: it needs AVX2 (oneDNN runs it in the baseline variant).
std::string PackedLabel(const std::string& step) {
  return step + (static_cast<int>(KernelVariant()) >= static_cast<int>(Isa::kAvx2) ? " [cpu packed gemm]" : " [onednn");
}

// The packed GEMM (constant weights; forced: otherwise timed against oneDNN's matmul): row
// counts around the 6-row groups, column counts around the 16-column panels (1, 15, 16, 17,
// 1000), transposed weights, bias [N], scalar bias and none, every activation (in registers or
// as a step after).
void PackedGemmCases() {
  ScopedEnv packed("SAMPAN_CPU_PACKED_GEMM", "1");
  for (const auto& [k, n] : std::vector<std::pair<int, int>>{{3, 1}, {24, 15}, {40, 16}, {7, 17}, {64, 1000}}) {
    const std::string kn = StrCat(k, ",", n);
    RunCase({"matmul_" + kn,
             StrCat(R"(opset 17
      graph g (a: f32[M,)",
                    k, R"(]) -> (y) {
        w = const f32[)",
                    kn, R"(] random
        y = MatMul(a, w) @m
      })"),
             {S{{"a", {1, k}}}, S{{"a", {5, k}}}, S{{"a", {6, k}}}, S{{"a", {13, k}}}},
             PackedLabel("MatMul m")});
  }
  RunCase({"gemm_transb_bias_forms",
           R"(opset 17
    graph g (a: f32[M,20]) -> (y, z, v) {
      w = const f32[33,20] random
      c = const f32[33] random
      s = const f32[1] {0.5}
      y = Gemm(a, w, c) {transB=1} @g1
      z = Gemm(a, w, s) {transB=1} @g2
      v = Gemm(a, w) {transB=1} @g3
    })",
           {S{{"a", {1, 20}}}, S{{"a", {8, 20}}}},
           PackedLabel("Gemm g2")});
  for (const std::string act :
       {"Relu", "LeakyRelu", "Clip", "HardSigmoid", "Sigmoid", "SiLU", "Tanh", "HardSwish", "Gelu", "GeluTanh"}) {
    const std::string params = act == "LeakyRelu"     ? ", activation_params=[0.1]"
                               : act == "Clip"        ? ", activation_params=[-0.5, 0.7]"
                               : act == "HardSigmoid" ? ", activation_params=[0.2, 0.5]"
                                                      : "";
    RunCase({"fused_matmul_" + act,
             R"(opset 17
      opset sampan 1
      graph g (a: f32[B,S,32]) -> (y) {
        w = const f32[32,40] random
        bias = const f32[40] random
        y = sampan::FusedMatMul(a, w, bias) {activation=")" +
                 act + "\"" + params + R"(} @m
      })",
             {S{{"a", {1, 7, 32}}}, S{{"a", {2, 9, 32}}}},
             PackedLabel("FusedMatMul m")});
  }
}
TEST(CpuKernels, PackedGemm) {
  PackedGemmCases();
}

void ElementwiseCases() {
  for (const std::string op : {"Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Erf", "HardSwish", "Reciprocal"}) {
    RunCase({"unary_" + op,
             "opset 17\n graph g (x: f32[N,C,L]) -> (y) { y = " + op + "(x) @u }",
             {S{{"x", {1, 3, 5}}}, S{{"x", {4, 33, 129}}}},
             op + " u [cpu]"});
  }
  RunCase({"leaky_hsig_clip_gelu",
           R"(opset 20
    graph g (x: f32[N,C]) -> (a, b, c, d) {
      a = LeakyRelu(x) {alpha=0.2} @u1
      b = HardSigmoid(x) {alpha=0.3, beta=0.4} @u2
      lo = const f32[] {-0.5}
      hi = const f32[] {0.75}
      c = Clip(x, lo, hi) @u3
      d = Gelu(x) {approximate="tanh"} @u4
    })",
           {S{{"x", {3, 7}}}, S{{"x", {64, 1000}}}},
           "Clip u3 [cpu]"});
  RunCase({"sqrt_positive",
           "opset 17\n graph g (x: f32[N]) -> (y) { a = Abs(x)\n y = Sqrt(a) @u }",
           {S{{"x", {17}}}, S{{"x", {100000}}}},
           "Sqrt u [cpu]"});
  for (const std::string op : {"Add", "Sub", "Mul", "Div"}) {
    RunCase({"binary_" + op,
             "opset 17\n graph g (a: f32[A,B,C], b: f32[D,E]) -> (y) { y = " + op + "(a, b) @o }",
             {S{{"a", {2, 3, 4}}, {"b", {3, 4}}}, S{{"a", {2, 3, 4}}, {"b", {1, 4}}},
              S{{"a", {2, 3, 1}}, {"b", {3, 4}}}, S{{"a", {5, 1, 7}}, {"b", {6, 1}}},
              S{{"a", {1, 1, 1}}, {"b", {1, 1}}}, S{{"a", {8, 64, 300}}, {"b", {64, 300}}}},
             op + " o [cpu]"});
  }
}
TEST(CpuKernels, Elementwise) {
  ElementwiseCases();
}

// Elementwise ops on a convolution's output run in its layout (nChw8c/nChw16c/nhwc, whichever
// oneDNN chose): unary ops, a scalar on either side of a non-commutative op, a per-channel
// operand ([C,1,1] and [N,C,1,1]), two outputs of the same layout, a plain operand of the full
// shape. 13 channels (a padded block in nChw8c/nChw16c: the plain path; dense in nhwc) and an
// operand broadcast along W (in layout on nhwc, plain on blocked layouts) run on our kernel either way.
void ElementwiseInLayoutCases() {
  for (const std::string& tail :
       {std::string("y = Sigmoid(c) @e"), std::string("s = const f32[] {0.5}\n y = Sub(s, c) @e"),
        std::string("s = const f32[1] {3}\n y = Div(c, s) @e"),
        std::string("s = const f32[32,1,1] random\n y = Mul(c, s) @e"), std::string("y = Mul(c, p) @e"),
        std::string("d = Conv(x, w) {pads=[1,1,1,1]} @c2\n y = Add(c, d) @e")}) {
    RunCase({"in_layout " + tail,
             R"(opset 17
      graph g (x: f32[N,8,H,W], p: f32[N,32,1,1]) -> (y) {
        w = const f32[32,8,3,3] random
        c = Conv(x, w) {pads=[1,1,1,1]} @c
        )" + tail +
                 R"(
      })",
             {S{{"x", {1, 8, 6, 7}}, {"p", {1, 32, 1, 1}}}, S{{"x", {2, 8, 5, 4}}, {"p", {2, 32, 1, 1}}}},
             " e [cpu in layout]"});
  }
  // A plain operand of the full shape is converted to the convolution's layout, either side.
  RunCase({"full_shape_plain_operand",
           R"(opset 17
      graph g (x: f32[N,8,H,W], z: f32[N,32,H,W]) -> (y) {
        w = const f32[32,8,3,3] random
        c = Conv(x, w) {pads=[1,1,1,1]} @c
        y = Sub(z, c) @e
      })",
           {S{{"x", {1, 8, 6, 7}}, {"z", {1, 32, 6, 7}}}, S{{"x", {2, 8, 5, 4}}, {"z", {2, 32, 5, 4}}}},
           " e [cpu in layout]"});
  RunCase({"padded_channels_plain",
           R"(opset 17
      graph g (x: f32[N,8,H,W]) -> (y) {
        w = const f32[13,8,3,3] random
        s = const f32[13,1,1] random
        c = Conv(x, w) {pads=[1,1,1,1]} @c
        y = Mul(c, s) @e
      })",
           {S{{"x", {1, 8, 6, 7}}}},
           "Mul e [cpu"});
  RunCase({"broadcast_along_w_plain",
           R"(opset 17
      graph g (x: f32[N,8,H,5]) -> (y) {
        w = const f32[16,8,3,3] random
        s = const f32[5] random
        c = Conv(x, w) {pads=[1,1,1,1]} @c
        y = Mul(c, s) @e
      })",
           {S{{"x", {2, 8, 6, 5}}}},
           "Mul e [cpu"});
}

TEST(CpuKernels, ElementwiseInLayout) {
  ElementwiseInLayoutCases();
}

void SoftmaxAndNormsCases() {
  RunCase({"softmax_last",
           "opset 17\n graph g (x: f32[N,S,T]) -> (y) { y = Softmax(x) @s }",
           {S{{"x", {1, 2, 5}}}, S{{"x", {4, 12, 128}}}},
           "Softmax s [cpu]"});
  RunCase({"softmax_axis1",
           "opset 17\n graph g (x: f32[N,S,T]) -> (y) { y = Softmax(x) {axis=1} @s }",
           {S{{"x", {2, 3, 5}}}, S{{"x", {3, 7, 4}}}},
           "Softmax s [cpu]"});
  RunCase({"softmax_opset11_coerced",
           "opset 11\n graph g (x: f32[N,S,T]) -> (y) { y = Softmax(x) {axis=1} @s }",
           {S{{"x", {2, 3, 5}}}, S{{"x", {3, 7, 4}}}},
           "Softmax s [cpu]"});
  RunCase({"layernorm",
           R"(opset 17
    graph g (x: f32[N,S,64]) -> (y) {
      s = const f32[64] random
      b = const f32[64] random
      y = LayerNormalization(x, s, b) {epsilon=1e-6} @ln
    })",
           {S{{"x", {1, 3, 64}}}, S{{"x", {2, 128, 64}}}},
           "LayerNormalization ln [cpu]"});
  RunCase({"layernorm_2axes_noBias",
           R"(opset 17
    graph g (x: f32[N,4,8]) -> (y) {
      s = const f32[4,8] random
      y = LayerNormalization(x, s) {axis=1} @ln
    })",
           {S{{"x", {1, 4, 8}}}, S{{"x", {5, 4, 8}}}},
           "LayerNormalization ln [cpu]"});
  RunCase({"batchnorm",
           R"(opset 15
    graph g (x: f32[N,6,H,W]) -> (y) {
      s = const f32[6] random
      b = const f32[6] random
      m = const f32[6] random
      v = const f32[6] {0.5, 1, 2, 0.25, 3, 1.5}
      y = BatchNormalization(x, s, b, m, v) @bn
    })",
           {S{{"x", {1, 6, 4, 4}}}, S{{"x", {3, 6, 7, 5}}}},
           "BatchNormalization bn [cpu]"});
}
TEST(CpuKernels, SoftmaxAndNorms) {
  SoftmaxAndNormsCases();
}

void AttentionCases() {
  RunCase({"attention_mask",
           R"(opset 17
    opset sampan 1
    graph g (q: f32[B,H,S,D], k: f32[B,H,T,D], v: f32[B,H,T,E], m: f32[B,1,1,T]) -> (y) {
      y = sampan::Attention(q, k, v, m) {scale=0.25} @att
    })",
           {S{{"q", {1, 2, 5, 8}}, {"k", {1, 2, 7, 8}}, {"v", {1, 2, 7, 4}}, {"m", {1, 1, 1, 7}}},
            S{{"q", {2, 12, 128, 32}}, {"k", {2, 12, 128, 32}}, {"v", {2, 12, 128, 32}}, {"m", {2, 1, 1, 128}}}},
           "Attention att [cpu]"});
  RunCase({"attention_kt_nomask",
           R"(opset 17
    opset sampan 1
    graph g (q: f32[B,S,D], k: f32[B,D,T], v: f32[B,T,E]) -> (y) {
      y = sampan::Attention(q, k, v) {scale=0.5, k_transposed=1} @att
    })",
           {S{{"q", {1, 3, 4}}, {"k", {1, 4, 6}}, {"v", {1, 6, 5}}},
            S{{"q", {3, 16, 8}}, {"k", {3, 8, 9}}, {"v", {3, 9, 8}}}},
           "Attention att [cpu"});
  // A mask per query row and head ([B,H,S,T]) and one broadcast over heads only ([B,1,S,T]).
  RunCase({"attention_full_mask",
           R"(opset 17
    opset sampan 1
    graph g (q: f32[B,H,S,D], k: f32[B,H,T,D], v: f32[B,H,T,E], m: f32[B,1,S,T], n: f32[B,H,S,T]) -> (y, z) {
      y = sampan::Attention(q, k, v, m) {scale=0.3} @att
      z = sampan::Attention(q, k, v, n) {scale=0.3} @att2
    })",
           {S{{"q", {2, 3, 5, 8}}, {"k", {2, 3, 7, 8}}, {"v", {2, 3, 7, 4}}, {"m", {2, 1, 5, 7}}, {"n", {2, 3, 5, 7}}}},
           "Attention att2 [cpu]"});
}
TEST(CpuKernels, Attention) {
  AttentionCases();
}

// The BERT head split and merge: the projections are viewed per head through strides
// (no Transpose copies) and attention writes its output in the merged order, so the
// Transpose and Reshape after it are views too.
TEST(CpuKernels, AttentionReadsAndWritesHeadsInPlace) {
  const std::string graph = R"(opset 17
    opset sampan 1
    graph g (x: f32[B,S,C]) -> (y) {
      split = const i64[4] {0, 0, 4, 8}
      xq = Reshape(x, split) @rq
      q = Transpose(xq) {perm=[0,2,1,3]} @tq
      kt = Transpose(xq) {perm=[0,2,3,1]} @tk
      vs = Relu(x) @relu
      xv = Reshape(vs, split) @rv
      v = Transpose(xv) {perm=[0,2,1,3]} @tv
      o = sampan::Attention(q, kt, v) {scale=0.35, k_transposed=1} @att
      ot = Transpose(o) {perm=[0,2,1,3]} @to
      merge = const i64[3] {0, 0, 32}
      y = Reshape(ot, merge) @rm
    })";
  RunCase({"bert_heads", graph, {S{{"x", {1, 6, 32}}}, S{{"x", {3, 17, 32}}}}, "Attention att [cpu]"});
  auto engine = CpuEngineFor(graph);
  ASSERT_NE(engine, nullptr);
  std::mt19937_64 rng(7);
  std::map<std::string, Tensor> inputs{{"x", RandomTensor(DType::kFloat32, {2, 9, 32}, rng)}};
  for (const std::string& l : StepLabels(*engine, inputs)) {
    EXPECT_EQ(l.find("Transpose"), std::string::npos) << l;
    EXPECT_EQ(l.find("reorder"), std::string::npos) << l;
  }
}

// Rows whose scores are all -inf (fully masked) give zeros, as the reference does.
TEST(CpuKernels, AttentionFullyMaskedRowIsZero) {
  const std::string graph = R"(opset 17
    opset sampan 1
    graph g (q: f32[B,H,S,D], k: f32[B,H,T,D], v: f32[B,H,T,E], m: f32[B,1,S,T]) -> (y) {
      y = sampan::Attention(q, k, v, m) {scale=0.5} @att
    })";
  auto engine = CpuEngineFor(graph);
  ASSERT_NE(engine, nullptr);
  std::mt19937_64 rng(3);
  std::map<std::string, Tensor> in{{"q", RandomTensor(DType::kFloat32, {1, 2, 4, 8}, rng)},
                                   {"k", RandomTensor(DType::kFloat32, {1, 2, 6, 8}, rng)},
                                   {"v", RandomTensor(DType::kFloat32, {1, 2, 6, 3}, rng)},
                                   {"m", Tensor::Alloc(DType::kFloat32, {1, 1, 4, 6})}};
  float* m = in["m"].mutable_data<float>();
  for (int i = 0; i < 24; ++i) m[i] = (i / 6 == 1 || i % 6 == 2) ? -INFINITY : 0.f;  // row 1: all -inf
  reference::Executor ref(std::shared_ptr<const ir::Graph>(Parse(graph)));
  auto want = ref.Run(in);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  auto got = (*ctx)->Run(in);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_LE(Mismatch((*got)[0], (*want)[0]), 1.0);
  const float* y = (*got)[0].data<float>();
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(y[(h * 4 + 1) * 3 + c], 0.f);
}

TEST(CpuKernels, DataMovement) {
  RunCase({"transpose",
           "opset 17\n graph g (x: f32[A,B,C,D]) -> (y) { y = Transpose(x) {perm=[0,2,3,1]} @t }",
           {S{{"x", {1, 2, 3, 4}}}, S{{"x", {2, 12, 16, 32}}}},
           "reorder y"});
  // float32 Transposes are strided views: chains compose, plain consumers get one copy.
  RunCase({"transpose_views",
           R"(opset 17
    graph g (x: f32[A,B,C]) -> (y, z, w) {
      t = Transpose(x) {perm=[2,0,1]} @t1
      u = Transpose(t) {perm=[0,2,1]} @t2
      y = Relu(u) @r1
      z = Add(u, u) @add
      w = Transpose(u) {perm=[1,2,0]} @t3
    })",
           {S{{"x", {2, 3, 4}}}, S{{"x", {5, 1, 7}}}},
           "reorder u"});
  RunCase({"transpose_int64_copies",
           "opset 17\n graph g (x: i64[A,B]) -> (y) { y = Transpose(x) @t }",
           {S{{"x", {3, 5}}}},
           "Transpose t [cpu]"});
  RunCase({"concat_split",
           R"(opset 17
    graph g (a: f32[N,C,H], b: f32[N,D,H]) -> (y, p, q) {
      y = Concat(a, b) {axis=1} @cat
      p, q = Split(y) {axis=2, num_outputs=2} @sp
    })",
           {S{{"a", {1, 2, 4}}, {"b", {1, 3, 4}}}, S{{"a", {3, 5, 10}}, {"b", {3, 1, 10}}}},
           "Concat cat [cpu]"});
  RunCase({"slice_steps",
           R"(opset 17
    graph g (x: f32[N,C,L]) -> (y, z) {
      st = const i64[2] {1, -1}
      en = const i64[2] {100, -100}
      ax = const i64[2] {1, 2}
      sp = const i64[2] {2, -2}
      y = Slice(x, st, en, ax, sp) @s
      s2 = const i64[1] {0}
      e2 = const i64[1] {2}
      z = Slice(x, s2, e2) @s2
    })",
           {S{{"x", {2, 5, 7}}}, S{{"x", {3, 9, 4}}}},
           "Slice s [cpu]"});
  RunCase({"gather_reshape_cast",
           R"(opset 17
    graph g (x: f32[V,E], i: i64[B,S]) -> (y, c) {
      e = Gather(x, i) @ga
      shp = const i64[2] {0, -1}
      y = Reshape(e, shp) @rs
      c = Cast(i) {to=1} @cast
    })",
           {S{{"x", {4, 6}}, {"i", {1, 5}}}, S{{"x", {4, 3}}, {"i", {2, 9}}}},
           "Gather ga [cpu]"});
}

TEST(CpuKernels, GatherOutOfRangeIsAnError) {
  auto engine = CpuEngineFor(R"(opset 17
    graph g (x: f32[4,2], i: i64[3]) -> (y) { y = Gather(x, i) @ga })");
  ASSERT_NE(engine, nullptr);
  auto ctx = engine->CreateContext();
  ASSERT_TRUE(ctx.ok());
  std::map<std::string, Tensor> in{{"x", Tensor::Alloc(DType::kFloat32, {4, 2})},
                                   {"i", Tensor::FromVector<int64_t>(DType::kInt64, {0, 7, 1}, {3})}};
  auto r = (*ctx)->Run(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("index 7 is out of range"), std::string::npos) << r.status().ToString();
}

TEST(CpuKernels, ResizeNearest) {
  // PaddleOCR det's upsampling: asymmetric coordinates, floor.
  RunCase({"resize_asymmetric_floor",
           R"(opset 17
    graph g (x: f32[N,C,H,W]) -> (y) {
      sc = const f32[4] {1, 1, 2, 2}
      y = Resize(x, _, sc) {mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"} @rz
    })",
           {S{{"x", {1, 3, 5, 4}}}, S{{"x", {2, 8, 20, 20}}}},
           "Resize rz [cpu nearest]"});
  // Default coordinates (half_pixel, round_prefer_floor), sizes, a downscale and an upscale, non-integer ratios.
  RunCase({"resize_sizes_half_pixel",
           R"(opset 17
    graph g (x: f32[1,2,9,7]) -> (y) {
      sz = const i64[4] {1, 2, 5, 11}
      y = Resize(x, _, _, sz) {mode="nearest"} @rz
    })",
           {S{{"x", {1, 2, 9, 7}}}},
           "Resize rz [cpu nearest]"});
  // axes and align_corners with round_prefer_ceil.
  RunCase({"resize_axes_align_corners",
           R"(opset 18
    graph g (x: f32[2,3,6,5]) -> (y) {
      sc = const f32[2] {1.5, 0.6}
      y = Resize(x, _, sc) {mode="nearest", axes=[2,3], coordinate_transformation_mode="align_corners",
                            nearest_mode="round_prefer_ceil"} @rz
    })",
           {S{{"x", {2, 3, 6, 5}}}},
           "Resize rz [cpu nearest]"});
}

TEST(CpuKernels, UncoveredOpsRunTheReferenceKernel) {
  // Cubic Resize has no CPU kernel: the plan says so and the reference kernel runs it.
  const char* text = R"(opset 17
    graph g (x: f32[1,2,4,4]) -> (y) {
      sc = const f32[4] {1, 1, 2, 2}
      y = Resize(x, _, sc) {mode="cubic"} @rz
    })";
  builder::BuildConfig config;
  config.backend = "cpu";
  builder::BuildReport report;
  auto plan = builder::Build(Parse(text), config, &report);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->choices["rz"].tactic.family, "reference");
  bool noted = false;
  for (const auto& n : report.backend_notes) noted |= n.find("Resize: reference kernel") != std::string::npos;
  EXPECT_TRUE(noted);
  RunCase({"resize_reference", text, {S{{"x", {1, 2, 4, 4}}}}, "Resize rz [reference]"});
}

// Every compilation of our kernels (baseline x86-64, AVX2, AVX-512: the ones this CPU runs)
// through the engine, against the reference kernels. SAMPAN_CPU_ISA caps oneDNN as well, which
// only a new process can do: the CI's cpu backend stage runs the conformance suite and the real
// models once per level (scripts/test.sh).
TEST(CpuKernels, EveryKernelVariant) {
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    ScopedKernelVariant pin(isa);
    if (!pin.ok()) {
      std::printf("[ skip ] kernel variant %s: this CPU has %s\n", IsaName(isa), IsaName(HostIsa()));
      continue;
    }
    SCOPED_TRACE(IsaName(isa));
    ElementwiseCases();
    ElementwiseInLayoutCases();
    SoftmaxAndNormsCases();
    AttentionCases();
    PackedGemmCases();
    MaxPoolAfterConvCases();
  }
}

}  // namespace
}  // namespace sampan::cpu::testing
