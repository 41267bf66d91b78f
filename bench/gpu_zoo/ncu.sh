#!/usr/bin/env bash
# Nsight Compute on zoo models, on the GPU machine (carry build-cuda/carry): runs zoo.sh for
# MODELS with the plans kept, then for each plan profiles the kernels whose names match
# KERNELS (a regex, ncu's --kernel-name regex:...), LAUNCHES launches each (after SKIP), with
# the sections below, and PyTorch's kernel table for the same model (torch_profile.py).
# Writes $OUT/ncu_<model>.txt and $OUT/torch_kernels_<model>.txt.
# NCU_EXTRA: more ncu flags (e.g. "--section InstructionStats --section SourceCounters").
# Usage: MODELS="bert_base_b128" KERNELS="Attention|LayerNorm" bash bench/gpu_zoo/ncu.sh
set -u
OUT=${OUT:-gpu_out}
B=/tmp/sampan_bundle
W=${ZOO_WORK:-/tmp/zoo}
KERNELS=${KERNELS:-.}
LAUNCHES=${LAUNCHES:-1}
SKIP=${SKIP:-20}
RUN_ARGS="${RUN_ARGS:-} --keep-plans" BUDGET_S=${BUDGET_S:-240} bash bench/gpu_zoo/zoo.sh
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for m in $MODELS; do
  plan=$W/plans/$m.plan
  [ -f "$plan" ] || { echo "== $m: no plan ($plan)"; continue; }
  echo "== ncu $m ($(date +%T))"
  timeout -k 5 ${NCU_TIMEOUT:-150} $NCU --kernel-name "regex:$KERNELS" --launch-skip $SKIP --launch-count $LAUNCHES \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis ${NCU_EXTRA:-} \
    $B/sampan bench --loadEngine "$plan" --noDataTransfers --iterations 30 --warmUp 0 --duration 0 \
    > "$OUT/ncu_$m.txt" 2>&1
  echo "rc=$?"; grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Block Limit" "$OUT/ncu_$m.txt" | head -60
  echo "== torch kernels $m ($(date +%T))"
  timeout -k 5 ${TORCH_TIMEOUT:-120} python3 bench/gpu_zoo/torch_profile.py --models-dir $W/models --model $m \
    > "$OUT/torch_kernels_$m.txt" 2>&1
  echo "rc=$?"; head -45 "$OUT/torch_kernels_$m.txt"
done
