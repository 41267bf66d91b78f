#!/usr/bin/env python3
"""Per-layer profile of one bench/cpu_peers model: Sampan's CPU steps against OpenVINO's
per-node performance counts (its PERF_COUNT property), to find where a gap comes from.

  .venv/bin/python bench/cpu_peers/layer_profile.py ocr_det_640 --batch 1 --sampan build/sampan

Sampan: `sampan bench` of a fixed-shape cpu plan with SAMPAN_CPU_PROFILE=1 (per-step mean time,
from the program's own timers). OpenVINO: `get_profiling_info()` summed over the timed runs (real
time per executed node; nodes OpenVINO fused away report status NOT_RUN and are left out).
Both print totals by layer type and the slowest layers; --json writes everything.
The per-step timers add a little to Sampan's total (one clock read per step)."""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cpu_peers as bcp  # noqa: E402  (model specs, inputs, plan building)

STEP_RE = re.compile(r"^\s*([0-9.]+) ms\s+[0-9.]+%\s+(.*)$")


def sampan_profile(binary: Path, onnx_path: Path, shapes: dict, threads: int, iters: int, work: Path):
    runner = bcp.Sampan(binary, onnx_path, shapes, threads, work)
    env = dict(os.environ, SAMPAN_CPU_PROFILE="1")
    cmd = [str(binary), "bench", str(runner.plan), "--threads", str(threads), "--warmUp", "300",
           "--iterations", str(iters), "--duration", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"sampan bench failed:\n{proc.stdout}\n{proc.stderr}")
    steps, total = [], None
    for line in proc.stderr.splitlines():
        if line.startswith("cpu profile:"):
            m = re.search(r"([0-9.]+) ms/run", line)
            total = float(m.group(1)) if m else None
            steps = []  # the last program's profile (the bench's own), not the warm-up's
            continue
        m = STEP_RE.match(line)
        if m:
            steps.append({"ms": float(m.group(1)), "label": m.group(2)})
    if total is None:
        raise RuntimeError("sampan printed no cpu profile (is this a cpu plan?):\n" + proc.stderr[-2000:])
    return total, steps


def sampan_kind(label: str) -> str:
    """A step's kind: the op or kernel name its label starts with."""
    return re.split(r"[\s(\[:]", label.strip(), maxsplit=1)[0] or label


def openvino_profile(onnx_path: Path, inputs: dict, threads: int, iters: int):
    import openvino as ov
    core = ov.Core()
    model = core.read_model(str(onnx_path))
    model.reshape({n: ov.PartialShape(list(v.shape)) for n, v in inputs.items()})
    cfg = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
           "INFERENCE_PRECISION_HINT": "f32", "PERF_COUNT": True}
    req = core.compile_model(model, "CPU", cfg).create_infer_request()
    for _ in range(2):
        req.infer(inputs)
    acc = defaultdict(lambda: {"ms": 0.0, "type": "", "exec": ""})
    for _ in range(iters):
        req.infer(inputs)
        for p in req.get_profiling_info():
            if str(p.status).endswith("NOT_RUN"):
                continue
            a = acc[p.node_name]
            a["ms"] += p.real_time.total_seconds() * 1e3 / iters
            a["type"], a["exec"] = p.node_type, p.exec_type
    nodes = [{"ms": v["ms"], "label": f"{v['type']} {k} [{v['exec']}]", "type": v["type"], "exec": v["exec"]}
             for k, v in acc.items()]
    return sum(n["ms"] for n in nodes), sorted(nodes, key=lambda n: -n["ms"])


def by_kind(rows, key):
    out = defaultdict(lambda: [0.0, 0])
    for r in rows:
        k = key(r)
        out[k][0] += r["ms"]
        out[k][1] += 1
    return sorted(out.items(), key=lambda kv: -kv[1][0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a bench_cpu_peers model name (resnet50, ocr_det_640, ...)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--top", type=int, default=25, help="slowest layers to print for each runtime")
    ap.add_argument("--sampan", default=os.environ.get("SAMPAN_BIN", str(bcp.ROOT / "build" / "sampan")))
    ap.add_argument("--models-dir", default=str(bcp.ROOT / "build" / "models"))
    ap.add_argument("--cnn-dir", default=str(bcp.ROOT / "build" / "bench_models"))
    ap.add_argument("--json", help="write both profiles here")
    args = ap.parse_args()

    specs = bcp.model_specs(Path(args.models_dir), Path(args.cnn_dir))
    if args.model not in specs:
        print(f"unknown model {args.model} (known: {', '.join(specs)})", file=sys.stderr)
        return 2
    err = bcp.ensure_models([args.model], specs, Path(args.models_dir), Path(args.cnn_dir))
    if err:
        print(f"layer_profile: {err}", file=sys.stderr)
        return 1
    path, shape_fn, kind = specs[args.model]
    shapes = shape_fn(args.batch)
    inputs = bcp.make_inputs(shapes, kind, seed=args.batch)
    work = Path(tempfile.mkdtemp(prefix="layer_profile_"))
    s_total, s_steps = sampan_profile(Path(args.sampan), path, shapes, args.threads, args.iters, work)
    o_total, o_nodes = openvino_profile(path, inputs, args.threads, args.iters)

    print(f"{args.model} b{args.batch}, {args.threads} threads, {args.iters} runs: "
          f"Sampan {s_total:.2f} ms in {len(s_steps)} steps, OpenVINO {o_total:.2f} ms in {len(o_nodes)} nodes")
    for name, rows, key in (("Sampan steps by kind", s_steps, lambda r: sampan_kind(r["label"])),
                            ("OpenVINO nodes by type [implementation]", o_nodes,
                             lambda r: f"{r['type']} [{r['exec']}]")):
        print(f"\n{name}:")
        for k, (ms, n) in by_kind(rows, key)[:20]:
            print(f"  {ms:9.3f} ms {n:4d}x  {k}")
    for name, rows in (("Sampan", s_steps), ("OpenVINO", o_nodes)):
        print(f"\n{name}: slowest {args.top}")
        for r in rows[:args.top]:
            print(f"  {r['ms']:9.3f} ms  {r['label'][:150]}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "model": args.model, "batch": args.batch, "threads": args.threads, "iters": args.iters,
            "sampan": {"total_ms": s_total, "steps": s_steps},
            "openvino": {"total_ms": o_total, "nodes": o_nodes}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
