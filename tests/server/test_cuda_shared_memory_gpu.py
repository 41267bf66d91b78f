"""CUDA shared memory end to end on a GPU: this process allocates device memory (the CUDA runtime
through ctypes), exports it (cudaIpcGetMemHandle) and registers it with `sampan serve` over HTTP
exactly as tritonclient does; inferences read their input from and write their output into it, on
--backend cpu and --backend cuda, and the bytes are read back from the device here. Also: offsets,
a region reused with new contents, an output larger than its room, a range beyond the region, a
byte_size beyond the allocation, and inferences racing unregister/register of their region (each
answer right or a clean error; the server stays up).

Without a GPU (CI) it skips, saying why. On the GPU machine, whose python3 has no pytest or
tritonclient, it runs by itself with raw HTTP (urllib):

    python3 tests/server/test_cuda_shared_memory_gpu.py --sampan /tmp/sampan_bundle/sampan

(bench/gpu_peers/check_on_gpu.sh runs that line). It needs onnx (for the model) and a libcudart.
"""

import argparse
import base64
import ctypes
import glob
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

try:
    import pytest
except ImportError:  # the GPU machine's python3
    pytest = None

STANDALONE = False
CONFIG = """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""
REGION_BYTES = 8192
OUT_OFFSET = 4096


class Skip(Exception):
    pass


def skip(reason):
    if pytest is not None and not STANDALONE:
        pytest.skip(reason)
    raise Skip(reason)


# ---------------------------------------------------------------- the CUDA runtime, through ctypes

class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def load_cudart():
    """The CUDA runtime library, or None."""
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    names += sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"))
    for p in sys.path:  # PyTorch's wheels bring their own
        names += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib", "libcudart.so*")))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), IpcHandle, ctypes.c_uint]
        return lib
    return None


class Cuda:
    def __init__(self, lib):
        self.lib = lib

    def check(self, err, what):
        if err != 0:
            raise RuntimeError(f"{what}: {self.lib.cudaGetErrorString(err).decode()} ({err})")

    def device_count(self):
        n = ctypes.c_int(0)
        err = self.lib.cudaGetDeviceCount(ctypes.byref(n))
        return n.value if err == 0 else f"cudaGetDeviceCount: {self.lib.cudaGetErrorString(err).decode()}"

    def malloc(self, n):
        p = ctypes.c_void_p()
        self.check(self.lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)), "cudaMalloc")
        self.check(self.lib.cudaMemset(p, 0, ctypes.c_size_t(n)), "cudaMemset")
        return p.value

    def write(self, ptr, data):
        buf = ctypes.create_string_buffer(data, len(data))
        self.check(self.lib.cudaMemcpy(ctypes.c_void_p(ptr), buf, ctypes.c_size_t(len(data)), 1), "cudaMemcpy H2D")

    def read(self, ptr, n):
        buf = ctypes.create_string_buffer(n)
        self.check(self.lib.cudaMemcpy(buf, ctypes.c_void_p(ptr), ctypes.c_size_t(n), 2), "cudaMemcpy D2H")
        return buf.raw

    def ipc_handle(self, ptr):
        h = IpcHandle()
        self.check(self.lib.cudaIpcGetMemHandle(ctypes.byref(h), ctypes.c_void_p(ptr)), "cudaIpcGetMemHandle")
        return bytes(h.reserved)

    def free(self, ptr):
        self.lib.cudaFree(ctypes.c_void_p(ptr))


def ipc_probe(handle_hex):
    """In a child process: can this machine open a CUDA IPC handle at all? (gVisor sandboxes may not.)"""
    lib = load_cudart()
    h = IpcHandle()
    h.reserved[:] = bytes.fromhex(handle_hex)
    p = ctypes.c_void_p()
    err = lib.cudaIpcOpenMemHandle(ctypes.byref(p), h, 1)
    if err != 0:
        print(f"cudaIpcOpenMemHandle: {lib.cudaGetErrorString(err).decode()} ({err})")
        return 1
    lib.cudaIpcCloseMemHandle(p)
    print("ok")
    return 0


# ---------------------------------------------------------------- the server, over raw HTTP

def floats(values):
    return struct.pack(f"<{len(values)}f", *values)


def unfloats(data):
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def make_add_model():
    """y = x + 1, FP32 [N, 16], as ONNX bytes."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [16], [1.0] * 16)
    graph = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["y"], name="add")], "add", [x], [y],
                              initializer=[bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


class Server:
    def __init__(self, sampan, repo, backend):
        args = [sampan, "serve", "--model-repository", str(repo), "--backend", backend, "--enable-shared-memory",
                "--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port", "-1", "--metrics-port", "-1"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     start_new_session=True)
        self.lines, self.port, self.ready = [], None, threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(600) or self.port is None or self.proc.poll() is not None:
            self.stop()
            raise AssertionError(f"sampan serve --backend {backend} did not start:\n{self.output()}")

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            text = line.strip()
            if text.startswith("HTTP KServe v2 on "):
                self.port = int(text.rsplit(":", 1)[1])
            if text == "ready":
                self.ready.set()
        self.ready.set()

    def output(self):
        return "".join(self.lines)

    def request(self, method, path, body=None):
        """(status, parsed JSON or None)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def shm(region, byte_size, offset=0):
    p = {"shared_memory_region": region, "shared_memory_byte_size": byte_size}
    if offset:
        p["shared_memory_offset"] = offset
    return p


def infer_body(rows, in_offset=0, out_room=None, out_offset=OUT_OFFSET, region="gpu_io"):
    nbytes = rows * 16 * 4
    body = {"inputs": [{"name": "x", "shape": [rows, 16], "datatype": "FP32", "parameters": shm(region, nbytes, in_offset)}]}
    if out_room is not None:
        body["outputs"] = [{"name": "y", "parameters": shm(region, out_room, out_offset)}]
    return body


# ---------------------------------------------------------------- the test

def gpu_or_skip():
    lib = load_cudart()
    if lib is None:
        skip("no CUDA runtime (libcudart) on this machine")
    cuda = Cuda(lib)
    n = cuda.device_count()
    if not isinstance(n, int) or n == 0:
        skip(f"no GPU: {n}")
    return cuda


def check_round_trips(sampan, workdir, backend):
    cuda = gpu_or_skip()
    info = subprocess.run([sampan, "info"], capture_output=True, text=True, timeout=300).stdout
    if "backend cuda:" not in info:
        skip(f"{sampan} was built without CUDA")
    ptr = cuda.malloc(REGION_BYTES)
    try:
        handle = cuda.ipc_handle(ptr)
        probe = subprocess.run([sys.executable, __file__, "--ipc-probe", handle.hex()], capture_output=True, text=True,
                               timeout=120)
        if probe.returncode != 0:
            skip(f"CUDA IPC does not work on this machine: {probe.stdout.strip()} {probe.stderr.strip()[-300:]}")

        repo = pathlib.Path(workdir) / f"repo_{backend}"
        (repo / "add" / "1").mkdir(parents=True, exist_ok=True)
        (repo / "add" / "1" / "model.onnx").write_bytes(make_add_model())
        (repo / "add" / "config.pbtxt").write_text(CONFIG)
        srv = Server(sampan, repo, backend)
        try:
            run_checks(cuda, srv, ptr, handle)
            assert srv.proc.poll() is None, srv.output()
        finally:
            code = srv.stop()
        assert code == 0, f"sampan serve exited with {code}:\n{srv.output()[-3000:]}"
    finally:
        cuda.free(ptr)


def run_checks(cuda, srv, ptr, handle):
    b64 = base64.b64encode(handle).decode()
    register = {"raw_handle": {"b64": b64}, "device_id": 0, "byte_size": REGION_BYTES}
    status, answer = srv.request("POST", "/v2/cudasharedmemory/region/gpu_io/register", register)
    assert status == 200, answer
    status, answer = srv.request("GET", "/v2/cudasharedmemory/status")
    assert (status, answer) == (200, [{"name": "gpu_io", "device_id": 0, "byte_size": REGION_BYTES}]), answer
    status, answer = srv.request("GET", "/v2/cudasharedmemory/region/gpu_io/status")
    assert status == 200 and answer[0]["name"] == "gpu_io", answer

    # Input and output in the region (output at OUT_OFFSET), read back from the device.
    x = [float(i) for i in range(32)]
    cuda.write(ptr, floats(x))
    status, answer = srv.request("POST", "/v2/models/add/infer", infer_body(2, out_room=256))
    assert status == 200, answer
    assert answer["outputs"][0]["parameters"] == shm("gpu_io", 128, OUT_OFFSET), answer
    assert "data" not in answer["outputs"][0]
    assert unfloats(cuda.read(ptr + OUT_OFFSET, 128)) == [v + 1 for v in x]

    # New contents, same registration; an input at an offset; the output in the body.
    x3 = [3.0 * v for v in x]
    cuda.write(ptr + 512, floats(x3))
    status, answer = srv.request("POST", "/v2/models/add/infer", infer_body(2, in_offset=512, out_room=128))
    assert status == 200, answer
    assert unfloats(cuda.read(ptr + OUT_OFFSET, 128)) == [v + 1 for v in x3]
    status, answer = srv.request("POST", "/v2/models/add/infer", infer_body(1, in_offset=512))
    assert status == 200, answer
    assert answer["outputs"][0]["data"] == [v + 1 for v in x3[:16]], answer

    # Errors name the tensor and the region; the server keeps serving.
    status, answer = srv.request("POST", "/v2/models/add/infer", infer_body(2, out_room=64))
    assert status == 400 and "more than the 64 bytes given in shared-memory region 'gpu_io'" in answer["error"], answer
    status, answer = srv.request("POST", "/v2/models/add/infer", infer_body(2, in_offset=REGION_BYTES - 64))
    assert status == 400 and "input 'x'" in answer["error"] and "beyond its 8192 bytes" in answer["error"], answer
    too_big = dict(register, byte_size=1 << 34)
    status, answer = srv.request("POST", "/v2/cudasharedmemory/region/too_big/register", too_big)
    assert status == 400 and "bytes of the device allocation the handle names" in answer["error"], answer
    status, answer = srv.request("POST", "/v2/cudasharedmemory/region/gpu_io/register", register)
    assert status == 400 and "already registered" in answer["error"], answer

    # Inferences racing unregister/register of their region: each answer is right or says the
    # region is not there (no crash, no stale handle).
    stop, failures, done = threading.Event(), [], [0]
    cuda.write(ptr, floats(x))

    def hammer():
        while not stop.is_set():
            status, answer = srv.request("POST", "/v2/models/add/infer", infer_body(2))
            if status == 200:
                if answer["outputs"][0]["data"] != [v + 1 for v in x]:
                    failures.append(f"wrong answer {answer}")
                done[0] += 1
            elif status != 400 or "Unable to find shared memory region: 'gpu_io'" not in answer["error"]:
                failures.append(f"{status} {answer}")
    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(20):
        assert srv.request("POST", "/v2/cudasharedmemory/region/gpu_io/unregister")[0] == 200
        time.sleep(0.01)
        assert srv.request("POST", "/v2/cudasharedmemory/region/gpu_io/register", register)[0] == 200
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(120)
    assert not failures, failures[:5]
    assert done[0] > 0

    assert srv.request("POST", "/v2/cudasharedmemory/unregister")[0] == 200
    assert srv.request("GET", "/v2/cudasharedmemory/status") == (200, [])


if pytest is not None:
    @pytest.mark.parametrize("backend", ["cpu", "cuda"])
    def test_cuda_shared_memory_round_trips_on_gpu(backend, tmp_path):
        sampan = os.environ.get("SAMPAN_BIN") or str(pathlib.Path(__file__).resolve().parents[2] / "build" / "sampan")
        check_round_trips(sampan, tmp_path, backend)


def main():
    global STANDALONE
    STANDALONE = True
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sampan", default=os.environ.get("SAMPAN_BIN", "build/sampan"))
    ap.add_argument("--backends", default="cpu,cuda")
    ap.add_argument("--ipc-probe", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ipc_probe:
        return ipc_probe(args.ipc_probe)
    failed = 0
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.time()
            try:
                check_round_trips(args.sampan, d, backend)
                print(f"PASS cuda shared memory, --backend {backend} ({time.time() - t0:.1f} s)")
            except Skip as e:
                print(f"SKIP cuda shared memory, --backend {backend}: {e}")
            except Exception as e:  # noqa: BLE001 -- reported, and the run fails
                failed += 1
                print(f"FAIL cuda shared memory, --backend {backend}: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
