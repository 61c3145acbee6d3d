// Printer and parser of the IR text form.
//
// Grammar (whitespace and newlines separate tokens; `//` starts a comment
// that runs to the end of the line):
//
//   file       := graph+                     // entry first, then called bodies
//   graph      := 'graph' gname '(' [param (',' param)*] ')' '{'
//                   instr* root [alias] '}'
//   gname      := IDENT | STRING
//   param      := NAME ':' shape            // NAME is %p<i> when printed
//   instr      := NAME '=' shape OPNAME '(' args ')' (',' attr)* [COMMENT]
//   args       := INT                        // parameter: its `index` attribute
//              |  literal                    // constant
//              |  [NAME (',' NAME)*]         // every other op: operands
//   literal    := '{' [elem (',' elem)*] '}' // array: flat, row-major
//              |  '(' [literal (',' literal)*] ')'   // tuple
//   elem       := NUMBER | 'nan' | '-nan' | 'inf' | '-inf'
//              |  'true' | 'false'           // pred
//              |  '(' elem ',' elem ')'      // complex (re,im)
//   attr       := (IDENT | STRING) '=' value   // key quoted unless an IDENT
//   value      := INT | FLOAT | STRING | IDENT | '{' [INT (',' INT)*] '}'
//   root       := 'ROOT' ('(' [NAME (',' NAME)*] ')' | NAME)
//   alias      := 'ALIAS' '{' [INT ':' INT (',' INT ':' INT)*] '}'
//   shape      := DTYPE '[' [INT (',' INT)*] ']'
//              |  '(' [shape (',' shape)*] ')'
//
//   NAME   := '%' [A-Za-z0-9_.-]+      IDENT := [A-Za-z_][A-Za-z0-9_.-]*
//   NUMBER := [-+]?digits['.'digits][('e'|'E')[-+]digits]
//   STRING := '"' chars '"' with escapes \\ \" \n \r \t \xHH
//
// Attribute values: a NUMBER with '.', 'e' or 'E', and nan/inf/-inf, is a
// float; any other NUMBER an integer (int64); a STRING or an IDENT other than
// those is a string. The printer writes a string bare when it is an
// identifier of [A-Za-z_][A-Za-z0-9_]* (e.g. `direction=LT`,
// `to_apply=add`), otherwise quoted; floats as the shortest decimal that
// round-trips, with ".0" appended when that would read as an integer.
//
// A comment on the same line as the end of an instruction is that node's
// metadata: the printer writes ` // ` followed by the metadata with \\, \n,
// \r and other control bytes escaped; the parser drops one leading space
// and undoes the escapes. Comments anywhere else are ignored.
//
// Fusion: `%2 = f32[8] fusion(%0, %1), calls=NAME, kind=loop` calls the
// graph block named NAME (an IDENT or STRING). `calls` is not stored as an
// attribute: it becomes Node::called. The printer writes the entry graph,
// then every called body once (deduplicated by pointer) in order of first
// use, separated by blank lines, making names unique (".1", ".2" suffixes).
// The parser reads every block (bodies may appear in any order, before or
// after their users; each is built on first use), rejects repeated graph
// names, calls of undefined graphs, cycles of calls and nesting deeper than
// 64 with a line:column error, and returns the first graph; blocks that no
// one calls are checked and dropped.
//
// Canonical form (what PrintGraph writes): two-space indent, one instruction
// per line, nodes named %0..%N-1 in node order, header parameters %p0..,
// `ROOT (...)` always parenthesized, `ALIAS {o: p, ...}` only when the alias
// map is non-empty, attributes in the sorted order Attrs keeps (the
// parameter's `index` printed inside the parentheses instead), constants
// through FormatElement (literal.h), a final newline after '}'.
//
// The parser accepts any %names (renumbering them densely), `ROOT %x` for a
// single output, and any spacing. It builds the graph through
// GraphBuilder::AddNode with the printed shape as the declared shape, so
// shape and attribute errors are the builder's, prefixed with
// "line L, column C: ". The header's parameter list must match the parameter
// instructions (count and shapes); it binds no names.
#include "ember/ir/text.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "ir/text_lexer.h"

namespace ember {

using text_internal::DescribeToken;
using text_internal::Token;
using text_internal::TokKind;
using text_internal::Where;

namespace {

// ---------------------------------------------------------------------------
// Printer
// ---------------------------------------------------------------------------

bool IsBareString(const std::string& s) {
  if (s.empty() || s == "nan" || s == "inf") return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s[0])) return false;
  for (char c : s) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Graph names and attribute keys: bare when an IDENT, quoted otherwise.
bool IsBareIdent(const std::string& s) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (s.empty() || !alpha(s[0])) return false;
  for (char c : s) {
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '.' && c != '-') return false;
  }
  return true;
}

std::string FormatAttrFloat(double d) {
  if (std::isnan(d)) return std::signbit(d) ? "-nan" : "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

void PrintAttrValue(const AttrValue& v, std::string& out) {
  if (auto* i = std::get_if<int64_t>(&v)) {
    out += std::to_string(*i);
  } else if (auto* d = std::get_if<double>(&v)) {
    out += FormatAttrFloat(*d);
  } else if (auto* s = std::get_if<std::string>(&v)) {
    out += IsBareString(*s) ? *s : text_internal::QuoteString(*s);
  } else {
    const auto& list = std::get<std::vector<int64_t>>(v);
    out += '{';
    for (size_t i = 0; i < list.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(list[i]);
    }
    out += '}';
  }
}

void PrintLiteralValues(const Literal& lit, std::string& out) {
  if (lit.shape().is_tuple()) {
    out += '(';
    const auto& elems = lit.tuple_elements();
    for (size_t i = 0; i < elems.size(); ++i) {
      if (i) out += ", ";
      PrintLiteralValues(elems[i], out);
    }
    out += ')';
    return;
  }
  out += '{';
  const int64_t n = lit.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    out += FormatElement(lit, i);
  }
  out += '}';
}

// Printed name of each graph in a file (entry and called bodies).
using GraphNames = std::unordered_map<const Graph*, std::string>;

void PrintGraphName(const std::string& name, std::string& out) {
  out += IsBareIdent(name) ? name : text_internal::QuoteString(name);
}

void PrintNode(const Node& n, const GraphNames& names, std::string& out) {
  out += "  %";
  out += std::to_string(n.id);
  out += " = ";
  out += n.shape.ToString();
  out += ' ';
  out += OpName(n.op);
  out += '(';
  bool index_in_parens = false;
  if (n.op == OpKind::kParameter) {
    const AttrValue* idx = attr::Index.Raw(n.attrs);
    if (idx && std::holds_alternative<int64_t>(*idx)) {
      out += std::to_string(std::get<int64_t>(*idx));
      index_in_parens = true;
    }
  } else if (n.op == OpKind::kConstant && n.literal) {
    PrintLiteralValues(*n.literal, out);
  }
  for (size_t i = 0; i < n.operands.size(); ++i) {
    if (i) out += ", ";
    out += '%';
    out += std::to_string(n.operands[i]);
  }
  out += ')';
  if (n.called) {
    auto it = names.find(n.called.get());
    out += ", calls=";
    PrintGraphName(it != names.end() ? it->second : n.called->name(), out);
  }
  for (const auto& [key, value] : n.attrs.map()) {
    if (index_in_parens && key == attr::Index.key) continue;
    out += ", ";
    out += IsBareIdent(key) ? key : text_internal::QuoteString(key);
    out += '=';
    PrintAttrValue(value, out);
  }
  if (!n.metadata.empty()) {
    out += " // ";
    out += text_internal::EscapeMetadata(n.metadata);
  }
  out += '\n';
}

// ---------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------

// Bounds that keep every later size computation far from int64 overflow.
constexpr int64_t kMaxElements = int64_t{1} << 48;
constexpr int kMaxNesting = 64;

std::optional<int64_t> ParseInt64(const std::string& text) {
  std::string_view s = text;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty() || s.find_first_of(".eE") != std::string_view::npos) return std::nullopt;
  int64_t v = 0;
  auto res = std::from_chars(s.data(), s.data() + s.size(), v);
  if (res.ec != std::errc() || res.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<uint64_t> ParseUint64(const std::string& text) {
  std::string_view s = text;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty() || s[0] == '-' || s.find_first_of(".eE") != std::string_view::npos) {
    return std::nullopt;
  }
  uint64_t v = 0;
  auto res = std::from_chars(s.data(), s.data() + s.size(), v);
  if (res.ec != std::errc() || res.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

bool IsFloatNumberText(const std::string& text) {
  return text.find_first_of(".eE") != std::string::npos;
}

// nan/-nan/+nan/inf/-inf/+inf as an identifier token.
std::optional<double> SpecialFloat(const std::string& s) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (s == "nan" || s == "+nan") return nan;
  if (s == "-nan") return -nan;
  if (s == "inf" || s == "+inf") return inf;
  if (s == "-inf") return -inf;
  return std::nullopt;
}

// A float from a number or nan/inf token. Decimal text is read as the
// nearest double (the printer's round-trip check reads it the same way).
std::optional<double> TokenToDouble(const Token& t) {
  if (t.kind == TokKind::kIdent) return SpecialFloat(t.text);
  if (t.kind != TokKind::kNumber) return std::nullopt;
  std::string_view s = t.text;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double v = 0;
  auto res = std::from_chars(s.data(), s.data() + s.size(), v);
  if (res.ptr != s.data() + s.size()) return std::nullopt;
  if (res.ec == std::errc::result_out_of_range) {
    // Overflow or underflow: strtod-like results (inf or a signed zero).
    bool neg = !s.empty() && s[0] == '-';
    size_t e = s.find_first_of("eE");
    bool big = e == std::string_view::npos || s[e + 1] != '-';
    double mag = big ? std::numeric_limits<double>::infinity() : 0.0;
    return neg ? -mag : mag;
  }
  if (res.ec != std::errc()) return std::nullopt;
  return v;
}

template <typename T>
void StoreAt(Literal& lit, int64_t i, T v) {
  std::memcpy(static_cast<uint8_t*>(lit.data()) + i * sizeof(T), &v, sizeof(T));
}

// One constant element as written: a single token, or (re,im).
struct Elem {
  Token a, b;
  bool pair = false;
};

struct HeaderParam {
  Shape shape;
  int line, col;
};

// Every `graph` block of a file, and the graphs built from them so far.
// Bodies are built on first use (recursively), so a file may list them in
// any order; `state` detects cycles of calls.
struct Module {
  struct Block {
    size_t start = 0;  // token index of 'graph'
    size_t end = 0;    // token index just past its closing '}'
    std::string name;
  };
  std::vector<Token> toks;
  std::vector<Block> blocks;
  std::unordered_map<std::string, size_t> by_name;  // first definition
  std::vector<int> state;                           // 0 unbuilt, 1 building, 2 built
  std::vector<std::shared_ptr<Graph>> built;
};

StatusOr<std::shared_ptr<Graph>> BuildBlock(Module& m, size_t index, int depth);

class Parser {
 public:
  Parser(Module& m, size_t start, size_t end, int depth)
      : module_(m), toks_(m.toks), pos_(start), end_(end), depth_(depth) {
    names_.reserve((end - start) / 8);
  }

  StatusOr<Graph> Run() {
    EMBER_RETURN_IF_ERROR(ExpectKeyword("graph"));
    const Token& name = Peek();
    std::string gname;
    if (name.kind == TokKind::kIdent || name.kind == TokKind::kString) {
      gname = Next().text;
    } else {
      return Err(name, "expected the graph name");
    }
    builder_.emplace(gname);
    EMBER_RETURN_IF_ERROR(ParseHeader());
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kLBrace, "'{' to open the graph body"));
    while (Peek().kind == TokKind::kName) EMBER_RETURN_IF_ERROR(ParseInstruction());
    const Token& t = Peek();
    if (t.kind == TokKind::kRBrace || t.kind == TokKind::kEnd) {
      return Err(t, "missing ROOT: expected 'ROOT (%outputs...)' before the end of the graph");
    }
    if (!(t.kind == TokKind::kIdent && t.text == "ROOT")) {
      return Err(t, "expected an instruction ('%name = shape op(...)') or ROOT, got ",
                 DescribeToken(t));
    }
    Token root_tok = Next();
    EMBER_RETURN_IF_ERROR(ParseRoot(root_tok));
    if (Peek().kind == TokKind::kIdent && Peek().text == "ALIAS") {
      Next();
      EMBER_RETURN_IF_ERROR(ParseAlias());
    }
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kRBrace, "'}' to close the graph"));
    if (SkipComments(pos_) < end_ && Peek().kind != TokKind::kEnd) {
      return Err(Peek(), "expected end of input or another 'graph' after the graph, got ",
                 DescribeToken(Peek()));
    }
    auto built = builder_->Build();
    if (!built.ok()) return Wrap(root_tok, built.status());
    Graph g = std::move(built).value();
    // The header must describe the parameter instructions.
    if (header_.size() != g.parameters().size()) {
      return InvalidArgument(Where(header_line_, header_col_), "graph header lists ",
                             header_.size(), " parameters but the body has ", g.parameters().size(),
                             " parameter instructions");
    }
    for (size_t i = 0; i < header_.size(); ++i) {
      const Shape& body = g.node(g.parameters()[i]).shape;
      if (header_[i].shape != body) {
        return InvalidArgument(Where(header_[i].line, header_[i].col), "header parameter ", i,
                               " has shape ", header_[i].shape.ToString(), " but parameter(", i,
                               ") is ", body.ToString());
      }
    }
    return g;
  }

 private:
  // ---- token access (comments are skipped except for metadata) ----
  size_t SkipComments(size_t p) const {
    while (p < toks_.size() && toks_[p].kind == TokKind::kComment) ++p;
    return p < toks_.size() ? p : toks_.size() - 1;
  }
  const Token& Peek() const { return toks_[SkipComments(pos_)]; }
  const Token& Next() {
    size_t p = SkipComments(pos_);
    if (toks_[p].kind != TokKind::kEnd) pos_ = p + 1;
    last_line_ = toks_[p].line;
    return toks_[p];
  }

  template <typename... Args>
  Status Err(const Token& at, Args&&... args) const {
    return InvalidArgument(Where(at.line, at.col), std::forward<Args>(args)...);
  }
  Status Wrap(const Token& at, const Status& s) const {
    return Status(s.code() == StatusCode::kOk ? StatusCode::kInternal : s.code(),
                  Where(at.line, at.col) + s.message());
  }

  Status Expect(TokKind kind, const char* what) {
    const Token& t = Peek();
    if (t.kind != kind) return Err(t, "expected ", what, ", got ", DescribeToken(t));
    Next();
    return OkStatus();
  }
  Status ExpectKeyword(const char* kw) {
    const Token& t = Peek();
    if (t.kind != TokKind::kIdent || t.text != kw) {
      return Err(t, "expected '", kw, "', got ", DescribeToken(t));
    }
    Next();
    return OkStatus();
  }

  StatusOr<int64_t> ExpectInt(const char* what) {
    const Token& t = Peek();
    if (t.kind != TokKind::kNumber) return Err(t, "expected ", what, ", got ", DescribeToken(t));
    auto v = ParseInt64(t.text);
    if (!v) return Err(t, "expected ", what, " (a 64-bit integer), got ", DescribeToken(t));
    Next();
    return *v;
  }

  // ---- shapes ----
  StatusOr<Shape> ParseShape(int depth = 0) {
    const Token& t = Peek();
    if (depth > kMaxNesting) return Err(t, "shape nested more than ", kMaxNesting, " deep");
    if (t.kind == TokKind::kLParen) {
      Next();
      std::vector<Shape> elems;
      if (Peek().kind != TokKind::kRParen) {
        while (true) {
          EMBER_ASSIGN_OR_RETURN(Shape s, ParseShape(depth + 1));
          elems.push_back(std::move(s));
          if (Peek().kind == TokKind::kComma) {
            Next();
            continue;
          }
          break;
        }
      }
      EMBER_RETURN_IF_ERROR(Expect(TokKind::kRParen, "',' or ')' in a tuple shape"));
      return Shape::Tuple(std::move(elems));
    }
    if (t.kind != TokKind::kIdent) {
      return Err(t, "expected a shape such as f32[8,16] or (f32[2], s32[]), got ",
                 DescribeToken(t));
    }
    auto dtype = ParseDType(t.text);
    if (!dtype) {
      std::string names;
      for (int i = 0; i < kNumDTypes; ++i) {
        if (i) names += ", ";
        names += DTypeName(static_cast<DType>(i));
      }
      return Err(t, "unknown dtype '", t.text, "'; expected one of ", names);
    }
    Next();
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kLBracket, "'[' after the dtype"));
    std::vector<int64_t> dims;
    int64_t elements = 1;
    if (Peek().kind != TokKind::kRBracket) {
      while (true) {
        const Token& dt = Peek();
        EMBER_ASSIGN_OR_RETURN(int64_t d, ExpectInt("a dimension size"));
        if (d < 0) return Err(dt, "dimension size must be >= 0, got ", d);
        if (d > kMaxElements) return Err(dt, "dimension size ", d, " is too large");
        if (d != 0) {
          if (elements > kMaxElements / d) {
            return Err(dt, "shape has more than 2^48 elements");
          }
          elements *= d;
        }
        dims.push_back(d);
        if (static_cast<int>(dims.size()) > kMaxNesting * 4) {
          return Err(dt, "shape has more than ", kMaxNesting * 4, " dimensions");
        }
        if (Peek().kind == TokKind::kComma) {
          Next();
          continue;
        }
        break;
      }
    }
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kRBracket, "',' or ']' in the dimensions"));
    return Shape(*dtype, std::move(dims));
  }

  // ---- header ----
  Status ParseHeader() {
    const Token& open = Peek();
    header_line_ = open.line;
    header_col_ = open.col;
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kLParen, "'(' to open the parameter list"));
    if (Peek().kind != TokKind::kRParen) {
      while (true) {
        const Token& p = Peek();
        if (p.kind != TokKind::kName) {
          return Err(p, "expected a parameter name such as %p0, got ", DescribeToken(p));
        }
        Next();
        EMBER_RETURN_IF_ERROR(Expect(TokKind::kColon, "':' after the parameter name"));
        EMBER_ASSIGN_OR_RETURN(Shape s, ParseShape());
        header_.push_back(HeaderParam{std::move(s), p.line, p.col});
        if (Peek().kind == TokKind::kComma) {
          Next();
          continue;
        }
        break;
      }
    }
    return Expect(TokKind::kRParen, "',' or ')' in the parameter list");
  }

  // ---- operands and values ----
  StatusOr<NodeId> ParseOperandName() {
    const Token& t = Peek();
    if (t.kind != TokKind::kName)
      return Err(t, "expected an operand (%name), got ", DescribeToken(t));
    auto it = names_.find(t.text);
    if (it == names_.end()) return Err(t, "use of undefined value '%", t.text, "'");
    Next();
    return it->second;
  }

  StatusOr<std::vector<NodeId>> ParseNameList(TokKind close, const char* what) {
    std::vector<NodeId> ids;
    if (Peek().kind != close) {
      while (true) {
        EMBER_ASSIGN_OR_RETURN(NodeId id, ParseOperandName());
        ids.push_back(id);
        if (Peek().kind == TokKind::kComma) {
          Next();
          continue;
        }
        break;
      }
    }
    EMBER_RETURN_IF_ERROR(Expect(close, what));
    return ids;
  }

  StatusOr<AttrValue> ParseAttrValue() {
    const Token& t = Peek();
    switch (t.kind) {
      case TokKind::kNumber: {
        if (IsFloatNumberText(t.text)) {
          auto d = TokenToDouble(t);
          if (!d) return Err(t, "malformed float ", DescribeToken(t));
          Next();
          return AttrValue(*d);
        }
        auto v = ParseInt64(t.text);
        if (!v) return Err(t, "integer ", t.text, " does not fit in 64 bits");
        Next();
        return AttrValue(*v);
      }
      case TokKind::kIdent: {
        if (auto d = SpecialFloat(t.text)) {
          Next();
          return AttrValue(*d);
        }
        return AttrValue(std::string(Next().text));
      }
      case TokKind::kString:
        return AttrValue(std::string(Next().text));
      case TokKind::kLBrace: {
        Next();
        std::vector<int64_t> list;
        if (Peek().kind != TokKind::kRBrace) {
          while (true) {
            EMBER_ASSIGN_OR_RETURN(int64_t v, ExpectInt("an integer in the list"));
            list.push_back(v);
            if (Peek().kind == TokKind::kComma) {
              Next();
              continue;
            }
            break;
          }
        }
        EMBER_RETURN_IF_ERROR(Expect(TokKind::kRBrace, "',' or '}' in the integer list"));
        return AttrValue(std::move(list));
      }
      default:
        return Err(t,
                   "expected an attribute value (integer, float, string or {integer list}), got ",
                   DescribeToken(t));
    }
  }

  Status ParseAttrs(Attrs& attrs) {
    while (Peek().kind == TokKind::kComma) {
      Next();
      const Token& key = Peek();
      if (key.kind != TokKind::kIdent && key.kind != TokKind::kString) {
        return Err(key, "expected an attribute name, got ", DescribeToken(key));
      }
      Next();
      EMBER_RETURN_IF_ERROR(Expect(TokKind::kEquals, "'=' after the attribute name"));
      if (key.text == "calls") calls_tok_ = &Peek();
      EMBER_ASSIGN_OR_RETURN(AttrValue v, ParseAttrValue());
      if (attrs.Has(key.text)) return Err(key, "duplicate attribute '", key.text, "'");
      attrs.Set(key.text, std::move(v));
    }
    return OkStatus();
  }

  // ---- constants ----
  StatusOr<Elem> ParseElem() {
    Elem e;
    if (Peek().kind == TokKind::kLParen) {
      Next();
      e.a = Next();
      EMBER_RETURN_IF_ERROR(Expect(TokKind::kComma, "',' between real and imaginary parts"));
      e.b = Next();
      EMBER_RETURN_IF_ERROR(Expect(TokKind::kRParen, "')' after a complex value"));
      e.pair = true;
      return e;
    }
    const Token& t = Peek();
    if (t.kind != TokKind::kNumber && t.kind != TokKind::kIdent) {
      return Err(t, "expected a constant value, got ", DescribeToken(t));
    }
    e.a = Next();
    return e;
  }

  Status StoreElem(Literal& lit, int64_t i, const Elem& e) {
    const DType t = lit.dtype();
    if (IsComplex(t) != e.pair) {
      return Err(
          e.a,
          IsComplex(t) ? "expected a complex value (re,im) for " : "unexpected complex value for ",
          DTypeName(t));
    }
    auto float_of = [&](const Token& tok) -> StatusOr<double> {
      auto d = TokenToDouble(tok);
      if (!d) return Err(tok, "expected a ", DTypeName(t), " value, got ", DescribeToken(tok));
      return *d;
    };
    switch (t) {
      case DType::kPred: {
        const Token& tok = e.a;
        if (tok.text == "true" || tok.text == "1") {
          StoreAt<uint8_t>(lit, i, 1);
        } else if (tok.text == "false" || tok.text == "0") {
          StoreAt<uint8_t>(lit, i, 0);
        } else {
          return Err(tok, "expected true or false for pred, got ", DescribeToken(tok));
        }
        return OkStatus();
      }
      case DType::kS8:
      case DType::kS16:
      case DType::kS32:
      case DType::kS64: {
        auto v = e.a.kind == TokKind::kNumber ? ParseInt64(e.a.text) : std::nullopt;
        if (!v)
          return Err(e.a, "expected an integer for ", DTypeName(t), ", got ", DescribeToken(e.a));
        int bits = BitWidth(t);
        if (bits < 64) {
          int64_t lo = -(int64_t{1} << (bits - 1)), hi = (int64_t{1} << (bits - 1)) - 1;
          if (*v < lo || *v > hi) {
            return Err(e.a, "value ", *v, " out of range for ", DTypeName(t));
          }
        }
        if (t == DType::kS8) StoreAt<int8_t>(lit, i, static_cast<int8_t>(*v));
        if (t == DType::kS16) StoreAt<int16_t>(lit, i, static_cast<int16_t>(*v));
        if (t == DType::kS32) StoreAt<int32_t>(lit, i, static_cast<int32_t>(*v));
        if (t == DType::kS64) StoreAt<int64_t>(lit, i, *v);
        return OkStatus();
      }
      case DType::kU8:
      case DType::kU16:
      case DType::kU32:
      case DType::kU64: {
        auto v = e.a.kind == TokKind::kNumber ? ParseUint64(e.a.text) : std::nullopt;
        if (!v) {
          return Err(e.a, "expected a non-negative integer for ", DTypeName(t), ", got ",
                     DescribeToken(e.a));
        }
        int bits = BitWidth(t);
        if (bits < 64 && *v > (uint64_t{1} << bits) - 1) {
          return Err(e.a, "value ", *v, " out of range for ", DTypeName(t));
        }
        if (t == DType::kU8) StoreAt<uint8_t>(lit, i, static_cast<uint8_t>(*v));
        if (t == DType::kU16) StoreAt<uint16_t>(lit, i, static_cast<uint16_t>(*v));
        if (t == DType::kU32) StoreAt<uint32_t>(lit, i, static_cast<uint32_t>(*v));
        if (t == DType::kU64) StoreAt<uint64_t>(lit, i, *v);
        return OkStatus();
      }
      case DType::kF16: {
        EMBER_ASSIGN_OR_RETURN(double d, float_of(e.a));
        StoreAt<uint16_t>(lit, i, FloatToF16(static_cast<float>(d)));
        return OkStatus();
      }
      case DType::kBF16: {
        EMBER_ASSIGN_OR_RETURN(double d, float_of(e.a));
        StoreAt<uint16_t>(lit, i, FloatToBF16(static_cast<float>(d)));
        return OkStatus();
      }
      case DType::kF32: {
        EMBER_ASSIGN_OR_RETURN(double d, float_of(e.a));
        StoreAt<float>(lit, i, static_cast<float>(d));
        return OkStatus();
      }
      case DType::kF64: {
        EMBER_ASSIGN_OR_RETURN(double d, float_of(e.a));
        StoreAt<double>(lit, i, d);
        return OkStatus();
      }
      case DType::kC64: {
        EMBER_ASSIGN_OR_RETURN(double re, float_of(e.a));
        EMBER_ASSIGN_OR_RETURN(double im, float_of(e.b));
        StoreAt<float>(lit, 2 * i, static_cast<float>(re));
        StoreAt<float>(lit, 2 * i + 1, static_cast<float>(im));
        return OkStatus();
      }
      case DType::kC128: {
        EMBER_ASSIGN_OR_RETURN(double re, float_of(e.a));
        EMBER_ASSIGN_OR_RETURN(double im, float_of(e.b));
        StoreAt<double>(lit, 2 * i, re);
        StoreAt<double>(lit, 2 * i + 1, im);
        return OkStatus();
      }
    }
    return Err(e.a, "unsupported dtype");
  }

  // Values of a constant of `shape` (which bounds nothing: the values are
  // counted before any allocation).
  StatusOr<Literal> ParseLiteral(const Shape& shape, int depth = 0) {
    const Token& t = Peek();
    if (depth > kMaxNesting) return Err(t, "constant nested more than ", kMaxNesting, " deep");
    if (shape.is_tuple()) {
      EMBER_RETURN_IF_ERROR(Expect(TokKind::kLParen, "'(' to open a tuple constant"));
      std::vector<Literal> elems;
      const auto& shapes = shape.tuple_shapes();
      for (size_t i = 0; i < shapes.size(); ++i) {
        if (i) EMBER_RETURN_IF_ERROR(Expect(TokKind::kComma, "',' between tuple elements"));
        EMBER_ASSIGN_OR_RETURN(Literal e, ParseLiteral(shapes[i], depth + 1));
        elems.push_back(std::move(e));
      }
      EMBER_RETURN_IF_ERROR(
          Expect(TokKind::kRParen,
                 internal::StrCat("')' after ", shapes.size(), " tuple elements").c_str()));
      return Literal::Tuple(std::move(elems));
    }
    const Token open = Peek();
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kLBrace, "'{' to open the constant's values"));
    std::vector<Elem> elems;
    if (Peek().kind != TokKind::kRBrace) {
      while (true) {
        EMBER_ASSIGN_OR_RETURN(Elem e, ParseElem());
        elems.push_back(std::move(e));
        if (Peek().kind == TokKind::kComma) {
          Next();
          continue;
        }
        break;
      }
    }
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kRBrace, "',' or '}' in the constant's values"));
    if (static_cast<int64_t>(elems.size()) != shape.num_elements()) {
      return Err(open, "constant of shape ", shape.ToString(), " needs ", shape.num_elements(),
                 " values, got ", elems.size());
    }
    Literal lit(shape);
    for (size_t i = 0; i < elems.size(); ++i) {
      EMBER_RETURN_IF_ERROR(StoreElem(lit, static_cast<int64_t>(i), elems[i]));
    }
    return lit;
  }

  // ---- instructions ----
  Status ParseInstruction() {
    const Token name = Next();  // kName, checked by the caller
    if (names_.count(name.text)) return Err(name, "redefinition of '%", name.text, "'");
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kEquals, "'=' after the instruction name"));
    EMBER_ASSIGN_OR_RETURN(Shape shape, ParseShape());
    const Token op_tok = Peek();
    if (op_tok.kind != TokKind::kIdent) {
      return Err(op_tok, "expected an op name after the shape, got ", DescribeToken(op_tok));
    }
    auto op = ParseOpName(op_tok.text);
    if (!op) return Err(op_tok, "unknown op '", op_tok.text, "'");
    Next();
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kLParen, "'(' after the op name"));
    std::vector<NodeId> operands;
    Attrs attrs;
    std::shared_ptr<const Literal> literal;
    if (*op == OpKind::kParameter) {
      const Token& it = Peek();
      EMBER_ASSIGN_OR_RETURN(int64_t index, ExpectInt("the parameter index"));
      // Every parameter needs its own instruction, so a valid index is
      // smaller than the number of tokens; this also bounds the builder's
      // parameter table.
      if (index < 0 || index >= static_cast<int64_t>(toks_.size())) {
        return Err(it, "parameter index ", index, " out of range");
      }
      attrs.Set(attr::Index.key, index);
      EMBER_RETURN_IF_ERROR(Expect(TokKind::kRParen, "')' after the parameter index"));
    } else if (*op == OpKind::kConstant) {
      EMBER_ASSIGN_OR_RETURN(Literal lit, ParseLiteral(shape));
      literal = std::make_shared<const Literal>(std::move(lit));
      EMBER_RETURN_IF_ERROR(Expect(TokKind::kRParen, "')' after the constant's values"));
    } else {
      EMBER_ASSIGN_OR_RETURN(operands,
                             ParseNameList(TokKind::kRParen, "',' or ')' after operands"));
    }
    calls_tok_ = nullptr;
    EMBER_RETURN_IF_ERROR(ParseAttrs(attrs));
    std::shared_ptr<const Graph> called;
    if (*op == OpKind::kFusion) {
      // The name is the token as written (so `calls=nan` names a graph).
      if (!attrs.Has("calls") || !calls_tok_ ||
          (calls_tok_->kind != TokKind::kIdent && calls_tok_->kind != TokKind::kString)) {
        return Err(calls_tok_ ? *calls_tok_ : op_tok, "a fusion needs calls=GRAPH_NAME");
      }
      EMBER_ASSIGN_OR_RETURN(called, ResolveCall(*calls_tok_, calls_tok_->text));
      attrs.Erase("calls");
    }
    std::string metadata;
    if (pos_ < toks_.size() && toks_[pos_].kind == TokKind::kComment &&
        toks_[pos_].line == last_line_) {
      std::string_view body = toks_[pos_].text;
      if (!body.empty() && body[0] == ' ') body.remove_prefix(1);
      metadata = text_internal::UnescapeMetadata(body);
      ++pos_;
    }
    NodeId id = builder_->AddNode(*op, std::move(operands), std::move(attrs), shape,
                                  std::move(literal), std::move(metadata), std::move(called));
    if (id == kInvalidNode) {
      Status s = builder_->status();
      if (s.ok()) s = InvalidArgument("the builder rejected this instruction");
      return Wrap(op_tok, s);
    }
    names_[name.text] = id;
    return OkStatus();
  }

  Status ParseRoot(const Token& root_tok) {
    std::vector<NodeId> outputs;
    if (Peek().kind == TokKind::kName) {
      EMBER_ASSIGN_OR_RETURN(NodeId id, ParseOperandName());
      outputs.push_back(id);
    } else {
      EMBER_RETURN_IF_ERROR(Expect(TokKind::kLParen, "'(' or %name after ROOT"));
      EMBER_ASSIGN_OR_RETURN(outputs, ParseNameList(TokKind::kRParen, "',' or ')' after outputs"));
    }
    num_outputs_ = outputs.size();
    builder_->SetOutputs(std::move(outputs));
    if (!builder_->status().ok()) return Wrap(root_tok, builder_->status());
    return OkStatus();
  }

  Status ParseAlias() {
    EMBER_RETURN_IF_ERROR(Expect(TokKind::kLBrace, "'{' after ALIAS"));
    std::map<int64_t, int64_t> seen;
    if (Peek().kind != TokKind::kRBrace) {
      while (true) {
        const Token& ot = Peek();
        EMBER_ASSIGN_OR_RETURN(int64_t out, ExpectInt("an output index"));
        EMBER_RETURN_IF_ERROR(Expect(TokKind::kColon, "':' between output and parameter index"));
        const Token& pt = Peek();
        EMBER_ASSIGN_OR_RETURN(int64_t param, ExpectInt("a parameter index"));
        if (out < 0 || out >= static_cast<int64_t>(num_outputs_)) {
          return Err(ot, "alias output index ", out, " out of range [0, ", num_outputs_, ")");
        }
        if (param < 0 || param > std::numeric_limits<int>::max()) {
          return Err(pt, "alias parameter index ", param, " out of range");
        }
        if (seen.count(out)) return Err(ot, "output ", out, " is aliased twice");
        seen[out] = param;
        builder_->SetAlias(static_cast<int>(out), static_cast<int>(param));
        if (!builder_->status().ok()) return Wrap(ot, builder_->status());
        if (Peek().kind == TokKind::kComma) {
          Next();
          continue;
        }
        break;
      }
    }
    return Expect(TokKind::kRBrace, "',' or '}' in the alias map");
  }

  // The body named by `calls=NAME` (at token `at`), built on first use.
  StatusOr<std::shared_ptr<const Graph>> ResolveCall(const Token& at, const std::string& name) {
    auto it = module_.by_name.find(name);
    if (it == module_.by_name.end()) {
      return Err(at, "fusion calls undefined graph '", name, "'");
    }
    const size_t index = it->second;
    if (module_.state[index] == 1) {
      return Err(at, "fusion calls graph '", name, "', which is being defined: cycle of calls");
    }
    if (module_.state[index] == 0) {
      if (depth_ >= kMaxNesting) {
        return Err(at, "fusion bodies nested more than ", kMaxNesting, " deep");
      }
      EMBER_ASSIGN_OR_RETURN(auto g, BuildBlock(module_, index, depth_ + 1));
      (void)g;
    }
    return std::shared_ptr<const Graph>(module_.built[index]);
  }

  Module& module_;
  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  size_t end_ = 0;
  int depth_ = 0;
  const Token* calls_tok_ = nullptr;
  int last_line_ = 0;
  std::optional<GraphBuilder> builder_;
  std::unordered_map<std::string, NodeId> names_;
  std::vector<HeaderParam> header_;
  int header_line_ = 1, header_col_ = 1;
  size_t num_outputs_ = 0;
};

StatusOr<std::shared_ptr<Graph>> BuildBlock(Module& m, size_t index, int depth) {
  m.state[index] = 1;
  const Module::Block& b = m.blocks[index];
  auto g = Parser(m, b.start, b.end, depth).Run();
  if (!g.ok()) return g.status();
  m.built[index] = std::make_shared<Graph>(std::move(g).value());
  m.state[index] = 2;
  return m.built[index];
}

// Splits the token stream into `graph` blocks (by brace matching; an
// unterminated block runs to the end, where its parser reports the error).
// A stray top-level token or a repeated graph name is `deferred`: reported
// only if every block parses, so errors come in file order.
void SplitBlocks(Module& m, Status& deferred) {
  const auto& toks = m.toks;
  auto skip = [&](size_t p) {
    while (p < toks.size() && toks[p].kind == TokKind::kComment) ++p;
    return p < toks.size() ? p : toks.size() - 1;
  };
  size_t p = skip(0);
  while (true) {
    const Token& t = toks[p];
    if (t.kind == TokKind::kEnd && !m.blocks.empty()) return;
    if (!(t.kind == TokKind::kIdent && t.text == "graph")) {
      if (m.blocks.empty()) {
        // Let the block parser report the bad start.
        m.blocks.push_back({p, toks.size() - 1, ""});
      } else if (deferred.ok()) {
        deferred = InvalidArgument(Where(t.line, t.col),
                                   "expected end of input or another 'graph' after the graph, got ",
                                   DescribeToken(t));
      }
      return;
    }
    Module::Block b;
    b.start = p;
    size_t q = skip(p + 1);
    if (toks[q].kind == TokKind::kIdent || toks[q].kind == TokKind::kString) {
      b.name = toks[q].text;
      if (m.by_name.count(b.name)) {
        if (deferred.ok()) {
          deferred = InvalidArgument(Where(toks[q].line, toks[q].col), "graph name '", b.name,
                                     "' is defined twice; names must be unique in a file");
        }
      } else {
        m.by_name[b.name] = m.blocks.size();
      }
    }
    while (toks[q].kind != TokKind::kEnd && toks[q].kind != TokKind::kLBrace) ++q;
    int depth = 0;
    for (; toks[q].kind != TokKind::kEnd; ++q) {
      if (toks[q].kind == TokKind::kLBrace) ++depth;
      if (toks[q].kind == TokKind::kRBrace && --depth == 0) {
        ++q;
        break;
      }
    }
    b.end = q;
    m.blocks.push_back(std::move(b));
    if (q >= toks.size() || toks[q].kind == TokKind::kEnd) return;
    p = skip(q);
  }
}

void PrintOneGraph(const Graph& g, const GraphNames& names, std::string& out) {
  out += "graph ";
  PrintGraphName(names.at(&g), out);
  out += '(';
  for (size_t i = 0; i < g.parameters().size(); ++i) {
    if (i) out += ", ";
    out += "%p";
    out += std::to_string(i);
    out += ": ";
    NodeId id = g.parameters()[i];
    out += id >= 0 && id < g.num_nodes() ? g.node(id).shape.ToString() : "?";
  }
  out += ") {\n";
  for (const Node& n : g.nodes()) PrintNode(n, names, out);
  out += "  ROOT (";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    if (i) out += ", ";
    out += '%';
    out += std::to_string(g.outputs()[i]);
  }
  out += ")\n";
  if (!g.aliases().empty()) {
    out += "  ALIAS {";
    bool first = true;
    for (const auto& [o, p] : g.aliases()) {
      if (!first) out += ", ";
      first = false;
      out += std::to_string(o);
      out += ": ";
      out += std::to_string(p);
    }
    out += "}\n";
  }
  out += "}\n";
}

}  // namespace

std::string PrintGraph(const Graph& g) {
  // The entry graph, then each called body once, in order of first use, with
  // names made unique (a repeated name gets a ".1", ".2", ... suffix).
  std::vector<const Graph*> order = {&g};
  GraphNames names = {{&g, g.name()}};
  std::set<std::string> used = {g.name()};
  for (size_t i = 0; i < order.size(); ++i) {
    for (const Node& n : order[i]->nodes()) {
      if (!n.called || names.count(n.called.get())) continue;
      std::string base = n.called->name().empty() ? std::string("body") : n.called->name();
      std::string name = base;
      for (int k = 1; used.count(name); ++k) name = base + "." + std::to_string(k);
      used.insert(name);
      names[n.called.get()] = name;
      order.push_back(n.called.get());
    }
  }
  std::string out;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i) out += '\n';
    PrintOneGraph(*order[i], names, out);
  }
  return out;
}

StatusOr<Graph> ParseGraph(std::string_view text) {
  Module m;
  EMBER_ASSIGN_OR_RETURN(m.toks, text_internal::Tokenize(text));
  Status deferred;
  SplitBlocks(m, deferred);
  m.state.assign(m.blocks.size(), 0);
  m.built.resize(m.blocks.size());
  // The entry graph first (its bodies on demand), then any graph no one
  // called yet, so every block is checked; uncalled graphs are dropped.
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    if (m.state[i] == 0) EMBER_RETURN_IF_ERROR(BuildBlock(m, i, 0).status());
  }
  EMBER_RETURN_IF_ERROR(deferred);
  std::shared_ptr<Graph> entry = std::move(m.built[0]);
  m.built.clear();
  if (entry.use_count() == 1) return std::move(*entry);
  return Graph(*entry);
}

}  // namespace ember
