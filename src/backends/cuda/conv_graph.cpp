#include "backends/cuda/conv_graph.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/elementwise.h"

namespace sampan::cuda {
namespace {

// Unique ids of the graph's tensors (the variant pack names its pointers by them).
enum Uid : int64_t { kX = 1, kW = 2, kB = 3, kZ = 4, kY = 5, kVirtual = 100 };

constexpr int kMaxConfigs = 10;

cudnnDataType_t DnnType(FloatType t) {
  switch (t) {
    case FloatType::kF16:
      return CUDNN_DATA_HALF;
    case FloatType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

Status Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value) {
  SP_CUDNN(cudnnBackendSetAttribute(d, name, type, count, value));
  return Status::Ok();
}

// Channels-last strides for logical [N, C, H, W] dims.
std::vector<int64_t> NhwcStrides(const std::vector<int64_t>& d) {
  return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

Result<BackendDesc> MakeTensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims, bool is_virtual) {
  BackendDesc t;
  SP_RETURN_IF_ERROR(t.Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  const std::vector<int64_t> strides = NhwcStrides(dims);
  const int64_t alignment = 16;
  SP_RETURN_IF_ERROR(Set(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  SP_RETURN_IF_ERROR(Set(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data()));
  SP_RETURN_IF_ERROR(Set(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data()));
  SP_RETURN_IF_ERROR(Set(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  SP_RETURN_IF_ERROR(Set(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment));
  if (is_virtual) {
    const bool v = true;
    SP_RETURN_IF_ERROR(Set(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
  }
  SP_CUDNN(cudnnBackendFinalize(t.get()));
  return t;
}

bool RuntimeCompilationAllowed() {
  const char* e = std::getenv("SAMPAN_CUDNN_RTC");
  return e && std::strcmp(e, "1") == 0;
}

}  // namespace

BackendDesc::~BackendDesc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

BackendDesc& BackendDesc::operator=(BackendDesc&& o) noexcept {
  if (this != &o) {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

Status BackendDesc::Create(cudnnBackendDescriptorType_t type) {
  if (d_) cudnnBackendDestroyDescriptor(d_);
  d_ = nullptr;
  SP_CUDNN(cudnnBackendCreateDescriptor(type, &d_));
  return Status::Ok();
}

bool ConvGraph::Eligible(const ConvShape& s) {
  if (const char* e = std::getenv("SAMPAN_CUDNN_GRAPH"); e && std::strcmp(e, "0") == 0) return false;
  // Any activation: ReLU runs in the graph's epilogue, the others as one pass over y
  // after it (cuDNN's precompiled engines fuse ReLU; other pointwise modes need its
  // runtime-compiled engines, which builds do not wait for).
  return s.nhwc && s.x.size() == 4 && s.groups == 1 && (s.type == FloatType::kF16 || s.type == FloatType::kBF16);
}

Status ConvGraph::Build(cudnnHandle_t handle, const ConvShape& s) {
  if (!Eligible(s)) return Unsupported("convolution not eligible for cuDNN's graph API");
  s_ = s;
  handle_ = handle;
  const cudnnDataType_t io = DnnType(s.type);
  const cudnnDataType_t acc = CUDNN_DATA_FLOAT;
  int64_t next_virtual = kVirtual;

  SP_ASSIGN_OR_RETURN(BackendDesc x, MakeTensor(kX, io, s.x, false));
  SP_ASSIGN_OR_RETURN(BackendDesc w, MakeTensor(kW, io, s.w, false));
  const bool epilogue = s.has_bias || s.has_z || s.act == UnaryOp::kRelu;
  SP_ASSIGN_OR_RETURN(BackendDesc conv_out,
                      epilogue ? MakeTensor(next_virtual++, acc, s.y, true) : MakeTensor(kY, io, s.y, false));

  SP_RETURN_IF_ERROR(conv_desc_.Create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  {
    const int64_t spatial = 2;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    cudnnBackendDescriptor_t d = conv_desc_.get();
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &acc));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, s.dilations.data()));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, s.strides.data()));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, s.pads.data()));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, s.pads.data()));
    SP_CUDNN(cudnnBackendFinalize(d));
  }
  {
    BackendDesc op;
    SP_RETURN_IF_ERROR(op.Create(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR));
    const float alpha = 1.f, beta = 0.f;
    cudnnBackendDescriptor_t d = op.get();
    cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = conv_out.get(), cd = conv_desc_.get();
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd));
    SP_RETURN_IF_ERROR(
        Set(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    SP_RETURN_IF_ERROR(Set(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    SP_CUDNN(cudnnBackendFinalize(d));
    ops_.push_back(std::move(op));
  }
  tensors_.push_back(std::move(x));
  tensors_.push_back(std::move(w));
  cudnnBackendDescriptor_t cur = conv_out.get();
  tensors_.push_back(std::move(conv_out));

  // Epilogue: one pointwise operation per step, on fp32 virtual tensors; the last
  // one writes y.
  struct Step {
    cudnnPointwiseMode_t mode;
    int64_t operand_uid;  // 0: unary
  };
  std::vector<Step> steps;
  if (s.has_bias) steps.push_back({CUDNN_POINTWISE_ADD, kB});
  if (s.has_z) steps.push_back({CUDNN_POINTWISE_ADD, kZ});
  if (s.act == UnaryOp::kRelu) steps.push_back({CUDNN_POINTWISE_RELU_FWD, 0});
  for (size_t i = 0; i < steps.size(); ++i) {
    const bool last = i + 1 == steps.size();
    BackendDesc operand;
    if (steps[i].operand_uid == kB) {
      SP_ASSIGN_OR_RETURN(operand, MakeTensor(kB, io, {1, s.y[1], 1, 1}, false));
    } else if (steps[i].operand_uid == kZ) {
      SP_ASSIGN_OR_RETURN(operand, MakeTensor(kZ, io, s.y, false));
    }
    SP_ASSIGN_OR_RETURN(BackendDesc out,
                        last ? MakeTensor(kY, io, s.y, false) : MakeTensor(next_virtual++, acc, s.y, true));
    BackendDesc pw;
    SP_RETURN_IF_ERROR(pw.Create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
    SP_RETURN_IF_ERROR(Set(pw.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &steps[i].mode));
    SP_RETURN_IF_ERROR(Set(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &acc));
    SP_CUDNN(cudnnBackendFinalize(pw.get()));
    BackendDesc op;
    SP_RETURN_IF_ERROR(op.Create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
    cudnnBackendDescriptor_t pwd = pw.get(), od = out.get(), bd = operand.get();
    SP_RETURN_IF_ERROR(
        Set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd));
    SP_RETURN_IF_ERROR(Set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cur));
    if (bd)
      SP_RETURN_IF_ERROR(Set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bd));
    SP_RETURN_IF_ERROR(Set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &od));
    SP_CUDNN(cudnnBackendFinalize(op.get()));
    cur = od;
    if (operand.get()) tensors_.push_back(std::move(operand));
    tensors_.push_back(std::move(out));
    pw_descs_.push_back(std::move(pw));
    ops_.push_back(std::move(op));
  }

  SP_RETURN_IF_ERROR(graph_.Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  {
    std::vector<cudnnBackendDescriptor_t> ops;
    for (auto& o : ops_) ops.push_back(o.get());
    SP_RETURN_IF_ERROR(Set(graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                           static_cast<int64_t>(ops.size()), ops.data()));
    SP_RETURN_IF_ERROR(Set(graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
    cudnnStatus_t st = cudnnBackendFinalize(graph_.get());
    if (st != CUDNN_STATUS_SUCCESS)
      return Unsupported("cuDNN graph API does not take this convolution graph: ", cudnnGetErrorString(st));
  }

  BackendDesc heur;
  SP_RETURN_IF_ERROR(heur.Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  {
    cudnnBackendDescriptor_t gd = graph_.get();
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    SP_RETURN_IF_ERROR(Set(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gd));
    SP_RETURN_IF_ERROR(Set(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    cudnnStatus_t st = cudnnBackendFinalize(heur.get());
    if (st != CUDNN_STATUS_SUCCESS) return Unsupported("cuDNN heuristic: ", cudnnGetErrorString(st));
  }
  int64_t available = 0;
  SP_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                    &available, nullptr));
  const int64_t want = std::min<int64_t>(available, kMaxConfigs);
  if (want <= 0) return Unsupported("cuDNN's heuristic has no engine for this convolution graph");
  configs_.resize(static_cast<size_t>(want));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (auto& c : configs_) {
    SP_RETURN_IF_ERROR(c.Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(c.get());
  }
  int64_t got = 0;
  SP_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, want,
                                    &got, raw.data()));
  configs_.resize(static_cast<size_t>(std::min(got, want)));
  const bool rtc_ok = RuntimeCompilationAllowed();
  for (size_t i = 0; i < configs_.size(); ++i) {
    BackendDesc engine;
    int64_t index = -1;
    bool rtc = false, low_precision_reduction = false;
    if (engine.Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR).ok()) {
      cudnnBackendDescriptor_t ed = engine.get();
      int64_t n = 0;
      if (cudnnBackendGetAttribute(configs_[i].get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                   &ed) == CUDNN_STATUS_SUCCESS) {
        cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
        cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
        int64_t nb = 0;
        if (cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                     CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb, behavior) == CUDNN_STATUS_SUCCESS)
          for (int64_t k = 0; k < nb; ++k) rtc = rtc || behavior[k] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
        cudnnBackendNumericalNote_t numeric[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        int64_t nn = 0;
        if (cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, numeric) == CUDNN_STATUS_SUCCESS)
          for (int64_t k = 0; k < nn; ++k)
            low_precision_reduction =
                low_precision_reduction || numeric[k] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
      }
    }
    engines_.push_back(index);
    if ((rtc && !rtc_ok) || low_precision_reduction) continue;
    candidates_.push_back(static_cast<int>(i));
  }
  plans_.resize(configs_.size());
  if (candidates_.empty()) return Unsupported("cuDNN's graph engines for this convolution all compile at run time");
  return Status::Ok();
}

Status ConvGraph::Select(int index) {
  if (index < 0 || index >= static_cast<int>(configs_.size()))
    return Unsupported("cuDNN graph configuration ", index, " is not offered for this convolution");
  auto& slot = plans_[static_cast<size_t>(index)];
  if (!slot) {
    slot = std::make_unique<PlanEntry>();
    slot->engine = engines_[static_cast<size_t>(index)];
    Status s = slot->plan.Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendDescriptor_t cfg = configs_[static_cast<size_t>(index)].get();
    if (s.ok()) s = Set(slot->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
    if (s.ok())
      s = Set(slot->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    if (s.ok()) {
      cudnnStatus_t st = cudnnBackendFinalize(slot->plan.get());
      if (st != CUDNN_STATUS_SUCCESS) s = Unsupported("execution plan does not finalize: ", cudnnGetErrorString(st));
    }
    int64_t ws = 0, n = 0;
    if (s.ok()) {
      cudnnStatus_t st = cudnnBackendGetAttribute(slot->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                  CUDNN_TYPE_INT64, 1, &n, &ws);
      if (st != CUDNN_STATUS_SUCCESS) s = Unsupported("execution plan workspace: ", cudnnGetErrorString(st));
    }
    slot->workspace = static_cast<size_t>(std::max<int64_t>(ws, 0));
    slot->failed = !s.ok();
    if (!s.ok()) return s;
  }
  if (slot->failed) return Unsupported("cuDNN graph configuration ", index, " does not finalize");
  selected_ = index;
  pack_ = BackendDesc();
  pack_ptrs_ = {};
  return Status::Ok();
}

size_t ConvGraph::workspace_needed() const {
  return selected_ < 0 ? 0 : plans_[static_cast<size_t>(selected_)]->workspace;
}

std::string ConvGraph::Describe() const {
  if (selected_ < 0) return "none";
  return StrCat("cudnn graph config ", selected_, " engine ", engines_[static_cast<size_t>(selected_)]);
}

Status ConvGraph::Run(cudnnHandle_t handle, const void* x, const void* w, const void* bias, const void* z, void* y,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (selected_ < 0) return Internal("cuDNN graph convolution run before a configuration was selected");
  PlanEntry& p = *plans_[static_cast<size_t>(selected_)];
  if (workspace_bytes < p.workspace)
    return Internal("cuDNN graph convolution: workspace of ", workspace_bytes, " bytes, needs ", p.workspace);
  SP_CUDNN(cudnnSetStream(handle, stream));
  const std::array<const void*, 6> ptrs = {x, w, bias, z, y, workspace};
  if (!pack_.get() || ptrs != pack_ptrs_) {
    std::vector<int64_t> uids = {kX, kW, kY};
    std::vector<void*> data = {const_cast<void*>(x), const_cast<void*>(w), y};
    if (s_.has_bias) {
      uids.push_back(kB);
      data.push_back(const_cast<void*>(bias));
    }
    if (s_.has_z) {
      uids.push_back(kZ);
      data.push_back(const_cast<void*>(z));
    }
    BackendDesc pack;
    SP_RETURN_IF_ERROR(pack.Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
    SP_RETURN_IF_ERROR(Set(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                           static_cast<int64_t>(uids.size()), uids.data()));
    SP_RETURN_IF_ERROR(Set(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                           static_cast<int64_t>(data.size()), data.data()));
    SP_RETURN_IF_ERROR(Set(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
    SP_CUDNN(cudnnBackendFinalize(pack.get()));
    pack_ = std::move(pack);
    pack_ptrs_ = ptrs;
  }
  SP_CUDNN(cudnnBackendExecute(handle, p.plan.get(), pack_.get()));
  if (s_.act != UnaryOp::kIdentity && s_.act != UnaryOp::kRelu) {
    int64_t n = 1;
    for (int64_t d : s_.y) n *= d;
    SP_CUDA(LaunchUnary(s_.act, s_.type, y, y, n, s_.act_p0, s_.act_p1, stream));
  }
  return Status::Ok();
}

}  // namespace sampan::cuda
