"""Instances on devices, as `sampan serve` shows them: the per-device counts
on /metrics (sampan_device_inference_count / _execution_count) add up to the
model's nv_inference_count / nv_inference_exec_count; on a machine with
GPUs, a KIND_GPU group without `gpus` puts instances on every visible GPU,
each of them serves, and identical GPUs share one cached plan."""

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient


def series(text, name, **labels):
    """{label dict as tuple: value} for every series of `name` whose labels include `labels`."""
    out = {}
    for m in re.finditer(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), text, re.M):
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(got.get(k) == v for k, v in labels.items()):
            out[tuple(sorted(got.items()))] = float(m.group(2))
    return out


def infer_concurrently(srv, requests, threads=8):
    """requests: list of batch sizes; checks every answer (y = x + 1)."""
    def one(i_rows):
        i, rows = i_rows
        c = httpclient.InferenceServerClient(srv.http_url)
        x = np.full((rows, 4), float(i), np.float32)
        inp = httpclient.InferInput("x", [rows, 4], "FP32")
        inp.set_data_from_numpy(x)
        y = c.infer("m", [inp]).as_numpy("y")
        assert y.shape == (rows, 4) and np.all(y == i + 1.0)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, enumerate(requests)))


def test_device_counts_add_up_to_the_model_counts(serve, tmp_path, write_model, make_add_model):
    write_model(tmp_path / "repo", "m", make_add_model(), config="""
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [{ count: 2 }]
""")
    srv = serve(tmp_path / "repo", "--backend", "reference")
    sizes = [1 + i % 3 for i in range(30)]
    infer_concurrently(srv, sizes)
    text = srv.metrics()
    assert re.search(r"^# TYPE sampan_device_inference_count counter$", text, re.M)
    assert re.search(r"^# TYPE sampan_device_execution_count counter$", text, re.M)
    inferences = series(text, "sampan_device_inference_count", model="m", version="1")
    executions = series(text, "sampan_device_execution_count", model="m", version="1")
    # One host device for the reference backend.
    assert list(inferences) == [(("backend", "reference"), ("device", "0"), ("model", "m"), ("version", "1"))]
    assert sum(inferences.values()) == sum(sizes)
    assert sum(inferences.values()) == series(text, "nv_inference_count", model="m", version="1")[
        (("model", "m"), ("version", "1"))]
    assert sum(executions.values()) == series(text, "nv_inference_exec_count", model="m", version="1")[
        (("model", "m"), ("version", "1"))]


def visible_gpus():
    """Names of the GPUs this process may use (CUDA_VISIBLE_DEVICES honoured for plain ordinals)."""
    smi = shutil.which("nvidia-smi")
    if not smi or not os.path.exists("/dev/nvidiactl"):
        return []
    r = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
    names = [n.strip() for n in r.stdout.splitlines() if n.strip()] if r.returncode == 0 else []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(v.strip().isdigit() for v in visible.split(",") if v.strip()):
        names = [names[int(v)] for v in visible.split(",") if v.strip() and int(v) < len(names)]
    return names


@pytest.mark.skipif(not visible_gpus(), reason="no NVIDIA GPU on this machine")
def test_every_visible_gpu_gets_instances_and_serves(serve, tmp_path, write_model, make_add_model):
    gpus = visible_gpus()
    model_dir = write_model(tmp_path / "repo", "m", make_add_model(), config="""
max_batch_size: 8
instance_group [{ kind: KIND_GPU count: 1 }]
""")
    srv = serve(tmp_path / "repo", timeout=600)
    sizes = [1 + i % 4 for i in range(40 * len(gpus))]
    infer_concurrently(srv, sizes, threads=8 * len(gpus))
    text = srv.metrics()
    inferences = series(text, "sampan_device_inference_count", model="m", version="1", backend="cuda")
    executions = series(text, "sampan_device_execution_count", model="m", version="1", backend="cuda")
    devices = sorted(dict(k)["device"] for k in inferences)
    assert devices == sorted(str(d) for d in range(len(gpus))), text
    assert sum(inferences.values()) == sum(sizes)
    assert sum(executions.values()) == series(text, "nv_inference_exec_count", model="m", version="1")[
        (("model", "m"), ("version", "1"))]
    if len(gpus) > 1:
        assert sum(1 for v in executions.values() if v > 0) > 1, f"only one GPU served:\n{text}"
    # One plan build (and cache file) per GPU type.
    plans = sorted(p.name for p in (model_dir / "1" / ".sampan").glob("model.cuda.*.plan"))
    assert len(plans) == len(set(gpus)), plans
