// Efficient-NMS family: EfficientNMS_TRT (default and "TRT" domains, ops/efficient_nms.cpp) on
// the device, output for output as the reference. Its outputs have static shapes ([N, 1] and
// [N, max_output_boxes, ...], zero past num_detections), so a detector's graph keeps its NMS on
// the GPU. (ONNX NonMaxSuppression's output, [selected, 3], has a data-dependent shape: such a
// graph runs wholly on the host, capability.cpp says so, and the op has no device kernel.)
#include <algorithm>
#include <cmath>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/efficient_nms.h"
#include "backends/cuda/families.h"

namespace sampan::cuda {
namespace {

// Candidate indices (anchor * classes + class) are 32-bit on the device; more workspace than
// this is refused rather than taken from the context's pool.
constexpr int64_t kMaxIndex = int64_t{1} << 31;
constexpr size_t kMaxWorkspace = size_t{1} << 30;
constexpr int64_t kMaxBatch = 65535;  // the suppression kernel's grid y

// The reference's attribute checks (its inference errors): such nodes stay on the host, which
// reports them in the reference's words.
Status ReadAttrs(const ir::Node& node, NmsParams* p) {
  auto bad = [&](const auto&... m) { return Unsupported(node.Label(), ": ", m...); };
  static const char* kKnown[] = {"score_threshold",  "iou_threshold",    "max_output_boxes",
                                 "background_class", "score_activation", "class_agnostic",
                                 "box_coding",       "plugin_version",   "score_bits"};
  for (const auto& [name, value] : node.attrs)
    if (std::none_of(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return name == k; }))
      return bad("attribute '", name, "' is not one of EfficientNMS_TRT's");
  const int64_t coding = node.attr_int("box_coding", 0);
  if (coding != 0 && coding != 1) return bad("box_coding ", coding);
  p->center = coding == 1;
  p->max_out = node.attr_int("max_output_boxes", 100);
  if (p->max_out < 1) return bad("max_output_boxes ", p->max_out);
  p->iou_threshold = node.attr_float("iou_threshold", 0.5f);
  if (!(p->iou_threshold >= 0.f && p->iou_threshold <= 1.f)) return bad("iou_threshold ", p->iou_threshold);
  p->score_threshold = node.attr_float("score_threshold", 0.f);
  if (!std::isfinite(p->score_threshold)) return bad("score_threshold ", p->score_threshold);
  const int64_t activation = node.attr_int("score_activation", 0), agnostic = node.attr_int("class_agnostic", 0);
  if ((activation != 0 && activation != 1) || (agnostic != 0 && agnostic != 1))
    return bad("score_activation and class_agnostic must be 0 or 1");
  p->sigmoid = activation == 1;
  p->agnostic = agnostic == 1;
  p->background = node.attr_int("background_class", -1);
  const std::string version = node.attr_string("plugin_version", "1");
  if (version != "1") return bad("plugin_version '", version, "'");
  return Status::Ok();
}

class EfficientNmsKernel : public NodeKernel {
 public:
  EfficientNmsKernel(NmsType t, const NmsParams& p) : t_(t), p_(p), workspace_(EfficientNmsWorkspace(p)) {}
  size_t workspace() const override { return workspace_; }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    auto at = [&](size_t i) { return i < out.size() ? out[i] : nullptr; };
    SP_CUDA(LaunchEfficientNms(t_, in[0], in[1], static_cast<int32_t*>(at(0)), at(1), at(2),
                               static_cast<int32_t*>(at(3)), p_, env.workspace, env.workspace_bytes, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "efficient nms"; }

 private:
  NmsType t_;
  NmsParams p_;
  size_t workspace_;
};

}  // namespace

Result<KernelChoice> MakeEfficientNms(const KernelRequest& r) {
  const ir::Node& node = r.node;
  if (r.in.size() > 2 && r.in[2].present)
    return Unsupported(node.Label(), ": the anchors input (the plugin's fused box decoder)");
  if (r.in.size() < 2 || !r.in[1].present) return Unsupported(node.Label(), ": no scores input");
  const DType dt = r.in[0].dtype;
  if ((dt != DType::kFloat32 && dt != DType::kFloat16) || r.in[1].dtype != dt)
    return Unsupported(node.Label(), ": boxes ", DTypeName(dt), " and scores ", DTypeName(r.in[1].dtype),
                       " (f32 or f16, one type)");
  NmsParams p;
  SP_RETURN_IF_ERROR(ReadAttrs(node, &p));
  const Shape& ss = r.in[1].shape;
  const Shape& bs = r.in[0].shape;
  if (ss.size() != 3) return Unsupported(node.Label(), ": scores ", ShapeToString(ss), " (not [N, A, C])");
  p.n = ss[0];
  p.anchors = ss[1];
  p.classes = ss[2];
  p.per_class_boxes = bs.size() == 4;
  const Shape want_boxes = p.per_class_boxes ? Shape{p.n, p.anchors, p.classes, 4} : Shape{p.n, p.anchors, 4};
  if (bs != want_boxes)
    return Unsupported(node.Label(), ": boxes ", ShapeToString(bs), " do not match scores ", ShapeToString(ss));
  // Outputs as the reference makes them (an omitted one is not checked, nor written).
  const Shape want_out[4] = {{p.n, 1}, {p.n, p.max_out, 4}, {p.n, p.max_out}, {p.n, p.max_out}};
  const DType want_type[4] = {DType::kInt32, dt, dt, DType::kInt32};
  if (r.out.size() != 4) return Unsupported(node.Label(), ": ", r.out.size(), " outputs (4 expected)");
  for (size_t k = 0; k < 4; ++k)
    if (node.output(k) != nullptr && (r.out[k].dtype != want_type[k] || r.out[k].shape != want_out[k]))
      return Unsupported(node.Label(), ": output ", k, " is ", DTypeName(r.out[k].dtype), ShapeToString(r.out[k].shape),
                         ", expected ", DTypeName(want_type[k]), ShapeToString(want_out[k]));
  if (p.anchors * p.classes >= kMaxIndex)
    return Unsupported(node.Label(), ": ", p.anchors, " anchors x ", p.classes, " classes (the device takes < 2^31)");
  if (p.n > kMaxBatch) return Unsupported(node.Label(), ": batch ", p.n, " (the device takes up to ", kMaxBatch, ")");
  const size_t ws = EfficientNmsWorkspace(p);
  if (ws > kMaxWorkspace)
    return Unsupported(node.Label(), ": would need ", ws, " bytes of workspace (at most ", kMaxWorkspace, ")");
  return KernelChoice{false,
                      std::make_unique<EfficientNmsKernel>(dt == DType::kFloat32 ? NmsType::kF32 : NmsType::kF16, p)};
}

}  // namespace sampan::cuda
