#!/usr/bin/env bash
# Writes every real-model test model into build/models/ (or $1); each step skips what is up to date.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-build/models}"
/usr/bin/python3 -W ignore tests/models/export_torch.py --out "$OUT" 2>&1 | grep -v -e '^  _C._jit' -e 'UserWarning' || true
test "${PIPESTATUS[0]}" -eq 0
.venv/bin/python tests/models/copy_ocr.py --out "$OUT"
.venv/bin/python tests/models/build_minilm.py --out "$OUT"
