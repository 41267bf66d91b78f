#!/usr/bin/env bash
# Three models on one GPU (issue #23), one call on the GPU machine: unpack the carried build
# (build-cuda/carry/bundle.tar.xz; the OCR recognizer from build-cuda/carry/ocr, staged with
# bench/gpu_zoo/stage_ocr.sh), export ResNet-50 (torchvision) and YOLOv5s (bench/gpu_zoo/
# yolo_blocks.py) with a dynamic batch, give PP-OCR's recognizer a dynamic batch at 3x48x320, build
# three FP16 plans, then bench/serve_gpu/multi_model.py: each model solo, the three together, and
# ResNet-50 at PRIORITY_MAX under a YOLO overload. Results: $OUT/multi_model_cuda.{json,md},
# rewritten after every phase. Plans are kept in /tmp/serve between calls on a warm machine.
# Knobs: SLOS ("resnet=15,yolo=30,ocr=15"), INSTANCES (2), RATES, SCALES, WINDOW_MS (1000),
# RUN_S (time box of multi_model.py, default 420 s).
set -u
T0=$(date +%s)
OUT=${OUT:-gpu_out}
W=/tmp/serve
B=/tmp/sampan_bundle
mkdir -p "$OUT" "$W" "$B"
[ -x $B/sampan ] || tar -C $B -xJf build-cuda/carry/bundle.tar.xz || { echo "carry build-cuda/carry"; exit 1; }
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
MEAN=123.675,116.28,103.53
STD=58.395,57.12,57.375
[ -f $W/resnet50.onnx ] || timeout 180 python3 -c "
import sys; sys.path.insert(0, 'bench/gpu_peers')
from gpu_peers import export_resnet; export_resnet('$W/resnet50.onnx')" || exit 1
[ -f $W/yolov5s.onnx ] || timeout 240 python3 -c "
import sys, torch; sys.path.insert(0, 'bench/gpu_zoo')
import yolo_blocks
torch.manual_seed(0)
m = yolo_blocks.yolov5s().eval()
torch.onnx.export(m, torch.randn(1, 3, 640, 640), '$W/yolov5s.onnx', input_names=['images'], output_names=['output0'],
                  dynamic_axes={'images': {0: 'N'}, 'output0': {0: 'N'}}, opset_version=17, dynamo=False)" || exit 1
[ -f $W/ppocr_rec.onnx ] || timeout 60 python3 -c "
import onnx
m = onnx.load('build-cuda/carry/ocr/ppocr_rec.onnx')
x = next(i for i in m.graph.input if i.name == 'x')
d = x.type.tensor_type.shape.dim
d[0].Clear(); d[0].dim_param = 'N'
for k, v in ((1, 3), (2, 48), (3, 320)):
    d[k].Clear(); d[k].dim_value = v
del m.graph.value_info[:]
onnx.save(m, '$W/ppocr_rec.onnx')" || { echo "no OCR recognizer: run bench/gpu_zoo/stage_ocr.sh and carry build-cuda/carry"; exit 1; }
build() {  # name onnx input shape-without-batch maxb extra...
  local name=$1 onnx=$2 in=$3 shape=$4 maxb=$5; shift 5
  [ -f $W/$name.plan ] && return 0
  echo "== build $name (FP16, batch 1..$maxb) $(( $(date +%s) - T0 )) s"
  timeout 400 $B/sampan build $onnx --backend cuda --fp16 "$@" --minShapes $in:1x$shape \
    --optShapes $in:${maxb}x$shape --maxShapes $in:${maxb}x$shape --saveEngine $W/$name.plan \
    > "$OUT/multi_build_$name.log" 2>&1 || { tail "$OUT/multi_build_$name.log"; return 1; }
}
build resnet50_u8 $W/resnet50.onnx input 224x224x3 128 --input-format uint8-nhwc --mean $MEAN --std $STD || exit 1
build yolov5s $W/yolov5s.onnx images 3x640x640 32 || exit 1
build ppocr_rec $W/ppocr_rec.onnx x 3x48x320 64 || exit 1
echo "== serve $(( $(date +%s) - T0 )) s"
timeout -k 10 ${RUN_S:-420} python3 bench/serve_gpu/multi_model.py --sampan $B/sampan --backend cuda \
  --plan resnet=$W/resnet50_u8.plan --plan yolo=$W/yolov5s.plan --plan ocr=$W/ppocr_rec.plan \
  --slo-ms ${SLOS:-resnet=15,yolo=30,ocr=15} --max-batch resnet=128,yolo=32,ocr=64 --instances ${INSTANCES:-2} \
  --rates ${RATES:-0.5,0.7,0.9} --scales ${SCALES:-1,0.9,0.8,0.6,0.4} --window-ms ${WINDOW_MS:-1000} \
  --shared-memory --max-threads 768 --work /tmp/multi_model --out "$OUT/multi_model_cuda.json" 2>&1 \
  | tee "$OUT/multi_model_cuda.log" | tail -40
cp /tmp/multi_model/serve.log "$OUT/multi_model_serve.log" 2>/dev/null
echo "== done in $(( $(date +%s) - T0 )) s"
