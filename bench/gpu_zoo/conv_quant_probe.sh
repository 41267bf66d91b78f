#!/usr/bin/env bash
# On the GPU machine: builds bench/gpu_zoo/conv_quant_probe.cu with nvcc into /tmp and runs it
# (timeout 240 s), writing ${OUT:-.}/conv_quant_probe.txt (also echoed). Arguments go to the probe:
#   bash bench/gpu_zoo/conv_quant_probe.sh                         # all 23 convs, variants 1-6
#   bash bench/gpu_zoo/conv_quant_probe.sh --variants 1,4,5 --only s3.c2
# The probe stops starting new cells at its --budget (PROBE_BUDGET, 200 s by default) so that its
# totals print before the timeout; cells past it print "skip".
set -u
SRC="$(cd "$(dirname "$0")" && pwd)/conv_quant_probe.cu"
mkdir -p "${OUT:-.}"
LOG="$(cd "${OUT:-.}" && pwd)/conv_quant_probe.txt"
BIN=/tmp/conv_quant_probe

# cuDNN: the CUDA toolkit's directories first, then the system's, then the pip wheel's.
inc="" lib=""
pip_cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
for d in ${CUDNN_HOME:-} /usr/local/cuda /usr/local /usr $pip_cudnn; do
  for i in include include/x86_64-linux-gnu; do
    [ -z "$inc" ] && [ -f "$d/$i/cudnn.h" ] && inc="$d/$i"
  done
  for l in lib64 lib lib/x86_64-linux-gnu; do
    [ -z "$lib" ] && ls "$d/$l"/libcudnn.so* >/dev/null 2>&1 && lib="$d/$l"
  done
done
link=-lcudnn
[ -n "$lib" ] && [ ! -e "$lib/libcudnn.so" ] && link=-l:libcudnn.so.9

{
  echo "== build ($(date +%T)): cudnn.h in ${inc:-?}, libcudnn in ${lib:-?}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null
  if ! nvcc -O2 -arch=sm_90 -std=c++17 ${inc:+-I"$inc"} ${lib:+-L"$lib" -Xlinker -rpath="$lib"} \
      "$SRC" $link -o "$BIN"; then
    echo "build failed"
    exit 1
  fi
  echo "== run ($(date +%T))"
  LD_LIBRARY_PATH=${lib:+$lib:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} \
    timeout -k 5 240 "$BIN" --budget "${PROBE_BUDGET:-200}" "$@"
  echo "== rc=$? ($(date +%T))"
} 2>&1 | tee "$LOG"
