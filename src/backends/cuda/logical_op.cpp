#include "backends/cuda/logical_op.h"

#include <map>
#include <optional>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/logical.h"

namespace sampan::cuda {
namespace {

std::optional<CompareType> CompareTypeOf(DType t) {
  switch (t) {
    case DType::kFloat32:
      return CompareType::kF32;
    case DType::kFloat16:
      return CompareType::kF16;
    case DType::kBFloat16:
      return CompareType::kBF16;
    case DType::kInt32:
      return CompareType::kI32;
    case DType::kInt64:
      return CompareType::kI64;
    case DType::kBool:
      return CompareType::kBool;
    case DType::kUInt8:
      return CompareType::kU8;
    case DType::kInt8:
      return CompareType::kI8;
    default:
      return std::nullopt;
  }
}

const std::map<std::string, CompareOp>& CompareOps() {
  static const std::map<std::string, CompareOp> k = {{"Equal", CompareOp::kEqual},
                                                     {"Less", CompareOp::kLess},
                                                     {"Greater", CompareOp::kGreater},
                                                     {"LessOrEqual", CompareOp::kLessOrEqual},
                                                     {"GreaterOrEqual", CompareOp::kGreaterOrEqual}};
  return k;
}

const std::map<std::string, LogicOp>& LogicOps() {
  static const std::map<std::string, LogicOp> k = {
      {"And", LogicOp::kAnd}, {"Or", LogicOp::kOr}, {"Xor", LogicOp::kXor}};
  return k;
}

class CompareKernel : public NodeKernel {
 public:
  CompareKernel(CompareOp op, CompareType t, StridedShape s) : op_(op), t_(t), s_(s) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchCompare(op_, t_, in[0], in[1], out[0], s_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "compare"; }

 private:
  CompareOp op_;
  CompareType t_;
  StridedShape s_;
};

class LogicalKernel : public NodeKernel {
 public:
  LogicalKernel(LogicOp op, StridedShape s) : op_(op), s_(s) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchLogical(op_, in[0], in[1], out[0], s_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "logical"; }

 private:
  LogicOp op_;
  StridedShape s_;
};

class NotKernel : public NodeKernel {
 public:
  explicit NotKernel(int64_t n) : n_(n) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchNot(in[0], out[0], n_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "logical"; }

 private:
  int64_t n_;
};

class IsSpecialKernel : public NodeKernel {
 public:
  IsSpecialKernel(FloatType t, int64_t n, bool inf, bool pos, bool neg)
      : t_(t), n_(n), inf_(inf), pos_(pos), neg_(neg) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchIsSpecial(t_, in[0], out[0], n_, inf_, pos_, neg_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "compare"; }

 private:
  FloatType t_;
  int64_t n_;
  bool inf_, pos_, neg_;
};

class WhereKernel : public NodeKernel {
 public:
  WhereKernel(size_t elem, StridedShape s) : elem_(elem), s_(s) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchWhere(elem_, in[0], in[1], in[2], out[0], s_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "where"; }

 private:
  size_t elem_;
  StridedShape s_;
};

}  // namespace

std::vector<std::string> LogicalOpNames() {
  std::vector<std::string> names{"IsNaN", "IsInf", "Not", "Where"};
  for (const auto& [op, c] : CompareOps()) names.push_back(op);
  for (const auto& [op, l] : LogicOps()) names.push_back(op);
  return names;
}

const char* LogicalFamily(const std::string& op) {
  if (CompareOps().count(op) || op == "IsNaN" || op == "IsInf") return "compare";
  if (LogicOps().count(op) || op == "Not") return "logical";
  if (op == "Where") return "where";
  return "";
}

Result<KernelChoice> MakeLogicalOp(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out) {
  const std::string& op = node.op_type;
  const Shape& o = out.shape;
  if (auto c = CompareOps().find(op); c != CompareOps().end()) {
    if (in.size() != 2 || !in[1].present || in[0].dtype != in[1].dtype)
      return Unsupported(node.Label(), ": mixed types");
    auto t = CompareTypeOf(in[0].dtype);
    if (!t) return Unsupported(node.Label(), ": no CUDA comparison for ", DTypeName(in[0].dtype));
    SP_ASSIGN_OR_RETURN(StridedShape s,
                        MakeStrided(o, {BroadcastStrides(in[0].shape, o), BroadcastStrides(in[1].shape, o)}));
    return KernelChoice{false, std::make_unique<CompareKernel>(c->second, *t, s)};
  }
  if (auto l = LogicOps().find(op); l != LogicOps().end()) {
    if (in.size() != 2 || !in[1].present || in[0].dtype != DType::kBool || in[1].dtype != DType::kBool)
      return Unsupported(node.Label(), ": logical ops take bools");
    SP_ASSIGN_OR_RETURN(StridedShape s,
                        MakeStrided(o, {BroadcastStrides(in[0].shape, o), BroadcastStrides(in[1].shape, o)}));
    return KernelChoice{false, std::make_unique<LogicalKernel>(l->second, s)};
  }
  if (op == "Not") {
    if (in[0].dtype != DType::kBool) return Unsupported(node.Label(), ": Not takes bools");
    return KernelChoice{false, std::make_unique<NotKernel>(NumElements(o))};
  }
  if (op == "IsNaN" || op == "IsInf") {
    SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
    const bool inf = op == "IsInf";
    return KernelChoice{
        false, std::make_unique<IsSpecialKernel>(t, NumElements(o), inf, node.attr_int("detect_positive", 1) != 0,
                                                 node.attr_int("detect_negative", 1) != 0)};
  }
  if (op == "Where") {
    if (in.size() != 3 || !in[1].present || !in[2].present || in[0].dtype != DType::kBool ||
        in[1].dtype != in[2].dtype || in[1].dtype != out.dtype)
      return Unsupported(node.Label(), ": Where types");
    const size_t elem = DTypeSize(out.dtype);
    if (elem != 1 && elem != 2 && elem != 4 && elem != 8) return Unsupported(node.Label(), ": Where element size");
    SP_ASSIGN_OR_RETURN(StridedShape s,
                        MakeStrided(o, {BroadcastStrides(in[0].shape, o), BroadcastStrides(in[1].shape, o),
                                        BroadcastStrides(in[2].shape, o)}));
    return KernelChoice{false, std::make_unique<WhereKernel>(elem, s)};
  }
  return Unsupported(node.Label(), ": no CUDA kernel for ", op);
}

}  // namespace sampan::cuda
