// One bucket's program text (program.h): printing, parsing, compiling.
#include "program.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "codegen/cpu/toolchain.h"
#include "ember/ir/text.h"

namespace ember_torch::exporting {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

std::string ints(const std::vector<int64_t>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::vector<int64_t> parse_ints(const std::string& s) {
  std::vector<int64_t> v;
  if (s == "-") return v;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) v.push_back(std::stoll(t));
  return v;
}

std::string hexfloat(double d) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%a", d);
  return buf;
}

// Percent-encodes everything but [A-Za-z0-9_.:-] so a string is one token.
std::string pct(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '-') {
      o += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      o += buf;
    }
  }
  return o;
}
std::string unpct(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      o += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      o += s[i];
    }
  }
  return o;
}

// IValue tokens: N (None), b0/b1, i<int>, d<hexfloat>, c<re>,<im>, s<pct string>,
// v<device>, L<n> then n elements. Throws for other types (`what` names the value).
void encode(const c10::IValue& v, std::vector<std::string>& out, const std::string& what) {
  if (v.isNone()) {
    out.push_back("N");
  } else if (v.isBool()) {
    out.push_back(v.toBool() ? "b1" : "b0");
  } else if (v.isInt()) {
    out.push_back("i" + std::to_string(v.toInt()));
  } else if (v.isDouble()) {
    out.push_back("d" + hexfloat(v.toDouble()));
  } else if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    out.push_back("c" + hexfloat(c.real()) + "," + hexfloat(c.imag()));
  } else if (v.isString()) {
    out.push_back("s" + pct(v.toStringRef()));
  } else if (v.isDevice()) {
    out.push_back("v" + pct(v.toDevice().str()));
  } else if (v.isList()) {
    auto l = v.toList();
    out.push_back("L" + std::to_string(l.size()));
    for (size_t i = 0; i < l.size(); ++i) encode(l.get(i), out, what);
  } else {
    fail(what + ": an argument of type " + v.tagKind() + " cannot be stored in an export artifact");
  }
}

struct Tokens {
  std::vector<std::string> t;
  size_t i = 0;
  const std::string* line = nullptr;
  const std::string& next() {
    if (i >= t.size()) fail("ember program: line too short: '" + *line + "'");
    return t[i++];
  }
  int64_t next_int() { return std::stoll(next()); }
};

c10::IValue decode(Tokens& tk, const c10::TypePtr& type) {
  const std::string& s = tk.next();
  switch (s[0]) {
    case 'N':
      return c10::IValue();
    case 'b':
      return c10::IValue(s == "b1");
    case 'i':
      return c10::IValue(static_cast<int64_t>(std::stoll(s.substr(1))));
    case 'd':
      return c10::IValue(std::strtod(s.c_str() + 1, nullptr));
    case 'c': {
      auto comma = s.find(',');
      return c10::IValue(c10::complex<double>(std::strtod(s.c_str() + 1, nullptr),
                                              std::strtod(s.c_str() + comma + 1, nullptr)));
    }
    case 's':
      return c10::IValue(unpct(s.substr(1)));
    case 'v':
      return c10::IValue(c10::Device(unpct(s.substr(1))));
    case 'L': {
      size_t n = std::stoul(s.substr(1));
      c10::TypePtr t = type;
      if (t && t->kind() == c10::TypeKind::OptionalType) t = t->containedType(0);
      c10::TypePtr elem = t && t->kind() == c10::TypeKind::ListType ? t->containedType(0) : nullptr;
      if (elem && elem->kind() == c10::TypeKind::IntType) {
        c10::List<int64_t> l;
        for (size_t k = 0; k < n; ++k) l.push_back(decode(tk, elem).toInt());
        return c10::IValue(l);
      }
      if (elem && elem->kind() == c10::TypeKind::FloatType) {
        c10::List<double> l;
        for (size_t k = 0; k < n; ++k) l.push_back(decode(tk, elem).toDouble());
        return c10::IValue(l);
      }
      if (elem && elem->kind() == c10::TypeKind::BoolType) {
        c10::List<bool> l;
        for (size_t k = 0; k < n; ++k) l.push_back(decode(tk, elem).toBool());
        return c10::IValue(l);
      }
      c10::impl::GenericList l(elem ? elem : c10::AnyType::get());
      for (size_t k = 0; k < n; ++k) l.push_back(decode(tk, elem));
      return c10::IValue(l);
    }
    default:
      fail("ember program: bad value token '" + s + "' in '" + *tk.line + "'");
  }
}

void put_meta(const TensorMeta& m, std::vector<std::string>& out) {
  out.push_back(std::to_string(static_cast<int>(m.dtype)));
  out.push_back(ints(m.sizes));
  out.push_back(ints(m.strides));
  out.push_back(std::to_string(m.offset));
}
TensorMeta get_meta(Tokens& tk) {
  TensorMeta m;
  m.dtype = static_cast<at::ScalarType>(tk.next_int());
  m.sizes = parse_ints(tk.next());
  m.strides = parse_ints(tk.next());
  m.offset = tk.next_int();
  return m;
}

// An extern's ATen step: schema, then counts and lists (see encode_extern's order).
std::string encode_extern(const ExternState& es) {
  const AtenStep& st = es.step;
  if (st.seed_idx >= 0) fail(st.name + ": a random op cannot be exported");
  std::vector<std::string> o;
  o.push_back(st.name);
  o.push_back(std::to_string(es.num_tensors));
  o.push_back(std::to_string(es.operand_metas.size()));
  for (const auto& m : es.operand_metas) put_meta(m, o);
  o.push_back(std::to_string(es.scalar_tags.size()));
  for (int t : es.scalar_tags) o.push_back(std::to_string(t));
  o.push_back(std::to_string(st.args.size()));
  for (size_t i = 0; i < st.args.size(); ++i) {
    ArgKind k = st.kinds[i];
    if (k == ArgKind::kGenerator) fail(st.name + ": a random op cannot be exported");
    o.push_back(std::to_string(static_cast<int>(k)));
    std::vector<int64_t> refs(st.refs[i].begin(), st.refs[i].end());
    o.push_back(ints(refs));
    bool replaced = k == ArgKind::kTensor || k == ArgKind::kTensorList ||
                    k == ArgKind::kOptTensorList || k == ArgKind::kScalar || k == ArgKind::kDevice;
    if (replaced) {
      o.push_back("N");
    } else {
      encode(st.args[i], o, st.name + " argument " + std::to_string(i));
    }
  }
  std::vector<int64_t> written(st.written.begin(), st.written.end());
  o.push_back(ints(written));
  o.push_back(std::to_string(st.out_metas.size()));
  for (size_t k = 0; k < st.out_metas.size(); ++k) {
    put_meta(st.out_metas[k], o);
    o.push_back(k < st.out_view.size() && st.out_view[k] ? "1" : "0");
  }
  std::string s;
  for (size_t i = 0; i < o.size(); ++i) s += (i ? " " : "") + o[i];
  return s;
}

std::shared_ptr<ExternState> decode_extern(Tokens& tk) {
  const std::string name = tk.next();
  auto dot = name.find('.');
  c10::OperatorName on(name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1));
  auto h = c10::Dispatcher::singleton().findSchema(on);
  if (!h) {
    fail("the artifact needs the ATen op " + name +
         ", which this libtorch does not have (export with the torch version it was "
         "exported with)");
  }
  AtenStep st(*h);
  st.name = name;
  auto es = std::make_shared<ExternState>(st);
  es->num_tensors = static_cast<int>(tk.next_int());
  int64_t n = tk.next_int();
  for (int64_t k = 0; k < n; ++k) es->operand_metas.push_back(get_meta(tk));
  n = tk.next_int();
  for (int64_t k = 0; k < n; ++k) es->scalar_tags.push_back(static_cast<int>(tk.next_int()));
  n = tk.next_int();
  const auto& schema_args = h->schema().arguments();
  for (int64_t i = 0; i < n; ++i) {
    es->step.kinds.push_back(static_cast<ArgKind>(tk.next_int()));
    std::vector<int> refs;
    for (int64_t r : parse_ints(tk.next())) refs.push_back(static_cast<int>(r));
    es->step.refs.push_back(refs);
    c10::TypePtr type =
        i < static_cast<int64_t>(schema_args.size()) ? schema_args[i].type() : nullptr;
    es->step.args.push_back(decode(tk, type));
  }
  for (int64_t w : parse_ints(tk.next())) es->step.written.push_back(static_cast<int>(w));
  n = tk.next_int();
  for (int64_t k = 0; k < n; ++k) {
    es->step.out_metas.push_back(get_meta(tk));
    es->step.out_view.push_back(tk.next() == "1");
  }
  return es;
}

}  // namespace

std::string Program::Print() const {
  std::ostringstream os;
  os << "ember-program 1\n";
  for (const auto& p : params) {
    switch (p.kind) {
      case ProgramParam::kInput:
        os << "param input " << p.index << " " << (p.permuted ? 1 : 0) << " " << ints(p.sizes)
           << " " << ints(p.strides) << " " << p.offset_delta << "\n";
        break;
      case ProgramParam::kConstant:
        os << "param constant " << p.index << " " << ints(p.sizes) << " "
           << static_cast<int>(p.dtype) << "\n";
        break;
      case ProgramParam::kScalar: {
        std::vector<std::string> v;
        encode(p.value, v, "a scalar parameter");
        os << "param scalar " << p.tag << " " << v[0] << "\n";
        break;
      }
    }
  }
  for (const auto& o : outputs) {
    std::vector<std::string> v;
    put_meta(o.meta, v);
    os << "output " << o.root << " " << v[0] << " " << v[1] << " " << v[2] << " " << v[3] << "\n";
  }
  for (const auto& kv : externs)
    os << "extern " << kv.first << " " << encode_extern(*kv.second) << "\n";
  return os.str();
}

Program Program::Parse(const std::string& text) {
  Program p;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != "ember-program 1") {
    fail("ember program: expected 'ember-program 1', got '" + line + "'");
  }
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    Tokens tk;
    tk.line = &line;
    std::istringstream ls(line);
    for (std::string t; ls >> t;) tk.t.push_back(t);
    try {
      const std::string& kind = tk.next();
      if (kind == "param") {
        ProgramParam q;
        const std::string& what = tk.next();
        if (what == "input") {
          q.kind = ProgramParam::kInput;
          q.index = static_cast<int>(tk.next_int());
          q.permuted = tk.next() == "1";
          q.sizes = parse_ints(tk.next());
          q.strides = parse_ints(tk.next());
          q.offset_delta = tk.next_int();
        } else if (what == "constant") {
          q.kind = ProgramParam::kConstant;
          q.index = static_cast<int>(tk.next_int());
          q.sizes = parse_ints(tk.next());
          q.dtype = static_cast<at::ScalarType>(tk.next_int());
        } else if (what == "scalar") {
          q.kind = ProgramParam::kScalar;
          q.tag = static_cast<int>(tk.next_int());
          q.value = decode(tk, nullptr);
        } else {
          fail("unknown parameter kind '" + what + "'");
        }
        p.params.push_back(std::move(q));
      } else if (kind == "output") {
        ProgramOutput o;
        o.root = static_cast<int>(tk.next_int());
        o.meta = get_meta(tk);
        p.outputs.push_back(o);
      } else if (kind == "extern") {
        std::string target = tk.next();
        p.externs[target] = decode_extern(tk);
      } else {
        fail("unknown record '" + kind + "'");
      }
    } catch (const std::invalid_argument&) {
      fail("ember program: malformed line '" + line + "'");
    } catch (const std::out_of_range&) {
      fail("ember program: malformed line '" + line + "'");
    }
  }
  return p;
}

std::string native_cpu_features() { return ember::codegen::CpuFeatures(); }

bool cpu_supports_baseline() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("lzcnt") &&
         __builtin_cpu_supports("movbe");
#else
  return false;
#endif
}

std::shared_ptr<ember::Executable> compile_program(const std::string& ir, const Program& prog,
                                                   const KernelTarget& target) {
  ember::StatusOr<ember::Graph> g = ember::ParseGraph(ir);
  if (!g.ok()) fail("the artifact's IR does not parse: " + g.status().message());
  ember::CompileOptions co;
  co.backend = ember::Backend::kCpu;
  co.optimize = false;  // the text is the optimized graph
  co.codegen.cache_dir = target.cache_dir;
  co.codegen.fast = target.fast;
  co.codegen.vector_math = target.vector_math;
  if (target.name == "x86-64-v3") {
    co.codegen.cpu_features = "x86-64-v3";
    co.codegen.extra_flags = {"-march=x86-64-v3", "-mtune=generic"};
  } else if (target.name != "native") {
    fail("unknown kernel target '" + target.name + "' (native or x86-64-v3)");
  }
  for (const auto& kv : prog.externs) {
    std::shared_ptr<const ExternState> keep = kv.second;
    co.externs[kv.first] = [keep](ember::ExternCall& c) { return run_extern(*keep, c); };
  }
  ember::StatusOr<ember::Executable> exe = ember::Compile(*g, co);
  if (!exe.ok()) fail("compiling the artifact's program failed: " + exe.status().message());
  return std::make_shared<ember::Executable>(std::move(exe).value());
}

std::vector<std::string> kernel_files(const ember::Executable& exe) {
  std::vector<std::string> out;
  auto add = [&](const std::string& f) {
    if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
  };
  for (const ember::Step& st : exe.steps()) {
    if (st.kind != ember::StepKind::kKernel || !st.compiled) continue;
    const std::string& so = st.compiled->so_path();
    const std::string dir = so.substr(0, so.rfind('/'));
    add(dir + "/" + st.compiled->cache_key() + ".meta");
    add(so);
    add(dir + "/" + st.compiled->cache_key() + ".cc");
  }
  return out;
}

}  // namespace ember_torch::exporting
