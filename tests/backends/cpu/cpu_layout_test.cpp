// A convolution's blocked or channels-last output stays in its layout through the ops an FPN
// head puts between convolutions (nearest Resize, Concat, ConvTranspose and its bias, ReLU),
// instead of a reorder to plain and back around each: the PP-OCR detector's neck and head.
// Each case runs against the reference executor on random inputs (cpu_test_util.h); the labels
// prove the layout path ran where it must (a convolution's output of 32 or 48 channels is
// dense in nChw8c, nChw16c and nhwc alike, so these hold on AVX2 and AVX-512).
#include "backends/cpu/cpu_test_util.h"

namespace sampan::cpu::testing {
namespace {

using S = std::map<std::string, Shape>;

// conv -> x2 nearest upsample -> Add with a conv of the larger map -> conv (an FPN level).
TEST(CpuLayout, ResizeKeepsTheConvolutionsLayout) {
  ScopedEnv direct("SAMPAN_CPU_WINOGRAD", "0");  // Winograd's rounding has its own test
  for (const char* mode : {R"(coordinate_transformation_mode="asymmetric", nearest_mode="floor")",
                           R"(coordinate_transformation_mode="half_pixel")"}) {
    RunCase({std::string("fpn_upsample ") + mode,
             std::string(R"(opset 17
      graph g (x: f32[N,8,H,W], z: f32[N,8,H2,W2]) -> (y) {
        w = const f32[32,8,3,3] random
        c = Conv(x, w) {pads=[1,1,1,1]} @c
        sc = const f32[4] {1, 1, 2, 2}
        r = Resize(c, _, sc) {mode="nearest", )") +
                 mode + R"(} @rz
        wz = const f32[32,8,1,1] random
        cz = Conv(z, wz) @cz
        a = Add(r, cz) @add
        wy = const f32[16,32,3,3] random
        y = Conv(a, wy) {pads=[1,1,1,1]} @cy
      })",
             {S{{"x", {1, 8, 5, 4}}, {"z", {1, 8, 10, 8}}}, S{{"x", {2, 8, 3, 7}}, {"z", {2, 8, 6, 14}}}},
             "Resize rz [cpu nearest in layout]"});
  }
  // Sizes with a non-integer ratio (rows and columns read unevenly), both axes.
  RunCase({"uneven_sizes",
           R"(opset 17
      graph g (x: f32[1,8,5,4]) -> (y) {
        w = const f32[32,8,3,3] random
        c = Conv(x, w) {pads=[1,1,1,1]} @c
        sz = const i64[4] {1, 32, 7, 11}
        r = Resize(c, _, _, sz) {mode="nearest"} @rz
        wy = const f32[16,32,1,1] random
        y = Conv(r, wy) @cy
      })",
           {S{{"x", {1, 8, 5, 4}}}},
           "Resize rz [cpu nearest in layout]"});
  // The resized map is a graph output: plain (the larger map is not reordered afterwards).
  RunCase({"resize_output_plain",
           R"(opset 17
      graph g (x: f32[N,8,H,W]) -> (y) {
        w = const f32[32,8,3,3] random
        c = Conv(x, w) {pads=[1,1,1,1]} @c
        sc = const f32[4] {1, 1, 4, 4}
        y = Resize(c, _, sc) {mode="nearest"} @rz
      })",
           {S{{"x", {1, 8, 3, 5}}}},
           "Resize rz [cpu nearest]"});
}

// Upsampled levels concatenated on the channels, then a conv: the concat writes the
// convolutions' layout; an input in another layout (a graph input) is converted to it.
TEST(CpuLayout, ConcatKeepsTheConvolutionsLayout) {
  ScopedEnv direct("SAMPAN_CPU_WINOGRAD", "0");  // Winograd's rounding has its own test
  RunCase({"concat_levels",
           R"(opset 17
      graph g (x: f32[N,8,H,W], p: f32[N,16,H,W]) -> (y) {
        w1 = const f32[32,8,3,3] random
        w2 = const f32[16,8,1,1] random
        c1 = Conv(x, w1) {pads=[1,1,1,1]} @c1
        c2 = Conv(x, w2) @c2
        cat = Concat(c1, c2, p) {axis=1} @cat
        wy = const f32[8,64,3,3] random
        y = Conv(cat, wy) {pads=[1,1,1,1]} @cy
      })",
           {S{{"x", {1, 8, 6, 5}}, {"p", {1, 16, 6, 5}}}, S{{"x", {2, 8, 4, 9}}, {"p", {2, 16, 4, 9}}}},
           "Concat cat [cpu in layout]"});
  // Concatenated on the height: the channel blocks stay whole.
  RunCase({"concat_height",
           R"(opset 17
      graph g (x: f32[N,8,H,W]) -> (y) {
        w1 = const f32[32,8,3,3] random
        w2 = const f32[32,8,1,1] random
        c1 = Conv(x, w1) {pads=[1,1,1,1]} @c1
        c2 = Conv(x, w2) @c2
        cat = Concat(c1, c2) {axis=2} @cat
        wy = const f32[8,32,3,3] random
        y = Conv(cat, wy) {pads=[1,1,1,1]} @cy
      })",
           {S{{"x", {2, 8, 5, 7}}}},
           "Concat cat [cpu in layout]"});
  // 13 channels would need padding in a channel block: plain unless the layout is nhwc.
  RunCase({"concat_padded_channels",
           R"(opset 17
      graph g (x: f32[N,8,H,W]) -> (y) {
        w1 = const f32[13,8,3,3] random
        w2 = const f32[32,8,1,1] random
        c1 = Conv(x, w1) {pads=[1,1,1,1]} @c1
        c2 = Conv(x, w2) @c2
        cat = Concat(c1, c2) {axis=1} @cat
        wy = const f32[8,45,3,3] random
        y = Conv(cat, wy) {pads=[1,1,1,1]} @cy
      })",
           {S{{"x", {1, 8, 6, 5}}}},
           "Concat cat [cpu"});
}

// The detector's head: conv, ConvTranspose (24 channels: padded in nChw16c) with its bias,
// ReLU, ConvTranspose to 1 channel with its bias, Sigmoid. The first one's bias is added by our
// step (oneDNN 2.6 adds a deconvolution's bias in a reference loop), ReLU runs over the padded
// layout (ReLU(0) = 0 keeps the padding zero) and the 1-channel upsampling is our kernel
// (deconv_upsample.cpp), reading the padded blocks and writing plain. Numerics on every ISA.
TEST(CpuLayout, ConvTransposeHead) {
  ScopedEnv direct("SAMPAN_CPU_WINOGRAD", "0");  // Winograd's rounding has its own test
  const char* text = R"(opset 17
      graph g (x: f32[N,8,H,W]) -> (y) {
        w = const f32[32,8,3,3] random
        c = Conv(x, w) {pads=[1,1,1,1]} @c
        w1 = const f32[32,24,2,2] random
        b1 = const f32[24] random
        d1 = ConvTranspose(c, w1, b1) {strides=[2,2]} @d1
        r = Relu(d1) @relu
        w2 = const f32[24,1,2,2] random
        b2 = const f32[1] random
        d2 = ConvTranspose(r, w2, b2) {strides=[2,2]} @d2
        y = Sigmoid(d2) @sig
      })";
  RunCase({"head", text, {S{{"x", {1, 8, 5, 6}}}, S{{"x", {2, 8, 3, 4}}}}, "ConvTranspose d2 [cpu upsample"});
  // Grouped, padded and output-padded, without a bias, read by a convolution.
  RunCase({"grouped_into_conv",
           R"(opset 17
      graph g (x: f32[N,8,H,W]) -> (y) {
        w = const f32[32,8,3,3] random
        c = Conv(x, w) {pads=[1,1,1,1]} @c
        w1 = const f32[32,5,3,3] random
        b1 = const f32[10] random
        d1 = ConvTranspose(c, w1, b1) {group=2, strides=[2,2], pads=[1,1,1,1], output_padding=[1,1]} @d1
        wy = const f32[4,10,3,3] random
        y = Conv(d1, wy) {pads=[1,1,1,1]} @cy
      })",
           {S{{"x", {1, 8, 4, 5}}}, S{{"x", {2, 8, 3, 3}}}},
           "ConvTranspose d1 [onednn"});
  // On this machine's ISA: where oneDNN left padded channels, the bias step and the unpad ran.
  auto engine = CpuEngineFor(text);
  ASSERT_NE(engine, nullptr);
  std::mt19937_64 rng(1);
  std::map<std::string, Tensor> inputs{{"x", RandomTensor(DType::kFloat32, {1, 8, 5, 6}, rng)}};
  std::string all;
  for (const auto& l : StepLabels(*engine, inputs)) all += l + "\n";
  EXPECT_EQ(all.find("reorder r"), std::string::npos) << "the ReLU's output was reordered:\n" << all;
  EXPECT_NE(all.find("ConvTranspose d2 [cpu upsample 2x2]"), std::string::npos) << all;
  if (all.find("unpad d1") == std::string::npos) {
    EXPECT_NE(all.find("bias of d1"), std::string::npos) << "d1's bias went to oneDNN:\n" << all;
  }
}

// Kernel == stride upsamplings on our kernel: plain input (a graph input) and blocked input
// (a convolution's), 1 to 16 outputs per pixel, 2x2 / 3x3 / 1x2 kernels, with and without a
// bias, batch 2; numerics against the reference.
TEST(CpuLayout, UpsamplingConvTranspose) {
  ScopedEnv direct("SAMPAN_CPU_WINOGRAD", "0");
  struct U {
    const char* w;
    const char* attrs;
    const char* bias;
  };
  for (const U& u :
       {U{"f32[24,1,2,2]", "strides=[2,2]", "const f32[1] random"}, U{"f32[24,4,2,2]", "strides=[2,2]", ""},
        U{"f32[24,2,3,3]", "strides=[3,3], kernel_shape=[3,3]", "const f32[2] random"},
        U{"f32[24,3,1,2]", "strides=[1,2]", "const f32[3] random"}}) {
    const std::string bias_line = *u.bias ? std::string("b = ") + u.bias + "\n" : "";
    const std::string call = *u.bias ? "ConvTranspose(xin, w, b)" : "ConvTranspose(xin, w)";
    for (const bool from_conv : {false, true}) {
      const std::string src = from_conv ? "wc = const f32[24,24,3,3] random\n xin = Conv(x, wc) {pads=[1,1,1,1]} @c\n"
                                        : "xin = Identity(x) @id\n";
      RunCase({std::string(u.w) + " " + u.attrs + (from_conv ? " after a conv" : " plain"),
               std::string("opset 17\n graph g (x: f32[N,24,H,W]) -> (y) {\n w = const ") + u.w + "\n" + bias_line +
                   src + " y = " + call + " {" + u.attrs + "} @d\n }",
               {S{{"x", {1, 24, 5, 7}}}, S{{"x", {2, 24, 3, 4}}}},
               "ConvTranspose d [cpu upsample"});
    }
  }
}

}  // namespace
}  // namespace sampan::cpu::testing
