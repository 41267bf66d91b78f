"""Several models on one GPU, and MIG placement (docs/gpu-sharing.md), black-box on a machine
without a GPU: NVML is the fake one (tests/fixtures/fake_nvml) with a GPU in MIG mode, so
`sampan info` and the server's startup log show the enumeration and `serve --gpus` sets
CUDA_VISIBLE_DEVICES from it; models of each `optimization.priority` serve side by side with
none starved (a host backend ignores the stream priority)."""

import os
import pathlib
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import sampan_bin

STATE = """gpus 2
gpu0.uuid GPU-aaaa1111-0000-0000-0000-000000000000
gpu0.name NVIDIA H100 80GB HBM3
gpu0.memory_used 0
gpu0.memory_total 85520809984
gpu1.uuid GPU-bbbb2222-0000-0000-0000-000000000000
gpu1.name NVIDIA H100 80GB HBM3
gpu1.mig_mode 1
gpu1.mig0.uuid MIG-cccc3333-0000-0000-0000-000000000000
gpu1.mig0.name NVIDIA H100 80GB HBM3 MIG 3g.40gb
gpu1.mig1.uuid MIG-dddd4444-0000-0000-0000-000000000000
gpu1.mig1.name NVIDIA H100 80GB HBM3 MIG 1g.10gb
gpu1.mig1.memory_used 0
gpu1.mig1.memory_total 10737418240
"""


def fake_nvml():
    return os.environ.get("SAMPAN_FAKE_NVML") or str(pathlib.Path(sampan_bin()).parent / "tests" /
                                                      "libsampan_fake_nvml.so")


@pytest.fixture
def nvml_env(tmp_path):
    if not os.path.exists(fake_nvml()):
        pytest.skip(f"the fake NVML is not built ({fake_nvml()}): ninja sampan_tests builds it")
    state = tmp_path / "nvml_state"
    state.write_text(STATE)
    env = dict(os.environ, SAMPAN_NVML_LIBRARY=fake_nvml(), SAMPAN_FAKE_NVML_STATE=str(state))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def test_info_shows_gpus_and_mig_devices(nvml_env):
    out = subprocess.run([sampan_bin(), "info"], env=nvml_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "gpus (NVML, " in text
    assert "GPU 0 (NVIDIA H100 80GB HBM3, 79.6 GiB): GPU-aaaa1111-0000-0000-0000-000000000000" in text
    assert "GPU-bbbb2222-0000-0000-0000-000000000000, MIG mode, 2 MIG device(s)" in text
    assert ("MIG device 1 of GPU 1 (NVIDIA H100 80GB HBM3 MIG 1g.10gb, 10.0 GiB): "
            "MIG-dddd4444-0000-0000-0000-000000000000") in text
    assert "0: GPU-aaaa1111-0000-0000-0000-000000000000, GPU 0" in text
    assert "is in MIG mode: a CUDA process uses one MIG device" in text

    env = dict(nvml_env, CUDA_VISIBLE_DEVICES="MIG-dddd4444")
    out = subprocess.run([sampan_bin(), "info"], env=env, capture_output=True, text=True, timeout=60)
    assert "cuda devices of this process (CUDA_VISIBLE_DEVICES=MIG-dddd4444):" in out.stdout
    assert "0: MIG-dddd4444-0000-0000-0000-000000000000, MIG device 1 of GPU 1" in out.stdout


def test_serve_gpus_places_by_mig_uuid_and_logs_it(serve, tmp_path, write_model, make_add_model, nvml_env):
    write_model(tmp_path / "repo", "add", make_add_model())
    srv = serve(tmp_path / "repo", "--gpus", "MIG-dddd", "--gpu-health-interval-ms", "0", env=nvml_env)
    log = srv.output()
    assert "GPUs (NVML, " in log
    assert ("CUDA devices of this process (CUDA_VISIBLE_DEVICES=MIG-dddd4444-0000-0000-0000-000000000000, "
            "from --gpus):") in log
    assert "0: MIG-dddd4444-0000-0000-0000-000000000000, MIG device 1 of GPU 1" in log


@pytest.mark.parametrize("gpus,why", [
    ("GPU-ffff", "--gpus entry 'GPU-ffff' matches no device"),
    ("1", "is GPU 1, which is in MIG mode: name one of its MIG devices"),
    ("MIG-cccc,MIG-dddd", "names 2 MIG devices: a CUDA process uses one MIG device"),
])
def test_serve_gpus_refuses_what_cuda_cannot_do(tmp_path, nvml_env, gpus, why):
    (tmp_path / "repo").mkdir()
    out = subprocess.run([sampan_bin(), "serve", "--model-repository", str(tmp_path / "repo"), "--gpus", gpus,
                          "--http-port", "-1", "--grpc-port", "-1", "--metrics-port", "-1"],
                         env=nvml_env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert why in out.stdout + out.stderr


def test_models_of_every_priority_serve_side_by_side(serve, tmp_path, write_model, make_add_model):
    # Stream priorities are the GPU's business; the server schedules each model on its own queue
    # and instances, so a PRIORITY_MIN model under the same load is served as fully as the others.
    repo = tmp_path / "repo"
    for name, priority, bias in (("hi", "PRIORITY_MAX", 1.0), ("lo", "PRIORITY_MIN", 2.0),
                                 ("mid", "PRIORITY_DEFAULT", 3.0)):
        write_model(repo, name, make_add_model(bias=bias),
                    config=f'max_batch_size: 8\ndynamic_batching {{ }}\noptimization {{ priority: {priority} }}\n'
                           'instance_group [{ kind: KIND_CPU count: 1 }]\n')
    srv = serve(repo, "--log-verbose", "1")  # the loader's lines
    assert "stream priority high" in srv.output()
    assert "stream priority low" in srv.output()

    def call(args):
        name, bias, i = args
        c = httpclient.InferenceServerClient(srv.http_url)
        inp = httpclient.InferInput("x", [1, 4], "FP32")
        inp.set_data_from_numpy(np.full((1, 4), i, np.float32))
        y = c.infer(name, [inp]).as_numpy("y")
        return name, bool(np.allclose(y, i + bias))

    work = [(n, b, float(i)) for i in range(40) for n, b in (("hi", 1.0), ("lo", 2.0), ("mid", 3.0))]
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(call, work))
    for name in ("hi", "lo", "mid"):
        got = [ok for n, ok in results if n == name]
        assert len(got) == 40 and all(got), name
    c = httpclient.InferenceServerClient(srv.http_url)
    assert c.get_model_config("hi")["optimization"]["priority"] == "PRIORITY_MAX"
