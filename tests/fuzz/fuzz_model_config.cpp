// A Triton config.pbtxt as the repository reads it: ParseModelConfig (text
// format plus the semantic checks) for a model directory named "m"; a config
// it accepts must pass ValidateModelConfig again on its own.
#include "fuzz_util.h"
#include "server/repository/model_config.h"

using namespace sampan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = server::ParseModelConfig(text, "m/config.pbtxt", "m");
  if (!config.ok()) {
    fuzz::ExpectExplained(config.status(), "ParseModelConfig");
    return 0;
  }
  fuzz::Reached("accepted");
  fuzz::ExpectOk(server::ValidateModelConfig(*config, "m/config.pbtxt", "m"), "ValidateModelConfig(accepted config)");
  return 0;
}
