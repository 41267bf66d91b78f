#!/usr/bin/env bash
# The SLO batcher on the GPU machine (issue #23), one call: unpack the carried build
# (build-cuda/carry/bundle.tar.xz), export ResNet-50 and build the FP16 plan that takes uint8
# NHWC images (as run.sh), then bench/serve_gpu/slo_grid.py over HTTP with inputs in system
# shared memory: capacity (closed loop), the SLO batcher (latency_slo_ms 15 and 5) against a
# grid of hand-tuned settings under Poisson loads at RATES of capacity, and a bursty trace.
# Results ($OUT/slo_grid_cuda.{json,md}) are rewritten after every setting, so a run cut short
# keeps what it did. Knobs: MAXB (128), SLOS ("15 5"), RATES, PREF, DELAYS, INST, WINDOW_MS,
# SLO_INST (the SLO batcher's instances, default 2), GRID_S (time box of the grid, default 480 s).
set -u
T0=$(date +%s)
OUT=${OUT:-gpu_out}
W=/tmp/serve
B=/tmp/sampan_bundle
mkdir -p "$OUT" "$W" "$B"
[ -x $B/sampan ] || tar -C $B -xJf build-cuda/carry/bundle.tar.xz || { echo "carry build-cuda/carry"; exit 1; }
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
MAXB=${MAXB:-128}
MEAN=123.675,116.28,103.53
STD=58.395,57.12,57.375
[ -f $W/resnet50.onnx ] || timeout 180 python3 -c "
import sys; sys.path.insert(0, 'bench/gpu_peers')
from gpu_peers import export_resnet; export_resnet('$W/resnet50.onnx')" || exit 1
echo "== build (FP16, uint8-nhwc input, batch 1..$MAXB) $(( $(date +%s) - T0 )) s"
[ -f $W/resnet50_u8.plan ] || timeout 300 $B/sampan build $W/resnet50.onnx --backend cuda --fp16 \
  --input-format uint8-nhwc --mean $MEAN --std $STD --minShapes input:1x224x224x3 \
  --optShapes input:${MAXB}x224x224x3 --maxShapes input:${MAXB}x224x224x3 --saveEngine $W/resnet50_u8.plan \
  > "$OUT/slo_build.log" 2>&1 || { tail "$OUT/slo_build.log"; exit 1; }
echo "== offline b$MAXB: $(timeout 60 $B/sampan bench --loadEngine $W/resnet50_u8.plan --shapes input:${MAXB}x224x224x3 \
  --useCudaGraph --duration 3 2>&1 | grep -m1 Throughput)" | tee "$OUT/slo_offline.txt"
echo "== grid $(( $(date +%s) - T0 )) s"
IO='input [ { name: "input" data_type: TYPE_UINT8 dims: [ 224, 224, 3 ] } ]\noutput [ { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] } ]'
timeout -k 10 ${GRID_S:-480} python3 bench/serve_gpu/slo_grid.py --sampan $B/sampan --backend cuda \
  --plan $W/resnet50_u8.plan --io "$IO" --max-batch $MAXB --slo-ms ${SLOS:-15 5} --slo-instances ${SLO_INST:-2} --rates ${RATES:-0.5,0.7,0.9} \
  --preferred ${PREF:-none,64,128} --delays-us ${DELAYS:-500,2000} --instances ${INST:-1,2} \
  --window-ms ${WINDOW_MS:-1000} --shared-memory --max-threads 768 --work /tmp/slo_grid \
  --out "$OUT/slo_grid_cuda.json" 2>&1 | tee "$OUT/slo_grid_cuda.log" | grep -v "^g_\|^slo_" | tail -30
cp /tmp/slo_grid/serve.log "$OUT/slo_serve.log" 2>/dev/null
echo "== done in $(( $(date +%s) - T0 )) s"
