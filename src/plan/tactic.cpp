#include <charconv>
#include <sstream>

#include "plan/plan.h"

namespace sampan::plan {

std::string Tactic::ToString() const {
  std::string s = family;
  auto add = [&](const std::string& t) { s += (s.empty() ? "" : " ") + t; };
  if (algo >= 0) add("algo=" + std::to_string(algo));
  if (tf32) add("tf32");
  if (nhwc) add("nhwc");
  return s;
}

Result<Tactic> Tactic::Parse(const std::string& text) {
  Tactic t;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    if (word.rfind("algo=", 0) == 0) {
      const std::string v = word.substr(5);
      int a = -1;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), a);
      if (v.empty() || ec != std::errc() || end != v.data() + v.size() || a < 0)
        return InvalidArgument("tactic '", text, "': '", word, "' is not algo=<non-negative integer>");
      t.algo = a;
    } else if (word == "tf32") {
      t.tf32 = true;
    } else if (word == "nhwc") {
      t.nhwc = true;
    } else {
      t.family += (t.family.empty() ? "" : " ") + word;
    }
  }
  return t;
}

}  // namespace sampan::plan
