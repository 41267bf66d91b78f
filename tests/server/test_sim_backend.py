"""`sampan serve` on the sim backend (a SIMULATED GPU, src/backends/sim/sim.h), the base of the
cluster rehearsals (issue #22): KIND_GPU instances spread over SAMPAN_SIM_DEVICES simulated
devices, batches wait the recorded latency of their size, answers have the model's types and
shapes, and everything is labelled sim."""

import json
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.http as httpclient

from conftest import sampan_bin


def bench_json(path, batch, median_ms, qps):
    stats = {k: median_ms for k in ("min", "max", "mean", "median", "p90", "p95", "p99")}
    path.write_text(json.dumps({"plan": "m.plan", "backend": "cuda", "runs_on": "NVIDIA H200, sm_90", "streams": 1,
                                "in_flight": 1, "batch": batch, "throughput_qps": qps,
                                "latency_ms": dict(stats, stddev=0.0)}))
    return path


def sim_repo(tmp_path, make_add_model, devices_config):
    onnx_path = tmp_path / "add.onnx"
    onnx_path.write_bytes(make_add_model())
    b1 = bench_json(tmp_path / "b1.json", 1, 10.0, 100.0)
    b8 = bench_json(tmp_path / "b8.json", 8, 20.0, 50.0)
    vdir = tmp_path / "repo" / "m" / "1"
    vdir.mkdir(parents=True)
    r = subprocess.run([sampan_bin(), "build", str(onnx_path), "--backend", "sim", "--sim-profile", str(b1),
                        "--sim-profile", str(b8), "--minShapes", "x:1x4", "--optShapes", "x:8x4", "--maxShapes",
                        "x:8x4", "-o", str(vdir / "model.plan")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "repo" / "m" / "config.pbtxt").write_text(f"""
max_batch_size: 8
dynamic_batching {{ max_queue_delay_microseconds: 3000 }}
instance_group [{devices_config}]
sampan {{ backend: "sim" }}
""")
    return tmp_path / "repo"


def series(text, name, **labels):
    out = {}
    for m in re.finditer(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), text, re.M):
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(got.get(k) == v for k, v in labels.items()):
            out[got["device"]] = float(m.group(2))
    return out


def infer(url, rows, value):
    c = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("x", [rows, 4], "FP32")
    inp.set_data_from_numpy(np.full((rows, 4), value, np.float32))
    return c.infer("m", [inp]).as_numpy("y")


def test_gpu_instances_spread_over_simulated_devices(serve, tmp_path, make_add_model):
    repo = sim_repo(tmp_path, make_add_model, "{ kind: KIND_GPU count: 1 }")
    srv = serve(repo, "--log-verbose", "1", env=dict(os.environ, SAMPAN_SIM_DEVICES="2"))
    assert "backend sim" in srv.output(), srv.output()
    requests = [(1 + i % 3, float(i % 5)) for i in range(48)]
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda rv: infer(srv.http_url, *rv), requests))
    by_input = {}
    for (rows, value), y in zip(requests, answers):
        assert y.shape == (rows, 4) and y.dtype == np.float32
        assert np.all((y >= 0) & (y < 1)), y  # the sim's filler, not x + 1
        # Deterministic: the same request gives the same answer, whichever device ran it. Batching
        # puts rows of several requests in one run, so only unbatched answers can be compared.
        by_input.setdefault((rows, value), []).append(y)
    text = srv.metrics()
    counts = series(text, "sampan_device_inference_count", model="m", version="1", backend="sim")
    assert sorted(counts) == ["0", "1"], text
    assert sum(counts.values()) == sum(r for r, _ in requests)
    assert all(v > 0 for v in counts.values()), f"one simulated device did all the work:\n{text}"


def test_one_device_is_saturated_by_its_recorded_latency(serve, tmp_path, make_add_model):
    repo = sim_repo(tmp_path, make_add_model, "{ kind: KIND_GPU count: 1 gpus: [0] }")
    srv = serve(repo, env=dict(os.environ, SAMPAN_SIM_DEVICES="1"))
    # One at a time, batch 1: each waits 10 ms on the device.
    t0 = time.monotonic()
    for i in range(10):
        infer(srv.http_url, 1, float(i))
    assert time.monotonic() - t0 >= 0.100
    # 32 clients at once: the dynamic batcher makes batches of 8 (20 ms each, the device busy 20 ms),
    # so 64 requests of one row take at least 8 batches' occupancy.
    t0 = time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda i: infer(srv.http_url, 1, float(i)), range(64)))
    elapsed = time.monotonic() - t0
    assert elapsed >= 8 * 0.020, elapsed
    text = srv.metrics()
    executions = series(text, "sampan_device_execution_count", model="m", version="1", backend="sim")
    assert sum(executions.values()) < 10 + 64, "requests were batched on the simulated device"


def test_a_device_the_simulated_machine_lacks_is_refused(serve, tmp_path, make_add_model):
    repo = sim_repo(tmp_path, make_add_model, "{ kind: KIND_GPU count: 1 gpus: [3] }")
    srv = serve(repo, env=dict(os.environ, SAMPAN_SIM_DEVICES="2"))
    status, _ = srv.get("/v2/models/m/ready")
    assert status != 200
    assert "GPU 3 does not exist: backend 'sim' sees 2 devices" in srv.output(), srv.output()
