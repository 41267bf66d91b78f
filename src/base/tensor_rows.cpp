#include "base/tensor_rows.h"

#include <memory>
#include <string>

namespace sampan {

Tensor RowSlice(const Tensor& t, int64_t begin, int64_t count) {
  Shape shape = t.shape();
  shape[0] = count;
  const int64_t rows = t.dim(0);
  const int64_t per_row = rows > 0 ? t.numel() / rows : 0;
  const size_t offset = t.is_string() ? static_cast<size_t>(begin * per_row) * sizeof(std::string)
                                      : DTypeBytes(t.dtype(), begin * per_row);
  auto owner = std::make_shared<Tensor>(t);
  return Tensor::Wrap(t.dtype(), std::move(shape), std::move(owner), static_cast<const char*>(t.raw()) + offset);
}

}  // namespace sampan
