// Signal ops (src/ops/signal.cpp): windows, MelWeightMatrix, DFT and STFT against direct
// formulas, the inverse real transform as the forward one's inverse, and the errors bad
// inputs give (the node suite checks the values against onnx's reference too).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numbers>
#include <random>

#include "ir/graph.h"
#include "ops/op_test_util.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

using ir::TensorType;
using namespace testing;  // NOLINT(google-build-using-namespace)

Result<std::vector<Tensor>> RunOp(const std::string& op, const std::vector<const Tensor*>& inputs,
                                  std::map<std::string, ir::Attribute> attrs = {}, int64_t opset = 20) {
  return RunOneNode(op, inputs, std::move(attrs), opset);
}

Tensor Scalar64(int64_t v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, {v}, {});
}

TEST(SignalOps, WindowsMatchTheirFormulas) {
  const Tensor size = Scalar64(8);
  for (int periodic : {0, 1}) {
    const double n_den = periodic ? 8.0 : 7.0;
    auto hann = RunOp("HannWindow", {&size}, {{"periodic", ir::Attribute::Int(periodic)}}, 17);
    auto black = RunOp("BlackmanWindow", {&size}, {{"periodic", ir::Attribute::Int(periodic)}}, 17);
    ASSERT_TRUE(hann.ok() && black.ok()) << hann.status().ToString() << black.status().ToString();
    for (int n = 0; n < 8; ++n) {
      const double x = 2 * std::numbers::pi * n / n_den;
      EXPECT_NEAR((*hann)[0].data<float>()[n], std::pow(std::sin(x / 2), 2), 1e-6) << n;
      EXPECT_NEAR((*black)[0].data<float>()[n], 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2 * x), 1e-6) << n;
    }
  }
  // output_datatype: double.
  auto d = RunOp("HammingWindow", {&size}, {{"output_datatype", ir::Attribute::Int(11)}}, 17);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)[0].dtype(), DType::kFloat64);
  EXPECT_NEAR((*d)[0].data<double>()[0], 25.0 / 46.0 - 21.0 / 46.0, 1e-12);
}

TEST(SignalOps, DftOfARealSignalAndItsInverse) {
  // x [1, 6, 1]: the forward transform against the direct sum, then the inverse real
  // transform of its onesided half gives x back.
  const std::vector<float> xs = {0.5f, -1.f, 2.f, 0.25f, 3.f, -0.75f};
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, xs, {1, 6, 1});
  auto f = RunOp("DFT", {&x}, {{"axis", ir::Attribute::Int(1)}}, 17);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)[0].shape(), (Shape{1, 6, 2}));
  for (int k = 0; k < 6; ++k) {
    double re = 0, im = 0;
    for (int n = 0; n < 6; ++n) {
      re += xs[static_cast<size_t>(n)] * std::cos(2 * std::numbers::pi * k * n / 6);
      im -= xs[static_cast<size_t>(n)] * std::sin(2 * std::numbers::pi * k * n / 6);
    }
    EXPECT_NEAR((*f)[0].data<float>()[2 * k], re, 1e-5) << k;
    EXPECT_NEAR((*f)[0].data<float>()[2 * k + 1], im, 1e-5) << k;
  }
  auto half = RunOp("DFT", {&x}, {{"axis", ir::Attribute::Int(1)}, {"onesided", ir::Attribute::Int(1)}}, 17);
  ASSERT_TRUE(half.ok());
  ASSERT_EQ((*half)[0].shape(), (Shape{1, 4, 2}));
  auto back = RunOp(
      "DFT", {&(*half)[0]},
      {{"axis", ir::Attribute::Int(1)}, {"onesided", ir::Attribute::Int(1)}, {"inverse", ir::Attribute::Int(1)}}, 17);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ((*back)[0].shape(), (Shape{1, 6, 1}));
  for (int n = 0; n < 6; ++n) EXPECT_NEAR((*back)[0].data<float>()[n], xs[static_cast<size_t>(n)], 1e-5) << n;
  // Opset 20 takes the axis as an input; dft_length pads with zeros.
  const Tensor axis = Scalar64(-2), len = Scalar64(8);
  auto padded = RunOp("DFT", {&x, &len, &axis});
  ASSERT_TRUE(padded.ok()) << padded.status().ToString();
  EXPECT_EQ((*padded)[0].shape(), (Shape{1, 8, 2}));
}

TEST(SignalOps, StftFramesAWindowedSignal) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> xs(20);
  for (float& v : xs) v = u(rng);
  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, xs, {1, 20, 1});
  const Tensor step = Scalar64(4);
  const Tensor window = Tensor::FromVector<float>(DType::kFloat32, {0.f, 0.5f, 1.f, 1.f, 0.5f, 0.f, 0.25f, 0.75f}, {8});
  auto r = RunOp("STFT", {&x, &step, &window}, {}, 17);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{1, 4, 5, 2}));  // 1 + (20 - 8) / 4 frames, 8 / 2 + 1 bins
  const int f = 2, k = 3;
  double re = 0, im = 0;
  for (int n = 0; n < 8; ++n) {
    const double v = xs[static_cast<size_t>(f * 4 + n)] * window.data<float>()[n];
    re += v * std::cos(2 * std::numbers::pi * k * n / 8);
    im -= v * std::sin(2 * std::numbers::pi * k * n / 8);
  }
  EXPECT_NEAR((*r)[0].data<float>()[(f * 5 + k) * 2], re, 1e-5);
  EXPECT_NEAR((*r)[0].data<float>()[(f * 5 + k) * 2 + 1], im, 1e-5);
}

TEST(SignalOps, MelWeightMatrixRowsAreTriangles) {
  const Tensor bins = Scalar64(8), dft = Scalar64(64), rate = Scalar64(16000);
  const Tensor lo = Tensor::FromVector<float>(DType::kFloat32, {0.f}, {}),
               hi = Tensor::FromVector<float>(DType::kFloat32, {8000.f}, {});
  auto r = RunOp("MelWeightMatrix", {&bins, &dft, &rate, &lo, &hi}, {}, 17);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{33, 8}));
  for (int i = 0; i < 8; ++i) {
    float peak = 0;
    for (int j = 0; j < 33; ++j) {
      const float w = (*r)[0].data<float>()[j * 8 + i];
      EXPECT_GE(w, 0.f);
      EXPECT_LE(w, 1.f);
      peak = std::max(peak, w);
    }
    EXPECT_FLOAT_EQ(peak, 1.f) << "filter " << i;
  }
}

TEST(SignalOps, BadInputsAreErrorsThatSayWhat) {
  const Tensor neg = Scalar64(-3);
  auto w = RunOp("HannWindow", {&neg}, {}, 17);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("size must be >= 0"), std::string::npos) << w.status().ToString();

  const Tensor three = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(12, 1.f), {1, 4, 3});
  auto d = RunOp("DFT", {&three}, {}, 17);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("1 (real) or 2 (complex)"), std::string::npos) << d.status().ToString();

  const Tensor x = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(8, 1.f), {1, 8, 1});
  auto on_complex = RunOp("DFT", {&x}, {{"axis", ir::Attribute::Int(2)}}, 17);
  ASSERT_FALSE(on_complex.ok());
  EXPECT_NE(on_complex.status().message().find("complex dimension"), std::string::npos);

  const Tensor step = Scalar64(2), long_frame = Scalar64(16);
  auto s = RunOp("STFT", {&x, &step, nullptr, &long_frame}, {}, 17);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("shorter than a frame"), std::string::npos) << s.status().ToString();

  const Tensor win = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(4, 1.f), {4});
  const Tensor five = Scalar64(5);
  auto m = RunOp("STFT", {&x, &step, &win, &five}, {}, 17);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("differs from the window's length"), std::string::npos);

  const Tensor bins = Scalar64(4), dft = Scalar64(16), rate = Scalar64(8000);
  const Tensor lo = Tensor::FromVector<float>(DType::kFloat32, {500.f}, {}),
               hi = Tensor::FromVector<float>(DType::kFloat32, {100.f}, {});
  auto mel = RunOp("MelWeightMatrix", {&bins, &dft, &rate, &lo, &hi}, {}, 17);
  ASSERT_FALSE(mel.ok());
  EXPECT_NE(mel.status().message().find("lower < upper"), std::string::npos) << mel.status().ToString();
}

}  // namespace
}  // namespace sampan::ops
