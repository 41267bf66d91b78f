// EfficientNMS_TRT on the GPU (efficient_nms.cu), equal to ops/efficient_nms.cpp output for
// output. Four kernels:
//   1. every (anchor, class) gets a 32-bit key: its activated score's order-preserving bits when it
//      is a candidate (score >= threshold, not the background class), else 0 (grid-wide; the
//      sigmoid uses LibmExpf, the host's exp to the bit);
//   2. one block per image takes the best min(candidates, 4096) by 64-bit item (score key, then
//      the complemented anchor * classes + class, so ties go to the lower anchor, then the lower
//      class, as the reference breaks them): a radix select of the 4096th item over the keys when
//      there are more, then a bitonic sort in shared memory; their corners are decoded once;
//   3. the suppression bits: for candidates i < j of one class (or any, class_agnostic), bit j of
//      row i is IoU(i, j) >= iou_threshold, 64 columns a word;
//   4. one warp per image walks the candidates best first, keeping those no kept one suppressed
//      (greedy NMS), up to max_output_boxes, and writes them; the outputs are zeroed first.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace sampan::cuda {

//! The plugin's numSelectedBoxes: candidates kept per image before the suppression.
constexpr int64_t kNmsMaxCandidates = 4096;

enum class NmsType { kF32, kF16 };

struct NmsParams {
  int64_t n = 0, anchors = 0, classes = 0;  //!< scores [n, anchors, classes]
  bool per_class_boxes = false;             //!< boxes [n, anchors, classes, 4], else [n, anchors, 4]
  bool center = false;                      //!< box_coding 1: (x, y, w, h)
  bool sigmoid = false;                     //!< score_activation
  bool agnostic = false;                    //!< class_agnostic
  int64_t background = -1;                  //!< background_class (-1: none)
  float score_threshold = 0.f, iou_threshold = 0.5f;
  int64_t max_out = 100;  //!< max_output_boxes
  //! Candidate slots per image: min(anchors * classes, kNmsMaxCandidates).
  __host__ __device__ int64_t slots() const {
    const int64_t m = anchors * classes;
    return m < kNmsMaxCandidates ? m : kNmsMaxCandidates;
  }
};

//! Workspace bytes LaunchEfficientNms needs.
size_t EfficientNmsWorkspace(const NmsParams& p);

//! boxes/scores and out_boxes/out_scores of type `t`; num [n, 1], out_boxes [n, max_out, 4],
//! out_scores and out_classes [n, max_out]. Any output may be null (not written).
cudaError_t LaunchEfficientNms(NmsType t, const void* boxes, const void* scores, int32_t* num, void* out_boxes,
                               void* out_scores, int32_t* out_classes, const NmsParams& p, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream);

}  // namespace sampan::cuda
