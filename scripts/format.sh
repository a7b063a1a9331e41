#!/usr/bin/env bash
# Formats every C++ source tracked by git with the repository's .clang-format, in place;
# `--check` changes nothing and fails, listing the files, if any is not formatted (CI).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]})); then
    echo "format: not clang-formatted (run scripts/format.sh): ${bad[*]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files clang-formatted"
else
  clang-format -i "${files[@]}"
fi
