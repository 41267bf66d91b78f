#!/usr/bin/env bash
# One device call for the Python API on the GPU (issue #19), with the CUDA unit tests and zoo rows
# (carry build-cuda/carry: bundle.tar.xz from bench/gpu_peers/bundle.sh, pybundle.tar.xz from
# bench/gpu_peers/python_bundle.sh):
#   1. ext:    compiles python/src/*.cpp for the machine's python against the carried
#              libsampan_core.so and assembles the package in /tmp/sampan_py/sampan,
#   2. pytest: tests/python/test_device_memory.py (torch CUDA tensors in and out, caller device
#              buffers, streams, a profiler trace showing no host copies) and test_api.py's I/O test
#              on --backend cuda,
#   3. tests:  the CUDA unit tests (TEST_FILTER, default all of tests/backends/cuda),
#   4. zoo:    bench/gpu_zoo/zoo.sh for MODELS (default the BERT-base rows).
# Each step is time-boxed; logs land in $OUT/session/, packed into $OUT/session.tgz after each step.
# Usage: STEPS="ext pytest tests zoo" bash bench/gpu_peers/python_session.sh
set -u
source "$(dirname "$0")/../gpu_zoo/session_lib.sh"
STEPS=${STEPS:-ext pytest tests zoo}
PY=/tmp/sampan_py
if has ext; then
  stamp "python extension"
  mkdir -p $PY/sampan $PY/obj && tar -C $PY -xJf build-cuda/carry/pybundle.tar.xz || exit 1
  inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  cp python/sampan/*.py python/sampan/*.pyi python/sampan/py.typed $PY/sampan/
  {
    for f in python/src/*.cpp; do
      eval g++ -O2 -fPIC -fvisibility=hidden $(cat $PY/flags.txt) -Isrc -isystem $PY/pybind11/include -isystem $inc \
        -isystem /usr/local/cuda/include -c $f -o $PY/obj/$(basename $f .cpp).o &
    done
    wait
    g++ -shared -fopenmp -pthread $PY/obj/*.o -L$PY/lib -lsampan_core -Wl,-rpath,$PY/lib -o $PY/sampan/_sampan$suffix
    PYTHONPATH=$PY python3 -c 'import sampan; print("sampan", sampan.__version__, sampan.available_backends())'
  } > $OUT/python_ext.txt 2>&1
  echo "rc=$?"; tail -5 $OUT/python_ext.txt
fi
if has pytest; then
  stamp pytest
  PYTHONPATH=$PY SAMPAN_BACKEND=cuda SAMPAN_BIN=$B/sampan timeout -k 5 ${PYTEST_TIMEOUT:-240} \
    python3 -m pytest -p no:cacheprovider -rs -v -s tests/python/test_device_memory.py \
    "tests/python/test_api.py::test_inputs_outputs_and_async" \
    "tests/python/test_examples.py::test_zero_copy_torch" "tests/python/test_examples.py::test_execute_with_bindings" \
    > $OUT/pytest.txt 2>&1
  echo "rc=$?"; grep -E "PASSED|FAILED|SKIPPED|ERROR|copies:|passed|failed" $OUT/pytest.txt | tail -25
fi
if has tests; then
  stamp tests
  timeout -k 5 ${TEST_TIMEOUT:-300} $B/sampan_tests --gtest_filter="${TEST_FILTER:-*}" > $OUT/cuda_tests.txt 2>&1
  echo "rc=$?"; grep -E "^\[  FAILED|PASSED|SKIPPED \]|tests ran|Failure" $OUT/cuda_tests.txt | head -30
  grep -E "^\[       OK \] (Cuda)?DeviceIo|^\[  FAILED  \] (Cuda)?DeviceIo" $OUT/cuda_tests.txt
fi
if has zoo; then
  stamp zoo
  MODELS="${MODELS:-bert_base_b128 bert_base_b32}" BUDGET_S=${BUDGET_S:-200} bash bench/gpu_zoo/zoo.sh > $OUT/zoo.txt 2>&1
  echo "rc=$?"; tail -${ZOO_TAIL:-12} $OUT/zoo.txt
fi
echo "== done ($(date +%T))"
