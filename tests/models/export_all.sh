#!/usr/bin/env bash
# Writes every real-model test model into build/models/ (or $1); each step skips what is up to date.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-build/models}"
mkdir -p "$OUT"
# torch 1.13's exporter is chatty (UserWarnings); show its log only on failure.
log="$OUT/export_torch.log"
if ! /usr/bin/python3 tests/models/export_torch.py --out "$OUT" >"$log" 2>&1; then
  cat "$log"; exit 1
fi
grep '^export_torch:' "$log"
# YOLOv5s for the yolo example pipeline (examples/pipelines, tests/server/test_pipelines.py).
log="$OUT/export_yolov5s.log"
if ! /usr/bin/python3 examples/pipelines/export_yolov5s.py "$OUT/yolov5s.onnx" >"$log" 2>&1; then
  cat "$log"; exit 1
fi
grep '^export_yolov5s:' "$log"
.venv/bin/python tests/models/copy_ocr.py --out "$OUT"
.venv/bin/python tests/models/build_minilm.py --out "$OUT"
.venv/bin/python tests/models/build_control_flow.py --out "$OUT"
.venv/bin/python tests/models/build_ml.py --out "$OUT"
# INT8 (issue #16): ORT-quantized QDQ/QOperator models plus calibration and held-out inputs, from
# the FP32 models above. export_qdq.py names each model that fails and exits non-zero at the end.
if ! .venv/bin/python tests/models/export_qdq.py "$OUT"; then
  echo "export_all: tests/models/export_qdq.py failed for the model(s) named above" >&2; exit 1
fi
