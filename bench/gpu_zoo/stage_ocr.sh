#!/usr/bin/env bash
# Copies the PaddleOCR ONNX models that the rapidocr package ships (.venv here) into
# build-cuda/carry/ocr/ as ppocr_det.onnx, ppocr_rec.onnx, ppocr_cls.onnx, so that they
# travel with `carry: build-cuda/carry` (the GPU machine has no rapidocr and no network).
# Usage: bash bench/gpu_zoo/stage_ocr.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-cuda}
D="$B/carry/ocr"
M=$(ls -d .venv/lib/python3*/site-packages/rapidocr/models 2>/dev/null | head -1)
[ -n "$M" ] || { echo "rapidocr's models not found under .venv/lib/python3*/site-packages/rapidocr/models" >&2; exit 1; }
mkdir -p "$D"
: > "$D/SOURCES.txt"
for k in det rec cls; do
  f=$(ls "$M"/*_${k}_*.onnx | head -1)
  cp "$f" "$D/ppocr_$k.onnx"
  echo "ppocr_$k.onnx <- $(basename "$f") sha256 $(sha256sum "$f" | cut -c1-16)" >> "$D/SOURCES.txt"
done
cat "$D/SOURCES.txt"
du -sh "$D"
