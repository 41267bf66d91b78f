// The op switch of the CUDA backend: for one node at concrete input shapes,
// prepare a device kernel (descriptors, algorithm, launch parameters), or say
// Unsupported so the node runs on the host with the ops/ reference kernel.
// The kernels themselves live in the <op>.cu / conv.cpp / gemm.cpp files.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"
#include "ops/fold_limits.h"
#include "ops/op.h"

namespace sampan::cuda {

//! What a kernel runs with: the context's stream, library handles and scratch.
struct RunEnv {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int* bad_index = nullptr;  //!< device flag kernels set on invalid data (Gather indices)
};

//! An input as the kernel factory sees it: type, concrete shape, and the value
//! when the host knows it (constants, shape arithmetic).
struct KernelInput {
  bool present = false;
  DType dtype = DType::kUndefined;
  Shape shape;
  const Tensor* host = nullptr;
};

struct KernelOutput {
  DType dtype = DType::kUndefined;
  Shape shape;
};

struct KernelOptions {
  bool tf32 = false;  //!< f32 products may use TF32 tensor cores
  int algo = -1;      //!< the builder's recorded algorithm of the node's family (plan::Tactic); -1: default
  //! Channels-last storage (layout.h) of each input (missing entries: NCHW) and of output 0.
  std::vector<bool> in_nhwc;
  bool out_nhwc = false;
  //! Capability query (the builder's report, `--strict`, `--dry-run`): validate and answer
  //! Unsupported with the reason, or succeed, but touch no device and call no library.
  //! A factory that prepares library descriptors or device buffers returns before doing so
  //! (KernelChoice with no kernel); pure kernels may build their host-side object.
  bool check_only = false;
  bool input_nhwc(size_t i) const { return i < in_nhwc.size() && in_nhwc[i]; }
};

class NodeKernel {
 public:
  virtual ~NodeKernel() = default;
  //! Scratch bytes Run needs in env.workspace.
  virtual size_t workspace() const { return 0; }
  //! Device memory the kernel holds itself (weights in another layout), for memory reports.
  virtual size_t device_bytes() const { return 0; }
  //! Device pointers of inputs (nullptr for absent ones) and of outputs.
  virtual Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) = 0;
  //! Short family name for reports ("cudnn conv", "cublaslt gemm", "softmax").
  virtual const char* family() const = 0;
  //! Tactics the builder may time (algorithm ids); empty when there is one way to run.
  virtual std::vector<int> Candidates() const { return {}; }
  virtual Status Select(int algo) { return Status::Ok(); }
  virtual int selected() const { return -1; }
};

//! A prepared device kernel, or a view (output 0 is input 0's memory, reshaped).
struct KernelChoice {
  bool view = false;
  std::unique_ptr<NodeKernel> kernel;
};

//! Everything a kernel factory is given: the node, its opset, concrete input and
//! output types, the builder's choices and the context's handles.
struct KernelRequest {
  const ir::Node& node;
  int64_t opset;
  const std::vector<KernelInput>& in;
  const std::vector<KernelOutput>& out;
  const KernelOptions& opt;
  const RunEnv& env;
};

//! One kernel family's factory (one family per file: reduce_kernel.cpp, pad_kernel.cpp...).
using KernelFactory = Result<KernelChoice> (*)(const KernelRequest& r);

//! Unsupported: the node runs on the host. Other errors are real failures.
Result<KernelChoice> MakeKernel(const ir::Node& node, int64_t opset, const std::vector<KernelInput>& inputs,
                                const std::vector<KernelOutput>& outputs, const KernelOptions& options,
                                const RunEnv& env);

//! The kernel family a node would use on the device judged from its op alone
//! (for the builder's report); "host" when the op has no device kernel at all.
std::string StaticKernelFamily(const ir::Node& node);

//! How a node's kernel treats channels-last (layout.h) 4-D values.
enum class LayoutSupport {
  kNone,  //!< every value packed (NCHW)
  kSame,  //!< its 4-D inputs and output all in one layout (unary math, Cast, per-channel norms)
  kAny,   //!< each 4-D input and the output in either layout (strided kernels, convolutions)
};
//! From the op dispatch table, judged from the op alone; factories still check shapes.
LayoutSupport ChannelsLastSupport(const ir::Node& node);

}  // namespace sampan::cuda
