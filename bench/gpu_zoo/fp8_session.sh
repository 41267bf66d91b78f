#!/usr/bin/env bash
# One device call for FP8 work (issue #16; carry build-cuda/carry, made with
# -DSAMPAN_BUILD_TESTS=ON -DSAMPAN_TEST_SUBDIR=backends/cuda and bench/gpu_peers/bundle.sh):
#   1. tests: the CUDA unit tests (TEST_FILTER, default all of tests/backends/cuda),
#   2. zoo:   export MODELS and run their FP16 zoo rows against PyTorch (zoo.sh; writes the PyTorch
#             FP32 reference each model's accuracy is measured against); or `export`: export only
#             (FP8 accuracy is then measured against Sampan's FP16 output),
#   3. fp8:   fp8_compare.py on MODELS: FP16 and --fp8 plans built, timed and compared in one run,
#   4. conformance: the Q/DQ cases of both ONNX node suites on --backend cuda (CONF_FILTER).
# Each step is time-boxed; logs land in $OUT/session/ and are packed into $OUT/session.tgz after
# each step. Usage: STEPS="tests zoo fp8 conformance" MODELS="bert_base_b128 bert_base_b32 minilm_l6" \
#   bash bench/gpu_zoo/fp8_session.sh
set -u
source "$(dirname "$0")/session_lib.sh"
MODELS=${MODELS:-bert_base_b128 bert_base_b32 minilm_l6}
STEPS=${STEPS:-tests zoo fp8 conformance}
if has tests; then
  stamp tests
  timeout -k 5 ${TEST_TIMEOUT:-200} $B/sampan_tests --gtest_filter="${TEST_FILTER:-*}" > $OUT/cuda_tests.txt 2>&1
  echo "rc=$?"; grep -E "^\[  FAILED|PASSED|tests ran|Failure|error" $OUT/cuda_tests.txt | head -30
fi
if has zoo; then
  stamp zoo
  MODELS="$MODELS" BUDGET_S=${BUDGET_S:-200} OUT=$OUT bash bench/gpu_zoo/zoo.sh > $OUT/zoo.txt 2>&1
  echo "rc=$?"; tail -${ZOO_TAIL:-12} $OUT/zoo.txt
fi
if has export; then  # export only (no PyTorch timing or reference): fp8_compare then measures FP8 against FP16
  stamp export
  timeout -k 5 ${EXPORT_TIMEOUT:-120} python3 bench/gpu_zoo/export_zoo.py --out /tmp/zoo/models --models "$MODELS" \
    --ref none --threads $(nproc) > $OUT/export.txt 2>&1
  echo "rc=$?"; tail -3 $OUT/export.txt
fi
if has fp8; then
  stamp fp8
  timeout -k 5 ${FP8_TIMEOUT:-240} python3 bench/gpu_zoo/fp8_compare.py --sampan $B/sampan --models-dir /tmp/zoo/models \
    --models "$MODELS" --out-dir $OUT ${FP8_ARGS:-} > $OUT/fp8.txt 2>&1
  echo "rc=$?"; tail -12 $OUT/fp8.txt
fi
if has conformance; then
  for suite in node node_newest; do
    [ -f build-cuda/carry/$suite.tar.xz ] || continue
    stamp "conformance $suite"
    mkdir -p /tmp/$suite && tar -C /tmp/$suite -xJf build-cuda/carry/$suite.tar.xz
    timeout -k 5 ${CONF_TIMEOUT:-120} $B/sampan conformance --suite /tmp/$suite/node --backend cuda \
      --filter "${CONF_FILTER:-quantize|QuantizeLinear}" > $OUT/conformance_$suite.txt 2>&1
    echo "rc=$?"; grep -E "FAIL" $OUT/conformance_$suite.txt | head -10; tail -4 $OUT/conformance_$suite.txt
  done
fi
echo "== done ($(date +%T))"
