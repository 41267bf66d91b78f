// Col2Im (opset 18): the inverse of an im2col, summing overlapping blocks. Input
// [N, C * prod(block_shape), L] holds, for each of the L sliding-block positions (row-major
// over the spatial grid they form), C blocks of block_shape values; the output is
// [N, C, image_shape...]. dilations, pads ([begin..., end...]) and strides as in Conv.
#include "ops/common.h"
#include "ops/index_util.h"

namespace sampan::ops {
namespace {

struct Col2ImGeometry {
  std::vector<int64_t> image, block, dil, pads, strides, blocks;  // blocks: positions per spatial dim
  int64_t channels = 0;
};

Result<Col2ImGeometry> Geometry(const InferContext& ctx, const Tensor& image, const Tensor& block,
                                const std::optional<int64_t>& rows, const std::optional<int64_t>& cols) {
  Col2ImGeometry g;
  SP_ASSIGN_OR_RETURN(g.image, ToInt64Vector(image, "image_shape"));
  SP_ASSIGN_OR_RETURN(g.block, ToInt64Vector(block, "block_shape"));
  const size_t k = g.image.size();
  if (k == 0 || g.block.size() != k)
    return ctx.Error("image_shape and block_shape must have the same number (>= 1) of values, got ", k, " and ",
                     g.block.size());
  const ir::Node& n = ctx.node();
  g.dil = n.has_attr("dilations") ? n.attr_ints("dilations") : std::vector<int64_t>(k, 1);
  g.strides = n.has_attr("strides") ? n.attr_ints("strides") : std::vector<int64_t>(k, 1);
  g.pads = n.has_attr("pads") ? n.attr_ints("pads") : std::vector<int64_t>(2 * k, 0);
  if (g.dil.size() != k || g.strides.size() != k || g.pads.size() != 2 * k)
    return ctx.Error("dilations and strides need ", k, " values and pads ", 2 * k);
  int64_t block_size = 1, positions = 1;
  for (size_t d = 0; d < k; ++d) {
    if (g.image[d] < 1 || g.block[d] < 1 || g.dil[d] < 1 || g.strides[d] < 1 || g.pads[d] < 0 || g.pads[d + k] < 0)
      return ctx.Error("image_shape, block_shape, dilations and strides must be >= 1 and pads >= 0 (dim ", d, ")");
    const int64_t span = g.dil[d] * (g.block[d] - 1) + 1;
    const int64_t padded = g.image[d] + g.pads[d] + g.pads[d + k];
    if (padded < span)
      return ctx.Error("a block of span ", span, " does not fit the padded image (", padded, ") in dim ", d);
    g.blocks.push_back((padded - span) / g.strides[d] + 1);
    block_size *= g.block[d];
    positions *= g.blocks.back();
  }
  if (rows) {
    if (*rows % block_size != 0)
      return ctx.Error("input dim 1 (", *rows, ") is not a multiple of the block size ", block_size);
    g.channels = *rows / block_size;
  }
  if (cols && *cols != positions)
    return ctx.Error("input dim 2 (", *cols, ") must be the ", positions, " block positions");
  return g;
}

Status InferCol2Im(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 3));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  for (size_t i : {1, 2})
    if (ctx.input_dtype(i) != DType::kInt64) return ctx.Error("input ", i, " must be int64");
  const auto& in = ctx.input_dims(0);
  if (in && in->size() != 3) return ctx.Error("input must be [N, C * prod(block_shape), L], got rank ", in->size());
  const Tensor* image = ctx.input_value(1);
  const Tensor* block = ctx.input_value(2);
  if (!image || !block) {  // known at run time: the output's rank comes from image_shape's length
    const auto& id = ctx.input_dims(1);
    if (!id || id->size() != 1 || !(*id)[0].known()) return ctx.NotSupported("an image_shape of unknown length");
    ir::Dims out{in ? (*in)[0] : ir::Dim::Unknown(), ir::Dim::Unknown()};
    for (int64_t i = 0; i < (*id)[0].value; ++i) out.push_back(ir::Dim::Unknown());
    ctx.set_output(0, ctx.input_dtype(0), out);
    return Status::Ok();
  }
  auto known = [&](size_t i) { return in && (*in)[i].known() ? std::optional<int64_t>((*in)[i].value) : std::nullopt; };
  SP_ASSIGN_OR_RETURN(Col2ImGeometry g, Geometry(ctx, *image, *block, known(1), known(2)));
  ir::Dims out{in ? (*in)[0] : ir::Dim::Unknown(), known(1) ? ir::Dim::Known(g.channels) : ir::Dim::Unknown()};
  for (int64_t v : g.image) out.push_back(ir::Dim::Known(v));
  ctx.set_output(0, ctx.input_dtype(0), out);
  return Status::Ok();
}

Status RunCol2Im(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  SP_ASSIGN_OR_RETURN(Col2ImGeometry g, Geometry(*ctx.infer, ctx.in(1), ctx.in(2), x.dim(1), x.dim(2)));
  const size_t k = g.image.size();
  const int64_t n = x.dim(0), c = g.channels, positions = x.dim(2);
  const int64_t block_size = x.dim(1) / std::max<int64_t>(c, 1), image_size = y.numel() / std::max<int64_t>(n * c, 1);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using A = ComputeType<T>;
      const T* px = x.data<T>();
      T* py = y.mutable_data<T>();
      std::vector<A> acc(static_cast<size_t>(image_size));
      std::vector<int64_t> pos(k), off(k);
      for (int64_t b = 0; b < n * c; ++b) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t e = 0; e < block_size; ++e) {
          int64_t r = e;  // the offset inside the block, row-major over block_shape
          for (size_t d = k; d-- > 0;) {
            off[d] = r % g.block[d];
            r /= g.block[d];
          }
          for (int64_t l = 0; l < positions; ++l) {
            int64_t q = l;  // the block position, row-major over the position grid
            for (size_t d = k; d-- > 0;) {
              pos[d] = q % g.blocks[d];
              q /= g.blocks[d];
            }
            int64_t idx = 0;
            bool inside = true;
            for (size_t d = 0; d < k && inside; ++d) {
              const int64_t p = pos[d] * g.strides[d] - g.pads[d] + off[d] * g.dil[d];
              inside = p >= 0 && p < g.image[d];
              idx = idx * g.image[d] + p;
            }
            if (inside) acc[static_cast<size_t>(idx)] += static_cast<A>(px[(b * block_size + e) * positions + l]);
          }
        }
        for (int64_t i = 0; i < image_size; ++i)
          py[b * image_size + i] = ConvertElement<T>(acc[static_cast<size_t>(i)]);
      }
    }
  });
}

SAMPAN_REGISTER_OP("Col2Im", InferCol2Im, RunCol2Im);

}  // namespace
}  // namespace sampan::ops
