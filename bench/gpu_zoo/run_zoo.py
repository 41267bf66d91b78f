#!/usr/bin/env python3
"""Sampan (CUDA backend, FP16, CUDA graphs) vs PyTorch over the bench/gpu_zoo model zoo.

For each model exported by export_zoo.py (NAME.onnx, NAME.INPUT.npy, NAME.pt, NAME.json):
  1. sampan build --onnx NAME.onnx --saveEngine NAME.plan --fp16 --backend cuda
       --timingCacheFile CACHE --verbose            wall time; nodes left on host kernels
  2. sampan bench --loadEngine NAME.plan --useCudaGraph --noDataTransfers --json J
                                                      items/s = batch * qps
  3. sampan run NAME.plan --input NAME=FILE.npy --output-dir D   Sampan's output
  4. PyTorch: the same weights, FP32 on the GPU (TF32 off) -> reference output (unless
     export_zoo.py already wrote NAME.ref.npy), then FP16 (channels-last for CNNs) under
     torch.cuda.CUDAGraph replay, median of --iters replays timed with CUDA events
     (gpu_peers.py's method), same batch. PaddleOCR: no PyTorch peer; the reference is
     onnxruntime CPU FP32 (export_zoo.py).
  5. rel L2 of Sampan's output vs the FP32 reference; top-1 agreement (argmax over the
     last dim, fraction of rows that agree) for classifiers.
Every step is time-boxed (subprocess timeouts; SIGALRM around the PyTorch part); a failure
is recorded in the row's error and the next step/model goes on. After each model the row
is appended to gpu_zoo_<card>.jsonl, gpu_zoo_<card>.json/.md are rewritten (merged with the
rows already in them and in --merge-from, so several partial runs make one table) and the
logs are tarred into gpu_zoo_logs.tgz, all in --out-dir. <card> is the GPU that ran (h200,
h100, ... from nvidia-smi; --card or $ZOO_CARD say otherwise, h200 where there is no GPU):
rows of different cards never share a table.

--dry-run prints the commands without running anything; --merge-only FILE... merges
results files (JSON lists or JSON lines) into --out-dir and writes the table.
"""
import argparse
import gc
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import time

try:
    import numpy as np
except ImportError:  # --dry-run / --precheck / --merge-only need no numpy
    np = None

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import export_zoo as ez  # noqa: E402  (numpy only at import)

RESULTS = "gpu_zoo_h200"  # gpu_zoo_<card>: set by main() from --card


def device_tag(default="h200"):
    """'h200', 'h100', ... from nvidia-smi, or `default` where there is none."""
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return default
    for t in ("H200", "H100", "A100", "L40S", "L4"):
        if t in name:
            return t.lower()
    return "gpu"
FIELDS = ["model", "batch", "build_s", "build_warm_s", "host_nodes", "sampan_items_s", "torch_graph_items_s", "ratio", "rel_l2",
          "top1_agree", "torch_fp16_rel_l2", "torch_fp16_top1", "error"]
# Rough device seconds per model (build + bench + run + PyTorch), for --deadline.
EST_S = {"vgg16_bn": 35, "resnet101": 30, "wide_resnet50_2": 30, "densenet121": 35, "efficientnet_v2_s": 35,
         "inception_v3": 30, "maxvit_t": 40, "swin_t": 30, "convnext_tiny": 30, "yolov5s": 30, "yolov8n": 30,
         "bert_base_b128": 30, "resnet50_b256": 95}
EST_DEFAULT = 25  # with the warm rebuild


# ----------------------------------------------------------------------------- helpers

def rel_l2(got, want):
    got, want = got.astype(np.float64), want.astype(np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def top1(got, want):
    a = got.reshape(-1, got.shape[-1]).argmax(-1)
    b = want.reshape(-1, want.shape[-1]).argmax(-1)
    return float((a == b).mean())


def parse_host_nodes(text):
    """Nodes left on host kernels: a 'host nodes: N' line if the build prints one; else the CUDA
    builder's summary ('..., N nodes on host kernels'); else the count of per-node notes."""
    for line in text.splitlines():
        m = re.match(r"\s*host nodes:\s*(\d+)", line)
        if m:
            return int(m.group(1))
    m = re.search(r"(\d+) nodes on host kernels", text)
    if m:
        return int(m.group(1))
    return sum(1 for line in text.splitlines() if "reference kernel on the host" in line)


def parse_kernels(text):
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("kernels:")), None)


def run_cmd(cmd, timeout, log, dry=False):
    """(rc or 'timeout', output, seconds). Output (stdout + stderr) also goes to log."""
    line = " ".join(shlex.quote(c) for c in cmd)
    if dry:
        print("   $", line)
        return 0, "", 0.0
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out = r.returncode, (r.stdout or "") + (r.stderr or "")
    except subprocess.TimeoutExpired as e:
        def txt(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        rc, out = "timeout", txt(e.stdout) + txt(e.stderr) + f"\n[run_zoo] killed after {timeout} s\n"
    dt = time.time() - t0
    log.write(f"$ {line}\n{out}\n[run_zoo] rc={rc} {dt:.1f} s\n\n")
    log.flush()
    return rc, out, dt


def err_tail(out, n=400):
    lines = [l for l in out.strip().splitlines() if l.strip()]
    errs = [l for l in lines if l.startswith("error") or "Error" in l or "error:" in l]
    text = " | ".join(errs[-3:]) if errs else " | ".join(lines[-3:])
    return text[-n:]


def finite(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def atomic_write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout("timed out")


# ----------------------------------------------------------------------------- results table

def load_rows(path):
    """Rows from a JSON list, or JSON lines; [] if missing or unreadable."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read().strip()
    if not text:
        return []
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        rows = []
        for line in text.splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
        return rows


def merge_rows(*lists):
    """Later rows replace earlier ones with the same (model, batch); zoo order."""
    by = {}
    for rows in lists:
        for r in rows:
            if "model" in r:
                by[(r["model"], r.get("batch"))] = r
    order = {e.name: i for i, e in enumerate(ez.ZOO)}
    return sorted(by.values(), key=lambda r: (order.get(r["model"], 1 << 20), r["model"], r.get("batch") or 0))


def fmt(v, f, dash="—"):
    return dash if v is None else format(v, f)


def table_md(rows):
    ratios = [r["ratio"] for r in rows if finite(r.get("ratio")) and r["ratio"] > 0]
    devices = sorted({r["device"] for r in rows if r.get("device")})
    torches = sorted({r["torch"] for r in rows if r.get("torch")})
    runs = sorted({r["run_at"][:16] for r in rows if r.get("run_at")})
    bench = sorted({"on" if r["cudnn_benchmark"] else "off" for r in rows if r.get("cudnn_benchmark") is not None})
    out = ["# Sampan vs PyTorch over a model zoo, one GPU (bench/gpu_zoo)", "",
           f"Device: {', '.join(devices) or '?'}; PyTorch {', '.join(torches) or '?'} (cudnn.benchmark "
           f"{'/'.join(bench) or '?'}); runs: {', '.join(runs) or '?'}.", "",
           "Sampan: `sampan build --fp16 --backend cuda` (static shapes, tactics timed), `sampan bench --useCudaGraph "
           "--noDataTransfers` (inputs resident on the device, as PyTorch's; ‡: rows measured since `sampan bench` "
           "overlaps inferences as trtexec does, two in flight, so its throughput is the device's rate like PyTorch's "
           "event-timed replays; the other rows ran one inference at a time, their launch and wake-up gaps counted, "
           "1-3% against Sampan). PyTorch: FP16 (channels-last for CNNs) "
           "under `torch.cuda.CUDAGraph` replay, median of CUDA-event-timed replays, same batch, same weights. "
           "ratio = Sampan items/s / PyTorch items/s. rel L2 and top-1: Sampan's FP16 output vs PyTorch FP32 (TF32 off) "
           "on the same input (PaddleOCR: vs onnxruntime CPU FP32; no PyTorch peer); the last column is PyTorch's own "
           "FP16 output against the same reference, the error FP16 itself brings to these random-weight models. Random weights (fixed seed, BatchNorm "
           "statistics from one pass over random data). Build seconds include tactic timing, first with an empty timing "
           "cache, then again with the cache that build filled; host nodes: nodes left on "
           "host reference kernels.", "",
           "| model | batch | build seconds (cold cache / warm) | host nodes | Sampan items/s | PyTorch CUDA-graph items/s | ratio "
           "| rel L2 vs PyTorch FP32 | top-1 agreement | PyTorch FP16: rel L2, top-1 |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        mark = (" †" if r.get("error") else "") + (" ‡" if (r.get("sampan_in_flight") or 1) > 1 else "")
        warm = finite(r.get('build_warm_s'))
        out.append(f"| {r['model']}{mark} | {r.get('batch', '—')} | {fmt(finite(r.get('build_s')), '.1f')}"
                   f"{'' if warm is None else ' / %.1f' % warm} "
                   f"| {fmt(r.get('host_nodes'), 'd')} | {fmt(finite(r.get('sampan_items_s')), ',.0f')} "
                   f"| {fmt(finite(r.get('torch_graph_items_s')), ',.0f')} | {fmt(finite(r.get('ratio')), '.2f')} "
                   f"| {fmt(finite(r.get('rel_l2')), '.2e')} "
                   f"| {fmt(None if finite(r.get('top1_agree')) is None else 100 * r['top1_agree'], '.1f')}"
                   f"{'%' if finite(r.get('top1_agree')) is not None else ''} "
                   f"| {fmt(finite(r.get('torch_fp16_rel_l2')), '.2e')}"
                   f"{'' if finite(r.get('torch_fp16_top1')) is None else ', %.1f%%' % (100 * r['torch_fp16_top1'])} |")
    out.append("")
    if ratios:
        g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        out.append(f"Geometric mean of the ratios over the {len(ratios)} models that have one: **{g:.2f}**")
    else:
        out.append("Geometric mean of the ratios: — (no row has both numbers)")
    errs = [r for r in rows if r.get("error")]
    if errs:
        out += ["", "† errors:", ""]
        out += [f"- {r['model']} (batch {r.get('batch')}): {r['error'][:600]}" for r in errs]
    return "\n".join(out) + "\n"


def write_results(out_dir, new_rows, merge_from):
    path = os.path.join(out_dir, RESULTS + ".json")
    rows = merge_rows(*[load_rows(p) for p in merge_from if os.path.abspath(p) != os.path.abspath(path)],
                      load_rows(path), new_rows)
    atomic_write(path, json.dumps(rows, indent=1) + "\n")
    atomic_write(os.path.join(out_dir, RESULTS + ".md"), table_md(rows))
    return rows


def save_logs(out_dir, work):
    tmp = os.path.join(out_dir, "gpu_zoo_logs.tgz.tmp")
    with tarfile.open(tmp, "w:gz") as t:
        for sub in ("logs",):
            p = os.path.join(work, sub)
            if os.path.isdir(p):
                t.add(p, arcname=sub)
        for f in ("export.log",):
            p = os.path.join(work, f)
            if os.path.exists(p):
                t.add(p, arcname=f)
    os.replace(tmp, os.path.join(out_dir, "gpu_zoo_logs.tgz"))


# ----------------------------------------------------------------------------- one model

def wait_meta(entry, a):
    path = os.path.join(a.models_dir, entry.name + ".json")
    t_end = time.time() + a.wait_export
    while True:
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        alive = a.export_pid and os.path.exists(f"/proc/{a.export_pid}")
        if time.time() >= t_end or (a.export_pid and not alive):
            why = "export process ended" if a.export_pid and not alive else f"waited {a.wait_export:.0f} s"
            return {"name": entry.name, "batch": entry.batch, "error": f"not exported ({why}): no {path}"}
        time.sleep(0.5)


def time_torch(fn, iters=50, warmup=10):
    """gpu_peers.py's method: warm-up, then per-call CUDA events, median in ms."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return float(np.median(times))


def torch_part(entry, meta, inputs, ref_path, a):
    """FP32 reference (if missing) and FP16 CUDA-graph median ms."""
    import torch
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    model = ez.load_model(entry, a.models_dir)
    if not os.path.exists(ref_path):
        np.save(ref_path, ez.torch_reference(model, entry, inputs, "cuda"))
    m = model.half().cuda().eval()
    if entry.cnn:
        m = m.to(memory_format=torch.channels_last)
    ins = []
    for n, _, _ in entry.inputs:
        t = torch.from_numpy(inputs[n]).cuda()
        if t.is_floating_point():
            t = t.half()
            if entry.cnn and t.dim() == 4:
                t = t.contiguous(memory_format=torch.channels_last)
        ins.append(t)
    out = {}
    with torch.inference_mode():
        if a.eager:
            out["torch_eager_ms"] = time_torch(lambda: m(*ins))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                m(*ins)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            m(*ins)
        out["torch_graph_ms"] = time_torch(g.replay, iters=a.iters)
        # PyTorch's own FP16 error on the same input: how much of Sampan's is FP16 itself.
        y16 = m(*ins)
        if torch.is_tensor(y16) and os.path.exists(ref_path):
            got, want = y16.float().cpu().numpy(), np.load(ref_path)
            if got.shape == want.shape:
                out["torch_fp16_rel_l2"] = finite(rel_l2(got, want))
                if entry.classifier:
                    out["torch_fp16_top1"] = top1(got, want)
    g = m = model = ins = None  # noqa: F841 - free the graph's pool and the weights before empty_cache
    gc.collect()
    torch.cuda.empty_cache()
    return out


def run_model(entry, a, log):
    meta = wait_meta(entry, a) if not a.dry_run else {"batch": entry.batch}
    b = meta.get("batch", entry.batch)
    row = {k: None for k in FIELDS}
    row.update(model=entry.name, batch=b, run_at=time.strftime("%Y-%m-%d %H:%M:%S"), device=a.device_name,
               torch=a.torch_version, cudnn_benchmark=a.cudnn_benchmark, export_s=meta.get("export_s"))
    errors = []
    if "error" in meta:
        row["error"] = "export: " + meta["error"][-600:]
        return row
    md = a.models_dir
    onnx = os.path.join(md, entry.name + ".onnx")
    plan = os.path.join(a.work, "plans", entry.name + ".plan")
    logs = os.path.join(a.work, "logs")
    outd = os.path.join(a.work, "out", entry.name)
    inputs_meta = meta.get("inputs") or {n: {"file": f"{entry.name}.{n}.npy"} for n, _, _ in entry.inputs}

    # Each model's build starts from an empty timing cache of its own (the cold build), then
    # builds again with the cache it filled (the warm build): the issue's two build-time bars.
    cache = a.timing_cache or os.path.join(a.work, "cache", entry.name + ".timing")
    if not a.dry_run and not a.timing_cache:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        if os.path.exists(cache):
            os.remove(cache)
    build = [a.sampan, "build", "--onnx", onnx, "--saveEngine", plan] + shlex.split(a.build_flags) + [
        "--backend", a.backend, "--timingCacheFile", cache, "--verbose"]
    if meta.get("profile"):  # an input left dynamic: one static profile (min = opt = max)
        build += ["--minShapes", meta["profile"], "--optShapes", meta["profile"], "--maxShapes", meta["profile"]]
    bench_json = os.path.join(logs, entry.name + ".bench.json")
    bench = [a.sampan, "bench", "--loadEngine", plan, "--useCudaGraph", "--noDataTransfers", "--duration",
             str(a.duration), "--json", bench_json] + shlex.split(a.bench_args)
    run = [a.sampan, "run", plan, "--output-dir", outd]
    for n, im in inputs_meta.items():
        run += ["--input", f"{n}={os.path.join(md, im['file'])}"]

    with open(os.path.join(logs, entry.name + ".build.log"), "w") if not a.dry_run else open(os.devnull, "w") as blog:
        rc, out, dt = run_cmd(build, a.build_timeout, blog, a.dry_run)
    built = rc == 0
    if built:
        row["build_s"] = round(dt, 2)
        row["host_nodes"] = parse_host_nodes(out)
        row["kernels"] = parse_kernels(out)
        if a.warm_build:
            warm = build[:]
            warm[warm.index(plan)] = plan + ".warm"
            with open(os.path.join(logs, entry.name + ".build_warm.log"), "w") if not a.dry_run else \
                    open(os.devnull, "w") as wlog:
                wrc, wout, wdt = run_cmd(warm, a.build_timeout, wlog, a.dry_run)
            if wrc == 0:
                row["build_warm_s"] = round(wdt, 2)
            else:
                errors.append(f"warm build ({wrc}): {err_tail(wout)}")
            if not a.dry_run and os.path.exists(plan + ".warm"):
                os.remove(plan + ".warm")
    else:
        errors.append(f"build ({rc}): {err_tail(out)}")
    if built or a.dry_run:
        rc, out, _ = run_cmd(bench, a.bench_timeout, log, a.dry_run)
        if rc == 0 and not a.dry_run:
            try:
                with open(bench_json) as f:
                    j = json.load(f)
                row["sampan_items_s"] = j["throughput_qps"] * b
                row["sampan_lat_ms"] = j["latency_ms"]["median"]
                row["sampan_compute_ms"] = j["compute_ms"]["median"]
                row["bench_unstable"] = j.get("unstable")
                row["sampan_in_flight"] = j.get("in_flight", 1)
                if j.get("batch") != b:
                    errors.append(f"bench: plan batch {j.get('batch')} != {b}")
            except (OSError, KeyError, ValueError) as e:
                errors.append(f"bench json: {e}")
        elif rc != 0:
            errors.append(f"bench ({rc}): {err_tail(out)}")
        rc, out, _ = run_cmd(run, a.run_timeout, log, a.dry_run)
        if rc != 0:
            errors.append(f"run ({rc}): {err_tail(out)}")
        if a.profile and not a.dry_run:  # per-step device times (eager, events), for the log only
            prof = [a.sampan, "bench", "--loadEngine", plan, "--noDataTransfers", "--duration", "0.2",
                    "--iterations", "5", "--warmUp", "20"]
            env = dict(os.environ, SAMPAN_CUDA_PROFILE="1")
            with open(os.path.join(logs, entry.name + ".profile.txt"), "w") as pf:
                try:
                    subprocess.run(prof, stdout=subprocess.DEVNULL, stderr=pf, timeout=a.bench_timeout, env=env)
                except subprocess.TimeoutExpired:
                    pf.write(f"[run_zoo] profile killed after {a.bench_timeout} s\n")

    ref_path = os.path.join(md, entry.name + ".ref.npy")
    if a.dry_run:
        if entry.kind != "ocr":
            print(f"   torch: {entry.name} FP32 reference on cuda (TF32 off) -> {ref_path} if missing; FP16"
                  f"{' channels-last' if entry.cnn else ''} CUDA graph, median of {a.iters} replays")
        return row
    if entry.kind != "ocr" and not a.skip_torch:
        inputs = {n: np.load(os.path.join(md, im["file"])) for n, im in inputs_meta.items()}
        signal.alarm(max(1, int(a.torch_timeout)))
        try:
            t = torch_part(entry, meta, inputs, ref_path, a)
            row.update(t)
            row["torch_graph_items_s"] = b / t["torch_graph_ms"] * 1e3
            if "torch_eager_ms" in t:
                row["torch_eager_items_s"] = b / t["torch_eager_ms"] * 1e3
        except Exception as e:  # noqa: BLE001 - record, go on
            errors.append(f"torch: {type(e).__name__}: {str(e)[-400:]}")
        finally:
            signal.alarm(0)
        gc.collect()  # a failed attempt's tensors (held by its traceback until here)
        try:
            import torch
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass
    if row["sampan_items_s"] and row["torch_graph_items_s"]:
        row["ratio"] = row["sampan_items_s"] / row["torch_graph_items_s"]

    # Accuracy: Sampan's output vs the FP32 reference.
    out_name = meta.get("output") or entry.output or ""
    safe = re.sub(r"[/\\:]", "_", out_name)
    got_path = os.path.join(outd, safe + ".npy")
    if not os.path.exists(got_path) and os.path.isdir(outd):
        npys = [f for f in os.listdir(outd) if f.endswith(".npy")]
        if len(npys) == 1:
            got_path = os.path.join(outd, npys[0])
    if os.path.exists(got_path) and os.path.exists(ref_path):
        got, want = np.load(got_path), np.load(ref_path)
        if got.shape != want.shape:
            errors.append(f"output shape {list(got.shape)} != reference {list(want.shape)}")
        else:
            if not np.isfinite(got).all():
                errors.append(f"Sampan output has {int((~np.isfinite(got)).sum())} non-finite values")
            if not np.isfinite(want).all():
                errors.append(f"reference has {int((~np.isfinite(want)).sum())} non-finite values")
            row["rel_l2"] = finite(rel_l2(got, want))
            if entry.classifier:
                row["top1_agree"] = top1(got, want)
    elif built and not errors:
        errors.append(f"no output to compare ({got_path} or {ref_path} missing)")
    shutil_rm(outd)
    if not a.keep_plans and os.path.exists(plan):
        os.remove(plan)
    row["error"] = "; ".join(errors) or None
    return row


def shutil_rm(path):
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def precheck(entries, a):
    """`sampan build --dry-run` (passes + the backend's capability query, no device needed) on every
    exported model: import errors and the nodes that would stay on the host, before any GPU time."""
    print(f"{'model':20} {'rc':>4} {'host':>5}  kernels / host nodes")
    for e in entries:
        onnx = os.path.join(a.models_dir, e.name + ".onnx")
        if not os.path.exists(onnx):
            print(f"{e.name:20}  not exported ({onnx})")
            continue
        cmd = [a.sampan, "build", "--onnx", onnx, "--backend", a.backend, "--dry-run"] + shlex.split(a.build_flags)
        meta_path = os.path.join(a.models_dir, e.name + ".json")
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                prof = json.load(f).get("profile")
            if prof:
                cmd += ["--minShapes", prof, "--optShapes", prof, "--maxShapes", prof]
        with open(os.devnull, "w") as devnull:
            rc, out, _ = run_cmd(cmd, a.build_timeout, devnull)
        host = parse_host_nodes(out) if rc == 0 else None
        print(f"{e.name:20} {rc:>4} {fmt(host, 'd'):>5}  {parse_kernels(out) or err_tail(out, 300)}")
        lines = out.splitlines()
        start = next((i for i, l in enumerate(lines) if l.startswith("host nodes:")), None)
        if start is not None:
            reasons = {}
            for l in lines[start + 1:]:
                if not l.startswith("  "):
                    break
                op = l.split()[0]
                reasons[op] = reasons.get(op, 0) + 1
            if reasons:
                print(" " * 32 + "host: " + ", ".join(f"{k} x{v}" for k, v in sorted(reasons.items())))


# ----------------------------------------------------------------------------- driver

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sampan", default=os.environ.get("SAMPAN", "/tmp/sampan_bundle/sampan"))
    ap.add_argument("--models", default=os.environ.get("MODELS", "all"))
    ap.add_argument("--models-dir", default="/tmp/zoo/models", help="export_zoo.py's --out")
    ap.add_argument("--work", default="/tmp/zoo", help="plans, logs, outputs, timing cache")
    ap.add_argument("--card", default=os.environ.get("ZOO_CARD") or None,
                    help="the results' card tag (default: the GPU's, from nvidia-smi; h200 without one)")
    ap.add_argument("--out-dir", default=os.path.join(REPO, "bench", "results"),
                    help="where gpu_zoo_<card>.{json,jsonl,md} and gpu_zoo_logs.tgz go ($OUT on the device)")
    ap.add_argument("--merge-from", nargs="*", default=None,
                    help="earlier results whose rows are kept (default: bench/results/gpu_zoo_<card>.json)")
    ap.add_argument("--merge-only", nargs="*", default=None, metavar="FILE",
                    help="merge these results files into --out-dir and write the table; run nothing")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--build-flags", default="--fp16", help="precision flags for sampan build (default --fp16)")
    ap.add_argument("--timing-cache", default=None,
                    help="one cache file for every model (default: WORK/cache/NAME.timing, emptied before each "
                         "model's cold build)")
    ap.add_argument("--no-warm-build", dest="warm_build", action="store_false", default=os.environ.get("WARM_BUILD", "1") != "0",
                    help="skip the second build with the model's warm timing cache (build_warm_s)")
    ap.add_argument("--duration", type=float, default=1.0, help="sampan bench --duration (s)")
    ap.add_argument("--bench-args", default=os.environ.get("BENCH_ARGS", ""),
                    help="more sampan bench flags, e.g. '--iterations 2 --warmUp 0' (default $BENCH_ARGS)")
    ap.add_argument("--iters", type=int, default=100, help="timed PyTorch CUDA-graph replays")
    ap.add_argument("--eager", action="store_true", help="also time PyTorch eager (50 calls)")
    ap.add_argument("--cudnn-benchmark", action="store_true", default=os.environ.get("TORCH_CUDNN_BENCHMARK") == "1",
                    help="torch.backends.cudnn.benchmark = True for the PyTorch peer (gpu_peers.py leaves it off)")
    ap.add_argument("--build-timeout", type=float, default=180)
    ap.add_argument("--bench-timeout", type=float, default=120)
    ap.add_argument("--run-timeout", type=float, default=120)
    ap.add_argument("--torch-timeout", type=float, default=150)
    ap.add_argument("--wait-export", type=float, default=0, help="seconds to wait for NAME.json (export running)")
    ap.add_argument("--export-pid", type=int, default=0, help="the export process: stop waiting once it has ended")
    ap.add_argument("--deadline", type=float, default=0, help="epoch seconds: start no model expected to end later")
    ap.add_argument("--resume", action="store_true", help="skip models done by an earlier attempt (--progress file)")
    ap.add_argument("--progress", default=None, help="start/done log of this run (default WORK/progress.txt)")
    ap.add_argument("--skip-torch", action="store_true", help="Sampan steps only (no PyTorch peer; local tests)")
    ap.add_argument("--keep-plans", action="store_true")
    ap.add_argument("--profile", action="store_true", default=os.environ.get("ZOO_PROFILE") == "1",
                    help="also save LOGS/NAME.profile.txt: SAMPAN_CUDA_PROFILE=1 per-step device times")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--precheck", action="store_true",
                    help="no GPU needed: `sampan build --dry-run` on each exported model, print host nodes, run nothing else")
    a = ap.parse_args()
    global RESULTS
    RESULTS = "gpu_zoo_" + (a.card or device_tag())
    if a.merge_from is None:
        a.merge_from = [os.path.join(REPO, "bench", "results", RESULTS + ".json")]

    if a.merge_only is not None:
        os.makedirs(a.out_dir, exist_ok=True)
        rows = write_results(a.out_dir, merge_rows(*[load_rows(p) for p in a.merge_only]), [])
        print(table_md(rows))
        return 0

    entries = ez.select(a.models)
    if a.precheck:
        precheck(entries, a)
        return 0
    a.device_name = a.torch_version = None
    if not a.dry_run:
        if not os.access(a.sampan, os.X_OK):
            sys.exit(f"run_zoo.py: no sampan binary at {a.sampan} (--sampan)")
        if not a.skip_torch and any(e.kind != "ocr" for e in entries):
            import torch
            if not torch.cuda.is_available():
                sys.exit("run_zoo.py: CUDA is not available to PyTorch here: the PyTorch peer timing and the FP32 "
                         "reference need the GPU (--dry-run prints the commands; --skip-torch runs the Sampan steps alone)")
            a.device_name = torch.cuda.get_device_name(0)
            a.torch_version = torch.__version__
        for d in ("plans", "logs", "out"):
            os.makedirs(os.path.join(a.work, d), exist_ok=True)
        os.makedirs(a.out_dir, exist_ok=True)
    signal.signal(signal.SIGALRM, _alarm)

    progress = a.progress or os.path.join(a.work, "progress.txt")
    done, crashed = set(), set()
    if a.resume and os.path.exists(progress):
        with open(progress) as f:
            state = {}
            for line in f:
                verb, _, name = line.strip().partition(" ")
                state[name] = verb
        done = {n for n, v in state.items() if v == "done"}
        crashed = {n for n, v in state.items() if v == "start"}
    log = open(os.path.join(a.work, "logs", "steps.log"), "a") if not a.dry_run else open(os.devnull, "w")
    jsonl = os.path.join(a.out_dir, RESULTS + ".jsonl")
    new_rows, pending = [], []
    for e in entries:
        if e.name in done:
            continue
        if e.name in crashed:
            row = {k: None for k in FIELDS}
            row.update(model=e.name, batch=e.batch, error="run_zoo.py died while running this model (see steps.log)",
                       run_at=time.strftime("%Y-%m-%d %H:%M:%S"))
        else:
            est = EST_S.get(e.name, EST_DEFAULT)
            if a.deadline and time.time() + est > a.deadline:
                pending.append(e.name)
                continue
            print(f"== {e.name} ({time.strftime('%H:%M:%S')})", flush=True)
            if not a.dry_run:
                with open(progress, "a") as f:
                    f.write(f"start {e.name}\n")
            t0 = time.time()
            row = run_model(e, a, log)
            row["wall_s"] = round(time.time() - t0, 1)
        if a.dry_run:
            continue
        new_rows.append(row)
        with open(jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        with open(progress, "a") as f:
            f.write(f"done {e.name}\n")
        write_results(a.out_dir, new_rows, a.merge_from)
        save_logs(a.out_dir, a.work)
        print("   " + json.dumps({k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in row.items()
                                   if k in FIELDS or k == "wall_s"}), flush=True)
    if pending:
        print("== deadline: not started here (run them in the next call): MODELS=\"" + " ".join(pending) + "\"")
        if not a.dry_run:
            atomic_write(os.path.join(a.out_dir, "gpu_zoo_pending.txt"), " ".join(pending) + "\n")
    elif not a.dry_run and os.path.exists(os.path.join(a.out_dir, "gpu_zoo_pending.txt")):
        os.remove(os.path.join(a.out_dir, "gpu_zoo_pending.txt"))
    if not a.dry_run and new_rows:
        print(table_md(merge_rows(load_rows(os.path.join(a.out_dir, RESULTS + ".json")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
