#include "ir/text_lexer.h"

namespace ember::text_internal {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdentChar(char c) { return IsAlpha(c) || IsDigit(c) || c == '.' || c == '-'; }
bool IsNameChar(char c) { return IsAlpha(c) || IsDigit(c) || c == '.' || c == '-'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

const char kHex[] = "0123456789abcdef";

void AppendHexEscape(std::string& out, unsigned char c) {
  out += "\\x";
  out += kHex[c >> 4];
  out += kHex[c & 15];
}

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  StatusOr<std::vector<Token>> Run() {
    std::vector<Token> out;
    while (true) {
      SkipSpace();
      Token t;
      t.line = line_;
      t.col = col_;
      if (pos_ >= s_.size()) {
        t.kind = TokKind::kEnd;
        out.push_back(std::move(t));
        return out;
      }
      char c = s_[pos_];
      if (c == '/' && Peek(1) == '/') {
        Advance(2);
        size_t start = pos_;
        while (pos_ < s_.size() && s_[pos_] != '\n') Advance(1);
        std::string_view body = s_.substr(start, pos_ - start);
        if (!body.empty() && body.back() == '\r') body.remove_suffix(1);
        t.kind = TokKind::kComment;
        t.text = std::string(body);
      } else if (c == '%') {
        Advance(1);
        size_t start = pos_;
        while (pos_ < s_.size() && IsNameChar(s_[pos_])) Advance(1);
        if (pos_ == start) return Error(t, "expected a name after '%'");
        t.kind = TokKind::kName;
        t.text = std::string(s_.substr(start, pos_ - start));
      } else if (c == '"') {
        EMBER_RETURN_IF_ERROR(LexString(t));
      } else if (IsDigit(c) ||
                 ((c == '-' || c == '+' || c == '.') &&
                  (IsDigit(Peek(1)) || (c != '.' && Peek(1) == '.' && IsDigit(Peek(2)))))) {
        LexNumber(t);
      } else if (IsAlpha(c) || ((c == '-' || c == '+') && IsAlpha(Peek(1)))) {
        size_t start = pos_;
        Advance(1);
        while (pos_ < s_.size() && IsIdentChar(s_[pos_])) Advance(1);
        t.kind = TokKind::kIdent;
        t.text = std::string(s_.substr(start, pos_ - start));
      } else {
        switch (c) {
          case '(':
            t.kind = TokKind::kLParen;
            break;
          case ')':
            t.kind = TokKind::kRParen;
            break;
          case '{':
            t.kind = TokKind::kLBrace;
            break;
          case '}':
            t.kind = TokKind::kRBrace;
            break;
          case '[':
            t.kind = TokKind::kLBracket;
            break;
          case ']':
            t.kind = TokKind::kRBracket;
            break;
          case ',':
            t.kind = TokKind::kComma;
            break;
          case '=':
            t.kind = TokKind::kEquals;
            break;
          case ':':
            t.kind = TokKind::kColon;
            break;
          default: {
            std::string shown;
            unsigned char uc = static_cast<unsigned char>(c);
            if (uc >= 0x20 && uc < 0x7f) {
              shown = std::string("'") + c + "'";
            } else {
              AppendHexEscape(shown, uc);
            }
            return Error(t, internal::StrCat("unexpected character ", shown));
          }
        }
        t.text = std::string(1, c);
        Advance(1);
      }
      out.push_back(std::move(t));
    }
  }

 private:
  char Peek(size_t k) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }

  void Advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < s_.size(); ++i) {
      if (s_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
      ++pos_;
    }
  }

  void SkipSpace() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        Advance(1);
      } else {
        break;
      }
    }
  }

  Status Error(const Token& at, const std::string& msg) const {
    return InvalidArgument(Where(at.line, at.col), msg);
  }

  void LexNumber(Token& t) {
    size_t start = pos_;
    if (s_[pos_] == '-' || s_[pos_] == '+') Advance(1);
    while (pos_ < s_.size() && IsDigit(s_[pos_])) Advance(1);
    if (pos_ < s_.size() && s_[pos_] == '.') {
      Advance(1);
      while (pos_ < s_.size() && IsDigit(s_[pos_])) Advance(1);
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      char n1 = Peek(1);
      if (IsDigit(n1) || ((n1 == '-' || n1 == '+') && IsDigit(Peek(2)))) {
        Advance(2);
        while (pos_ < s_.size() && IsDigit(s_[pos_])) Advance(1);
      }
    }
    t.kind = TokKind::kNumber;
    t.text = std::string(s_.substr(start, pos_ - start));
  }

  Status LexString(Token& t) {
    Advance(1);  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size() || s_[pos_] == '\n') return Error(t, "unterminated string");
      char c = s_[pos_];
      if (c == '"') {
        Advance(1);
        break;
      }
      if (c != '\\') {
        out += c;
        Advance(1);
        continue;
      }
      int eline = line_, ecol = col_;
      char e = Peek(1);
      switch (e) {
        case '\\':
          out += '\\';
          Advance(2);
          break;
        case '"':
          out += '"';
          Advance(2);
          break;
        case 'n':
          out += '\n';
          Advance(2);
          break;
        case 'r':
          out += '\r';
          Advance(2);
          break;
        case 't':
          out += '\t';
          Advance(2);
          break;
        case 'x': {
          int hi = HexValue(Peek(2)), lo = HexValue(Peek(3));
          if (hi < 0 || lo < 0) {
            return InvalidArgument(Where(eline, ecol), "expected two hex digits after \\x");
          }
          out += static_cast<char>(hi * 16 + lo);
          Advance(4);
          break;
        }
        default:
          return InvalidArgument(Where(eline, ecol),
                                 "unknown escape in string; expected one of \\\\ \\\" \\n \\r "
                                 "\\t \\xHH");
      }
    }
    t.kind = TokKind::kString;
    t.text = std::move(out);
    return OkStatus();
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

}  // namespace

std::string_view TokKindName(TokKind k) {
  switch (k) {
    case TokKind::kEnd:
      return "end of input";
    case TokKind::kIdent:
      return "identifier";
    case TokKind::kName:
      return "%name";
    case TokKind::kNumber:
      return "number";
    case TokKind::kString:
      return "string";
    case TokKind::kComment:
      return "comment";
    case TokKind::kLParen:
      return "'('";
    case TokKind::kRParen:
      return "')'";
    case TokKind::kLBrace:
      return "'{'";
    case TokKind::kRBrace:
      return "'}'";
    case TokKind::kLBracket:
      return "'['";
    case TokKind::kRBracket:
      return "']'";
    case TokKind::kComma:
      return "','";
    case TokKind::kEquals:
      return "'='";
    case TokKind::kColon:
      return "':'";
  }
  return "?";
}

std::string DescribeToken(const Token& t) {
  switch (t.kind) {
    case TokKind::kIdent:
      return internal::StrCat("identifier '", t.text, "'");
    case TokKind::kName:
      return internal::StrCat("'%", t.text, "'");
    case TokKind::kNumber:
      return internal::StrCat("number '", t.text, "'");
    case TokKind::kString:
      return internal::StrCat("string ", QuoteString(t.text));
    default:
      return std::string(TokKindName(t.kind));
  }
}

StatusOr<std::vector<Token>> Tokenize(std::string_view text) { return Lexer(text).Run(); }

std::string Where(int line, int col) {
  return internal::StrCat("line ", line, ", column ", col, ": ");
}

std::string QuoteString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char uc = static_cast<unsigned char>(c);
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (uc < 0x20 || uc == 0x7f) {
          AppendHexEscape(out, uc);
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string EscapeMetadata(std::string_view s) {
  std::string out;
  for (char c : s) {
    unsigned char uc = static_cast<unsigned char>(c);
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += '\t';
        break;
      default:
        if (uc < 0x20 || uc == 0x7f) {
          AppendHexEscape(out, uc);
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string UnescapeMetadata(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    char e = s[i + 1];
    if (e == '\\') {
      out += '\\';
      ++i;
    } else if (e == 'n') {
      out += '\n';
      ++i;
    } else if (e == 'r') {
      out += '\r';
      ++i;
    } else if (e == 'x' && i + 3 < s.size() && HexValue(s[i + 2]) >= 0 && HexValue(s[i + 3]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 2]) * 16 + HexValue(s[i + 3]));
      i += 3;
    } else {
      out += '\\';  // lenient: keep an unknown escape as written
    }
  }
  return out;
}

}  // namespace ember::text_internal
