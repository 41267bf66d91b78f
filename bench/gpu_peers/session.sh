#!/usr/bin/env bash
# One short device session that fits a tight budget: CUDA kernel tests, the served
# ResNet-50 run (bench/serve_gpu), the PyTorch comparison at the key batches,
# conformance on --backend cuda, and the GEMM probe — most important first (STEPS picks), each
# with its own time limit, results tarred into $OUT/o.tgz after every step (so a run
# cut short still returns what it did). Carry build-cuda/carry.
set -u
OUT=${OUT:-gpu_out}
B=/tmp/sampan_bundle
O=/tmp/o
mkdir -p $B $O "$OUT"
tar -C $B -xJf build-cuda/carry/bundle.tar.xz || exit 1
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
save() { tar -C /tmp -czf "$OUT/o.tgz" o; }
STEPS=${STEPS:-tests serve peers conformance gemm-probe}
step() { echo "== $1 ($(date +%T))"; }
want() { case " $STEPS " in *" $1 "*) return 0;; esac; echo "== $1 skipped (STEPS)"; return 1; }

if want tests; then
step tests
timeout ${TEST_TIMEOUT:-90} $B/sampan_tests --gtest_filter="${TEST_FILTER:-Cuda*}" > $O/tests.log 2>&1
echo "rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $O/tests.log | head -20; save
fi

if want serve; then
step serve
OUT=$O INSTANCES="${INSTANCES:-3}" LEVELS=${LEVELS:-96:480:96} NOBATCH_LEVELS=${NOBATCH_LEVELS:-8:24:8} \
  timeout ${SERVE_TIMEOUT:-220} bash bench/serve_gpu/run.sh > $O/serve_summary.txt 2>&1
pkill -f "sampan serve" 2>/dev/null
grep -E "^(streams|inputs|bucket)|^-- |^Concurrency|  Client|  Server" $O/serve_summary.txt | head -40; save
fi

if want peers; then
step peers
timeout ${PEERS_TIMEOUT:-120} python3 bench/gpu_peers/gpu_peers.py --sampan $B/sampan --out /tmp/peers \
  --batches ${BATCHES:-1,256} --bert-batches ${BERT_BATCHES:-32,128} --models ${MODELS:-resnet50,bert} --duration 1 \
  > $O/peers.log 2>&1
cp /tmp/peers/gpu_peers.json /tmp/peers/gpu_peers.log $O/ 2>/dev/null
grep -A8 "^model " $O/peers.log; save
for p in ${PROFILES:-bert_b32 bert_b128 resnet50_b1 resnet50_b256}; do
  [ -f /tmp/peers/$p.plan ] && SAMPAN_CUDA_PROFILE=1 timeout 20 $B/sampan bench --loadEngine /tmp/peers/$p.plan \
    --noDataTransfers --duration 0.3 2>&1 | grep -A22 "step profile" > $O/profile_$p.txt
done; save
fi

if want conformance; then
step conformance
# The carried suite (CI's copy: scripts/gen_conformance.py's output) when there is one,
# else the device's onnx wheel's.
if [ -f build-cuda/carry/node.tar.xz ]; then
  mkdir -p /tmp/node && tar -C /tmp/node -xJf build-cuda/carry/node.tar.xz && SUITE=/tmp/node/node
else
  SUITE=$(python3 -c 'import onnx,os;print(os.path.join(os.path.dirname(onnx.__file__),"backend/test/data/node"))')
fi
timeout ${CONF_TIMEOUT:-90} $B/sampan conformance --suite $SUITE --backend cuda > $O/conformance.log 2>&1
echo "rc=$?"; grep FAIL $O/conformance.log | head -10; tail -3 $O/conformance.log; save
# The newest onnx release's suite too, when carried (build-cuda/carry/node_newest.tar.xz: a tar of
# CI's build/onnx-newest/node).
if [ -f build-cuda/carry/node_newest.tar.xz ]; then
  mkdir -p /tmp/node_newest && tar -C /tmp/node_newest -xJf build-cuda/carry/node_newest.tar.xz
  timeout ${CONF_TIMEOUT:-90} $B/sampan conformance --suite /tmp/node_newest/node --backend cuda \
    > $O/conformance_newest.log 2>&1
  echo "rc=$?"; grep FAIL $O/conformance_newest.log | head -10; tail -3 $O/conformance_newest.log; save
fi
fi

if want gemm-probe; then
step gemm-probe
(cd bench/gpu_peers && timeout ${PROBE_TIMEOUT:-40} python3 gemm_probe.py --sampan $B/sampan --out /tmp/gp) > $O/gemm_probe.txt 2>&1
cat $O/gemm_probe.txt; save
fi

step done
