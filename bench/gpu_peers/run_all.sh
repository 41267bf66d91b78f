#!/usr/bin/env bash
# One device session: CUDA tests + conformance (check_on_gpu.sh), the PyTorch
# comparison (gpu_peers.py), per-step device profiles of three plans
# (SAMPAN_CUDA_PROFILE=1), and the real-model accuracy check. Logs go to $OUT.
# Usage (GPU machine, carrying build-cuda/carry): bash bench/gpu_peers/run_all.sh
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
ACCURACY=0 CONF_SHOW=25 TEST_TIMEOUT=${TEST_TIMEOUT:-120} CONF_TIMEOUT=${CONF_TIMEOUT:-150} \
  bash bench/gpu_peers/check_on_gpu.sh 2>&1 | tail -12
B=/tmp/sampan_bundle
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
echo "== gpu_peers"
timeout ${PEERS_TIMEOUT:-300} python3 bench/gpu_peers/gpu_peers.py --sampan $B/sampan --out /tmp/peers \
  --duration ${DURATION:-1.5} ${PEERS_ARGS:-} > "$OUT/peers.log" 2>&1
cp /tmp/peers/gpu_peers.log "$OUT/build_bench.log" 2>/dev/null
cp /tmp/peers/gpu_peers.json "$OUT/" 2>/dev/null
echo "== step profiles"
for p in ${PROFILE_PLANS:-bert_b32 resnet50_b1 resnet50_b256}; do
  [ -f /tmp/peers/$p.plan ] || continue
  echo "-- $p"
  SAMPAN_CUDA_PROFILE=1 timeout 60 $B/sampan bench --loadEngine /tmp/peers/$p.plan --noDataTransfers \
    --duration 0.5 2>&1 | grep -A40 "CUDA step profile"
done > "$OUT/profiles.log" 2>&1
if [ "${ACCURACY:-1}" = 1 ]; then
  echo "== accuracy"
  timeout ${ACC_TIMEOUT:-150} python3 bench/gpu_peers/accuracy.py --sampan $B/sampan --out /tmp/acc > "$OUT/accuracy.log" 2>&1
  grep -E "rel L2|FAILED|Error" "$OUT/accuracy.log"
fi
echo "== table"
grep -A30 "^model " "$OUT/peers.log"
