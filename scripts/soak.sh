#!/usr/bin/env bash
# The soak (slow tier, issue #22): tests/cluster/test_soak.py for an hour: three sim nodes behind
# haproxy at 80% of their capacity, a model reload every 2 minutes and a node restart every 10,
# every node's RSS, open fds and threads sampled every 10 s; fails on growth beyond 5% after the
# 5-minute warm-up or on any lost request. Figures: build/cluster/soak.json.
#   scripts/soak.sh                  1 hour, build/sampan (Release)
#   scripts/soak.sh 600              another length in seconds
#   SAMPAN_BIN=build-asan/sampan scripts/soak.sh 180     what CI runs (scripts/test.sh's cluster stage)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-3600}"
export SAMPAN_SOAK_SECONDS="$seconds"
export SAMPAN_BIN="${SAMPAN_BIN:-$PWD/build/sampan}"
PY="${PY:-.venv/bin/python}"
exec timeout "$((seconds + 600))" "$PY" -m pytest -q -rfEs -p no:cacheprovider tests/cluster/test_soak.py
