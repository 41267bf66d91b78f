#!/usr/bin/env python3
"""CPU INT8 benchmark (issue #16): batch-1 latency of Sampan INT8 vs Sampan FP32 vs ONNX Runtime
INT8 / FP32, same thread count, one run.

Models (batch 1): resnet50 (1x3x224x224), ocr_rec (1x3x48x320), ocr_det (1x3xSxS, S = --det-size,
default 320 as the calibration data). Variants, each timed as the median latency of all timed
iterations after a warm-up:
  sampan_int8_qdq       plan from ORT's QDQ model: `sampan build qdq/<m>.qdq.onnx --backend cpu`
  sampan_int8_implicit  plan from the FP32 model with Sampan's calibration:
                        `sampan build <m>.onnx --backend cpu --int8 --calibData calib/<m> --calib CACHE`
  sampan_fp32           `sampan build <m>.onnx --backend cpu`
  ort_int8              onnxruntime on qdq/<m>.qdq.onnx (CPU EP, all graph optimisations)
  ort_fp32              onnxruntime on <m>.onnx
Sampan plans are built with fixed shapes (min = opt = max) and timed with `sampan bench --threads T
--warmUp MS --iterations N --duration 0 --exportTimes ... --json ...`; ORT with
intra_op_num_threads = T, one inter-op thread, sequential execution, `--warmup-runs` untimed runs.
The variants alternate in --rounds rounds (Sampan variants, then ORT's, ...) so background load
hits all alike. A variant that fails (e.g. a build the binary does not support) is recorded with
its error and the run goes on.

The models and data come from tests/models/export_all.sh (FP32) and tests/models/export_qdq.py
(qdq/, calib/, heldout/). The CPU's ISA (avx2, avx512f, avx512_vnni, avx_vnni, amx_int8, ...)
is recorded: without VNNI, u8 x s8 int8 GEMMs (vpmaddubsw) are both slower per op and saturating.

Usage:
  .venv/bin/python bench/cpu_int8/run.py [--sampan build/sampan] [--threads 2] [--iters 20]
      [--rounds 3] [--warmup-ms 500] [--models resnet50,ocr_rec,ocr_det] [--det-size 320]
      [--out bench/results/cpu_int8]      # writes OUT.json and OUT.md
Run it with a Release build; numbers from an ASan build are flagged in the output.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ["sampan_int8_qdq", "sampan_int8_implicit", "sampan_fp32", "ort_int8", "ort_fp32"]
ISA_FLAGS = ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx_vnni", "avx_vnni_int8", "amx_tile", "amx_int8", "amx_bf16"]


def shapes_of(model: str, det_size: int) -> dict:
    return {"resnet50": {"input": (1, 3, 224, 224)},
            "ocr_rec": {"x": (1, 3, 48, 320)},
            "ocr_det": {"x": (1, 3, det_size, det_size)}}[model]


def shape_arg(shapes: dict) -> str:
    return ",".join(f"{n}:{'x'.join(str(d) for d in s)}" for n, s in shapes.items())


def cpu_info() -> dict:
    info = {"model_name": "unknown", "flags": {}, "logical_cpus": os.cpu_count(), "machine": platform.machine()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    flags = set()
    for line in text.splitlines():
        if line.startswith("model name") and info["model_name"] == "unknown":
            info["model_name"] = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags |= set(line.split(":", 1)[1].split())
    info["flags"] = {f: f in flags for f in ISA_FLAGS}
    vnni = any(info["flags"].get(f) for f in ("avx512_vnni", "avx_vnni", "amx_int8"))
    info["int8_dot_product"] = ("amx_int8" if info["flags"].get("amx_int8") else
                                "avx512_vnni" if info["flags"].get("avx512_vnni") else
                                "avx_vnni" if info["flags"].get("avx_vnni") else
                                "none (avx2 vpmaddubsw: int16 saturation)" if info["flags"].get("avx2") else "none")
    info["vnni"] = vnni
    return info


def is_asan(binary: Path) -> bool:
    """True when the binary carries AddressSanitizer's runtime (its numbers are meaningless)."""
    needle, tail = b"__asan_init", b""
    try:
        with open(binary, "rb") as f:
            while chunk := f.read(1 << 24):
                if needle in tail + chunk:
                    return True
                tail = chunk[-len(needle):]
    except OSError:
        pass
    return False


def run(cmd: list, what: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        why = next((ln.strip() for ln in proc.stderr.splitlines() if ln.strip()), "no message")
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {why}\ncommand: {' '.join(map(str, cmd))}\n"
                           f"{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
    return proc


class SampanPlan:
    def __init__(self, name: str, binary: Path, onnx_path: Path, shapes: dict, threads: int, work: Path,
                 extra=()):
        self.name, self.binary, self.threads = name, binary, threads
        self.plan = work / f"{name}.plan"
        self.times, self.summary_path = work / f"{name}.times.json", work / f"{name}.bench.json"
        s = shape_arg(shapes)
        t0 = time.perf_counter()
        run([binary, "build", onnx_path, "--backend", "cpu", "--minShapes", s, "--optShapes", s, "--maxShapes", s,
             *extra, "--saveEngine", self.plan], f"sampan build ({name})")
        self.build_s = time.perf_counter() - t0
        self.summary = None

    def time(self, iters: int, warmup_ms: int) -> list:
        run([self.binary, "bench", self.plan, "--threads", self.threads, "--warmUp", warmup_ms,
             "--iterations", iters, "--duration", 0, "--exportTimes", self.times, "--json", self.summary_path],
            f"sampan bench ({self.name})")
        self.summary = json.loads(self.summary_path.read_text())
        return [float(r["latencyMs"]) for r in json.loads(self.times.read_text())][:iters]


class OrtSession:
    def __init__(self, name: str, onnx_path: Path, feed: dict, threads: int, warmup_runs: int):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.name, self.feed, self.warmup_runs = name, feed, warmup_runs
        t0 = time.perf_counter()
        self.sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
        self.build_s = time.perf_counter() - t0
        self.summary = None

    def time(self, iters: int, warmup_ms: int) -> list:
        for _ in range(self.warmup_runs):
            self.sess.run(None, self.feed)
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            self.sess.run(None, self.feed)
            out.append((time.perf_counter() - t0) * 1e3)
        return out


def feed_for(models_dir: Path, model: str, shapes: dict) -> dict:
    """Held-out sample 0 when its shape is the benchmark's, else uniform [-1, 1) (as sampan bench)."""
    feed = {}
    rng = np.random.default_rng(0)
    for name, shape in shapes.items():
        f = models_dir / "heldout" / model / f"{name}.0.npy"
        a = np.load(f) if f.exists() else None
        feed[name] = a if a is not None and a.shape == tuple(shape) else \
            rng.uniform(-1, 1, size=shape).astype(np.float32)
    return feed


def make_runners(model: str, args, work: Path) -> tuple:
    models_dir = Path(args.models_dir)
    shapes = shapes_of(model, args.det_size)
    fp32, qdq, calib = models_dir / f"{model}.onnx", models_dir / "qdq" / f"{model}.qdq.onnx", models_dir / "calib" / model
    feed = feed_for(models_dir, model, shapes)
    binary = Path(args.sampan)
    makers = {
        "sampan_int8_qdq": lambda: SampanPlan("sampan_int8_qdq", binary, qdq, shapes, args.threads, work),
        "sampan_int8_implicit": lambda: SampanPlan(
            "sampan_int8_implicit", binary, fp32, shapes, args.threads, work,
            ["--int8", "--calibData", calib, "--calib", work / f"{model}.calib"]),
        "sampan_fp32": lambda: SampanPlan("sampan_fp32", binary, fp32, shapes, args.threads, work),
        "ort_int8": lambda: OrtSession("ort_int8", qdq, feed, args.threads, args.warmup_runs),
        "ort_fp32": lambda: OrtSession("ort_fp32", fp32, feed, args.threads, args.warmup_runs),
    }
    runners, errors = [], {}
    for v in args.variants.split(","):
        for f in ((fp32, qdq) if v != "sampan_fp32" and v != "ort_fp32" else (fp32,)):
            if not f.exists():
                errors[v] = f"{f} missing (run tests/models/export_all.sh)"
        if v in errors:
            continue
        try:
            runners.append(makers[v]())
        except Exception as e:  # noqa: BLE001 - record and go on with the other variants
            errors[v] = str(e).strip()
    return shapes, runners, errors


def bench_model(model: str, args, work: Path) -> dict:
    shapes, runners, errors = make_runners(model, args, work)
    times = {r.name: [] for r in runners}
    for _ in range(args.rounds):
        for r in list(runners):
            try:
                times[r.name] += r.time(args.iters, args.warmup_ms)
            except Exception as e:  # noqa: BLE001
                errors[r.name] = str(e).strip()
                runners.remove(r)
                times.pop(r.name)
    row = {"model": model, "batch": 1, "shapes": {k: list(v) for k, v in shapes.items()}, "variants": {}}
    for r in runners:
        t = times[r.name]
        row["variants"][r.name] = {
            "median_ms": statistics.median(t), "p90_ms": float(np.percentile(t, 90)), "min_ms": min(t),
            "iterations": len(t), "build_or_load_s": round(r.build_s, 3),
            **({"sampan_bench_last_round": r.summary} if r.summary else {})}
    for v, e in errors.items():
        row["variants"][v] = {"error": e}
    med = {v: d["median_ms"] for v, d in row["variants"].items() if "median_ms" in d}
    ratios = {}
    for a, b in (("sampan_fp32", "sampan_int8_qdq"), ("sampan_fp32", "sampan_int8_implicit"),
                 ("ort_int8", "sampan_int8_qdq"), ("ort_fp32", "ort_int8"), ("ort_fp32", "sampan_fp32")):
        if a in med and b in med:
            ratios[f"{a}_over_{b}"] = med[a] / med[b]  # > 1: b is faster
    row["speedups"] = ratios
    print(f"{model:>9}: " + "  ".join(f"{v} {med[v]:.2f} ms" for v in VARIANTS if v in med)
          + "".join(f"\n           {v}: ERROR {e.splitlines()[0][:150]}" for v, e in errors.items()), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sampan", default=os.environ.get("SAMPAN_BIN", str(ROOT / "build" / "sampan")))
    ap.add_argument("--models-dir", default=os.environ.get("SAMPAN_MODELS", str(ROOT / "build" / "models")))
    ap.add_argument("--models", default="resnet50,ocr_rec,ocr_det")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per variant per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--warmup-ms", type=int, default=500, help="sampan bench --warmUp, every round")
    ap.add_argument("--warmup-runs", type=int, default=3, help="untimed ORT runs before each round")
    ap.add_argument("--det-size", type=int, default=320)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_int8"), help="writes OUT.json, OUT.md")
    args = ap.parse_args()
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS] + \
        [m for m in args.models.split(",") if m not in ("resnet50", "ocr_rec", "ocr_det")]
    if unknown:
        print(f"cpu_int8: unknown model/variant {unknown[0]}", file=sys.stderr)
        return 2
    binary = Path(args.sampan)
    if not binary.exists():
        print(f"cpu_int8: sampan binary {binary} not found (--sampan or SAMPAN_BIN)", file=sys.stderr)
        return 1
    asan = is_asan(binary)
    if asan:
        print(f"cpu_int8: WARNING: {binary} is an AddressSanitizer build; its latencies mean nothing", flush=True)

    import onnxruntime
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout.strip()
    meta = {"sampan": str(binary), "sampan_version": version, "asan_build": asan, "onnxruntime": onnxruntime.__version__,
            "threads": args.threads, "iters_per_round": args.iters, "rounds": args.rounds,
            "warmup_ms": args.warmup_ms, "ort_warmup_runs": args.warmup_runs, "det_size": args.det_size,
            "cpu": cpu_info(), "load_average_start": os.getloadavg(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    print(f"cpu_int8: {meta['cpu']['model_name']}, int8 dot product: {meta['cpu']['int8_dot_product']}, "
          f"threads {args.threads}", flush=True)
    results = []
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix=f"cpu_int8_{model}_") as work:  # plans, caches, times
            results.append(bench_model(model, args, Path(work)))
        write(Path(args.out), meta, results)
    meta["load_average_end"] = os.getloadavg()
    write(Path(args.out), meta, results)
    print(f"cpu_int8: wrote {args.out}.json and {args.out}.md")
    return 0


def write(out: Path, meta: dict, results: list) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    cpu = meta["cpu"]
    flags = ", ".join(f for f, on in cpu["flags"].items() if on) or "unknown"
    lines = [
        "# CPU INT8 benchmark (issue #16)",
        "",
        f"`bench/cpu_int8/run.py`, {meta['date']}. CPU: {cpu['model_name']} ({cpu['logical_cpus']} logical CPUs); "
        f"ISA: {flags}; int8 dot product: **{cpu['int8_dot_product']}**.",
        f"Threads {meta['threads']}; batch 1; median of {meta['rounds']} x {meta['iters_per_round']} timed "
        f"iterations after warm-up (sampan bench --warmUp {meta['warmup_ms']} ms; ORT {meta['ort_warmup_runs']} runs). "
        f"Sampan: `{meta['sampan_version']}`; onnxruntime {meta['onnxruntime']}.",
        "",
    ]
    if meta["asan_build"]:
        lines += ["**These numbers come from an AddressSanitizer build and mean nothing about speed.**", ""]
    lines += ["| model | input | Sampan INT8 (QDQ) | Sampan INT8 (--int8) | Sampan FP32 | ORT INT8 (QDQ) | ORT FP32 |"
              " Sampan FP32/INT8(QDQ) | ORT INT8 / Sampan INT8(QDQ) | ORT FP32/INT8 |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    errors = []
    for row in results:
        v = row["variants"]

        def cell(name):
            d = v.get(name)
            if d is None:
                return "—"
            if "error" in d:
                errors.append(f"- {row['model']} {name}: {d['error'].splitlines()[0][:300]}")
                return "error"
            return f"{d['median_ms']:.2f} ms"

        def ratio(key):
            r = row["speedups"].get(key)
            return f"{r:.2f}x" if r else "—"
        shape = "x".join(str(d) for d in next(iter(row["shapes"].values())))
        lines.append(f"| {row['model']} | {shape} | {cell('sampan_int8_qdq')} | {cell('sampan_int8_implicit')} | "
                     f"{cell('sampan_fp32')} | {cell('ort_int8')} | {cell('ort_fp32')} | "
                     f"{ratio('sampan_fp32_over_sampan_int8_qdq')} | {ratio('ort_int8_over_sampan_int8_qdq')} | "
                     f"{ratio('ort_fp32_over_ort_int8')} |")
    lines += ["", "Ratios > 1 mean the second-named variant is faster (latency ratio)."]
    if errors:
        lines += ["", "Errors:", *errors]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
