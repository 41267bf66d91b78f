// ONNX ModelProto -> ir::Graph. Validates everything it reads: a malformed
// file gives an error naming what and where, never a crash.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"

namespace onnx {
class TensorProto;
}

namespace sampan::onnx_import {

//! Range of default-domain opsets accepted.
constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 28;
//! Range of ModelProto.ir_version accepted.
constexpr int64_t kMinIrVersion = 3;
constexpr int64_t kMaxIrVersion = 14;

struct ImportOptions {
  //! Run type/shape inference after import (fails on inconsistent shapes).
  bool infer_types = true;
};

//! Reads and imports a .onnx file; external data is resolved next to it.
Result<std::unique_ptr<ir::Graph>> ImportModelFile(const std::string& path, const ImportOptions& options = {});
//! Imports serialized ModelProto bytes; `base_dir` resolves external data ("" = none allowed).
Result<std::unique_ptr<ir::Graph>> ImportModelBytes(const std::string& bytes, const std::string& base_dir,
                                                    const ImportOptions& options = {});
//! TensorProto -> Tensor. `what` names the tensor in errors.
Result<Tensor> TensorFromProto(const onnx::TensorProto& proto, const std::string& base_dir, const std::string& what);
//! Reads a serialized TensorProto file (the ONNX test-data format). Returns the tensor and its name.
Result<std::pair<std::string, Tensor>> ReadTensorProtoFile(const std::string& path);
//! Reads a serialized value of the type `type` says: a TensorProto, or for a sequence
//! (kSequence) a SequenceProto and for an optional (kOptional) an OptionalProto, as onnx's
//! test data stores them. Nested sequences and optionals are read too; maps are Unsupported.
Result<Tensor> ReadValueProtoFile(const std::string& path, DType type);

}  // namespace sampan::onnx_import
