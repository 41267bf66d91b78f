// Signal processing ops (opset 17+): the Hann, Hamming and Blackman windows,
// MelWeightMatrix, DFT (axis as an attribute before opset 20, an input from 20) and STFT.
// A complex tensor is [..., 2] (real, imaginary); a real signal is [..., 1]. The
// transforms are direct O(L^2) sums in double per transformed vector, with the twiddle
// factors tabulated once per call: the numerical oracle, not a fast path.
#include <cmath>
#include <numbers>

#include "ops/common.h"
#include "ops/index_util.h"

namespace sampan::ops {
namespace {

constexpr double kPi = std::numbers::pi;

// ------------------------------------------------------------------ windows

// The output type attribute (TensorProto.DataType), float by default.
Result<DType> OutputDataType(const InferContext& ctx, int64_t fallback = 1) {
  const int64_t t = ctx.node().attr_int("output_datatype", fallback);
  if (t < 0 || t > 1000 || !IsKnownDType(static_cast<int32_t>(t))) return ctx.Error("unknown output_datatype ", t);
  const DType d = static_cast<DType>(t);
  if (!IsStorableDType(d) || DTypeSize(d) == 0 || d == DType::kBool || d == DType::kString)
    return ctx.NotSupported("output_datatype ", DTypeName(d));
  return d;
}

// A scalar integer input's value (nullptr when not known at inference time).
Result<std::optional<int64_t>> ScalarInt(const InferContext& ctx, size_t i, const char* what) {
  if (!ctx.has_input(i)) return std::optional<int64_t>();
  const DType t = ctx.input_dtype(i);
  if (t != DType::kInt32 && t != DType::kInt64) return ctx.Error(what, " must be int32 or int64, got ", DTypeName(t));
  if (ctx.input_rank(i) > 1) return ctx.Error(what, " must be a scalar");
  const Tensor* v = ctx.input_value(i);
  if (!v) return std::optional<int64_t>();
  if (v->numel() != 1) return ctx.Error(what, " must hold one value, got ", v->Describe());
  return std::optional<int64_t>(IndexAt(*v, 0));
}

Status InferWindow(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_ASSIGN_OR_RETURN(DType out, OutputDataType(ctx));
  SP_ASSIGN_OR_RETURN(auto size, ScalarInt(ctx, 0, "size"));
  if (size && *size < 0) return ctx.Error("size must be >= 0, got ", *size);
  ctx.set_output(0, out, ir::Dims{size ? ir::Dim::Known(*size) : ir::Dim::Unknown()});
  return Status::Ok();
}

// w[n] = sum_k a_k cos(2 pi k n / N), N = size (periodic) or size - 1 (symmetric).
Status RunWindow(KernelContext& ctx, const std::vector<double>& a) {
  Tensor& y = ctx.out(0);
  const int64_t size = y.numel();
  const bool periodic = ctx.node.attr_int("periodic", 1) != 0;
  const double n_den = static_cast<double>(periodic ? size : size - 1);
  return DispatchDType(y.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      T* o = y.mutable_data<T>();
      for (int64_t n = 0; n < size; ++n) {
        double w = 0;
        for (size_t k = 0; k < a.size(); ++k) w += a[k] * std::cos(2.0 * kPi * static_cast<double>(k * n) / n_den);
        o[n] = ConvertElement<T>(w);
      }
    }
  });
}

Status RunHann(KernelContext& ctx) {
  return RunWindow(ctx, {0.5, -0.5});
}
Status RunHamming(KernelContext& ctx) {
  return RunWindow(ctx, {25.0 / 46.0, -(1.0 - 25.0 / 46.0)});
}
Status RunBlackman(KernelContext& ctx) {
  return RunWindow(ctx, {0.42, -0.5, 0.08});
}

// ------------------------------------------------------------------ MelWeightMatrix

Status InferMelWeightMatrix(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(5, 5));
  SP_ASSIGN_OR_RETURN(DType out, OutputDataType(ctx));
  SP_ASSIGN_OR_RETURN(auto bins, ScalarInt(ctx, 0, "num_mel_bins"));
  SP_ASSIGN_OR_RETURN(auto dft, ScalarInt(ctx, 1, "dft_length"));
  SP_ASSIGN_OR_RETURN(auto rate, ScalarInt(ctx, 2, "sample_rate"));
  for (size_t i : {3, 4}) {
    if (!IsFloatDType(ctx.input_dtype(i))) return ctx.Error("input ", i, " (an edge in hertz) must be a float type");
    if (ctx.input_rank(i) > 1) return ctx.Error("input ", i, " must be a scalar");
  }
  if (bins && *bins < 1) return ctx.Error("num_mel_bins must be >= 1, got ", *bins);
  if (dft && *dft < 1) return ctx.Error("dft_length must be >= 1, got ", *dft);
  if (rate && *rate < 1) return ctx.Error("sample_rate must be >= 1, got ", *rate);
  ctx.set_output(0, out,
                 ir::Dims{dft ? ir::Dim::Known(*dft / 2 + 1) : ir::Dim::Unknown(),
                          bins ? ir::Dim::Known(*bins) : ir::Dim::Unknown()});
  return Status::Ok();
}

// Triangular filters between mel-spaced points (HTK mel scale), the points snapped to
// spectrogram bins: the reference's definition, integer bin arithmetic included.
Status RunMelWeightMatrix(KernelContext& ctx) {
  const int64_t bins = IndexAt(ctx.in(0), 0), dft = IndexAt(ctx.in(1), 0), rate = IndexAt(ctx.in(2), 0);
  const double lo = ElementAsDouble(ctx.in(3), 0), hi = ElementAsDouble(ctx.in(4), 0);
  if (!(lo >= 0) || !(hi > lo)) return ctx.Error("edges must satisfy 0 <= lower < upper, got ", lo, " and ", hi);
  Tensor& y = ctx.out(0);
  const int64_t spec_bins = dft / 2 + 1;
  const double mel_lo = 2595.0 * std::log10(1.0 + lo / 700.0), mel_hi = 2595.0 * std::log10(1.0 + hi / 700.0);
  const double step = (mel_hi - mel_lo) / static_cast<double>(bins + 2);
  std::vector<int64_t> points(static_cast<size_t>(bins + 2));
  for (int64_t i = 0; i < bins + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + mel_lo) / 2595.0) - 1.0);
    points[static_cast<size_t>(i)] =
        static_cast<int64_t>(std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate)));
  }
  std::vector<double> w(static_cast<size_t>(spec_bins * bins), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double* {
    if (j < 0 || j >= spec_bins) return nullptr;
    return &w[static_cast<size_t>(j * bins + i)];
  };
  for (int64_t i = 0; i < bins; ++i) {
    const int64_t left = points[static_cast<size_t>(i)], center = points[static_cast<size_t>(i + 1)],
                  right = points[static_cast<size_t>(i + 2)];
    const int64_t up = center - left, down = right - center;
    if (up == 0) {
      if (double* p = at(center, i)) *p = 1.0;
    } else {
      for (int64_t j = left; j <= center; ++j)
        if (double* p = at(j, i)) *p = static_cast<double>(j - left) / static_cast<double>(up);
    }
    for (int64_t j = center; down > 0 && j < right; ++j)
      if (double* p = at(j, i)) *p = static_cast<double>(right - j) / static_cast<double>(down);
  }
  return DispatchDType(y.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      T* o = y.mutable_data<T>();
      for (size_t k = 0; k < w.size(); ++k) o[k] = ConvertElement<T>(w[k]);
    }
  });
}

// ------------------------------------------------------------------ DFT

// cos and sin of 2 pi t / len for t < len: every twiddle factor of a length-len transform.
void Twiddles(int64_t len, std::vector<double>* cos_t, std::vector<double>* sin_t) {
  cos_t->resize(static_cast<size_t>(len));
  sin_t->resize(static_cast<size_t>(len));
  for (int64_t t = 0; t < len; ++t) {
    const double a = 2.0 * kPi * static_cast<double>(t) / static_cast<double>(len);
    (*cos_t)[static_cast<size_t>(t)] = std::cos(a);
    (*sin_t)[static_cast<size_t>(t)] = std::sin(a);
  }
}

// The transform of one complex vector of `n_in` values (zero-padded or cut to `len`):
// out[k] = sum_n x[n] e^(-+2 pi i k n / len), k < n_out; inverse divides by len.
void Transform(const std::vector<double>& re, const std::vector<double>& im, int64_t len, int64_t n_out, bool inverse,
               const std::vector<double>& cos_t, const std::vector<double>& sin_t, std::vector<double>* out_re,
               std::vector<double>* out_im) {
  const int64_t n_in = std::min<int64_t>(static_cast<int64_t>(re.size()), len);
  const double sign = inverse ? 1.0 : -1.0, norm = inverse ? 1.0 / static_cast<double>(len) : 1.0;
  for (int64_t k = 0; k < n_out; ++k) {
    double sr = 0, si = 0;
    for (int64_t n = 0; n < n_in; ++n) {
      const size_t t = static_cast<size_t>((k * n) % len);
      const double c = cos_t[t], s = sign * sin_t[t];
      sr += re[static_cast<size_t>(n)] * c - im[static_cast<size_t>(n)] * s;
      si += re[static_cast<size_t>(n)] * s + im[static_cast<size_t>(n)] * c;
    }
    (*out_re)[static_cast<size_t>(k)] = sr * norm;
    (*out_im)[static_cast<size_t>(k)] = si * norm;
  }
}

struct DftArgs {
  std::optional<int64_t> axis;  //!< into the input's dims (not the last); unknown before run time
  std::optional<int64_t> length;
  bool inverse = false, onesided = false;
};

// The transform's length and the output's length along the axis for an input of n there.
// Inverse + onesided is the inverse real transform: n Hermitian bins in, a real signal of
// dft_length (default 2 (n - 1)) out.
std::pair<int64_t, int64_t> DftLengths(const DftArgs& a, int64_t n) {
  if (a.inverse && a.onesided) {
    const int64_t len = a.length ? *a.length : 2 * (n - 1);
    return {len, len};
  }
  const int64_t len = a.length ? *a.length : n;
  return {len, a.onesided ? len / 2 + 1 : len};
}

Result<DftArgs> ReadDftArgs(const InferContext& ctx, int64_t rank) {
  DftArgs a;
  const ir::Node& n = ctx.node();
  a.inverse = n.attr_int("inverse", 0) != 0;
  a.onesided = n.attr_int("onesided", 0) != 0;
  int64_t axis = 1;
  if (ctx.opset() >= 20) {
    axis = -2;
    SP_ASSIGN_OR_RETURN(auto given, ScalarInt(ctx, 2, "axis"));
    if (ctx.has_input(2) && !given) {
      SP_ASSIGN_OR_RETURN(a.length, ScalarInt(ctx, 1, "dft_length"));
      return a;  // known at run time
    }
    if (given) axis = *given;
  } else {
    axis = n.attr_int("axis", 1);
  }
  if (axis < -rank || axis >= rank) return ctx.Error("axis ", axis, " out of range for rank ", rank);
  if (axis < 0) axis += rank;
  if (axis == rank - 1) return ctx.Error("axis ", axis, " is the complex dimension");
  a.axis = axis;
  SP_ASSIGN_OR_RETURN(a.length, ScalarInt(ctx, 1, "dft_length"));
  if (a.length && *a.length < 1) return ctx.Error("dft_length must be >= 1, got ", *a.length);
  return a;
}

Status InferDft(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, ctx.opset() >= 20 ? 3 : 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}));
  const auto& in = ctx.input_dims(0);
  if (!in) return ctx.NotSupported("input of unknown rank");
  const int64_t rank = static_cast<int64_t>(in->size());
  if (rank < 2) return ctx.Error("input must have rank >= 2 ([..., 1|2]), got ", rank);
  const ir::Dim& last = in->back();
  if (last.known() && last.value != 1 && last.value != 2)
    return ctx.Error("the last dimension must be 1 (real) or 2 (complex), got ", last.value);
  SP_ASSIGN_OR_RETURN(DftArgs a, ReadDftArgs(ctx, rank));
  if (a.onesided && last.known() && last.value == 2 && !a.inverse)
    return ctx.Error("onesided needs a real input ([..., 1])");
  if (a.inverse && a.onesided && last.known() && last.value != 2)
    return ctx.Error("the inverse of a onesided transform needs complex bins ([..., 2])");
  // A real signal out of the inverse real transform, complex values otherwise.
  const int64_t comps = a.inverse && a.onesided ? 1 : 2;
  ir::Dims out = *in;
  if (!a.axis) {  // the axis is known at run time only: every length may change
    for (size_t i = 0; i + 1 < out.size(); ++i) out[i] = ir::Dim::Unknown();
  } else {
    const ir::Dim& n = (*in)[static_cast<size_t>(*a.axis)];
    if (n.known() || a.length) {
      const auto [len, n_out] = DftLengths(a, n.known() ? n.value : 0);
      if (len < 1) return ctx.Error("a transform of length ", len);
      out[static_cast<size_t>(*a.axis)] = ir::Dim::Known(n_out);
    } else {
      out[static_cast<size_t>(*a.axis)] = ir::Dim::Unknown();
    }
  }
  out.back() = ir::Dim::Known(comps);
  ctx.set_output(0, ctx.input_dtype(0), out);
  return Status::Ok();
}

// Runs the transform over every vector along `axis` of x ([..., 1|2]); y is [..., 2], or
// [..., 1] for the inverse real transform (`hermitian`: x holds bins 0..n-1 of a spectrum
// whose others are their conjugates).
Status DftAlong(const Tensor& x, Tensor& y, int64_t axis, int64_t len, bool inverse, bool hermitian) {
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  const int64_t rank = static_cast<int64_t>(xs.size());
  const int64_t comps = xs.back(), n_in = xs[static_cast<size_t>(axis)], n_out = ys[static_cast<size_t>(axis)];
  const int64_t outer = SpanProduct(xs, 0, static_cast<size_t>(axis));
  const int64_t inner_x = SpanProduct(xs, static_cast<size_t>(axis + 1), static_cast<size_t>(rank - 1));
  std::vector<double> cos_t, sin_t;
  Twiddles(len, &cos_t, &sin_t);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) {
      const T* px = x.data<T>();
      T* py = y.mutable_data<T>();
      const int64_t out_comps = ys.back();
      const int64_t n_vec = hermitian ? len : n_in;
      std::vector<double> re(static_cast<size_t>(n_vec)), im(static_cast<size_t>(n_vec));
      std::vector<double> ore(static_cast<size_t>(n_out)), oim(static_cast<size_t>(n_out));
      auto load = [&](int64_t o, int64_t i, int64_t n, double* r, double* m) {
        const int64_t base = ((o * n_in + n) * inner_x + i) * comps;
        *r = static_cast<double>(ComputeType<T>(px[base]));
        *m = comps == 2 ? static_cast<double>(ComputeType<T>(px[base + 1])) : 0.0;
      };
      const int64_t n_half = std::min<int64_t>(n_in, len / 2 + 1);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner_x; ++i) {
          for (int64_t n = 0; n < n_vec; ++n) {
            double r = 0, m = 0;
            if (!hermitian) {
              load(o, i, n, &r, &m);
            } else if (n < n_half) {
              load(o, i, n, &r, &m);
            } else if (len - n < n_half) {
              load(o, i, len - n, &r, &m);
              m = -m;
            }
            re[static_cast<size_t>(n)] = r;
            im[static_cast<size_t>(n)] = m;
          }
          Transform(re, im, len, n_out, inverse, cos_t, sin_t, &ore, &oim);
          for (int64_t k = 0; k < n_out; ++k) {
            const int64_t base = ((o * n_out + k) * inner_x + i) * out_comps;
            py[base] = ConvertElement<T>(ore[static_cast<size_t>(k)]);
            if (out_comps == 2) py[base + 1] = ConvertElement<T>(oim[static_cast<size_t>(k)]);
          }
        }
    }
  });
}

Status RunDft(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  SP_ASSIGN_OR_RETURN(DftArgs a, ReadDftArgs(*ctx.infer, x.rank()));
  if (!a.axis) return ctx.Error("the axis is not known");
  const auto [len, n_out] = DftLengths(a, x.dim(*a.axis));
  if (len < 1 || y.dim(*a.axis) != n_out) return ctx.Error("a transform of length ", len);
  return DftAlong(x, y, *a.axis, len, a.inverse, a.inverse && a.onesided);
}

// ------------------------------------------------------------------ STFT

struct StftArgs {
  int64_t step = 0, frame_length = 0, frames = 0;
  bool onesided = true;
};

Result<StftArgs> ReadStftArgs(const InferContext& ctx, const std::optional<int64_t>& signal_length) {
  StftArgs a;
  a.onesided = ctx.node().attr_int("onesided", 1) != 0;
  SP_ASSIGN_OR_RETURN(auto step, ScalarInt(ctx, 1, "frame_step"));
  if (step && *step < 1) return ctx.Error("frame_step must be >= 1, got ", *step);
  a.step = step ? *step : 0;  // 0: known at run time
  SP_ASSIGN_OR_RETURN(auto fl, ScalarInt(ctx, 3, "frame_length"));
  std::optional<int64_t> wl;
  if (ctx.has_input(2)) {
    const auto& wd = ctx.input_dims(2);
    if (!wd || wd->size() != 1) return ctx.Error("window must be 1-D");
    if ((*wd)[0].known()) wl = (*wd)[0].value;
    if (ctx.input_dtype(2) != ctx.input_dtype(0)) return ctx.Error("window must have the signal's type");
  }
  if (fl && wl && *fl != *wl) return ctx.Error("frame_length ", *fl, " differs from the window's length ", *wl);
  std::optional<int64_t> length = fl ? fl : wl ? wl : ctx.has_input(3) ? std::nullopt : signal_length;
  if (!length) return a;  // frame_length 0: known at run time
  if (*length < 1) return ctx.Error("frame_length must be >= 1, got ", *length);
  a.frame_length = *length;
  if (signal_length && a.step > 0 && a.frame_length > 0) {
    if (*signal_length < a.frame_length)
      return ctx.Error("the signal (", *signal_length, " samples) is shorter than a frame (", a.frame_length, ")");
    a.frames = 1 + (*signal_length - a.frame_length) / a.step;
  }
  return a;
}

Status InferStft(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 4));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}));
  const auto& in = ctx.input_dims(0);
  if (!in) return ctx.NotSupported("signal of unknown rank");
  if (in->size() != 3) return ctx.Error("signal must be [batch, length, 1|2], got rank ", in->size());
  const ir::Dim& last = in->back();
  if (last.known() && last.value != 1 && last.value != 2)
    return ctx.Error("the last dimension must be 1 (real) or 2 (complex), got ", last.value);
  const ir::Dim& len = (*in)[1];
  SP_ASSIGN_OR_RETURN(StftArgs a, ReadStftArgs(ctx, len.known() ? std::optional<int64_t>(len.value) : std::nullopt));
  if (a.onesided && last.known() && last.value == 2) return ctx.Error("onesided needs a real signal ([..., 1])");
  ctx.set_output(
      0, ctx.input_dtype(0),
      ir::Dims{(*in)[0],
               len.known() && a.step > 0 && a.frame_length > 0 ? ir::Dim::Known(a.frames) : ir::Dim::Unknown(),
               a.frame_length > 0 ? ir::Dim::Known(a.onesided ? a.frame_length / 2 + 1 : a.frame_length)
                                  : ir::Dim::Unknown(),
               ir::Dim::Known(2)});
  return Status::Ok();
}

// Frames of frame_length samples every frame_step, times the window, each transformed.
Status RunStft(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  SP_ASSIGN_OR_RETURN(StftArgs a, ReadStftArgs(*ctx.infer, x.dim(1)));
  if (a.step < 1 || a.frame_length < 1 || y.dim(1) != a.frames)
    return ctx.Error("frame_step or frame_length is not known");
  const int64_t batch = x.dim(0), length = x.dim(1), comps = x.dim(2), fl = a.frame_length;
  const int64_t bins = y.dim(2);
  const Tensor* window = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  std::vector<double> cos_t, sin_t;
  Twiddles(fl, &cos_t, &sin_t);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) {
      const T* px = x.data<T>();
      const T* pw = window ? window->data<T>() : nullptr;
      T* py = y.mutable_data<T>();
      std::vector<double> re(static_cast<size_t>(fl)), im(static_cast<size_t>(fl));
      std::vector<double> ore(static_cast<size_t>(bins)), oim(static_cast<size_t>(bins));
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t f = 0; f < a.frames; ++f) {
          for (int64_t n = 0; n < fl; ++n) {
            const int64_t s = f * a.step + n;
            const double w = pw ? static_cast<double>(ComputeType<T>(pw[n])) : 1.0;
            const int64_t base = (b * length + s) * comps;
            re[static_cast<size_t>(n)] = s < length ? w * static_cast<double>(ComputeType<T>(px[base])) : 0.0;
            im[static_cast<size_t>(n)] =
                s < length && comps == 2 ? w * static_cast<double>(ComputeType<T>(px[base + 1])) : 0.0;
          }
          Transform(re, im, fl, bins, false, cos_t, sin_t, &ore, &oim);
          for (int64_t k = 0; k < bins; ++k) {
            const int64_t o = ((b * a.frames + f) * bins + k) * 2;
            py[o] = ConvertElement<T>(ore[static_cast<size_t>(k)]);
            py[o + 1] = ConvertElement<T>(oim[static_cast<size_t>(k)]);
          }
        }
    }
  });
}

SAMPAN_REGISTER_OP("HannWindow", InferWindow, RunHann);
SAMPAN_REGISTER_OP("HammingWindow", InferWindow, RunHamming);
SAMPAN_REGISTER_OP("BlackmanWindow", InferWindow, RunBlackman);
SAMPAN_REGISTER_OP("MelWeightMatrix", InferMelWeightMatrix, RunMelWeightMatrix);
SAMPAN_REGISTER_OP("DFT", InferDft, RunDft);
SAMPAN_REGISTER_OP("STFT", InferStft, RunStft);

}  // namespace
}  // namespace sampan::ops
