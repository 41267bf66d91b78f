#!/usr/bin/env python3
"""CPU peer benchmark: Sampan (`sampan bench` on a cpu plan) vs ONNX Runtime vs OpenVINO.

For each model and batch size the three runtimes are timed in alternating rounds (Sampan,
ORT, OpenVINO, Sampan, ...) with the same thread count, so background load hits all of them
alike; each reports the median of all its timed iterations (>= --rounds x --iters, after
warm-up). Prints a table (latency, throughput, ratio Sampan/peer) and writes JSON.

Models (see README.md): resnet50, mobilenet_v2, efficientnet_b0 (torchvision, random weights,
dynamic batch: bench/cpu_peers/export_cnns.py), PaddleOCR det 640x640 and rec 48x320
(tests/models/copy_ocr.py), MiniLM-L6 at sequence 128 (tests/models/build_minilm.py).

Usage:
  .venv/bin/python bench/cpu_peers/bench_cpu_peers.py [--threads 2] [--batches 1,8]
      [--models resnet50,...] [--rounds 4] [--iters 6] [--json build/bench/cpu_peers.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def model_specs(models_dir: Path, cnn_dir: Path):
    """name -> (onnx path, {input: shape(batch)}, {input: dtype})"""
    img = lambda b: {"input": (b, 3, 224, 224)}
    return {
        "resnet50": (cnn_dir / "resnet50.onnx", img, "f"),
        "mobilenet_v2": (cnn_dir / "mobilenet_v2.onnx", img, "f"),
        "efficientnet_b0": (cnn_dir / "efficientnet_b0.onnx", img, "f"),
        "ocr_det_640": (models_dir / "ocr_det.onnx", lambda b: {"x": (b, 3, 640, 640)}, "f"),
        "ocr_rec_48x320": (models_dir / "ocr_rec.onnx", lambda b: {"x": (b, 3, 48, 320)}, "f"),
        "minilm_seq128": (cnn_dir / "minilm_l6_ids.onnx", lambda b: {"input_ids": (b, 128)}, "i"),
    }


def make_minilm_ids_only(src: Path, dst: Path) -> None:
    """MiniLM with attention_mask = 1 and token_type_ids = 0 computed inside the graph, so the
    only input is input_ids. `sampan bench` feeds random integers 0..9, which are valid token
    ids but not valid type ids (2 types); every runtime times this same model."""
    import onnx
    from onnx import helper, TensorProto
    m = onnx.load(str(src))
    dst.parent.mkdir(parents=True, exist_ok=True)
    g = m.graph
    keep = [i for i in g.input if i.name == "input_ids"]
    nodes = [helper.make_node("Shape", ["input_ids"], ["bench_ids_shape"]),
             helper.make_node("ConstantOfShape", ["bench_ids_shape"], ["attention_mask"],
                              value=helper.make_tensor("one", TensorProto.INT64, [1], [1])),
             helper.make_node("ConstantOfShape", ["bench_ids_shape"], ["token_type_ids"],
                              value=helper.make_tensor("zero", TensorProto.INT64, [1], [0]))]
    del g.input[:]
    g.input.extend(keep)
    old = list(g.node)
    del g.node[:]
    g.node.extend(nodes + old)
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))


def ensure_models(models: list, specs: dict, models_dir: Path, cnn_dir: Path) -> str:
    """Makes the models the run needs and lacks: the torchvision CNNs with Debian's torch
    (export_cnns.py), the OCR and MiniLM models with tests/models/export_all.sh, then the
    input_ids-only MiniLM. Returns an error message, or "" when everything is there."""
    missing = [m for m in models if m in specs and not specs[m][0].exists()]
    cnns = [m for m in missing if specs[m][0].parent == cnn_dir and m != "minilm_seq128"]
    if cnns:
        cmd = ["/usr/bin/python3", str(ROOT / "bench" / "cpu_peers" / "export_cnns.py"), "--out", str(cnn_dir)]
        print("cpu_peers: exporting " + ", ".join(cnns) + ": " + " ".join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            return "export_cnns.py failed (it needs Debian's python3-torch and python3-torchvision)"
    minilm = models_dir / "minilm_l6.onnx"
    need_models_dir = any(specs[m][0].parent == models_dir for m in missing) or (
        "minilm_seq128" in missing and not minilm.exists())
    if need_models_dir:
        cmd = ["bash", str(ROOT / "tests" / "models" / "export_all.sh"), str(models_dir)]
        print("cpu_peers: making the OCR and MiniLM models: " + " ".join(cmd), flush=True)
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            return "tests/models/export_all.sh failed"
    if "minilm_seq128" in models and not specs["minilm_seq128"][0].exists():
        if not minilm.exists():
            return f"{minilm} missing after tests/models/export_all.sh"
        make_minilm_ids_only(minilm, specs["minilm_seq128"][0])
    return ""


def make_inputs(shapes: dict, kind: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if kind == "i":  # token ids 0..9, as `sampan bench` draws them
            out[name] = rng.integers(0, 10, size=shape, dtype=np.int64)
        else:
            out[name] = rng.uniform(-1, 1, size=shape).astype(np.float32)
    return out


def shape_arg(shapes: dict) -> str:
    return ",".join(f"{n}:{'x'.join(str(d) for d in s)}" for n, s in shapes.items())


class Sampan:
    name = "sampan"
    bf16 = False  # --sampan-bf16: plans built with --bf16 (set from the command line)

    def precision_args(self) -> list:
        return ["--bf16"] if self.bf16 else []

    def __init__(self, binary: Path, onnx_path: Path, shapes: dict, threads: int, workdir: Path):
        self.binary, self.threads = binary, threads
        self.plan = workdir / f"{onnx_path.stem}_{'_'.join(str(s[0]) for s in shapes.values())}.plan"
        self.times = workdir / "times.json"
        s = shape_arg(shapes)
        cmd = [str(binary), "build", str(onnx_path), "--backend", "cpu", *self.precision_args(),
               "--minShapes", s, "--optShapes", s, "--maxShapes", s, "-o", str(self.plan)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"sampan build failed:\n{proc.stdout}\n{proc.stderr}")

    def run(self, iters: int) -> list:
        summary = self.times.with_suffix(".summary.json")
        cmd = [str(self.binary), "bench", str(self.plan), "--threads", str(self.threads), "--warmUp", "300",
               "--iterations", str(iters), "--duration", "0", "--exportTimes", str(self.times),
               "--json", str(summary)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"sampan bench failed:\n{proc.stdout}\n{proc.stderr}")
        self.runs_on = json.loads(summary.read_text()).get("runs_on", "")
        return [float(r["latencyMs"]) for r in json.loads(self.times.read_text())][:iters]


class OnnxRuntime:
    name = "onnxruntime"

    def __init__(self, onnx_path: Path, inputs: dict, threads: int):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
        self.inputs = inputs

    def run(self, iters: int) -> list:
        for _ in range(2):
            self.sess.run(None, self.inputs)
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            self.sess.run(None, self.inputs)
            out.append((time.perf_counter() - t0) * 1e3)
        return out


class OpenVINO:
    name = "openvino"

    def __init__(self, onnx_path: Path, inputs: dict, threads: int):
        import openvino as ov
        core = ov.Core()
        model = core.read_model(str(onnx_path))
        model.reshape({n: ov.PartialShape(list(v.shape)) for n, v in inputs.items()})
        cfg = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
               "INFERENCE_PRECISION_HINT": "f32"}
        self.compiled = core.compile_model(model, "CPU", cfg)
        self.req = self.compiled.create_infer_request()
        self.inputs = inputs
        self.runs_on = primitive_types(self.compiled)

    def run(self, iters: int) -> list:
        for _ in range(2):
            self.req.infer(self.inputs)
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            self.req.infer(self.inputs)
            out.append((time.perf_counter() - t0) * 1e3)
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sampan", default=os.environ.get("SAMPAN_BIN", str(ROOT / "build" / "sampan")))
    ap.add_argument("--models-dir", default=str(ROOT / "build" / "models"))
    ap.add_argument("--cnn-dir", default=str(ROOT / "build" / "bench_models"))
    ap.add_argument("--models", default="resnet50,mobilenet_v2,efficientnet_b0,ocr_det_640,ocr_rec_48x320,minilm_seq128")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds per model and batch")
    ap.add_argument("--iters", type=int, default=6, help="timed iterations per runtime per round")
    ap.add_argument("--peers", default="onnxruntime,openvino")
    ap.add_argument("--sampan-bf16", action="store_true",
                    help="build Sampan's plans with --bf16 (BF16 convolutions on AVX512-BF16/AMX); the peers stay FP32")
    ap.add_argument("--json", default=str(ROOT / "build" / "bench" / "cpu_peers.json"))
    args = ap.parse_args()
    Sampan.bf16 = args.sampan_bf16

    specs = model_specs(Path(args.models_dir), Path(args.cnn_dir))
    unknown = [m for m in args.models.split(",") if m not in specs]
    if unknown:
        print(f"unknown model {unknown[0]} (known: {', '.join(specs)})", file=sys.stderr)
        return 2
    err = ensure_models(args.models.split(","), specs, Path(args.models_dir), Path(args.cnn_dir))
    if err:
        print(f"cpu_peers: {err}", file=sys.stderr)
        return 1
    results = []
    work = Path(tempfile.mkdtemp(prefix="cpu_peers_"))
    for model in args.models.split(","):
        if model not in specs:
            print(f"unknown model {model} (known: {', '.join(specs)})", file=sys.stderr)
            return 2
        path, shape_fn, kind = specs[model]
        if not path.exists():
            print(f"{model}: {path} missing (see bench/cpu_peers/README.md)", file=sys.stderr)
            return 1
        for batch in (int(b) for b in args.batches.split(",")):
            shapes = shape_fn(batch)
            inputs = make_inputs(shapes, kind, seed=batch)
            runners = [Sampan(Path(args.sampan), path, shapes, args.threads, work)]
            if "onnxruntime" in args.peers:
                runners.append(OnnxRuntime(path, inputs, args.threads))
            if "openvino" in args.peers:
                runners.append(OpenVINO(path, inputs, args.threads))
            times = {r.name: [] for r in runners}
            for _ in range(args.rounds):  # alternate, so load changes hit every runtime alike
                for r in runners:
                    times[r.name] += r.run(args.iters)
            row = {"model": model, "batch": batch, "threads": args.threads}
            for name, t in times.items():
                med = statistics.median(t)
                row[name] = {"median_ms": med, "p90_ms": float(np.percentile(t, 90)), "iterations": len(t),
                             "throughput_items_per_s": batch * 1e3 / med}
            for r in runners:  # what each runtime ran: Sampan's kernel variant, OpenVINO's primitives
                if getattr(r, "runs_on", None):
                    row[r.name]["runs_on"] = r.runs_on
            for peer in ("onnxruntime", "openvino"):
                if peer in row:
                    row[f"sampan_over_{peer}_latency"] = row["sampan"]["median_ms"] / row[peer]["median_ms"]
            results.append(row)
            print_row(row)
            sys.stdout.flush()
            write_json(Path(args.json), args, results)  # after every row: a killed run keeps its rows
    print()
    print_table(results)
    write_json(Path(args.json), args, results)
    print(f"\nwrote {args.json}")
    return 0


def write_json(out: Path, args, results) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"threads": args.threads, "rounds": args.rounds, "iters": args.iters, "cpu": cpu_name(),
            "cpu_isa_flags": cpu_isa_flags(), "sampan_cpu_isa": os.environ.get("SAMPAN_CPU_ISA", "native"),
            "sampan_precision": "bf16" if args.sampan_bf16 else "fp32",
            "onnxruntime_isa": "MLAS picks its kernels by CPUID (no cap): the best of cpu_isa_flags it has kernels for",
            "load_average": os.getloadavg()}
    try:
        import onnxruntime, openvino
        meta["onnxruntime"] = onnxruntime.__version__
        meta["openvino"] = openvino.__version__
    except Exception:  # a peer not installed: its columns are absent
        pass
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def cpu_isa_flags() -> list:
    """The vector-ISA flags /proc/cpuinfo lists (what every runtime here may use)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                keep = ("avx", "fma", "amx", "f16c")
                return sorted(f for f in line.split(":", 1)[1].split() if f.startswith(keep))
    except OSError:
        pass
    return []


def primitive_types(compiled) -> dict:
    """OpenVINO's executed primitives by type ("brgconv_avx512_amx": 12, ...), from its runtime model."""
    counts = {}
    try:
        for op in compiled.get_runtime_model().get_ops():
            rt = op.get_rt_info()
            if "primitiveType" in rt:
                t = str(rt["primitiveType"].astype(str) if hasattr(rt["primitiveType"], "astype") else rt["primitiveType"])
                counts[t] = counts.get(t, 0) + 1
    except Exception as e:  # older/newer API: record why, not nothing
        return {"error": str(e)}
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def print_row(row):
    parts = [f"{row['model']:>16} b{row['batch']}"]
    for name in ("sampan", "onnxruntime", "openvino"):
        if name in row:
            parts.append(f"{name} {row[name]['median_ms']:.2f} ms")
    print("  ".join(parts))


def print_table(results):
    hdr = (f"{'model':>16} {'batch':>5} | {'sampan ms':>9} {'ort ms':>9} {'ov ms':>9} | {'sampan it/s':>11} "
           f"{'ort it/s':>9} {'ov it/s':>9} | {'S/ORT lat':>9} {'S/OV lat':>9}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        g = lambda n, k: r[n][k] if n in r else float("nan")
        print(f"{r['model']:>16} {r['batch']:>5} | {g('sampan', 'median_ms'):9.2f} {g('onnxruntime', 'median_ms'):9.2f} "
              f"{g('openvino', 'median_ms'):9.2f} | {g('sampan', 'throughput_items_per_s'):11.1f} "
              f"{g('onnxruntime', 'throughput_items_per_s'):9.1f} {g('openvino', 'throughput_items_per_s'):9.1f} | "
              f"{r.get('sampan_over_onnxruntime_latency', float('nan')):9.2f} "
              f"{r.get('sampan_over_openvino_latency', float('nan')):9.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
