#!/usr/bin/env bash
# Builds bench/gpu_zoo/attention_probe.cu once per variant of the fused attention kernel and runs
# each on this GPU: "tree" (src/backends/cuda/attention.cu) and every folder under
# bench/gpu_zoo/attention_probe_variants/ holding backends/cuda/attention.{h,cu} (earlier or
# experimental versions, e.g. `git show REV:src/backends/cuda/attention.cu`; the folder is
# git-ignored, so name it in the device call's carry). Variants whose
# header has AttentionParams::quantized also time the float8 output. Output:
# $OUT/attention_probe.txt (OUT defaults to gpu_out).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
log="$OUT/attention_probe.txt"; : > "$log"
run_variant() {  # name include-dir
  local name=$1 inc=$2 defs=(-DPROBE_VARIANT="\"$1\"")
  grep -q "bool quantized" "$inc/backends/cuda/attention.h" && defs+=(-DPROBE_HAS_QUANT)
  nvcc -arch=sm_90 -O3 -std=c++17 --expt-relaxed-constexpr "${defs[@]}" -I"$inc" -Isrc \
    bench/gpu_zoo/attention_probe.cu "$inc/backends/cuda/attention.cu" -o "/tmp/attention_probe_$name" >>"$log" 2>&1 &&
    timeout -k 5 120 "/tmp/attention_probe_$name" >>"$log" 2>&1
  echo "$name: rc=$?" >>"$log"
}
run_variant tree src
for v in bench/gpu_zoo/attention_probe_variants/*/; do
  [ -f "$v/backends/cuda/attention.cu" ] && run_variant "$(basename "$v")" "${v%/}"
done
cat "$log"
