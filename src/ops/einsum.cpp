// Einsum: explicit ("ij,jk->ik") and implicit ("ij,jk") output, repeated indices (diagonals),
// ellipsis broadcasting. Reference kernel: one generic index loop over every label.
#include <algorithm>
#include <cctype>
#include <string>

#include "ops/common.h"

namespace sampan::ops {
namespace {

constexpr int kEllipsis = -1;
constexpr int kEllipsisBase = 128;  // label id of ellipsis dim j: kEllipsisBase + j (letters: their char code)

struct Equation {
  std::vector<std::vector<int>> terms;  // per input: char codes, kEllipsis for "..."
  bool explicit_out = false;
  std::vector<int> out;  // explicit output term
};

Result<std::vector<int>> ParseTerm(const std::string& eq, const std::string& s) {
  std::vector<int> t;
  bool ell = false;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '.') {
      if (s.compare(i, 3, "...") != 0 || ell)
        return InvalidArgument("Einsum equation '", eq, "': malformed ellipsis in term '", s, "'");
      ell = true;
      t.push_back(kEllipsis);
      i += 3;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      t.push_back(static_cast<unsigned char>(c));
      ++i;
    } else {
      return InvalidArgument("Einsum equation '", eq, "': unexpected character '", std::string(1, c), "'");
    }
  }
  return t;
}

Result<Equation> ParseEquation(const std::string& raw, size_t num_inputs) {
  std::string eq;
  for (char c : raw)
    if (!std::isspace(static_cast<unsigned char>(c))) eq.push_back(c);
  Equation e;
  std::string lhs = eq;
  const size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    e.explicit_out = true;
    SP_ASSIGN_OR_RETURN(e.out, ParseTerm(raw, eq.substr(arrow + 2)));
    for (size_t i = 0; i < e.out.size(); ++i)
      for (size_t j = i + 1; j < e.out.size(); ++j)
        if (e.out[i] == e.out[j]) return InvalidArgument("Einsum equation '", raw, "': output repeats a label");
  }
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    SP_ASSIGN_OR_RETURN(
        auto t, ParseTerm(raw, lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    e.terms.push_back(std::move(t));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (e.terms.size() != num_inputs)
    return InvalidArgument("Einsum equation '", raw, "' has ", e.terms.size(), " input terms but the node has ",
                           num_inputs, " inputs");
  if (e.explicit_out) {
    for (int l : e.out) {
      if (l == kEllipsis) continue;
      bool found = false;
      for (const auto& t : e.terms) found = found || std::find(t.begin(), t.end(), l) != t.end();
      if (!found)
        return InvalidArgument("Einsum equation '", raw, "': output label '", std::string(1, static_cast<char>(l)),
                               "' is not in any input");
    }
  }
  return e;
}

struct Expanded {
  std::vector<std::vector<int>> in_labels;  // per input, one label per dim
  std::vector<int> out_labels;
  std::vector<int> all_labels;  // output labels first, then summed labels
};

// ranks: every input's rank (known).
Result<Expanded> Expand(const Equation& e, const std::vector<int64_t>& ranks, const std::string& raw) {
  Expanded x;
  int64_t ell_rank = 0;
  std::vector<int64_t> ell_of(ranks.size(), 0);
  bool any_ell = false;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& t = e.terms[i];
    const bool has_ell = std::find(t.begin(), t.end(), kEllipsis) != t.end();
    const int64_t letters = static_cast<int64_t>(t.size()) - (has_ell ? 1 : 0);
    if (has_ell) {
      any_ell = true;
      if (ranks[i] < letters)
        return InvalidArgument("Einsum equation '", raw, "': input ", i, " has rank ", ranks[i], " < ", letters,
                               " labels");
      ell_of[i] = ranks[i] - letters;
      ell_rank = std::max(ell_rank, ell_of[i]);
    } else if (ranks[i] != letters) {
      return InvalidArgument("Einsum equation '", raw, "': input ", i, " has rank ", ranks[i], " but its term has ",
                             letters, " labels");
    }
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::vector<int> labels;
    for (int l : e.terms[i]) {
      if (l == kEllipsis) {
        for (int64_t j = 0; j < ell_of[i]; ++j)
          labels.push_back(kEllipsisBase + static_cast<int>(ell_rank - ell_of[i] + j));
      } else {
        labels.push_back(l);
      }
    }
    x.in_labels.push_back(std::move(labels));
  }
  if (e.explicit_out) {
    for (int l : e.out) {
      if (l == kEllipsis) {
        for (int64_t j = 0; j < ell_rank; ++j) x.out_labels.push_back(kEllipsisBase + static_cast<int>(j));
      } else {
        x.out_labels.push_back(l);
      }
    }
  } else {
    if (any_ell)
      for (int64_t j = 0; j < ell_rank; ++j) x.out_labels.push_back(kEllipsisBase + static_cast<int>(j));
    int count[128] = {};
    for (const auto& t : e.terms)
      for (int l : t)
        if (l != kEllipsis) ++count[l];
    for (int c = 0; c < 128; ++c)
      if (count[c] == 1) x.out_labels.push_back(c);
  }
  x.all_labels = x.out_labels;
  for (const auto& t : x.in_labels)
    for (int l : t)
      if (std::find(x.all_labels.begin(), x.all_labels.end(), l) == x.all_labels.end()) x.all_labels.push_back(l);
  return x;
}

Status InferEinsum(InferContext& ctx) {
  if (ctx.num_inputs() < 1) return ctx.Error("expects at least 1 input");
  if (ctx.num_outputs() != 1) return ctx.Error("expects 1 output");
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error("input ", i, " is missing");
    SP_RETURN_IF_ERROR(ExpectDType(ctx, i, kNumericTypes));
    SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, i));
  }
  SP_ASSIGN_OR_RETURN(const std::string eqs, [&]() -> Result<std::string> {
    const ir::Attribute* a = ctx.node().attr("equation");
    if (!a || a->type != ir::AttrType::kString) return ctx.Error("missing required string attribute 'equation'");
    return ctx.node().attr_string("equation", "");
  }());
  auto parsed = ParseEquation(eqs, ctx.num_inputs());
  if (!parsed.ok()) return ctx.Error(parsed.status().message());
  const DType dt = ctx.input_dtype(0);
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) ranks.push_back(ctx.input_rank(i));
  if (std::find(ranks.begin(), ranks.end(), -1) != ranks.end()) {
    ctx.set_output(0, dt, std::nullopt);
    return Status::Ok();
  }
  auto ex = Expand(*parsed, ranks, eqs);
  if (!ex.ok()) return ctx.Error(ex.status().message());
  // Merge each label's dims across its occurrences (size-1 broadcasts).
  std::vector<std::optional<ir::Dim>> dim_of(kEllipsisBase + 64);
  for (size_t i = 0; i < ex->in_labels.size(); ++i) {
    const ir::Dims& d = *ctx.input_dims(i);
    for (size_t p = 0; p < d.size(); ++p) {
      const int l = ex->in_labels[i][p];
      if (l >= static_cast<int>(dim_of.size())) return ctx.Error("too many ellipsis dims");
      auto& cur = dim_of[static_cast<size_t>(l)];
      const ir::Dim& nd = d[p];
      if (!cur) {
        cur = nd;
        continue;
      }
      if (cur->known() && nd.known()) {
        if (cur->value == nd.value || nd.value == 1) continue;
        if (cur->value == 1) {
          cur = nd;
          continue;
        }
        return ctx.Error("label size mismatch: ", cur->value, " vs ", nd.value, " for input ", i, " dim ", p);
      }
      if (!cur->known() && nd.known() && nd.value != 1) cur = nd;
    }
  }
  ir::Dims out;
  for (int l : ex->out_labels) out.push_back(dim_of[static_cast<size_t>(l)].value_or(ir::Dim::Unknown()));
  ctx.set_output(0, dt, std::move(out));
  return Status::Ok();
}

template <class T>
using AccOf =
    std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<std::is_integral_v<T>, uint64_t, float>>;

Status RunEinsum(KernelContext& ctx) {
  const std::string eqs = ctx.node.attr_string("equation", "");
  const size_t n = ctx.inputs.size();
  SP_ASSIGN_OR_RETURN(Equation e, ParseEquation(eqs, n));
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < n; ++i) ranks.push_back(ctx.in(i).rank());
  SP_ASSIGN_OR_RETURN(Expanded ex, Expand(e, ranks, eqs));
  const size_t K = ex.all_labels.size();
  const size_t n_out = ex.out_labels.size();
  std::vector<int64_t> size(K, 1);
  auto slot = [&](int l) {
    return static_cast<size_t>(std::find(ex.all_labels.begin(), ex.all_labels.end(), l) - ex.all_labels.begin());
  };
  for (size_t i = 0; i < n; ++i)
    for (size_t p = 0; p < ex.in_labels[i].size(); ++p) {
      const size_t k = slot(ex.in_labels[i][p]);
      const int64_t d = ctx.in(i).dim(static_cast<int64_t>(p));
      if (d == size[k] || d == 1) continue;
      if (size[k] != 1) return ctx.Error("label size mismatch ", size[k], " vs ", d);
      size[k] = d;
    }
  // Per input, the element stride of each label (summed over repeats: diagonals).
  std::vector<std::vector<int64_t>> stride(n, std::vector<int64_t>(K, 0));
  for (size_t i = 0; i < n; ++i) {
    const Shape st = StridesOf(ctx.in(i).shape());
    for (size_t p = 0; p < ex.in_labels[i].size(); ++p) {
      const size_t k = slot(ex.in_labels[i][p]);
      if (ctx.in(i).dim(static_cast<int64_t>(p)) != 1) stride[i][k] += st[p];
    }
  }
  Shape out_shape;
  for (size_t k = 0; k < n_out; ++k) out_shape.push_back(size[k]);
  Tensor& y = ctx.out(0);
  if (!y.defined() || y.shape() != out_shape) y = Tensor::Alloc(ctx.in(0).dtype(), out_shape);
  int64_t n_red = 1;
  for (size_t k = n_out; k < K; ++k) n_red *= size[k];
  const int64_t total_out = NumElements(out_shape);
  return DispatchDType(ctx.in(0).dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using Acc = AccOf<T>;
      std::vector<const T*> ptr(n);
      for (size_t i = 0; i < n; ++i) ptr[i] = ctx.in(i).data<T>();
      T* py = y.mutable_data<T>();
      std::fill(py, py + total_out, T{});
      if (n_red == 0 || total_out == 0) return;
      std::vector<int64_t> idx(K, 0), off(n, 0);
      for (int64_t o = 0; o < total_out; ++o) {
        Acc acc = 0;
        for (int64_t r = 0; r < n_red; ++r) {
          Acc prod = 1;
          for (size_t i = 0; i < n; ++i) {
            if constexpr (std::is_integral_v<T>)
              prod *= static_cast<Acc>(static_cast<int64_t>(ptr[i][off[i]]));
            else
              prod *= static_cast<Acc>(static_cast<ComputeType<T>>(ptr[i][off[i]]));
          }
          acc += prod;
          // Advance the odometer over all labels (summed labels innermost).
          for (size_t k = K; k-- > 0;) {
            ++idx[k];
            for (size_t i = 0; i < n; ++i) off[i] += stride[i][k];
            if (idx[k] < size[k]) break;
            for (size_t i = 0; i < n; ++i) off[i] -= stride[i][k] * idx[k];
            idx[k] = 0;
          }
        }
        if constexpr (std::is_integral_v<T>)
          py[o] = static_cast<T>(static_cast<int64_t>(acc));
        else
          py[o] = ConvertElement<T>(acc);
      }
    }
  });
}

SAMPAN_REGISTER_OP("Einsum", InferEinsum, RunEinsum);

}  // namespace
}  // namespace sampan::ops
