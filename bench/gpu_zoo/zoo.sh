#!/usr/bin/env bash
# bench/gpu_zoo on the GPU machine, one command: unpack the carried build
# (build-cuda/carry/bundle.tar.xz), export MODELS to ONNX with torch (export_zoo.py, on
# the CPU, niced, in the background, one model ahead of the GPU work), and for each model
# build/bench/run it with Sampan and time PyTorch's CUDA-graph peer (run_zoo.py). Every
# step is time-boxed; after each model the results (gpu_zoo_<card>.json/.jsonl/.md, <card> the GPU that ran, merged
# with bench/results/gpu_zoo_<card>.json as carried) and gpu_zoo_logs.tgz are rewritten in
# $OUT, so a run cut short keeps what it did. No model is started after BUDGET_S seconds
# (its estimate included); the ones left are named in $OUT/gpu_zoo_pending.txt.
# Usage (carry build-cuda/carry): MODELS="resnet50 vit_b_16 ..." bash bench/gpu_zoo/zoo.sh
# Knobs: MODELS (names, or all/bert/ocr/yolo), BUDGET_S (540), PIPELINE (1; 0 = export all
# first), EXPORT_THREADS, EXPORT_TIMEOUT (180 s a model), FORCE_EXPORT=1, OCR_DYNAMIC=1,
# TORCH_CUDNN_BENCHMARK=1, RUN_ARGS (more run_zoo.py flags, e.g. "--duration 2 --eager"),
# BENCH_ARGS (more sampan bench flags), EXPORT_ARGS (more export_zoo.py flags, e.g. "--batch 2").
set -u
T0=$(date +%s)
OUT=${OUT:-gpu_out}
B=/tmp/sampan_bundle
W=${ZOO_WORK:-/tmp/zoo}
MODELS=${MODELS:-all}
BUDGET_S=${BUDGET_S:-540}
DEADLINE=$((T0 + BUDGET_S))
mkdir -p $B $W/models $W/logs "$OUT"
tar -C $B -xJf build-cuda/carry/bundle.tar.xz || { echo "no build-cuda/carry/bundle.tar.xz (carry build-cuda/carry)"; exit 1; }
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== MODELS: $MODELS ($(date +%T))"

NP=$(nproc)
EXPORT_THREADS=${EXPORT_THREADS:-$(( NP > 8 ? NP - 4 : (NP > 2 ? NP - 1 : 1) ))}
nice -n 10 python3 bench/gpu_zoo/export_zoo.py --out $W/models --models "$MODELS" --ref none \
  --threads $EXPORT_THREADS --timeout ${EXPORT_TIMEOUT:-180} ${FORCE_EXPORT:+--force} ${EXPORT_ARGS:-} >> $W/export.log 2>&1 &
EXP=$!
if [ "${PIPELINE:-1}" = 0 ]; then wait $EXP; echo "== exported ($(date +%T))"; fi

PROGRESS=$W/progress_$T0.txt
for attempt in 1 2 3; do
  left=$((DEADLINE + 35 - $(date +%s)))
  [ $left -gt 15 ] || break
  timeout -k 5 $left python3 bench/gpu_zoo/run_zoo.py --sampan $B/sampan --models "$MODELS" \
    --models-dir $W/models --work $W --out-dir "$OUT" --progress $PROGRESS --resume \
    --wait-export ${WAIT_EXPORT:-240} --export-pid $EXP --deadline $DEADLINE ${RUN_ARGS:-}
  rc=$?
  [ $rc = 0 ] && break
  echo "== run_zoo.py ended with rc=$rc (attempt $attempt, $(date +%T))"
  [ $rc = 124 ] || [ $rc = 137 ] && break
done
kill $EXP 2>/dev/null  # the export process started above, if it is still running
echo "== export log (tail)"; grep -E ": (ok|FAILED|already)" $W/export.log | tail -40
cp $W/export.log "$OUT/gpu_zoo_export.log" 2>/dev/null
[ -f "$OUT/gpu_zoo_pending.txt" ] && echo "== not started (next call): MODELS=\"$(cat "$OUT/gpu_zoo_pending.txt")\""
echo "== done in $(( $(date +%s) - T0 )) s"
