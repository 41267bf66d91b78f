// CudaEngine (context.h): a plan bound to one GPU, its weights uploaded once in one block.
#include <set>
#include <vector>

#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernel_util.h"

namespace sampan::cuda {

Result<std::unique_ptr<CudaEngine>> CudaEngine::Create(const plan::Plan& plan, const runtime::EngineOptions& options) {
  SP_RETURN_IF_ERROR(CheckDevice(options.device));
  SP_CUDA(cudaSetDevice(options.device));
  std::unique_ptr<CudaEngine> e(new CudaEngine(plan, options));
  // Every constant read by a node goes to the device once, in one block.
  std::vector<const ir::Value*> consts;
  std::set<const ir::Value*> seen;
  size_t total = 0;
  for (const auto& n : plan.graph->nodes())
    for (const ir::Value* v : n->inputs())
      if (v && v->is_constant() && seen.insert(v).second && v->data.nbytes() > 0) {
        consts.push_back(v);
        total += Aligned(v->data.nbytes());
      }
  if (total > 0) {
    SP_CUDA(cudaMalloc(&e->weight_block_, total));
    e->weight_block_bytes_ = total;
    size_t off = 0;
    for (const ir::Value* v : consts) {
      char* p = static_cast<char*>(e->weight_block_) + off;
      SP_CUDA(cudaMemcpy(p, v->data.raw(), v->data.nbytes(), cudaMemcpyHostToDevice));
      e->weights_[v] = p;
      off += Aligned(v->data.nbytes());
    }
  }
  return e;
}

CudaEngine::~CudaEngine() {
  if (weight_block_) {
    cudaSetDevice(options_.device);
    cudaFree(weight_block_);
  }
}

void* CudaEngine::weight(const ir::Value* v) const {
  auto it = weights_.find(v);
  return it == weights_.end() ? nullptr : it->second;
}

Status CudaEngine::Health() const {
  return StickyDeviceError(options_.device);
}

runtime::MemoryReport CudaEngine::MemoryUsage() const {
  runtime::MemoryReport r;
  r.Add(runtime::MemoryKind::kWeights, runtime::MemoryPlace::kDevice, options_.device, weight_block_bytes_);
  return r;
}

Result<runtime::MemoryReport> CudaEngine::EstimateContextMemory(
    const std::vector<std::map<std::string, Shape>>& shape_sets) {
  SP_ASSIGN_OR_RETURN(auto ctx, CudaContext::Create(this));
  return ctx->Estimate(shape_sets);
}

Result<std::unique_ptr<runtime::ContextImpl>> CudaEngine::CreateContext() {
  SP_ASSIGN_OR_RETURN(auto ctx, CudaContext::Create(this));
  return std::unique_ptr<runtime::ContextImpl>(std::move(ctx));
}

}  // namespace sampan::cuda
