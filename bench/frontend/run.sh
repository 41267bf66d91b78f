#!/usr/bin/env bash
# Front-end overhead: Sampan's HTTP request path against nginx serving a static
# response of the same size, driven by the same load generator (wrk, HTTP/1.1
# keep-alive, 16 connections) on the same machine, alternating A/B/A/B... in
# one run. The model is one Add over 16 floats (binary tensor extension, so the
# response is 207 bytes: JSON header + 64 bytes); nginx serves those 207 bytes.
# gRPC: `sampan perf -i grpc` at the same concurrency against Sampan and against
# sampan_grpc_echo (bench/frontend/grpc_echo.cpp: a minimal KServe v2 gRPC server that answers
# ModelInfer with a fixed response of the same size), alternating in the same rounds; the echo
# server is looked for next to SAMPAN_BIN (`ninja -C BUILD sampan_grpc_echo`), else skipped.
#
#   bench/frontend/run.sh [SAMPAN_BIN] [OUT_DIR]      (needs: wrk nginx-light; apt installs them)
# PY: the Python with onnx (default .venv/bin/python). BASE_BIN: an earlier sampan, measured in
# the same rounds (after nginx and SAMPAN_BIN, over HTTP and gRPC) for a before/after pair that
# shares each round's conditions (a shared machine's load moves between runs).
# Writes OUT_DIR/frontend.json and prints a table. Environment: ROUNDS (3),
# DURATION (10 s per measurement), CONNECTIONS (16), THREADS (wrk threads, 2), PROFILE=1 (a flame
# graph of the server under the same load: OUT_DIR/flame_http.svg and .folded, with perf).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${1:-build/sampan}"
OUT="${2:-build/bench/frontend}"
ROUNDS="${ROUNDS:-3}"; DURATION="${DURATION:-10}"; CONN="${CONNECTIONS:-16}"; THREADS="${THREADS:-2}"
PY="${PY:-.venv/bin/python}"
for tool in wrk nginx; do
  if ! command -v "$tool" >/dev/null && [ ! -x "/usr/sbin/$tool" ]; then
    echo "installing wrk nginx-light"; DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends wrk nginx-light >/dev/null
  fi
done
if [ "${PROFILE:-0}" = 1 ] && ! command -v perf >/dev/null; then
  echo "installing linux-perf"; DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends linux-perf >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d); trap 'kill $SPID ${EPID:-} ${BPID:-} 2>/dev/null || true; "$NGINX" -p "$WORK/nginx" -c nginx.conf -s stop 2>/dev/null || true; rm -rf "$WORK"' EXIT

# The model repository: add16 (batching on, as a served model would have it).
mkdir -p "$WORK/repo/add16/1"
"$PY" - "$WORK" <<'PYEOF'
import sys, json, struct, onnx
from onnx import helper, TensorProto
w = sys.argv[1]
x = helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 16])
y = helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 16])
c = helper.make_tensor("one", TensorProto.FLOAT, [16], [1.0] * 16)
g = helper.make_graph([helper.make_node("Add", ["INPUT0", "one"], ["OUTPUT0"])], "add16", [x], [y], [c])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
onnx.save(m, f"{w}/repo/add16/1/model.onnx")
open(f"{w}/repo/add16/config.pbtxt", "w").write(
    'max_batch_size: 64\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    'dynamic_batching { max_queue_delay_microseconds: 0 }\n')
hdr = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                              "parameters": {"binary_data_size": 64}}],
                  "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]},
                 separators=(",", ":")).encode()
open(f"{w}/body.bin", "wb").write(hdr + struct.pack("<16f", *range(16)))
open(f"{w}/hdrlen", "w").write(str(len(hdr)))
PYEOF
HDRLEN=$(cat "$WORK/hdrlen")
cat > "$WORK/post.lua" <<LUAEOF
local f = io.open("$WORK/body.bin", "rb"); local body = f:read("*all"); f:close()
wrk.method = "POST"; wrk.body = body
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = "$HDRLEN"
LUAEOF

"$BIN" serve --model-repository "$WORK/repo" --http-port 0 --grpc-port 0 --metrics-port -1 >"$WORK/serve.log" 2>&1 &
SPID=$!
for _ in $(seq 100); do grep -q '^ready' "$WORK/serve.log" 2>/dev/null && break; sleep 0.2; done
grep -q '^ready' "$WORK/serve.log" || { cat "$WORK/serve.log"; exit 1; }
HPORT=$(sed -n 's/^HTTP.*:\([0-9]*\)$/\1/p' "$WORK/serve.log"); GPORT=$(sed -n 's/^gRPC.*:\([0-9]*\)$/\1/p' "$WORK/serve.log")
URL="http://127.0.0.1:$HPORT/v2/models/add16/infer"
BURL=""; BGPORT=""
if [ -n "${BASE_BIN:-}" ]; then
  "$BASE_BIN" serve --model-repository "$WORK/repo" --http-port 0 --grpc-port 0 --metrics-port -1 >"$WORK/base.log" 2>&1 &
  BPID=$!
  for _ in $(seq 100); do grep -q '^ready' "$WORK/base.log" 2>/dev/null && break; sleep 0.2; done
  grep -q '^ready' "$WORK/base.log" || { cat "$WORK/base.log"; exit 1; }
  BURL="http://127.0.0.1:$(sed -n 's/^HTTP.*:\([0-9]*\)$/\1/p' "$WORK/base.log")/v2/models/add16/infer"
  BGPORT=$(sed -n 's/^gRPC.*:\([0-9]*\)$/\1/p' "$WORK/base.log")
fi
# The exact response Sampan sends, which nginx will serve as a static file.
mkdir -p "$WORK/nginx/www" "$WORK/nginx/logs"
curl -s -o "$WORK/nginx/www/resp" -X POST "$URL" -H "Inference-Header-Content-Length: $HDRLEN" --data-binary @"$WORK/body.bin"
RESP_BYTES=$(stat -c %s "$WORK/nginx/www/resp")
NPORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$WORK/nginx/nginx.conf" <<NGEOF
worker_processes auto;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $WORK/nginx/tmp; proxy_temp_path $WORK/nginx/tmp; fastcgi_temp_path $WORK/nginx/tmp;
  uwsgi_temp_path $WORK/nginx/tmp; scgi_temp_path $WORK/nginx/tmp;
  server {
    listen 127.0.0.1:$NPORT;
    location / { root $WORK/nginx/www; default_type application/octet-stream; }
  }
}
NGEOF
mkdir -p "$WORK/nginx/tmp"
"$NGINX" -p "$WORK/nginx" -c nginx.conf
ECHO="$(dirname "$BIN")/sampan_grpc_echo"; EPORT=""
if [ -x "$ECHO" ]; then
  "$ECHO" 0 >"$WORK/echo.log" 2>&1 &
  EPID=$!
  for _ in $(seq 50); do grep -q '^gRPC' "$WORK/echo.log" 2>/dev/null && break; sleep 0.1; done
  EPORT=$(sed -n 's/^gRPC.*:\([0-9]*\)$/\1/p' "$WORK/echo.log")
else
  echo "no $ECHO: gRPC measured without its peer (ninja -C $(dirname "$BIN") sampan_grpc_echo)"
fi
sleep 0.5

rps() { wrk -t"$THREADS" -c"$CONN" -d"${DURATION}s" "$@" 2>&1 | awk '/Requests\/sec/ {print $2}'; }
# Three windows of DURATION/3 after a warm-up second (perf's fewest): infer/s.
grpc_rps() {
  "$BIN" perf -m add16 -u "127.0.0.1:$1" -i grpc --concurrency-range "$CONN" -p "$((DURATION * 1000 / 3))" -r 3 \
    | awk '/^Concurrency/ {print $4}'
}
declare -a S N G E BS BG
for r in $(seq "$ROUNDS"); do
  n=$(rps "http://127.0.0.1:$NPORT/resp"); N+=("$n")
  s=$(rps -s "$WORK/post.lua" "$URL"); S+=("$s")
  e=0; if [ -n "$EPORT" ]; then e=$(grpc_rps "$EPORT"); E+=("$e"); fi
  g=$(grpc_rps "$GPORT"); G+=("$g")
  echo "round $r: nginx $n req/s, sampan http $s req/s; grpc echo $e infer/s, sampan grpc $g infer/s"
  if [ -n "$BURL" ]; then
    bs=$(rps -s "$WORK/post.lua" "$BURL"); BS+=("$bs")
    bg=$(grpc_rps "$BGPORT"); BG+=("$bg")
    echo "round $r: base sampan http $bs req/s, base sampan grpc $bg infer/s"
  fi
done
if [ "${PROFILE:-0}" = 1 ]; then
  # One more Sampan measurement under perf (not counted): the server's flame graph, frames by
  # function (bench/frontend/flamegraph.py draws it). Stacks unwind with DWARF (.eh_frame): a
  # Release build keeps no frame pointers.
  perf record -F 499 --call-graph dwarf,16384 -o "$WORK/perf.data" -p "$SPID" -- sleep "$DURATION" >/dev/null 2>&1 &
  PPID_=$!
  rps -s "$WORK/post.lua" "$URL" >/dev/null
  wait "$PPID_" || true
  perf script -i "$WORK/perf.data" 2>/dev/null > "$WORK/perf.txt"  # (DWARF unwinding: a minute or two)
  "$PY" bench/frontend/flamegraph.py --title "sampan serve, HTTP infer under wrk ($CONN connections)" \
    < "$WORK/perf.txt" > "$OUT/flame_http.svg"
  "$PY" bench/frontend/flamegraph.py --folded < "$WORK/perf.txt" > "$OUT/flame_http.folded"
  echo "profile: $OUT/flame_http.svg ($(awk '{s+=$NF} END {print s}' "$OUT/flame_http.folded") samples)"
fi
"$PY" - "$OUT/frontend.json" "$RESP_BYTES" "${N[*]}" "${S[*]}" "${G[*]}" "${E[*]:-}" "${BS[*]:-}" "${BG[*]:-}" <<'PYEOF'
import json, statistics, sys
out, nbytes = sys.argv[1], int(sys.argv[2])
n, s, g, e, bs, bg = ([float(v or 0) for v in a.split()] for a in sys.argv[3:9])
mn, ms, mg = statistics.median(n), statistics.median(s), statistics.median(g)
me = statistics.median(e) if e else 0.0
res = {"response_bytes": nbytes, "nginx_rps": n, "sampan_http_rps": s, "nginx_median": mn, "sampan_http_median": ms,
       "ratio_sampan_over_nginx": ms / mn, "sampan_grpc_rps": g, "grpc_echo_rps": e, "sampan_grpc_median": mg,
       "grpc_echo_median": me, "ratio_grpc_sampan_over_echo": mg / me if me else None,
       "load": "wrk keep-alive, 16 connections; gRPC: sampan perf -i grpc, concurrency 16"}
if bs:
    # Per round, against the same round's nginx / echo, then the median.
    res.update({"base_http_rps": bs, "base_grpc_rps": bg,
                "base_ratio_over_nginx": statistics.median(b / x for b, x in zip(bs, n)),
                "ratio_over_nginx_per_round": [x / y for x, y in zip(s, n)],
                "base_ratio_over_nginx_per_round": [b / y for b, y in zip(bs, n)]})
    if e:
        res["base_grpc_ratio_over_echo"] = statistics.median(b / x for b, x in zip(bg, e))
json.dump(res, open(out, "w"), indent=2)
print(f"\n{'':24}{'req/s (median)':>16}")
print(f"{'nginx static':24}{mn:16.0f}")
print(f"{'sampan HTTP infer':24}{ms:16.0f}   ratio sampan/nginx {ms / mn:.2f} (target >= 0.6)")
if me:
    print(f"{'gRPC echo server':24}{me:16.0f}")
print(f"{'sampan gRPC infer':24}{mg:16.0f}" + (f"   ratio sampan/echo {mg / me:.2f}" if me else ""))
if bs:
    print(f"{'base sampan HTTP':24}{statistics.median(bs):16.0f}   ratio base/nginx {res['base_ratio_over_nginx']:.2f} (per round)")
    print(f"{'base sampan gRPC':24}{statistics.median(bg):16.0f}")
print(f"written {out}")
PYEOF
