#!/usr/bin/env python3
"""Real models on the CUDA backend vs ONNX Runtime (CPU, FP32): relative L2 error
of every output for an FP32 plan (no TF32; must be < 1e-4) and an FP16 plan (< 1e-2).
Usage: accuracy.py --sampan BIN --out DIR [--models resnet50,bert]"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(__file__))
import gpu_peers  # noqa: E402


def rel_l2(got, want):
    got, want = got.astype(np.float64), want.astype(np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sampan", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet50,bert")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    failed = 0
    for model in a.models.split(","):
        onnx = os.path.join(a.out, f"{model}.onnx")
        if model == "resnet50":
            gpu_peers.export_resnet(onnx)
            feeds = {"input": rng.standard_normal((2, 3, 224, 224)).astype(np.float32)}
        else:
            gpu_peers.export_bert(onnx)
            mask = np.ones((2, 128), np.int64)
            mask[1, 100:] = 0
            feeds = {"input_ids": rng.integers(0, 30522, (2, 128)).astype(np.int64), "attention_mask": mask}
        want = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"]).run(None, feeds)
        names = [o.name for o in ort.InferenceSession(onnx, providers=["CPUExecutionProvider"]).get_outputs()]
        args = []
        shapes = []
        for k, v in feeds.items():
            p = os.path.join(a.out, f"{model}_{k}.npy")
            np.save(p, v)
            args += ["--input", f"{k}={p}"]
            shapes.append(f"{k}:" + "x".join(str(d) for d in v.shape))
        for prec, flags, tol in (("fp32", ["--noTF32"], 1e-4), ("fp16", ["--fp16"], 1e-2)):
            plan = os.path.join(a.out, f"{model}_{prec}.plan")
            sh = ",".join(shapes)
            r = subprocess.run([a.sampan, "build", onnx, "--backend", "cuda", "--saveEngine", plan, "--minShapes", sh,
                                "--optShapes", sh, "--maxShapes", sh, "--verbose"] + flags, capture_output=True, text=True)
            with open(os.path.join(a.out, f"{model}_{prec}_build.log"), "w") as f:
                f.write(r.stdout + r.stderr)
            if r.returncode != 0:
                print(f"{model} {prec}: build FAILED: {r.stderr[-800:]}")
                failed += 1
                continue
            od = os.path.join(a.out, f"{model}_{prec}_out")
            r = subprocess.run([a.sampan, "run", plan, "--output-dir", od] + args, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{model} {prec}: run FAILED: {r.stderr[-800:]}")
                failed += 1
                continue
            for name, w in zip(names, want):
                e = rel_l2(np.load(os.path.join(od, f"{name}.npy")), w)
                ok = e < tol
                failed += not ok
                print(f"{model} {prec} {name}: rel L2 {e:.3e} (limit {tol:g}) {'ok' if ok else 'FAIL'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
