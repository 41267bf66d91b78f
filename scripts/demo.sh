#!/usr/bin/env bash
# A first look at Sampan: set-up, Release build, export a MobileNetV2 (random weights) and run it
# with random inputs on the reference backend, printing its output summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
SAMPAN_RELEASE_TESTS="${SAMPAN_RELEASE_TESTS:-OFF}" bash scripts/build.sh release
mkdir -p build/models build/demo
/usr/bin/python3 tests/models/export_torch.py --only mobilenet_v2 --out build/models 2>build/demo/export.log \
  || { cat build/demo/export.log; exit 1; }
echo
echo "== build/sampan run build/models/mobilenet_v2.onnx --random-inputs --seed 1 --output-dir build/demo"
build/sampan run build/models/mobilenet_v2.onnx --random-inputs --seed 1 --output-dir build/demo
.venv/bin/python - <<'PY'
import numpy as np
y = np.load("build/demo/logits.npy")
top = np.argsort(y[0])[::-1][:5]
print("top-5 classes (random weights, so meaningless):", ", ".join(f"{i}:{y[0, i]:.4f}" for i in top))
PY
