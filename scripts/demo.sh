#!/usr/bin/env bash
# The job Sampan exists for, end to end, one line per step:
#   set up -> Release build -> export ResNet-50 (torchvision, random weights) -> sampan build on
#   the fastest backend here (cuda with a GPU, else cpu) -> sampan bench -> sampan serve on a model
#   repository holding that plan -> one request from Triton's own Python client -> sampan perf ->
#   stop the server.
# Logs of every step: build/demo/. The first run on a fresh machine spends most of its time in
# set-up and the Release build; later runs reuse both.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
D=build/demo
mkdir -p "$D" build/models
say() { printf '%-7s %s\n' "$1" "$2"; }
since() { echo "$(( $(date +%s) - $1 )) s"; }
fail() { echo "demo: $1 failed; the end of $2:" >&2; tail -n 30 "$2" >&2; exit 1; }

t=$(date +%s)
bash scripts/setup.sh > "$D/setup.log" 2>&1 || fail "set-up" "$D/setup.log"
say setup "system packages and the pinned .venv ready ($(since $t))"

t=$(date +%s)
# Warnings do not stop the demo (CI's build turns them into errors; this build prints them).
SAMPAN_WERROR=OFF SAMPAN_RELEASE_TESTS=OFF bash scripts/build.sh release > "$D/build.log" 2>&1 ||
  fail "the Release build" "$D/build.log"
say build "$(build/sampan --version) (Release) in build/, $(grep -c 'warning:' "$D/build.log") compiler warnings ($(since $t))"

t=$(date +%s)
/usr/bin/python3 tests/models/export_torch.py --only resnet50 --out build/models > "$D/export.log" 2>&1 ||
  fail "the ONNX export" "$D/export.log"
say export "build/models/resnet50.onnx: torchvision ResNet-50, random weights, input [1,3,224,224] ($(since $t))"

backend=cpu
precision=()
if nvidia-smi -L > /dev/null 2>&1; then backend=cuda; precision=(--fp16); fi
REPO="$D/repo"
rm -rf "$REPO" && mkdir -p "$REPO/resnet50/1"
PLAN="$REPO/resnet50/1/model.plan"
t=$(date +%s)
build/sampan build build/models/resnet50.onnx --backend "$backend" "${precision[@]}" --saveEngine "$PLAN" \
  > "$D/sampan_build.log" 2>&1 || fail "sampan build" "$D/sampan_build.log"
say plan "$PLAN: backend $backend, $(grep -m1 '^nodes:' "$D/sampan_build.log" | sed 's/  */ /g'), $(grep -m1 '^kernels:' "$D/sampan_build.log" | sed 's/  */ /g' | cut -c1-80) ($(since $t))"

build/sampan bench --loadEngine "$PLAN" --duration 3 ${precision:+--useCudaGraph} > "$D/bench.log" 2>&1 ||
  fail "sampan bench" "$D/bench.log"
say bench "$(grep -m1 '^Throughput:' "$D/bench.log"); median latency $(grep -m1 '^Latency:' "$D/bench.log" | grep -o 'median = [0-9.]* ms' | cut -d' ' -f3-)"

cat > "$REPO/resnet50/config.pbtxt" <<EOF
name: "resnet50"
platform: "sampan_plan"
max_batch_size: 0
input [ { name: "input" data_type: TYPE_FP32 dims: [ 1, 3, 224, 224 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1, 1000 ] } ]
instance_group [ { count: 1 } ]
EOF
read -r HTTP GRPC METRICS < <(.venv/bin/python -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
build/sampan serve --model-repository "$REPO" --http-address 127.0.0.1 --http-port "$HTTP" \
  --grpc-address 127.0.0.1 --grpc-port "$GRPC" --metrics-address 127.0.0.1 --metrics-port "$METRICS" \
  > "$D/serve.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
t=$(date +%s)
until curl -sf "http://127.0.0.1:$HTTP/v2/models/resnet50/ready" > /dev/null; do
  kill -0 "$SERVER" 2> /dev/null || fail "sampan serve" "$D/serve.log"
  [ $(( $(date +%s) - t )) -lt 120 ] || fail "sampan serve (not ready after 120 s)" "$D/serve.log"
  sleep 0.2
done
say serve "sampan serve: model resnet50 ready on http :$HTTP, grpc :$GRPC, metrics :$METRICS ($(since $t))"

.venv/bin/python - "$HTTP" > "$D/client.log" 2>&1 <<'PY' || fail "the tritonclient request" "$D/client.log"
import sys, time
import numpy as np
import tritonclient.http as httpclient
c = httpclient.InferenceServerClient(f"127.0.0.1:{sys.argv[1]}")
x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
inp = httpclient.InferInput("input", list(x.shape), "FP32")
inp.set_data_from_numpy(x, binary_data=True)
t = time.perf_counter()
r = c.infer("resnet50", [inp], outputs=[httpclient.InferRequestedOutput("logits", binary_data=True)])
ms = (time.perf_counter() - t) * 1e3
y = r.as_numpy("logits")
print(f"tritonclient.http infer: logits {list(y.shape)}, top-1 class {int(y.argmax())} "
      f"(random weights), {ms:.1f} ms round trip")
PY
say client "$(tail -n 1 "$D/client.log")"

build/sampan perf -m resnet50 -u "127.0.0.1:$HTTP" --concurrency-range 2 -p 2000 --json "$D/perf.json" \
  > "$D/perf.log" 2>&1 || fail "sampan perf" "$D/perf.log"
say perf "$(.venv/bin/python -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
thr, p50, errors = r["throughput_infer_per_s"], r["latency_us"]["p50"] / 1000, r["errors"]
print(f"sampan perf, concurrency 2 over HTTP: {thr:.1f} infer/s, p50 latency {p50:.1f} ms, {errors} errors")
' "$D/perf.json")"

kill "$SERVER"
wait "$SERVER" 2> /dev/null || true
trap - EXIT
say stop "server stopped; logs in $D/; demo wall time $(since "$T0")"
