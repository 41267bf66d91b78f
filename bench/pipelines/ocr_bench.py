#!/usr/bin/env python3
"""OCR images/s through the served `ocr` pipeline against the same work in one process (issue #18).

served:     `sampan serve` with examples/pipelines' ocr repository; CLIENTS HTTP clients send the
            label images (examples/pipelines/labels.py) round robin for SECONDS, each waiting for
            its answer before the next request (KServe v2 with the binary-data extension, written
            here with the standard library: the GPU machine has no tritonclient).
in-process: the Python API (`import sampan`) runs the same seven graphs (decode + resize, det,
            boxes + classifier crops, cls, recognizer crops, rec, CTC + filter) back to back per
            image, one image at a time, built as the server builds them: "the three models back
            to back".
ratio = served images/s / in-process images/s (the bar: >= 0.8). Both answer the same text (checked).

Usage: python bench/pipelines/ocr_bench.py --sampan build/sampan --python-ext EXT.so | --python-path DIR
         [--backend cpu|cuda] [--precision fp16] [--clients 8] [--seconds 20] [--models build/models]
         [--out bench/results/X.json]
--python-ext: the built extension (_sampan*.so of the same build), copied beside a copy of
python/sampan; --python-path: a folder holding an assembled `sampan` package (the GPU session's).
"""
import argparse
import http.client
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "pipelines"))
import labels  # noqa: E402
import make_pipelines  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def infer_http(conn, data):
    """One `ocr` request over a kept-alive http.client connection: IMAGE as a binary BYTES element
    (4-byte length + bytes), TEXT asked for as JSON."""
    header = json.dumps({"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [1],
                                     "parameters": {"binary_data_size": 4 + len(data)}}],
                         "outputs": [{"name": "TEXT", "parameters": {"binary_data": False}}]}).encode()
    body = header + len(data).to_bytes(4, "little") + data
    conn.request("POST", "/v2/models/ocr/infer", body=body,
                 headers={"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"})
    r = conn.getresponse()
    payload = r.read()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {payload[:300]!r}")
    n = int(r.getheader("Inference-Header-Content-Length") or len(payload))
    out = json.loads(payload[:n])["outputs"][0]
    return list(out["data"])


def served(args, repo, images):
    ports = [free_port() for _ in range(3)]
    cmd = [args.sampan, "serve", "--model-repository", str(repo), "--backend", args.backend,
           "--http-port", str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2])]
    log = open(Path(args.work) / "serve.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    connect = lambda: http.client.HTTPConnection("127.0.0.1", ports[0], timeout=600)  # noqa: E731
    try:
        t0 = time.time()
        while True:
            try:
                c = connect()
                c.request("GET", "/v2/health/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() - t0 > 900:
                raise SystemExit(f"ocr_bench: the server did not come up (see {log.name})")
            time.sleep(0.5)
        c = connect()
        answers = [infer_http(c, d) for d in images]  # also makes every shape's plan
        done, errors = [0], []
        lock = threading.Lock()
        stop = time.time() + args.seconds

        def client(k):
            cc = connect()
            i = k
            while time.time() < stop:
                try:
                    if infer_http(cc, images[i % len(images)]) != answers[i % len(images)]:
                        errors.append("answer changed")
                except Exception as e:  # noqa: BLE001 - reported
                    errors.append(str(e))
                    return
                with lock:
                    done[0] += 1
                i += 1

        t0 = time.time()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - t0
        if errors:
            raise SystemExit(f"ocr_bench: served errors: {errors[:3]}")
        c.request("GET", "/v2/models/ocr_rec/stats")
        rec = json.loads(c.getresponse().read())["model_stats"][0]
        return done[0] / elapsed, answers, {"rec_rows": int(rec["inference_count"]),
                                            "rec_executions": int(rec["execution_count"])}
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()


def in_process(args, repo, images):
    if args.python_path:
        sys.path.insert(0, args.python_path)
    else:
        pkg = Path(args.work) / "py"
        shutil.copytree(ROOT / "python" / "sampan", pkg / "sampan", dirs_exist_ok=True)
        shutil.copy(args.python_ext, pkg / "sampan" / Path(args.python_ext).name)
        sys.path.insert(0, str(pkg))
    import sampan
    order = ["ocr_pre", "ocr_det", "ocr_boxes", "ocr_cls", "ocr_crop", "ocr_rec", "ocr_text"]
    ctx = {}
    for name in order:
        if name in ("ocr_pre", "ocr_boxes", "ocr_crop", "ocr_text"):  # processing graphs: the CPU backend
            plan = sampan.build(str(repo / name / "1" / "model.onnx"), backend="cpu")
        else:  # a network: as its config builds it (make_pipelines.Net)
            profiles = make_pipelines.CUDA_PROFILES.get(name) if args.backend == "cuda" else None
            batching = name in ("ocr_cls", "ocr_rec")
            if not profiles and batching and args.backend == "cuda":  # the server's default: batch 1..32
                profiles = {"x": ([1, 3, 48, 192], [32, 3, 48, 192], [32, 3, 48, 192])}
            plan = sampan.build(str(repo / name / "1" / "model.onnx"), backend=args.backend,
                                precision=args.precision or "fp32",
                                profiles=[{k: tuple(map(tuple, v)) for k, v in profiles.items()}] if profiles else None)
        ctx[name] = sampan.Engine(plan).create_context()
    det_out, cls_out, rec_out = "sigmoid_0.tmp_0", "save_infer_model/scale_0.tmp_1", "softmax_11.tmp_0"

    def run(data):
        pre = ctx["ocr_pre"].run({"IMAGE": np.array([data], dtype=object)})
        prob = ctx["ocr_det"].run({"x": pre["DET_IN"]})[det_out]
        boxes = ctx["ocr_boxes"].run({"PROB": prob, "IMG": pre["IMG"], "SRC_SIZE": pre["SRC_SIZE"]})
        n = boxes["BOXES"].shape[0]
        if n == 0:
            return []
        cls = ctx["ocr_cls"].run({"x": boxes["CLS_IN"]})[cls_out]
        rec_in = ctx["ocr_crop"].run({"IMG": pre["IMG"], "BOXES": boxes["BOXES"], "CLS": cls})["REC_IN"]
        rec = ctx["ocr_rec"].run({"x": rec_in})[rec_out]
        text = ctx["ocr_text"].run({"PROBS": rec, "BOXES": boxes["BOXES"], "RATIO": pre["RATIO"],
                                    "ORIG_SIZE": pre["ORIG_SIZE"]})["TEXT"]
        return [t.decode() if isinstance(t, bytes) else str(t) for t in text]

    answers = [run(d) for d in images]  # warm-up
    count, t0 = 0, time.time()
    while time.time() - t0 < args.seconds:
        run(images[count % len(images)])
        count += 1
    return count / (time.time() - t0), answers


def machine(sampan):
    """The CPU's model, its cores and what `sampan info` says the CPU backend runs (ISA, threads)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = subprocess.run([sampan, "info"], capture_output=True, text=True, timeout=60).stdout
    runs = [ln.strip() for ln in info.splitlines() if ln.strip().startswith(("runs:", "threads:"))]
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                         timeout=60).stdout.strip() if shutil.which("nvidia-smi") else ""
    return {"cpu": model, "cores": os.cpu_count(), "sampan_cpu_backend": runs, "gpu": gpu,
            "SAMPAN_CPU_ISA": os.environ.get("SAMPAN_CPU_ISA", "native")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampan", required=True)
    ap.add_argument("--python-ext", default="")
    ap.add_argument("--python-path", default="")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--precision", default="")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--models", default=str(ROOT / "build" / "models"))
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    args.work = tempfile.mkdtemp(prefix="ocr_bench_")
    if not args.python_ext and not args.python_path:
        raise SystemExit("ocr_bench: give --python-ext or --python-path")
    make_pipelines.make_ocr(Path(args.work), Path(args.models), make_pipelines.Net(args.backend, args.precision))
    repo = Path(args.work) / "ocr"
    images = labels.label_images()
    ips_in, ans_in = in_process(args, repo, images)
    ips_srv, ans_srv, rec = served(args, repo, images)
    if ans_in != ans_srv:
        raise SystemExit(f"ocr_bench: the served pipeline and the in-process run disagree: {ans_srv} vs {ans_in}")
    result = {
        "backend": args.backend, "precision": args.precision or "fp32", "clients": args.clients, "seconds": args.seconds, "images": len(images),
        "lines_per_image": [len(a) for a in ans_srv], "served_images_per_s": round(ips_srv, 2),
        "in_process_images_per_s": round(ips_in, 2), "ratio": round(ips_srv / ips_in, 3), **rec,
        "machine": machine(args.sampan),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
