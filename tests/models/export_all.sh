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
.venv/bin/python tests/models/copy_ocr.py --out "$OUT"
.venv/bin/python tests/models/build_minilm.py --out "$OUT"
.venv/bin/python tests/models/build_control_flow.py --out "$OUT"
.venv/bin/python tests/models/build_ml.py --out "$OUT"
