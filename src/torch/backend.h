// The backends a lazy graph runs on (docs/architecture.md, "Lowering": cpu, interpreter,
// aten), their names and $EMBER_BACKEND. Torch-free.
#pragma once

#include <string>

namespace ember_torch {

enum class Backend : int { kCpu = 0, kInterpreter = 1, kAten = 2 };
const char* backend_name(int b);
int parse_backend(const std::string& s);  // -1 if unknown
// $EMBER_BACKEND: cpu (default), interpreter, aten; an unknown name warns and gives cpu.
int backend_from_env();

}  // namespace ember_torch
