#!/usr/bin/env bash
# The model release step of a CI/CD pipeline: export -> publish -> accuracy gate -> canary.
#
#   deploy/ci/model-pipeline.sh --repository DIR --model NAME
#       (--onnx FILE | --export-cmd 'CMD writing $SAMPAN_EXPORT_ONNX')
#       [--config FILE] [--accuracy-data DIR --accuracy-bound X [--accuracy-metric cosine|rel_l2|top1]]
#       [--canary PERCENT [--canary-window-secs S] [--canary-min-requests N] [--canary-max-p99-ratio X]
#        [--canary-p99-slack-ms MS]]
#       [--wait-secs S] [--sampan PATH] [--dry-run]
#
# 1. export: runs --export-cmd with SAMPAN_EXPORT_ONNX set to the path it must write (a PyTorch
#    torch.onnx.export script, say), or takes --onnx as it is;
# 2. publish: `sampan publish` builds the plans, runs the accuracy gate against the serving
#    version and writes the next version atomically with report.json; a missed bound stops the
#    pipeline here (exit 3) with the repository untouched;
# 3. canary: with --canary, waits for the servers' verdict (the decision file the first server
#    writes, <model>/<version>/.sampan/canary-decision.json): exit 0 when promoted, 4 when rolled
#    back, 5 when no verdict came within --wait-secs (default: 3 x the window + 120 s; the servers
#    must poll the repository and receive traffic). Without --canary the version serves at the
#    servers' next poll and the step ends after the publish.
# The repository is whatever the servers read: a volume mounted here, or a local directory the
# pipeline syncs to object storage afterwards (deploy/kubernetes/components/object-storage).
# Exit codes: 0 released, 2 usage, 3 refused by publish (gate, build, input), 4 rolled back,
# 5 no verdict in time, 6 the export failed.
set -euo pipefail

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

repo="" model="" onnx="" export_cmd="" config="" acc_data="" acc_bound="" acc_metric=""
canary="" window=60 min_requests=20 p99_ratio="" p99_slack="" wait_secs="" dry_run=0
sampan="${SAMPAN_BIN:-sampan}"
while [ $# -gt 0 ]; do
  case "$1" in
    --repository) repo="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --onnx) onnx="$2"; shift 2 ;;
    --export-cmd) export_cmd="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --accuracy-data) acc_data="$2"; shift 2 ;;
    --accuracy-bound) acc_bound="$2"; shift 2 ;;
    --accuracy-metric) acc_metric="$2"; shift 2 ;;
    --canary) canary="$2"; shift 2 ;;
    --canary-window-secs) window="$2"; shift 2 ;;
    --canary-min-requests) min_requests="$2"; shift 2 ;;
    --canary-max-p99-ratio) p99_ratio="$2"; shift 2 ;;
    --canary-p99-slack-ms) p99_slack="$2"; shift 2 ;;
    --wait-secs) wait_secs="$2"; shift 2 ;;
    --sampan) sampan="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage ;;
    *) echo "model-pipeline: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$repo" ] && [ -n "$model" ] || { echo "model-pipeline: --repository and --model are required" >&2; usage; }
if { [ -n "$onnx" ] && [ -n "$export_cmd" ]; } || { [ -z "$onnx" ] && [ -z "$export_cmd" ]; }; then
  echo "model-pipeline: give exactly one of --onnx and --export-cmd" >&2; exit 2
fi
if { [ -n "$acc_data" ] && [ -z "$acc_bound" ]; } || { [ -z "$acc_data" ] && [ -n "$acc_bound" ]; }; then
  echo "model-pipeline: --accuracy-data and --accuracy-bound go together" >&2; exit 2
fi
case "$window" in ''|*[!0-9.]*) echo "model-pipeline: --canary-window-secs '$window' is not a number" >&2; exit 2 ;; esac
[ -n "$wait_secs" ] || wait_secs=$(awk -v w="$window" 'BEGIN { printf "%d", 3 * w + 120 }')
case "$wait_secs" in ''|*[!0-9]*) echo "model-pipeline: --wait-secs '$wait_secs' is not a whole number" >&2; exit 2 ;; esac

t0=$SECONDS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# 1. export
if [ -n "$export_cmd" ]; then
  export SAMPAN_EXPORT_ONNX="$work/model.onnx"
  echo "model-pipeline: export: $export_cmd"
  if ! bash -c "$export_cmd"; then echo "model-pipeline: the export command failed" >&2; exit 6; fi
  [ -s "$SAMPAN_EXPORT_ONNX" ] || { echo "model-pipeline: the export command wrote no $SAMPAN_EXPORT_ONNX" >&2; exit 6; }
  onnx="$SAMPAN_EXPORT_ONNX"
fi

# 2. publish (build, gate, bench, report, atomic rename)
args=(publish --onnx "$onnx" --repository "$repo" --model "$model")
[ -z "$config" ] || args+=(--config "$config")
[ -z "$acc_data" ] || args+=(--accuracyData "$acc_data" --accuracyBound "$acc_bound")
[ -z "$acc_metric" ] || args+=(--accuracyMetric "$acc_metric")
[ -z "$canary" ] || args+=(--canary "$canary" --canaryWindowSecs "$window" --canaryMinRequests "$min_requests")
[ -z "$canary" ] || [ -z "$p99_ratio" ] || args+=(--canaryMaxP99Ratio "$p99_ratio")
[ -z "$canary" ] || [ -z "$p99_slack" ] || args+=(--canaryP99SlackMs "$p99_slack")
echo "model-pipeline: $sampan ${args[*]}"
if [ "$dry_run" = 1 ]; then exit 0; fi
if ! out="$("$sampan" "${args[@]}" 2>&1)"; then
  printf '%s\n' "$out" >&2
  echo "model-pipeline: publish refused the model (repository untouched)" >&2
  exit 3
fi
printf '%s\n' "$out"
version="$(printf '%s\n' "$out" | sed -n "s/^published model '.*' version \([0-9][0-9]*\).*/\1/p" | tail -n 1)"
[ -n "$version" ] || { echo "model-pipeline: could not read the published version from sampan's output" >&2; exit 3; }
echo "model-pipeline: published $model version $version in $((SECONDS - t0)) s"

# 3. canary verdict
if [ -z "$canary" ]; then
  echo "model-pipeline: no canary: version $version serves at the servers' next poll"
  exit 0
fi
decision="$repo/$model/$version/.sampan/canary-decision.json"
echo "model-pipeline: waiting up to $wait_secs s for the canary's verdict ($decision)"
deadline=$((SECONDS + wait_secs))
while [ ! -s "$decision" ]; do
  if [ $SECONDS -ge $deadline ]; then
    echo "model-pipeline: no verdict on version $version within $wait_secs s (do the servers poll $repo and get traffic?)" >&2
    exit 5
  fi
  sleep 1
done
cat "$decision"
if grep -q '"decision": "promoted"' "$decision"; then
  echo "model-pipeline: version $version promoted ($((SECONDS - t0)) s in all)"
  exit 0
fi
echo "model-pipeline: version $version was rolled back by the canary; the previous version serves" >&2
exit 4
