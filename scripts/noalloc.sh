#!/usr/bin/env bash
# Slow tier (issue #17): zero heap allocations per CPU inference after warm-up, at every instruction
# set level this CPU has. The allocation test (tests/backends/cpu/cpu_no_alloc_test.cpp) counts
# through its own malloc and needs a build without sanitizers, so CI's ASan build skips it: this runs
# it in the Release build with tests (scripts/build.sh release, build/), once per level that
# `sampan info` lists, with SAMPAN_CPU_ISA capping our kernels and oneDNN's.
#   bash scripts/noalloc.sh              build/ (built first when missing or stale)
#   BUILD=build-cuda bash scripts/noalloc.sh   another Release build with tests
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
if [ "$BUILD" = build ]; then
  SAMPAN_RELEASE_TESTS=ON bash scripts/build.sh release || exit 1
fi
bin="$BUILD/tests/sampan_tests"
[ -x "$bin" ] || { echo "noalloc: $bin missing (a Release build with tests)"; exit 1; }
levels="$("$BUILD/sampan" info | sed -n 's/^ *instruction set levels: //p' | tr -d ',')"
[ -n "$levels" ] || { echo "noalloc: sampan info listed no instruction set levels"; exit 1; }
rc=0
for level in $levels; do
  out="$(SAMPAN_CPU_ISA=$level "$bin" --gtest_filter='CpuNoAlloc*' 2>&1)" || rc=1
  echo "SAMPAN_CPU_ISA=$level: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' <<<"$out" | tr -s ' ' | paste -sd ' ')"
  grep -E 'Failure|^  [0-9]|exempt|gemm driver' <<<"$out" | sort | uniq -c | head -20
done
exit $rc
