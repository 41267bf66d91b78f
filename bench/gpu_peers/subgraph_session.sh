#!/usr/bin/env bash
# One device call for the CUDA subgraph executor (issue #15) and the general CUDA checks
# (carry build-cuda/carry: bundle.tar.xz from bench/gpu_peers/bundle.sh, node.tar.xz and
# node_newest.tar.xz: the pinned and the newest ONNX node suites, packed from build/conformance/node
# and build/onnx-newest/node):
#   1. env:         the machine (GPU, python, compiler, headers), for what later calls can build there,
#   2. tests:       the CUDA unit tests (TEST_FILTER, default all of tests/backends/cuda),
#   3. conformance: both node suites, every case, on --backend cuda,
#   4. cf:          bench/gpu_peers/control_flow_cuda.py (If/Loop/Scan models vs onnxruntime).
# Each step is time-boxed; logs land in $OUT/session/, packed into $OUT/session.tgz after each step.
# Usage: STEPS="env tests conformance cf" bash bench/gpu_peers/subgraph_session.sh
set -u
source "$(dirname "$0")/../gpu_zoo/session_lib.sh"
STEPS=${STEPS:-env tests conformance cf}
if has env; then
  stamp env
  { nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
    python3 -V; python3 -c 'import sysconfig;print("include", sysconfig.get_paths()["include"])'
    ls "$(python3 -c 'import sysconfig;print(sysconfig.get_paths()["include"])')/Python.h" 2>&1
    g++ --version 2>&1 | head -1; cmake --version 2>&1 | head -1; nproc
    python3 -c 'import torch, numpy, onnx, onnxruntime; print("torch", torch.__version__, "numpy", numpy.__version__, "onnx", onnx.__version__, "ort", onnxruntime.__version__)'
    python3 -m pip --version 2>&1; python3 -c 'import pybind11' 2>&1 | tail -1; python3 -c 'import pytest;print("pytest", pytest.__version__)' 2>&1 | tail -1
  } > $OUT/env.txt 2>&1
  cat $OUT/env.txt
fi
if has tests; then
  stamp tests
  timeout -k 5 ${TEST_TIMEOUT:-300} $B/sampan_tests --gtest_filter="${TEST_FILTER:-*}" > $OUT/cuda_tests.txt 2>&1
  echo "rc=$?"; grep -E "^\[  FAILED|PASSED|SKIPPED \]|tests ran|Failure" $OUT/cuda_tests.txt | head -30
  grep -E "^\[       OK \] CudaSubgraph|^\[  FAILED  \] CudaSubgraph" $OUT/cuda_tests.txt
fi
if has conformance; then
  for suite in node node_newest; do
    [ -f build-cuda/carry/$suite.tar.xz ] || continue
    stamp "conformance $suite"
    mkdir -p /tmp/$suite && tar -C /tmp/$suite -xJf build-cuda/carry/$suite.tar.xz
    timeout -k 5 ${CONF_TIMEOUT:-170} $B/sampan conformance --suite /tmp/$suite/node --backend cuda \
      ${CONF_FILTER:+--filter "$CONF_FILTER"} --json $OUT/conformance_$suite.json > $OUT/conformance_$suite.txt 2>&1
    echo "rc=$?"; grep -E "^FAIL" $OUT/conformance_$suite.txt | head -10; tail -1 $OUT/conformance_$suite.txt
  done
fi
if has cf; then
  stamp cf
  timeout -k 5 ${CF_TIMEOUT:-150} python3 bench/gpu_peers/control_flow_cuda.py --sampan $B/sampan --out $OUT/cf > $OUT/cf.txt 2>&1
  echo "rc=$?"; cat $OUT/cf.txt | tail -22
fi
echo "== done ($(date +%T))"
