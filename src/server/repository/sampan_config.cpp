// The sampan section of config.pbtxt, Sampan's own (Triton has no such field): precision and
// INT8/FP8 calibration with its accuracy gate, image inputs, batch buckets, the latency SLO
// and per-input shape profiles; each error at its field (CheckSampan, called by the validator
// in model_config.cpp).
#include <cmath>
#include <set>
#include <string>

#include "server/repository/config_check.h"

namespace sampan::server {

namespace pb = ::google::protobuf;
namespace sc = ::sampan::serverconfig;
using CC = ConfigChecker;

namespace {

// The shape a tensor has inside the model: reshape when given, else dims.
template <class T>
const pb::RepeatedField<int64_t>& ModelShape(const T& t) {
  return t.has_reshape() ? t.reshape().shape() : t.dims();
}

}  // namespace

Status CheckSampan(const ConfigChecker& ck, const sc::ModelConfig& c, const ConfigChecker::Tree* root) {
  if (!c.has_sampan()) return Status::Ok();
  const pb::Descriptor* cd = sc::ModelConfig::descriptor();
  const pb::Descriptor* sd = sc::SampanConfig::descriptor();
  const pb::Descriptor* pd = sc::SampanConfig::Profile::descriptor();
  const auto& s = c.sampan();
  const ConfigChecker::Tree* st = CC::Sub(root, cd, "sampan");
  ConfigLoc here = CC::At(root, cd, "sampan");
  if (s.fan_out_size() > 0 && c.platform() != "ensemble")
    return ck.Fail(CC::First({CC::At(st, sd, "fan_out", 0), here}), "sampan.fan_out",
                   "is for ensembles (platform \"ensemble\"): it makes one of their steps fan out");
  // The builder's precisions (builder/builder.h ParsePrecision); kept here so
  // the repository does not link the builder.
  static const std::set<std::string> kPrecisions = {"fp32", "tf32", "fp16", "bf16", "int8", "fp8"};
  if (!s.precision().empty() && !kPrecisions.count(s.precision()))
    return ck.Fail(CC::First({CC::At(st, sd, "precision"), here}), "sampan.precision",
                   StrCat("unknown precision '", s.precision(), "' (expected fp32, tf32, fp16, bf16, int8 or fp8)"));
  // INT8 / FP8: calibration data (a directory inside the model's), method, accuracy gate.
  const bool int8 = s.precision() == "int8" || s.precision() == "fp8";
  auto inside = [](const std::string& dir) {
    return !dir.empty() && dir[0] != '/' && dir != ".." && dir.rfind("../", 0) != 0 &&
           dir.find("/../") == std::string::npos && (dir.size() < 3 || dir.compare(dir.size() - 3, 3, "/..") != 0);
  };
  for (const char* field : {"calibration_data", "calibration_method", "accuracy_data", "accuracy_metric"}) {
    const pb::FieldDescriptor* f = sd->FindFieldByName(field);
    const std::string v = sc::SampanConfig::GetReflection()->GetString(s, f);
    if (!v.empty() && !int8)
      return ck.Fail(CC::First({CC::At(st, sd, field), here}), StrCat("sampan.", field),
                     "needs precision: \"int8\" or \"fp8\"");
  }
  if (s.accuracy_bound() != 0 && !int8)
    return ck.Fail(CC::First({CC::At(st, sd, "accuracy_bound"), here}), "sampan.accuracy_bound",
                   "needs precision: \"int8\" or \"fp8\"");
  if (int8) {
    if (s.calibration_data().empty())
      return ck.Fail(
          CC::First({CC::At(st, sd, "precision"), here}), "sampan.calibration_data",
          StrCat("precision \"", s.precision(),
                 "\" needs calibration_data: a directory of INPUT.K.npy samples (or images, for an image input "
                 "format) in the model's directory"));
    for (const char* field : {"calibration_data", "accuracy_data"}) {
      const std::string v = sc::SampanConfig::GetReflection()->GetString(s, sd->FindFieldByName(field));
      if (!v.empty() && !inside(v))
        return ck.Fail(
            CC::First({CC::At(st, sd, field), here}), StrCat("sampan.", field),
            StrCat("'", v, "' must be a directory inside the model's directory (a relative path without '..')"));
    }
    const std::string& m = s.calibration_method();
    if (!m.empty() && m != "entropy" && m != "minmax" && m != "percentile" && m.rfind("percentile=", 0) != 0)
      return ck.Fail(CC::First({CC::At(st, sd, "calibration_method"), here}), "sampan.calibration_method",
                     StrCat("'", m, "' is not one of entropy, minmax, percentile[=P]"));
    const std::string& am = s.accuracy_metric();
    if (!am.empty() && am != "cosine" && am != "rel_l2" && am != "top1")
      return ck.Fail(CC::First({CC::At(st, sd, "accuracy_metric"), here}), "sampan.accuracy_metric",
                     StrCat("'", am, "' is not one of cosine, rel_l2, top1"));
    if (s.accuracy_data().empty() != (s.accuracy_bound() == 0))
      return ck.Fail(CC::First({CC::At(st, sd, s.accuracy_data().empty() ? "accuracy_bound" : "accuracy_data"), here}),
                     "sampan.accuracy_data", "accuracy_data and accuracy_bound go together");
    if (!std::isfinite(s.accuracy_bound()) || s.accuracy_bound() < 0)
      return ck.Fail(CC::First({CC::At(st, sd, "accuracy_bound"), here}), "sampan.accuracy_bound",
                     StrCat("must be a positive number, got ", s.accuracy_bound()));
  }
  for (int i = 0; i < s.image_input_size(); ++i) {
    const auto& im = s.image_input(i);
    const std::string path = StrCat("sampan.image_input[", i, "]");
    if (im.format() != "uint8-nhwc")
      return ck.Fail(here, path, StrCat("format '", im.format(), "' is not supported (expected \"uint8-nhwc\")"));
    if (im.mean_size() && im.std_size() && im.mean_size() != im.std_size())
      return ck.Fail(here, path, StrCat("mean has ", im.mean_size(), " values but std has ", im.std_size()));
    for (float v : im.std())
      if (!(v > 0)) return ck.Fail(here, path, StrCat("std values must be > 0 (got ", v, ")"));
  }
  if (s.latency_slo_ms() < 0 || !std::isfinite(s.latency_slo_ms()))
    return ck.Fail(CC::First({CC::At(st, sd, "latency_slo_ms"), here}), "sampan.latency_slo_ms",
                   StrCat("must be a positive number of milliseconds (0 = none), got ", s.latency_slo_ms()));
  if (s.batch_buckets_size() > 0) {
    ConfigLoc bloc = CC::First({CC::At(st, sd, "batch_buckets"), here});
    const bool off = s.batch_buckets_size() == 1 && s.batch_buckets(0) == 0;
    if (!off && c.max_batch_size() <= 0)
      return ck.Fail(bloc, "sampan.batch_buckets", "needs max_batch_size > 0 (the model does not batch)");
    for (int i = 0; i < s.batch_buckets_size() && !off; ++i) {
      const int64_t b = s.batch_buckets(i);
      const std::string path = StrCat("sampan.batch_buckets[", i, "]");
      if (b < 1 || b > c.max_batch_size())
        return ck.Fail(bloc, path,
                       StrCat("must be in 1..max_batch_size (", c.max_batch_size(), "), got ", b,
                              " ([ 0 ] alone turns padding off)"));
      if (i > 0 && b <= s.batch_buckets(i - 1))
        return ck.Fail(bloc, path, StrCat("sizes must increase (", s.batch_buckets(i - 1), " then ", b, ")"));
    }
  }
  std::set<std::string> seen;
  const int batch = c.max_batch_size() > 0 ? 1 : 0;
  for (int i = 0; i < s.profiles_size(); ++i) {
    const auto& p = s.profiles(i);
    const ConfigChecker::Tree* pt = CC::Sub(st, sd, "profiles", i);
    ConfigLoc ploc = CC::First({CC::At(pt, pd, "input"), CC::At(st, sd, "profiles", i), here});
    std::string path = StrCat("sampan.profiles[", i, "]");
    const sc::ModelInput* in = nullptr;
    for (const auto& candidate : c.input())
      if (candidate.name() == p.input()) in = &candidate;
    if (!in) return ck.Fail(ploc, path, StrCat("input '", p.input(), "' is not an input of the model"));
    if (!seen.insert(p.input()).second)
      return ck.Fail(ploc, path, StrCat("input '", p.input(), "' already has a profile"));
    path = StrCat("sampan profile of '", p.input(), "'");
    const auto& shape = ModelShape(*in);
    const size_t rank = shape.size() + batch;
    const std::pair<const char*, const pb::RepeatedField<int64_t>*> lists[] = {
        {"min", &p.min()}, {"opt", &p.opt()}, {"max", &p.max()}};
    for (const auto& [name, list] : lists)
      if (static_cast<size_t>(list->size()) != rank)
        return ck.Fail(CC::First({CC::At(pt, pd, name), ploc}), StrCat(path, ": ", name),
                       StrCat("has ", list->size(), " dimensions, the input has ", rank,
                              batch ? " (batch dimension included)" : ""));
    for (size_t k = 0; k < rank; ++k) {
      int64_t lo = p.min(k), mid = p.opt(k), hi = p.max(k);
      if (lo < 0 || lo > mid || mid > hi)
        return ck.Fail(CC::First({CC::At(pt, pd, "min"), ploc}), StrCat(path, ": dimension ", k),
                       StrCat("needs 0 <= min <= opt <= max (got ", lo, ", ", mid, ", ", hi, ")"));
      if (batch && k == 0 && hi > c.max_batch_size())
        return ck.Fail(CC::First({CC::At(pt, pd, "max"), ploc}), StrCat(path, ": max[0]"),
                       StrCat("batch ", hi, " exceeds max_batch_size ", c.max_batch_size()));
      if (k >= static_cast<size_t>(batch)) {
        int64_t fixed = shape[k - batch];
        if (fixed != -1 && (lo != fixed || hi != fixed))
          return ck.Fail(CC::First({CC::At(pt, pd, "min"), ploc}), StrCat(path, ": dimension ", k),
                         StrCat("is fixed at ", fixed, " by the config, but the profile spans [", lo, ", ", hi, "]"));
      }
    }
  }
  return Status::Ok();
}

}  // namespace sampan::server
