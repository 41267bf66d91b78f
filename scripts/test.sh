#!/usr/bin/env bash
# THE test command (CI runs exactly this): set-up, both builds, every test suite.
#   1. scripts/setup.sh                     system packages + pinned .venv (fast when present)
#   1b. scripts/format.sh --check           every C/C++/CUDA file as .clang-format says (clang-format 14)
#   2. scripts/build.sh asan                build-asan/ (ASan+UBSan, unit tests, -Werror: a compiler
#                                           warning fails the build); every stage uses it
#   3. unit tests in build-asan             C++ unit tests under AddressSanitizer + UBSan (sharded), fuzz seeds (ctest)
#   4. pytest tests/cli                     CLI bad-input tests against build-asan/sampan
#   5. ONNX node conformance                build-asan/sampan on build/conformance/node (the pinned onnx):
#                                           0 failures and at least $MIN_CONFORMANCE_PASSED passes
#   5b. newest onnx suite                   the same on build/onnx-newest/node (onnx of
#                                           scripts/requirements-onnx-newest.txt, generated once):
#                                           0 failures and at least $MIN_NEWEST_CONFORMANCE_PASSED passes
#   6. real models                          export to build/models, pytest tests/models with build-asan/sampan
#   7. server                               pytest tests/server: `sampan serve` (build-asan) driven by Triton's
#                                           own clients (tritonclient), Prometheus, reload/batching/bad input
#   7b. deploy                              scripts/test_deploy.sh: deploy/ checked offline (kubectl kustomize,
#                                           kubernetes-validate, check-jsonschema, promtool test rules)
#   7c. cluster                             pytest tests/cluster: sim-backend nodes (build-asan), each in a network
#                                           namespace of its own on a test-made bridge (as root; else, or with
#                                           SAMPAN_CLUSTER_NETNS=0, each on its own 127.0.0.x) behind
#                                           a real haproxy with Prometheus, the rehearsal scenarios of issue #22
#                                           at their CI length (SAMPAN_CLUSTER_SECONDS sets the slow tier's),
#                                           SLO autoscaling on a time-compressed trace (test_autoscale.py; the
#                                           slow tier runs it at full length) and the 3-minute soak
#                                           (test_soak.py; scripts/soak.sh runs the hour): ~10.5 min on 2 cores
#   8. cpu backend                          conformance + real models on --backend cpu (build-asan), again
#                                           at each instruction set level below the CPU's (SAMPAN_CPU_ISA)
#   8b. python package                     pip wheel from build-asan (no second compile), installed into .venv,
#                                           pytest tests/python against it
#   9. gpu                                  CUDA backend tests; on a machine without a GPU they report
#                                           that they skipped (the GPU machine runs them: bench/gpu_peers/check_on_gpu.sh)
# Set-up and build failures stop the run; the test stages all run and the script fails
# if any of them failed. A timing summary is printed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."

MIN_CONFORMANCE_PASSED="${MIN_CONFORMANCE_PASSED:-1566}"
MIN_NEWEST_CONFORMANCE_PASSED="${MIN_NEWEST_CONFORMANCE_PASSED:-1850}"
export JOBS="${JOBS:-$(nproc)}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
PY=.venv/bin/python

names=(); times=(); results=(); failed=0
T0=$SECONDS
summary() {
  echo
  echo "== scripts/test.sh summary"
  for i in "${!names[@]}"; do printf '  %-28s %6ss  %s\n' "${names[$i]}" "${times[$i]}" "${results[$i]}"; done
  printf '  %-28s %6ss  %s\n' "total" "$((SECONDS - T0))" "$([ $failed = 0 ] && echo PASS || echo FAIL)"
}
# stage NAME fatal|continue CMD...
stage() {
  local name="$1" mode="$2"; shift 2
  echo; echo "== $name"
  local t=$SECONDS rc=0
  "$@" || rc=$?
  names+=("$name"); times+=("$((SECONDS - t))")
  if [ $rc = 0 ]; then results+=("ok"); else results+=("FAILED (exit $rc)"); failed=1; fi
  if [ $rc != 0 ] && [ "$mode" = fatal ]; then summary; exit $rc; fi
  return 0
}

# The GoogleTest unit tests run as 2 x JOBS shards of one process each (GTEST_SHARD_INDEX), the
# fuzz seed replays through ctest. `ctest --test-dir build-asan` (one process a test, as
# gtest_discover_tests registers them) gives the same verdicts, but every ASan process takes
# ~0.6 s to start: 950 of them were 300 s of CI against ~20 s for the shards.
run_ctest() {
  local bin=build-asan/tests/sampan_tests shards=$((2 * JOBS)) rc=0 i pids=()
  ctest --test-dir build-asan -LE unit --output-on-failure -j "$JOBS" --timeout 600 || rc=1
  mkdir -p build-asan/unit-shards
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout 1200 "$bin" --gtest_brief=1 \
      >"build-asan/unit-shards/shard-$i.log" 2>&1 &
    pids+=($!)
  done
  local ran=0 passed=0 skipped=0
  for ((i = 0; i < shards; i++)); do
    local log="build-asan/unit-shards/shard-$i.log" src=0
    wait "${pids[$i]}" || src=$?
    local r p k
    r="$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran.*/\1/p' "$log" | tail -n 1)"
    p="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -n 1)"
    k="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?[.,].*/\1/p' "$log" | tail -n 1)"
    ran=$((ran + ${r:-0})) passed=$((passed + ${p:-0})) skipped=$((skipped + ${k:-0}))
    if [ "$src" != 0 ]; then
      rc=1
      echo "unit tests: shard $i of $shards failed (exit $src; log: $log):"
      if grep -q '^\[  FAILED  \]' "$log"; then grep '^\[  FAILED  \]' "$log"; grep -B 40 -m 1 '^\[  FAILED  \]' "$log" | head -n 60
      else  # a crash or a timeout: brief logs name no running test, so the shard runs again in full
        GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout 1200 "$bin" >"$log.full" 2>&1
        tail -n 40 "$log.full"
      fi
    fi
  done
  local total; total="$("$bin" --gtest_list_tests | grep -c '^  ')"
  echo "unit tests: $ran of $total ran in $shards shards: $passed passed, $skipped skipped (logs: build-asan/unit-shards/)"
  if [ "$ran" != "$total" ]; then echo "unit tests: $((total - ran)) never ran"; rc=1; fi
  return $rc
}

run_cli_tests() {
  if [ ! -d tests/cli ]; then echo "tests/cli not present: skipped"; return 0; fi
  SAMPAN_BIN="$PWD/build-asan/sampan" "$PY" -m pytest -q tests/cli
}

# check_conformance SUITE LOG JSON MIN_PASSED: build-asan/sampan conformance (reference backend) on
# SUITE; prints the failures, the skip reasons and the summary; fails on any failure or on fewer
# than MIN_PASSED passes.
check_conformance() {
  local suite="$1" log="$2" json="$3" min="$4"
  build-asan/sampan conformance --suite "$suite" --json "$json" >"$log" 2>&1
  local rc=$?
  grep -E "^(FAIL|ERROR)" "$log" | head -50
  grep "^skipped because" "$log" | cut -c1-600
  local last; last="$(tail -n 1 "$log")"
  echo "conformance: $last  (log: $log, per case: $json)"
  if [[ ! "$last" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed,\ ([0-9]+)\ skipped ]]; then
    echo "conformance: could not parse the summary line (exit $rc)"; tail -n 20 "$log"; return 1
  fi
  local passed=${BASH_REMATCH[1]} fails=${BASH_REMATCH[2]}
  if [ "$fails" != 0 ]; then echo "conformance: $fails failures (need 0)"; return 1; fi
  if [ "$passed" -lt "$min" ]; then echo "conformance: only $passed passed (need at least $min)"; return 1; fi
  return $rc
}

run_conformance() {
  "$PY" scripts/gen_conformance.py || return 1
  check_conformance build/conformance/node build/conformance/conformance.log build/conformance/results.json \
    "$MIN_CONFORMANCE_PASSED"
}

# The newest onnx release's suite, generated once from build/onnx-newest/venv (scripts/setup.sh)
# into build/onnx-newest/node; regenerated only when that onnx version changes.
run_conformance_newest() {
  local onnx_version; onnx_version="$(sed -n 's/^onnx==//p' scripts/requirements-onnx-newest.txt)"
  build/onnx-newest/venv/bin/python scripts/gen_conformance.py --out build/onnx-newest/node \
    --expect-onnx "$onnx_version" || return 1
  check_conformance build/onnx-newest/node build/onnx-newest/conformance.log build/onnx-newest/results.json \
    "$MIN_NEWEST_CONFORMANCE_PASSED"
}

# The real-model tests run on JOBS pytest-xdist workers, a test file to a worker (--dist
# loadfile: a file's module-scoped plans are built once); the sampan processes they start are
# mostly single-threaded, so the two cores overlap them.
XDIST=(-n "$JOBS" --dist loadfile)

run_models() {
  bash tests/models/export_all.sh build/models || return 1
  SAMPAN_BIN="$PWD/build-asan/sampan" SAMPAN_MODELS="$PWD/build/models" "$PY" -m pytest -q -rfEs --durations=25 \
    "${XDIST[@]}" tests/models
}

run_server_tests() {
  if [ ! -d tests/server ] || ! ls tests/server/test_*.py >/dev/null 2>&1; then echo "no server tests"; return 0; fi
  SAMPAN_BIN="$PWD/build-asan/sampan" SAMPAN_MODELS="$PWD/build/models" "$PY" -m pytest -q -rfEs --durations=10 tests/server
}

run_cluster_tests() {
  if [ ! -d tests/cluster ]; then echo "tests/cluster not present: skipped"; return 0; fi
  SAMPAN_BIN="$PWD/build-asan/sampan" "$PY" -m pytest -q -rfEsx --durations=10 -p no:cacheprovider tests/cluster
}

run_cpu_backend() {
  local log=build/conformance/conformance-cpu.log rc=0
  build-asan/sampan conformance --suite build/conformance/node --backend cpu \
    --json build/conformance/results-cpu.json >"$log" 2>&1 || rc=$?
  grep -E "^(FAIL|ERROR)" "$log" | head -50
  echo "conformance (cpu): $(tail -n 1 "$log")  (log: $log)"
  local last; last="$(tail -n 1 "$log")"
  if [[ ! "$last" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed ]] || [ "${BASH_REMATCH[2]}" != 0 ]; then rc=1; fi
  # The newest onnx suite on cpu: the reference backend's pass count, 0 failures (ops without a
  # CPU kernel run on the reference kernels).
  log=build/onnx-newest/conformance-cpu.log
  build-asan/sampan conformance --suite build/onnx-newest/node --backend cpu >"$log" 2>&1 || rc=1
  grep -E "^(FAIL|ERROR)" "$log" | head -50
  last="$(tail -n 1 "$log")"
  echo "newest onnx suite (cpu): $last  (log: $log)"
  if [[ ! "$last" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed ]] || [ "${BASH_REMATCH[2]}" != 0 ] ||
     [ "${BASH_REMATCH[1]}" -lt "$MIN_NEWEST_CONFORMANCE_PASSED" ]; then rc=1; fi
  # test_int8.py names its backends itself (cpu and reference) and ran in the real-models stage.
  SAMPAN_BACKEND=cpu SAMPAN_BIN="$PWD/build-asan/sampan" SAMPAN_MODELS="$PWD/build/models" \
    "$PY" -m pytest -q -rfEs "${XDIST[@]}" tests/models --ignore=tests/models/test_int8.py || rc=1
  run_cpu_isa_levels || rc=1
  return $rc
}

# Every instruction set level below the CPU's own (`sampan info` lists them; SAMPAN_CPU_ISA caps our
# kernels and oneDNN's): the pinned conformance suite at each, and the real models on cpu at the
# levels whose FP32 code differs from the unset run's: baseline and avx2 (our kernels' compilations
# and oneDNN's FP32 ISA). avx512 is that of the unset run whenever it is below the CPU's own level
# (avx512_vnni, avx512_bf16 and AMX change only oneDNN's int8/bf16 kernels, which the FP32 real
# models do not reach), so those levels run the conformance suite only. test_int8.py is left out
# (its calibration builds take minutes under ASan; it runs at the CPU's own level in the
# real-models stage). ~70 s a level with the models on 2 cores.
run_cpu_isa_levels() {
  local levels rc=0 top t0
  levels="$(build-asan/sampan info | sed -n 's/^ *instruction set levels: //p' | tr -d ',')"
  if [ -z "$levels" ]; then echo "cpu isa levels: sampan info gave none"; return 1; fi
  top="${levels##* }"
  echo "cpu isa levels: $levels (the unset run above used $top)"
  for level in $levels; do
    [ "$level" = "$top" ] && continue
    t0=$SECONDS
    local log="build/conformance/conformance-cpu-$level.log" last
    SAMPAN_CPU_ISA=$level build-asan/sampan conformance --suite build/conformance/node --backend cpu >"$log" 2>&1 || rc=1
    last="$(tail -n 1 "$log")"
    if [[ ! "$last" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed ]] || [ "${BASH_REMATCH[2]}" != 0 ]; then
      grep -E "^(FAIL|ERROR)" "$log" | head -20; rc=1
    fi
    if [ "$level" != baseline ] && [ "$level" != avx2 ]; then
      echo "SAMPAN_CPU_ISA=$level: conformance (cpu) $last ($((SECONDS - t0)) s)"
      continue
    fi
    SAMPAN_CPU_ISA=$level SAMPAN_BACKEND=cpu SAMPAN_BIN="$PWD/build-asan/sampan" SAMPAN_MODELS="$PWD/build/models" \
      "$PY" -m pytest -q -p no:cacheprovider "${XDIST[@]}" tests/models --ignore=tests/models/test_int8.py \
      > "build/conformance/models-cpu-$level.log" 2>&1 || {
        rc=1; tail -n 30 "build/conformance/models-cpu-$level.log"; }
    echo "SAMPAN_CPU_ISA=$level: conformance (cpu) $last; real models: $(tail -n 1 "build/conformance/models-cpu-$level.log") ($((SECONDS - t0)) s)"
  done
  return $rc
}

# The Python package: a wheel from the build-asan tree (scikit-build-core reuses it, so nothing
# compiles again), installed into .venv, and tests/python run against the installed copy. The
# extension is ASan-instrumented, so the interpreter preloads the ASan runtime and libstdc++
# (ASan must find __cxa_throw when it starts; the C interpreter would load libstdc++ only later)
# with leak checks off (CPython does not free everything at exit).
run_python_tests() {
  rm -rf build-asan/python-dist
  "$PY" -m pip wheel . -q --no-build-isolation --no-deps -w build-asan/python-dist -C build-dir=build-asan || return 1
  "$PY" -m pip install -q --force-reinstall --no-deps build-asan/python-dist/sampan-*.whl || return 1
  echo "installed: $(ls build-asan/python-dist)"
  LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libstdc++.so)" \
    ASAN_OPTIONS="detect_leaks=0:abort_on_error=0" SAMPAN_SANITIZED=1 \
    SAMPAN_BIN="$PWD/build-asan/sampan" SAMPAN_MODELS="$PWD/build/models" \
    "$PY" -m pytest -q -rfEs --durations=5 -p no:cacheprovider tests/python
}

run_gpu_tests() {
  # Without a GPU every CUDA test skips and says so; with one they run.
  local bin=build-asan/tests/sampan_tests
  "$bin" --gtest_filter='Cuda*' --gtest_brief=1 2>&1 | tail -n 5
  local rc=${PIPESTATUS[0]}
  if ! nvidia-smi -L >/dev/null 2>&1; then echo "gpu: no NVIDIA GPU on this machine: CUDA tests skipped (on a GPU machine: bash bench/gpu_peers/check_on_gpu.sh)"; fi
  return "$rc"
}

stage "setup" fatal bash scripts/setup.sh
stage "format" continue bash scripts/format.sh --check
stage "build (asan)" fatal bash scripts/build.sh asan
stage "unit tests (asan)" continue run_ctest
stage "cli tests (asan)" continue run_cli_tests
stage "onnx conformance (asan)" continue run_conformance
stage "newest onnx suite (asan)" continue run_conformance_newest
stage "real models (asan)" continue run_models
stage "server (asan)" continue run_server_tests
stage "deploy" continue env SAMPAN_BIN="$PWD/build-asan/sampan" bash scripts/test_deploy.sh
stage "cluster (asan)" continue run_cluster_tests
stage "cpu backend (asan)" continue run_cpu_backend
stage "python package (asan)" continue run_python_tests
stage "gpu (skips without GPU)" continue run_gpu_tests
summary
exit $failed
