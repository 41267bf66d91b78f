// The CUDA image and detection ops against their reference kernels, output for output and bit for
// bit: sampan::ResizeImage (resize_image.cu: limit_side, letterbox and stretch, up and down, odd
// sizes, 1 to 4 channels, swap_rb, per-channel mean/std, batches, HWC and NHWC) and
// EfficientNMS_TRT (efficient_nms.cu: f32 and f16, corner and center boxes, per-class boxes,
// per-class and class-agnostic suppression, the sigmoid, the background class, scores full of
// ties, more than 4096 candidates, fewer than max_output_boxes, none at all), each run eagerly
// and under CUDA-graph replay. The device sigmoid's exp (libm_expf.h) is held against the host's
// std::exp, and the factories' refusals are checked; those need no GPU, the rest skips without one.
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/families.h"
#include "backends/cuda/libm_expf.h"

namespace sampan::cuda {
namespace {

using builder::Precision;
using testing::Ask;
using testing::BuildAndRun;
using testing::Dims;
using testing::ExpectUnsupported;
using testing::Ints;

// Distance in ulps of two f32 bit patterns (for the failure message).
int64_t Ulps(float a, float b) {
  int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  if (x < 0) x = INT32_MIN - x;
  if (y < 0) y = INT32_MIN - y;
  return std::llabs(static_cast<int64_t>(x) - y);
}

// Every output of `graph` on "cuda" (eager, then replayed as a CUDA graph) equal to the reference
// backend's bit for bit, with no node left on the host.
void ExpectSameBits(const std::string& name, const std::string& graph, const std::map<std::string, Tensor>& in) {
  auto want = BuildAndRun(graph, "reference", Precision::kFP32, in);
  ASSERT_TRUE(want.ok()) << name << ": " << want.status().ToString();
  for (bool cuda_graph : {false, true}) {
    const char* how = cuda_graph ? " (CUDA graph)" : " (eager)";
    size_t host = 0;
    auto got = BuildAndRun(graph, "cuda", Precision::kFP32, in, cuda_graph, cuda_graph ? 2 : 1, &host);
    ASSERT_TRUE(got.ok()) << name << how << ": " << got.status().ToString();
    EXPECT_EQ(host, 0u) << name << ": nodes left on the host";
    ASSERT_EQ(got->size(), want->size()) << name;
    for (size_t k = 0; k < want->size(); ++k) {
      const Tensor& g = (*got)[k];
      const Tensor& w = (*want)[k];
      ASSERT_EQ(g.dtype(), w.dtype()) << name << " output " << k;
      ASSERT_EQ(g.shape(), w.shape()) << name << " output " << k;
      if (std::memcmp(g.raw(), w.raw(), w.nbytes()) == 0) continue;
      int64_t first = -1, differ = 0, worst = 0;
      for (int64_t i = 0; i < w.numel(); ++i) {
        const size_t e = DTypeSize(w.dtype());
        if (std::memcmp(static_cast<const char*>(g.raw()) + i * e, static_cast<const char*>(w.raw()) + i * e, e) == 0)
          continue;
        ++differ;
        if (first < 0) first = i;
        if (w.dtype() == DType::kFloat32) worst = std::max(worst, Ulps(g.data<float>()[i], w.data<float>()[i]));
      }
      ADD_FAILURE() << name << how << " output " << k << ": " << differ << " of " << w.numel()
                    << " elements differ; first at " << first << ": " << ElementAsDouble(g, first) << " vs "
                    << ElementAsDouble(w, first) << (worst ? " (at most " + std::to_string(worst) + " ulp)" : "");
    }
  }
}

// ------------------------------------------------------------------------------------ ResizeImage

struct ResizeCase {
  Shape image;        // [H, W, C] or [N, H, W, C]
  std::string attrs;  // ResizeImage's, as the IR text writes them
};

std::string ResizeGraph(const ResizeCase& c) {
  std::ostringstream g;
  g << "opset 17\ngraph g (x: u8[" << Dims(c.image) << "]) -> (y, t) {\n"
    << "  y, t = sampan::ResizeImage(x) {" << c.attrs << "}\n}\n";
  return g.str();
}

void ExpectResizeMatches(const ResizeCase& c, uint64_t seed) {
  ExpectSameBits(ResizeGraph(c), ResizeGraph(c), {{"x", Ints(DType::kUInt8, c.image, seed, 0, 256)}});
}

TEST(CudaImageOps, ResizeImageStretchUpDownOddAndSame) {
  SKIP_WITHOUT_GPU();
  const std::string norm = "mean=[0.0], std=[1.0]";  // raw pixel values: every rounding shows
  for (const auto& [image, size] : std::vector<std::pair<Shape, std::string>>{
           {{37, 53, 3}, "[64,80]"},      // up, odd source
           {{120, 97, 3}, "[33,45]"},     // down, odd target
           {{1, 1, 1}, "[5,7]"},          // one pixel
           {{9, 11, 1}, "[9,11]"},        // same size: copied
           {{2, 200, 3}, "[17,31]"},      // a strip
           {{31, 29, 4}, "[31,58]"},      // rows kept, columns doubled; 4 channels
           {{64, 48, 2}, "[21,100]"}}) {  // down one way, up the other; 2 channels
    ExpectResizeMatches({image, "mode=\"stretch\", size=" + size + ", " + norm}, 11);
    ExpectResizeMatches({image, "mode=\"stretch\", size=" + size}, 12);  // default (px - 127.5) / 127.5
  }
}

TEST(CudaImageOps, ResizeImageLetterbox) {
  SKIP_WITHOUT_GPU();
  for (const auto& [image, size] :
       std::vector<std::pair<Shape, std::string>>{{{37, 53, 3}, "[64,64]"},    // wider: rows padded
                                                  {{100, 31, 3}, "[48,80]"},   // taller: columns padded
                                                  {{40, 40, 1}, "[64,64]"},    // square up
                                                  {{333, 250, 3}, "[96,96]"},  // down
                                                  {{17, 93, 1}, "[32,40]"}})
    for (const char* extra : {"", ", pad_value=0", ", pad_value=255, mean=[0.0], std=[255.0]"})
      ExpectResizeMatches({image, std::string("mode=\"letterbox\", size=") + size + extra}, 21);
}

TEST(CudaImageOps, ResizeImageLimitSide) {
  SKIP_WITHOUT_GPU();
  ExpectResizeMatches({{50, 40, 3}, ""}, 31);  // rapidocr's default: short side up to 736
  ExpectResizeMatches({{97, 130, 3}, "limit_type=\"max\", limit_side_len=64"}, 32);  // down
  ExpectResizeMatches({{45, 70, 1}, "limit_type=\"min\", limit_side_len=32"}, 33);   // ratio 1, rounded to 32s
  ExpectResizeMatches({{48, 24, 3}, "limit_type=\"max\", limit_side_len=48"}, 34);   // 48 x 24 -> 64 x 32
  ExpectResizeMatches({{200, 75, 3}, "limit_side_len=100, mean=[0.5, 0.4, 0.3], std=[0.2, 0.25, 0.3]"}, 35);
}

TEST(CudaImageOps, ResizeImageChannelsBatchesAndNormalisation) {
  SKIP_WITHOUT_GPU();
  const std::string imagenet = "mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]";
  ExpectResizeMatches({{2, 37, 53, 3}, "mode=\"letterbox\", size=[64,64], swap_rb=1, " + imagenet}, 41);
  ExpectResizeMatches({{3, 50, 41, 3}, "mode=\"stretch\", size=[29,77], swap_rb=1"}, 42);
  ExpectResizeMatches({{2, 19, 23, 1}, "mode=\"stretch\", size=[40,9], mean=[10.0], std=[3.0]"}, 43);
  ExpectResizeMatches({{4, 30, 30, 3}, "limit_type=\"max\", limit_side_len=50, " + imagenet}, 44);
  ExpectResizeMatches({{1, 25, 35, 4}, "mode=\"letterbox\", size=[40,50], mean=[1.0, 2.0, 3.0, 4.0]"}, 45);
  ExpectResizeMatches({{3, 16, 16, 3}, "mode=\"stretch\", size=[16,16], swap_rb=1, " + imagenet}, 46);  // copy
}

// ------------------------------------------------------------------------------------ EfficientNMS

struct NmsCase {
  int64_t n = 2, anchors = 300, classes = 5;
  DType dt = DType::kFloat32;
  bool per_class_boxes = false;
  int64_t coding = 0, agnostic = 0, activation = 0, background = -1, max_out = 50;
  float score_threshold = 0.2f, iou = 0.5f;
  int ties = 0;  // > 0: scores take only this many values (lots of equal scores)
  const char* domain = "";
};

std::string NmsName(const NmsCase& c) {
  std::ostringstream s;
  s << (c.dt == DType::kFloat16 ? "f16" : "f32") << " n" << c.n << " a" << c.anchors << " c" << c.classes
    << (c.per_class_boxes ? " per-class boxes" : "") << " coding " << c.coding << " agnostic " << c.agnostic
    << " sigmoid " << c.activation << " background " << c.background << " max " << c.max_out << " thr "
    << c.score_threshold << " iou " << c.iou << " ties " << c.ties << (*c.domain ? " TRT domain" : "");
  return s.str();
}

std::string NmsGraph(const NmsCase& c) {
  const char* t = c.dt == DType::kFloat16 ? "f16" : "f32";
  const Shape boxes = c.per_class_boxes ? Shape{c.n, c.anchors, c.classes, 4} : Shape{c.n, c.anchors, 4};
  std::ostringstream g;
  g.precision(9);
  g << "opset 17\ngraph g (boxes: " << t << "[" << Dims(boxes) << "], scores: " << t << "[" << c.n << "," << c.anchors
    << "," << c.classes << "]) -> (num, db, ds, dc) {\n"
    << "  num, db, ds, dc = " << c.domain << "EfficientNMS_TRT(boxes, scores) {score_threshold=" << std::showpoint
    << c.score_threshold << ", iou_threshold=" << c.iou << std::noshowpoint << ", max_output_boxes=" << c.max_out
    << ", background_class=" << c.background << ", score_activation=" << c.activation
    << ", class_agnostic=" << c.agnostic << ", box_coding=" << c.coding << ", plugin_version=\"1\"}\n}\n";
  return g.str();
}

// Boxes scattered over a 100 x 100 field, 2 to 30 a side (many overlaps), some with their
// corners given in the wrong order; scores uniform in [0, 1) (logits in [-4, 4) for the sigmoid),
// or one of `ties` values.
std::map<std::string, Tensor> NmsInputs(const NmsCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const int64_t nb = c.n * c.anchors * (c.per_class_boxes ? c.classes : 1);
  Tensor boxes = Tensor::Alloc(DType::kFloat32,
                               c.per_class_boxes ? Shape{c.n, c.anchors, c.classes, 4} : Shape{c.n, c.anchors, 4});
  float* b = boxes.mutable_data<float>();
  for (int64_t i = 0; i < nb; ++i) {
    const float x = 100 * u(rng), y = 100 * u(rng), w = 2 + 28 * u(rng), h = 2 + 28 * u(rng);
    if (c.coding == 1) {
      b[4 * i] = x, b[4 * i + 1] = y, b[4 * i + 2] = w, b[4 * i + 3] = h;
    } else if (u(rng) < 0.1f) {
      b[4 * i] = x + w, b[4 * i + 1] = y + h, b[4 * i + 2] = x, b[4 * i + 3] = y;
    } else {
      b[4 * i] = x, b[4 * i + 1] = y, b[4 * i + 2] = x + w, b[4 * i + 3] = y + h;
    }
  }
  Tensor scores = Tensor::Alloc(DType::kFloat32, {c.n, c.anchors, c.classes});
  float* s = scores.mutable_data<float>();
  for (int64_t i = 0; i < scores.numel(); ++i) {
    float v = u(rng);
    if (c.ties > 0) v = std::floor(v * static_cast<float>(c.ties)) / static_cast<float>(c.ties);
    s[i] = c.activation ? 8 * v - 4 : v;
  }
  if (c.dt != DType::kFloat32) {
    boxes = *CastTensor(boxes, c.dt);
    scores = *CastTensor(scores, c.dt);
  }
  return {{"boxes", boxes}, {"scores", scores}};
}

void ExpectNmsMatches(const NmsCase& c, uint64_t seed) {
  ExpectSameBits(NmsName(c), NmsGraph(c), NmsInputs(c, seed));
}

TEST(CudaImageOps, EfficientNmsEveryOption) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (DType dt : {DType::kFloat32, DType::kFloat16})
    for (int64_t coding : {0, 1})
      for (int64_t agnostic : {0, 1})
        for (int64_t activation : {0, 1}) {
          NmsCase c;
          c.dt = dt;
          c.coding = coding;
          c.agnostic = agnostic;
          c.activation = activation;
          c.score_threshold = activation ? 0.3f : 0.2f;
          ExpectNmsMatches(c, ++seed);
        }
}

TEST(CudaImageOps, EfficientNmsBoxesClassesAndThresholds) {
  SKIP_WITHOUT_GPU();
  NmsCase c;
  c.per_class_boxes = true;  // [N, A, C, 4]
  ExpectNmsMatches(c, 201);
  c.coding = 1;
  c.dt = DType::kFloat16;
  ExpectNmsMatches(c, 202);
  NmsCase bg;
  bg.background = 0;
  ExpectNmsMatches(bg, 203);
  bg.background = 4;
  bg.activation = 1;
  bg.agnostic = 1;
  ExpectNmsMatches(bg, 204);
  NmsCase iou;
  iou.iou = 0.f;  // any overlap suppresses
  ExpectNmsMatches(iou, 205);
  iou.iou = 1.f;  // only identical boxes
  iou.domain = "TRT::";
  ExpectNmsMatches(iou, 206);
  NmsCase one;
  one.n = 1, one.anchors = 7, one.classes = 1, one.max_out = 3, one.score_threshold = 0.f;
  ExpectNmsMatches(one, 207);
}

TEST(CudaImageOps, EfficientNmsTiesAndManyCandidates) {
  SKIP_WITHOUT_GPU();
  // Scores of 8 values: the order among equal scores is the anchor's, then the class's.
  NmsCase ties;
  ties.ties = 8;
  ties.score_threshold = 0.f;
  ExpectNmsMatches(ties, 301);
  ties.agnostic = 1;
  ties.dt = DType::kFloat16;
  ExpectNmsMatches(ties, 302);
  // 2000 x 6 = 12000 candidates: only the best 4096 are suppressed among; with ties the 4096th
  // falls inside a run of equal scores, which the radix select splits by index.
  NmsCase many;
  many.n = 3, many.anchors = 2000, many.classes = 6, many.score_threshold = 0.f, many.max_out = 300;
  ExpectNmsMatches(many, 303);
  many.ties = 5;
  ExpectNmsMatches(many, 304);
  many.ties = 2;
  many.agnostic = 1;
  many.iou = 0.9f;
  ExpectNmsMatches(many, 305);
  many.ties = 0;
  many.activation = 1;
  many.score_threshold = -1.f;  // every sigmoid passes
  many.max_out = 5000;          // more slots than candidates kept: zeros after them
  ExpectNmsMatches(many, 306);
  many.ties = 3;
  many.dt = DType::kFloat16;
  many.max_out = 100;
  ExpectNmsMatches(many, 307);
  // 8400 anchors x 80 classes, YOLOv8's head, at its usual threshold and at 0.
  NmsCase yolo;
  yolo.n = 1, yolo.anchors = 8400, yolo.classes = 80, yolo.score_threshold = 0.25f, yolo.max_out = 100;
  ExpectNmsMatches(yolo, 308);
  yolo.score_threshold = 0.f;
  yolo.activation = 1;
  ExpectNmsMatches(yolo, 309);
}

TEST(CudaImageOps, EfficientNmsFewOrNoCandidates) {
  SKIP_WITHOUT_GPU();
  NmsCase few;
  few.score_threshold = 0.98f;  // about 1 in 50: fewer than max_output_boxes
  few.max_out = 100;
  ExpectNmsMatches(few, 401);
  NmsCase none;
  none.score_threshold = 2.f;  // no score reaches it: all zeros
  ExpectNmsMatches(none, 402);
  none.activation = 1;
  none.score_threshold = 1.5f;  // a sigmoid never does
  none.dt = DType::kFloat16;
  ExpectNmsMatches(none, 403);
  NmsCase bg_only;
  bg_only.classes = 1, bg_only.background = 0;  // every class is the background
  ExpectNmsMatches(bg_only, 404);
}

// ------------------------------------------------------------------------------------ no GPU needed

TEST(CudaImageOps, LibmExpfIsTheHostsExp) {
  // Every 509th float (all exponents, both signs, the overflow and underflow edges), and the
  // logits a detector's scores take densely.
  const uint64_t table[] = {SAMPAN_EXPF_TABLE};
  int64_t differ = 0;
  float first = 0;
  auto check = [&](float x) {
    const float want = std::exp(x), got = LibmExpf(x, table);
    if (std::memcmp(&want, &got, 4) != 0 && !(std::isnan(want) && std::isnan(got)) && differ++ == 0) first = x;
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += 509) {
    float x;
    const uint32_t bits = static_cast<uint32_t>(u);
    std::memcpy(&x, &bits, 4);
    check(x);
  }
  for (float x = -20.f; x < 20.f; x = std::nextafter(x, 21.f) + 1e-5f) check(x);
  EXPECT_EQ(differ, 0) << "LibmExpf differs from this host's expf, first at " << first
                       << " (a libm other than glibc's of 2018 on?)";
}

// The factory's answer (check_only) for the last node of `text`, its inputs as the graph declares
// them and then changed by `edit`: types and shapes inference would refuse reach the factory too.
template <class Edit>
Result<KernelChoice> AskEdited(KernelFactory f, const std::string& text, Edit edit, KernelOptions opt = {}) {
  static std::vector<std::unique_ptr<ir::Graph>> keep;  // the node outlives the answer
  keep.push_back(passes::testing::MustParse(text));
  const ir::Graph& g = *keep.back();
  const ir::Node& n = *g.nodes().back();
  std::vector<KernelInput> in;
  for (const ir::Value* v : n.inputs()) in.push_back(KernelInput{true, v->type.dtype, v->type.static_shape(), nullptr});
  std::vector<KernelOutput> out;
  for (const ir::Value* v : n.outputs()) out.push_back(KernelOutput{v->type.dtype, v->type.static_shape()});
  edit(in);
  opt.check_only = true;
  RunEnv env;
  if (f == nullptr) return MakeKernel(n, g.opset(), in, out, opt, env);  // through the op table
  return f(KernelRequest{n, g.opset(), in, out, opt, env});
}

TEST(CudaImageOps, FactoriesAnswerWithoutTheDevice) {
  const std::string resize =
      "opset 17\ngraph g (x: u8[2,30,40,3]) -> (y: f32[2,3,64,64], t: f32[4]) {\n"
      "  y, t = sampan::ResizeImage(x) {mode=\"letterbox\", size=[64,64]}\n}\n";
  auto ok = Ask(MakeResizeImage, resize);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_NE(ok->kernel, nullptr);
  auto retype = [](DType dt, Shape s) {
    return [=](std::vector<KernelInput>& in) { in[0].dtype = dt, in[0].shape = s; };
  };
  ExpectUnsupported(AskEdited(MakeResizeImage, resize, retype(DType::kFloat32, {2, 30, 40, 3})), "uint8 only");
  ExpectUnsupported(AskEdited(MakeResizeImage, resize, retype(DType::kUInt8, {30, 40})), "rank 2");
  ExpectUnsupported(AskEdited(MakeResizeImage, resize, retype(DType::kUInt8, {2, 30, 40, 5})), "5 channels");
  ExpectUnsupported(AskEdited(MakeResizeImage, resize, retype(DType::kUInt8, {2, 30, 40, 1})),
                    "differs from the computed");
  KernelOptions nhwc;
  nhwc.in_nhwc = {true};
  ExpectUnsupported(AskEdited(
                        nullptr, resize, [](std::vector<KernelInput>&) {}, nhwc),
                    "NCHW only");

  auto nms = [](const std::string& n, const std::string& a, const std::string& c) {
    return "opset 17\ngraph g (b: f32[" + n + "," + a + ",4], s: f32[" + n + "," + a + "," + c + "]) -> (num: i32[" +
           n + ",1], db: f32[" + n + ",5,4], ds: f32[" + n + ",5], dc: i32[" + n +
           ",5]) {\n  num, db, ds, dc = EfficientNMS_TRT(b, s) {max_output_boxes=5}\n}\n";
  };
  auto fine = Ask(MakeEfficientNms, nms("1", "10", "3"));
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  ASSERT_NE(fine->kernel, nullptr);
  EXPECT_GT(fine->kernel->workspace(), 0u);
  ExpectUnsupported(Ask(MakeEfficientNms, nms("1", "65536", "32768")), "the device takes < 2^31");
  ExpectUnsupported(Ask(MakeEfficientNms, nms("70000", "10", "3")), "batch 70000");
  ExpectUnsupported(Ask(MakeEfficientNms, nms("2000", "100000", "2")), "bytes of workspace");
  ExpectUnsupported(AskEdited(MakeEfficientNms, nms("1", "10", "3"),
                              [](std::vector<KernelInput>& in) { in[0].dtype = in[1].dtype = DType::kFloat64; }),
                    "(f32 or f16, one type)");
  ExpectUnsupported(AskEdited(MakeEfficientNms, nms("1", "10", "3"),
                              [](std::vector<KernelInput>& in) {
                                in.push_back(KernelInput{true, DType::kFloat32, {10, 4}});
                              }),
                    "anchors input");
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
