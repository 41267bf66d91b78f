"""System shared-memory extension, driven by tritonclient's own shared-memory helpers:
inputs read from and outputs written into POSIX shared memory the client registered; the
regions' status and unregistration; errors naming the region; off unless enabled."""
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

CONFIG = """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


@pytest.fixture
def regions():
    made = []

    def make(name, key, size):
        h = shm.create_shared_memory_region(name, key, size)
        made.append(h)
        return h
    yield make
    for h in made:
        shm.destroy_shared_memory_region(h)


def test_inputs_and_outputs_through_shared_memory(serve, write_model, make_add_model, tmp_path, regions):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,), bias=1.0), config=CONFIG)
    srv = serve(tmp_path / "repo", "--enable-shared-memory")
    c = httpclient.InferenceServerClient(srv.http_url)
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    hin = regions("in0", "/sampan_test_in0", x.nbytes)
    hout = regions("out0", "/sampan_test_out0", x.nbytes + 64)
    shm.set_shared_memory_region(hin, [x])
    c.register_system_shared_memory("in0", "/sampan_test_in0", x.nbytes)
    c.register_system_shared_memory("out0", "/sampan_test_out0", x.nbytes + 64)
    status = {r["name"]: r for r in c.get_system_shared_memory_status()}
    assert set(status) == {"in0", "out0"} and int(status["in0"]["byte_size"]) == x.nbytes

    inp = httpclient.InferInput("x", [2, 16], "FP32")
    inp.set_shared_memory("in0", x.nbytes)
    out = httpclient.InferRequestedOutput("y", binary_data=True)
    out.set_shared_memory("out0", x.nbytes + 64)
    res = c.infer("add", [inp], outputs=[out])
    meta = res.get_output("y")
    assert meta["parameters"]["shared_memory_region"] == "out0"
    y = shm.get_contents_as_numpy(hout, np.float32, [2, 16])
    np.testing.assert_array_equal(y, x + 1)

    # The same region serves again with new contents (no re-registration).
    shm.set_shared_memory_region(hin, [x * 2])
    c.infer("add", [inp], outputs=[out])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [2, 16]), x * 2 + 1)

    # Errors name what is wrong; the server keeps serving.
    bad = httpclient.InferInput("x", [2, 16], "FP32")
    bad.set_shared_memory("nope", x.nbytes)
    with pytest.raises(InferenceServerException, match="nope"):
        c.infer("add", [bad])
    short = httpclient.InferInput("x", [2, 16], "FP32")
    short.set_shared_memory("in0", x.nbytes - 4)
    with pytest.raises(InferenceServerException, match="shared_memory_byte_size"):
        c.infer("add", [short])
    small = httpclient.InferRequestedOutput("y", binary_data=True)
    small.set_shared_memory("out0", 8)
    with pytest.raises(InferenceServerException, match="more than the 8 bytes"):
        c.infer("add", [inp], outputs=[small])
    with pytest.raises(InferenceServerException, match="already registered"):
        c.register_system_shared_memory("in0", "/sampan_test_in0", x.nbytes)
    with pytest.raises(InferenceServerException):
        c.register_system_shared_memory("ghost", "/sampan_no_such_key", 64)

    c.unregister_system_shared_memory("in0")
    assert [r["name"] for r in c.get_system_shared_memory_status()] == ["out0"]
    c.unregister_system_shared_memory()
    assert c.get_system_shared_memory_status() == []
    plain = httpclient.InferInput("x", [2, 16], "FP32")
    plain.set_data_from_numpy(x)
    np.testing.assert_array_equal(c.infer("add", [plain]).as_numpy("y"), x + 1)


def test_shared_memory_is_off_unless_enabled(serve, write_model, make_add_model, tmp_path, regions):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,)), config=CONFIG)
    srv = serve(tmp_path / "repo")
    c = httpclient.InferenceServerClient(srv.http_url)
    regions("in1", "/sampan_test_in1", 128)
    with pytest.raises(InferenceServerException, match="--enable-shared-memory"):
        c.register_system_shared_memory("in1", "/sampan_test_in1", 128)
    inp = httpclient.InferInput("x", [2, 16], "FP32")
    inp.set_shared_memory("in1", 128)
    with pytest.raises(InferenceServerException, match="not enabled"):
        c.infer("add", [inp])


def test_perf_sends_inputs_through_shared_memory(serve, write_model, make_add_model, tmp_path):
    import re
    import subprocess
    from conftest import sampan_bin
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,)), config=CONFIG)
    srv = serve(tmp_path / "repo", "--enable-shared-memory")
    r = subprocess.run([sampan_bin(), "perf", "-m", "add", "-u", srv.http_url, "--shared-memory", "system",
                        "-p", "300", "-b", "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "inputs in system shared memory" in r.stdout
    assert re.search(r"Concurrency: 1, throughput: [\d.]+ infer/sec", r.stdout)
    c = httpclient.InferenceServerClient(srv.http_url)
    assert c.get_system_shared_memory_status() == []  # perf unregistered its regions
