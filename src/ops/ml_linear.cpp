// The ai.onnx.ml ops of classical models that are not trees (scikit-learn exports via
// skl2onnx): Binarizer, Scaler, Normalizer, ArrayFeatureExtractor, OneHotEncoder (integer
// categories), LinearRegressor and LinearClassifier (integer class labels), plus the
// helpers of ml_common.h. String labels, categories and inputs are refused as
// Unsupported: string tensors are not storable.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "ops/ml_common.h"

namespace sampan::ops::ml {

Result<PostTransform> ParsePostTransform(const ir::Node& node) {
  const std::string s = node.attr_string("post_transform", "NONE");
  if (s == "NONE") return PostTransform::kNone;
  if (s == "SOFTMAX") return PostTransform::kSoftmax;
  if (s == "LOGISTIC") return PostTransform::kLogistic;
  if (s == "SOFTMAX_ZERO") return PostTransform::kSoftmaxZero;
  if (s == "PROBIT") return PostTransform::kProbit;
  return InvalidArgument(node.Label(),
                         ": post_transform must be NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO or PROBIT, got '", s, "'");
}

namespace {

// The approximation of erf^-1 that ONNX's reference and onnxruntime use for PROBIT.
double ErfInv(double x) {
  const double sgn = x < 0 ? -1.0 : 1.0;
  x = (1.0 - x) * (1.0 + x);
  if (x == 0) return 0;
  const double lg = std::log(x);
  const double v = 2.0 / (M_PI * 0.147) + 0.5 * lg;
  const double v2 = 1.0 / 0.147 * lg;
  return sgn * std::sqrt(-v + std::sqrt(v * v - v2));
}

}  // namespace

void ApplyPostTransform(PostTransform pt, double* row, int64_t n) {
  switch (pt) {
    case PostTransform::kNone:
      return;
    case PostTransform::kLogistic:
      for (int64_t i = 0; i < n; ++i) {
        const double v = 1.0 / (1.0 + std::exp(-std::fabs(row[i])));
        row[i] = row[i] < 0 ? 1.0 - v : v;
      }
      return;
    case PostTransform::kProbit:
      for (int64_t i = 0; i < n; ++i) row[i] = 1.41421356 * ErfInv(row[i] * 2 - 1);
      return;
    case PostTransform::kSoftmax: {
      if (n == 0) return;
      const double mx = *std::max_element(row, row + n);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += row[i] = std::exp(row[i] - mx);
      for (int64_t i = 0; i < n; ++i) row[i] /= s;
      return;
    }
    case PostTransform::kSoftmaxZero: {  // zeros stay (scaled) zeros: "absent" classes
      if (n == 0) return;
      const double mx = *std::max_element(row, row + n);
      const double e = std::exp(-mx);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        row[i] = row[i] > 1e-7 || row[i] < -1e-7 ? std::exp(row[i] - mx) : row[i] * e;
        s += row[i];
      }
      for (int64_t i = 0; i < n; ++i) row[i] = s == 0 ? 0.5 : row[i] / s;
      return;
    }
  }
}

std::vector<double> FloatsOrTensor(const ir::Node& node, const std::string& name) {
  std::vector<double> out;
  if (const ir::Attribute* t = node.attr(name + "_as_tensor"); t != nullptr && t->type == ir::AttrType::kTensor) {
    for (int64_t i = 0; i < t->t.numel(); ++i) out.push_back(ElementAsDouble(t->t, i));
    return out;
  }
  if (const ir::Attribute* t = node.attr(name); t != nullptr && t->type == ir::AttrType::kTensor) {
    for (int64_t i = 0; i < t->t.numel(); ++i) out.push_back(ElementAsDouble(t->t, i));
    return out;
  }
  for (float f : node.attr_floats(name)) out.push_back(f);
  return out;
}

Status RowsAndCols(const ir::Node& node, const Tensor& x, int64_t* rows, int64_t* cols) {
  if (x.rank() == 1) {
    *rows = 1;
    *cols = x.shape()[0];
  } else if (x.rank() == 2) {
    *rows = x.shape()[0];
    *cols = x.shape()[1];
  } else {
    return InvalidArgument(node.Label(), ": X must be [C] or [N, C], got ", x.Describe());
  }
  return Status::Ok();
}

Result<ir::Dim> InferRows(const InferContext& ctx, size_t i) {
  const auto& d = ctx.input_dims(i);
  if (!d) return ir::Dim::Unknown();
  if (d->size() == 1) return ir::Dim::Known(1);
  if (d->size() == 2) return (*d)[0];
  return ctx.Error("X must be [C] or [N, C], got rank ", d->size());
}

namespace {

std::vector<double> ToDoubles(const Tensor& x) {
  std::vector<double> v(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) v[static_cast<size_t>(i)] = ElementAsDouble(x, i);
  return v;
}

Status RefuseStringInput(const InferContext& ctx) {
  if (ctx.input_dtype(0) == DType::kString) return ctx.NotSupported("string input (string tensors are not supported)");
  return ExpectDType(ctx, 0, kFeatureTypes);
}

// ---- Binarizer: 1 where X > threshold, else 0, in X's type. ------------------------

Status InferBinarizer(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(RefuseStringInput(ctx));
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status RunBinarizer(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const double th = ctx.node.attr_float("threshold", 0.f);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (std::is_arithmetic_v<T>) {
      const T* px = x.data<T>();
      T* py = ctx.out(0).mutable_data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) py[i] = static_cast<double>(px[i]) > th ? T(1) : T(0);
    }
  });
}

// ---- Scaler: (X - offset) * scale, per column or one value for all, as float. --------

Status InferScaler(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(RefuseStringInput(ctx));
  ctx.set_output(0, DType::kFloat32, ctx.input_dims(0));
  return Status::Ok();
}

Status RunScaler(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const std::vector<float> offset = ctx.node.attr_floats("offset"), scale = ctx.node.attr_floats("scale");
  const int64_t c = x.rank() == 0 ? 1 : x.shape().back();
  for (const auto* v : {&offset, &scale})
    if (v->size() > 1 && static_cast<int64_t>(v->size()) != c)
      return ctx.Error(v == &offset ? "offset" : "scale", " has ", v->size(), " values for ", c,
                       " columns (needs 1 or one per column)");
  const std::vector<double> xv = ToDoubles(x);
  float* y = ctx.out(0).mutable_data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t j = static_cast<size_t>(c == 0 ? 0 : i % c);
    const double o = offset.empty() ? 0.0 : offset[offset.size() == 1 ? 0 : j];
    const double s = scale.empty() ? 1.0 : scale[scale.size() == 1 ? 0 : j];
    y[i] = static_cast<float>((xv[static_cast<size_t>(i)] - o) * s);
  }
  return Status::Ok();
}

// ---- Normalizer: each row divided by its MAX, L1 or L2 norm (at least 1e-30). ---------

Status InferNormalizer(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(RefuseStringInput(ctx));
  const std::string norm = ctx.node().attr_string("norm", "MAX");
  if (norm != "MAX" && norm != "L1" && norm != "L2") return ctx.Error("norm must be MAX, L1 or L2, got '", norm, "'");
  SP_RETURN_IF_ERROR(InferRows(ctx, 0).status());
  ctx.set_output(0, DType::kFloat32, ctx.input_dims(0));
  return Status::Ok();
}

Status RunNormalizer(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t rows = 0, cols = 0;
  SP_RETURN_IF_ERROR(RowsAndCols(ctx.node, x, &rows, &cols));
  const std::string norm = ctx.node.attr_string("norm", "MAX");
  const std::vector<double> xv = ToDoubles(x);
  float* y = ctx.out(0).mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = xv.data() + r * cols;
    double d = 0;
    for (int64_t c = 0; c < cols; ++c) {
      if (norm == "MAX")
        d = std::max(d, std::fabs(row[c]));
      else if (norm == "L1")
        d += std::fabs(row[c]);
      else
        d += row[c] * row[c];
    }
    if (norm == "L2") d = std::sqrt(d);
    d = std::max(d, 1e-30);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(row[c] / d);
  }
  return Status::Ok();
}

// ---- ArrayFeatureExtractor: X[..., Y] with Y flattened; 1-D X gives [1, |Y|]. ---------

Status InferArrayFeatureExtractor(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(RefuseStringInput(ctx));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, {DType::kInt64}));
  const auto& x = ctx.input_dims(0);
  const auto& y = ctx.input_dims(1);
  if (!x) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return Status::Ok();
  }
  if (x->empty()) return ctx.Error("X must have rank >= 1");
  ir::Dim n = ir::Dim::Unknown();
  if (y) {
    int64_t count = 1;
    for (const ir::Dim& d : *y) count = d.known() && count >= 0 ? count * d.value : -1;
    if (count >= 0) n = ir::Dim::Known(count);
  }
  ir::Dims out = x->size() == 1 ? ir::Dims{ir::Dim::Known(1)} : ir::Dims(x->begin(), x->end() - 1);
  out.push_back(n);
  ctx.set_output(0, ctx.input_dtype(0), std::move(out));
  return Status::Ok();
}

Status RunArrayFeatureExtractor(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  const int64_t c = x.shape().back();
  const int64_t outer = c == 0 ? 0 : x.numel() / c, n = idx.numel();
  const int64_t* pi = idx.data<int64_t>();
  for (int64_t k = 0; k < n; ++k)
    if (pi[k] < 0 || pi[k] >= c) return ctx.Error("index ", pi[k], " (Y[", k, "]) is outside [0, ", c, ")");
  const size_t es = DTypeSize(x.dtype());
  const auto* src = static_cast<const unsigned char*>(x.raw());
  auto* dst = static_cast<unsigned char*>(ctx.out(0).mutable_raw());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      std::memcpy(dst + static_cast<size_t>(o * n + k) * es, src + static_cast<size_t>(o * c + pi[k]) * es, es);
  return Status::Ok();
}

// ---- OneHotEncoder: X (any shape) -> X.shape + [categories], float. -------------------

Status InferOneHotEncoder(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (ctx.node().has_attr("cats_strings") && !ctx.node().has_attr("cats_int64s"))
    return ctx.NotSupported("cats_strings (string tensors are not supported; cats_int64s is)");
  SP_RETURN_IF_ERROR(RefuseStringInput(ctx));
  const int64_t cats = static_cast<int64_t>(ctx.node().attr_ints("cats_int64s").size());
  if (cats == 0) return ctx.Error("cats_int64s is empty: no category to encode");
  const auto& x = ctx.input_dims(0);
  if (!x) {
    ctx.set_output(0, DType::kFloat32, std::nullopt);
    return Status::Ok();
  }
  ir::Dims out = *x;
  out.push_back(ir::Dim::Known(cats));
  ctx.set_output(0, DType::kFloat32, std::move(out));
  return Status::Ok();
}

Status RunOneHotEncoder(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const std::vector<int64_t> cats = ctx.node.attr_ints("cats_int64s");
  const bool zeros = ctx.node.attr_int("zeros", 1) != 0;
  std::unordered_map<int64_t, int64_t> index;
  for (size_t i = 0; i < cats.size(); ++i) index.emplace(cats[i], static_cast<int64_t>(i));
  const int64_t n = static_cast<int64_t>(cats.size());
  float* y = ctx.out(0).mutable_data<float>();
  std::fill(y, y + x.numel() * n, 0.f);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = ElementAsDouble(x, i);
    auto it = v == std::floor(v) && std::fabs(v) < 9.2e18 ? index.find(static_cast<int64_t>(v)) : index.end();
    if (it != index.end())
      y[i * n + it->second] = 1.f;
    else if (!zeros)
      return ctx.Error("X[", i, "] = ", v, " is not one of the categories (zeros = 0)");
  }
  return Status::Ok();
}

// ---- LinearRegressor: X [N, C] . coefficients^T [C, targets] + intercepts. ------------

Status InferLinearRegressor(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(RefuseStringInput(ctx));
  SP_RETURN_IF_ERROR(ParsePostTransform(ctx.node()).status());
  const int64_t targets = ctx.node().attr_int("targets", 1);
  if (targets < 1) return ctx.Error("targets must be >= 1, got ", targets);
  SP_ASSIGN_OR_RETURN(ir::Dim rows, InferRows(ctx, 0));
  ctx.set_output(0, DType::kFloat32, ir::Dims{rows, ir::Dim::Known(targets)});
  return Status::Ok();
}

// Scores [rows, k] = X . coefficients (k x cols, row-major)^T + intercepts.
Result<std::vector<double>> LinearScores(const KernelContext& ctx, const Tensor& x, int64_t k, int64_t* rows) {
  int64_t cols = 0;
  SP_RETURN_IF_ERROR(RowsAndCols(ctx.node, x, rows, &cols));
  const std::vector<float> coef = ctx.node.attr_floats("coefficients");
  const std::vector<float> icpt = ctx.node.attr_floats("intercepts");
  if (static_cast<int64_t>(coef.size()) != k * cols)
    return ctx.Error("coefficients has ", coef.size(), " values, expected ", k, " x ", cols, " (X has ", cols,
                     " columns)");
  if (!icpt.empty() && static_cast<int64_t>(icpt.size()) != k)
    return ctx.Error("intercepts has ", icpt.size(), " values, expected ", k);
  const std::vector<double> xv = ToDoubles(x);
  std::vector<double> s(static_cast<size_t>(*rows * k));
  for (int64_t r = 0; r < *rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      double acc = icpt.empty() ? 0.0 : icpt[static_cast<size_t>(j)];
      for (int64_t c = 0; c < cols; ++c)
        acc += xv[static_cast<size_t>(r * cols + c)] * coef[static_cast<size_t>(j * cols + c)];
      s[static_cast<size_t>(r * k + j)] = acc;
    }
  return s;
}

Status RunLinearRegressor(KernelContext& ctx) {
  const int64_t k = ctx.node.attr_int("targets", 1);
  SP_ASSIGN_OR_RETURN(PostTransform pt, ParsePostTransform(ctx.node));
  int64_t rows = 0;
  SP_ASSIGN_OR_RETURN(std::vector<double> s, LinearScores(ctx, ctx.in(0), k, &rows));
  float* y = ctx.out(0).mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    ApplyPostTransform(pt, s.data() + r * k, k);
    for (int64_t j = 0; j < k; ++j) y[r * k + j] = static_cast<float>(s[static_cast<size_t>(r * k + j)]);
  }
  return Status::Ok();
}

// ---- LinearClassifier: labels [N] (int64) and scores [N, E] (float). -----------------

// classlabels_ints or classlabels_strings (the label output is then a string tensor); at most one.
Status ClassifierLabelsValid(const ir::Node& node) {
  if (node.has_attr("classlabels_ints") && node.has_attr("classlabels_strings"))
    return InvalidArgument(node.Label(), ": classlabels_ints and classlabels_strings are both given");
  if (const ir::Attribute* a = node.attr("classlabels_strings"); a && a->type != ir::AttrType::kStrings)
    return InvalidArgument(node.Label(), ": classlabels_strings must be strings");
  return Status::Ok();
}

int64_t ClassLabelCount(const ir::Node& node) {
  if (const ir::Attribute* a = node.attr("classlabels_strings")) return static_cast<int64_t>(a->strings.size());
  return static_cast<int64_t>(node.attr_ints("classlabels_ints").size());
}

Status InferLinearClassifier(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(RefuseStringInput(ctx));
  SP_RETURN_IF_ERROR(ClassifierLabelsValid(ctx.node()));
  SP_RETURN_IF_ERROR(ParsePostTransform(ctx.node()).status());
  const int64_t classes = ClassLabelCount(ctx.node());
  const bool string_labels = ctx.node().has_attr("classlabels_strings");
  const int64_t coef = static_cast<int64_t>(ctx.node().attr_floats("coefficients").size());
  const int64_t icpt = static_cast<int64_t>(ctx.node().attr_floats("intercepts").size());
  if (coef == 0) return ctx.Error("coefficients is empty");
  SP_ASSIGN_OR_RETURN(ir::Dim rows, InferRows(ctx, 0));
  // Score columns: one per coefficient row (the intercepts say how many), two for a binary
  // model written as one row.
  ir::Dim e = ir::Dim::Unknown();
  int64_t k = icpt > 0 ? icpt : -1;
  if (const auto& x = ctx.input_dims(0); k < 0 && x && !x->empty() && x->back().known() && x->back().value > 0)
    k = coef / x->back().value;
  if (k > 0) e = ir::Dim::Known(k == 1 && classes == 2 ? 2 : k);
  // One score column is a threshold between "not this class" and its label: no string for the former.
  if (string_labels && k == 1 && classes != 2)
    return ctx.NotSupported("string labels with one score column and ", classes, " labels");
  ctx.set_output(0, string_labels ? DType::kString : DType::kInt64, ir::Dims{rows});
  if (ctx.num_outputs() > 1) ctx.set_output(1, DType::kFloat32, ir::Dims{rows, e});
  return Status::Ok();
}

Status RunLinearClassifier(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t rows = 0, cols = 0;
  SP_RETURN_IF_ERROR(RowsAndCols(ctx.node, x, &rows, &cols));
  const int64_t coef = static_cast<int64_t>(ctx.node.attr_floats("coefficients").size());
  if (cols == 0 || coef % cols != 0)
    return ctx.Error("coefficients has ", coef, " values, not a multiple of X's ", cols, " columns");
  const int64_t k = coef / cols;
  SP_ASSIGN_OR_RETURN(PostTransform pt, ParsePostTransform(ctx.node));
  SP_ASSIGN_OR_RETURN(std::vector<double> s, LinearScores(ctx, x, k, &rows));
  const std::vector<int64_t> labels = ctx.node.attr_ints("classlabels_ints");
  const ir::Attribute* label_strings = ctx.node.attr("classlabels_strings");
  const int64_t classes = ClassLabelCount(ctx.node);
  const bool binary_one_row = k == 1 && classes == 2;
  const int64_t e = binary_one_row ? 2 : k;
  if (classes > 0 && k > 1 && classes != k) return ctx.Error(classes, " class labels for ", k, " coefficient rows");
  std::vector<double> z(static_cast<size_t>(rows * e));
  for (int64_t r = 0; r < rows; ++r) {
    double* zr = z.data() + r * e;
    if (binary_one_row) {
      zr[0] = -s[static_cast<size_t>(r)];
      zr[1] = s[static_cast<size_t>(r)];
    } else {
      std::copy_n(s.data() + r * k, k, zr);
    }
    ApplyPostTransform(pt, zr, e);
  }
  if (label_strings != nullptr) {
    if (e < 2 || classes != e) return ctx.Error(classes, " string labels for ", e, " score columns");
    std::string* y = ctx.out(0).mutable_strings();
    for (int64_t r = 0; r < rows; ++r) {
      const double* zr = z.data() + r * e;
      const auto best = static_cast<size_t>(std::max_element(zr, zr + e) - zr);
      y[r] = label_strings->strings[best];
    }
  }
  int64_t* y = label_strings ? nullptr : ctx.out(0).mutable_data<int64_t>();
  for (int64_t r = 0; y != nullptr && r < rows; ++r) {
    const double* zr = z.data() + r * e;
    if (e > 1) {
      const int64_t best = std::max_element(zr, zr + e) - zr;
      y[r] = classes > 0 ? labels[static_cast<size_t>(best)] : best;
    } else {  // one score column: a threshold
      const bool pos = zr[0] >= (pt == PostTransform::kNone ? 0.0 : 0.5);
      y[r] = pos ? (classes > 0 ? labels[0] : 1) : 0;
    }
  }
  if (ctx.outputs.size() > 1) {
    float* pz = ctx.out(1).mutable_data<float>();
    for (size_t i = 0; i < z.size(); ++i) pz[i] = static_cast<float>(z[i]);
  }
  return Status::Ok();
}

SAMPAN_REGISTER_DOMAIN_OP(kDomain, "Binarizer", InferBinarizer, RunBinarizer);
SAMPAN_REGISTER_DOMAIN_OP(kDomain, "Scaler", InferScaler, RunScaler);
SAMPAN_REGISTER_DOMAIN_OP(kDomain, "Normalizer", InferNormalizer, RunNormalizer);
SAMPAN_REGISTER_DOMAIN_OP(kDomain, "ArrayFeatureExtractor", InferArrayFeatureExtractor, RunArrayFeatureExtractor);
SAMPAN_REGISTER_DOMAIN_OP(kDomain, "OneHotEncoder", InferOneHotEncoder, RunOneHotEncoder);
SAMPAN_REGISTER_DOMAIN_OP(kDomain, "LinearRegressor", InferLinearRegressor, RunLinearRegressor);
SAMPAN_REGISTER_OP_DEF({.domain = kDomain,
                        .op_type = "LinearClassifier",
                        .infer = InferLinearClassifier,
                        .run = RunLinearClassifier,
                        .strings = true});  // string class labels

}  // namespace
}  // namespace sampan::ops::ml
