"""Black-box tests of the KServe v2 REST front end of `sampan serve`, through
Triton's own client (tritonclient.http, unmodified) and raw HTTP where the
client would hide what is on the wire.

Fast tier: a small ONNX add model (conftest's make_add_model). Slow tier
(test names containing `slow`, deselect with -k "not slow"): ResNet-50 and the OCR recognizer, served from a Triton-style
repository fixture, with outputs compared to `sampan run`.
"""

import json
import socket

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ADD_CONFIG, MODELS, real_model_repo, sampan_run




def raw_request(port, method, path, body=b"", headers=None, read_all=True):
    """Sends one HTTP/1.1 request on a fresh connection; returns (status, headers dict, body bytes)."""
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}", "Connection: close"]
    for k, v in (headers or {}).items():
        head.append(f"{k}: {v}")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    header_text, _, payload = data.partition(b"\r\n\r\n")
    lines = header_text.decode().split("\r\n")
    status = int(lines[0].split()[1])
    fields = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    return status, fields, payload


def error_of(body):
    doc = json.loads(body)
    assert set(doc) == {"error"}, doc
    return doc["error"]


def test_metadata_config_ready_and_stats(serve, add_repo):
    srv = serve(add_repo)
    client = httpclient.InferenceServerClient(srv.http_url)
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "sampan" and meta["version"]
    assert "binary_tensor_data" in meta["extensions"]

    assert client.is_model_ready("add")
    assert client.is_model_ready("add", "1")
    assert not client.is_model_ready("no_such_model")
    md = client.get_model_metadata("add")
    assert md["name"] == "add" and md["versions"] == ["1"]
    assert md["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert md["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}]

    config = client.get_model_config("add")
    assert config["name"] == "add" and config["max_batch_size"] == 8
    assert config["input"][0]["data_type"] == "TYPE_FP32" and config["input"][0]["dims"] == [4]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 1000

    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("no_such_model")
    assert "no_such_model" in e.value.message()
    assert e.value.status() == "404"

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inp = httpclient.InferInput("x", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    for _ in range(3):
        client.infer("add", [inp])
    stats = client.get_inference_statistics("add")
    (s,) = stats["model_stats"]
    assert s["name"] == "add" and s["version"] == "1"
    assert s["inference_stats"]["success"]["count"] == 3
    assert s["inference_count"] == 6
    assert 1 <= s["execution_count"] <= 3
    assert set(s["inference_stats"]) >= {"success", "fail", "queue", "compute_input", "compute_infer",
                                         "compute_output", "cache_hit", "cache_miss"}
    assert client.get_inference_statistics()["model_stats"][0]["name"] == "add"


def test_json_and_binary_inference(serve, add_repo):
    srv = serve(add_repo)
    client = httpclient.InferenceServerClient(srv.http_url)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for binary_in in (False, True):
        for binary_out in (False, True):
            inp = httpclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=binary_in)
            out = httpclient.InferRequestedOutput("y", binary_data=binary_out)
            result = client.infer("add", [inp], outputs=[out], request_id=f"r{binary_in}{binary_out}")
            y = result.as_numpy("y")
            assert y.dtype == np.float32 and y.shape == (3, 4)
            np.testing.assert_array_equal(y, x + np.float32(1))
            assert result.get_response()["id"] == f"r{binary_in}{binary_out}"
            assert result.get_response()["model_version"] == "1"
    # No outputs named: every output, binary by default in tritonclient.
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(x[:1])
    np.testing.assert_array_equal(client.infer("add", [inp], model_version="1").as_numpy("y"), x[:1] + 1)
    # Nested JSON data on the wire, as curl users write it.
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4],
                                   "data": [[1, 2, 3, 4], [5, 6, 7, 8]]}]}).encode()
    status, headers, payload = raw_request(srv.http_port, "POST", "/v2/models/add/infer", body)
    assert status == 200, payload
    doc = json.loads(payload)
    assert doc["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [2, 4], "data": [2, 3, 4, 5, 6, 7, 8, 9]}]


def test_bad_requests_then_a_good_one(serve, add_repo):
    (add_repo / "garbage").mkdir()
    (add_repo / "garbage" / "config.pbtxt").write_text("name: \"garbage\"\nmax_batchsize: 8\n{{{\n")
    srv = serve(add_repo, "--strict-readiness", "false")
    port = srv.http_port

    def infer_body(**inp):
        x = {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}
        x.update(inp)
        return json.dumps({"inputs": [x]}).encode()

    x_json = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                     "parameters": {"binary_data_size": 16}}]}).encode()
    cases = [
        # (path, body, headers, status, message fragment)
        ("/v2/models/add/infer", b'{"inputs": [', {}, 400, "malformed JSON"),
        ("/v2/models/add/infer", infer_body(datatype="INT32"), {}, 400, "x"),
        ("/v2/models/add/infer", infer_body(shape=[1, 5], data=[1, 2, 3, 4, 5]), {}, 400, "x"),
        ("/v2/models/add/infer", infer_body(data=[1, 2, 3]), {}, 400, "'data' has 3 elements, its shape holds 4"),
        ("/v2/models/add/infer", infer_body(name="nope"), {}, 400, "nope"),
        ("/v2/models/nope/infer", infer_body(), {}, 404, "nope"),
        ("/v2/models/add/versions/9/infer", infer_body(), {}, 404, "9"),
        ("/v2/models/add/infer", x_json + b"\0" * 10, {"Inference-Header-Content-Length": len(x_json)}, 400,
         "binary data truncated"),
        ("/v2/models/add/infer", x_json + b"\0" * 20, {"Inference-Header-Content-Length": len(x_json)}, 400,
         "no input claims"),
        ("/v2/models/add/infer", infer_body(), {"Content-Encoding": "gzip"}, 400, "Content-Encoding"),
        ("/v2/models/garbage/infer", infer_body(), {}, None, "garbage"),
        ("/v2/no/such/route", b"", {}, 404, "Not Found"),
    ]
    for path, body, headers, want_status, fragment in cases:
        status, fields, payload = raw_request(port, "POST", path, body, headers)
        if want_status is None:
            assert status in (400, 404, 503), (path, status, payload)
        else:
            assert status == want_status, (path, body[:80], status, payload)
        assert fields["content-type"] == "application/json"
        assert fragment in error_of(payload), (path, payload)

    # The garbage config is reported, with the file and the line.
    client = httpclient.InferenceServerClient(srv.http_url)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["garbage"]["state"] == "UNAVAILABLE"
    assert "config.pbtxt" in index["garbage"]["reason"]
    assert index["add"]["state"] == "READY"

    # Oversized body: refused from its Content-Length alone, connection closed cleanly.
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /v2/models/add/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n{")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), data
    assert b"exceeds the server's limit" in payload

    # ... and the server still serves.
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), np.float32))
    np.testing.assert_array_equal(client.infer("add", [inp]).as_numpy("y"), np.full((1, 4), 2, np.float32))


def test_model_control_explicit(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "add", make_add_model(dims=(4,), bias=1.0), config=ADD_CONFIG)
    write_model(repo, "add2", make_add_model(dims=(4,), bias=2.0))
    srv = serve(repo, "--model-control-mode", "explicit", "--load-model", "add")
    client = httpclient.InferenceServerClient(srv.http_url)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["add"]["state"] == "READY"
    assert index["add2"].get("state") != "READY"
    assert not client.is_model_ready("add2")

    client.load_model("add2")
    assert client.is_model_ready("add2")
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 4), np.float32))
    np.testing.assert_array_equal(client.infer("add2", [inp]).as_numpy("y"), np.full((1, 4), 2, np.float32))

    client.unload_model("add2")
    assert not client.is_model_ready("add2")
    with pytest.raises(InferenceServerException):
        client.infer("add2", [inp])
    ready_index = client.get_model_repository_index()
    assert [m["name"] for m in ready_index if m.get("state") == "READY"] == ["add"]

    with pytest.raises(InferenceServerException) as e:
        client.load_model("not_in_repo")
    assert "not_in_repo" in e.value.message()
    # A config override loads (tests/server/test_load_config.py); model files sent with a load
    # are refused by name, and the loaded version keeps serving.
    client.load_model("add", config='{"max_batch_size": 2}')
    assert client.get_model_config("add")["max_batch_size"] == 2
    with pytest.raises(InferenceServerException) as e:
        client.load_model("add", config='{"max_batch_size": 2}', files={"file:1/model.onnx": b"onnx"})
    assert e.value.status() == "501"
    assert "file:1/model.onnx" in e.value.message()
    assert client.is_model_ready("add")


def test_model_control_token(serve, add_repo):
    srv = serve(add_repo, "--model-control-mode", "explicit", "--load-model", "*", "--model-control-token", "t0k")
    client = httpclient.InferenceServerClient(srv.http_url)
    with pytest.raises(InferenceServerException) as e:
        client.unload_model("add")
    assert e.value.status() == "401"
    with pytest.raises(InferenceServerException) as e:
        client.unload_model("add", headers={"Authorization": "Bearer nope"})
    assert e.value.status() == "403"
    assert client.is_model_ready("add")
    client.unload_model("add", headers={"Authorization": "Bearer t0k"})
    assert not client.is_model_ready("add")


def test_metrics_listener(serve, add_repo):
    srv = serve(add_repo)
    status, fields, body = raw_request(srv.metrics_port, "GET", "/metrics")
    assert status == 200
    assert fields["content-type"].startswith("text/plain; version=0.0.4")
    assert b"nv_inference_count" in body
    assert raw_request(srv.metrics_port, "GET", "/v2/health/live")[0] == 404


# ---------------------------------------------------------------- real models (slow)

def test_slow_resnet50_and_ocr_rec_match_sampan_run(serve, tmp_path):
    repo = real_model_repo(tmp_path)
    srv = serve(repo, timeout=600)
    client = httpclient.InferenceServerClient(srv.http_url, network_timeout=600, connection_timeout=600)
    assert client.is_model_ready("ocr_rec") and client.is_model_ready("resnet50")
    config = client.get_model_config("ocr_rec")
    assert config["platform"] == "onnxruntime_onnx" and config["max_batch_size"] == 8
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]

    rng = np.random.default_rng(1)
    image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    want = sampan_run(MODELS / "resnet50.onnx", {"input": image}, tmp_path, "resnet")["logits"]
    inp = httpclient.InferInput("input", list(image.shape), "FP32")
    inp.set_data_from_numpy(image, binary_data=True)
    got = client.infer("resnet50", [inp]).as_numpy("logits")
    # The cpu backend picks each 3x3 convolution's kernel (Winograd or oneDNN's) by timing
    # them when a model loads, so the server and `sampan run` (two processes) may differ in
    # the last bits (seen: 1.1e-4 absolute on logits of magnitude ~100).
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)

    line = rng.uniform(-1, 1, (1, 3, 48, 320)).astype(np.float32)
    want = sampan_run(MODELS / "ocr_rec.onnx", {"x": line}, tmp_path, "ocr")["softmax_11.tmp_0"]
    for binary in (True, False):  # binary tensors and JSON tensors give the same answer
        inp = httpclient.InferInput("x", list(line.shape), "FP32")
        inp.set_data_from_numpy(line, binary_data=binary)
        out = httpclient.InferRequestedOutput("softmax_11.tmp_0", binary_data=binary)
        got = client.infer("ocr_rec", [inp], outputs=[out]).as_numpy("softmax_11.tmp_0")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_slow_and_idle_clients_are_disconnected(serve, write_model, make_add_model, tmp_path):
    """A client that stops mid-request, or idles on a keep-alive connection, loses the
    connection after the configured timeouts; others are served meanwhile."""
    import socket
    import time
    write_model(tmp_path / "repo", "add", make_add_model())
    srv = serve(tmp_path / "repo", "--http-idle-timeout-secs", "2", "--http-io-timeout-secs", "1")
    slow = socket.create_connection(("127.0.0.1", srv.http_port))
    slow.sendall(b"POST /v2/models/add/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"inp")
    idle = socket.create_connection(("127.0.0.1", srv.http_port))
    assert srv.get("/v2/health/ready")[0] == 200  # the server is not held up
    t0 = time.time()
    slow.settimeout(10)
    assert slow.recv(1024) == b""  # closed by the server
    assert 0.5 < time.time() - t0 < 5
    idle.settimeout(10)
    assert idle.recv(1024) == b""
    assert time.time() - t0 < 6
