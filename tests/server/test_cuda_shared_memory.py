"""The CUDA shared-memory extension, black-box, on any machine (a GPU is not needed): every way
registration fails, over HTTP and gRPC with tritonclient unmodified (its
register_cuda_shared_memory takes the handle base64-encoded, as cuda_shared_memory.get_raw_handle
gives it), status and unregistration, the one namespace of region names shared with system
shared memory, tensors naming a region that is not there, restricted APIs, and the extension off.

What a CUDA handle opens to depends on the build and the machine, read from `sampan info`: without
CUDA registration says the server was built without it; with CUDA but no GPU the error names the
device and CUDA's reason; on a GPU machine a handle of 64 arbitrary bytes is refused by CUDA.
Registering real device memory and running inferences through it is test_cuda_shared_memory_gpu.py
(run on the GPU machine).
"""

import base64
import json
import subprocess
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from conftest import sampan_bin

CONFIG = """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""

HANDLE = base64.b64encode(bytes(range(64)))  # a well-formed handle that no process exported


def cuda_build():
    """'none' (built without CUDA), 'no-gpu' (CUDA built, no usable device) or 'gpu'."""
    out = subprocess.run([sampan_bin(), "info"], capture_output=True, text=True, timeout=120).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith("backend cuda:")), None)
    if line is None:
        return "none"
    return "gpu" if line.startswith("backend cuda: available") else "no-gpu"


def unopenable_handle_error(kind):
    """What registering HANDLE on device 0 answers in this build (a regular expression)."""
    return {"none": r"CUDA shared memory is not supported: this server was built without CUDA",
            "no-gpu": r"CUDA device 0 is not available: cuda",
            "gpu": r"cannot open the CUDA IPC handle on CUDA device 0: cuda"}[kind]


@pytest.fixture(scope="module")
def build_kind():
    return cuda_build()


@pytest.fixture
def server(serve, write_model, make_add_model, tmp_path):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,), bias=1.0), config=CONFIG)
    return serve(tmp_path / "repo", "--enable-shared-memory")


def post_json(srv, path, body):
    """(status, parsed JSON or None) of a POST with a raw JSON body (tritonclient always sends
    every field, so the missing ones are sent this way)."""
    req = urllib.request.Request(srv.http_base + path, data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            data = r.read()
            return r.status, json.loads(data) if data else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http_registration_errors(server, build_kind):
    c = httpclient.InferenceServerClient(server.http_url)
    extensions = c.get_server_metadata()["extensions"]
    assert ("cuda_shared_memory" in extensions) == (build_kind != "none"), extensions
    cases = [
        ("not base64", b"!!!!", 0, 64, r"region 'r': 'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"),
        ("truncated base64", b"abc", 0, 64, r"valid base64 encoded cudaIpcMemHandle_t: base64 text of 3 characters"),
        ("63 bytes", base64.b64encode(bytes(63)), 0, 64, r"must be a cudaIpcMemHandle_t of 64 bytes, got 63"),
        ("65 bytes", base64.b64encode(bytes(65)), 0, 64, r"must be a cudaIpcMemHandle_t of 64 bytes, got 65"),
        ("empty handle", b"", 0, 64, r"must be a cudaIpcMemHandle_t of 64 bytes, got 0"),
        ("byte_size 0", HANDLE, 0, 0, r"region 'r': byte_size must be > 0"),
        ("negative device", HANDLE, -1, 64, r"region 'r': device_id must be >= 0, got -1"),
        ("unopenable handle", HANDLE, 0, 64, unopenable_handle_error(build_kind)),
    ]
    for what, handle, device, size, error in cases:
        with pytest.raises(InferenceServerException, match=error) as e:
            c.register_cuda_shared_memory("r", handle, device, size)
        assert e.value.status() == ("400" if build_kind != "none" or what != "unopenable handle" else "501"), what
    if build_kind == "gpu":
        with pytest.raises(InferenceServerException, match=r"CUDA device 4096 does not exist \(this machine has"):
            c.register_cuda_shared_memory("r", HANDLE, 4096, 64)
    # Nothing was registered by any of them.
    assert c.get_cuda_shared_memory_status() == []

    # Fields tritonclient always sends, left out or of the wrong type.
    path = "/v2/cudasharedmemory/region/r/register"
    b64 = HANDLE.decode()
    for body, error in [
        ('{"device_id": 0, "byte_size": 64}', "Shared memory register request has no 'raw_handle' field"),
        ('{"raw_handle": "' + b64 + '", "device_id": 0, "byte_size": 64}', "'raw_handle' must be an object"),
        ('{"raw_handle": {"b64": 7}, "device_id": 0, "byte_size": 64}', "'raw_handle' must be an object"),
        ('{"raw_handle": {"b64": "' + b64 + '"}, "byte_size": 64}', "'device_id' (an integer) is required"),
        ('{"raw_handle": {"b64": "' + b64 + '"}, "device_id": "0", "byte_size": 64}',
         "'device_id' (an integer) is required"),
        ('{"raw_handle": {"b64": "' + b64 + '"}, "device_id": 0}', "'byte_size' (a non-negative integer) is required"),
        ('{"raw_handle": {"b64": "' + b64 + '"}, "device_id": 0, "byte_size": -1}',
         "'byte_size' (a non-negative integer) is required"),
        ('{"raw_handle": ', "malformed JSON"),
    ]:
        status, answer = post_json(server, path, body)
        assert status == 400 and error in answer["error"], (body, status, answer)
    # Register needs a region name; status needs GET, register and unregister POST.
    assert post_json(server, "/v2/cudasharedmemory/register", "{}")[0] == 404
    assert server.get("/v2/cudasharedmemory/region/r/register")[0] == 405
    assert post_json(server, "/v2/cudasharedmemory/status", "{}")[0] == 405
    assert server.process.poll() is None


def test_http_status_unregister_and_one_namespace(server, build_kind, tmp_path):
    c = httpclient.InferenceServerClient(server.http_url)
    assert c.get_cuda_shared_memory_status() == []
    with pytest.raises(InferenceServerException, match=r"Unable to find cuda shared memory region: 'ghost'") as e:
        c.get_cuda_shared_memory_status("ghost")
    assert e.value.status() == "404"
    # Unknown names unregister without error (as Triton), one or all.
    c.unregister_cuda_shared_memory("ghost")
    c.unregister_cuda_shared_memory()

    # A system region's name is taken for CUDA regions too; each extension lists only its own.
    h = shm.create_shared_memory_region("sys", "/sampan_cudashm_test_sys", 64)
    try:
        c.register_system_shared_memory("sys", "/sampan_cudashm_test_sys", 64)
        with pytest.raises(InferenceServerException, match=r"'sys' is already registered"):
            c.register_cuda_shared_memory("sys", HANDLE, 0, 64)
        assert c.get_cuda_shared_memory_status() == []
        with pytest.raises(InferenceServerException,
                           match=r"The region named 'sys' is registered as system shared memory, not CUDA"):
            c.get_cuda_shared_memory_status("sys")
        # Unregistering CUDA regions leaves system ones alone, by name or all.
        c.unregister_cuda_shared_memory("sys")
        c.unregister_cuda_shared_memory()
        assert [r["name"] for r in c.get_system_shared_memory_status()] == ["sys"]
        c.unregister_system_shared_memory("sys")
    finally:
        shm.destroy_shared_memory_region(h)

    # Tensors naming a region that is not registered: errors name the tensor and the region.
    x = np.zeros((1, 16), np.float32)
    inp = httpclient.InferInput("x", [1, 16], "FP32")
    inp.set_shared_memory("gpu_in", x.nbytes)
    with pytest.raises(InferenceServerException, match=r"input 'x': Unable to find shared memory region: 'gpu_in'"):
        c.infer("add", [inp])
    plain = httpclient.InferInput("x", [1, 16], "FP32")
    plain.set_data_from_numpy(x)
    out = httpclient.InferRequestedOutput("y", binary_data=True)
    out.set_shared_memory("gpu_out", x.nbytes)
    with pytest.raises(InferenceServerException, match=r"output 'y': Unable to find shared memory region: 'gpu_out'"):
        c.infer("add", [plain], outputs=[out])
    np.testing.assert_array_equal(c.infer("add", [plain]).as_numpy("y"), x + 1)


def test_grpc_registration_status_and_unregister(server, build_kind):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    extensions = list(c.get_server_metadata().extensions)
    assert ("cuda_shared_memory" in extensions) == (build_kind != "none"), extensions
    cases = [
        (base64.b64encode(bytes(63)), 0, 64, r"must be a cudaIpcMemHandle_t of 64 bytes, got 63"),
        (b"", 0, 64, r"must be a cudaIpcMemHandle_t of 64 bytes, got 0"),
        (HANDLE, 0, 0, r"region 'r': byte_size must be > 0"),
        (HANDLE, -3, 64, r"region 'r': device_id must be >= 0, got -3"),
        (HANDLE, 0, 64, unopenable_handle_error(build_kind)),
    ]
    for handle, device, size, error in cases:
        with pytest.raises(InferenceServerException, match=error) as e:
            c.register_cuda_shared_memory("r", handle, device, size)
        want = "StatusCode.UNIMPLEMENTED" if "built without CUDA" in error else "StatusCode.INVALID_ARGUMENT"
        assert e.value.status() == want, error
    assert dict(c.get_cuda_shared_memory_status(as_json=True)) == {}
    with pytest.raises(InferenceServerException, match=r"Unable to find cuda shared memory region: 'r'") as e:
        c.get_cuda_shared_memory_status("r")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    c.unregister_cuda_shared_memory("r")
    c.unregister_cuda_shared_memory()

    h = shm.create_shared_memory_region("sys", "/sampan_cudashm_test_gsys", 64)
    try:
        c.register_system_shared_memory("sys", "/sampan_cudashm_test_gsys", 64)
        with pytest.raises(InferenceServerException, match=r"'sys' is already registered"):
            c.register_cuda_shared_memory("sys", HANDLE, 0, 64)
        with pytest.raises(InferenceServerException, match=r"registered as system shared memory, not CUDA"):
            c.get_cuda_shared_memory_status("sys")
        c.unregister_cuda_shared_memory()
        assert list(c.get_system_shared_memory_status(as_json=True)["regions"]) == ["sys"]
        c.unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(h)

    inp = grpcclient.InferInput("x", [1, 16], "FP32")
    inp.set_shared_memory("gpu_in", 64)
    with pytest.raises(InferenceServerException, match=r"input 'x': Unable to find shared memory region: 'gpu_in'"):
        c.infer("add", [inp])
    assert server.process.poll() is None


def test_cuda_shared_memory_is_off_unless_enabled(serve, write_model, make_add_model, tmp_path):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,), bias=1.0), config=CONFIG)
    srv = serve(tmp_path / "repo")
    h = httpclient.InferenceServerClient(srv.http_url)
    assert "cuda_shared_memory" not in h.get_server_metadata()["extensions"]
    off = r"the CUDA shared memory extension is not enabled on this server \(start sampan serve with " \
          r"--enable-shared-memory\)"
    with pytest.raises(InferenceServerException, match=off):
        h.register_cuda_shared_memory("r", HANDLE, 0, 64)
    with pytest.raises(InferenceServerException, match=off):
        h.get_cuda_shared_memory_status()
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    for call in (lambda: g.register_cuda_shared_memory("r", HANDLE, 0, 64), g.get_cuda_shared_memory_status,
                 g.unregister_cuda_shared_memory):
        with pytest.raises(InferenceServerException, match=off) as e:
            call()
        assert e.value.status() == "StatusCode.UNIMPLEMENTED"


def test_cuda_shared_memory_is_a_restricted_api(serve, write_model, make_add_model, tmp_path):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,), bias=1.0), config=CONFIG)
    srv = serve(tmp_path / "repo", "--enable-shared-memory", "--http-restricted-api", "shared-memory:shm-key=s1",
                "--grpc-restricted-protocol", "shared-memory:shm-key=s1")
    h = httpclient.InferenceServerClient(srv.http_url)
    with pytest.raises(InferenceServerException, match="This API is restricted, expecting header 'shm-key'"):
        h.get_cuda_shared_memory_status()
    with pytest.raises(InferenceServerException, match="This API is restricted, expecting header 'shm-key'"):
        h.register_cuda_shared_memory("r", HANDLE, 0, 64)
    assert h.get_cuda_shared_memory_status(headers={"shm-key": "s1"}) == []
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    want = "This protocol is restricted, expecting header 'triton-grpc-protocol-shm-key'"
    with pytest.raises(InferenceServerException, match=want):
        g.get_cuda_shared_memory_status()
    with pytest.raises(InferenceServerException, match=want):
        g.unregister_cuda_shared_memory()
    assert dict(g.get_cuda_shared_memory_status(headers={"triton-grpc-protocol-shm-key": "s1"}, as_json=True)) == {}
