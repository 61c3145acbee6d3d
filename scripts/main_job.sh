#!/usr/bin/env bash
# The main job: (1) the compiler core from C++: build a graph, optimize it, run
# it; (2) the product: a training loop on the lazy `ember` device next to eager
# CPU, from the same weights, with ember's metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== compiler core (build/ember-example)"
build/ember-example
echo
echo "== training on the ember device vs eager (examples/quickstart.py)"
.venv/bin/python examples/quickstart.py
