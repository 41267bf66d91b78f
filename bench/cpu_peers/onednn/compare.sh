#!/usr/bin/env bash
# Does a newer oneDNN than Debian 12's 2.6 run our FP32 convolutions faster on this CPU (#17)?
# Builds convbench.cpp against Debian's libdnnl (2.6) and against oneDNN 3.2 from PyPI's
# onednn-cpu-gomp wheel (GNU OpenMP like Debian's; the newer `onednn` wheels need Intel's SYCL
# and TBB runtimes), then times the shapes of shapes.txt ("N IC OC H W KH KW STRIDE PAD GROUPS",
# ResNet-50 layers, a depthwise and PP-OCR-like 1x1 layers) with both, alternating, on $THREADS
# threads, printing each implementation oneDNN chose.
#   bash bench/cpu_peers/onednn/compare.sh [WORKDIR]      (default build/onednn_compare)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-build/onednn_compare}"
THREADS="${THREADS:-2}"
mkdir -p "$work"
if [ ! -f "$work/v3/lib/libdnnl.so.3" ]; then
  python3 -m pip download -q --no-deps -d "$work/wheels" onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0
  rm -rf "$work/v3" && mkdir -p "$work/v3"
  for w in "$work"/wheels/*.whl; do python3 -m zipfile -e "$w" "$work/unpacked"; done
  cp -r "$work"/unpacked/onednn_cpu_gomp-*.data/data/lib "$work/v3/lib"
  cp -r "$work"/unpacked/onednn_devel_cpu_gomp-*.data/data/include "$work/v3/include"
fi
g++ -O2 -std=c++17 "$here/convbench.cpp" -ldnnl -o "$work/convbench_v2"
g++ -O2 -std=c++17 "$here/convbench.cpp" -I"$work/v3/include" -L"$work/v3/lib" -l:libdnnl.so.3 \
  -Wl,-rpath,"$(cd "$work/v3/lib" && pwd)" -o "$work/convbench_v3"
echo "CPU: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); $THREADS threads"
for round in 1 2; do
  for v in v2 v3; do
    echo "== oneDNN $([ $v = v2 ] && echo "2.6 (Debian)" || echo "3.2 (onednn-cpu-gomp)"), round $round"
    OMP_NUM_THREADS=$THREADS "$work/convbench_$v" < "$here/shapes.txt"
  done
done
