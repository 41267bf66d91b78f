#!/usr/bin/env bash
# bench/cpu_peers on the GPU machine's host CPU (issue #17: its Xeon with AVX-512, AVX512-FP16, VNNI
# and AMX), pinned to 2 cores (taskset -c 0,1, 2 threads for every runtime), in one device call.
# Carry (all built on the CPU machine; the GPU machine has no network):
#   build-cpuhost/bundle.tar.xz   bench/gpu_peers/bundle.sh of a Release build without CUDA
#                                 (cmake -DSAMPAN_CUDA=OFF -DSAMPAN_BUILD_TESTS=OFF; ninja sampan)
#   build-cpuhost/ov_cp312.tar.xz OpenVINO for that machine's python 3.12: `pip download
#                                 openvino==<the .venv's version> --python-version 3.12 --only-binary=:all:
#                                 --no-deps` plus openvino-telemetry, unpacked, the GPU/NPU plugins
#                                 and the non-ONNX frontends deleted (to fit the 64 MiB carry), packed
#   build-cuda/ocr.tar.xz         bench/gpu_zoo/stage_ocr.sh's ocr/ folder (the PaddleOCR det and rec)
# There: the torchvision CNNs are exported with its torch (random weights, export_cnns.py) and
# MiniLM built with random weights of the trained model's shapes (tests/models/build_minilm.py
# --random-weights): latency does not depend on the values. ONNX Runtime is the machine's.
# Usage (device tool): OUT=$OUT bash bench/cpu_peers/gpu_host.sh  -> $OUT/cpu_peers_gpuhost.{json,txt}
set -u
OUT=${OUT:-gpu_out}
B=/tmp/cpuhost
W=/tmp/cpuhost_models
mkdir -p "$OUT" $B/ov $W/models $W/cnn
tar -C $B -xJf build-cpuhost/bundle.tar.xz || { echo "no build-cpuhost/bundle.tar.xz"; exit 1; }
tar -C $B/ov -xJf build-cpuhost/ov_cp312.tar.xz || { echo "no build-cpuhost/ov_cp312.tar.xz"; exit 1; }
tar -C $W -xJf build-cuda/ocr.tar.xz || { echo "no build-cuda/ocr.tar.xz"; exit 1; }
cp $W/ocr/ppocr_det.onnx $W/models/ocr_det.onnx
cp $W/ocr/ppocr_rec.onnx $W/models/ocr_rec.onnx
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} PYTHONPATH=$B/ov
lscpu > "$OUT/lscpu.txt"
$B/sampan info > "$OUT/sampan_info.txt" 2>&1
{
  python3 bench/cpu_peers/export_cnns.py --out $W/cnn
  python3 tests/models/build_minilm.py --random-weights --out $W/models
} > "$OUT/export.log" 2>&1 || { echo "export failed:"; tail -20 "$OUT/export.log"; exit 1; }
taskset -c 0,1 python3 bench/cpu_peers/bench_cpu_peers.py --sampan $B/sampan --models-dir $W/models \
  --cnn-dir $W/cnn --threads 2 --rounds "${ROUNDS:-3}" --iters "${ITERS:-5}" --json "$OUT/cpu_peers_gpuhost.json" \
  > "$OUT/cpu_peers_gpuhost.txt" 2>&1
echo "rc=$?"
tail -18 "$OUT/cpu_peers_gpuhost.txt"
