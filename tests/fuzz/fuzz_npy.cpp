// .npy bytes (inputs of `sampan run`/`bench`, test data): ParseNpy, and for
// what it accepts, serialize and parse again to the same tensor.
#include <cstring>

#include "base/npy.h"
#include "fuzz_util.h"

using namespace sampan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Result<Tensor> t = ParseNpy(bytes, "fuzz.npy");
  if (!t.ok()) {
    fuzz::ExpectExplained(t.status(), "ParseNpy");
    return 0;
  }
  fuzz::Reached("accepted");
  Result<Tensor> again = ParseNpy(SerializeNpy(*t), "fuzz round trip");
  fuzz::ExpectOk(again.status(), "ParseNpy(SerializeNpy(accepted))");
  if (again->dtype() != t->dtype() || again->shape() != t->shape() || again->nbytes() != t->nbytes() ||
      (t->nbytes() && std::memcmp(again->raw(), t->raw(), t->nbytes()) != 0))
    fuzz::Fail("npy round trip changed the tensor");
  return 0;
}
