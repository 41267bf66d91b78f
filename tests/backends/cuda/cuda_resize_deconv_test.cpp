// CUDA Resize/Upsample (backends/cuda/resize.cu, resize_kernel.cpp) and ConvTranspose
// (conv_transpose.cpp: cuDNN backward data, cropped through the workspace where pads are
// asymmetric or the output outgrows cuDNN's geometry) against the reference backend, as
// small graphs built for "cuda" and run eagerly and under CUDA-graph replay. FP32 is strict
// (no TF32, 1e-5 relative L2), FP16 within 1e-2; integer outputs must match exactly.
// Resize: every mode x coordinate transform x nearest rounding, up/down/odd scales, sizes
// and keep_aspect_ratio_policy, tf_crop_and_resize with extrapolation, antialias, 2-D to
// 5-D, integer types, Upsample/Resize-10 forms and a channels-last FP16 chain.
// ConvTranspose: 1-D/2-D/3-D, strides with output_padding, groups and depthwise, dilation,
// asymmetric and large pads, SAME_UPPER/SAME_LOWER, output_shape, with and without bias.
// The factory refusals need no GPU; everything else skips without one and says why.
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/conv_transpose.h"
#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/resize_kernel.h"

namespace sampan::cuda {
namespace {

using builder::Precision;
using passes::testing::MustParse;
using testing::ExpectMatchesReference;
using testing::ExpectUnsupported;
using testing::Random;

constexpr double kF32Tol = 1e-5, kF16Tol = 1e-2;

std::string Join(const std::vector<double>& v) {
  std::ostringstream os;
  os.precision(9);
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}
std::string Join(const Shape& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

// x: f32 in [-2, 2), or integers in [0, 200) (unsigned) / [-100, 100) cast to `dt`.
std::map<std::string, Tensor> In(const Shape& s, uint64_t seed = 7, DType dt = DType::kFloat32) {
  if (dt == DType::kFloat32) return {{"x", Random(DType::kFloat32, s, seed, -2.f, 2.f)}};
  const bool is_unsigned = dt == DType::kUInt8;
  return {{"x",
           *CastTensor(Random(DType::kFloat32, s, seed, is_unsigned ? 0.f : -100.f, is_unsigned ? 200.f : 100.f), dt)}};
}

// One Resize node on x: f32[shape] (or `dt`), scales given as a constant input.
std::string ResizeScales(const Shape& x, const std::vector<double>& scales, const std::string& attrs, int opset = 19,
                         const char* dt = "f32") {
  std::ostringstream g;
  g << "opset " << opset << "\ngraph g (x: " << dt << "[" << Join(x) << "]) -> (y) {\n"
    << "  sc = const f32[" << scales.size() << "] {" << Join(scales) << "}\n"
    << "  y = Resize(x, _, sc) {" << attrs << "}\n}\n";
  return g.str();
}

std::string ResizeSizes(const Shape& x, const Shape& sizes, const std::string& attrs) {
  std::ostringstream g;
  g << "opset 19\ngraph g (x: f32[" << Join(x) << "]) -> (y) {\n"
    << "  sz = const i64[" << sizes.size() << "] {" << Join(sizes) << "}\n"
    << "  y = Resize(x, _, _, sz) {" << attrs << "}\n}\n";
  return g.str();
}

const std::vector<std::vector<double>>& Scales4d() {
  static const std::vector<std::vector<double>> k = {{1, 1, 2, 1.5}, {1, 1, 0.5, 0.6}, {1, 1, 1.7, 0.35}};
  return k;
}

TEST(CudaResize, NearestEveryCoordinateAndRounding) {
  SKIP_WITHOUT_GPU();
  for (const char* coord : {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                            "tf_half_pixel_for_nn"})
    for (const char* nm : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})
      for (const auto& s : Scales4d()) {
        const std::string attrs = std::string("mode=\"nearest\", coordinate_transformation_mode=\"") + coord +
                                  "\", nearest_mode=\"" + nm + "\"";
        ExpectMatchesReference(attrs + " scales " + Join(s), ResizeScales({2, 3, 7, 9}, s, attrs), In({2, 3, 7, 9}),
                               Precision::kFP32, kF32Tol);
      }
}

TEST(CudaResize, LinearAndCubicEveryCoordinate) {
  SKIP_WITHOUT_GPU();
  for (const char* mode : {"linear", "cubic"})
    for (const char* coord :
         {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"})
      for (const auto& s : Scales4d()) {
        const std::string attrs =
            std::string("mode=\"") + mode + "\", coordinate_transformation_mode=\"" + coord + "\"";
        ExpectMatchesReference(attrs + " scales " + Join(s), ResizeScales({2, 3, 7, 9}, s, attrs), In({2, 3, 7, 9}),
                               Precision::kFP32, kF32Tol);
      }
  // Cubic coefficient and exclude_outside; FP16.
  ExpectMatchesReference(
      "cubic a=-0.5 exclude_outside",
      ResizeScales({1, 2, 6, 5}, {1, 1, 1.8, 2.4}, "mode=\"cubic\", cubic_coeff_a=-0.5, exclude_outside=1"),
      In({1, 2, 6, 5}), Precision::kFP32, kF32Tol);
  for (const char* mode : {"linear", "cubic", "nearest"})
    ExpectMatchesReference(std::string(mode) + " fp16",
                           ResizeScales({2, 4, 8, 6}, {1, 1, 2, 0.5}, std::string("mode=\"") + mode + "\""),
                           In({2, 4, 8, 6}), Precision::kFP16, kF16Tol);
}

TEST(CudaResize, SizesAndAspectPolicy) {
  SKIP_WITHOUT_GPU();
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    const std::string m = std::string("mode=\"") + mode + "\"";
    ExpectMatchesReference(m + " sizes up", ResizeSizes({1, 2, 5, 7}, {1, 2, 9, 11}, m), In({1, 2, 5, 7}),
                           Precision::kFP32, kF32Tol);
    ExpectMatchesReference(m + " sizes down", ResizeSizes({1, 2, 9, 7}, {1, 2, 5, 3}, m), In({1, 2, 9, 7}),
                           Precision::kFP32, kF32Tol);
    for (const char* policy : {"not_larger", "not_smaller"}) {
      const std::string attrs = m + ", axes=[2,3], keep_aspect_ratio_policy=\"" + policy + "\"";
      ExpectMatchesReference(attrs, ResizeSizes({1, 2, 6, 9}, {10, 10}, attrs), In({1, 2, 6, 9}), Precision::kFP32,
                             kF32Tol);
    }
  }
  // axes with scales, negative axis.
  ExpectMatchesReference("axes scales", ResizeScales({2, 3, 6, 5}, {1.5, 0.6}, "mode=\"linear\", axes=[2,-1]"),
                         In({2, 3, 6, 5}), Precision::kFP32, kF32Tol);
}

TEST(CudaResize, CropAndResizeExtrapolates) {
  SKIP_WITHOUT_GPU();
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    const std::string attrs = std::string("mode=\"") + mode +
                              "\", coordinate_transformation_mode=\"tf_crop_and_resize\", extrapolation_value=10.0";
    std::ostringstream g;
    g << "opset 19\ngraph g (x: f32[1,2,6,8]) -> (y) {\n"
      << "  roi = const f32[8] {0, 0, -0.2, 0.4, 1, 1, 0.6, 1.3}\n"
      << "  sc = const f32[4] {1, 1, 1.5, 0.8}\n"
      << "  y = Resize(x, roi, sc) {" << attrs << "}\n}\n";
    ExpectMatchesReference(attrs, g.str(), In({1, 2, 6, 8}), Precision::kFP32, kF32Tol);
    std::ostringstream h;  // roi over the listed axes only, sizes
    h << "opset 19\ngraph g (x: f32[1,2,6,8]) -> (y) {\n"
      << "  roi = const f32[4] {0.1, 0.25, 0.9, 0.75}\n"
      << "  sz = const i64[2] {7, 1}\n"
      << "  y = Resize(x, roi, _, sz) {" << attrs << ", axes=[2,3]}\n}\n";
    ExpectMatchesReference(attrs + " axes sizes", h.str(), In({1, 2, 6, 8}), Precision::kFP32, kF32Tol);
  }
}

TEST(CudaResize, Antialias) {
  SKIP_WITHOUT_GPU();
  for (const char* mode : {"linear", "cubic"})
    for (const auto& s : std::vector<std::vector<double>>{{1, 1, 0.6, 0.3}, {1, 1, 0.5, 1.5}}) {
      const std::string attrs = std::string("mode=\"") + mode + "\", antialias=1";
      ExpectMatchesReference(attrs + " scales " + Join(s), ResizeScales({1, 3, 16, 20}, s, attrs), In({1, 3, 16, 20}),
                             Precision::kFP32, kF32Tol);
    }
  ExpectMatchesReference(
      "cubic antialias exclude_outside",
      ResizeScales({1, 2, 12, 12}, {1, 1, 0.4, 0.7}, "mode=\"cubic\", antialias=1, exclude_outside=1"),
      In({1, 2, 12, 12}), Precision::kFP32, kF32Tol);
}

TEST(CudaResize, RanksTwoToFive) {
  SKIP_WITHOUT_GPU();
  ExpectMatchesReference("2-D linear", ResizeScales({6, 8}, {1.5, 0.5}, "mode=\"linear\""), In({6, 8}),
                         Precision::kFP32, kF32Tol);
  ExpectMatchesReference("3-D linear", ResizeScales({2, 3, 10}, {1, 1, 2.5}, "mode=\"linear\""), In({2, 3, 10}),
                         Precision::kFP32, kF32Tol);
  ExpectMatchesReference("3-D cubic down", ResizeScales({2, 3, 10}, {1, 1, 0.7}, "mode=\"cubic\""), In({2, 3, 10}),
                         Precision::kFP32, kF32Tol);
  ExpectMatchesReference("5-D trilinear", ResizeScales({1, 2, 4, 5, 6}, {1, 1, 2, 1.5, 0.5}, "mode=\"linear\""),
                         In({1, 2, 4, 5, 6}), Precision::kFP32, kF32Tol);
  ExpectMatchesReference("5-D cubic", ResizeScales({1, 2, 4, 5, 6}, {1, 1, 1, 1.5, 0.5}, "mode=\"cubic\""),
                         In({1, 2, 4, 5, 6}), Precision::kFP32, kF32Tol);
  ExpectMatchesReference("5-D nearest", ResizeScales({2, 2, 3, 4, 5}, {1, 1.5, 2, 0.5, 1.4}, "mode=\"nearest\""),
                         In({2, 2, 3, 4, 5}), Precision::kFP32, kF32Tol);
  ExpectMatchesReference("batch resized", ResizeScales({2, 3, 4, 4}, {2, 1, 1.5, 1.5}, "mode=\"linear\""),
                         In({2, 3, 4, 4}), Precision::kFP32, kF32Tol);
}

TEST(CudaResize, IntegerNearest) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<DType, const char*>> types = {
      {DType::kInt64, "i64"}, {DType::kInt32, "i32"}, {DType::kUInt8, "u8"}, {DType::kInt8, "i8"}};
  for (const auto& [dt, name] : types) {
    ExpectMatchesReference(std::string(name) + " nearest",
                           ResizeScales({1, 3, 5, 6}, {1, 1, 2, 0.7}, "mode=\"nearest\"", 19, name),
                           In({1, 3, 5, 6}, 3, dt), Precision::kFP32, 0);
  }
  // Extrapolated positions take the (rounded) extrapolation value in the element type.
  std::ostringstream g;
  g << "opset 19\ngraph g (x: i64[1,1,4,5]) -> (y) {\n"
    << "  roi = const f32[8] {0, 0, -0.5, 0.2, 1, 1, 1.5, 0.9}\n"
    << "  sc = const f32[4] {1, 1, 2, 1}\n"
    << "  y = Resize(x, roi, sc) {mode=\"nearest\", coordinate_transformation_mode=\"tf_crop_and_resize\","
    << " extrapolation_value=7.6}\n}\n";
  ExpectMatchesReference("i64 crop extrapolation", g.str(), In({1, 1, 4, 5}, 5, DType::kInt64), Precision::kFP32, 0);
}

TEST(CudaResize, UpsampleAndResize10) {
  SKIP_WITHOUT_GPU();
  for (const char* mode : {"nearest", "linear"}) {
    const std::string m = std::string("mode=\"") + mode + "\"";
    std::ostringstream up9;
    up9 << "opset 9\ngraph g (x: f32[1,2,5,4]) -> (y) {\n  sc = const f32[4] {1, 1, 2, 1.5}\n"
        << "  y = Upsample(x, sc) {" << m << "}\n}\n";
    ExpectMatchesReference(m + " Upsample-9", up9.str(), In({1, 2, 5, 4}), Precision::kFP32, kF32Tol);
    std::ostringstream up7;
    up7 << "opset 7\ngraph g (x: f32[1,2,5,4]) -> (y) {\n"
        << "  y = Upsample(x) {" << m << ", scales=[1.0, 1.0, 3.0, 2.0]}\n}\n";
    ExpectMatchesReference(m + " Upsample-7", up7.str(), In({1, 2, 5, 4}), Precision::kFP32, kF32Tol);
    std::ostringstream r10;
    r10 << "opset 10\ngraph g (x: f32[1,2,9,8]) -> (y) {\n  sc = const f32[4] {1, 1, 0.5, 1.5}\n"
        << "  y = Resize(x, sc) {" << m << "}\n}\n";
    ExpectMatchesReference(m + " Resize-10", r10.str(), In({1, 2, 9, 8}), Precision::kFP32, kF32Tol);
  }
}

TEST(CudaResize, ChannelsLastBetweenConvolutions) {
  SKIP_WITHOUT_GPU();
  for (const char* mode : {"nearest", "linear"}) {
    std::ostringstream g;
    g << "opset 19\ngraph g (x: f32[2,8,10,12]) -> (y) {\n"
      << "  w1 = const f32[16,8,3,3] random\n  c1 = Conv(x, w1) {pads=[1,1,1,1]}\n"
      << "  sc = const f32[4] {1, 1, 2, 2}\n"
      << "  r = Resize(c1, _, sc) {mode=\"" << mode << "\"}\n"
      << "  w2 = const f32[8,16,3,3] random\n  y = Conv(r, w2) {pads=[1,1,1,1]}\n}\n";
    ExpectMatchesReference(std::string(mode) + " NHWC fp16", g.str(), In({2, 8, 10, 12}), Precision::kFP16, kF16Tol);
  }
}

// ---------------------------------------------------------------- ConvTranspose

struct Deconv {
  const char* name;
  Shape x, w;
  const char* attrs;
  bool bias;
};

std::string DeconvGraph(const Deconv& c, int64_t group) {
  std::ostringstream g;
  g << "opset 17\ngraph g (x: f32[" << Join(c.x) << "]) -> (y) {\n"
    << "  w = const f32[" << Join(c.w) << "] random\n";
  if (c.bias) g << "  b = const f32[" << c.w[1] * group << "] random\n";
  g << "  y = ConvTranspose(x, w" << (c.bias ? ", b" : "") << ") {" << c.attrs << "}\n}\n";
  return g.str();
}

int64_t GroupOf(const std::string& attrs) {
  const size_t p = attrs.find("group=");
  return p == std::string::npos ? 1 : std::stoll(attrs.substr(p + 6));
}

const std::vector<Deconv>& DeconvCases() {
  static const std::vector<Deconv> k = {
      {"1-D stride 2", {2, 4, 9}, {4, 3, 3}, "strides=[2], pads=[1,1]", true},
      {"1-D output_padding", {1, 3, 7}, {3, 2, 4}, "strides=[3], output_padding=[2]", false},
      {"2-D", {2, 4, 7, 6}, {4, 5, 3, 3}, "pads=[1,1,1,1]", true},
      {"2-D stride 2 output_padding",
       {1, 6, 5, 4},
       {6, 4, 3, 3},
       "strides=[2,2], pads=[1,1,1,1], output_padding=[1,1]",
       true},
      {"2-D groups", {2, 6, 5, 5}, {6, 2, 3, 3}, "group=3, strides=[2,2], pads=[1,1,1,1], output_padding=[1,0]", true},
      {"2-D depthwise", {1, 8, 6, 6}, {8, 1, 4, 4}, "group=8, strides=[2,2], pads=[1,1,1,1]", false},
      {"2-D dilation", {1, 3, 6, 5}, {3, 4, 3, 2}, "dilations=[2,3], pads=[2,1,2,1]", true},
      {"2-D asymmetric pads (crop)", {1, 4, 5, 6}, {4, 3, 3, 3}, "strides=[2,2], pads=[0,1,2,0]", true},
      {"2-D asymmetric pads (direct)", {1, 4, 5, 6}, {4, 3, 3, 3}, "strides=[2,2], pads=[2,1,1,0]", false},
      {"2-D pads past the kernel", {1, 3, 8, 8}, {3, 2, 3, 3}, "strides=[2,2], pads=[3,3,3,4]", true},
      {"2-D SAME_UPPER", {1, 4, 5, 6}, {4, 3, 3, 3}, "strides=[2,2], auto_pad=\"SAME_UPPER\"", true},
      {"2-D SAME_LOWER", {1, 4, 5, 6}, {4, 3, 3, 3}, "strides=[2,2], auto_pad=\"SAME_LOWER\"", false},
      {"2-D output_shape", {1, 4, 5, 5}, {4, 2, 3, 3}, "strides=[2,2], output_shape=[12,14]", true},
      {"2-D SAME_UPPER output_shape beyond the full result",
       {2, 4, 4, 4},
       {4, 2, 3, 3},
       "auto_pad=\"SAME_UPPER\", output_shape=[9,5]",
       true},
      {"3-D", {1, 4, 3, 4, 5}, {4, 3, 2, 3, 3}, "strides=[2,1,2], pads=[0,1,1,0,1,1]", true},
      {"3-D groups output_padding",
       {2, 4, 3, 3, 4},
       {4, 2, 3, 3, 3},
       "group=2, strides=[2,2,2], pads=[1,1,1,1,1,1], output_padding=[1,0,1]",
       false},
  };
  return k;
}

TEST(CudaConvTranspose, MatchesReferenceFp32) {
  SKIP_WITHOUT_GPU();
  for (const Deconv& c : DeconvCases())
    ExpectMatchesReference(c.name, DeconvGraph(c, GroupOf(c.attrs)), In(c.x), Precision::kFP32, kF32Tol);
}

TEST(CudaConvTranspose, MatchesReferenceFp16) {
  SKIP_WITHOUT_GPU();
  for (const Deconv& c : DeconvCases())
    ExpectMatchesReference(std::string(c.name) + " fp16", DeconvGraph(c, GroupOf(c.attrs)), In(c.x), Precision::kFP16,
                           kF16Tol);
}

// ---------------------------------------------------------------- factories (no GPU needed)

struct Prepared {
  std::unique_ptr<ir::Graph> graph;
  std::vector<KernelInput> in;
  std::vector<KernelOutput> out;
};

// The graph's single node with its inputs as the builder sees them: constants host-known
// unless `device_consts` (as if computed on the device).
Prepared Prepare(const std::string& text, bool device_consts = false) {
  Prepared p;
  p.graph = MustParse(text);
  const ir::Node& node = *p.graph->nodes().front();
  for (size_t i = 0; i < node.num_inputs(); ++i) {
    const ir::Value* v = node.input(i);
    KernelInput k;
    if (v) {
      k.present = true;
      k.dtype = v->type.dtype;
      k.shape = v->type.static_shape();
      if (!device_consts && v->is_constant()) k.host = &v->data;
    }
    p.in.push_back(k);
  }
  const ir::Value* y = node.output(0);
  p.out.push_back(KernelOutput{y->type.dtype, y->type.static_shape()});
  return p;
}

Result<KernelChoice> Make(KernelFactory f, const Prepared& p, const KernelOptions& opt) {
  const RunEnv env;
  const ir::Node& node = *p.graph->nodes().front();
  return f(KernelRequest{node, p.graph->opset(), p.in, p.out, opt, env});
}

TEST(CudaResizeFactory, RefusesWhatItCannotRunAndSaysWhy) {
  const std::string linear = ResizeScales({1, 2, 6, 5}, {1, 1, 2, 2}, "mode=\"linear\"");
  KernelOptions opt;
  auto ok = Make(&MakeResize, Prepare(linear), opt);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_NE(ok->kernel, nullptr);
  EXPECT_STREQ(ok->kernel->family(), "resize");
  ExpectUnsupported(Make(&MakeResize, Prepare(linear, true), opt), "scales");
  opt.in_nhwc = {true};
  ExpectUnsupported(Make(&MakeResize, Prepare(linear), opt), "layout");
  opt.out_nhwc = true;
  EXPECT_TRUE(Make(&MakeResize, Prepare(linear), opt).ok());
  ExpectUnsupported(Make(&MakeResize, Prepare(ResizeScales({2, 2, 6, 5}, {2, 2, 2, 2}, "mode=\"linear\"")), {}),
                    "more than 3 axes");
  ExpectUnsupported(
      Make(&MakeResize, Prepare(ResizeScales({1, 1, 64, 5}, {1, 1, 0.05, 1}, "mode=\"cubic\", antialias=1")), {}),
      "antialias");
  ExpectUnsupported(
      Make(&MakeResize, Prepare(ResizeScales({1, 1, 4, 5}, {1, 1, 2, 2}, "mode=\"linear\"", 19, "i32")), {}), "i32");
}

TEST(CudaConvTransposeFactory, CheckOnlyTouchesNoDevice) {
  const Deconv c = DeconvCases()[7];  // asymmetric pads through the workspace
  const Prepared p = Prepare(DeconvGraph(c, 1));
  KernelOptions opt;
  opt.check_only = true;
  auto r = Make(&MakeConvTranspose, p, opt);  // a null cuDNN handle: must not be used
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->view);
  EXPECT_EQ(r->kernel, nullptr);
  opt.out_nhwc = true;
  ExpectUnsupported(Make(&MakeConvTranspose, p, opt), "layout");
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
