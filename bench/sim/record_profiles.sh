#!/usr/bin/env bash
# On the GPU machine: the latency tables the sim backend (src/backends/sim/sim.h) replays in cluster
# rehearsals. bench/gpu_peers/gpu_peers.py exports ResNet-50 (torchvision, random weights), builds one
# FP16 plan per batch size with `sampan build --backend cuda --fp16` and times each with `sampan bench
# --useCudaGraph --json` from host memory (input upload and output download included, as the server
# runs it); those bench files are the profiles (`sampan build --backend sim --sim-profile FILE ...`).
# PyTorch is timed at the same batches in the same run (gpu_peers.json).
#   carry build-cuda/carry/bundle.tar.xz (bench/gpu_peers/bundle.sh);
#   OUT=$OUT BATCHES=1,2,4,8,16,32,64,128,256 bash bench/sim/record_profiles.sh
# -> $OUT/sim_profiles/resnet50_fp16_b{N}.json, $OUT/sim_profiles/gpu_peers.{json,log}, gpu.txt
set -u
OUT=${OUT:-gpu_out}
B=/tmp/sampan_bundle
P=$OUT/sim_profiles
mkdir -p $B $P
[ -x $B/sampan ] || tar -C $B -xJf build-cuda/carry/bundle.tar.xz || exit 1
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $P/gpu.txt
timeout ${PROFILE_TIMEOUT:-400} python3 bench/gpu_peers/gpu_peers.py --sampan $B/sampan --out /tmp/sim_peers \
  --models resnet50 --batches ${BATCHES:-1,2,4,8,16,32,64,128,256} --duration ${DURATION:-1} > $P/gpu_peers.log 2>&1
echo "rc=$?"
cp /tmp/sim_peers/gpu_peers.json $P/ 2>/dev/null
for j in /tmp/sim_peers/resnet50_b*.json; do
  case $j in *_dev.json) continue ;; esac
  b=${j##*_b}; cp "$j" "$P/resnet50_fp16_b$b"
done
ls $P; grep -A12 "^model " $P/gpu_peers.log | head -20
