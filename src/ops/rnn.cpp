// RNN, GRU, LSTM: recurrent layers per the ONNX spec (directions forward /
// reverse / bidirectional, optional B, sequence_lens, initial states, LSTM
// peepholes and input_forget, activations with alpha/beta, clip, layout 0/1).
// Computed in ComputeType (float for f16/bf16/f32, double for f64).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "base/convert.h"
#include "ops/common.h"
#include "ops/elementwise_util.h"

namespace sampan::ops {
namespace {

enum class Cell { kRnn, kGru, kLstm };

int64_t NumGates(Cell c) {
  return c == Cell::kRnn ? 1 : c == Cell::kGru ? 3 : 4;
}
size_t NumActs(Cell c) {
  return c == Cell::kRnn ? 1 : c == Cell::kGru ? 2 : 3;
}

enum class ActKind {
  kRelu,
  kTanh,
  kSigmoid,
  kAffine,
  kLeakyRelu,
  kThresholdedRelu,
  kScaledTanh,
  kHardSigmoid,
  kElu,
  kSoftsign,
  kSoftplus
};

struct Act {
  ActKind kind = ActKind::kTanh;
  double alpha = 0, beta = 0;
  template <class C>
  C operator()(C x) const {
    switch (kind) {
      case ActKind::kRelu:
        return x > C(0) ? x : C(0);
      case ActKind::kTanh:
        return std::tanh(x);
      case ActKind::kSigmoid:
        return C(1) / (C(1) + std::exp(-x));
      case ActKind::kAffine:
        return C(alpha) * x + C(beta);
      case ActKind::kLeakyRelu:
        return x >= C(0) ? x : C(alpha) * x;
      case ActKind::kThresholdedRelu:
        return x > C(alpha) ? x : C(0);
      case ActKind::kScaledTanh:
        return C(alpha) * std::tanh(C(beta) * x);
      case ActKind::kHardSigmoid:
        return std::max(C(0), std::min(C(1), C(alpha) * x + C(beta)));
      case ActKind::kElu:
        return x >= C(0) ? x : C(alpha) * (std::exp(x) - C(1));
      case ActKind::kSoftsign:
        return x / (C(1) + std::abs(x));
      case ActKind::kSoftplus:
        return x > C(30) ? x : std::log1p(std::exp(x));
    }
    return x;
  }
};

struct Config {
  Cell cell = Cell::kRnn;
  int64_t num_dir = 1;
  bool reverse = false;  // for num_dir == 1
  int64_t layout = 0;
  int64_t hidden = -1;  // from attribute, -1 if absent
  bool has_clip = false;
  double clip = 0;
  bool lbr = false;  // GRU linear_before_reset
  bool input_forget = false;
  std::vector<Act> acts;  // num_dir * NumActs
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Parses and validates attributes. Error (InvalidArgument) or Unsupported.
Status ParseConfig(const ir::Node& node, int64_t opset, Cell cell, Config* cfg) {
  auto err = [&](const auto&... a) { return InvalidArgument(node.Label(), ": ", a...); };
  auto unsup = [&](const auto&... a) { return Unsupported(node.Label(), ": ", a...); };
  cfg->cell = cell;
  const std::string dir = node.attr_string("direction", "forward");
  if (dir == "forward") {
    cfg->num_dir = 1;
  } else if (dir == "reverse") {
    cfg->num_dir = 1;
    cfg->reverse = true;
  } else if (dir == "bidirectional") {
    cfg->num_dir = 2;
  } else {
    return err("attribute direction must be forward, reverse or bidirectional, got '", dir, "'");
  }
  cfg->layout = opset >= 14 ? node.attr_int("layout", 0) : 0;
  if (cfg->layout != 0 && cfg->layout != 1) return err("attribute layout must be 0 or 1, got ", cfg->layout);
  if (node.has_attr("hidden_size")) {
    cfg->hidden = node.attr_int("hidden_size", -1);
    if (cfg->hidden <= 0) return err("attribute hidden_size must be positive, got ", cfg->hidden);
  }
  if (node.has_attr("clip")) {
    cfg->has_clip = true;
    cfg->clip = node.attr_float("clip", 0.f);
    if (!(cfg->clip > 0)) return err("attribute clip must be positive, got ", cfg->clip);
  }
  if (cell == Cell::kGru) {
    const int64_t l = node.attr_int("linear_before_reset", 0);
    if (l != 0 && l != 1) return err("attribute linear_before_reset must be 0 or 1, got ", l);
    cfg->lbr = l == 1;
  }
  if (cell == Cell::kLstm) {
    const int64_t f = node.attr_int("input_forget", 0);
    if (f != 0 && f != 1) return err("attribute input_forget must be 0 or 1, got ", f);
    cfg->input_forget = f == 1;
  }
  const size_t per = NumActs(cell);
  std::vector<std::string> names;
  if (const ir::Attribute* a = node.attr("activations")) {
    names = a->strings;
  } else {
    for (int64_t d = 0; d < cfg->num_dir; ++d) {
      if (cell == Cell::kRnn) names.push_back("Tanh");
      if (cell == Cell::kGru) names.insert(names.end(), {"Sigmoid", "Tanh"});
      if (cell == Cell::kLstm) names.insert(names.end(), {"Sigmoid", "Tanh", "Tanh"});
    }
  }
  if (names.size() != per * static_cast<size_t>(cfg->num_dir))
    return err("attribute activations must have ", per * static_cast<size_t>(cfg->num_dir), " entries, got ",
               names.size());
  const std::vector<float> alphas = node.attr_floats("activation_alpha");
  const std::vector<float> betas = node.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  for (const std::string& n0 : names) {
    const std::string n = Lower(n0);
    Act act;
    int na = 0, nb = 0;
    if (n == "relu")
      act.kind = ActKind::kRelu;
    else if (n == "tanh")
      act.kind = ActKind::kTanh;
    else if (n == "sigmoid")
      act.kind = ActKind::kSigmoid;
    else if (n == "softsign")
      act.kind = ActKind::kSoftsign;
    else if (n == "softplus")
      act.kind = ActKind::kSoftplus;
    else if (n == "affine") {
      act.kind = ActKind::kAffine;
      na = nb = 1;
    } else if (n == "leakyrelu") {
      act.kind = ActKind::kLeakyRelu;
      na = 1;
    } else if (n == "thresholdedrelu") {
      act.kind = ActKind::kThresholdedRelu;
      na = 1;
    } else if (n == "scaledtanh") {
      act.kind = ActKind::kScaledTanh;
      na = nb = 1;
    } else if (n == "hardsigmoid") {
      act.kind = ActKind::kHardSigmoid;
      na = nb = 1;
    } else if (n == "elu") {
      act.kind = ActKind::kElu;
      na = 1;
    } else
      return unsup("activation '", n0, "' is not supported");
    if (na) {
      if (ai >= alphas.size()) return unsup("activation '", n0, "' without an explicit activation_alpha");
      act.alpha = alphas[ai++];
    }
    if (nb) {
      if (bi >= betas.size()) return unsup("activation '", n0, "' without an explicit activation_beta");
      act.beta = betas[bi++];
    }
    cfg->acts.push_back(act);
  }
  if (ai != alphas.size() || bi != betas.size())
    return unsup("activation_alpha/activation_beta entries that no activation consumes");
  return Status::Ok();
}

// Checks input i has rank `rank` and known dims agree with `want` (-1: any).
Status CheckDims(const InferContext& ctx, size_t i, const char* what, const std::vector<int64_t>& want) {
  if (!ctx.has_input(i)) return Status::Ok();
  const auto& dims = ctx.input_dims(i);
  if (!dims) return Status::Ok();
  if (dims->size() != want.size())
    return ctx.Error("input ", what, " must have rank ", want.size(), ", got ", dims->size());
  for (size_t d = 0; d < want.size(); ++d)
    if (want[d] >= 0 && (*dims)[d].known() && (*dims)[d].value != want[d])
      return ctx.Error("input ", what, " dim ", d, " is ", (*dims)[d].value, ", expected ", want[d]);
  return Status::Ok();
}

ir::Dim DimOf(const InferContext& ctx, size_t i, size_t d) {
  if (!ctx.has_input(i) || !ctx.input_dims(i) || ctx.input_dims(i)->size() <= d) return ir::Dim::Unknown();
  return (*ctx.input_dims(i))[d];
}

Status InferRecurrent(InferContext& ctx, Cell cell) {
  const bool lstm = cell == Cell::kLstm;
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, lstm ? 8 : 6));
  if (ctx.num_outputs() > (lstm ? 3u : 2u)) return ctx.Error("too many outputs: ", ctx.num_outputs());
  Config cfg;
  SP_RETURN_IF_ERROR(ParseConfig(ctx.node(), ctx.opset(), cell, &cfg));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  const DType t = ctx.input_dtype(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || i == 4) continue;
    if (ctx.input_dtype(i) != t) return ctx.Error("input ", i, " dtype differs from X");
  }
  if (ctx.has_input(4) && ctx.input_dtype(4) != DType::kInt32)
    return ctx.Error("sequence_lens must be int32, got ", DTypeName(ctx.input_dtype(4)));
  const int64_t g = NumGates(cell);
  const int64_t nd = cfg.num_dir;
  // hidden size
  int64_t hidden = cfg.hidden;
  const ir::Dim r2 = DimOf(ctx, 2, 2);
  if (hidden < 0 && r2.known()) hidden = r2.value;
  const ir::Dim x_seq = DimOf(ctx, 0, cfg.layout == 0 ? 0 : 1);
  const ir::Dim x_batch = DimOf(ctx, 0, cfg.layout == 0 ? 1 : 0);
  const ir::Dim x_in = DimOf(ctx, 0, 2);
  const int64_t in = x_in.known() ? x_in.value : -1;
  const int64_t batch = x_batch.known() ? x_batch.value : -1;
  const int64_t seq = x_seq.known() ? x_seq.value : -1;
  const int64_t gh = hidden >= 0 ? g * hidden : -1;
  SP_RETURN_IF_ERROR(CheckDims(ctx, 0, "X", {-1, -1, -1}));
  SP_RETURN_IF_ERROR(CheckDims(ctx, 1, "W", {nd, gh, in}));
  SP_RETURN_IF_ERROR(CheckDims(ctx, 2, "R", {nd, gh, hidden}));
  SP_RETURN_IF_ERROR(CheckDims(ctx, 3, "B", {nd, gh >= 0 ? 2 * gh : -1}));
  SP_RETURN_IF_ERROR(CheckDims(ctx, 4, "sequence_lens", {batch}));
  const std::vector<int64_t> state =
      cfg.layout == 0 ? std::vector<int64_t>{nd, batch, hidden} : std::vector<int64_t>{batch, nd, hidden};
  SP_RETURN_IF_ERROR(CheckDims(ctx, 5, "initial_h", state));
  if (lstm) {
    SP_RETURN_IF_ERROR(CheckDims(ctx, 6, "initial_c", state));
    SP_RETURN_IF_ERROR(CheckDims(ctx, 7, "P", {nd, hidden >= 0 ? 3 * hidden : -1}));
  }
  if (const Tensor* sl = ctx.input_value(4)) {
    const int32_t* p = sl->data<int32_t>();
    for (int64_t i = 0; i < sl->numel(); ++i)
      if (p[i] < 0 || (seq >= 0 && p[i] > seq))
        return ctx.Error("sequence_lens[", i, "] = ", p[i], " is outside [0, ", seq, "]");
  }
  const ir::Dim hd = hidden >= 0 ? ir::Dim::Known(hidden) : ir::Dim::Unknown();
  const ir::Dim ndd = ir::Dim::Known(nd);
  ir::Dims y = cfg.layout == 0 ? ir::Dims{x_seq, ndd, x_batch, hd} : ir::Dims{x_batch, x_seq, ndd, hd};
  ir::Dims yh = cfg.layout == 0 ? ir::Dims{ndd, x_batch, hd} : ir::Dims{x_batch, ndd, hd};
  if (ctx.num_outputs() > 0) ctx.set_output(0, t, y);
  for (size_t i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, t, yh);
  return Status::Ok();
}

Status InferRnn(InferContext& ctx) {
  return InferRecurrent(ctx, Cell::kRnn);
}
Status InferGru(InferContext& ctx) {
  return InferRecurrent(ctx, Cell::kGru);
}
Status InferLstm(InferContext& ctx) {
  return InferRecurrent(ctx, Cell::kLstm);
}

template <class T, class C>
std::vector<C> ToC(const Tensor* t) {
  std::vector<C> v;
  if (t == nullptr) return v;
  v.resize(static_cast<size_t>(t->numel()));
  const T* p = t->data<T>();
  if constexpr (std::is_same_v<T, double>) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<C>(p[i]);
  } else {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<C>(ConvertElement<float>(p[i]));
  }
  return v;
}

template <class T>
Status RunTyped(KernelContext& ctx, const Config& cfg) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Cell cell = cfg.cell;
  const Tensor& xt = ctx.in(0);
  const int64_t seq = cfg.layout == 0 ? xt.dim(0) : xt.dim(1);
  const int64_t batch = cfg.layout == 0 ? xt.dim(1) : xt.dim(0);
  const int64_t in = xt.dim(2);
  const int64_t hid = ctx.in(2).dim(2);
  const int64_t g = NumGates(cell);
  const int64_t gh = g * hid;
  const int64_t nd = cfg.num_dir;
  const std::vector<C> x = ToC<T, C>(&xt);
  const std::vector<C> w = ToC<T, C>(&ctx.in(1));
  const std::vector<C> r = ToC<T, C>(&ctx.in(2));
  const std::vector<C> b = ToC<T, C>(ctx.has_input(3) ? ctx.inputs[3] : nullptr);
  const std::vector<C> h0 = ToC<T, C>(ctx.has_input(5) ? ctx.inputs[5] : nullptr);
  const bool lstm = cell == Cell::kLstm;
  const std::vector<C> c0 = ToC<T, C>(lstm && ctx.has_input(6) ? ctx.inputs[6] : nullptr);
  const std::vector<C> pp = ToC<T, C>(lstm && ctx.has_input(7) ? ctx.inputs[7] : nullptr);
  std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
  if (ctx.has_input(4)) {
    const Tensor& sl = ctx.in(4);
    if (sl.numel() != batch) return ctx.Error("sequence_lens has ", sl.numel(), " entries, batch is ", batch);
    for (int64_t i = 0; i < batch; ++i) {
      const int32_t v = sl.data<int32_t>()[i];
      if (v < 0 || v > seq) return ctx.Error("sequence_lens[", i, "] = ", v, " is outside [0, ", seq, "]");
      lens[static_cast<size_t>(i)] = v;
    }
  }
  // Outputs in layout-0 order, converted at the end.
  std::vector<C> y(static_cast<size_t>(seq * nd * batch * hid), C(0));
  std::vector<C> yh(static_cast<size_t>(nd * batch * hid), C(0));
  std::vector<C> yc(static_cast<size_t>(nd * batch * hid), C(0));
  auto state_at = [&](const std::vector<C>& s, int64_t d, int64_t bb, int64_t k) -> C {
    if (s.empty()) return C(0);
    const int64_t idx = cfg.layout == 0 ? (d * batch + bb) * hid + k : (bb * nd + d) * hid + k;
    return s[static_cast<size_t>(idx)];
  };
  auto x_at = [&](int64_t s, int64_t bb) -> const C* {
    const int64_t off = cfg.layout == 0 ? (s * batch + bb) * in : (bb * seq + s) * in;
    return x.data() + off;
  };
  const size_t na = NumActs(cell);
  std::vector<C> h(static_cast<size_t>(hid)), c(static_cast<size_t>(hid)), gates(static_cast<size_t>(gh)),
      rh(static_cast<size_t>(gh)), hr(static_cast<size_t>(hid)), hn(static_cast<size_t>(hid));
  auto clip = [&](C v) -> C {
    if (!cfg.has_clip) return v;
    const C cl = static_cast<C>(cfg.clip);
    return std::max(-cl, std::min(cl, v));
  };
  for (int64_t d = 0; d < nd; ++d) {
    const bool rev = nd == 2 ? d == 1 : cfg.reverse;
    const C* W = w.data() + d * gh * in;
    const C* R = r.data() + d * gh * hid;
    const C* Wb = b.empty() ? nullptr : b.data() + d * 2 * gh;
    const C* Rb = b.empty() ? nullptr : Wb + gh;
    const C* P = pp.empty() ? nullptr : pp.data() + d * 3 * hid;
    const Act& f = cfg.acts[static_cast<size_t>(d) * na];
    const Act& ga = na > 1 ? cfg.acts[static_cast<size_t>(d) * na + 1] : f;
    const Act& ha = na > 2 ? cfg.acts[static_cast<size_t>(d) * na + 2] : f;
    for (int64_t bb = 0; bb < batch; ++bb) {
      for (int64_t k = 0; k < hid; ++k) {
        h[static_cast<size_t>(k)] = state_at(h0, d, bb, k);
        c[static_cast<size_t>(k)] = state_at(c0, d, bb, k);
      }
      const int64_t len = lens[static_cast<size_t>(bb)];
      for (int64_t step = 0; step < len; ++step) {
        const int64_t s = rev ? len - 1 - step : step;
        const C* xs = x_at(s, bb);
        // gates = x W^T + Wb ; rh = h R^T + Rb
        for (int64_t j = 0; j < gh; ++j) {
          C acc = Wb ? Wb[j] : C(0);
          const C* wr = W + j * in;
          for (int64_t q = 0; q < in; ++q) acc += xs[q] * wr[q];
          gates[static_cast<size_t>(j)] = acc;
          C acc2 = Rb ? Rb[j] : C(0);
          const C* rr = R + j * hid;
          if (!(cell == Cell::kGru && !cfg.lbr && j >= 2 * hid))
            for (int64_t q = 0; q < hid; ++q) acc2 += h[static_cast<size_t>(q)] * rr[q];
          rh[static_cast<size_t>(j)] = acc2;
        }
        if (cell == Cell::kRnn) {
          for (int64_t k = 0; k < hid; ++k) {
            const size_t kk = static_cast<size_t>(k);
            h[kk] = f(clip(gates[kk] + rh[kk]));
          }
        } else if (cell == Cell::kGru) {
          // z, r, h blocks
          std::vector<C>& rt = hr;  // reuse: r gate values
          for (int64_t k = 0; k < hid; ++k) {
            const size_t kk = static_cast<size_t>(k);
            rt[kk] = f(clip(gates[hid + k] + rh[hid + k]));
          }
          for (int64_t k = 0; k < hid; ++k) {
            const size_t kk = static_cast<size_t>(k);
            C v;
            if (cfg.lbr) {
              v = gates[2 * hid + k] + rt[kk] * rh[2 * hid + k];
            } else {
              // (r . h) Rh^T + Rbh
              C acc = Rb ? Rb[2 * hid + k] : C(0);
              const C* rr = R + (2 * hid + k) * hid;
              for (int64_t q = 0; q < hid; ++q) acc += rt[static_cast<size_t>(q)] * h[static_cast<size_t>(q)] * rr[q];
              v = gates[2 * hid + k] + acc;
            }
            hn[kk] = ga(clip(v));
          }
          for (int64_t k = 0; k < hid; ++k) {
            const size_t kk = static_cast<size_t>(k);
            const C z = f(clip(gates[kk] + rh[kk]));
            h[kk] = (C(1) - z) * hn[kk] + z * h[kk];
          }
        } else {
          // i, o, f, c blocks
          for (int64_t k = 0; k < hid; ++k) {
            const size_t kk = static_cast<size_t>(k);
            const C cp = c[kk];
            C it = gates[k] + rh[k] + (P ? P[k] * cp : C(0));
            it = f(clip(it));
            C ft;
            if (cfg.input_forget) {
              ft = C(1) - it;
            } else {
              ft = f(clip(gates[2 * hid + k] + rh[2 * hid + k] + (P ? P[2 * hid + k] * cp : C(0))));
            }
            const C ct = ga(clip(gates[3 * hid + k] + rh[3 * hid + k]));
            const C cn = ft * cp + it * ct;
            const C ot = f(clip(gates[hid + k] + rh[hid + k] + (P ? P[hid + k] * cn : C(0))));
            c[kk] = cn;
            h[kk] = ot * ha(cn);
          }
        }
        C* yo = y.data() + ((s * nd + d) * batch + bb) * hid;
        for (int64_t k = 0; k < hid; ++k) yo[k] = h[static_cast<size_t>(k)];
      }
      for (int64_t k = 0; k < hid; ++k) {
        yh[static_cast<size_t>((d * batch + bb) * hid + k)] = h[static_cast<size_t>(k)];
        yc[static_cast<size_t>((d * batch + bb) * hid + k)] = c[static_cast<size_t>(k)];
      }
    }
  }
  // Write outputs (layout conversion).
  if (ctx.outputs.size() > 0 && ctx.out(0).defined()) {
    T* o = ctx.out(0).mutable_data<T>();
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t d = 0; d < nd; ++d)
        for (int64_t bb = 0; bb < batch; ++bb)
          for (int64_t k = 0; k < hid; ++k) {
            const int64_t dst =
                cfg.layout == 0 ? ((s * nd + d) * batch + bb) * hid + k : ((bb * seq + s) * nd + d) * hid + k;
            o[dst] = ConvertElement<T>(y[static_cast<size_t>(((s * nd + d) * batch + bb) * hid + k)]);
          }
  }
  for (size_t oi = 1; oi < ctx.outputs.size() && oi < 3; ++oi) {
    if (!ctx.out(oi).defined()) continue;
    const std::vector<C>& src = oi == 1 ? yh : yc;
    T* o = ctx.out(oi).mutable_data<T>();
    for (int64_t d = 0; d < nd; ++d)
      for (int64_t bb = 0; bb < batch; ++bb)
        for (int64_t k = 0; k < hid; ++k) {
          const int64_t dst = cfg.layout == 0 ? (d * batch + bb) * hid + k : (bb * nd + d) * hid + k;
          o[dst] = ConvertElement<T>(src[static_cast<size_t>((d * batch + bb) * hid + k)]);
        }
  }
  return Status::Ok();
}

Status RunRecurrent(KernelContext& ctx, Cell cell) {
  Config cfg;
  SP_RETURN_IF_ERROR(ParseConfig(ctx.node, ctx.opset, cell, &cfg));
  Status st = Status::Ok();
  SP_RETURN_IF_ERROR(DispatchDType(ctx.in(0).dtype(), [&]<class T>() {
    if constexpr (kIsFloatElem<T>) st = RunTyped<T>(ctx, cfg);
  }));
  return st;
}

Status RunRnn(KernelContext& ctx) {
  return RunRecurrent(ctx, Cell::kRnn);
}
Status RunGru(KernelContext& ctx) {
  return RunRecurrent(ctx, Cell::kGru);
}
Status RunLstm(KernelContext& ctx) {
  return RunRecurrent(ctx, Cell::kLstm);
}

SAMPAN_REGISTER_OP("RNN", InferRnn, RunRnn);
SAMPAN_REGISTER_OP("GRU", InferGru, RunGru);
SAMPAN_REGISTER_OP("LSTM", InferLstm, RunLstm);

}  // namespace
}  // namespace sampan::ops
