#!/usr/bin/env bash
# Formats every tracked C, C++ and CUDA file with .clang-format (clang-format 14, Debian 12's).
#   scripts/format.sh            rewrites the files in place
#   scripts/format.sh --check    changes nothing; lists each file that would change and fails
#   scripts/format.sh FILE...    formats (or, after --check, checks) only these files
# CI runs the check (scripts/test.sh, stage "format"). Another clang-format version formats
# some constructs differently, so the script refuses any but 14 unless CLANG_FORMAT names one.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
case "${1:-}" in -*) echo "usage: $0 [--check] [FILE...]" >&2; exit 2 ;; esac

cf="${CLANG_FORMAT:-}"
if [ -z "$cf" ]; then
  for c in clang-format-14 clang-format; do
    if command -v "$c" >/dev/null 2>&1; then cf="$c"; break; fi
  done
fi
if [ -z "$cf" ]; then
  echo "format: clang-format 14 not found (Debian 12: apt-get install clang-format-14)" >&2
  exit 2
fi
version="$("$cf" --version | sed -n 's/.*clang-format version \([0-9]*\)\..*/\1/p')"
if [ -z "${CLANG_FORMAT:-}" ] && [ "$version" != 14 ]; then
  echo "format: $cf is version ${version:-unknown}; the tree is formatted with 14 (set CLANG_FORMAT to override)" >&2
  exit 2
fi

if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh')
fi
[ ${#files[@]} -gt 0 ] || { echo "format: no files"; exit 0; }

if [ $check = 0 ]; then
  # Twice: clang-format 14 settles a few constructs (wrapped initializer lists) only on a second pass.
  for _ in 1 2; do printf '%s\0' "${files[@]}" | xargs -0 -n 50 "$cf" -i --style=file; done
  echo "format: ${#files[@]} files formatted with $cf ($version)"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format: ${#bad[@]} of ${#files[@]} files are not formatted (fix: bash scripts/format.sh):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format: ${#files[@]} files formatted as .clang-format says ($cf $version)"
