// The IR's text form (tests and `sampan` debugging dumps): ParseGraph; for a
// graph it accepts that also verifies, printing and parsing again must agree.
#include "fuzz_util.h"
#include "ir/graph.h"
#include "ir/text.h"

using namespace sampan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto g = ir::ParseGraph(text);
  if (!g.ok()) {
    fuzz::ExpectExplained(g.status(), "ParseGraph");
    return 0;
  }
  fuzz::Reached("parsed");
  if (!ir::Verify(**g).ok()) return 0;
  fuzz::Reached("verified");
  // The round trip prints every constant value; past 64 Ki values (the parser takes
  // up to 16 Mi per constant) that measures the printer's speed, not correctness.
  int64_t values = 0;
  for (const ir::Value* v : (*g)->values())
    if (v->is_constant()) values += v->data.numel();
  if (values > (int64_t{1} << 16)) return 0;  // parsed but inconsistent: Verify says why
  ir::PrintOptions all;
  all.max_elements = -1;
  const std::string printed = ir::PrintGraph(**g, all);
  auto again = ir::ParseGraph(printed);
  fuzz::ExpectOk(again.status(), "ParseGraph(PrintGraph(verified graph))");
  if (ir::PrintGraph(**again, all) != printed) fuzz::Fail("print -> parse -> print is not stable:\n" + printed);
  return 0;
}
