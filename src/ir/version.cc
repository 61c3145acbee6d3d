// ember::Version() (ember/version.h). EMBER_VERSION_STRING comes from CMakeLists.txt,
// which reads it from pyproject.toml.
#include "ember/version.h"

#ifndef EMBER_VERSION_STRING
#error "EMBER_VERSION_STRING is set by CMakeLists.txt (from pyproject.toml)"
#endif

namespace ember {

const char* Version() { return EMBER_VERSION_STRING; }

}  // namespace ember
