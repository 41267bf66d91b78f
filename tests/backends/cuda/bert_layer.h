// One BERT encoder layer in the IR text form, as torch exports BertModel's layer:
// Q/K/V projections, head split (Reshape + Transpose, K straight to [B, H, D, S]),
// scaled scores + additive mask [B, 1, 1, S], Softmax, context, merge Transpose +
// Reshape, output projection, residual Add + LayerNormalization (post-LN).
// Inputs x: f32[batch, seq, hidden] and m: f32[batch, 1, 1, seq]; output y.
#pragma once

#include <cmath>
#include <string>

#include "base/status.h"

namespace sampan::testing {

inline std::string BertLayer(int64_t batch, int64_t seq, int64_t hidden, int64_t heads) {
  const int64_t d = hidden / heads;
  const std::string x = StrCat("[", batch, ",", seq, ",", hidden, "]"), w = StrCat("[", hidden, ",", hidden, "]");
  std::string t = StrCat("opset 17\ngraph g (x: f32", x, ", m: f32[", batch, ",1,1,", seq, "]) -> (y) {\n",
                         "  quarter = const f32[] {0.25}\n  xs = Mul(x, quarter)\n", "  heads = const i64[4] {0, 0, ",
                         heads, ", ", d, "}\n  merge = const i64[3] {0, 0, ", hidden, "}\n");
  for (const char* p : {"q", "k", "v", "o"})
    t += StrCat("  w", p, " = const f32", w, " random\n  b", p, " = const f32[", hidden, "] random\n");
  for (const char* p : {"q", "k", "v"})
    t += StrCat("  m", p, " = MatMul(xs, w", p, ")\n  a", p, " = Add(m", p, ", b", p, ")\n  r", p, " = Reshape(a", p,
                ", heads)\n");
  t += StrCat("  q = Transpose(rq) {perm=[0,2,1,3]}\n  kt = Transpose(rk) {perm=[0,2,3,1]}\n",
              "  v = Transpose(rv) {perm=[0,2,1,3]}\n  s = MatMul(q, kt)\n  c = const f32[] {", std::sqrt(double(d)),
              "}\n  sd = Div(s, c)\n  sm = Add(sd, m)\n  p = Softmax(sm) {axis=-1}\n  o = MatMul(p, v)\n",
              "  ot = Transpose(o) {perm=[0,2,1,3]}\n  ro = Reshape(ot, merge)\n  mo = MatMul(ro, wo)\n",
              "  ao = Add(mo, bo)\n  res = Add(ao, x)\n  g1 = const f32[", hidden, "] random\n", "  b1 = const f32[",
              hidden, "] random\n", "  y = LayerNormalization(res, g1, b1) {axis=-1, epsilon=1e-12}\n}\n");
  return t;
}

}  // namespace sampan::testing
