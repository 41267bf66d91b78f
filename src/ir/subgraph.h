// Binding subgraphs to the graph enclosing them (see ir/graph.h on captures), shared by
// the ONNX importer and the text parser, which both resolve enclosing values by name.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "ir/graph.h"

namespace sampan::ir {

//! Gives every subgraph of `node` the same captures in one order (the union of the names
//! they read; a subgraph gets a placeholder for a name it does not read) and appends, as
//! the node's trailing inputs, the enclosing values `resolve` finds for those names.
//! Errors: a name `resolve` does not find (nullptr).
Status BindCaptures(Node* node, const std::function<Value*(const std::string&)>& resolve);

}  // namespace sampan::ir
