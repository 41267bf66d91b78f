#!/usr/bin/env bash
# Several issues' GPU steps in one device call (device time is scarce and each call pays a
# machine start): each step time-boxed, every log packed into $OUT/session.tgz after each step
# (session_lib.sh), so a call cut short keeps what ran. Carry build-cuda/carry (bundle.sh).
#   STEPS="checks memory slo zoo multi" (default "checks memory slo")
#   checks  bench/gpu_peers/check_on_gpu.sh: CUDA kernel tests, CUDA shared memory (C++ and
#           end to end), the node suite on --backend cuda (ACCURACY=0 by default here)
#   memory  the CUDA backend's memory estimate against what its contexts allocate
#           (CudaBackendMemory*), the split context's tests (CudaDeviceIo, CudaSubgraph,
#           CudaFusedAttention, CudaFp8, CudaLayout, CudaImageOps) and the stream priorities
#           (CudaStreamPriority); MEMORY_FILTER replaces that gtest filter (e.g. 'Cuda*')
#   slo     bench/serve_gpu/slo_session.sh (GRID_S, SLOS, PREF, DELAYS, INST as there)
#   zoo     bench/gpu_zoo/zoo.sh for MODELS (default the BERT-base rows)
#   multi   bench/serve_gpu/multi_model_session.sh (three models on one GPU; its OCR recognizer from build-cuda/carry/ocr, bench/gpu_zoo/stage_ocr.sh)
set -u
STEPS=${STEPS:-checks memory slo}
source bench/gpu_zoo/session_lib.sh
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if has checks; then
  stamp checks
  OUT=$OUT/checks ACCURACY=${ACCURACY:-0} timeout -k 5 ${CHECKS_S:-300} bash bench/gpu_peers/check_on_gpu.sh \
    > "$OUT/checks.txt" 2>&1
  echo "rc=$?" >> "$OUT/checks.txt"; tail -30 "$OUT/checks.txt"
fi
if has memory; then
  stamp memory
  timeout -k 5 ${MEMORY_S:-240} $B/sampan_tests \
    --gtest_filter="${MEMORY_FILTER:-CudaBackendMemory*:CudaDeviceIo*:CudaSubgraph*:CudaFusedAttention*:CudaFp8*:CudaLayout*:CudaImageOps*:CudaStreamPriority*}" \
    > "$OUT/memory_and_split.txt" 2>&1
  echo "rc=$?" >> "$OUT/memory_and_split.txt"; grep -E "^\[  (PASSED|FAILED) |FAILED|SKIPPED|rc=" "$OUT/memory_and_split.txt" | head -30
fi
if has slo; then
  stamp slo
  OUT=$OUT/slo timeout -k 10 ${SLO_S:-480} bash bench/serve_gpu/slo_session.sh > "$OUT/slo.txt" 2>&1
  echo "rc=$?" >> "$OUT/slo.txt"; tail -25 "$OUT/slo.txt"
fi
if has zoo; then
  stamp zoo
  mkdir -p "$OUT/zoo"
  MODELS=${MODELS:-bert_base_b128 bert_base_b32} BUDGET_S=${ZOO_S:-240} OUT=$OUT/zoo \
    timeout -k 10 $(( ${ZOO_S:-240} + 30 )) bash bench/gpu_zoo/zoo.sh > "$OUT/zoo.txt" 2>&1
  echo "rc=$?" >> "$OUT/zoo.txt"; tail -12 "$OUT/zoo.txt"
fi
if has multi; then
  stamp multi
  OUT=$OUT/multi timeout -k 10 ${MULTI_S:-420} bash bench/serve_gpu/multi_model_session.sh > "$OUT/multi.txt" 2>&1
  echo "rc=$?" >> "$OUT/multi.txt"; tail -25 "$OUT/multi.txt"
fi
stamp "done in $(( $(date +%s) - T0 )) s"
