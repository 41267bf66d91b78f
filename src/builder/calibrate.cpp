#include "builder/calibrate.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "base/npy.h"
#include "base/small_types.h"
#include "builder/accuracy_gate.h"
#include "builder/backend_builder.h"
#include "builder/builder.h"
#include "ops/op.h"
#include "ops/run_node.h"
#include "runtime/engine.h"

namespace sampan::builder {
namespace {

constexpr int kBins = 2048;
constexpr const char* kCacheMagic = "sampan-calibration 1";

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool DirExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string Fnv1a64(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool IsProduct(const ir::Node& n, const char* plain, const char* fused) {
  return (n.domain.empty() && n.op_type == plain) || (n.domain == "sampan" && n.op_type == fused);
}

// Why node `n` cannot be quantized ("" when it can).
std::string Unquantizable(const ir::Node& n, bool fp8) {
  const bool conv = IsProduct(n, "Conv", "FusedConv");
  const bool matmul = IsProduct(n, "MatMul", "FusedMatMul");
  const bool gemm = IsProduct(n, "Gemm", "FusedGemm");
  if (!conv && !matmul && !gemm) return "not a product";
  if (fp8 && conv) return "FP8 convolutions are not built (MatMul/Gemm only); it stays in float";
  const ir::Value* x = n.input(0);
  const ir::Value* w = n.input(1);
  if (x == nullptr || x->type.dtype != DType::kFloat32 || x->is_constant()) return "input is not a float32 activation";
  if (w == nullptr || !w->is_constant() || w->data.dtype() != DType::kFloat32)
    return "weight is not a float32 constant";
  if (n.output(0)->type.dtype != DType::kFloat32) return "output is not float32";
  const size_t wr = w->data.shape().size();
  if (conv && wr < 3) return "weight rank";
  if ((matmul || gemm) && wr != 2) return "weight is not 2-D";
  if (gemm) {
    if (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.f) != 1.f || n.attr_float("beta", 1.f) != 1.f)
      return "Gemm with transA, alpha or beta";
    if (!x->type.dims || x->type.dims->size() != 2) return "Gemm input is not 2-D";
    const ir::Value* c = n.input(2);
    const int64_t cols = w->data.shape()[n.attr_int("transB", 0) ? 0 : 1];
    if (c && (!c->is_constant() || c->data.numel() != cols)) return "Gemm C is not a per-column bias";
  }
  if (n.input(2) && !n.input(2)->is_constant()) return "bias is not constant";
  return "";
}

float AbsMax(const Tensor& w) {
  const float* p = w.data<float>();
  float amax = 0.f;
  for (int64_t i = 0; i < w.numel(); ++i) amax = std::max(amax, std::fabs(p[i]));
  return amax;
}

}  // namespace

int64_t WeightAxis(const ir::Node& n) {
  if (IsProduct(n, "Conv", "FusedConv")) return 0;
  if (IsProduct(n, "Gemm", "FusedGemm")) return n.attr_int("transB", 0) ? 0 : 1;
  return 1;
}

std::pair<Tensor, Tensor> QuantizeWeight(const Tensor& w, int64_t axis) {
  const Shape& s = w.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t channels = s[static_cast<size_t>(axis)];
  const float* p = w.data<float>();
  std::vector<float> amax(static_cast<size_t>(channels), 0.f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i)
        amax[static_cast<size_t>(c)] =
            std::max(amax[static_cast<size_t>(c)], std::fabs(p[(o * channels + c) * inner + i]));
  std::vector<float> scale(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const float a = amax[static_cast<size_t>(c)];
    scale[static_cast<size_t>(c)] = a > 0.f && std::isfinite(a) ? a / 127.f : 1.f;
  }
  Tensor q = Tensor::Alloc(DType::kInt8, s);
  auto* qp = q.mutable_data<int8_t>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t k = (o * channels + c) * inner + i;
        const float v = std::nearbyint(p[k] / scale[static_cast<size_t>(c)]);
        qp[k] = static_cast<int8_t>(std::fmin(127.f, std::fmax(-127.f, v)));
      }
  return {q, Tensor::FromVector(DType::kFloat32, scale, {channels})};
}

std::pair<Tensor, Tensor> QuantizeWeightFp8(const Tensor& w, float amax) {
  const float* p = w.data<float>();
  const float scale = amax > 0.f && std::isfinite(amax) ? static_cast<float>(amax / kFp8Max) : 1.f;
  Tensor q = Tensor::Alloc(kFp8, w.shape());
  auto* qp = static_cast<uint8_t*>(q.mutable_raw());
  for (int64_t i = 0; i < w.numel(); ++i) qp[i] = SmallFloatFromDouble(kFp8, static_cast<double>(p[i] / scale), true);
  return {q, Tensor::FromVector(DType::kFloat32, std::vector<float>{scale}, {})};
}

namespace {

// Running statistics of one activation.
struct Stats {
  double amax = 0;
  double min = 0;
  bool seen = false;
  std::vector<double> hist;  // of |x| over [0, amax], kBins bins
};

void Observe(const Tensor& t, Stats& s, bool histogram) {
  const float* p = t.data<float>();
  const int64_t n = t.numel();
  if (!histogram) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(p[i])) continue;
      s.amax = std::max(s.amax, static_cast<double>(std::fabs(p[i])));
      s.min = s.seen ? std::min(s.min, static_cast<double>(p[i])) : static_cast<double>(p[i]);
      s.seen = true;
    }
    return;
  }
  if (s.hist.empty()) s.hist.assign(kBins, 0.0);
  if (s.amax <= 0) return;
  const double width = s.amax / kBins;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) continue;
    const int b = std::min(kBins - 1, static_cast<int>(std::fabs(p[i]) / width));
    s.hist[static_cast<size_t>(b)] += 1;
  }
}

// Smooths a distribution so no bin is 0 (eps taken from the non-zero bins); false when all are 0.
bool Smooth(std::vector<double>& d) {
  constexpr double kEps = 1e-4;
  size_t zeros = 0;
  for (double v : d) zeros += v == 0;
  const size_t nonzeros = d.size() - zeros;
  if (nonzeros == 0) return false;
  const double eps1 = kEps * static_cast<double>(zeros) / static_cast<double>(nonzeros);
  for (double& v : d) v = v == 0 ? kEps : v - eps1;
  return true;
}

// KL(p || q) of two unnormalised distributions.
double KL(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (double v : p) sp += v;
  for (double v : q) sq += v;
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double a = p[i] / sp, b = q[i] / sq;
    if (a > 0) kl += a * std::log(a / b);
  }
  return kl;
}

// TensorRT's entropy calibration: the threshold (a bin edge) whose `levels`-level quantization
// of the clipped histogram is closest to it in KL divergence.
double EntropyThreshold(std::vector<double> hist, double amax, int levels) {
  const double width = amax / kBins;
  // The spike of exact zeros (ReLU outputs, padding) says nothing about where to clip, and would
  // dominate the divergence: it counts as much as its neighbour (as NVIDIA's calibrators do).
  if (hist.size() > 1) hist[0] = hist[1];
  double best_kl = INFINITY;
  int best = kBins;
  std::vector<double> p, q;
  for (int i = levels; i <= kBins; ++i) {
    p.assign(hist.begin(), hist.begin() + i);
    double outliers = 0;
    for (int k = i; k < kBins; ++k) outliers += hist[static_cast<size_t>(k)];
    p[static_cast<size_t>(i - 1)] += outliers;
    // The clipped histogram merged into `levels` bins and spread back over the non-empty bins.
    q.assign(static_cast<size_t>(i), 0.0);
    const int merged = i / levels;
    for (int j = 0; j < levels; ++j) {
      const int start = j * merged, stop = j == levels - 1 ? i : start + merged;
      double total = 0;
      int nonempty = 0;
      for (int k = start; k < stop; ++k) {
        total += hist[static_cast<size_t>(k)];
        nonempty += p[static_cast<size_t>(k)] != 0;
      }
      if (nonempty == 0) continue;
      for (int k = start; k < stop; ++k)
        if (p[static_cast<size_t>(k)] != 0) q[static_cast<size_t>(k)] = total / nonempty;
    }
    if (!Smooth(p) || !Smooth(q)) continue;
    const double kl = KL(p, q);
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  return best * width;
}

double PercentileThreshold(const std::vector<double>& hist, double amax, double pct) {
  double total = 0;
  for (double v : hist) total += v;
  const double want = total * pct / 100.0;
  double cum = 0;
  for (int i = 0; i < kBins; ++i) {
    cum += hist[static_cast<size_t>(i)];
    if (cum >= want) return (i + 1) * (amax / kBins);
  }
  return amax;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Status ParseCalibMethod(const std::string& text, CalibrationConfig* config) {
  if (text == "entropy") {
    config->method = CalibMethod::kEntropy;
  } else if (text == "minmax") {
    config->method = CalibMethod::kMinMax;
  } else if (text == "percentile" || text.rfind("percentile=", 0) == 0) {
    config->method = CalibMethod::kPercentile;
    if (text.size() > 11) {
      char* end = nullptr;
      const std::string v = text.substr(11);
      const double p = std::strtod(v.c_str(), &end);
      if (v.empty() || end == nullptr || *end != '\0' || !(p > 0 && p <= 100))
        return InvalidArgument("--calibMethod '", text, "': the percentile must be a number in (0, 100]");
      config->percentile = p;
    }
  } else {
    return InvalidArgument("--calibMethod '", text, "' is not one of entropy, minmax, percentile[=P]");
  }
  return Status::Ok();
}

std::string CalibMethodName(const CalibrationConfig& c) {
  switch (c.method) {
    case CalibMethod::kEntropy:
      return "entropy";
    case CalibMethod::kMinMax:
      return "minmax";
    case CalibMethod::kPercentile: {
      char buf[48];
      std::snprintf(buf, sizeof(buf), "percentile=%g", c.percentile);
      return buf;
    }
  }
  return "?";
}

std::string CalibrationCache::Serialize() const {
  std::ostringstream out;
  out << "# Sampan calibration cache: activation tensor, scale, storage type (sampan build --int8 / --fp8)\n";
  out << kCacheMagic << "\n";
  out << "method " << method << "\n";
  out << "samples " << samples << "\n";
  for (const auto& [name, s] : tensors) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(s.scale));
    if (s.keep_float)
      out << name << " 0 float\n";
    else
      out << name << " " << buf << " " << (s.fp8 ? "fp8e4m3" : s.is_unsigned ? "uint8" : "int8") << "\n";
  }
  return out.str();
}

Result<CalibrationCache> CalibrationCache::Parse(const std::string& text, const std::string& what) {
  CalibrationCache c;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  bool magic = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    const std::string where = StrCat(what, ":", lineno);
    if (!magic) {
      if (line != kCacheMagic)
        return InvalidArgument(where, ": not a Sampan calibration cache (expected '", kCacheMagic, "')");
      magic = true;
      continue;
    }
    if (line.rfind("method ", 0) == 0) {
      c.method = line.substr(7);
      continue;
    }
    if (line.rfind("samples ", 0) == 0) {
      c.samples = std::atoll(line.c_str() + 8);
      continue;
    }
    // NAME SCALE TYPE: the name may hold spaces, so split from the right.
    const size_t t = line.rfind(' ');
    const size_t s = t == std::string::npos || t == 0 ? std::string::npos : line.rfind(' ', t - 1);
    if (s == std::string::npos || s == 0) return InvalidArgument(where, ": expected 'TENSOR SCALE int8|uint8|fp8e4m3'");
    const std::string name = line.substr(0, s), scale = line.substr(s + 1, t - s - 1), type = line.substr(t + 1);
    if (type == "float" && scale == "0") {
      c.tensors.push_back({name, ActivationScale{0.f, false, true}});
      continue;
    }
    char* end = nullptr;
    const double v = std::strtod(scale.c_str(), &end);
    if (scale.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v))
      return InvalidArgument(where, ": scale '", scale, "' of '", name, "' is not a positive number");
    if (type != "int8" && type != "uint8" && type != "fp8e4m3")
      return InvalidArgument(where, ": type '", type, "' is not int8, uint8 or fp8e4m3 (or '0 float')");
    c.tensors.push_back({name, ActivationScale{static_cast<float>(v), type == "uint8", false, type == "fp8e4m3"}});
  }
  if (!magic) return InvalidArgument(what, ": empty, not a Sampan calibration cache");
  return c;
}

std::vector<QuantizableLayer> SelectQuantizable(ir::Graph& graph, const BuildConfig& config,
                                                std::vector<std::string>* skipped) {
  std::vector<QuantizableLayer> layers;
  for (const auto& up : graph.nodes()) {
    ir::Node& n = *up;
    const bool product =
        IsProduct(n, "Conv", "FusedConv") || IsProduct(n, "MatMul", "FusedMatMul") || IsProduct(n, "Gemm", "FusedGemm");
    if (!product) continue;
    const std::string why = Unquantizable(n, config.calibration.fp8);
    if (!why.empty()) {
      if (skipped) skipped->push_back(StrCat(n.name, ": ", why));
      continue;
    }
    bool kept_float = false;
    for (const auto& lp : config.layer_precision)
      if (GlobMatch(lp.pattern, n.name)) kept_float = true;  // any precision named keeps it float
    if (kept_float) {
      if (skipped) skipped->push_back(StrCat(n.name, ": --layer-precision keeps it in a float precision"));
      continue;
    }
    layers.push_back({&n, n.input(0)->name()});
  }
  return layers;
}

namespace {

// Image files of a samples directory (JPEG, PNG, BMP, binary PNM, as ImageDecoder reads), sorted
// by name (byte order: img10 before img2); hidden files (".name") are left out.
std::vector<std::string> ImageFiles(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      std::string n = e->d_name,
                  ext = n.substr(n.find_last_of('.') == std::string::npos ? n.size() : n.find_last_of('.'));
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
      static const std::set<std::string> kImage = {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".pnm"};
      if (!n.empty() && n[0] != '.' && kImage.count(ext) && FileExists(StrCat(dir, "/", n))) names.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Pixels of an image file as uint8 [H, W, C] (C 3: RGB, 1: grey), through ImageDecoder.
Result<Tensor> DecodeImageFile(const std::string& path, int64_t channels) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot read '", path, "'");
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Tensor enc = Tensor::Alloc(DType::kUInt8, {static_cast<int64_t>(bytes.size())});
  if (!bytes.empty()) std::memcpy(enc.mutable_raw(), bytes.data(), bytes.size());
  ir::Graph g;
  g.opsets[""] = 20;
  SP_ASSIGN_OR_RETURN(ir::Value * in, g.AddValue("encoded", ir::TensorType::Static(DType::kUInt8, enc.shape())));
  SP_ASSIGN_OR_RETURN(ir::Value * out, g.AddValue("pixels", ir::TensorType{DType::kUInt8, std::nullopt}));
  SP_ASSIGN_OR_RETURN(ir::Node * node, g.AddNode("ImageDecoder", {in}, {out}, path));
  node->attrs["pixel_format"] = ir::Attribute::String(channels == 1 ? "Grayscale" : "RGB");
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(ops::RunNode(*node, 20, {&enc}, &outs));
  return std::move(outs[0]);
}

// img [h, w, c] resized to [H, W, c]: bilinear with half-pixel centres (Resize's linear mode,
// no antialiasing), rounded to the nearest integer.
Tensor ResizeBilinear(const Tensor& img, int64_t H, int64_t W) {
  const int64_t h = img.dim(0), w = img.dim(1), c = img.dim(2);
  if (h == H && w == W) return img;
  Tensor out = Tensor::Alloc(DType::kUInt8, {H, W, c});
  const uint8_t* src = img.data<uint8_t>();
  uint8_t* dst = out.mutable_data<uint8_t>();
  auto axis = [](int64_t o, int64_t from, int64_t to, int64_t* i0, int64_t* i1, float* t) {
    const float x =
        std::clamp((static_cast<float>(o) + 0.5f) * static_cast<float>(from) / static_cast<float>(to) - 0.5f, 0.f,
                   static_cast<float>(from - 1));
    *i0 = static_cast<int64_t>(x);
    *i1 = std::min(*i0 + 1, from - 1);
    *t = x - static_cast<float>(*i0);
  };
  for (int64_t y = 0; y < H; ++y) {
    int64_t y0, y1;
    float ty;
    axis(y, h, H, &y0, &y1, &ty);
    for (int64_t x = 0; x < W; ++x) {
      int64_t x0, x1;
      float tx;
      axis(x, w, W, &x0, &x1, &tx);
      for (int64_t k = 0; k < c; ++k) {
        auto at = [&](int64_t yy, int64_t xx) { return static_cast<float>(src[(yy * w + xx) * c + k]); };
        const float v =
            (1 - ty) * ((1 - tx) * at(y0, x0) + tx * at(y0, x1)) + ty * ((1 - tx) * at(y1, x0) + tx * at(y1, x1));
        dst[(y * W + x) * c + k] = static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.f, 255.f));
      }
    }
  }
  return out;
}

// Samples from the images of `dir` for a graph whose one input is uint8 NHWC (the plan's
// --input-format, which applies --mean/--std as at run time): each image decoded (RGB, or grey
// for one channel) and resized to the input's height and width where it differs; a batch of N
// images per sample when the input's batch is fixed at N, else one (images past the last whole
// batch are not used).
Result<std::vector<std::map<std::string, Tensor>>> LoadImageSamples(const ir::Graph& graph, const BuildConfig& config,
                                                                    const std::string& dir, const std::string& flag,
                                                                    const std::vector<std::string>& images) {
  const CalibrationConfig& c = config.calibration;
  if (graph.inputs().size() != 1)
    return InvalidArgument(flag, " '", dir, "' holds images, which feed a model with one image input; this one has ",
                           graph.inputs().size(), " inputs (give INPUT.K.npy samples)");
  const ir::Value* in = graph.inputs()[0];
  const ir::TensorType& ty = in->type;
  const bool nhwc = ty.dtype == DType::kUInt8 && ty.dims && ty.dims->size() == 4 && (*ty.dims)[3].known() &&
                    ((*ty.dims)[3].value == 3 || (*ty.dims)[3].value == 1);
  if (!nhwc)
    return InvalidArgument(flag, " '", dir,
                           "' holds images, which feed a uint8 NHWC image input (build with "
                           "--input-format uint8-nhwc and the model's --mean/--std, so the plan normalises them as it "
                           "will at run time); input '",
                           in->name(), "' is ", ty.ToString());
  Shape want(4, -1);
  for (size_t d = 0; d < 4; ++d)
    if ((*ty.dims)[d].known()) want[d] = (*ty.dims)[d].value;
  for (const auto& p : config.profiles) {  // the first profile's opt fills what the type leaves open
    auto it = p.find(in->name());
    if (it == p.end() || it->second.opt.size() != 4) continue;
    for (size_t d = 1; d < 3; ++d)
      if (want[d] < 0) want[d] = it->second.opt[d];
    if (want[0] < 0 && it->second.min.size() == 4 && it->second.min[0] > 1) want[0] = it->second.min[0];
    break;
  }
  if (want[1] <= 0 || want[2] <= 0)
    return InvalidArgument(flag, ": input '", in->name(), "' (", ty.ToString(),
                           ") has no fixed height and width to resize the images to (give --optShapes)");
  const int64_t batch = want[0] > 0 ? want[0] : 1, H = want[1], W = want[2], C = want[3];
  if (static_cast<int64_t>(images.size()) < batch)
    return InvalidArgument(flag, " '", dir, "' holds ", images.size(), " image(s), fewer than the batch of input '",
                           in->name(), "' (", batch, ")");
  std::vector<std::map<std::string, Tensor>> samples;
  for (size_t first = 0; first + static_cast<size_t>(batch) <= images.size(); first += static_cast<size_t>(batch)) {
    if (flag == "--calibData" && c.max_batches > 0 && static_cast<int64_t>(samples.size()) >= c.max_batches) break;
    Tensor t = Tensor::Alloc(DType::kUInt8, {batch, H, W, C});
    for (int64_t b = 0; b < batch; ++b) {
      const std::string path = StrCat(dir, "/", images[first + static_cast<size_t>(b)]);
      auto px = DecodeImageFile(path, C);
      if (!px.ok()) return InvalidArgument(flag, ": image '", path, "': ", px.status().message());
      const Tensor img = ResizeBilinear(*px, H, W);
      std::memcpy(t.mutable_data<uint8_t>() + b * H * W * C, img.data<uint8_t>(), static_cast<size_t>(H * W * C));
    }
    samples.push_back({{in->name(), std::move(t)}});
  }
  return samples;
}

}  // namespace

Result<std::vector<std::map<std::string, Tensor>>> LoadSamples(const ir::Graph& graph, const BuildConfig& config,
                                                               const std::string& dir, const std::string& flag) {
  const CalibrationConfig& c = config.calibration;
  if (!DirExists(dir)) return NotFound(flag, " '", dir, "' is not a directory");
  // Images are the samples when the directory holds them and no INPUT.0.npy.
  bool npy = false;
  for (const ir::Value* in : graph.inputs()) npy |= FileExists(StrCat(dir, "/", in->name(), ".0.npy"));
  if (!npy) {
    const std::vector<std::string> images = ImageFiles(dir);
    if (!images.empty()) return LoadImageSamples(graph, config, dir, flag, images);
  }
  std::vector<std::map<std::string, Tensor>> samples;
  for (int64_t k = 0;; ++k) {
    if (flag == "--calibData" && c.max_batches > 0 && static_cast<int64_t>(samples.size()) >= c.max_batches) break;
    std::map<std::string, Tensor> feed;
    size_t found = 0;
    std::string missing;
    for (const ir::Value* in : graph.inputs()) {
      const std::string path = StrCat(dir, "/", in->name(), ".", k, ".npy");
      if (!FileExists(path)) {
        if (missing.empty()) missing = path;
        continue;
      }
      ++found;
      SP_ASSIGN_OR_RETURN(Tensor t, ReadNpy(path));
      if (t.dtype() != in->type.dtype)
        return InvalidArgument("sample '", path, "' is ", DTypeName(t.dtype()), ", input '", in->name(), "' is ",
                               DTypeName(in->type.dtype));
      const ir::TensorType& ty = in->type;
      bool fits = !ty.dims || ty.dims->size() == t.shape().size();
      for (size_t d = 0; fits && ty.dims && d < ty.dims->size(); ++d)
        if ((*ty.dims)[d].known() && (*ty.dims)[d].value != t.shape()[d]) fits = false;
      bool in_profile = config.profiles.empty();
      for (const auto& p : config.profiles) {
        auto it = p.find(in->name());
        if (it == p.end()) {
          in_profile = true;
          continue;
        }
        bool ok = it->second.min.size() == t.shape().size();
        for (size_t d = 0; ok && d < t.shape().size(); ++d)
          ok = t.shape()[d] >= it->second.min[d] && t.shape()[d] <= it->second.max[d];
        in_profile |= ok;
      }
      if (!fits || !in_profile)
        return InvalidArgument("sample '", path, "' has shape ", ShapeToString(t.shape()), ", input '", in->name(),
                               "' takes ", ty.ToString(),
                               config.profiles.empty() ? "" : " within the build's profiles");
      feed[in->name()] = std::move(t);
    }
    if (found == 0) break;
    if (found != graph.inputs().size())
      return InvalidArgument(flag, ": sample ", k, " is incomplete: '", missing, "' is missing");
    samples.push_back(std::move(feed));
  }
  if (samples.empty()) {
    std::string names;
    for (const ir::Value* in : graph.inputs()) names += (names.empty() ? "" : ", ") + in->name() + ".0.npy";
    return InvalidArgument(flag, " '", dir, "' holds no sample (expected ", names,
                           ", ..., or images for a uint8 NHWC image input)");
  }
  return samples;
}

namespace {

// Runs the float graph on the samples and returns each activation's statistics.
Result<std::map<std::string, Stats>> Collect(const ir::Graph& graph, const std::vector<std::string>& tensors,
                                             const std::vector<std::map<std::string, Tensor>>& samples,
                                             const BuildConfig& config, const std::map<std::string, Stats>* ranges) {
  const bool histogram = ranges != nullptr;
  std::unique_ptr<ir::Graph> g = graph.Clone();
  std::vector<size_t> index;
  for (const std::string& name : tensors) {
    ir::Value* v = g->FindValue(name);
    if (v == nullptr) return Internal("calibration: no value '", name, "'");
    auto it = std::find(g->outputs().begin(), g->outputs().end(), v);
    if (it == g->outputs().end()) {
      g->outputs().push_back(v);
      index.push_back(g->outputs().size() - 1);
    } else {
      index.push_back(static_cast<size_t>(it - g->outputs().begin()));
    }
  }
  BuildConfig run;
  run.backend = FindBackendBuilder("cpu") ? "cpu" : "reference";
  run.profiles = config.profiles;
  for (const passes::PassDef* p : passes::AllPasses()) run.disabled_passes.insert(p->name);
  SP_ASSIGN_OR_RETURN(plan::Plan plan, Build(std::move(g), run, nullptr));
  SP_ASSIGN_OR_RETURN(std::shared_ptr<runtime::Engine> engine, runtime::Engine::Create(std::move(plan)));
  SP_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Context> ctx, engine->CreateContext());
  // The histogram pass bins |x| over [0, the first pass's max].
  std::map<std::string, Stats> stats = histogram ? *ranges : std::map<std::string, Stats>{};
  for (size_t k = 0; k < samples.size(); ++k) {
    auto out = ctx->Run(samples[k]);
    if (!out.ok()) return out.status().WithContext(StrCat("calibration sample ", k));
    for (size_t i = 0; i < tensors.size(); ++i) Observe((*out)[index[i]], stats[tensors[i]], histogram);
  }
  return stats;
}

}  // namespace

std::map<std::string, float> SharedWeightAmax(const std::vector<QuantizableLayer>& layers) {
  std::map<std::string, float> amax;
  for (const auto& l : layers) {
    float& a = amax[l.activation];
    a = std::max(a, AbsMax(l.node->input(1)->data));
  }
  return amax;
}

Status InsertQdq(ir::Graph& graph, const std::vector<QuantizableLayer>& chosen,
                 const std::map<std::string, ActivationScale>& scales, QuantizationReport* rep) {
  std::map<std::string, ir::Value*> dequantized;
  const std::map<std::string, float> fp8_amax = SharedWeightAmax(chosen);
  for (const auto& l : chosen) {
    ir::Node* np = nullptr;
    for (const auto& up : graph.nodes())
      if (up->name == l.node->name) np = up.get();
    if (np == nullptr) return Internal("int8: no node '", l.node->name, "'");
    ir::Node& n = *np;
    auto sit = scales.find(l.activation);
    if (sit == scales.end()) {
      if (rep)
        rep->skipped.push_back(StrCat(n.name, ": its input '", l.activation, "' was 0 in every calibration sample"));
      continue;
    }
    ir::Value*& xd = dequantized[l.activation];
    if (xd == nullptr) {
      ir::Value* x = graph.FindValue(l.activation);
      const ActivationScale& s = sit->second;
      SP_ASSIGN_OR_RETURN(ir::Value * sv,
                          graph.AddConstant(graph.FreshName(l.activation + "_scale"),
                                            Tensor::FromVector(DType::kFloat32, std::vector<float>{s.scale}, {})));
      Tensor zp = s.is_unsigned ? Tensor::FromVector(DType::kUInt8, std::vector<uint8_t>{0}, {})
                                : Tensor::FromVector(DType::kInt8, std::vector<int8_t>{0}, {});
      if (s.fp8) {
        zp = Tensor::Alloc(kFp8, {});
        *static_cast<uint8_t*>(zp.mutable_raw()) = 0;  // +0.0
      }
      SP_ASSIGN_OR_RETURN(ir::Value * zv, graph.AddConstant(graph.FreshName(l.activation + "_zero_point"), zp));
      SP_ASSIGN_OR_RETURN(ir::Value * xq, graph.AddValue(graph.FreshName(l.activation + "_quantized")));
      SP_ASSIGN_OR_RETURN(ir::Node * q,
                          graph.AddNode("QuantizeLinear", {x, sv, zv}, {xq}, graph.FreshName(l.activation + "_q")));
      SP_ASSIGN_OR_RETURN(xd, graph.AddValue(graph.FreshName(l.activation + "_dequantized")));
      SP_ASSIGN_OR_RETURN(ir::Node * dq,
                          graph.AddNode("DequantizeLinear", {xq, sv, zv}, {xd}, graph.FreshName(l.activation + "_dq")));
      // float8 needs opset 19 in the ONNX domain: Sampan's Q/DQ take it at any model opset.
      if (s.fp8) q->domain = dq->domain = "sampan";
    }
    n.SetInput(0, xd);
    const bool fp8 = sit->second.fp8;
    const int64_t axis = WeightAxis(n);
    auto [wq, ws] =
        fp8 ? QuantizeWeightFp8(n.input(1)->data, fp8_amax.at(l.activation)) : QuantizeWeight(n.input(1)->data, axis);
    const std::string wname = n.input(1)->name();
    SP_ASSIGN_OR_RETURN(ir::Value * wqv, graph.AddConstant(graph.FreshName(wname + (fp8 ? "_fp8" : "_int8")), wq));
    SP_ASSIGN_OR_RETURN(ir::Value * wsv, graph.AddConstant(graph.FreshName(wname + "_scale"), ws));
    SP_ASSIGN_OR_RETURN(ir::Value * wd, graph.AddValue(graph.FreshName(wname + "_dequantized")));
    SP_ASSIGN_OR_RETURN(ir::Node * dqw,
                        graph.AddNode("DequantizeLinear", {wqv, wsv}, {wd}, graph.FreshName(wname + "_dq")));
    dqw->attrs["axis"] = ir::Attribute::Int(axis);
    if (fp8) dqw->domain = "sampan";
    n.SetInput(1, wd);
    if (rep) rep->quantized.push_back(n.name);
  }
  graph.RemoveUnusedValues();
  SP_RETURN_IF_ERROR(graph.TopologicalSort());
  return ops::InferTypes(graph);
}

Result<QuantizationReport> QuantizeGraph(ir::Graph& graph, const BuildConfig& config) {
  const CalibrationConfig& c = config.calibration;
  QuantizationReport rep;
  std::vector<QuantizableLayer> layers = SelectQuantizable(graph, config, &rep.skipped);
  // The activations, once each, in graph order.
  std::vector<std::string> tensors;
  for (const auto& l : layers)
    if (std::find(tensors.begin(), tensors.end(), l.activation) == tensors.end()) tensors.push_back(l.activation);

  std::map<std::string, ActivationScale> scales;
  CalibrationCache cache;
  if (!c.cache_file.empty() && FileExists(c.cache_file)) {
    SP_ASSIGN_OR_RETURN(std::string text, ReadFile(c.cache_file));
    SP_ASSIGN_OR_RETURN(cache, CalibrationCache::Parse(text, c.cache_file));
    for (size_t i = 0; i < std::max(cache.tensors.size(), tensors.size()); ++i) {
      const std::string want = i < tensors.size() ? tensors[i] : "";
      const std::string have = i < cache.tensors.size() ? cache.tensors[i].first : "";
      if (want != have) {
        if (want.empty())
          return InvalidArgument("calibration cache '", c.cache_file, "' is for another graph: it has tensor '", have,
                                 "', which this graph does not quantize");
        return InvalidArgument("calibration cache '", c.cache_file, "' is for another graph: tensor '", want, "' ",
                               have.empty() ? "is missing" : StrCat("is not where it expects '", have, "'"),
                               " (delete the cache to calibrate again)");
      }
    }
    for (const auto& [name, s] : cache.tensors) {
      if (s.keep_float) continue;
      if (s.fp8 != c.fp8)
        return InvalidArgument("calibration cache '", c.cache_file, "' holds ", s.fp8 ? "fp8e4m3" : "int8",
                               " scales (tensor '", name, "'), this build quantizes to ", c.fp8 ? "FP8" : "INT8",
                               " (delete the cache to calibrate again)");
      scales[name] = s;
    }
    rep.method = "cache (" + cache.method + ")";
    rep.samples = cache.samples;
    rep.cache_read = true;
    rep.cache_hash = Fnv1a64(text);
  } else {
    if (c.data_dir.empty())
      return InvalidArgument(c.fp8 ? "--fp8" : "--int8", " needs --calibData DIR",
                             c.cache_file.empty() ? "" : " (the cache '", c.cache_file,
                             c.cache_file.empty() ? "" : "' does not exist yet)",
                             ", or a model with QuantizeLinear/DequantizeLinear nodes built without --int8");
    SP_ASSIGN_OR_RETURN(auto samples, LoadSamples(graph, config, c.data_dir, "--calibData"));
    if (config.progress)
      config.progress(StrCat("calibrating ", tensors.size(), " activations on ", samples.size(), " samples (",
                             CalibMethodName(c), ")"));
    SP_ASSIGN_OR_RETURN(auto stats, Collect(graph, tensors, samples, config, nullptr));
    if (c.method != CalibMethod::kMinMax) {
      SP_ASSIGN_OR_RETURN(stats, Collect(graph, tensors, samples, config, &stats));
    }
    cache.method = CalibMethodName(c);
    cache.samples = static_cast<int64_t>(samples.size());
    for (const std::string& name : tensors) {
      const Stats& s = stats[name];
      if (!(s.amax > 0)) {  // all zero (or never finite): no scale; its readers stay float
        cache.tensors.push_back({name, ActivationScale{0.f, false, true}});
        continue;
      }
      // float8 is signed only; its entropy threshold uses the 8-bit level count like int8's.
      const bool is_unsigned = s.min >= 0 && !c.fp8;
      double threshold = s.amax;
      if (c.method == CalibMethod::kEntropy)
        threshold = EntropyThreshold(s.hist, s.amax, is_unsigned ? 256 : 128);
      else if (c.method == CalibMethod::kPercentile)
        threshold = PercentileThreshold(s.hist, s.amax, c.percentile);
      const float scale = static_cast<float>(threshold / (c.fp8 ? kFp8Max : is_unsigned ? 255.0 : 127.0));
      if (!(scale > 0) || !std::isfinite(scale)) {
        cache.tensors.push_back({name, ActivationScale{0.f, false, true}});
        continue;
      }
      const ActivationScale as{scale, is_unsigned, false, c.fp8};
      cache.tensors.push_back({name, as});
      scales[name] = as;
    }
    const std::string text = cache.Serialize();
    rep.method = cache.method;
    rep.samples = cache.samples;
    rep.cache_hash = Fnv1a64(text);
    if (!c.cache_file.empty()) {
      std::ofstream out(c.cache_file, std::ios::binary | std::ios::trunc);
      out << text;
      if (!out) return Internal("cannot write the calibration cache '", c.cache_file, "'");
      rep.cache_written = true;
    }
  }

  // The accuracy gate (accuracy_gate.cpp) may put layers back in float.
  std::vector<QuantizableLayer> chosen = layers;
  if (!c.accuracy_dir.empty()) {
    SP_ASSIGN_OR_RETURN(chosen, RunAccuracyGate(graph, layers, scales, config, &rep));
  }
  SP_RETURN_IF_ERROR(InsertQdq(graph, chosen, scales, &rep));
  return rep;
}

}  // namespace sampan::builder
