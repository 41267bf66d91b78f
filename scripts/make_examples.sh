#!/usr/bin/env bash
# Makes the example pipeline repositories of examples/pipelines/ (ocr, yolo, bert): the models
# (rapidocr's PaddleOCR files, all-MiniLM-L6-v2 from its shipped weights, YOLOv5s with random
# weights) and the processing graphs around them. Each then serves as it is:
#   sampan serve --model-repository examples/pipelines/ocr
# Usage: bash scripts/make_examples.sh [MODELS_DIR (default build/models)] [make_pipelines.py flags...]
# Needs scripts/setup.sh's venv (.venv) and Debian's python3-torch (for YOLOv5s).
set -euo pipefail
cd "$(dirname "$0")/.."
models="build/models"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then models="$1"; shift; fi
mkdir -p "$models"
.venv/bin/python tests/models/copy_ocr.py --out "$models"
.venv/bin/python tests/models/build_minilm.py --out "$models"
log="$models/export_yolov5s.log"
if ! /usr/bin/python3 examples/pipelines/export_yolov5s.py "$models/yolov5s.onnx" >"$log" 2>&1; then
  cat "$log"; exit 1
fi
grep '^export_yolov5s:' "$log" || true
.venv/bin/python examples/pipelines/make_pipelines.py --models "$models" "$@"
