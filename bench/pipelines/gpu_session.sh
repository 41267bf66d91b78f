#!/usr/bin/env bash
# One device call for issue #18 on a GPU, after bench/gpu_peers/python_session.sh's `ext` step has
# compiled the Python extension into /tmp/sampan_py (carry build-cuda/carry: bundle.tar.xz from
# bench/gpu_peers/bundle.sh, pybundle.tar.xz from python_bundle.sh, ocr/ from
# bench/gpu_zoo/stage_ocr.sh plus ppocr_keys_v1.txt and DejaVuSans.ttf):
#   ocr:     bench/pipelines/ocr_bench.py --backend cuda --precision fp16: the served OCR pipeline
#            (networks on the GPU, processing graphs on the CPU backend) against the same graphs
#            back to back in one process;
#   ocr_cpu: the same with every model on the CPU backend of this machine's cores.
# Logs and JSON in $OUT/session/, packed into $OUT/session.tgz after each step.
#   OUT=$OUT STEPS=ext bash bench/gpu_peers/python_session.sh; OUT=$OUT bash bench/pipelines/gpu_session.sh
set -u
source "$(dirname "$0")/../gpu_zoo/session_lib.sh"
STEPS=${STEPS:-ocr ocr_cpu}
PY=/tmp/sampan_py
M=/tmp/pipeline_models
C=build-cuda/carry/ocr
mkdir -p $M
for k in det rec cls; do cp $C/ppocr_$k.onnx $M/ocr_$k.onnx; done
cp $C/ppocr_keys_v1.txt $M/
export SAMPAN_LABEL_FONT=$PWD/$C/DejaVuSans.ttf
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
if has ocr; then
  stamp "ocr on cuda fp16"
  timeout -k 5 ${OCR_TIMEOUT:-330} python3 bench/pipelines/ocr_bench.py --sampan $B/sampan --python-path $PY \
    --backend cuda --precision fp16 --clients ${CLIENTS:-16} --seconds ${SECONDS_PER_RUN:-20} --models $M \
    --out $OUT/ocr_cuda_fp16.json > $OUT/ocr_cuda.txt 2>&1
  echo "rc=$?"; tail -30 $OUT/ocr_cuda.txt
fi
if has ocr_cpu; then
  stamp "ocr on the cpu backend"
  timeout -k 5 ${OCR_CPU_TIMEOUT:-200} python3 bench/pipelines/ocr_bench.py --sampan $B/sampan --python-path $PY \
    --backend cpu --clients ${CLIENTS:-16} --seconds ${SECONDS_PER_RUN:-20} --models $M \
    --out $OUT/ocr_cpu.json > $OUT/ocr_cpu.txt 2>&1
  echo "rc=$?"; tail -30 $OUT/ocr_cpu.txt
fi
stamp done
