// Kernel families of the CPU backend and the helpers their factories share.
//
// A family names a tactic ("onednn:conv", "cpu:eltwise"...). The builder asks
// each family whether it accepts a node (op type, dtypes, attributes: what is
// known before shapes are) and records the first that does; at run time the
// family builds the step for concrete shapes, or declines with kUnsupported
// (before touching the program) and the node runs the reference kernel.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/program.h"
#include "ops/conv_util.h"
#include "ops/fused.h"

namespace sampan::cpu {

class WinogradConv;

struct KernelFamily {
  const char* tactic;
  //! Static check: op type, dtypes, attributes.
  bool (*accepts)(const ir::Node& node);
  //! Builds the step for the shapes in `b`; kUnsupported = use the reference kernel.
  Status (*build)(ProgramBuilder& b, const ir::Node& node, int64_t opset);
};

//! Every family, in the order they are tried.
const std::vector<KernelFamily>& Families();
const KernelFamily* FindFamily(const std::string& tactic);
//! The first family accepting `node`; nullptr: reference kernel.
const KernelFamily* ChooseFamily(const ir::Node& node);
//! A string tensor among the node's inputs or outputs: it runs as a reference step, whose string
//! values live in object buffers (program.h), never in the arena.
bool TouchesStrings(const ir::Node& node);
inline constexpr const char* kReferenceTactic = "reference";

//! The reference kernel of ops/ as a step (plain buffers in and out).
Status BuildReferenceStep(ProgramBuilder& b, const ir::Node& node, int64_t opset);

// Families, one per file.
extern const KernelFamily kConvFamily;           // onednn_conv.cpp
extern const KernelFamily kConvTransposeFamily;  // onednn_conv.cpp
extern const KernelFamily kMatMulFamily;         // onednn_matmul.cpp
extern const KernelFamily kGemmFamily;           // onednn_matmul.cpp
extern const KernelFamily kPoolFamily;           // onednn_pool.cpp
extern const KernelFamily kUnaryFamily;          // eltwise.cpp
extern const KernelFamily kBinaryFamily;         // eltwise.cpp
extern const KernelFamily kSoftmaxFamily;        // softmax_norm.cpp
extern const KernelFamily kLayerNormFamily;      // softmax_norm.cpp
extern const KernelFamily kAddLayerNormFamily;   // softmax_norm.cpp
extern const KernelFamily kBatchNormFamily;      // softmax_norm.cpp
extern const KernelFamily kAttentionFamily;      // attention.cpp
extern const KernelFamily kViewFamily;           // data_movement.cpp
extern const KernelFamily kTransposeFamily;      // data_movement.cpp
extern const KernelFamily kConcatFamily;         // data_movement.cpp
extern const KernelFamily kSliceFamily;          // data_movement.cpp
extern const KernelFamily kSplitFamily;          // data_movement.cpp
extern const KernelFamily kGatherFamily;         // data_movement.cpp
extern const KernelFamily kCastFamily;           // data_movement.cpp
extern const KernelFamily kResizeFamily;         // resize.cpp
extern const KernelFamily kQuantizedFamily;      // onednn_quant.cpp
extern const KernelFamily kQdqFamily;            // onednn_quant.cpp
extern const KernelFamily kQAddFamily;           // onednn_quant.cpp
extern const KernelFamily kQPointwiseFamily;     // quantized_pointwise.cpp

// ---- helpers -----------------------------------------------------------------

//! True when every present input and output of `node` is float32 (as far as types are known).
bool AllFloat32(const ir::Node& node);
//! A sampan node's fused activation (ops::ReadActivation; kNone for other domains); Unsupported,
//! with the parser's reason, when its attributes do not parse.
Result<ops::FusedActivation> FusedActivationOf(const ir::Node& node);
//! Appends the oneDNN eltwise post-op(s) computing `act` (none for kNone).
void AppendActivation(dnnl::post_ops& po, const ops::FusedActivation& act);

//! True when `md` is a strided layout without blocking (plain, or a permuted view of plain memory);
//! *strides receives its strides in elements.
bool StridedLayout(const dnnl::memory::desc& md, dnnl::memory::dims* strides);

//! A dense float32 layout (every byte an element: no padded channels, no offset) that is
//! channel-blocked (nChw8c, nChw16c: one inner block, on axis 1) or channels-last (nhwc):
//! the layouts oneDNN's convolutions leave. Elementwise kernels run on such a buffer as it
//! is, with no reorder to plain and back.
bool DenseBlockedLayout(const dnnl::memory::desc& md);
//! A float32 layout blocked on the channels (nChw16c...) whose only padding is that of the
//! channels (24 channels stored as 32), dense otherwise: md.get_size() bytes hold every element
//! and the zero padding, and an elementwise op with op(0) == 0 can run over all of it.
bool PaddedChannelBlockedLayout(const dnnl::memory::desc& md);
//! The memory order of a DenseBlockedLayout: physical axes outermost first, each with its
//! size, the logical dim it indexes and the multiplier of its index in that dim (an outer
//! channel-block axis counts in blocks of `block`, its inner axis in ones).
struct PhysicalAxis {
  int64_t size;
  int dim;
  int64_t scale;
};
std::vector<PhysicalAxis> PhysicalAxes(const dnnl::memory::desc& md);
//! Element stride of each PhysicalAxes(md) entry.
std::vector<int64_t> PhysicalStrides(const dnnl::memory::desc& md);
//! The DenseBlockedLayout `md` has (same axis order and channel block) for a tensor of `dims`;
//! nullopt when md is no DenseBlockedLayout, the rank differs, or dims' channels are not a
//! multiple of the block (the result would need padding).
std::optional<dnnl::memory::desc> DenseLayoutLike(const dnnl::memory::desc& md, const dnnl::memory::dims& dims);
//! True when `v` is no graph output and every reader of it runs on a DenseBlockedLayout as it
//! is (convolutions, pooling, elementwise ops, Concat, Resize): an op whose output grows
//! (Resize) keeps its input's layout only then, so that no larger reorder follows it.
bool ReadersTakeBlockedLayout(const ProgramBuilder& b, const ir::Value* v);

//! A step running one oneDNN primitive on program buffers and fixed memories.
//! Arguments are bound once; Run() hands oneDNN a prepared argument array.
class DnnlStep : public Kernel {
 public:
  DnnlStep(dnnl::primitive prim, const dnnl::engine& eng) : prim_(std::move(prim)), eng_(eng) {}
  //! Argument `arg` lives in program buffer `buffer` with layout `md`.
  void AddBuffer(int arg, int buffer, const dnnl::memory::desc& md) { args_.push_back({arg, buffer, md, {}}); }
  //! Argument `arg` is fixed memory (reordered weights).
  void AddFixed(int arg, dnnl::memory mem) { args_.push_back({arg, -1, mem.get_desc(), mem}); }
  Status Bind(const std::vector<void*>& ptrs) override;
  Status Run(const RunCtx& ctx) override;

 private:
  struct Arg {
    int arg;
    int buffer;
    dnnl::memory::desc md;
    dnnl::memory mem;
  };
  dnnl::primitive prim_;
  dnnl::engine eng_;
  std::vector<Arg> args_;
  std::vector<dnnl_exec_arg_t> c_args_;
};

//! Adds a reorder step writing `src_buffer` (layout src) into `dst_buffer` (layout dst).
Status AddReorderStep(ProgramBuilder& b, int src_buffer, const dnnl::memory::desc& src, int dst_buffer,
                      const dnnl::memory::desc& dst, const std::string& label);

//! Weights: a constant input in the layout a primitive wants (reordered once per engine).
Result<dnnl::memory> ConstantIn(ProgramBuilder& b, const ir::Value* v, const dnnl::memory::desc& logical,
                                const dnnl::memory::desc& want);

//! A convolution's oneDNN geometry (Conv attributes of `node`, input x, weight w, output y
//! shapes): pads matching the output size exactly, dilations counted from 0, weight dims grouped
//! ([G, OC/G, IC/G, k...]) when group > 1. kUnsupported when oneDNN cannot express it.
struct ConvGeometry {
  ops::SpatialAttrs attrs;  //!< ONNX meaning
  int64_t group = 1;
  dnnl::memory::dims strides, dilations, pad_l, pad_r, weights;
  //! The plain layout of the weights as oneDNN describes them (oiw/oihw/oidhw, g-prefixed).
  dnnl::memory::format_tag weights_tag = dnnl::memory::format_tag::undef;
};
Result<ConvGeometry> MakeConvGeometry(const ir::Node& node, const Shape& x, const Shape& w, const Shape& y);

//! A convolution as BuildConv lowered it, for tactics other than oneDNN's primitive.
struct ConvTactic {
  Shape x, y;                              //!< input and output shapes (N, C, spatial...)
  const float* weights = nullptr;          //!< [K][C/group][kernel...] row-major
  const Tensor* weights_tensor = nullptr;  //!< the tensor `weights` points into (WeightCache keys)
  dnnl::memory::desc weights_md;           //!< that layout as oneDNN describes it (grouped dims when group > 1)
  const float* bias = nullptr;             //!< [K] or null
  Shape kernel, strides, dilations;        //!< ONNX meaning (dilation 1: dense)
  int64_t group = 1, pad_t = 0, pad_l = 0;
  bool sum = false;                 //!< residual added before the activation
  ops::FusedActivation activation;  //!< applied after the residual
  std::string node;                 //!< the convolution's node name (the plan records its algorithm by it)
};

//! Winograd F(2x2 or 4x4, 3x3) for this convolution when it applies (3x3, stride 1,
//! nChw8c as `pd` chose) and times faster than `pd` (conv_winograd.cpp); null: run `pd`.
Result<std::shared_ptr<const WinogradConv>> ChooseWinograd(ProgramBuilder& b, const ConvTactic& in,
                                                           const dnnl::convolution_forward::primitive_desc& pd);
//! The step running `conv` from buffer `src` into `dst` (both nChw8c).
void AddWinogradStep(ProgramBuilder& b, std::shared_ptr<const WinogradConv> conv, int src, int dst,
                     const std::string& label);

//! 2-D MaxPool on an nChw8c input (max_pool_blocked.cpp), oneDNN-style attributes
//! (dilation counted from 0); false (program untouched) when it does not apply.
Result<bool> BuildMaxPoolBlocked(ProgramBuilder& b, const ir::Node& node, const dnnl::memory::dims& kernel,
                                 const dnnl::memory::dims& strides, const dnnl::memory::dims& dilations,
                                 const dnnl::memory::dims& pads_begin);

//! A 2-D ConvTranspose with kernel == stride, fewer than 8 output channels and at most 64
//! outputs per input pixel, on our
//! kernel (deconv_upsample.cpp); false (program untouched) when it does not apply.
Result<bool> BuildUpsampleDeconv(ProgramBuilder& b, const ir::Node& node);

//! Parallel-for over [0, n) in chunks, on ctx.threads OpenMP threads (serial when small).
template <class Fn>
void ParallelFor(const RunCtx& ctx, int64_t n, int64_t grain, Fn&& fn) {
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(ctx.threads, n / std::max<int64_t>(grain, 1)));
  if (chunks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    if (b < e) fn(b, e);
  }
}

}  // namespace sampan::cpu
