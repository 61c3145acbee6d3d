// Private: the DT_NEEDED entries (shared-library dependencies) of a 64-bit
// little-endian ELF file, read from its dynamic section. Used to check that
// generated kernels never depend on an OpenMP runtime (libgomp).
#pragma once

#include <string>
#include <vector>

#include "ember/status.h"

namespace ember::codegen {

StatusOr<std::vector<std::string>> ElfNeededLibraries(const std::string& path);

}  // namespace ember::codegen
