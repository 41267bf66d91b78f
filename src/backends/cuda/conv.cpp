#include "backends/cuda/conv.h"

#include <algorithm>

#include "backends/cuda/cuda_check.h"

namespace sampan::cuda {
namespace {

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

std::vector<int> Packed(const std::vector<int64_t>& dims) {
  std::vector<int> s(dims.size());
  int64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = static_cast<int>(acc);
    acc *= dims[i];
  }
  return s;
}

std::vector<int> Ints(const std::vector<int64_t>& v) {
  return std::vector<int>(v.begin(), v.end());
}

Status SetTensor(cudnnTensorDescriptor_t d, cudnnDataType_t t, const std::vector<int64_t>& dims) {
  auto di = Ints(dims);
  auto st = Packed(dims);
  SP_CUDNN(cudnnSetTensorNdDescriptor(d, t, static_cast<int>(di.size()), di.data(), st.data()));
  return Status::Ok();
}

}  // namespace

Conv::~Conv() {
  if (xd_) cudnnDestroyTensorDescriptor(xd_);
  if (yd_) cudnnDestroyTensorDescriptor(yd_);
  if (bd_) cudnnDestroyTensorDescriptor(bd_);
  if (wd_) cudnnDestroyFilterDescriptor(wd_);
  if (cd_) cudnnDestroyConvolutionDescriptor(cd_);
  if (ad_) cudnnDestroyActivationDescriptor(ad_);
}

Status Conv::Prepare(cudnnHandle_t handle, const ConvShape& s, int algo) {
  s_ = s;
  const cudnnDataType_t t = DnnType(s.type);
  SP_CUDNN(cudnnCreateTensorDescriptor(&xd_));
  SP_CUDNN(cudnnCreateTensorDescriptor(&yd_));
  SP_CUDNN(cudnnCreateTensorDescriptor(&bd_));
  SP_CUDNN(cudnnCreateFilterDescriptor(&wd_));
  SP_CUDNN(cudnnCreateConvolutionDescriptor(&cd_));
  SP_CUDNN(cudnnCreateActivationDescriptor(&ad_));
  if (s.nhwc) {
    if (s.x.size() != 4) return Unsupported("channels-last convolution of rank ", s.x.size());
    auto i = [](int64_t v) { return static_cast<int>(v); };
    SP_CUDNN(cudnnSetTensor4dDescriptor(xd_, CUDNN_TENSOR_NHWC, t, i(s.x[0]), i(s.x[1]), i(s.x[2]), i(s.x[3])));
    SP_CUDNN(cudnnSetTensor4dDescriptor(yd_, CUDNN_TENSOR_NHWC, t, i(s.y[0]), i(s.y[1]), i(s.y[2]), i(s.y[3])));
  } else {
    SP_RETURN_IF_ERROR(SetTensor(xd_, t, s.x));
    SP_RETURN_IF_ERROR(SetTensor(yd_, t, s.y));
  }
  std::vector<int64_t> bdims(s.y.size(), 1);
  bdims[1] = s.y[1];
  SP_RETURN_IF_ERROR(SetTensor(bd_, t, bdims));
  auto wdims = Ints(s.w);
  SP_CUDNN(cudnnSetFilterNdDescriptor(wd_, t, s.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                      static_cast<int>(wdims.size()), wdims.data()));
  auto pads = Ints(s.pads), strides = Ints(s.strides), dil = Ints(s.dilations);
  // Half/bf16 accumulate in float; f32 stays exact f32 unless TF32 was allowed.
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  SP_CUDNN(cudnnSetConvolutionNdDescriptor(cd_, static_cast<int>(pads.size()), pads.data(), strides.data(), dil.data(),
                                           CUDNN_CROSS_CORRELATION, compute));
  SP_CUDNN(cudnnSetConvolutionGroupCount(cd_, static_cast<int>(s.groups)));
  const cudnnMathType_t math =
      s.type != FloatType::kF32 ? CUDNN_TENSOR_OP_MATH : (s.tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH);
  SP_CUDNN(cudnnSetConvolutionMathType(cd_, math));

  // One fused call when cuDNN can: ReLU or identity (identity only with implicit precomputed GEMM).
  fused_ = s.type != FloatType::kBF16 && (s.act == UnaryOp::kRelu || s.act == UnaryOp::kIdentity);
  SP_CUDNN(cudnnSetActivationDescriptor(
      ad_, s.act == UnaryOp::kRelu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, CUDNN_PROPAGATE_NAN, 0.0));
  auto heuristic = [&]() -> Status {
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int found = 0;
    SP_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(handle, xd_, wd_, cd_, yd_, 8, &found, perf));
    candidates_.clear();
    for (int i = 0; i < found; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) candidates_.push_back(static_cast<int>(perf[i].algo));
    if (candidates_.empty()) return Unsupported("cuDNN has no forward algorithm for this convolution");
    if (static_cast<int>(algo_) < 0 ||
        std::find(candidates_.begin(), candidates_.end(), static_cast<int>(algo_)) == candidates_.end())
      algo_ = static_cast<cudnnConvolutionFwdAlgo_t>(candidates_[0]);
    return Status::Ok();
  };
  algo_ = static_cast<cudnnConvolutionFwdAlgo_t>(-1);
  SP_RETURN_IF_ERROR(heuristic());
  if (algo >= 0) algo_ = static_cast<cudnnConvolutionFwdAlgo_t>(algo);
  if (fused_ && s.act == UnaryOp::kIdentity) algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  if (cudnnGetConvolutionForwardWorkspaceSize(handle, xd_, wd_, cd_, yd_, algo_, &workspace_) != CUDNN_STATUS_SUCCESS) {
    // The recorded or forced algorithm does not apply to this shape: take the heuristic's, unfused.
    if (s.act != UnaryOp::kRelu) fused_ = false;
    algo_ = static_cast<cudnnConvolutionFwdAlgo_t>(candidates_[0]);
    SP_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(handle, xd_, wd_, cd_, yd_, algo_, &workspace_));
  }
  return Status::Ok();
}

Status Conv::SetAlgo(cudnnHandle_t handle, int algo) {
  if (fused_ && s_.act == UnaryOp::kIdentity) fused_ = false;  // identity fusion pins the algorithm
  const auto a = static_cast<cudnnConvolutionFwdAlgo_t>(algo);
  size_t ws = 0;
  SP_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(handle, xd_, wd_, cd_, yd_, a, &ws));
  algo_ = a;
  workspace_ = ws;
  return Status::Ok();
}

Status Conv::Run(cudnnHandle_t handle, const void* x, const void* w, const void* bias, const void* z, void* y,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  SP_CUDNN(cudnnSetStream(handle, stream));
  const float one = 1.f, zero = 0.f;
  if (fused_) {
    const float alpha2 = s_.has_z ? 1.f : 0.f;
    cudnnStatus_t st =
        cudnnConvolutionBiasActivationForward(handle, &one, xd_, x, wd_, w, cd_, algo_, workspace, workspace_bytes,
                                              &alpha2, yd_, s_.has_z ? z : y, bd_, bias, ad_, yd_, y);
    if (st == CUDNN_STATUS_SUCCESS) return Status::Ok();
    if (st != CUDNN_STATUS_NOT_SUPPORTED && st != CUDNN_STATUS_BAD_PARAM) SP_CUDNN(st);
    fused_ = false;  // this combination is not fused by cuDNN: run the unfused sequence from now on
  }
  SP_CUDNN(
      cudnnConvolutionForward(handle, &one, xd_, x, wd_, w, cd_, algo_, workspace, workspace_bytes, &zero, yd_, y));
  if (s_.has_bias) SP_CUDNN(cudnnAddTensor(handle, &one, bd_, bias, &one, yd_, y));
  int64_t n = 1;
  for (int64_t d : s_.y) n *= d;
  if (s_.has_z) {
    StridedShape flat;
    flat.rank = 1;
    flat.dims[0] = n;
    flat.stride[0][0] = flat.stride[1][0] = 1;
    SP_CUDA(LaunchBinary(BinaryOp::kAdd, s_.type, y, z, y, flat, stream));
  }
  if (s_.act != UnaryOp::kIdentity) SP_CUDA(LaunchUnary(s_.act, s_.type, y, y, n, s_.act_p0, s_.act_p1, stream));
  return Status::Ok();
}

}  // namespace sampan::cuda
