#!/usr/bin/env bash
# Served ResNet-50 on the GPU machine (issue #7): one FP16 plan taking uint8 NHWC
# images, timed offline (`sampan bench`) and served by `sampan serve` with dynamic
# batching (several instance counts) and without it, driven by `sampan perf`
# (system shared memory, closed loop). Writes JSON, CSV, SVG charts and a summary
# to $OUT. Usage (GPU machine, carrying build-cuda/carry): bash bench/serve_gpu/run.sh
# Knobs: MAXB (max batch, 128), INSTANCES ("2 4"), DELAY_US (2000), LEVELS
# (concurrency range, 64:384:64), PROTO (http), WINDOW_MS (2000), BUCKETS (batch sizes
# timed offline besides MAXB, "1 8 32 64 96").
set -u
OUT=${OUT:-gpu_out}
W=/tmp/serve
B=/tmp/sampan_bundle
mkdir -p "$OUT" "$W" "$B"
[ -n "${SAMPAN:-}" ] || [ -x $B/sampan ] || tar -C $B -xJf build-cuda/carry/bundle.tar.xz || exit 1
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
S=${SAMPAN:-$B/sampan}
MAXB=${MAXB:-128}
INSTANCES=${INSTANCES:-"2 4"}
DELAY_US=${DELAY_US:-2000}
LEVELS=${LEVELS:-64:384:64}
PROTO=${PROTO:-http}
WINDOW_MS=${WINDOW_MS:-2000}
GPUS=${GPUS-"gpus: [ 0 ] "}
MEAN=123.675,116.28,103.53
STD=58.395,57.12,57.375

[ -f $W/resnet50.onnx ] || python3 -c "
import sys; sys.path.insert(0, 'bench/gpu_peers')
from gpu_peers import export_resnet; export_resnet('$W/resnet50.onnx')" || exit 1
echo "== build (FP16, uint8-nhwc input, batch 1..$MAXB)"
/usr/bin/time -f "build wall %e s" $S build $W/resnet50.onnx --backend ${BACKEND:-cuda} ${PREC---fp16} --input-format uint8-nhwc \
  --mean $MEAN --std $STD --minShapes input:1x224x224x3 --optShapes input:${MAXB}x224x224x3 \
  --maxShapes input:${MAXB}x224x224x3 --saveEngine $W/resnet50_u8.plan > $OUT/serve_build.log 2>&1 || { tail $OUT/serve_build.log; exit 1; }
tail -3 $OUT/serve_build.log

echo "== offline (sampan bench, batch $MAXB)"
for streams in 1 2 4; do
  $S bench --loadEngine $W/resnet50_u8.plan --shapes input:${MAXB}x224x224x3 --useCudaGraph --streams $streams \
    --duration ${OFFLINE_S:-3} --json $OUT/offline_s$streams.json > $OUT/offline_s$streams.log 2>&1
  echo "streams $streams (with H2D/D2H): $(grep -m1 Throughput $OUT/offline_s$streams.log)"
done
$S bench --loadEngine $W/resnet50_u8.plan --shapes input:${MAXB}x224x224x3 --useCudaGraph --noDataTransfers \
  --duration ${OFFLINE_S:-3} --json $OUT/offline_resident.json > $OUT/offline_resident.log 2>&1
echo "inputs resident: $(grep -m1 Throughput $OUT/offline_resident.log)"
# Each batch bucket the server will run, inputs resident: the plan was tuned at
# $MAXB, other sizes take the libraries' heuristics.
for b in ${BUCKETS:-1 8 32 64 96}; do
  [ "$b" -le "$MAXB" ] || continue
  $S bench --loadEngine $W/resnet50_u8.plan --shapes input:${b}x224x224x3 --useCudaGraph --noDataTransfers \
    --duration ${BUCKET_S:-1} > $OUT/bucket_b$b.log 2>&1
  echo "bucket $b resident: $(grep -m1 Throughput $OUT/bucket_b$b.log) | $(grep -m1 '^Latency' $OUT/bucket_b$b.log | grep -o 'median = [0-9.]* ms')"
done

repo() {  # NAME INSTANCES BATCHING(1/0)
  mkdir -p $W/repo/$1/1
  ln -sf $W/resnet50_u8.plan $W/repo/$1/1/model.plan
  {
    echo "max_batch_size: $MAXB"
    echo 'input [ { name: "input" data_type: TYPE_UINT8 dims: [ 224, 224, 3 ] } ]'
    echo "output [ { name: \"${OUTNAME:-logits}\" data_type: TYPE_FP32 dims: [ 1000 ] } ]"
    echo "instance_group [ { count: $2 kind: ${KIND:-KIND_GPU} $GPUS} ]"
    [ "$3" = 1 ] && echo "dynamic_batching { max_queue_delay_microseconds: $DELAY_US }"
  } > $W/repo/$1/config.pbtxt
}
rm -rf $W/repo
for n in $INSTANCES; do repo resnet_i$n $n 1; done
repo resnet_nobatch 2 0

$S serve --model-repository $W/repo --http-port 18000 --grpc-port 18001 --metrics-port 18002 \
  --enable-shared-memory > $OUT/serve.log 2>&1 &
SRV=$!
ready() { python3 -c "import urllib.request as u; u.urlopen('http://localhost:18000/v2/health/ready', timeout=2)" 2>/dev/null; }
for i in $(seq 1 120); do ready && break; sleep 1; done
ready || { echo "server not ready"; tail -20 $OUT/serve.log; kill $SRV; exit 1; }
port=18000; [ "$PROTO" = grpc ] && port=18001
perf() {  # MODEL LEVELS TAG
  timeout 300 $S perf -m $1 -u localhost:$port -i $PROTO --shared-memory system --concurrency-range $2 \
    -p $WINDOW_MS -r 4 -s 15 --json $OUT/perf_$3.json -f $OUT/perf_$3.csv --chart $OUT/perf_$3.svg \
    > $OUT/perf_$3.log 2>&1
  echo "-- $3 (rc $?)"; grep -E "^(Concurrency|  Client|  Server)" $OUT/perf_$3.log
}
for n in $INSTANCES; do perf resnet_i$n $LEVELS batched_i$n; done
perf resnet_nobatch ${NOBATCH_LEVELS:-8:64:8} nobatch
python3 -c "import urllib.request as u; print(u.urlopen('http://localhost:18002/metrics').read().decode())" | grep -E "^nv_inference_(count|exec_count)|^nv_gpu_utilization" > $OUT/metrics.txt
kill -TERM $SRV; wait $SRV
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader > $OUT/gpu.txt
