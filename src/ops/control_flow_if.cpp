// If (opsets 1, 11, 13, 16, 19, 21, 23, 24, 25): runs then_branch or else_branch, which
// take no inputs and read enclosing values through their captures. Tensor-typed outputs
// (sequence and optional outputs, opsets 13+, are not supported yet).
#include "ops/common.h"
#include "ops/control_flow.h"

namespace sampan::ops {
namespace {

struct Branches {
  const ir::Graph* then_branch = nullptr;
  const ir::Graph* else_branch = nullptr;
};

Result<Branches> BranchesOf(const InferContext& ctx) {
  const ir::Node& node = ctx.node();
  Branches b{node.subgraph("then_branch"), node.subgraph("else_branch")};
  if (b.then_branch == nullptr || b.else_branch == nullptr)
    return ctx.Error("needs graph attributes then_branch and else_branch");
  for (const ir::Graph* g : {b.then_branch, b.else_branch}) {
    const char* which = g == b.then_branch ? "then_branch" : "else_branch";
    if (!g->inputs().empty()) return ctx.Error(which, " must take no inputs, has ", g->inputs().size());
    if (g->outputs().size() < node.num_outputs())
      return ctx.Error(which, " yields ", g->outputs().size(), " outputs, the node has ", node.num_outputs());
  }
  if (b.then_branch->outputs().size() != b.else_branch->outputs().size())
    return ctx.Error("then_branch yields ", b.then_branch->outputs().size(), " outputs, else_branch ",
                     b.else_branch->outputs().size());
  return b;
}

Status InferIf(InferContext& ctx) {
  if (ctx.node().num_explicit_inputs() != 1 || !ctx.has_input(0))
    return ctx.Error("expects 1 input (cond), got ", ctx.node().num_explicit_inputs());
  SP_ASSIGN_OR_RETURN(Branches b, BranchesOf(ctx));
  if (ctx.input_dtype(0) != DType::kBool) return ctx.Error("cond must be bool, got ", DTypeName(ctx.input_dtype(0)));
  if (auto shape = ctx.input_static_shape(0); shape && NumElements(*shape) != 1)
    return ctx.Error("cond must hold one element, has shape ", ShapeToString(*shape));
  const std::vector<InferInput> captures = CaptureInputs(ctx);
  const std::string label = ctx.node().Label();
  const Tensor* cond = ctx.input_value(0);
  Result<std::vector<SubgraphOutput>> then_out =
      InferSubgraph(*b.then_branch, ctx.opset(), {}, captures, label + " then_branch");
  Result<std::vector<SubgraphOutput>> else_out =
      InferSubgraph(*b.else_branch, ctx.opset(), {}, captures, label + " else_branch");
  // A known condition: only the branch taken must make sense at these inputs (exports
  // specialise branches on shapes, and the other one may not apply).
  if (cond != nullptr) {
    const bool take_then = ElementAsInt64(*cond, 0) != 0;
    Result<std::vector<SubgraphOutput>>& taken = take_then ? then_out : else_out;
    if (!taken.ok()) return taken.status();
    const Result<std::vector<SubgraphOutput>>& other = take_then ? else_out : then_out;
    for (size_t k = 0; k < ctx.num_outputs(); ++k) {
      const SubgraphOutput& o = (*taken)[k];
      if (other.ok() && (*other)[k].dtype != DType::kUndefined && o.dtype != DType::kUndefined &&
          (*other)[k].dtype != o.dtype)
        return ctx.Error("output ", k, " is ", DTypeName((*then_out)[k].dtype), " from then_branch but ",
                         DTypeName((*else_out)[k].dtype), " from else_branch");
      ctx.set_output(k, o.dtype, o.dims);
      if (o.value) ctx.set_output_value(k, *o.value);
    }
    return Status::Ok();
  }
  if (!then_out.ok()) return then_out.status();
  if (!else_out.ok()) return else_out.status();
  for (size_t k = 0; k < ctx.num_outputs(); ++k) {
    const SubgraphOutput& t = (*then_out)[k];
    const SubgraphOutput& e = (*else_out)[k];
    if (t.dtype != DType::kUndefined && e.dtype != DType::kUndefined && t.dtype != e.dtype)
      return ctx.Error("output ", k, " is ", DTypeName(t.dtype), " from then_branch but ", DTypeName(e.dtype),
                       " from else_branch");
    // Before opset 11 both branches must agree on shapes; since, the output takes what both say.
    ctx.set_output(k, t.dtype != DType::kUndefined ? t.dtype : e.dtype, MergeDims(t.dims, e.dims));
  }
  return Status::Ok();
}

Status RunIf(KernelContext& ctx) {
  const Tensor& cond = ctx.in(0);
  if (cond.numel() != 1) return ctx.Error("cond must hold one element, has shape ", ShapeToString(cond.shape()));
  const bool take_then = ElementAsInt64(cond, 0) != 0;
  const ir::Graph* branch = ctx.node.subgraph(take_then ? "then_branch" : "else_branch");
  if (branch == nullptr) return ctx.Error("missing branch");
  std::vector<Tensor> outs;
  const SubgraphRunner runner(*branch, ctx.opset, ctx.node.Label() + (take_then ? " then_branch" : " else_branch"));
  SP_RETURN_IF_ERROR(runner.Run({}, CaptureTensors(ctx), &outs));
  for (size_t k = 0; k < ctx.outputs.size() && k < outs.size(); ++k) SetKernelOutput(ctx, k, std::move(outs[k]));
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF(
    {.domain = "", .op_type = "If", .infer = InferIf, .run = RunIf, .strings = true, .sequences = true});

}  // namespace sampan::ops
