"""Concurrent model lifecycle: a model whose load takes seconds (its model_warmup runs many times)
holds up neither another model's load nor the health, index and inference answers, over HTTP and
gRPC with tritonclient."""
import json
import math
import os
import sys
import threading
import time

import numpy as np
import pytest

from conftest import ROOT, sampan_bin

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

N = 16384  # elements per batch row: each warm-up run adds 4 x N floats
CONFIG = """
name: "{name}"
max_batch_size: 4
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 16384 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 16384 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{warmup}
"""
SLOW = ('model_warmup [ { name: "spin" batch_size: 4 count: %d inputs { key: "x" value: '
        '{ data_type: TYPE_FP32 dims: [ 16384 ] zero_data: true } } } ]')


PROBE_RUNS = 500  # warm-up runs of the first, timing load of "slow"
TARGET_S = 4.0  # how long the slow load is then made to take on this machine


@pytest.fixture
def repo(tmp_path, write_model, make_add_model):
    r = tmp_path / "repo"
    for name, warmup in (("slow", SLOW % PROBE_RUNS), ("fast", ""), ("other", "")):
        write_model(r, name, make_add_model(dims=(N,), bias=1.0), config=CONFIG.format(name=name, warmup=warmup))
    return r


def _set_warmup_runs(repo, runs):
    (repo / "slow" / "config.pbtxt").write_text(CONFIG.format(name="slow", warmup=SLOW % runs))


def _timed(f):
    t0 = time.monotonic()
    f()
    return time.monotonic() - t0


def test_a_slow_load_holds_up_nothing_else(serve, repo):
    srv = serve(repo, "--model-control-mode", "explicit", "--load-model", "other", "--strict-readiness", "false")
    h = httpclient.InferenceServerClient(srv.http_url, network_timeout=600, connection_timeout=600)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    # The slow load's length is set from this machine's speed (a sanitizer build on 2 busy cores
    # and a plain build differ 50x): one load with PROBE_RUNS warm-up runs, then as many runs as
    # take about TARGET_S beyond a load without warm-up, the config re-read by the next load.
    fast_alone = _timed(lambda: h.load_model("fast"))
    h.unload_model("fast")
    probe = _timed(lambda: h.load_model("slow"))
    h.unload_model("slow")
    per_run = max(probe - fast_alone, 1e-4) / PROBE_RUNS
    runs = max(PROBE_RUNS, min(500000, int(TARGET_S / per_run)))
    _set_warmup_runs(repo, runs)
    slow_alone = _timed(lambda: h.load_model("slow"))
    print(f"slow model alone: {slow_alone:.2f} s ({runs} warm-up runs; {PROBE_RUNS} took {probe:.2f} s, "
          f"a load without warm-up {fast_alone:.2f} s)")
    if slow_alone < 1.5:
        pytest.skip(f"the slow model loaded in {slow_alone:.2f} s here: too fast to show anything")
    h.unload_model("slow")

    done = threading.Event()
    errors = []

    def load_slow():
        try:
            httpclient.InferenceServerClient(srv.http_url, network_timeout=600, connection_timeout=600).load_model("slow")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        done.set()

    t = threading.Thread(target=load_slow)
    t.start()
    time.sleep(0.3)
    assert not done.is_set()
    for client in (h, g):
        assert _timed(lambda: client.is_server_live()) < 1.0
        assert _timed(lambda: client.get_model_repository_index()) < 1.0
    x = np.zeros((1, N), np.float32)
    i = httpclient.InferInput("x", [1, N], "FP32")
    i.set_data_from_numpy(x)
    assert _timed(lambda: h.infer("other", [i])) < 1.0
    fast = _timed(lambda: g.load_model("fast"))
    assert not done.is_set(), "the slow load ended before the fast one: nothing was shown"
    assert fast < fast_alone + 1.0, (fast, fast_alone, slow_alone)
    assert g.is_model_ready("fast") and not g.is_model_ready("slow")
    index = {m["name"]: m.get("state") for m in h.get_model_repository_index()}
    assert index["fast"] == "READY" and index["slow"] in ("LOADING", "UNAVAILABLE", None), index
    t.join(600)
    assert not errors, errors
    assert h.is_model_ready("slow")


SIM_FACTOR = 1000  # the sim plan's recorded ResNet-50 latencies x this: a batch of 1 waits ~0.37 s


def test_a_sixty_second_sim_load_holds_up_nothing_else(serve, tmp_path):
    """The issue's case as it states it: a model whose load takes 60 s (the sim backend: its warm-up
    runs wait, on the host's timer, what a recorded GPU profile gives them) delays neither another
    model's READY by more than 1 s nor the health and index answers."""
    sys.path.insert(0, str(ROOT / "bench" / "serve_gpu"))
    import slo_grid  # noqa: E402  (build_sim_plan)
    plan, io = slo_grid.build_sim_plan(sampan_bin(), tmp_path / "sim", SIM_FACTOR, 4)
    b1 = json.loads((tmp_path / "sim" / "resnet50_fp16_b1.json").read_text())["latency_ms"]["median"] / 1e3
    runs = math.ceil(60.0 / b1)
    repo = tmp_path / "repo"
    warmup = ('model_warmup [ { name: "wait" batch_size: 1 count: %d inputs { key: "x" value: '
              '{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]\n' % runs)
    for name in ("slow", "fast"):
        (repo / name / "1").mkdir(parents=True)
        os.symlink(plan, repo / name / "1" / "model.plan")
        (repo / name / "config.pbtxt").write_text(
            f'max_batch_size: 4\n{io}instance_group [ {{ count: 1 kind: KIND_GPU gpus: [ {0 if name == "slow" else 1} ] }} ]\n'
            'sampan { backend: "sim" }\n' + (warmup if name == "slow" else ""))
    # Two simulated devices: one batch at a time runs on each, as on a GPU, so the models get one each.
    srv = serve(repo, "--model-control-mode", "explicit", "--strict-readiness", "false",
                env=dict(os.environ, SAMPAN_SIM_DEVICES="2"))
    h = httpclient.InferenceServerClient(srv.http_url, network_timeout=600, connection_timeout=600)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    fast_alone = _timed(lambda: g.load_model("fast"))  # what its load takes with nothing else loading
    g.unload_model("fast")
    for _ in range(100):
        if not g.is_model_ready("fast"):
            break
        time.sleep(0.1)
    done = threading.Event()
    errors = []
    took = []

    def load_slow():
        t0 = time.monotonic()
        try:
            httpclient.InferenceServerClient(srv.http_url, network_timeout=600, connection_timeout=600).load_model("slow")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        took.append(time.monotonic() - t0)
        done.set()

    t = threading.Thread(target=load_slow)
    t.start()
    time.sleep(1.0)
    assert not done.is_set()
    for client in (h, g):
        assert _timed(lambda: client.is_server_live()) < 1.0
        assert _timed(lambda: client.is_server_ready()) < 1.0
        assert _timed(lambda: client.get_model_repository_index()) < 1.0
    fast = _timed(lambda: g.load_model("fast"))
    assert fast < fast_alone + 1.0, (fast, fast_alone)
    assert g.is_model_ready("fast") and not g.is_model_ready("slow")
    i = httpclient.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(np.zeros((1, 4), np.float32))
    assert _timed(lambda: h.infer("fast", [i])) < 1.0
    assert not done.is_set(), "the slow load ended before the checks: nothing was shown"
    t.join(180)
    assert not errors, errors
    assert took and took[0] >= 55.0, f"the slow load took {took} s ({runs} warm-up runs of {b1:.3f} s)"
    assert h.is_model_ready("slow")
