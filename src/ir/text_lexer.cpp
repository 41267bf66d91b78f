// Lexer of the IR text form.
#include "ir/text_lexer.h"

namespace sampan::ir::text_detail {

namespace {

bool IsIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}

bool IsIdentChar(char c) {
  return IsIdentStart(c) || IsDigit(c) || c == '.';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Printable(std::string_view s, size_t max) {
  std::string out;
  for (char ch : s.substr(0, max)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

const char* TokSpelling(Tok k) {
  switch (k) {
    case Tok::kEnd:
      return "end of input";
    case Tok::kIdent:
      return "a name";
    case Tok::kNumber:
      return "a number";
    case Tok::kString:
      return "a string";
    case Tok::kLParen:
      return "'('";
    case Tok::kRParen:
      return "')'";
    case Tok::kLBracket:
      return "'['";
    case Tok::kRBracket:
      return "']'";
    case Tok::kLBrace:
      return "'{'";
    case Tok::kRBrace:
      return "'}'";
    case Tok::kComma:
      return "','";
    case Tok::kEq:
      return "'='";
    case Tok::kColon:
      return "':'";
    case Tok::kColonColon:
      return "'::'";
    case Tok::kArrow:
      return "'->'";
    case Tok::kAt:
      return "'@'";
    case Tok::kStar:
      return "'*'";
    case Tok::kQuestion:
      return "'?'";
    case Tok::kMinus:
      return "'-'";
  }
  return "?";
}

std::string Describe(const Token& t) {
  switch (t.kind) {
    case Tok::kIdent:
      return StrCat("'", Printable(t.text), "'");
    case Tok::kNumber:
      return StrCat("number ", Printable(t.text));
    case Tok::kString:
      return StrCat("string \"", Printable(t.text), "\"");
    default:
      return TokSpelling(t.kind);
  }
}

Result<std::vector<Token>> Lex(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  int line = 1, col = 1;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < s.size(); ++k, ++i) {
      if (s[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  };
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      advance(1);
      continue;
    }
    if (c == '#') {
      while (i < s.size() && s[i] != '\n') advance(1);
      continue;
    }
    Token t;
    t.line = line;
    t.col = col;
    if (IsIdentStart(c)) {
      size_t j = i;
      while (j < s.size() && IsIdentChar(s[j])) ++j;
      t.kind = Tok::kIdent;
      t.text = std::string(s.substr(i, j - i));
      advance(j - i);
    } else if (IsDigit(c)) {
      size_t j = i;
      while (j < s.size() && IsDigit(s[j])) ++j;
      if (j < s.size() && s[j] == '.') {
        ++j;
        while (j < s.size() && IsDigit(s[j])) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && IsDigit(s[k])) {
          while (k < s.size() && IsDigit(s[k])) ++k;
          j = k;
        }
      }
      if (j < s.size() && (IsIdentChar(s[j]))) {
        size_t k = j;
        while (k < s.size() && IsIdentChar(s[k])) ++k;
        return ErrorAt(line, col, "malformed number '", Printable(s.substr(i, k - i)),
                       "' (names cannot start with a digit; quote them: \"", Printable(s.substr(i, k - i)), "\")");
      }
      t.kind = Tok::kNumber;
      t.text = std::string(s.substr(i, j - i));
      advance(j - i);
    } else if (c == '"') {
      size_t j = i + 1;
      std::string text;
      bool closed = false;
      while (j < s.size()) {
        const char d = s[j];
        if (d == '"') {
          closed = true;
          break;
        }
        if (d == '\n') break;
        if (d == '\\') {
          if (j + 1 >= s.size()) break;
          const char e = s[j + 1];
          switch (e) {
            case 'n':
              text += '\n';
              j += 2;
              continue;
            case 't':
              text += '\t';
              j += 2;
              continue;
            case 'r':
              text += '\r';
              j += 2;
              continue;
            case '"':
              text += '"';
              j += 2;
              continue;
            case '\\':
              text += '\\';
              j += 2;
              continue;
            case 'x': {
              int hi = j + 2 < s.size() ? HexValue(s[j + 2]) : -1;
              int lo = j + 3 < s.size() ? HexValue(s[j + 3]) : -1;
              if (hi < 0 || lo < 0)
                return ErrorAt(line, col + static_cast<int>(j - i), "bad escape: \\x needs two hex digits");
              text += static_cast<char>(hi * 16 + lo);
              j += 4;
              continue;
            }
            default:
              return ErrorAt(line, col + static_cast<int>(j - i), "unknown escape '\\", Printable(std::string(1, e)),
                             "' in string (use \\n \\t \\r \\\" \\\\ \\xHH)");
          }
        }
        text += d;
        ++j;
      }
      if (!closed) return ErrorAt(line, col, "unterminated string (a string must end with '\"' on the same line)");
      t.kind = Tok::kString;
      t.text = std::move(text);
      advance(j + 1 - i);
    } else {
      size_t len = 1;
      switch (c) {
        case '(':
          t.kind = Tok::kLParen;
          break;
        case ')':
          t.kind = Tok::kRParen;
          break;
        case '[':
          t.kind = Tok::kLBracket;
          break;
        case ']':
          t.kind = Tok::kRBracket;
          break;
        case '{':
          t.kind = Tok::kLBrace;
          break;
        case '}':
          t.kind = Tok::kRBrace;
          break;
        case ',':
          t.kind = Tok::kComma;
          break;
        case '=':
          t.kind = Tok::kEq;
          break;
        case '@':
          t.kind = Tok::kAt;
          break;
        case '*':
          t.kind = Tok::kStar;
          break;
        case '?':
          t.kind = Tok::kQuestion;
          break;
        case ':':
          if (i + 1 < s.size() && s[i + 1] == ':') {
            t.kind = Tok::kColonColon;
            len = 2;
          } else {
            t.kind = Tok::kColon;
          }
          break;
        case '-':
          if (i + 1 < s.size() && s[i + 1] == '>') {
            t.kind = Tok::kArrow;
            len = 2;
          } else {
            t.kind = Tok::kMinus;
          }
          break;
        default:
          return ErrorAt(line, col, "unexpected character '", Printable(std::string(1, c)), "'");
      }
      advance(len);
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.line = line;
  end.col = col;
  out.push_back(end);
  return out;
}

}  // namespace sampan::ir::text_detail
