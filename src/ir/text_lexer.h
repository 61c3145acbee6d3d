// Private: the tokenizer of the IR text form (grammar in text.cc).
//
// Tokens carry their 1-based line and column so the parser can report
// "line L, column C" in every error. Comments (`// ...` to end of line) are
// kept as tokens so the parser can attach a trailing comment on an
// instruction line to Node::metadata; everywhere else it skips them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ember/status.h"

namespace ember::text_internal {

enum class TokKind : uint8_t {
  kEnd,      // end of input
  kIdent,    // [A-Za-z_][A-Za-z0-9_.-]*, also `-inf`, `-nan`, `+inf`
  kName,     // %name; text holds the name without '%'
  kNumber,   // [-+]?digits[.digits][e[-+]digits] (text as written)
  kString,   // "..."; text holds the decoded bytes
  kComment,  // // ...; text holds the raw bytes after "//" up to end of line
  kLParen,
  kRParen,
  kLBrace,
  kRBrace,
  kLBracket,
  kRBracket,
  kComma,
  kEquals,
  kColon,
};

struct Token {
  TokKind kind = TokKind::kEnd;
  std::string text;
  int line = 1;
  int col = 1;
};

// Human-readable description of a token for error messages ("'('", "end of
// input", "number '12'").
std::string DescribeToken(const Token& t);
std::string_view TokKindName(TokKind k);

// Splits `text` into tokens, ending with one kEnd token. InvalidArgument
// ("line L, column C: ...") on a stray character, an unterminated string or a
// bad escape.
StatusOr<std::vector<Token>> Tokenize(std::string_view text);

// "line L, column C: " prefix used by every parse error.
std::string Where(int line, int col);

// Escapes for a double-quoted string: \\ \" \n \r \t and \xHH for other
// control bytes; every other byte (including UTF-8) is kept as is.
std::string QuoteString(std::string_view s);
// Escapes for metadata comments: \\ \n \r and \xHH for other control bytes
// (no quotes). UnescapeMetadata is its inverse and is lenient: an unknown
// escape keeps its backslash.
std::string EscapeMetadata(std::string_view s);
std::string UnescapeMetadata(std::string_view s);

}  // namespace ember::text_internal
