#!/usr/bin/env python3
"""FP8 against FP16 on the GPU, side by side in one run (issue #16's GPU bars for transformers).

For each model exported by export_zoo.py (its ONNX, input .npy files and the PyTorch FP32
reference NAME.ref.npy that run_zoo.py writes), this:
  1. writes calibration samples disjoint from the measured input (export_zoo.sample_inputs with
     other seeds) as DIR/INPUT.K.npy;
  2. builds the model twice on --backend cuda: `--fp16`, and `--fp8 --calibData DIR` (FP8 MatMuls
     through cuBLASLt, the other layers FP16);
  3. times both with `sampan bench --useCudaGraph --noDataTransfers` (the same flags as the zoo);
  4. runs both on the exported input and compares each with the FP32 reference (rel L2; cosine of
     the worst row).
Writes OUT/gpu_fp8_<card>.{json,md} (h200, h100, ...). Usage (on the GPU machine, after zoo.sh has exported and run
the models):
  python3 bench/gpu_zoo/fp8_compare.py --sampan /tmp/sampan_bundle/sampan --models-dir /tmp/zoo/models \
      --models "bert_base_b128 bert_base_b32 minilm_l6" --out-dir $OUT
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_zoo  # noqa: E402  (sample_inputs, the model table)


def run(cmd, timeout, log):
    t0 = time.time()
    log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
    log.flush()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, text=True)
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), 124
        out += f"\n[fp8_compare] killed after {timeout} s\n"
    log.write(out + f"\n[rc={rc}, {time.time() - t0:.1f} s]\n")
    log.flush()
    return rc, out, time.time() - t0


def calib_samples(entry, meta, directory, count, seed0):
    os.makedirs(directory, exist_ok=True)
    batch = meta.get("batch", entry.batch)
    for k in range(count):
        rng_inputs = sample_with_seed(entry, batch, seed0 + k)
        for name, value in rng_inputs.items():
            np.save(os.path.join(directory, f"{name}.{k}.npy"), value)


def sample_with_seed(entry, batch, seed):
    # export_zoo.sample_inputs draws from default_rng(1): draw the same kinds with another seed.
    saved = np.random.default_rng
    try:
        np.random.default_rng = lambda _s=None: saved(seed)
        return export_zoo.sample_inputs(entry, batch)
    finally:
        np.random.default_rng = saved


def device_tag():
    """'h200', 'h100', ... from nvidia-smi (the results file is named after the card that ran)."""
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "gpu"
    for t in ("H200", "H100", "A100", "L40S", "L4"):
        if t in name:
            return t.lower()
    return "gpu"


def compare(got, want):
    got = got.astype(np.float64).reshape(want.shape[0], -1)
    want = want.astype(np.float64).reshape(want.shape[0], -1)
    rel = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
    cos = (got * want).sum(1) / np.maximum(np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1), 1e-30)
    return rel, float(cos.min())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sampan", default="/tmp/sampan_bundle/sampan")
    ap.add_argument("--models-dir", default="/tmp/zoo/models")
    ap.add_argument("--models", default="bert_base_b128")
    ap.add_argument("--work", default="/tmp/fp8")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "."))
    ap.add_argument("--calib-samples", type=int, default=2)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--build-timeout", type=float, default=240)
    ap.add_argument("--fp8-flags", default="", help="more flags for the FP8 build (e.g. --calibMethod percentile=99.99)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out_dir, exist_ok=True)
    rows = []
    log = open(os.path.join(a.out_dir, "gpu_fp8.log"), "a")
    for name in a.models.replace(",", " ").split():
        entry = export_zoo.BY_NAME[name]
        meta_path = os.path.join(a.models_dir, name + ".json")
        onnx = os.path.join(a.models_dir, name + ".onnx")
        ref = os.path.join(a.models_dir, name + ".ref.npy")
        row = {"model": name, "error": None}
        rows.append(row)
        if not (os.path.exists(meta_path) and os.path.exists(onnx)):
            row["error"] = f"not exported ({meta_path})"
            continue
        with open(meta_path) as f:
            meta = json.load(f)
        row["batch"] = meta.get("batch", entry.batch)
        calib = os.path.join(a.work, name + "_calib")
        calib_samples(entry, meta, calib, a.calib_samples, seed0=1000)
        inputs = meta.get("inputs") or {n: {"file": f"{name}.{n}.npy"} for n, _, _ in entry.inputs}
        errors = []
        outputs = {}
        for fmt, flags in (("fp16", ["--fp16"]), ("fp8", ["--fp8", "--calibData", calib] + shlex.split(a.fp8_flags))):
            plan = os.path.join(a.work, f"{name}.{fmt}.plan")
            build = [a.sampan, "build", "--onnx", onnx, "--saveEngine", plan, "--backend", "cuda", "--verbose"] + flags
            if meta.get("profile"):
                build += ["--minShapes", meta["profile"], "--optShapes", meta["profile"], "--maxShapes", meta["profile"]]
            rc, out, dt = run(build, a.build_timeout, log)
            if rc != 0:
                errors.append(f"{fmt} build ({rc}): {out[-500:]}")
                continue
            row[f"{fmt}_build_s"] = round(dt, 1)
            for line in out.splitlines():
                if line.startswith("fp8 ") or line.startswith("host nodes:"):
                    row.setdefault(f"{fmt}_notes", []).append(line.strip())
            bj = os.path.join(a.work, f"{name}.{fmt}.bench.json")
            rc, out, _ = run([a.sampan, "bench", "--loadEngine", plan, "--useCudaGraph", "--noDataTransfers",
                              "--duration", str(a.duration), "--json", bj], 180, log)
            if rc == 0:
                with open(bj) as f:
                    j = json.load(f)
                row[f"{fmt}_items_s"] = j["throughput_qps"] * row["batch"]
                row[f"{fmt}_compute_ms"] = j["compute_ms"]["median"]
            else:
                errors.append(f"{fmt} bench ({rc}): {out[-300:]}")
            outd = os.path.join(a.work, f"{name}.{fmt}.out")
            cmd = [a.sampan, "run", plan, "--output-dir", outd]
            for n, im in inputs.items():
                cmd += ["--input", f"{n}={os.path.join(a.models_dir, im['file'])}"]
            rc, out, _ = run(cmd, 180, log)
            npys = [f for f in os.listdir(outd)] if os.path.isdir(outd) else []
            if rc != 0 or not npys:
                errors.append(f"{fmt} run ({rc}): {out[-300:]}")
                continue
            got = np.load(os.path.join(outd, sorted(npys)[0]))
            outputs[fmt] = got
            # The PyTorch FP32 reference when run_zoo.py wrote it, else Sampan's FP16 output (itself
            # ~1.5e-3 from FP32 on these models: the FP8 error dominates).
            if os.path.exists(ref):
                want, row["reference"] = np.load(ref), "pytorch fp32"
            elif fmt == "fp8" and "fp16" in outputs:
                want, row["reference"] = outputs["fp16"], "sampan fp16"
            else:
                continue
            if got.shape == want.shape:
                row[f"{fmt}_rel_l2"], row[f"{fmt}_min_cosine"] = compare(got, want)
            else:
                errors.append(f"{fmt} output shape {got.shape} != reference {want.shape}")
        if row.get("fp16_items_s") and row.get("fp8_items_s"):
            row["fp8_over_fp16"] = row["fp8_items_s"] / row["fp16_items_s"]
        row["error"] = "; ".join(errors) or None
        print(json.dumps(row), flush=True)
    tag = device_tag()
    for r in rows:
        r["device"] = tag
    with open(os.path.join(a.out_dir, f"gpu_fp8_{tag}.json"), "w") as f:
        json.dump(rows, f, indent=1)
    lines = ["| model | batch | FP16 items/s | FP8 items/s | FP8 / FP16 | FP16 rel L2 | FP8 rel L2 | FP8 min cosine | reference | FP8 build s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]

    def f(v, spec):
        return format(v, spec) if isinstance(v, (int, float)) else "—"
    for r in rows:
        lines.append(f"| {r['model']} | {r.get('batch', '—')} | {f(r.get('fp16_items_s'), ',.0f')} | "
                     f"{f(r.get('fp8_items_s'), ',.0f')} | {f(r.get('fp8_over_fp16'), '.2f')} | "
                     f"{f(r.get('fp16_rel_l2'), '.2e')} | {f(r.get('fp8_rel_l2'), '.2e')} | "
                     f"{f(r.get('fp8_min_cosine'), '.5f')} | {r.get('reference', '—')} | {f(r.get('fp8_build_s'), '.1f')} |")
        if r.get("error"):
            lines.append(f"|  | error: {r['error'][:300]} | | | | | | | | |")
    with open(os.path.join(a.out_dir, f"gpu_fp8_{tag}.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
