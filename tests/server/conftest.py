"""Fixtures for black-box tests of `sampan serve`.

`serve(repository, *args)` starts the real binary (env SAMPAN_BIN, else
build/sampan) on free ports of 127.0.0.1, waits until it says "ready" and
answers /v2/health/live, and stops it (SIGTERM) at the end of the test:

    def test_x(serve, tmp_path, write_model):
        write_model(tmp_path / "repo", "add", make_add_model())
        srv = serve(tmp_path / "repo", "--model-control-mode", "explicit", "--load-model", "add")
        client = tritonclient.http.InferenceServerClient(srv.http_url)

Server attributes: http_url / grpc_url ("127.0.0.1:PORT", as tritonclient
wants), http_base ("http://127.0.0.1:PORT"), metrics_url (".../metrics"),
http_port / grpc_port / metrics_port / agent_port (None when disabled; the agent check
only with --agent-port), repository,
process, output() (everything it printed so far), stop(sig, timeout) -> exit code.

Model helpers (fixtures returning functions): `write_model(repo, name,
model, version=1, config=None)` writes <repo>/<name>/<version>/model.onnx and
an optional config.pbtxt; `make_add_model(...)` builds a small ONNX model
(y = x + bias) with onnx.helper that runs fast on the reference backend.
"""

import os
import pathlib
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def sampan_bin():
    return os.environ.get("SAMPAN_BIN") or str(ROOT / "build" / "sampan")


class Server:
    def __init__(self, args, repository, env=None):
        self.repository = pathlib.Path(repository)
        self.args = args
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env,
            start_new_session=True)
        self._lines = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self.http_port = self.grpc_port = self.metrics_port = self.agent_port = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            with self._lock:
                self._lines.append(line)
            text = line.strip()
            # "HTTP KServe v2 on 127.0.0.1:PORT", "gRPC KServe v2 on ...", "Metrics on 127.0.0.1:PORT/metrics",
            # "Agent check on 127.0.0.1:PORT"
            for prefix, attr in (("HTTP KServe v2 on ", "http_port"), ("gRPC KServe v2 on ", "grpc_port"),
                                 ("Metrics on ", "metrics_port"), ("Agent check on ", "agent_port")):
                if text.startswith(prefix):
                    setattr(self, attr, int(text[len(prefix):].rsplit(":", 1)[1].split("/")[0]))
            if text == "ready":
                self._ready.set()
        self._ready.set()  # the process ended: stop waiting

    def output(self):
        with self._lock:
            return "".join(self._lines)

    @property
    def http_url(self):
        return f"127.0.0.1:{self.http_port}" if self.http_port else None

    @property
    def http_base(self):
        return f"http://127.0.0.1:{self.http_port}" if self.http_port else None

    @property
    def grpc_url(self):
        return f"127.0.0.1:{self.grpc_port}" if self.grpc_port else None

    @property
    def metrics_url(self):
        return f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port else None

    def wait_ready(self, timeout):
        if not self._ready.wait(timeout):
            self.stop(signal.SIGKILL)
            pytest.fail(f"sampan serve did not start within {timeout}s:\n{self.output()}")
        if self.process.poll() is not None:
            self._reader.join(5)
            pytest.fail(f"sampan serve exited with {self.process.returncode}:\n{self.output()}")
        # Over TLS (--http-use-ssl) the tests make their own clients; "ready" comes after the listeners.
        if self.http_port and not {"--http-use-ssl", "--http-use-ssl-mutual"} & set(self.args):
            deadline = time.time() + timeout
            while True:
                try:
                    with urllib.request.urlopen(self.http_base + "/v2/health/live", timeout=2) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, OSError):
                    pass
                if time.time() > deadline:
                    self.stop(signal.SIGKILL)
                    pytest.fail(f"/v2/health/live never answered 200:\n{self.output()}")
                time.sleep(0.05)

    def get(self, path, timeout=10):
        """(status, body bytes) of GET http_base + path (errors included)."""
        try:
            with urllib.request.urlopen(self.http_base + path, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def metrics(self):
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            return r.read().decode()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signals the server and waits; returns its exit code (kills it after `timeout`)."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(sig)
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._reader.join(5)
        return self.process.returncode


@pytest.fixture
def serve():
    """Factory: serve(repository, *extra_args, timeout=60, http=True, grpc=True, metrics=True, env=None)."""
    servers = []

    def start(repository, *extra, timeout=60, http=True, grpc=True, metrics=True, env=None):
        args = [sampan_bin(), "serve", "--model-repository", str(repository),
                "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
                "--http-port", "0" if http else "-1",
                "--grpc-port", "0" if grpc else "-1",
                "--metrics-port", "0" if metrics else "-1"]
        args += [str(a) for a in extra]
        srv = Server(args, repository, env=env)
        servers.append(srv)
        srv.wait_ready(timeout)
        return srv

    yield start
    for srv in servers:
        srv.stop(signal.SIGTERM, timeout=30)


# ---------------------------------------------------------------- models

def _make_add_model(dims=(4,), batch=True, dtype=np.float32, bias=1.0, input_name="x", output_name="y",
                    opset=17):
    """y = x + bias as ONNX bytes. dims: non-batch dims; batch=True adds a leading dynamic 'N'."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    shape = (["N"] if batch else []) + list(dims)
    x = helper.make_tensor_value_info(input_name, elem, shape)
    y = helper.make_tensor_value_info(output_name, elem, shape)
    b = numpy_helper.from_array(np.full(dims, bias, dtype=dtype), "bias")
    node = helper.make_node("Add", [input_name, "bias"], [output_name], name="add")
    graph = helper.make_graph([node], "add", [x], [y], initializer=[b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _write_model(repo, name, model_bytes, version=1, config=None, filename="model.onnx"):
    """Writes <repo>/<name>/<version>/<filename> (+ config.pbtxt when given); returns the model dir."""
    model_dir = pathlib.Path(repo) / name
    vdir = model_dir / str(version)
    vdir.mkdir(parents=True, exist_ok=True)
    (vdir / filename).write_bytes(model_bytes)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


@pytest.fixture
def make_add_model():
    return _make_add_model


@pytest.fixture
def write_model():
    return _write_model


# ---------------------------------------------------------------- real models (shared by the protocol tests)

MODELS = pathlib.Path(os.environ.get("SAMPAN_MODELS") or ROOT / "build" / "models")
FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"


def sampan_run(model, inputs, tmp_path, tag):
    """Outputs of `sampan run` (the CPU backend, as the server uses by default) as {name: array}."""
    out_dir = tmp_path / f"run_{tag}"
    out_dir.mkdir()
    args = [sampan_bin(), "run", str(model), "--backend", "cpu", "--output-dir", str(out_dir)]
    for name, array in inputs.items():
        path = tmp_path / f"{tag}_{name}.npy"
        np.save(path, array)
        args += ["--input", f"{name}={path}"]
    subprocess.run(args, check=True, capture_output=True, timeout=600)
    return {p.stem: np.load(p) for p in out_dir.glob("*.npy")}


def real_model_repo(tmp_path):
    """A repository with the OCR recognizer, under a config.pbtxt written the way Triton's
    docs write one (fixtures/triton_repo), and ResNet-50 without a config (auto-complete)."""
    import shutil
    for name in ("resnet50.onnx", "ocr_rec.onnx"):
        if not (MODELS / name).exists():
            pytest.fail(f"{MODELS / name} missing: run bash tests/models/export_all.sh build/models")
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "triton_repo", repo)
    for model in ("ocr_rec", "resnet50"):
        (repo / model / "1").mkdir(parents=True)
        shutil.copy(MODELS / f"{model}.onnx", repo / model / "1" / "model.onnx")
    return repo


# y = x + 1 over [N, 4], batched: the small model the protocol tests share.
ADD_CONFIG = """
name: "add"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 1000 }
"""


@pytest.fixture
def add_repo(tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "add", make_add_model(dims=(4,), bias=1.0), config=ADD_CONFIG)
    return repo
