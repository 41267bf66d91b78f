"""GEMM probe (GPU machine): BERT-base's matrix products one at a time, Sampan (a plan
holding one MatMul + bias Add, FP16, CUDA graph, inputs on the device) against
torch.nn.functional.linear under CUDA-graph replay, so the efficiency of our
cuBLASLt choice is visible apart from everything else in the model.
Usage: python3 gemm_probe.py --sampan BIN --out DIR"""
import argparse
import json
import os
import subprocess

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from gpu_peers import time_torch

SHAPES = [  # (M tokens, K in, N out): BERT-base QKV (separate and merged), output, FFN up, FFN down
    (4096, 768, 768), (4096, 768, 2304), (4096, 768, 3072), (4096, 3072, 768),
    (16384, 768, 768), (16384, 768, 2304), (16384, 768, 3072), (16384, 3072, 768),
]


def model(m, k, n, path):
    # FP16 end to end, so the plan holds the product alone (no casts at its edges).
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) * 0.02).astype(np.float16), "w")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float16), "b")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [m, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [m, n])
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
                          "gemm", [x], [y], [w, b])
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mp.ir_version = 8
    onnx.save(mp, path)


def torch_linear(m, k, n):
    x = torch.randn(m, k, device="cuda", dtype=torch.half)
    w = torch.randn(n, k, device="cuda", dtype=torch.half) * 0.02
    b = torch.randn(n, device="cuda", dtype=torch.half)
    with torch.inference_mode():
        for _ in range(3):
            torch.nn.functional.linear(x, w, b)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(20):
                torch.nn.functional.linear(x, w, b)
        return time_torch(g.replay, iters=30) / 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sampan", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    print(f"{'M':>6} {'K':>5} {'N':>5} | {'sampan us':>9} {'TF/s':>6} | {'torch us':>8} {'TF/s':>6} | ratio")
    for m, k, n in SHAPES:
        p = os.path.join(a.out, f"g{m}_{k}_{n}")
        model(m, k, n, p + ".onnx")
        r = subprocess.run([a.sampan, "build", p + ".onnx", "--backend", "cuda", "--fp16", "--saveEngine", p + ".plan",
                            "--verbose"], capture_output=True, text=True)
        tactic = [l.strip() for l in r.stdout.splitlines() if "algo=" in l]
        if r.returncode:
            print("build failed", r.stderr[-500:])
            continue
        r = subprocess.run([a.sampan, "bench", "--loadEngine", p + ".plan", "--useCudaGraph", "--noDataTransfers",
                            "--duration", "1", "--json", p + ".json"], capture_output=True, text=True)
        if r.returncode:
            print("bench failed", r.stderr[-500:])
            continue
        with open(p + ".json") as f:
            js = json.load(f)
        lat = js.get("compute_ms", js.get("latency_ms", {}))
        s_ms = lat["median"] if isinstance(lat, dict) else float(lat)
        t_ms = torch_linear(m, k, n)
        fl = 2.0 * m * k * n
        rows.append(dict(m=m, k=k, n=n, sampan_ms=s_ms, torch_ms=t_ms))
        print(f"{m:>6} {k:>5} {n:>5} | {s_ms*1e3:>9.1f} {fl/s_ms/1e9:>6.0f} | {t_ms*1e3:>8.1f} {fl/t_ms/1e9:>6.0f} |"
              f" {t_ms/s_ms:.2f}  {tactic[:1]}")
    with open(os.path.join(a.out, "gemm_probe.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
