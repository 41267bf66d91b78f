// Einsum on the CUDA backend (einsum_kernel.cpp) against the reference kernel: batched
// contractions as attention and MaxViT write them, plain products, permuted operands
// and outputs, a full contraction to a scalar, an implicit output and a one-operand
// transpose, in FP32 and FP16. Without a GPU these tests skip and say why.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cuda_test_util.h"

namespace sampan::cuda {
namespace {

using testing::ExpectMatchesReference;
using testing::Random;

struct Case {
  const char* equation;
  Shape a, b;  // b empty: one operand
  Shape y;
};

std::string Graph(const Case& c, const char* t) {
  const std::string dims_a = testing::Dims(c.a), dims_b = testing::Dims(c.b);
  const std::string ins = c.b.empty() ? "a" : "a, b";
  return std::string("opset 17\ngraph g (a: ") + t + "[" + dims_a + "]" +
         (c.b.empty() ? "" : std::string(", b: ") + t + "[" + dims_b + "]") + ") -> (y) {\n  y = Einsum(" + ins +
         ") {equation=\"" + c.equation + "\"}\n}";
}

const Case kCases[] = {
    {"bhid,bhjd->bhij", {2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 5, 7}},
    {"bhij,bhjd->bhid", {2, 3, 5, 7}, {2, 3, 7, 8}, {2, 3, 5, 8}},
    {"ij,jk->ik", {6, 4}, {4, 5}, {6, 5}},
    {"ik,kj", {6, 4}, {4, 5}, {6, 5}},
    {"bij,bjk->bik", {3, 6, 4}, {3, 4, 5}, {3, 6, 5}},
    {"abc,cd->abd", {2, 3, 4}, {4, 5}, {2, 3, 5}},
    {"ij,kj->ki", {6, 4}, {5, 4}, {5, 6}},
    {"bnd,bmd->bnm", {2, 9, 16}, {2, 7, 16}, {2, 9, 7}},
    {"ij,ij->", {4, 5}, {4, 5}, {}},
    {"ijk->kji", {2, 3, 4}, {}, {4, 3, 2}},
};

TEST(CudaEinsum, MatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : kCases) {
    std::map<std::string, Tensor> in{{"a", Random(DType::kFloat32, c.a, 3)}};
    if (!c.b.empty()) in["b"] = Random(DType::kFloat32, c.b, 4);
    ExpectMatchesReference(c.equation, Graph(c, "f32"), in, builder::Precision::kFP32, 1e-5);
    ExpectMatchesReference(c.equation, Graph(c, "f32"), in, builder::Precision::kFP16, 1e-2);
  }
}

}  // namespace
}  // namespace sampan::cuda
