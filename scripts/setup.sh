#!/usr/bin/env bash
# Sets up Ember on a fresh Debian/Ubuntu machine and runs the main job.
#  1. system packages (compiler, CMake, Ninja, ccache, GoogleTest, Google Benchmark,
#     clang-format 14 for scripts/lint.sh)
#  2. a virtual environment in .venv with torch==2.13.0 (CPU) and the Python tools
#     (requirements.txt, ruff pinned there)
#  3. the C++ build in build/ and, when the torch bridge is present, the ember package
#  4. the main job
# Re-running is cheap: every step skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# ---- 1. system packages ----
APT_PACKAGES=(build-essential cmake ninja-build ccache libgtest-dev libgmock-dev libbenchmark-dev python3-venv clang-format-14)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing system packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ---- 2. Python environment ----
PY=${EMBER_PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
echo "[setup] installing Python requirements (torch==2.13.0 CPU, ...)"
.venv/bin/python -m pip install -q -r requirements.txt

# ---- 3. build ----
echo "[setup] building the compiler core (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_BUILD_TOOLS=ON -DEMBER_BUILD_TESTS=ON >/dev/null
ninja -C build -j"${EMBER_JOBS:-2}"
if [[ -f pyproject.toml ]]; then
  echo "[setup] building and installing the ember Python package"
  .venv/bin/python -m pip install -q --no-build-isolation .
fi

# ---- 4. the main job ----
echo "[setup] running the main job"
exec bash scripts/main_job.sh
