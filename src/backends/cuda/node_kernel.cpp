// The op dispatch of the CUDA backend: one table from (domain, op) to a kernel
// family's factory. The families live in their own files (families.h).
#include "backends/cuda/node_kernel.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "backends/cuda/attention_kernel.h"
#include "backends/cuda/conv_kernel.h"
#include "backends/cuda/conv_pool_kernel.h"
#include "backends/cuda/conv_transpose.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cumsum_kernel.h"
#include "backends/cuda/einsum_kernel.h"
#include "backends/cuda/families.h"
#include "backends/cuda/index_kernel.h"
#include "backends/cuda/logical_op.h"
#include "backends/cuda/norm_kernel.h"
#include "backends/cuda/pad_kernel.h"
#include "backends/cuda/reduce_kernel.h"
#include "backends/cuda/resize_kernel.h"
#include "backends/cuda/split_kernel.h"

namespace sampan::cuda {
namespace {

struct Family {
  const char* name;  //!< for reports ("cudnn conv", "reduce")
  KernelFactory make;
  LayoutSupport layout = LayoutSupport::kNone;
};
constexpr LayoutSupport kAny = LayoutSupport::kAny, kSame = LayoutSupport::kSame;

// Inference Dropout that also writes its mask (a graph output, or read): y = x, mask all true.
class DropoutMaskKernel : public NodeKernel {
 public:
  DropoutMaskKernel(size_t y_bytes, size_t mask_bytes) : y_bytes_(y_bytes), mask_bytes_(mask_bytes) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (y_bytes_ > 0) SP_CUDA(cudaMemcpyAsync(out[0], in[0], y_bytes_, cudaMemcpyDeviceToDevice, env.stream));
    if (mask_bytes_ > 0) SP_CUDA(cudaMemsetAsync(out[1], 1, mask_bytes_, env.stream));  // bool true
    return Status::Ok();
  }
  const char* family() const override { return "copy"; }

 private:
  size_t y_bytes_, mask_bytes_;
};

Result<KernelChoice> MakeView(const KernelRequest& r) {
  // Dropout passes its input through unless it is random: training_mode true (or
  // computed on the device) with a ratio not known to be 0 (torch exports training_mode
  // true with ratio 0 for eval-mode dropout). A mask output that is read needs a kernel.
  if (r.node.op_type == "Dropout") {
    auto known_zero = [&](size_t i) {
      return i < r.in.size() && r.in[i].present && r.in[i].host && r.in[i].host->numel() == 1 &&
             ElementAsDouble(*r.in[i].host, 0) == 0;
    };
    const bool training_off = r.in.size() <= 2 || !r.in[2].present || known_zero(2);
    if (!training_off && !known_zero(1))
      return Unsupported(r.node.Label(),
                         ": Dropout in training mode (random) or with training_mode computed at run time");
    if (r.node.num_outputs() > 1 && r.node.output(1) != nullptr) {
      // The mask may be a graph output even when nothing reads it: write it.
      if (r.out.size() < 2 || r.out[1].dtype != DType::kBool)
        return Unsupported(r.node.Label(), ": Dropout mask of a type other than bool (opset < 10)");
      return KernelChoice{false, std::make_unique<DropoutMaskKernel>(
                                     static_cast<size_t>(NumElements(r.out[0].shape)) * DTypeSize(r.out[0].dtype),
                                     static_cast<size_t>(NumElements(r.out[1].shape)))};
    }
  }
  if (r.out[0].dtype != r.in[0].dtype) return Unsupported(r.node.Label(), ": a view cannot change the type");
  return KernelChoice{true, nullptr};
}

Result<KernelChoice> MakeConvNode(const KernelRequest& r) {
  if (r.node.domain.empty() && r.in.size() > 3) return Unsupported(r.node.Label(), ": Conv with more than 3 inputs");
  if (r.node.attrs.count("output_scale") || r.node.attrs.count("output_bias"))
    return Unsupported(r.node.Label(), ": an output affine (made by the cpu lowering; the cuda epilogue has none)");
  return MakeConv(r.node, r.in, r.out[0], r.opt, r.env);
}
Result<KernelChoice> MakeAttentionNode(const KernelRequest& r) {
  return MakeAttention(r.node, r.in, r.out[0], r.opt, r.env);
}
Result<KernelChoice> MakeLogical(const KernelRequest& r) {
  return MakeLogicalOp(r.node, r.in, r.out[0]);
}

using Table = std::map<std::pair<std::string, std::string>, Family>;

// (domain, op) -> family. Element-wise and logical ops are added by name below.
const Table& Families() {
  static const Table table = [] {
    Table t = {
        {{"", "Reshape"}, {"view", MakeView}},
        {{"", "Flatten"}, {"view", MakeView}},
        {{"", "Squeeze"}, {"view", MakeView}},
        {{"", "Unsqueeze"}, {"view", MakeView}},
        {{"", "Identity"}, {"view", MakeView, kSame}},
        {{"", "Dropout"}, {"view", MakeView, kSame}},
        {{"", "Cast"}, {"cast", MakeCast, kSame}},
        {{"", "Transpose"}, {"transpose", MakeTranspose, kAny}},
        {{"", "Concat"}, {"concat", MakeConcat, kAny}},
        {{"", "Expand"}, {"expand", MakeExpand, kAny}},
        {{"", "Slice"}, {"slice", MakeSlice, kAny}},
        {{"", "Gather"}, {"gather", MakeGather}},
        {{"", "MaxPool"}, {"pool", MakePool, kAny}},
        {{"", "AveragePool"}, {"pool", MakePool, kAny}},
        {{"", "GlobalAveragePool"}, {"pool", MakePool, kAny}},
        {{"", "GlobalMaxPool"}, {"pool", MakePool, kAny}},
        {{"", "Softmax"}, {"softmax", MakeSoftmax}},
        {{"", "LogSoftmax"}, {"softmax", MakeSoftmax}},
        {{"", "LayerNormalization"}, {"layernorm", MakeLayerNorm}},
        {{"", "RMSNormalization"}, {"layernorm", MakeLayerNorm}},
        {{"", "Conv"}, {"cudnn conv", MakeConvNode, kAny}},
        {{"", "ConvTranspose"}, {"cudnn deconv", MakeConvTranspose}},
        {{"", "Resize"}, {"resize", MakeResize, kSame}},
        {{"", "Upsample"}, {"resize", MakeResize, kSame}},
        {{"", "BatchNormalization"}, {"norm", MakeBatchNorm, kSame}},
        {{"", "InstanceNormalization"}, {"norm", MakeInstanceNorm}},
        {{"", "GroupNormalization"}, {"norm", MakeGroupNorm}},
        {{"", "Split"}, {"split", MakeSplit}},
        {{"", "Tile"}, {"tile", MakeTile}},
        {{"", "DepthToSpace"}, {"transpose", MakeDepthToSpace}},
        {{"", "SpaceToDepth"}, {"transpose", MakeSpaceToDepth}},
        {{"", "GatherElements"}, {"gather", MakeGatherElements}},
        {{"", "GatherND"}, {"gather", MakeGatherND}},
        {{"", "ScatterElements"}, {"scatter", MakeScatterElements}},
        {{"", "Scatter"}, {"scatter", MakeScatterElements}},
        {{"", "ScatterND"}, {"scatter", MakeScatterND}},
        {{"", "OneHot"}, {"onehot", MakeOneHot}},
        {{"", "Trilu"}, {"trilu", MakeTrilu}},
        {{"", "Range"}, {"range", MakeRange}},
        {{"", "TopK"}, {"topk", MakeTopK}},
        {{"", "Pad"}, {"pad", MakePad, kSame}},
        {{"", "CumSum"}, {"cumsum", MakeCumSum}},
        {{"", "ArgMax"}, {"argmax", MakeArgReduce}},
        {{"", "ArgMin"}, {"argmax", MakeArgReduce}},
        {{"", "Einsum"}, {"cublaslt gemm", MakeEinsum}},
        {{"", "Gemm"}, {"cublaslt gemm", MakeGemm}},
        {{"", "MatMul"}, {"cublaslt gemm", MakeMatMul}},
        {{"sampan", "FusedConv"}, {"cudnn conv", MakeConvNode, kAny}},
        {{"sampan", "FusedConvPool"}, {"conv+pool", MakeConvPool, kAny}},
        {{"sampan", "FusedGemm"}, {"cublaslt gemm", MakeGemm}},
        {{"sampan", "FusedMatMul"}, {"cublaslt gemm", MakeMatMul}},
        {{"sampan", "AddLayerNorm"}, {"layernorm", MakeAddLayerNorm}},
        {{"sampan", "FusedBatchNorm"}, {"norm", MakeBatchNorm, kSame}},
        {{"sampan", "Attention"}, {"attention", MakeAttentionNode}},
        {{"sampan", "ImageInput"}, {"image input", MakeImageInput, kAny}},
        {{"sampan", "ResizeImage"}, {"resize image", MakeResizeImage}},
        {{"", "EfficientNMS_TRT"}, {"efficient nms", MakeEfficientNms}},
        {{"TRT", "EfficientNMS_TRT"}, {"efficient nms", MakeEfficientNms}},
        {{"sampan", "QMatMul"}, {"cublaslt fp8 gemm", MakeQMatMul}},
        {{"", "QuantizeLinear"}, {"quantize", MakeQuantize, kSame}},
        {{"sampan", "QuantizeLinear"}, {"quantize", MakeQuantize, kSame}},
        {{"", "DequantizeLinear"}, {"quantize", MakeDequantize, kSame}},
        {{"sampan", "DequantizeLinear"}, {"quantize", MakeDequantize, kSame}},
    };
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
      t[{"", op}] = {"reduce", MakeReduce};
    // emplace: an op listed above (Identity as a view) keeps its entry.
    for (const std::string& op : BinaryOpNames())
      t.emplace(std::make_pair(std::string(), op), Family{"elementwise", MakeElementwise, kAny});
    for (const std::string& op : UnaryOpNames())
      t.emplace(std::make_pair(std::string(), op), Family{"elementwise", MakeElementwise, kSame});
    for (const std::string& op : LogicalOpNames())
      t.emplace(std::make_pair(std::string(), op), Family{LogicalFamily(op), MakeLogical});
    return t;
  }();
  return table;
}

const Family* FindFamily(const ir::Node& node) {
  auto it = Families().find({node.domain, node.op_type});
  return it == Families().end() ? nullptr : &it->second;
}

}  // namespace

Result<KernelChoice> MakeKernel(const ir::Node& node, int64_t opset, const std::vector<KernelInput>& in,
                                const std::vector<KernelOutput>& out, const KernelOptions& opt, const RunEnv& env) {
  if (!node.subgraphs().empty())
    return Unsupported(node.Label(),
                       ": control flow runs on the host (its subgraphs' nodes run on CUDA kernels, "
                       "their values copied down and back each run)");
  const Family* f = FindFamily(node);
  if (f == nullptr)
    return Unsupported(node.Label(), ": no CUDA kernel for ",
                       node.domain.empty() ? node.op_type : node.domain + "::" + node.op_type);
  if (in.empty() || !in[0].present || out.empty()) return Unsupported(node.Label(), ": no data input");
  // Strings, sequences and optionals are host objects: their nodes are host steps.
  for (const KernelInput& i : in)
    if (i.present && IsObjectDType(i.dtype))
      return Unsupported(node.Label(), ": ", DTypeName(i.dtype), " input (such values live in host memory)");
  for (const KernelOutput& o : out)
    if (IsObjectDType(o.dtype))
      return Unsupported(node.Label(), ": ", DTypeName(o.dtype), " output (such values live in host memory)");
  // Sub-byte element types (int4/uint4/int2/uint2, float4e2m1 and the packed float6 types): the
  // kernels address whole bytes per element, so these nodes run on the host.
  for (const KernelInput& i : in)
    if (i.present && DTypeSize(i.dtype) == 0)
      return Unsupported(node.Label(), ": input of packed type ", DTypeName(i.dtype), " (no CUDA kernel)");
  for (const KernelOutput& o : out)
    if (o.dtype != DType::kUndefined && DTypeSize(o.dtype) == 0)
      return Unsupported(node.Label(), ": output of packed type ", DTypeName(o.dtype), " (no CUDA kernel)");
  if (f->layout == LayoutSupport::kNone &&
      (opt.out_nhwc || std::find(opt.in_nhwc.begin(), opt.in_nhwc.end(), true) != opt.in_nhwc.end()))
    return Unsupported(node.Label(), ": ", f->name, " kernels read and write NCHW only");
  return f->make(KernelRequest{node, opset, in, out, opt, env});
}

LayoutSupport ChannelsLastSupport(const ir::Node& node) {
  const Family* f = FindFamily(node);
  return f == nullptr ? LayoutSupport::kNone : f->layout;
}

std::string StaticKernelFamily(const ir::Node& node) {
  const Family* f = FindFamily(node);
  return f == nullptr ? "host" : f->name;
}

}  // namespace sampan::cuda
