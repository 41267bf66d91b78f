#include "cli/shapes.h"

namespace sampan::cli {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return out;
}

Result<Shape> ParseDims(const std::string& text, const std::string& what) {
  Shape shape;
  if (text.empty()) return InvalidArgument(what, ": empty shape");
  for (const std::string& item : Split(text, 'x')) {
    char* end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0)
      return InvalidArgument(what, ": '", item, "' in '", text, "' is not a dimension (write e.g. 1x3x224x224)");
    shape.push_back(v);
  }
  return shape;
}

Result<std::map<std::string, Shape>> ParseShapeList(const std::string& spec, const std::string& flag) {
  std::map<std::string, Shape> out;
  if (spec.empty()) return out;
  for (const std::string& item : Split(spec, ',')) {
    size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return InvalidArgument(flag, " '", item, "' must look like NAME:1x3x224x224");
    std::string name = item.substr(0, colon);
    if (name.size() >= 2 && name.front() == '\'' && name.back() == '\'') name = name.substr(1, name.size() - 2);
    SP_ASSIGN_OR_RETURN(Shape s, ParseDims(item.substr(colon + 1), StrCat(flag, " ", name)));
    if (!out.emplace(name, s).second) return InvalidArgument(flag, ": input '", name, "' given twice");
  }
  return out;
}

Result<std::vector<plan::Profile>> ParseProfiles(const std::string& min, const std::string& opt, const std::string& max,
                                                 const std::vector<std::string>& profiles) {
  std::vector<plan::Profile> out;
  if (!min.empty() || !opt.empty() || !max.empty()) {
    SP_ASSIGN_OR_RETURN(auto mins, ParseShapeList(min, "--minShapes"));
    SP_ASSIGN_OR_RETURN(auto opts, ParseShapeList(opt, "--optShapes"));
    SP_ASSIGN_OR_RETURN(auto maxs, ParseShapeList(max, "--maxShapes"));
    // As trtexec: a missing opt defaults to max (else min); missing min/max to opt.
    std::map<std::string, bool> names;
    for (auto* m : {&mins, &opts, &maxs})
      for (auto& [n, s] : *m) names[n] = true;
    plan::Profile p;
    for (auto& [n, unused] : names) {
      plan::ShapeRange r;
      r.opt = opts.count(n) ? opts[n] : (maxs.count(n) ? maxs[n] : mins[n]);
      r.min = mins.count(n) ? mins[n] : r.opt;
      r.max = maxs.count(n) ? maxs[n] : r.opt;
      p[n] = r;
    }
    out.push_back(std::move(p));
  }
  for (const std::string& spec : profiles) {
    plan::Profile p;
    for (const std::string& item : Split(spec, ',')) {
      size_t colon = item.rfind(':');
      if (colon == std::string::npos || colon == 0)
        return InvalidArgument("--profile '", item,
                               "' must look like NAME:MIN/OPT/MAX (e.g. x:1x3x224x224/8x3x224x224/16x3x224x224)");
      std::string name = item.substr(0, colon);
      auto parts = Split(item.substr(colon + 1), '/');
      if (parts.size() != 3) return InvalidArgument("--profile '", item, "': need MIN/OPT/MAX shapes");
      plan::ShapeRange r;
      SP_ASSIGN_OR_RETURN(r.min, ParseDims(parts[0], "--profile " + name + " min"));
      SP_ASSIGN_OR_RETURN(r.opt, ParseDims(parts[1], "--profile " + name + " opt"));
      SP_ASSIGN_OR_RETURN(r.max, ParseDims(parts[2], "--profile " + name + " max"));
      if (!p.emplace(name, r).second)
        return InvalidArgument("--profile: input '", name, "' given twice in one profile");
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace sampan::cli
