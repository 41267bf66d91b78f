// Tokens of the IR text form (see ir/text.h) and the lexer that makes them.
// Internal to src/ir: used by parser.cpp only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sampan::ir::text_detail {

enum class Tok {
  kEnd,
  kIdent,
  kNumber,
  kString,
  kLParen,
  kRParen,
  kLBracket,
  kRBracket,
  kLBrace,
  kRBrace,
  kComma,
  kEq,
  kColon,
  kColonColon,
  kArrow,
  kAt,
  kStar,
  kQuestion,
  kMinus,
};

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier, number text, or decoded string
  int line = 1;
  int col = 1;
};

//! "a name", "'('", ... for messages.
const char* TokSpelling(Tok k);
//! Text safe to show in a message: control bytes escaped, cut at `max` chars.
std::string Printable(std::string_view s, size_t max = 40);
//! A token as a message shows it.
std::string Describe(const Token& t);
//! "LINE:COL: <message>" as InvalidArgument.
template <class... A>
Status ErrorAt(int line, int col, const A&... a) {
  return InvalidArgument(line, ":", col, ": ", a...);
}
//! Splits text into tokens (always ending with kEnd); errors carry LINE:COL.
Result<std::vector<Token>> Lex(std::string_view s);

}  // namespace sampan::ir::text_detail
