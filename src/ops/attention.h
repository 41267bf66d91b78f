// sampan::Attention's memory layouts (the `layout` attribute), shared by the
// reference op, the fold_attention_transposes pass and the backends' kernels.
//   "bhsd" (default): Q [..., Sq, D], K [..., Sk, D] (or [..., D, Sk] with
//                     k_transposed=1), V [..., Sk, Dv], out [..., Sq, Dv].
//   "bshd":           rank 4, heads inside the rows: Q [B, Sq, H, D], K [B, Sk, H, D],
//                     V [B, Sk, H, Dv], out [B, Sq, H, Dv] (k_transposed must be 0).
//   "bs3hd":          Q, K and V packed in one input, [B, S, 3, H, D] — the output of one
//                     projection GEMM for all three, viewed (CUDA's fuse_qkv rewrite);
//                     inputs 1 and 2 are absent, out [B, S, H, D].
// The mask always broadcasts against the logical scores [B, H, Sq, Sk] (bhsd order).
#pragma once

#include <string>

#include "ir/graph.h"

namespace sampan::ops {

constexpr const char* kAttentionLayoutAttr = "layout";
constexpr const char* kAttentionBhsd = "bhsd";
constexpr const char* kAttentionBshd = "bshd";
constexpr const char* kAttentionBs3hd = "bs3hd";

//! Whether `node` (a sampan::Attention) stores Q, K, V and its output as [B, S, H, D].
inline bool AttentionIsBshd(const ir::Node& node) {
  return node.attr_string(kAttentionLayoutAttr, kAttentionBhsd) == kAttentionBshd;
}

//! Whether `node` (a sampan::Attention) takes Q, K and V packed as [B, S, 3, H, D].
inline bool AttentionIsPacked(const ir::Node& node) {
  return node.attr_string(kAttentionLayoutAttr, kAttentionBhsd) == kAttentionBs3hd;
}

}  // namespace sampan::ops
