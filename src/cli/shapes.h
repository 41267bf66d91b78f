// trtexec-style shape arguments: "input:1x3x224x224,mask:1x128".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "plan/plan.h"

namespace sampan::cli {

//! The pieces of `s` between `sep`s (empty pieces kept; "" gives one empty piece).
std::vector<std::string> Split(const std::string& s, char sep);

//! "1x3x224x224" -> {1,3,224,224}; `what` names the flag in errors.
Result<Shape> ParseDims(const std::string& text, const std::string& what);
//! "a:1x3,b:2x4" -> {a:[1,3], b:[2,4]}. The last ':' of each item splits name and dims.
Result<std::map<std::string, Shape>> ParseShapeList(const std::string& spec, const std::string& flag);
//! Profiles from --minShapes/--optShapes/--maxShapes (one profile) and each
//! --profile "name:MIN/OPT/MAX,name2:MIN/OPT/MAX" (one profile each).
Result<std::vector<plan::Profile>> ParseProfiles(const std::string& min, const std::string& opt, const std::string& max,
                                                 const std::vector<std::string>& profiles);

}  // namespace sampan::cli
