// ember-run: executes a text graph on given or random inputs and prints its
// outputs.
//
//   ember-run [--backend=interpreter|runtime|cpu] [--seed=N]
//             [--input=I:v1,v2,...]... [--print-inputs] [--print-steps] FILE|-
//
// --backend=interpreter (default) runs the reference interpreter;
// --backend=runtime compiles the graph into a runtime Executable (extern
// steps + interpreted subgraphs) and runs that; --backend=cpu optimizes the
// graph (CpuPipeline: the default passes, then fusion) and runs it
// through native kernels (CPU code generation; unsupported parts stay
// interpreted). --print-steps prints the executable's steps (and, for cpu,
// its buffer assignment). --fast compiles kernels at -O1. --input=I:... gives the row-major values
// of parameter I (a single value fills the whole shape; integers and pred parse exactly,
// `true`/`false` allowed for pred; floats accept nan/inf). Parameters without
// --input get seeded random values (--seed, default 0): floats uniform in
// [-1, 1), signed ints in [-8, 8], unsigned ints in [0, 16], pred 0/1.
// Each output prints as `output K: <Literal::ToString()>`. Every error goes
// to stderr with exit code 1. --version prints `ember-run <version>` (ember/version.h).
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ember/eval/interpreter.h"
#include "ember/ir/graph.h"
#include "ember/ir/text.h"
#include "ember/runtime/executable.h"
#include "ember/version.h"
#include "tool_util.h"

namespace {

constexpr const char* kUsage =
    "usage: ember-run [--backend=interpreter|runtime|cpu] [--seed=N] "
    "[--input=I:v1,v2,...]... [--print-inputs] [--print-steps] [--fast] FILE|-\n"
    "       ember-run --version\n";

int Fail(const std::string& msg) {
  std::cerr << "ember-run: " << msg << "\n";
  return 1;
}

using ::ember::tools::StartsWith;

using ::ember::tools::ReadInput;

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Builds the literal for parameter `index` of `shape` from text values.
ember::StatusOr<ember::Literal> ParseValues(int index, const ember::Shape& shape,
                                            const std::vector<std::string>& raw) {
  using ember::InvalidArgument;
  if (shape.is_tuple() || ember::IsComplex(shape.dtype())) {
    return ember::Unimplemented("--input=", index, ": parameter of shape ", shape.ToString(),
                                " cannot be given on the command line");
  }
  const int64_t n = shape.num_elements();
  if (static_cast<int64_t>(raw.size()) != n && raw.size() != 1) {
    return InvalidArgument("--input=", index, ": parameter ", index, " has shape ",
                           shape.ToString(), " (", n, " elements), got ", raw.size(), " values");
  }
  const ember::DType t = shape.dtype();
  if (ember::IsFloat(t)) {
    std::vector<double> vals;
    for (const std::string& r : raw) {
      std::string s = Trim(r);
      char* end = nullptr;
      double v = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0') {
        return InvalidArgument("--input=", index, ": '", s, "' is not a number");
      }
      vals.push_back(v);
    }
    if (vals.size() == 1) vals.assign(static_cast<size_t>(n), vals[0]);
    return ember::Literal::FromDoubles(shape, vals);
  }
  std::vector<int64_t> vals;
  for (const std::string& r : raw) {
    std::string s = Trim(r);
    if (t == ember::DType::kPred && (s == "true" || s == "false")) {
      vals.push_back(s == "true" ? 1 : 0);
      continue;
    }
    char* end = nullptr;
    errno = 0;
    int64_t v;
    if (t == ember::DType::kU64 && !s.empty() && s[0] != '-') {
      v = static_cast<int64_t>(std::strtoull(s.c_str(), &end, 10));
    } else {
      v = std::strtoll(s.c_str(), &end, 10);
    }
    if (s.empty() || *end != '\0' || errno == ERANGE) {
      return InvalidArgument("--input=", index, ": '", s, "' is not an integer in range");
    }
    vals.push_back(v);
  }
  if (vals.size() == 1) vals.assign(static_cast<size_t>(n), vals[0]);
  return ember::Literal::FromInts(shape, vals);
}

// Seeded random value of `shape` (mt19937_64 output is specified by the
// standard, and the mapping below is ours, so values are the same everywhere).
ember::Literal RandomLiteral(const ember::Shape& shape, std::mt19937_64& rng) {
  if (shape.is_tuple()) {
    std::vector<ember::Literal> elems;
    for (const ember::Shape& s : shape.tuple_shapes()) elems.push_back(RandomLiteral(s, rng));
    return ember::Literal::Tuple(std::move(elems));
  }
  const ember::DType t = shape.dtype();
  const int64_t n = shape.num_elements();
  if (ember::IsFloat(t) || ember::IsComplex(t)) {
    std::vector<double> vals;
    for (int64_t i = 0; i < n; ++i) {
      double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      vals.push_back(2.0 * u - 1.0);
    }
    return ember::Literal::FromDoubles(shape, vals);
  }
  std::vector<int64_t> vals;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t r = rng();
    if (t == ember::DType::kPred) {
      vals.push_back(static_cast<int64_t>(r & 1));
    } else if (ember::IsSignedInt(t)) {
      vals.push_back(static_cast<int64_t>(r % 17) - 8);
    } else {
      vals.push_back(static_cast<int64_t>(r % 17));
    }
  }
  return ember::Literal::FromInts(shape, vals);
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, backend = "interpreter";
  uint64_t seed = 0;
  bool print_inputs = false, print_steps = false, fast = false;
  std::map<int, std::vector<std::string>> given;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--version") {
      std::cout << "ember-run " << ember::Version() << "\n";
      return 0;
    } else if (StartsWith(arg, "--backend=")) {
      backend = arg.substr(10);
    } else if (StartsWith(arg, "--seed=")) {
      std::string s = arg.substr(7);
      char* end = nullptr;
      errno = 0;
      seed = std::strtoull(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || errno == ERANGE) return Fail("bad --seed '" + s + "'");
    } else if (StartsWith(arg, "--input=")) {
      std::string spec = arg.substr(8);
      size_t colon = spec.find(':');
      if (colon == std::string::npos) return Fail("--input wants I:v1,v2,... got '" + spec + "'");
      std::string idx = spec.substr(0, colon);
      char* end = nullptr;
      long k = std::strtol(idx.c_str(), &end, 10);
      if (idx.empty() || *end != '\0' || k < 0 || k > 1000000) {
        return Fail("--input: bad parameter index '" + idx + "'");
      }
      given[static_cast<int>(k)] = SplitCommas(spec.substr(colon + 1));
    } else if (arg == "--print-inputs") {
      print_inputs = true;
    } else if (arg == "--print-steps") {
      print_steps = true;
    } else if (arg == "--fast") {
      fast = true;
    } else if (arg != "-" && StartsWith(arg, "-")) {
      return Fail("unknown option '" + arg + "'\n" + kUsage);
    } else if (!file.empty()) {
      return Fail("more than one input file\n" + std::string(kUsage));
    } else {
      file = arg;
    }
  }
  if (backend != "interpreter" && backend != "runtime" && backend != "cpu") {
    return Fail("unknown backend '" + backend + "' (known: interpreter, runtime, cpu)");
  }
  if (file.empty()) return Fail(std::string("no input file\n") + kUsage);

  std::string text, error;
  if (!ReadInput(file, &text, &error)) return Fail(error);
  ember::StatusOr<ember::Graph> parsed = ember::ParseGraph(text);
  if (!parsed.ok()) return Fail(file + ": " + parsed.status().ToString());
  const ember::Graph g = std::move(parsed).value();
  ember::Status verified = ember::Verify(g);
  if (!verified.ok()) return Fail(file + ": " + verified.ToString());

  const int num_params = static_cast<int>(g.parameters().size());
  for (const auto& [k, vals] : given) {
    if (k >= num_params) {
      return Fail("--input=" + std::to_string(k) + ": the graph has " + std::to_string(num_params) +
                  " parameters");
    }
  }
  std::mt19937_64 rng(seed);
  std::vector<ember::Literal> args;
  for (int p = 0; p < num_params; ++p) {
    const ember::Shape& shape = g.node(g.parameters()[p]).shape;
    auto it = given.find(p);
    if (it == given.end()) {
      args.push_back(RandomLiteral(shape, rng));
      continue;
    }
    auto lit = ParseValues(p, shape, it->second);
    if (!lit.ok()) return Fail(lit.status().ToString());
    args.push_back(std::move(lit).value());
  }
  if (print_inputs) {
    for (int p = 0; p < num_params; ++p)
      std::cout << "input " << p << ": " << args[p].ToString() << "\n";
  }

  ember::StatusOr<std::vector<ember::Literal>> outs = std::vector<ember::Literal>{};
  if (backend == "interpreter") {
    outs = ember::Evaluate(g, args);
  } else {
    ember::CompileOptions options;
    if (backend == "cpu") {
      options.backend = ember::Backend::kCpu;
      options.optimize = true;
      options.codegen.fast = fast;
    }
    auto exe = ember::Compile(g, options);
    if (!exe.ok()) return Fail(file + ": " + exe.status().ToString());
    if (print_steps) std::cout << exe->DebugString() << exe->AssignmentDebugString();
    outs = exe->RunLiterals(args);
  }
  if (!outs.ok()) return Fail(file + ": " + outs.status().ToString());
  for (size_t i = 0; i < outs->size(); ++i) {
    std::cout << "output " << i << ": " << (*outs)[i].ToString() << "\n";
  }
  return 0;
}
