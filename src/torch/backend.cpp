// Backend names (backend.h).
#include "backend.h"

#include <cstdio>
#include <cstdlib>

namespace ember_torch {

const char* backend_name(int b) {
  switch (b) {
    case 0:
      return "cpu";
    case 1:
      return "interpreter";
    case 2:
      return "aten";
  }
  return "?";
}

int parse_backend(const std::string& s) {
  if (s == "cpu") return 0;
  if (s == "interpreter") return 1;
  if (s == "aten") return 2;
  return -1;
}

int backend_from_env() {
  // Default: cpu (lowered, fused, native kernels; docs/architecture.md, "Lowering").
  const char* e = std::getenv("EMBER_BACKEND");
  if (!e || !*e) return 0;
  int b = parse_backend(e);
  if (b < 0) {
    std::fprintf(stderr,
                 "ember: EMBER_BACKEND=%s is not one of cpu, interpreter, aten; using cpu\n", e);
    return 0;
  }
  return b;
}

}  // namespace ember_torch
