#!/usr/bin/env bash
# Makes a servable model repository from one of the example repositories here: every model's ONNX
# file (named by its SOURCE, found in MODELS, default build/models as tests/models/export_all.sh
# writes it) goes through `sampan publish` with the model's config.pbtxt, so OUT/<model>/1/ holds
# the model, the plans built on this machine and report.json (the bench figures `sampan deploy
# kubernetes` sizes from).
#   bash examples/repositories/publish.sh EXAMPLE OUT [MODELS] [--keep-reports] [-- PUBLISH FLAGS...]
# --keep-reports copies the new report.json files back into examples/repositories/EXAMPLE/ (what
# is committed there: the figures of the machine each report names). SAMPAN_BIN picks the binary
# (default build/sampan).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ $# -ge 2 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
example="$1" out="$2"; shift 2
models="build/models" keep=0
if [ $# -gt 0 ] && [ "$1" != "--" ] && [ "$1" != "--keep-reports" ]; then models="$1"; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--keep-reports" ]; then keep=1; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
src="$here/$example"
[ -d "$src" ] || { echo "publish.sh: no example repository '$example' in $here" >&2; exit 2; }
sampan="${SAMPAN_BIN:-build/sampan}"
mkdir -p "$out"
for dir in "$src"/*/; do
  model="$(basename "$dir")"
  onnx="$models/$(cat "$dir/SOURCE")"
  [ -f "$onnx" ] || { echo "publish.sh: $onnx missing (bash tests/models/export_all.sh $models)" >&2; exit 1; }
  if [ -d "$out/$model" ]; then echo "publish.sh: $out/$model exists: publishing the next version"; fi
  "$sampan" publish --onnx "$onnx" --repository "$out" --model "$model" --config "$dir/config.pbtxt" "$@"
  if [ "$keep" = 1 ]; then
    v="$(ls "$out/$model" | grep -E '^[0-9]+$' | sort -n | tail -n 1)"
    mkdir -p "$dir/1"
    cp "$out/$model/$v/report.json" "$dir/1/report.json"
  fi
done
echo "publish.sh: $out holds example '$example' ($(ls "$out" | tr '\n' ' '))"
