// Einsum family: a two-operand contraction as one batched cuBLASLt product. Each
// label is a batch label (both operands and the output), an M label (A and the
// output), an N label (B and the output) or a contracted K label (both operands, not
// the output). A is brought to [batch, M, K] order and B to [batch, K, N] by strided
// copies into the workspace (skipped when already in that order), the product writes
// [batch, M, N], and a last copy puts the output's label order. One operand with
// distinct labels, all kept, is a transpose.
#include "backends/cuda/einsum_kernel.h"

#include <algorithm>
#include <optional>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/strided_copy.h"

namespace sampan::cuda {
namespace {

struct Equation {
  std::vector<std::string> terms;
  std::string out;
};

// Letters only (no ellipsis, no repeated label inside a term); the reference's
// inference has already checked the equation against the inputs.
Result<Equation> Parse(const ir::Node& node, size_t inputs) {
  std::string eq;
  for (char c : node.attr_string("equation", ""))
    if (c != ' ') eq += c;
  if (eq.find('.') != std::string::npos) return Unsupported(node.Label(), ": ellipsis in the equation");
  Equation e;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  for (size_t p = 0;;) {
    const size_t q = lhs.find(',', p);
    e.terms.push_back(lhs.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  if (e.terms.size() != inputs) return InvalidArgument(node.Label(), ": equation has ", e.terms.size(), " terms");
  if (arrow != std::string::npos) {
    e.out = eq.substr(arrow + 2);
  } else {  // implicit: labels that appear once, alphabetically
    std::string all = lhs;
    std::sort(all.begin(), all.end());
    for (char c : all)
      if (std::isalpha(static_cast<unsigned char>(c)) && std::count(lhs.begin(), lhs.end(), c) == 1) e.out += c;
  }
  for (const std::string& t : e.terms)
    for (char c : t)
      if (std::count(t.begin(), t.end(), c) > 1)
        return Unsupported(node.Label(), ": repeated label '", std::string(1, c), "' (diagonal)");
  return e;
}

int64_t DimOf(char label, const std::string& term, const Shape& shape) {
  return shape[term.find(label)];
}

// A permuted copy of a packed tensor `term`/`shape` into `order` (labels), or nothing
// when `order` is the term itself.
Result<std::optional<StridedShape>> Permute(const std::string& term, const Shape& shape, const std::string& order) {
  if (term == order) return std::optional<StridedShape>();
  const auto src = Packed(shape);
  Shape dims;
  std::vector<int64_t> st;
  for (char c : order) {
    dims.push_back(DimOf(c, term, shape));
    st.push_back(src[term.find(c)]);
  }
  SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(dims, {st, Packed(dims)}));
  return std::optional<StridedShape>(s);
}

class EinsumKernel : public GemmNodeKernel {
 public:
  Status Init(const GemmShape& g, const RunEnv& env, size_t elem, std::optional<StridedShape> a_copy, size_t a_bytes,
              std::optional<StridedShape> b_copy, size_t b_bytes, std::optional<StridedShape> out_copy, size_t c_bytes,
              int algo) {
    SP_RETURN_IF_ERROR(gemm_.Prepare(env.lt, g, kGemmWorkspace));
    if (algo >= 0 && algo < gemm_.num_algos()) gemm_.select(algo);
    elem_ = elem;
    a_copy_ = a_copy;
    b_copy_ = b_copy;
    out_copy_ = out_copy;
    a_bytes_ = a_copy ? Aligned(a_bytes) : 0;
    b_bytes_ = b_copy ? Aligned(b_bytes) : 0;
    c_bytes_ = out_copy ? Aligned(c_bytes) : 0;
    return Status::Ok();
  }
  size_t workspace() const override { return a_bytes_ + b_bytes_ + c_bytes_ + kGemmWorkspace; }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    char* ws = static_cast<char*>(env.workspace);
    const void* a = in[0];
    const void* b = in[1];
    void* c = out[0];
    if (a_copy_) {
      SP_CUDA(LaunchStridedCopy(elem_, a, ws, *a_copy_, env.stream));
      a = ws;
      ws += a_bytes_;
    }
    if (b_copy_) {
      SP_CUDA(LaunchStridedCopy(elem_, b, ws, *b_copy_, env.stream));
      b = ws;
      ws += b_bytes_;
    }
    if (out_copy_) {
      c = ws;
      ws += c_bytes_;
    }
    const size_t used = static_cast<size_t>(ws - static_cast<char*>(env.workspace));
    SP_RETURN_IF_ERROR(gemm_.Run(env.lt, a, b, nullptr, nullptr, c, ws, env.workspace_bytes - used, env.stream));
    if (out_copy_) SP_CUDA(LaunchStridedCopy(elem_, c, out[0], *out_copy_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "cublaslt gemm"; }

 private:
  size_t elem_ = 4;
  std::optional<StridedShape> a_copy_, b_copy_, out_copy_;
  size_t a_bytes_ = 0, b_bytes_ = 0, c_bytes_ = 0;
};

class CopyOnlyKernel : public NodeKernel {
 public:
  CopyOnlyKernel(size_t elem, StridedShape s) : elem_(elem), s_(s) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchStridedCopy(elem_, in[0], out[0], s_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "transpose"; }

 private:
  size_t elem_;
  StridedShape s_;
};

}  // namespace

Result<KernelChoice> MakeEinsum(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_ASSIGN_OR_RETURN(Equation e, Parse(node, r.in.size()));
  const size_t elem = DTypeSize(r.out[0].dtype);
  if (r.in.size() == 1) {
    const std::string& t = e.terms[0];
    if (e.out.size() != t.size()) return Unsupported(node.Label(), ": one-operand Einsum that sums labels");
    // out[o] = x[...]: iterate the output, read x through its strides.
    const auto xs = Packed(r.in[0].shape);
    std::vector<int64_t> src;
    for (char c : e.out) src.push_back(xs[t.find(c)]);
    SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(r.out[0].shape, {src, Packed(r.out[0].shape)}));
    return KernelChoice{false, std::make_unique<CopyOnlyKernel>(elem, s)};
  }
  if (r.in.size() != 2) return Unsupported(node.Label(), ": Einsum of ", r.in.size(), " operands");
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(r.in[0].dtype, node));
  if (r.in[1].dtype != r.in[0].dtype) return Unsupported(node.Label(), ": mixed input types");
  const std::string& la = e.terms[0];
  const std::string& lb = e.terms[1];
  const Shape& sa = r.in[0].shape;
  const Shape& sb = r.in[1].shape;
  std::string batch, m, n, k;
  for (char c : e.out) {
    const bool in_a = la.find(c) != std::string::npos, in_b = lb.find(c) != std::string::npos;
    if (in_a && in_b)
      batch += c;
    else if (in_a)
      m += c;
    else if (in_b)
      n += c;
  }
  for (char c : la) {
    if (e.out.find(c) != std::string::npos) continue;
    if (lb.find(c) == std::string::npos)
      return Unsupported(node.Label(), ": label '", std::string(1, c), "' summed within one operand");
    k += c;
  }
  for (char c : lb)
    if (e.out.find(c) == std::string::npos && la.find(c) == std::string::npos)
      return Unsupported(node.Label(), ": label '", std::string(1, c), "' summed within one operand");
  for (char c : batch + k)
    if (DimOf(c, la, sa) != DimOf(c, lb, sb))
      return Unsupported(node.Label(), ": label '", std::string(1, c), "' broadcast");
  auto prod = [](const std::string& labels, const std::string& term, const Shape& shape) {
    int64_t p = 1;
    for (char c : labels) p *= DimOf(c, term, shape);
    return p;
  };
  GemmShape g;
  g.type = t;
  g.tf32 = r.opt.tf32;
  g.batch = prod(batch, la, sa);
  g.m = prod(m, la, sa);
  g.n = prod(n, lb, sb);
  g.k = prod(k, la, sa);
  if (g.k == 0 || g.m == 0 || g.n == 0 || g.batch == 0) return Unsupported(node.Label(), ": empty product");
  g.stride_a = g.m * g.k;
  g.stride_b = g.k * g.n;
  g.stride_c = g.stride_d = g.m * g.n;
  SP_ASSIGN_OR_RETURN(auto a_copy, Permute(la, sa, batch + m + k));
  SP_ASSIGN_OR_RETURN(auto b_copy, Permute(lb, sb, batch + k + n));
  // The product's [batch, M, N] as a labelled tensor, then into the output's order.
  const std::string c_term = batch + m + n;
  Shape sc;
  for (char c : c_term) sc.push_back(la.find(c) != std::string::npos ? DimOf(c, la, sa) : DimOf(c, lb, sb));
  std::optional<StridedShape> out_copy;
  if (c_term != e.out) {
    const auto cs = Packed(sc);
    std::vector<int64_t> src;
    for (char c : e.out) src.push_back(cs[c_term.find(c)]);
    SP_ASSIGN_OR_RETURN(StridedShape s, MakeStrided(r.out[0].shape, {src, Packed(r.out[0].shape)}));
    out_copy = s;
  }
  if (r.opt.check_only) return KernelChoice{};
  auto kernel = std::make_unique<EinsumKernel>();
  SP_RETURN_IF_ERROR(kernel->Init(g, r.env, elem, a_copy, static_cast<size_t>(NumElements(sa)) * elem, b_copy,
                                  static_cast<size_t>(NumElements(sb)) * elem, out_copy,
                                  static_cast<size_t>(NumElements(sc)) * elem, r.opt.algo));
  return KernelChoice{false, std::move(kernel)};
}

}  // namespace sampan::cuda
