// A readable text form of ir::Graph, for tests (write graphs in a few lines)
// and debug output. Example:
//
//   opset 17
//   graph resnet_block (x: f32[N,64,56,56]) -> (y) {
//     w1 = const f32[64,64,3,3]              # no data: zeros ("random" fills [-1,1])
//     b = const f32[3] {0.5, 1, -2}
//     c = Conv(x, w1, b) {pads=[1,1,1,1], strides=[1,1]} @conv1
//     a: f32[N,32,56,56], d = Split(c) {axis=1}
//     y = Relu(a)
//   }
//
// Grammar (whitespace and newlines are insignificant; '#' starts a comment):
//   file      := ('opset' [domain] INT)* 'graph' [name] '(' [input (',' input)*] ')'
//                '->' '(' [output (',' output)*] ')' '{' stmt* '}'
//   input     := name [':' type]          output := name [':' type]
//   stmt      := outs '=' 'const' tensor                         (a constant)
//              | [outs '='] [domain '::'] OP '(' [arg (',' arg)*] ')' [attrs] ['@' name]
//   outs      := out (',' out)*            out := '_' | name [':' type]
//   arg       := '_' (omitted optional input) | name
//   type      := DTYPE ['[' (dim (',' dim)* | '*') ']']   DTYPE: f32 f16 bf16 f64 i64 u8 bool ... or '?'
//                no brackets or [*]: unknown rank; [] : scalar
//   dim       := INT | symbol | '?'
//   tensor    := DTYPE '[' INT,... ']' ['{' scalar,... '}' | 'random']   (string: '{' "a", "b" '}')
//                one value for a many-element tensor fills it (splat); no data: zeros
//                (the printer omits data above PrintOptions::max_elements unless it is a splat)
//   attrs     := '{' [key '=' value (',' key '=' value)*] '}'
//   value     := INT | FLOAT | "string" | '[' items ']' | ints[] | floats[] | strings[] | tensors[]
//              | 'tensor' tensor
//              | 'graph' [name] '(' [input,...] ')' '->' '(' [output,...] ')' '{' stmt* '}'   (a subgraph)
//   name      := identifier ([A-Za-z_][A-Za-z0-9_.]*) or "quoted string"
// Floats in attributes always carry a '.', an exponent, inf or nan, so 1.0 is a float and 1 an int.
// Values may be used before the statement that defines them (so cycles can be written); a value
// used but never defined is an error. ParseGraph does not run ir::Verify.
// Subgraphs (If branches, Loop/Scan bodies) are written inline as attribute values; a name a
// subgraph uses but does not define is a value of an enclosing graph (lexical scope): it becomes
// one of the subgraph's captures and the node's trailing input (ir/graph.h), which the printer
// leaves implicit. Example:
//   y = If(c) {then_branch = graph t () -> (a1) { a1 = Relu(x) },
//              else_branch = graph e () -> (x) { }}        # x: a value of the enclosing graph
// A list of graphs (graphs attribute) prints as <N graphs> and cannot be parsed back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "ir/graph.h"

namespace sampan::ir {

struct PrintOptions {
  //! Constants and tensor attributes with more elements print without data (an all-equal one
  //! prints as a one-value splat, which keeps its data). Negative: always print all data.
  int64_t max_elements = 16;
  //! Annotate node outputs with their type when known.
  bool print_types = true;
};

//! The text form of `graph` (ends with a newline).
std::string PrintGraph(const Graph& graph);
std::string PrintGraph(const Graph& graph, const PrintOptions& options);
//! One statement, as in PrintGraph without indent/newline: "c: f32[N,8] = Conv(x, w) {group=1}".
std::string PrintNode(const Node& node, const PrintOptions& options = {});
//! "f32[N,3,?]", "f32[*]", "?[*]". Symbols that are not identifiers are quoted.
std::string PrintType(const TensorType& type);

//! Parses the text form. Errors say "LINE:COL: expected ..., got ...". Never crashes on any input.
Result<std::unique_ptr<Graph>> ParseGraph(std::string_view text);
//! Parses a lone type, e.g. "f32[N,3]".
Result<TensorType> ParseType(std::string_view text);

}  // namespace sampan::ir
