// Shared pieces of the ai.onnx.ml ops (ml_tree.cpp, ml_linear.cpp): the score post
// transforms of the classifiers and regressors, attribute readers that accept either a
// float list or its double `_as_tensor` twin, and the [N, C] view of a feature input.
#pragma once

#include <string>
#include <vector>

#include "ops/common.h"

namespace sampan::ops::ml {

inline constexpr const char* kDomain = "ai.onnx.ml";
//! Feature inputs of the classical-ML ops (string inputs are not storable).
inline constexpr std::initializer_list<DType> kFeatureTypes = {DType::kFloat32, DType::kFloat64, DType::kInt64,
                                                               DType::kInt32};

enum class PostTransform { kNone, kSoftmax, kLogistic, kSoftmaxZero, kProbit };

//! post_transform given as a string (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT).
Result<PostTransform> ParsePostTransform(const ir::Node& node);
//! Applies `pt` to one row of scores in place, as ONNX's reference and onnxruntime do.
void ApplyPostTransform(PostTransform pt, double* row, int64_t n);

//! The values of attribute `name`, or of `name`_as_tensor (double) when that is given;
//! empty when neither is.
std::vector<double> FloatsOrTensor(const ir::Node& node, const std::string& name);

//! X as [N, C]: rank 1 is one row, rank 2 rows; anything else is an error.
Status RowsAndCols(const ir::Node& node, const Tensor& x, int64_t* rows, int64_t* cols);
//! The N of X's [N, C] view for inference (rank 1: 1).
Result<ir::Dim> InferRows(const InferContext& ctx, size_t i);

}  // namespace sampan::ops::ml
