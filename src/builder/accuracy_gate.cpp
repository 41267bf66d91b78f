#include "builder/accuracy_gate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>

#include "base/small_types.h"
#include "builder/backend_builder.h"
#include "builder/builder.h"
#include "ops/run_node.h"
#include "runtime/engine.h"

namespace sampan::builder {
namespace {

// A plan of `g` on the backend the gate measures with (the target when it runs here), only
// `keep_pass` (if any) run.
Result<std::unique_ptr<runtime::Context>> EvalContext(std::unique_ptr<ir::Graph> g, const BuildConfig& config,
                                                      const char* keep_pass, std::shared_ptr<runtime::Engine>* engine) {
  BuildConfig run;
  run.backend = config.backend == "reference" || config.backend == "cpu" ? config.backend
                : FindBackendBuilder("cpu")                              ? "cpu"
                                                                         : "reference";
  run.profiles = config.profiles;
  for (const passes::PassDef* p : passes::AllPasses())
    if (keep_pass == nullptr || p->name != keep_pass) run.disabled_passes.insert(p->name);
  SP_ASSIGN_OR_RETURN(plan::Plan plan, Build(std::move(g), run, nullptr));
  SP_ASSIGN_OR_RETURN(*engine, runtime::Engine::Create(std::move(plan)));
  return (*engine)->CreateContext();
}

// Runs `g` (float) on the samples with `extra` values as additional outputs; per sample, the
// graph's outputs followed by the extras.
Result<std::vector<std::vector<Tensor>>> RunFloat(const ir::Graph& graph, const std::vector<std::string>& extra,
                                                  const std::vector<std::map<std::string, Tensor>>& samples,
                                                  const BuildConfig& config) {
  std::unique_ptr<ir::Graph> g = graph.Clone();
  for (const std::string& name : extra) {
    ir::Value* v = g->FindValue(name);
    if (v == nullptr) return Internal("int8: no value '", name, "'");
    g->outputs().push_back(v);
  }
  std::shared_ptr<runtime::Engine> engine;
  SP_ASSIGN_OR_RETURN(auto ctx, EvalContext(std::move(g), config, nullptr, &engine));
  std::vector<std::vector<Tensor>> out;
  for (size_t k = 0; k < samples.size(); ++k) {
    auto r = ctx->Run(samples[k]);
    if (!r.ok()) return r.status().WithContext(StrCat("accuracy sample ", k));
    out.push_back(std::move(r).value());
  }
  return out;
}

double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data<float>()[i]) * b.data<float>()[i];
  return s;
}

// x quantized and dequantized with `s` (per tensor).
Tensor FakeQuant(const Tensor& x, const ActivationScale& s) {
  Tensor y = Tensor::Alloc(DType::kFloat32, x.shape());
  if (s.fp8) {
    for (int64_t i = 0; i < x.numel(); ++i)
      y.mutable_data<float>()[i] = static_cast<float>(
          SmallFloatToDouble(kFp8, SmallFloatFromDouble(kFp8, x.data<float>()[i] / s.scale, true)) * s.scale);
    return y;
  }
  const float lo = s.is_unsigned ? 0.f : -128.f, hi = s.is_unsigned ? 255.f : 127.f;
  for (int64_t i = 0; i < x.numel(); ++i)
    y.mutable_data<float>()[i] = std::fmin(hi, std::fmax(lo, std::nearbyint(x.data<float>()[i] / s.scale))) * s.scale;
  return y;
}

// A product's weight quantized as InsertQdq quantizes it, and dequantized again (float32).
Tensor FakeQuantWeight(const ir::Node& n, bool fp8, float fp8_amax) {
  const Tensor& src = n.input(1)->data;
  Tensor w = Tensor::Alloc(DType::kFloat32, src.shape());
  float* out = w.mutable_data<float>();
  if (fp8) {
    auto [wq, ws] = QuantizeWeightFp8(src, fp8_amax);
    const auto* q = static_cast<const uint8_t*>(wq.raw());
    const float s = ws.data<float>()[0];
    for (int64_t i = 0; i < w.numel(); ++i) out[i] = static_cast<float>(SmallFloatToDouble(kFp8, q[i])) * s;
    return w;
  }
  const int64_t axis = WeightAxis(n);
  auto [wq, ws] = QuantizeWeight(src, axis);
  const Shape& sh = wq.shape();
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < sh.size(); ++d) inner *= sh[d];
  const int64_t channels = sh[static_cast<size_t>(axis)];
  for (int64_t i = 0; i < w.numel(); ++i) out[i] = wq.data<int8_t>()[i] * ws.data<float>()[(i / inner) % channels];
  return w;
}

// Each layer's own quantization error: its output from quantized input and weights (everything
// before it exact) against its float output, relative L2 over the samples: one float pass.
Result<std::vector<std::pair<std::string, double>>> LayerErrors(
    const ir::Graph& graph, const std::vector<QuantizableLayer>& layers,
    const std::map<std::string, ActivationScale>& scales, const std::vector<std::map<std::string, Tensor>>& samples,
    const BuildConfig& config) {
  std::vector<std::string> extra;
  auto want = [&](const ir::Value* v) {
    if (v && !v->is_constant() && std::find(extra.begin(), extra.end(), v->name()) == extra.end())
      extra.push_back(v->name());
  };
  for (const auto& l : layers) {
    want(l.node->input(0));
    want(l.node->input(3));
    want(l.node->output(0));
  }
  SP_ASSIGN_OR_RETURN(auto runs, RunFloat(graph, extra, samples, config));
  const size_t base = graph.outputs().size();
  auto value = [&](size_t k, const ir::Value* v) -> const Tensor* {
    if (v == nullptr) return nullptr;
    if (v->is_constant()) return &v->data;
    const auto it = std::find(extra.begin(), extra.end(), v->name());
    return &runs[k][base + static_cast<size_t>(it - extra.begin())];
  };
  std::vector<std::pair<std::string, double>> errors;
  const std::map<std::string, float> fp8_amax = SharedWeightAmax(layers);
  for (const auto& l : layers) {
    auto sit = scales.find(l.activation);
    if (sit == scales.end()) continue;
    const ir::Node& n = *l.node;
    Tensor w = FakeQuantWeight(n, sit->second.fp8, fp8_amax.at(l.activation));
    double num = 0, den = 0;
    for (size_t k = 0; k < samples.size(); ++k) {
      Tensor x = FakeQuant(*value(k, n.input(0)), sit->second);
      std::vector<const Tensor*> in{&x, &w};
      for (size_t i = 2; i < n.num_inputs(); ++i) in.push_back(value(k, n.input(i)));
      std::vector<Tensor> y;
      SP_RETURN_IF_ERROR(ops::RunNode(n, graph.opset(), in, &y));
      const Tensor& ref = *value(k, n.output(0));
      for (int64_t i = 0; i < ref.numel(); ++i) {
        const double d = static_cast<double>(y[0].data<float>()[i]) - ref.data<float>()[i];
        num += d * d;
        den += static_cast<double>(ref.data<float>()[i]) * ref.data<float>()[i];
      }
    }
    errors.push_back({n.name, den > 0 ? std::sqrt(num / den) : std::sqrt(num)});
  }
  return errors;
}

}  // namespace

Result<std::vector<QuantizableLayer>> RunAccuracyGate(const ir::Graph& graph,
                                                      const std::vector<QuantizableLayer>& layers,
                                                      const std::map<std::string, ActivationScale>& scales,
                                                      const BuildConfig& config, QuantizationReport* rep) {
  const CalibrationConfig& c = config.calibration;
  if (!(c.accuracy_bound == c.accuracy_bound)) return InvalidArgument("--accuracyData needs --accuracyBound X");
  SP_ASSIGN_OR_RETURN(auto samples, LoadSamples(graph, config, c.accuracy_dir, "--accuracyData"));
  if (config.progress)
    config.progress(StrCat(c.fp8 ? "fp8" : "int8", ": measuring accuracy on ", samples.size(), " samples"));
  rep->metric = c.accuracy_metric;
  rep->bound = c.accuracy_bound;
  SP_ASSIGN_OR_RETURN(auto want, RunFloat(graph, {}, samples, config));
  SP_ASSIGN_OR_RETURN(rep->layer_errors, LayerErrors(graph, layers, scales, samples, config));
  std::vector<std::pair<std::string, double>> order = rep->layer_errors;
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  // `layers` less the `k` largest-error ones.
  auto quantized = [&](size_t k) {
    std::set<std::string> out;
    for (size_t i = 0; i < k && i < order.size(); ++i) out.insert(order[i].first);
    std::vector<QuantizableLayer> keep;
    for (const auto& l : layers)
      if (!out.count(l.node->name)) keep.push_back(l);
    return keep;
  };
  // The figure with the `k` largest-error layers in float.
  auto evaluate = [&](size_t k) -> Result<double> {
    std::unique_ptr<ir::Graph> g = graph.Clone();
    SP_RETURN_IF_ERROR(InsertQdq(*g, quantized(k), scales, nullptr));
    std::shared_ptr<runtime::Engine> engine;
    SP_ASSIGN_OR_RETURN(auto ctx, EvalContext(std::move(g), config, "fuse_quantized", &engine));
    std::vector<std::vector<Tensor>> got;
    for (size_t s = 0; s < samples.size(); ++s) {
      auto r = ctx->Run(samples[s]);
      if (!r.ok()) return r.status().WithContext(StrCat("accuracy sample ", s));
      got.push_back(std::move(r).value());
    }
    const double figure = AccuracyFigure(c.accuracy_metric, got, want, graph.outputs().size());
    rep->evaluations.push_back({k, figure});
    return figure;
  };
  // One layer at a time up to 8, then doubling; once a count meets the bound, the smallest
  // count between it and the last miss that does (bisection: the figures grow with the count
  // in practice, and the search only ever returns a count that was measured to meet it).
  size_t fallback = 0, missed = 0;
  bool any_miss = false;
  SP_ASSIGN_OR_RETURN(double figure, evaluate(0));
  while (!AccuracyMeets(c.accuracy_metric, figure, c.accuracy_bound)) {
    if (config.strict)
      return InvalidArgument(c.fp8 ? "fp8" : "int8", " accuracy ", c.accuracy_metric, " = ", figure,
                             " misses the bound ", c.accuracy_bound,
                             " with every layer quantized (--strict: no fallback to float)");
    if (fallback >= order.size())
      return InvalidArgument(c.fp8 ? "fp8" : "int8", " accuracy ", c.accuracy_metric, " = ", figure,
                             " misses the bound ", c.accuracy_bound, " even with every quantized layer back in float");
    missed = fallback;
    any_miss = true;
    fallback = fallback < 8 ? fallback + 1 : std::min(order.size(), fallback * 2);
    SP_ASSIGN_OR_RETURN(figure, evaluate(fallback));
  }
  rep->accuracy = figure;
  if (any_miss) {
    size_t lo = missed, hi = fallback;  // lo misses, hi meets
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      SP_ASSIGN_OR_RETURN(double f, evaluate(mid));
      if (AccuracyMeets(c.accuracy_metric, f, c.accuracy_bound)) {
        hi = mid;
        rep->accuracy = f;
      } else {
        lo = mid;
      }
    }
    fallback = hi;
  }
  for (size_t i = 0; i < fallback && i < order.size(); ++i) {
    rep->fell_back.push_back(order[i].first);
    rep->skipped.push_back(
        StrCat(order[i].first, ": back in float by the accuracy gate (own error ", order[i].second, ")"));
  }
  return quantized(fallback);
}

// The gate's figure for `got` against `want` (float32 outputs only): cosine and top1 (the
// worst sample / the agreement share; higher is better), rel_l2 (the worst; lower is better).
double AccuracyFigure(const std::string& metric, const std::vector<std::vector<Tensor>>& got,
                      const std::vector<std::vector<Tensor>>& want, size_t outputs) {
  double worst = metric == "rel_l2" ? 0 : 1;
  int64_t agree = 0, rows = 0;
  for (size_t k = 0; k < got.size(); ++k)
    for (size_t o = 0; o < outputs; ++o) {
      const Tensor& a = got[k][o];
      const Tensor& b = want[k][o];
      if (a.dtype() != DType::kFloat32 || b.dtype() != DType::kFloat32 || a.numel() != b.numel()) continue;
      if (metric == "cosine") {
        const double na = std::sqrt(Dot(a, a)), nb = std::sqrt(Dot(b, b));
        double c = na == 0 && nb == 0 ? 1 : na == 0 || nb == 0 ? 0 : Dot(a, b) / (na * nb);
        if (!std::isfinite(c)) c = -1;  // NaN or inf in an output is the worst there is
        worst = std::min(worst, c);
      } else if (metric == "rel_l2") {
        double num = 0;
        for (int64_t i = 0; i < a.numel(); ++i) {
          const double d = static_cast<double>(a.data<float>()[i]) - b.data<float>()[i];
          num += d * d;
        }
        const double den = Dot(b, b);
        double r = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
        if (!std::isfinite(r)) r = std::numeric_limits<double>::infinity();
        worst = std::max(worst, r);
      } else if (o == 0) {  // top1 over the first output's last axis
        const int64_t n = a.shape().empty() ? 1 : a.shape().back();
        for (int64_t r = 0; n > 0 && r < a.numel() / n; ++r) {
          const float* pa = a.data<float>() + r * n;
          const float* pb = b.data<float>() + r * n;
          agree += std::max_element(pa, pa + n) - pa == std::max_element(pb, pb + n) - pb;
          ++rows;
        }
      }
    }
  if (metric == "top1") return rows == 0 ? 1 : static_cast<double>(agree) / static_cast<double>(rows);
  return worst;
}

bool AccuracyMeets(const std::string& metric, double figure, double bound) {
  return metric == "rel_l2" ? figure <= bound : figure >= bound;
}

}  // namespace sampan::builder
