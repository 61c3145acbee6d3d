#!/usr/bin/env bash
# The main job: (1) the compiler core from C++: build a graph, optimize it, run it;
# (2) the product: a CNN learns scikit-learn's handwritten digits on the lazy `ember`
# device (examples/train_digits.py); it fails (exit 1) below 95% test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== compiler core (build/ember-example)"
build/ember-example
echo
echo "== main job: a CNN trained on the ember device (examples/train_digits.py)"
if ! .venv/bin/python examples/train_digits.py; then
  echo "MAIN JOB FAILED: examples/train_digits.py (see above)" >&2
  exit 1
fi
