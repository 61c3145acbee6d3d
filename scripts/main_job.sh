#!/usr/bin/env bash
# The main job: builds a graph with the C++ API, optimizes it and runs it,
# printing the graph before and after the passes and the results.
set -euo pipefail
cd "$(dirname "$0")/.."
exec build/ember-example
