#!/usr/bin/env python3
"""On the GPU machine: the control-flow models of tests/models/build_control_flow.py (NMS as a
Loop with an If inside, greedy GRU decoding in a Loop, Scans) run by `sampan run --backend cuda`
against onnxruntime (CPU, FP32), relative L2 < 1e-4 per output, as imported and with --optimize,
on the inputs tests/models/test_control_flow.py uses (no pytest needed here). Each run is also
made under SAMPAN_CUDA_PROFILE=1: the subgraph contexts print their own step profiles (the
body's nodes on CUDA kernels), counted per model in the report.
Usage: control_flow_cuda.py --sampan BIN --out DIR"""
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "models"))
import build_control_flow as cf  # noqa: E402

CASES = {
    "cf_nms_loop": [lambda rng: cf.nms_inputs(rng, 64), lambda rng: cf.nms_inputs(rng, 5),
                    lambda rng: {**cf.nms_inputs(rng, 16), "scores": np.full(16, 0.1, np.float32)}],
    "cf_gru_decode": [lambda rng: cf.gru_inputs(rng, 12), lambda rng: cf.gru_inputs(rng, 1),
                      lambda rng: cf.gru_inputs(rng, 0)],
    "cf_scan_cumsum": [lambda rng: cf.cumsum_inputs(rng), lambda rng: cf.cumsum_inputs(rng, 1, 2, 3),
                       lambda rng: cf.cumsum_inputs(rng, 16, 1, 4)],
}


def rel_l2(a, e):
    a, e = a.astype(np.float64), e.astype(np.float64)
    d = np.linalg.norm(e)
    return float(np.linalg.norm(a - e) / d) if d > 0 else float(np.linalg.norm(a - e))


def run_sampan(sampan, backend, model, inputs, work, extra, env):
    work.mkdir(parents=True, exist_ok=True)
    cmd = [sampan, "run", str(model), "--backend", backend, "--output-dir", str(work / "out"), *extra]
    for name, value in inputs.items():
        f = work / f"{name}.npy"
        np.save(f, value)
        cmd += ["--input", f"{name}={f}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if p.returncode != 0:
        return None, p.stdout[-1500:] + p.stderr[-1500:]
    outs = {f.stem: np.load(f) for f in (work / "out").glob("*.npy")}
    return outs, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sampan", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="cuda", help="(another backend: to try this script off the GPU machine)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, build in cf.MODELS.items():
        import onnx
        onnx.save(build(), str(out / f"{name}.onnx"))
    failed = 0
    prof_env = {**os.environ, "SAMPAN_CUDA_PROFILE": "1"}
    for name, cases in CASES.items():
        model = out / f"{name}.onnx"
        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        for i, make in enumerate(cases):
            inputs = make(np.random.default_rng(20260 + i))
            want = dict(zip(names, sess.run(None, inputs)))
            for extra in ([], ["--optimize"]):
                tag = f"{name}[{i}]{' optimized' if extra else ''}"
                got, log = run_sampan(a.sampan, a.backend, model, inputs, out / "work" / f"{name}_{i}_{len(extra)}", extra, prof_env)
                if got is None:
                    failed += 1
                    print(f"FAILED {tag}: sampan run failed:\n{log}")
                    continue
                profiles = len(re.findall(r"=== CUDA step profile", log))  # contexts that ran device steps
                errs = []
                for k, e in want.items():
                    g = got.get(k.replace("/", "_").replace("\\", "_").replace(":", "_"))
                    if g is None or g.shape != e.shape or g.dtype != e.dtype:
                        errs.append(f"{k}: {None if g is None else (g.shape, g.dtype)} vs {(e.shape, e.dtype)}")
                        continue
                    err = rel_l2(g, e)
                    if not err < 1e-4:
                        errs.append(f"{k}: rel L2 {err:.3e}")
                status = "ok" if not errs else "FAILED " + "; ".join(errs)
                failed += bool(errs)
                print(f"{tag:34s} {status:8s} step profiles printed (enclosing + subgraph contexts): {profiles}")
                if i == 0 and not extra:
                    (out / f"{name}.profile.txt").write_text(log)
                    for line in log.splitlines():  # where each subgraph ran (SAMPAN_CUDA_PROFILE)
                        if line.startswith("=== CUDA subgraph"):
                            print("    " + line[4:])
    print(f"control flow on {a.backend}: {'all passed' if not failed else f'{failed} FAILED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
