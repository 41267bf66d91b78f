// Tree ensembles of ai.onnx.ml (random forests, gradient boosting, exported by skl2onnx,
// onnxmltools, LightGBM/XGBoost converters): TreeEnsemble (5), TreeEnsembleRegressor and
// TreeEnsembleClassifier (1 and 3). All three are read into one form, a Forest (branch
// nodes, leaves holding (target, weight) votes, one root per tree), evaluated row by row
// in double: aggregate the votes of the leaf each tree reaches (SUM, AVERAGE, MIN, MAX),
// add the base values, apply the post transform. Semantics follow ONNX's reference
// (onnx/reference/ops/aionnxml), including its treatment of missing values: TreeEnsemble
// compares NaN like any value (true when missing_value_tracks_true), the older ops send NaN
// by the missing-value flag alone. Malformed trees (child ids out of range, cycles,
// features past X's columns) are errors naming the node, not crashes.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <map>

#include "base/half.h"
#include "ops/ml_common.h"

namespace sampan::ops::ml {
namespace {

enum Mode : int8_t { kLeq, kLt, kGte, kGt, kEq, kNeq, kMember, kLeaf };
enum class Aggregate { kAverage, kSum, kMin, kMax };

struct TreeNode {
  Mode mode = kLeaf;
  bool missing_true = false;
  int64_t feature = 0;
  double split = 0;
  int32_t on_true = -1, on_false = -1;  // node indexes
  int32_t begin = 0, end = 0;           // set members (kMember) or votes (kLeaf)
};

struct Forest {
  std::vector<TreeNode> nodes;
  std::vector<int32_t> roots;
  std::vector<double> members;                    // sorted within each node's range
  std::vector<std::pair<int64_t, double>> votes;  // (target, weight)
  int64_t targets = 0;
  Aggregate aggregate = Aggregate::kSum;
  bool nan_by_flag_only = false;  // the v1/v3 ops: NaN goes where missing_value_tracks_true says
  std::vector<double> base;       // empty, one for every target, or one per target
  PostTransform post = PostTransform::kNone;
};

Result<Mode> ModeFromString(const ir::Node& node, const std::string& s, size_t i) {
  static const std::map<std::string, Mode> kModes = {{"BRANCH_LEQ", kLeq}, {"BRANCH_LT", kLt}, {"BRANCH_GTE", kGte},
                                                     {"BRANCH_GT", kGt},   {"BRANCH_EQ", kEq}, {"BRANCH_NEQ", kNeq},
                                                     {"LEAF", kLeaf}};
  auto it = kModes.find(s);
  if (it == kModes.end()) return InvalidArgument(node.Label(), ": nodes_modes[", i, "] = '", s, "' is not a node mode");
  return it->second;
}

Result<Aggregate> AggregateFromString(const ir::Node& node) {
  const std::string s = node.attr_string("aggregate_function", "SUM");
  if (s == "SUM") return Aggregate::kSum;
  if (s == "AVERAGE") return Aggregate::kAverage;
  if (s == "MIN") return Aggregate::kMin;
  if (s == "MAX") return Aggregate::kMax;
  return InvalidArgument(node.Label(), ": aggregate_function must be SUM, AVERAGE, MIN or MAX, got '", s, "'");
}

// Checks that the walk from every root ends at a leaf without revisiting a node.
Status CheckAcyclic(const ir::Node& node, const Forest& f) {
  std::vector<int8_t> state(f.nodes.size(), 0);  // 0 new, 1 on the path, 2 done
  for (int32_t root : f.roots) {
    std::vector<std::pair<int32_t, int>> stack = {{root, 0}};
    while (!stack.empty()) {
      auto& [n, step] = stack.back();
      const TreeNode& t = f.nodes[static_cast<size_t>(n)];
      if (step == 0) {
        if (state[static_cast<size_t>(n)] == 2) {
          stack.pop_back();
          continue;
        }
        if (state[static_cast<size_t>(n)] == 1)
          return InvalidArgument(node.Label(), ": the trees have a cycle through node ", n);
        state[static_cast<size_t>(n)] = 1;
      }
      if (t.mode == kLeaf || step == 2) {
        state[static_cast<size_t>(n)] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t child = step == 0 ? t.on_true : t.on_false;
      ++step;
      if (state[static_cast<size_t>(child)] == 1)
        return InvalidArgument(node.Label(), ": the trees have a cycle through node ", child);
      stack.push_back({child, 0});
    }
  }
  return Status::Ok();
}

// ---- TreeEnsemble (ai.onnx.ml 5) --------------------------------------------------------

Result<Forest> ReadV5(const ir::Node& node) {
  const std::string& at = node.Label();
  Forest f;
  const std::vector<double> splits = FloatsOrTensor(node, "nodes_splits");
  const std::vector<double> weights = FloatsOrTensor(node, "leaf_weights");
  const std::vector<double> members = FloatsOrTensor(node, "membership_values");
  const auto features = node.attr_ints("nodes_featureids"), tids = node.attr_ints("nodes_truenodeids"),
             fids = node.attr_ints("nodes_falsenodeids"), tleaf = node.attr_ints("nodes_trueleafs"),
             fleaf = node.attr_ints("nodes_falseleafs"), targets = node.attr_ints("leaf_targetids"),
             roots = node.attr_ints("tree_roots"), missing = node.attr_ints("nodes_missing_value_tracks_true");
  std::vector<double> modes;
  if (const ir::Attribute* m = node.attr("nodes_modes"); m != nullptr && m->type == ir::AttrType::kTensor)
    for (int64_t i = 0; i < m->t.numel(); ++i) modes.push_back(ElementAsDouble(m->t, i));
  const size_t n = splits.size();
  for (auto [name, size] : {std::pair{"nodes_featureids", features.size()},
                            {"nodes_truenodeids", tids.size()},
                            {"nodes_falsenodeids", fids.size()},
                            {"nodes_trueleafs", tleaf.size()},
                            {"nodes_falseleafs", fleaf.size()},
                            {"nodes_modes", modes.size()}})
    if (size != n) return InvalidArgument(at, ": ", name, " has ", size, " entries, nodes_splits ", n);
  if (!missing.empty() && missing.size() != n)
    return InvalidArgument(at, ": nodes_missing_value_tracks_true has ", missing.size(), " entries for ", n, " nodes");
  if (targets.size() != weights.size())
    return InvalidArgument(at, ": leaf_targetids has ", targets.size(), " entries, leaf_weights ", weights.size());
  if (roots.empty()) return InvalidArgument(at, ": tree_roots is empty");
  f.targets = node.attr_int("n_targets", 0);
  if (f.targets < 1) return InvalidArgument(at, ": n_targets must be >= 1, got ", f.targets);
  const int64_t agg = node.attr_int("aggregate_function", 1);
  if (agg < 0 || agg > 3) return InvalidArgument(at, ": aggregate_function must be 0..3, got ", agg);
  f.aggregate = agg == 0   ? Aggregate::kAverage
                : agg == 1 ? Aggregate::kSum
                : agg == 2 ? Aggregate::kMin
                           : Aggregate::kMax;
  const int64_t post = node.attr_int("post_transform", 0);
  if (post < 0 || post > 4) return InvalidArgument(at, ": post_transform must be 0..4, got ", post);
  f.post = static_cast<PostTransform>(post);  // the enum has ONNX's numbering

  // Branch nodes 0..n-1, then leaf j as node n + j.
  const size_t leaves = weights.size();
  f.nodes.resize(n + leaves);
  size_t next_member = 0;
  for (size_t i = 0; i < n; ++i) {
    TreeNode& t = f.nodes[i];
    const double m = modes[i];
    if (!(m >= 0 && m <= 6) || m != std::floor(m))
      return InvalidArgument(at, ": nodes_modes[", i, "] = ", m, " is not 0..6");
    t.mode = static_cast<Mode>(static_cast<int>(m));
    t.feature = features[i];
    if (t.feature < 0) return InvalidArgument(at, ": nodes_featureids[", i, "] = ", t.feature);
    t.split = splits[i];
    t.missing_true = !missing.empty() && missing[i] != 0;
    for (int side = 0; side < 2; ++side) {
      const int64_t id = side == 0 ? tids[i] : fids[i];
      const bool leaf = (side == 0 ? tleaf[i] : fleaf[i]) != 0;
      const size_t limit = leaf ? leaves : n;
      if (id < 0 || static_cast<size_t>(id) >= limit)
        return InvalidArgument(at, ": node ", i, "'s ", side == 0 ? "true" : "false", " ", leaf ? "leaf" : "node",
                               " id ", id, " is outside [0, ", limit, ")");
      (side == 0 ? t.on_true : t.on_false) =
          static_cast<int32_t>(leaf ? n + static_cast<size_t>(id) : static_cast<size_t>(id));
    }
    if (t.mode == kMember) {  // the next NaN-delimited run of membership_values
      t.begin = static_cast<int32_t>(f.members.size());
      while (next_member < members.size() && !std::isnan(members[next_member]))
        f.members.push_back(members[next_member++]);
      if (next_member >= members.size())
        return InvalidArgument(at, ": membership_values has no NaN-terminated set for set-membership node ", i);
      ++next_member;
      t.end = static_cast<int32_t>(f.members.size());
      std::sort(f.members.begin() + t.begin, f.members.end());
    }
  }
  for (size_t j = 0; j < leaves; ++j) {
    TreeNode& t = f.nodes[n + j];
    t.mode = kLeaf;
    t.begin = static_cast<int32_t>(f.votes.size());
    if (targets[j] < 0 || targets[j] >= f.targets)
      return InvalidArgument(at, ": leaf_targetids[", j, "] = ", targets[j], " is outside [0, ", f.targets, ")");
    f.votes.push_back({targets[j], weights[j]});
    t.end = static_cast<int32_t>(f.votes.size());
  }
  for (int64_t r : roots) {
    if (r < 0 || static_cast<size_t>(r) >= n) return InvalidArgument(at, ": tree root ", r, " is outside [0, ", n, ")");
    // A tree that is one leaf: a root whose both branches name the same leaf.
    const size_t ri = static_cast<size_t>(r);
    const bool degenerate = tleaf[ri] && fleaf[ri] && tids[ri] == fids[ri];
    f.roots.push_back(degenerate ? f.nodes[ri].on_true : static_cast<int32_t>(r));
  }
  SP_RETURN_IF_ERROR(CheckAcyclic(node, f));
  return f;
}

// ---- TreeEnsembleRegressor / TreeEnsembleClassifier (ai.onnx.ml 1 and 3) ---------------

// prefix: "target" (regressor) or "class" (classifier).
Result<Forest> ReadV3(const ir::Node& node, const std::string& prefix, int64_t targets) {
  const std::string& at = node.Label();
  Forest f;
  f.nan_by_flag_only = true;
  f.targets = targets;
  const auto treeids = node.attr_ints("nodes_treeids"), nodeids = node.attr_ints("nodes_nodeids"),
             features = node.attr_ints("nodes_featureids"), tids = node.attr_ints("nodes_truenodeids"),
             fids = node.attr_ints("nodes_falsenodeids"), missing = node.attr_ints("nodes_missing_value_tracks_true");
  const std::vector<double> values = FloatsOrTensor(node, "nodes_values");
  std::vector<std::string> modes;
  if (const ir::Attribute* m = node.attr("nodes_modes"); m != nullptr) modes = m->strings;
  const size_t n = treeids.size();
  for (auto [name, size] : {std::pair{"nodes_nodeids", nodeids.size()},
                            {"nodes_featureids", features.size()},
                            {"nodes_truenodeids", tids.size()},
                            {"nodes_falsenodeids", fids.size()},
                            {"nodes_modes", modes.size()}})
    if (size != n) return InvalidArgument(at, ": ", name, " has ", size, " entries, nodes_treeids ", n);
  if (!values.empty() && values.size() != n)
    return InvalidArgument(at, ": nodes_values has ", values.size(), " entries for ", n, " nodes");
  if (!missing.empty() && missing.size() != n)
    return InvalidArgument(at, ": nodes_missing_value_tracks_true has ", missing.size(), " entries for ", n, " nodes");
  if (n == 0) return InvalidArgument(at, ": the ensemble has no node");
  if (values.empty() && std::any_of(modes.begin(), modes.end(), [](const std::string& m) { return m != "LEAF"; }))
    return InvalidArgument(at, ": branch nodes without nodes_values");
  std::map<std::pair<int64_t, int64_t>, int32_t> index;  // (tree, node id) -> node index
  std::map<int64_t, int32_t> root;                       // tree -> its first node
  for (size_t i = 0; i < n; ++i) {
    if (!index.emplace(std::pair{treeids[i], nodeids[i]}, static_cast<int32_t>(i)).second)
      return InvalidArgument(at, ": node id ", nodeids[i], " appears twice in tree ", treeids[i]);
    root.emplace(treeids[i], static_cast<int32_t>(i));
  }
  f.nodes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TreeNode& t = f.nodes[i];
    SP_ASSIGN_OR_RETURN(t.mode, ModeFromString(node, modes[i], i));
    if (t.mode == kLeaf) continue;
    t.feature = features[i];
    if (t.feature < 0) return InvalidArgument(at, ": nodes_featureids[", i, "] = ", t.feature);
    t.split = values.empty() ? 0.0 : values[i];
    t.missing_true = !missing.empty() && missing[i] != 0;
    for (int side = 0; side < 2; ++side) {
      const int64_t id = side == 0 ? tids[i] : fids[i];
      auto it = index.find({treeids[i], id});
      if (it == index.end())
        return InvalidArgument(at, ": node ", nodeids[i], " of tree ", treeids[i], " branches to node ", id,
                               ", which the tree does not have");
      (side == 0 ? t.on_true : t.on_false) = it->second;
    }
  }
  // Votes, grouped by leaf.
  const auto vt = node.attr_ints(prefix + "_treeids"), vn = node.attr_ints(prefix + "_nodeids"),
             vid = node.attr_ints(prefix + "_ids");
  const std::vector<double> vw = FloatsOrTensor(node, prefix + "_weights");
  if (vn.size() != vt.size() || vid.size() != vt.size() || vw.size() != vt.size())
    return InvalidArgument(at, ": ", prefix, "_treeids/_nodeids/_ids/_weights have ", vt.size(), ", ", vn.size(), ", ",
                           vid.size(), " and ", vw.size(), " entries");
  std::vector<std::vector<std::pair<int64_t, double>>> by_leaf(n);
  for (size_t k = 0; k < vt.size(); ++k) {
    auto it = index.find({vt[k], vn[k]});
    if (it == index.end() || f.nodes[static_cast<size_t>(it->second)].mode != kLeaf)
      return InvalidArgument(at, ": ", prefix, " weight ", k, " is for node ", vn[k], " of tree ", vt[k],
                             ", which is not a leaf");
    if (vid[k] < 0 || vid[k] >= targets)
      return InvalidArgument(at, ": ", prefix, "_ids[", k, "] = ", vid[k], " is outside [0, ", targets, ")");
    by_leaf[static_cast<size_t>(it->second)].push_back({vid[k], vw[k]});
  }
  for (size_t i = 0; i < n; ++i) {
    f.nodes[i].begin = static_cast<int32_t>(f.votes.size());
    f.votes.insert(f.votes.end(), by_leaf[i].begin(), by_leaf[i].end());
    f.nodes[i].end = static_cast<int32_t>(f.votes.size());
  }
  for (const auto& [tree, r] : root) f.roots.push_back(r);
  f.base = FloatsOrTensor(node, "base_values");
  if (f.base.size() > 1 && static_cast<int64_t>(f.base.size()) != targets)
    return InvalidArgument(at, ": base_values has ", f.base.size(), " entries for ", targets,
                           " outputs (needs one, or one per output)");
  SP_ASSIGN_OR_RETURN(f.post, ParsePostTransform(node));
  SP_RETURN_IF_ERROR(CheckAcyclic(node, f));
  return f;
}

bool Goes(const Forest& f, const TreeNode& t, double x) {
  if (std::isnan(x) && (t.missing_true || f.nan_by_flag_only)) return t.missing_true;
  switch (t.mode) {
    case kLeq:
      return x <= t.split;
    case kLt:
      return x < t.split;
    case kGte:
      return x >= t.split;
    case kGt:
      return x > t.split;
    case kEq:
      return x == t.split;
    case kNeq:
      return x != t.split;
    case kMember:
      return std::binary_search(f.members.begin() + t.begin, f.members.begin() + t.end, x);
    case kLeaf:
      break;
  }
  return false;
}

// Aggregated scores of every row of x ([rows, cols], doubles) -> out [rows, targets];
// `extreme` is the largest value of the output type (the start of MIN and MAX).
Status Evaluate(const ir::Node& node, const Forest& f, const std::vector<double>& x, int64_t rows, int64_t cols,
                double extreme, std::vector<double>* out) {
  out->assign(static_cast<size_t>(rows * f.targets), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    double* s = out->data() + r * f.targets;
    if (f.aggregate == Aggregate::kMin) std::fill(s, s + f.targets, extreme);
    if (f.aggregate == Aggregate::kMax) std::fill(s, s + f.targets, -extreme);
    for (int32_t root : f.roots) {
      const TreeNode* t = &f.nodes[static_cast<size_t>(root)];
      while (t->mode != kLeaf) {
        if (t->feature >= cols)
          return InvalidArgument(node.Label(), ": a tree reads feature ", t->feature, " of X's ", cols, " columns");
        t = &f.nodes[static_cast<size_t>(Goes(f, *t, row[t->feature]) ? t->on_true : t->on_false)];
      }
      for (int32_t v = t->begin; v < t->end; ++v) {
        const auto [target, w] = f.votes[static_cast<size_t>(v)];
        double& d = s[target];
        switch (f.aggregate) {
          case Aggregate::kSum:
            d += w;
            break;
          case Aggregate::kAverage:
            d += w;
            break;
          case Aggregate::kMin:
            d = std::min(d, w);
            break;
          case Aggregate::kMax:
            d = std::max(d, w);
            break;
        }
      }
    }
    if (f.aggregate == Aggregate::kAverage)
      for (int64_t j = 0; j < f.targets; ++j) s[j] /= static_cast<double>(f.roots.size());
    for (int64_t j = 0; j < f.targets && !f.base.empty(); ++j) s[j] += f.base[f.base.size() == 1 ? 0 : j];
  }
  return Status::Ok();
}

std::vector<double> Features(const Tensor& x) {
  std::vector<double> v(static_cast<size_t>(x.numel()));
  // Integer features are compared as float, as the reference converts them.
  const bool as_float = x.dtype() == DType::kInt32 || x.dtype() == DType::kInt64;
  for (int64_t i = 0; i < x.numel(); ++i)
    v[static_cast<size_t>(i)] = as_float ? static_cast<float>(ElementAsDouble(x, i)) : ElementAsDouble(x, i);
  return v;
}

// ---- op entry points ------------------------------------------------------------------

Status InferTreeEnsemble(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kFloat16}));
  SP_ASSIGN_OR_RETURN(Forest f, ReadV5(ctx.node()));
  const auto& x = ctx.input_dims(0);
  if (x && x->size() != 2) return ctx.Error("X must be [N, F], got rank ", x->size());
  ctx.set_output(0, ctx.input_dtype(0), ir::Dims{x ? (*x)[0] : ir::Dim::Unknown(), ir::Dim::Known(f.targets)});
  return Status::Ok();
}

Status RunTreeEnsemble(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(Forest f, ReadV5(ctx.node));
  const Tensor& x = ctx.in(0);
  if (x.rank() != 2) return ctx.Error("X must be [N, F], got ", x.Describe());
  const double extreme = x.dtype() == DType::kFloat64 ? DBL_MAX : x.dtype() == DType::kFloat16 ? 65504.0 : FLT_MAX;
  std::vector<double> s;
  SP_RETURN_IF_ERROR(Evaluate(ctx.node, f, Features(x), x.shape()[0], x.shape()[1], extreme, &s));
  const int64_t rows = x.shape()[0];
  for (int64_t r = 0; r < rows; ++r) ApplyPostTransform(f.post, s.data() + r * f.targets, f.targets);
  Tensor& y = ctx.out(0);
  return DispatchDType(y.dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T> || std::is_floating_point_v<T>) {
      T* py = y.mutable_data<T>();
      for (size_t i = 0; i < s.size(); ++i) py[i] = ConvertElement<T>(s[i]);
    }
  });
}

Status InferTreeEnsembleRegressor(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFeatureTypes));
  const int64_t targets = ctx.node().attr_int("n_targets", 1);
  if (targets < 1) return ctx.Error("n_targets must be >= 1, got ", targets);
  SP_RETURN_IF_ERROR(ReadV3(ctx.node(), "target", targets).status());
  SP_RETURN_IF_ERROR(AggregateFromString(ctx.node()).status());
  SP_ASSIGN_OR_RETURN(ir::Dim rows, InferRows(ctx, 0));
  ctx.set_output(0, DType::kFloat32, ir::Dims{rows, ir::Dim::Known(targets)});
  return Status::Ok();
}

Status RunTreeEnsembleRegressor(KernelContext& ctx) {
  const int64_t targets = ctx.node.attr_int("n_targets", 1);
  SP_ASSIGN_OR_RETURN(Forest f, ReadV3(ctx.node, "target", targets));
  SP_ASSIGN_OR_RETURN(f.aggregate, AggregateFromString(ctx.node));
  const Tensor& x = ctx.in(0);
  int64_t rows = 0, cols = 0;
  SP_RETURN_IF_ERROR(RowsAndCols(ctx.node, x, &rows, &cols));
  std::vector<double> s;
  SP_RETURN_IF_ERROR(Evaluate(ctx.node, f, Features(x), rows, cols, FLT_MAX, &s));
  float* y = ctx.out(0).mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    ApplyPostTransform(f.post, s.data() + r * targets, targets);
    for (int64_t j = 0; j < targets; ++j)
      y[r * targets + j] = static_cast<float>(s[static_cast<size_t>(r * targets + j)]);
  }
  return Status::Ok();
}

// The class labels: classlabels_int64s, or classlabels_strings (then the label output is a
// string tensor), exactly one of them.
struct ClassLabels {
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  bool is_string = false;
  int64_t size() const { return static_cast<int64_t>(is_string ? strings.size() : ints.size()); }
};

Result<ClassLabels> ReadClassLabels(const ir::Node& node) {
  ClassLabels l;
  const bool has_ints = node.has_attr("classlabels_int64s");
  l.is_string = node.has_attr("classlabels_strings");
  if (has_ints == l.is_string)
    return InvalidArgument(node.Label(), ": exactly one of classlabels_int64s and classlabels_strings must be given");
  if (l.is_string) {
    const ir::Attribute* a = node.attr("classlabels_strings");
    if (a->type != ir::AttrType::kStrings)
      return InvalidArgument(node.Label(), ": classlabels_strings must be strings");
    l.strings = a->strings;
  } else {
    l.ints = node.attr_ints("classlabels_int64s");
  }
  if (l.size() == 0) return InvalidArgument(node.Label(), ": the class label list is empty");
  return l;
}

Result<int64_t> ClassCount(const ir::Node& node) {
  SP_ASSIGN_OR_RETURN(ClassLabels l, ReadClassLabels(node));
  return l.size();
}

Status InferTreeEnsembleClassifier(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFeatureTypes));
  SP_ASSIGN_OR_RETURN(int64_t classes, ClassCount(ctx.node()));
  SP_RETURN_IF_ERROR(ReadV3(ctx.node(), "class", classes).status());
  SP_ASSIGN_OR_RETURN(ir::Dim rows, InferRows(ctx, 0));
  SP_ASSIGN_OR_RETURN(ClassLabels labels, ReadClassLabels(ctx.node()));
  ctx.set_output(0, labels.is_string ? DType::kString : DType::kInt64, ir::Dims{rows});
  // One label means a binary model written with its positive class only: two score columns.
  if (ctx.num_outputs() > 1)
    ctx.set_output(1, DType::kFloat32, ir::Dims{rows, ir::Dim::Known(std::max<int64_t>(classes, 2))});
  return Status::Ok();
}

Status RunTreeEnsembleClassifier(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(int64_t classes, ClassCount(ctx.node));
  SP_ASSIGN_OR_RETURN(Forest f, ReadV3(ctx.node, "class", classes));
  SP_ASSIGN_OR_RETURN(ClassLabels labels, ReadClassLabels(ctx.node));
  if (classes == 1 && (labels.is_string || labels.ints[0] != 1))
    return Unsupported(ctx.node.Label(), ": one class label other than 1");
  const PostTransform post = f.post;
  f.post = PostTransform::kNone;
  const Tensor& x = ctx.in(0);
  int64_t rows = 0, cols = 0;
  SP_RETURN_IF_ERROR(RowsAndCols(ctx.node, x, &rows, &cols));
  std::vector<double> s;
  SP_RETURN_IF_ERROR(Evaluate(ctx.node, f, Features(x), rows, cols, FLT_MAX, &s));
  // Binary models vote for one class only: the other column is derived from it.
  const auto ids = ctx.node.attr_ints("class_ids");
  const bool binary = !ids.empty() && std::all_of(ids.begin(), ids.end(), [&](int64_t i) { return i == ids[0]; });
  const int64_t e = std::max<int64_t>(classes, 2);
  Tensor& y = ctx.out(0);
  std::vector<double> z(static_cast<size_t>(e));
  for (int64_t r = 0; r < rows; ++r) {
    const double* sr = s.data() + r * classes;
    std::fill(z.begin(), z.end(), 0.0);
    std::copy_n(sr, classes, z.begin());
    if (binary) {
      z[1] = sr[0];
      z[0] = post == PostTransform::kNone || post == PostTransform::kProbit ? 1 - z[1] : -z[1];
    }
    ApplyPostTransform(post, z.data(), e);
    const int64_t best = std::max_element(z.begin(), z.end()) - z.begin();
    if (labels.is_string)
      y.mutable_strings()[r] = labels.strings[static_cast<size_t>(best)];
    else
      y.mutable_data<int64_t>()[r] = classes == 1 ? (best == 1 ? 1 : 0) : labels.ints[static_cast<size_t>(best)];
    if (ctx.outputs.size() > 1) {
      float* pz = ctx.out(1).mutable_data<float>() + r * e;
      for (int64_t j = 0; j < e; ++j) pz[j] = static_cast<float>(z[static_cast<size_t>(j)]);
    }
  }
  return Status::Ok();
}

SAMPAN_REGISTER_DOMAIN_OP(kDomain, "TreeEnsemble", InferTreeEnsemble, RunTreeEnsemble);
SAMPAN_REGISTER_DOMAIN_OP(kDomain, "TreeEnsembleRegressor", InferTreeEnsembleRegressor, RunTreeEnsembleRegressor);
SAMPAN_REGISTER_OP_DEF({.domain = kDomain,
                        .op_type = "TreeEnsembleClassifier",
                        .infer = InferTreeEnsembleClassifier,
                        .run = RunTreeEnsembleClassifier,
                        .strings = true});  // string class labels

}  // namespace
}  // namespace sampan::ops::ml
