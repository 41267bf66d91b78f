#!/usr/bin/env bash
# On the GPU machine: unpack a carried build (build-cuda/carry/bundle.tar.xz:
# sampan, sampan_tests and the non-CUDA shared libraries they need), then run the
# CUDA kernel tests, the server's CUDA shared memory (a device allocation of another
# process registered by its IPC handle, inferences on --backend cpu and cuda through it),
# the ONNX node conformance suite on --backend cuda, and the real-model accuracy
# checks. Logs go to $OUT (or ./gpu_out).
set -u
OUT=${OUT:-gpu_out}
B=/tmp/sampan_bundle
mkdir -p $B $OUT && tar -C $B -xJf build-cuda/carry/bundle.tar.xz || exit 1
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
echo "== C++ tests (CudaBackend*)"
timeout ${TEST_TIMEOUT:-120} $B/sampan_tests --gtest_filter='CudaBackend*' 2>&1 | tail -25 | tee $OUT/tests.log
echo "== CUDA shared memory (server)"
timeout ${TEST_TIMEOUT:-120} $B/sampan_tests --gtest_filter='CudaSharedMemory*' 2>&1 | tail -8 | tee $OUT/cuda_shm.log
timeout ${SHM_TIMEOUT:-600} python3 tests/server/test_cuda_shared_memory_gpu.py --sampan $B/sampan 2>&1 | tee -a $OUT/cuda_shm.log
# The ONNX node suite travels as build-cuda/carry/node.tar.xz when the machine's onnx lacks it.
SUITE=$(python3 -c 'import onnx,os;print(os.path.join(os.path.dirname(onnx.__file__),"backend/test/data/node"))')
if [ ! -d "$SUITE" ] && [ -f build-cuda/carry/node.tar.xz ]; then
  mkdir -p /tmp/node && tar -C /tmp/node -xJf build-cuda/carry/node.tar.xz && SUITE=/tmp/node/node
fi
echo "== conformance --backend cuda ($SUITE)"
timeout ${CONF_TIMEOUT:-200} $B/sampan conformance --suite $SUITE --backend cuda --json $OUT/conformance.json > $OUT/conformance.log 2>&1
echo "rc=$?"; grep -E "FAIL" $OUT/conformance.log | head -${CONF_SHOW:-40}; tail -4 $OUT/conformance.log
if [ "${ACCURACY:-1}" = 1 ]; then
  echo "== real models vs onnxruntime"
  timeout ${ACC_TIMEOUT:-200} python3 bench/gpu_peers/accuracy.py --sampan $B/sampan --out /tmp/acc > $OUT/accuracy.log 2>&1; grep -E "rel L2|FAILED" $OUT/accuracy.log
fi
