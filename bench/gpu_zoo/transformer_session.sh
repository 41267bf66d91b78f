#!/usr/bin/env bash
# One device call for transformer work (carry build-cuda/carry, made with
# -DSAMPAN_BUILD_TESTS=ON -DSAMPAN_TEST_SUBDIR=backends/cuda and bench/gpu_peers/bundle.sh):
#   1. the CUDA unit tests (every test under tests/backends/cuda),
#   2. ln_probe (LayerNorm kernels against the bandwidth ceiling, cuBLASLt epilogue costs),
#   3. the zoo rows in MODELS with per-step profiles, and PyTorch's kernel table for the first,
#   4. the ONNX node suites carried as build-cuda/carry/node{,_newest}.tar.xz on --backend cuda,
#   5. gemm_probe (BERT's products one at a time, Sampan against torch.nn.functional.linear).
# Each step is time-boxed; logs land in $OUT/session/ as they finish and are packed into
# $OUT/session.tgz after each step (the device tool returns a handful of files per call).
# Usage: MODELS="bert_base_b128 bert_base_b32" bash bench/gpu_zoo/transformer_session.sh
set -u
source "$(dirname "$0")/session_lib.sh"
MODELS=${MODELS:-bert_base_b128}
STEPS=${STEPS:-tests ln zoo torch conformance gemm}
if has tests; then
  stamp tests
  timeout -k 5 ${TEST_TIMEOUT:-200} $B/sampan_tests --gtest_filter="${TEST_FILTER:-*}" > $OUT/cuda_tests.txt 2>&1
  echo "rc=$?"; grep -E "FAILED|PASSED|tests ran" $OUT/cuda_tests.txt | head -20
fi
if has ln; then
  stamp ln_probe
  (nvcc -arch=sm_90 -O3 -std=c++17 -Isrc bench/gpu_zoo/ln_probe.cu -lcublasLt -o /tmp/ln_probe &&
    timeout -k 5 120 /tmp/ln_probe) > $OUT/ln_probe.txt 2>&1
  echo "rc=$?"; cat $OUT/ln_probe.txt
fi
if has zoo; then
  stamp zoo
  ZOO_PROFILE=1 MODELS="$MODELS" BUDGET_S=${BUDGET_S:-240} bash bench/gpu_zoo/zoo.sh > $OUT/zoo.txt 2>&1
  echo "rc=$?"; tail -${ZOO_TAIL:-20} $OUT/zoo.txt
  cp /tmp/zoo/logs/*.profile.txt $OUT/ 2>/dev/null
  for m in $MODELS; do head -14 $OUT/$m.profile.txt 2>/dev/null; done
fi
if has torch; then
  m=${MODELS%% *}
  stamp "torch kernels $m"
  timeout -k 5 ${TORCH_TIMEOUT:-120} python3 bench/gpu_zoo/torch_profile.py --models-dir /tmp/zoo/models --model $m \
    > "$OUT/torch_kernels_$m.txt" 2>&1
  echo "rc=$?"; head -40 "$OUT/torch_kernels_$m.txt"
fi
if has conformance; then
  for suite in node node_newest; do
    [ -f build-cuda/carry/$suite.tar.xz ] || continue
    stamp "conformance $suite"
    mkdir -p /tmp/$suite && tar -C /tmp/$suite -xJf build-cuda/carry/$suite.tar.xz
    timeout -k 5 ${CONF_TIMEOUT:-120} $B/sampan conformance --suite /tmp/$suite/node --backend cuda \
      > $OUT/conformance_$suite.txt 2>&1
    echo "rc=$?"; grep FAIL $OUT/conformance_$suite.txt | head -10; tail -3 $OUT/conformance_$suite.txt
  done
fi
if has gemm; then
  stamp gemm_probe
  (cd bench/gpu_peers && timeout -k 5 ${GEMM_TIMEOUT:-150} python3 gemm_probe.py --sampan $B/sampan --out /tmp/gp) \
    > $OUT/gemm_probe.txt 2>&1
  echo "rc=$?"; cat $OUT/gemm_probe.txt
fi
