#!/usr/bin/env bash
# Format and lint check over the files git tracks (never build outputs):
#   C++    (*.cc *.h *.cpp *.hpp): clang-format 14 with the repository's .clang-format
#   Python (*.py):                 ruff format --check, then ruff check ([tool.ruff] in
#                                  pyproject.toml)
# Exit 0 when the tree is clean; exit 1 with the diff (or the lint findings) otherwise.
#
#   bash scripts/lint.sh          check (what CI runs)
#   bash scripts/lint.sh --fix    rewrite the files in place (clang-format -i, ruff format,
#                                 ruff check --fix), then check again
#
# The tools are pinned (CONTRIBUTING.md, "Format and lint"): Debian's clang-format-14 and
# ruff from requirements.txt in .venv, both installed by scripts/setup.sh. Override with
# CLANG_FORMAT=... and RUFF=...; a clang-format of another major version is refused, since
# its output differs.
set -euo pipefail
cd "$(dirname "$0")/.."

FIX=0
case "${1:-}" in
  "") ;;
  --fix) FIX=1 ;;
  *) echo "usage: bash scripts/lint.sh [--fix]" >&2; exit 2 ;;
esac

CLANG_FORMAT=${CLANG_FORMAT:-$(command -v clang-format-14 || true)}
RUFF=${RUFF:-.venv/bin/ruff}
if [[ -z "$CLANG_FORMAT" ]] || ! "$CLANG_FORMAT" --version >/dev/null 2>&1; then
  echo "lint: clang-format-14 not found (apt-get install clang-format-14; scripts/setup.sh does)" >&2
  exit 2
fi
if ! "$CLANG_FORMAT" --version | grep -q "version 14\."; then
  echo "lint: $CLANG_FORMAT is not clang-format 14: $("$CLANG_FORMAT" --version)" >&2
  exit 2
fi
if ! "$RUFF" --version >/dev/null 2>&1; then
  echo "lint: $RUFF not found (pip install -r requirements.txt into .venv; scripts/setup.sh does)" >&2
  exit 2
fi

# safe.directory: a clone owned by another user (a CI runner) is still listed.
GIT=(git -c "safe.directory=$PWD")
if ! "${GIT[@]}" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "lint: not a git work tree (the checked files are the ones git tracks)" >&2
  exit 2
fi
mapfile -d '' CXX_FILES < <("${GIT[@]}" ls-files -z -- '*.cc' '*.h' '*.cpp' '*.hpp')
mapfile -d '' PY_FILES < <("${GIT[@]}" ls-files -z -- '*.py')

if ((FIX)); then
  printf '%s\0' "${CXX_FILES[@]}" | xargs -0 -n 50 -P 2 "$CLANG_FORMAT" -i --style=file
  "$RUFF" format -q "${PY_FILES[@]}"
  "$RUFF" check -q --fix "${PY_FILES[@]}" || true
fi

status=0
# C++: --dry-run -Werror lists the files that would change; their diffs follow.
bad=$(printf '%s\0' "${CXX_FILES[@]}" |
  xargs -0 -n 50 -P 2 "$CLANG_FORMAT" --style=file --dry-run -Werror 2>&1 |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u) || true
if [[ -n "$bad" ]]; then
  status=1
  while IFS= read -r f; do
    diff -u --label "$f" --label "$f (clang-format)" "$f" <("$CLANG_FORMAT" --style=file "$f") || true
  done <<<"$bad"
  echo "lint: clang-format: $(wc -l <<<"$bad") of ${#CXX_FILES[@]} C++ files need formatting (bash scripts/lint.sh --fix)"
else
  echo "lint: clang-format: ${#CXX_FILES[@]} C++ files clean"
fi

if ! "$RUFF" format --check --diff -q "${PY_FILES[@]}"; then
  status=1
  echo "lint: ruff format: Python files need formatting (bash scripts/lint.sh --fix)"
else
  echo "lint: ruff format: ${#PY_FILES[@]} Python files clean"
fi
if ! "$RUFF" check -q --output-format=concise "${PY_FILES[@]}"; then
  status=1
  echo "lint: ruff check: findings above (fix them, or bash scripts/lint.sh --fix for the fixable ones)"
else
  echo "lint: ruff check: ${#PY_FILES[@]} Python files clean"
fi
exit $status
