#!/usr/bin/env bash
# Runs the FileCheck-style tool tests (ctest `tools_lit`):
#   run_tool_tests.sh EMBER_OPT EMBER_RUN TESTS_DIR [NAME_FILTER]
# Every TESTS_DIR/*.ir holds `// RUN:` and `// CHECK:` lines; see lit.py and
# filecheck.py beside this script (python3, standard library only).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "$here/lit.py" "$@"
