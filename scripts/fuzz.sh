#!/usr/bin/env bash
# The slow tier's fuzz campaigns: every target of tests/fuzz built with clang's
# libFuzzer (coverage-guided) under AddressSanitizer + UndefinedBehaviorSanitizer
# in build-fuzz/, then run for FUZZ_SECONDS each (default 300) on a working copy
# of its seed corpus. Not part of scripts/test.sh: CI's ctest replays the seeds
# and a few thousand seeded mutations with tests/fuzz/driver.cpp instead.
#
#   bash scripts/fuzz.sh                       every target, 300 s each
#   FUZZ_SECONDS=60 bash scripts/fuzz.sh fuzz_onnx fuzz_plan
#
# Then the live server: HTTP_FUZZ_REQUESTS (default 200,000) mutated raw HTTP
# requests to `sampan serve` (tests/server/test_http_fuzz.py, seed HTTP_FUZZ_SEED).
#
# A finding (crash, sanitizer report, leak, timeout, out-of-memory) is kept as
# build-fuzz/findings/<target>/crash-* (or timeout-*, oom-*, leak-*) and the script
# exits 1 naming it. Replay one with the target binary:
#   build-fuzz/tests/fuzz/fuzz_onnx build-fuzz/findings/fuzz_onnx/crash-...
# After the fix, copy it into tests/fuzz/corpus/<target>/ as regress-<what>, so
# every CI run replays it. New coverage the campaign found stays in
# build-fuzz/corpus/<target>/ (merge what is worth keeping with -merge=1).
set -uo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS="${FUZZ_SECONDS:-300}"
JOBS="${JOBS:-$(nproc)}"
ALL=(fuzz_onnx fuzz_plan fuzz_model_config fuzz_http_infer fuzz_grpc_infer fuzz_npy fuzz_ir_text)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")

bash scripts/setup.sh || exit 1
need=()
for p in clang libclang-rt-14-dev libomp-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "fuzz: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}" || exit 1
fi

# Coverage instrumentation and ASan + UBSan on every library the targets link; CUDA
# is left out (no GPU code runs in these targets).
mkdir -p build-fuzz
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -fsanitize-recover=pointer-overflow" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DSAMPAN_SANITIZE= \
  -DSAMPAN_LIBFUZZER=ON -DSAMPAN_CUDA=OFF -DSAMPAN_BUILD_TESTS=ON >build-fuzz/configure.log 2>&1 ||
  { tail -30 build-fuzz/configure.log; exit 1; }
ninja -C build-fuzz -j "$JOBS" "${targets[@]}" || exit 1

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
# pointer-overflow is recoverable in this build only so that tests/fuzz/ubsan.supp can
# suppress one third-party report; halt_on_error keeps every other report fatal.
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/fuzz/ubsan.supp}"
failed=()
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t findings=build-fuzz/findings/$t
  mkdir -p "$corpus" "$findings"
  cp -n tests/fuzz/corpus/$t/* "$corpus"/ 2>/dev/null
  dict=tests/fuzz/${t#fuzz_}.dict
  args=(-max_total_time="$FUZZ_SECONDS" -timeout=20 -rss_limit_mb=4096 -malloc_limit_mb=4096 -max_len=1048576
        -artifact_prefix="$findings/" -print_final_stats=1)
  [ -f "$dict" ] && args+=(-dict="$dict")
  echo "== $t: ${FUZZ_SECONDS}s"
  build-fuzz/tests/fuzz/$t "${args[@]}" "$corpus" >"build-fuzz/$t.log" 2>&1
  rc=$?
  grep -E '^(stat::|Done|#[0-9]+ *DONE)' "build-fuzz/$t.log" | tail -4
  if [ $rc != 0 ]; then
    failed+=("$t")
    grep -E 'ERROR|SUMMARY|fuzz finding|Test unit written' "build-fuzz/$t.log" | head -8
  fi
done
# The live server: mutated raw HTTP requests (tests/server/test_http_fuzz.py) against the
# sanitizer build the tests use (build-asan, else build).
SAMPAN_BIN="${SAMPAN_BIN:-$PWD/build-asan/sampan}"
[ -x "$SAMPAN_BIN" ] || SAMPAN_BIN="$PWD/build/sampan"
if [ -x "$SAMPAN_BIN" ]; then
  echo "== live HTTP: ${HTTP_FUZZ_REQUESTS:-200000} requests to $SAMPAN_BIN serve"
  SAMPAN_BIN="$SAMPAN_BIN" SAMPAN_HTTP_FUZZ_REQUESTS="${HTTP_FUZZ_REQUESTS:-200000}" \
    SAMPAN_HTTP_FUZZ_SEED="${HTTP_FUZZ_SEED:-$RANDOM}" .venv/bin/python -m pytest -q -s -rf \
    tests/server/test_http_fuzz.py || failed+=("live-http")
else
  echo "== live HTTP: skipped (no build-asan/sampan or build/sampan: bash scripts/build.sh asan)"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (logs build-fuzz/<target>.log, inputs build-fuzz/findings/<target>/)"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${FUZZ_SECONDS}s each, no findings"
