#!/usr/bin/env bash
# One device call for issue #21 on a GPU (carry build-cuda/carry from bench/gpu_peers/bundle.sh):
#   1. exports ResNet-50 (b32) and BERT-base (b32) with torch (bench/gpu_zoo/export_zoo.py),
#   2. `sampan publish` of each on the cuda backend: version 1 (plans built and timed on this GPU,
#      bench with the device memory one engine and context take), then version 2 of the same model
#      through the accuracy gate against version 1, both run on the GPU,
#   3. `sampan deploy kubernetes` sizing a gpu overlay from those reports.
# Everything lands in $OUT/deploy/ (the reports, configs, publish logs, the overlay); the repository
# layout without model files is packed as $OUT/deploy/repo.tgz so the sizing can be re-run and the
# overlay validated on the CPU machine (kubectl is not on the GPU machine).
set -u
OUT=${OUT:-gpu_out}
B=/tmp/sampan_bundle
W=/tmp/deploy_session
D=$OUT/deploy
mkdir -p $B $W/models $W/repo $D && D=$(cd $D && pwd)
tar -C $B -xJf build-cuda/carry/bundle.tar.xz || { echo "no build-cuda/carry/bundle.tar.xz"; exit 1; }
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
S=$B/sampan
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $D/gpu.txt
echo "== export ($(date +%T))"
timeout -k 5 240 python3 bench/gpu_zoo/export_zoo.py --out $W/models --models "resnet50 bert_base_b32" --ref none \
  > $D/export.log 2>&1; echo "rc=$?"; tail -3 $D/export.log
W=$W python3 - <<'EOF'
import os, pathlib
import numpy as np
import onnx
W = pathlib.Path(os.environ["W"])
for name, slo in (("resnet50", 20), ("bert_base_b32", 30)):
    m = onnx.load(str(W / "models" / f"{name}.onnx"), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    cfg = W / "cfg" / name
    cfg.mkdir(parents=True, exist_ok=True)
    s = W / "samples" / name
    s.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for inp in m.graph.input:
        if inp.name in inits:
            continue
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        for k in range(2):
            if inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
                a = rng.standard_normal(shape).astype(np.float32)
            else:
                hi = 2 if ("mask" in inp.name or "type" in inp.name) else 1000
                a = rng.integers(0, hi, shape).astype(np.int64)
            np.save(s / f"{inp.name}.{k}.npy", a)
    (cfg / "config.pbtxt").write_text(
        f'name: "{name}"\ninstance_group [ {{ count: 2 kind: KIND_GPU }} ]\n'
        f'sampan {{ precision: "fp16" latency_slo_ms: {slo} }}\n')
    print(name, "samples:", sorted(p.name for p in s.iterdir()))
EOF
for name in resnet50 bert_base_b32; do
  echo "== publish $name v1 ($(date +%T))"
  timeout -k 5 120 $S publish --onnx $W/models/$name.onnx --repository $W/repo --model $name \
    --config $W/cfg/$name/config.pbtxt --benchSecs 3 > $D/publish_${name}_v1.txt 2>&1; echo "rc=$?"
  cat $D/publish_${name}_v1.txt
  echo "== publish $name v2 through the gate ($(date +%T))"
  timeout -k 5 120 $S publish --onnx $W/models/$name.onnx --repository $W/repo --model $name \
    --accuracyData $W/samples/$name --accuracyBound 0.999 --benchSecs 3 > $D/publish_${name}_v2.txt 2>&1; echo "rc=$?"
  cat $D/publish_${name}_v2.txt
done
echo "== deploy kubernetes ($(date +%T))"
$S deploy kubernetes --repository $W/repo --out $D/overlay --base deploy/kubernetes/overlays/gpu \
  --peak-rps resnet50=20000 --peak-rps bert_base_b32=5000 > $D/deploy.txt 2>&1; echo "rc=$?"; cat $D/deploy.txt
(cd $W && tar -czf $D/repo.tgz --exclude='*.onnx' --exclude='*.plan' --exclude='*.key' repo)
ls -la $D
