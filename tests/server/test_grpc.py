"""Black-box tests of the KServe v2 gRPC front end of `sampan serve`, through
Triton's own client (tritonclient.grpc, unmodified) and, where the client
would refuse to send a malformed request, the raw generated stub it ships.

Fast tier: a small ONNX add model (conftest's make_add_model). Slow tier (test
names containing `slow`, deselect with -k "not slow"): ResNet-50 and the OCR
recognizer, served from a Triton-style repository fixture, with outputs
compared to `sampan run`.
"""

import queue
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import ADD_CONFIG, MODELS, real_model_repo, sampan_run




def add_input(x):
    inp = grpcclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def raw_stub(srv):
    """The generated stub tritonclient ships, on a plain channel: sends what the client would refuse to."""
    channel = grpc.insecure_channel(srv.grpc_url)
    return channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)


def test_grpc_health_metadata_config_and_stats(serve, add_repo):
    srv = serve(add_repo)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add")
    assert not client.is_model_ready("add", model_version="9")  # unknown version: not ready, no error
    assert not client.is_model_ready("nope")

    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "sampan"
    assert meta["version"]
    assert "model_repository" in meta["extensions"]

    model = client.get_model_metadata("add", as_json=True)
    assert model["name"] == "add"
    assert model["versions"] == ["1"]
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "4"]}]
    assert model["outputs"] == [{"name": "y", "datatype": "FP32", "shape": ["-1", "4"]}]

    # ModelConfigResponse.config decodes as Triton's own inference.ModelConfig.
    config = client.get_model_config("add").config
    assert config.name == "add"
    assert config.max_batch_size == 8
    assert config.input[0].name == "x" and list(config.input[0].dims) == [4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 1000
    assert client.get_model_config("add", as_json=True)["config"]["platform"] == "onnxruntime_onnx"

    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("nope")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    assert "nope" in e.value.message()

    for _ in range(3):
        client.infer("add", [add_input(np.zeros((2, 4), np.float32))])
    stats = client.get_inference_statistics("add", as_json=True)["model_stats"]
    assert len(stats) == 1 and stats[0]["name"] == "add" and stats[0]["version"] == "1"
    assert int(stats[0]["inference_count"]) == 6  # samples: 3 requests of batch 2
    assert int(stats[0]["inference_stats"]["success"]["count"]) == 3
    assert int(stats[0]["execution_count"]) >= 1
    all_stats = client.get_inference_statistics(as_json=True)["model_stats"]
    assert [s["name"] for s in all_stats] == ["add"]


def test_grpc_infer_raw_tensors_and_request_id(serve, add_repo):
    srv = serve(add_repo)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = client.infer("add", [add_input(x)], request_id="r-42",
                          outputs=[grpcclient.InferRequestedOutput("y")])
    np.testing.assert_array_equal(result.as_numpy("y"), x + 1)
    response = result.get_response()
    assert response.id == "r-42"
    assert response.model_name == "add" and response.model_version == "1"
    assert response.outputs[0].datatype == "FP32" and list(response.outputs[0].shape) == [3, 4]
    # Typed contents (InferTensorContents) instead of raw bytes, through the raw stub.
    channel, stub = raw_stub(srv)
    with channel:
        req = service_pb2.ModelInferRequest(model_name="add", id="typed")
        t = req.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        t.contents.fp32_contents.extend([1.5, 2.5, -3.0, 0.0])
        resp = stub.ModelInfer(req, timeout=30)
        assert resp.id == "typed"
        np.testing.assert_array_equal(np.frombuffer(resp.raw_output_contents[0], np.float32), [2.5, 3.5, -2.0, 1.0])


def test_grpc_stream_many_requests_matched_by_id(serve, add_repo):
    srv = serve(add_repo)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    n, bad = 200, {17, 101, 150}
    rng = np.random.default_rng(0)
    inputs = {}
    start = time.time()
    for i in range(n):
        rid = f"s{i}"
        if i in bad:  # wrong shape: an error on the stream, which stays open
            client.async_stream_infer("add", [add_input(np.zeros((1, 5), np.float32))], request_id=rid)
            continue
        x = rng.standard_normal((1, 4)).astype(np.float32)
        inputs[rid] = x
        client.async_stream_infer("add", [add_input(x)], request_id=rid)
    got, errors = {}, []
    for _ in range(n):
        result, error = results.get(timeout=60)
        if error is not None:
            errors.append(error)
            continue
        rid = result.get_response().id
        assert rid not in got, f"two responses for {rid}"
        got[rid] = result.as_numpy("y")
    elapsed = time.time() - start
    client.stop_stream()
    assert len(errors) == len(bad)
    for e in errors:
        assert "x" in e.message() and "5" in e.message(), e.message()
    assert set(got) == set(inputs)
    for rid, x in inputs.items():
        np.testing.assert_array_equal(got[rid], x + 1, err_msg=rid)
    print(f"stream: {n} requests in {elapsed:.2f}s")
    # The server kept serving after the stream.
    np.testing.assert_array_equal(client.infer("add", [add_input(np.ones((1, 4), np.float32))]).as_numpy("y"),
                                  np.full((1, 4), 2, np.float32))


def test_grpc_concurrent_clients_get_their_own_answers(serve, add_repo):
    srv = serve(add_repo)
    failures = []

    def worker(k):
        try:
            client = grpcclient.InferenceServerClient(srv.grpc_url)
            for j in range(10):
                x = np.full((1, 4), k * 100 + j, np.float32)
                y = client.infer("add", [add_input(x)], request_id=f"{k}-{j}").as_numpy("y")
                if not np.array_equal(y, x + 1):
                    failures.append((k, j, y))
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append((k, repr(e)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures[:5]


def test_grpc_bad_requests_then_a_good_one(serve, add_repo):
    srv = serve(add_repo)
    client = grpcclient.InferenceServerClient(srv.grpc_url)

    def code_and_message(fn):
        with pytest.raises(InferenceServerException) as e:
            fn()
        return e.value.status(), e.value.message()

    status, msg = code_and_message(lambda: client.infer("nope", [add_input(np.zeros((1, 4), np.float32))]))
    assert status == "StatusCode.NOT_FOUND" and "nope" in msg
    status, msg = code_and_message(
        lambda: client.infer("add", [add_input(np.zeros((1, 4), np.float32))], model_version="7"))
    assert status == "StatusCode.NOT_FOUND" and "7" in msg
    status, msg = code_and_message(lambda: client.infer("add", [add_input(np.zeros((1, 5), np.float32))]))
    assert status == "StatusCode.INVALID_ARGUMENT" and "x" in msg
    wrong_type = grpcclient.InferInput("x", [1, 4], "INT32")
    wrong_type.set_data_from_numpy(np.zeros((1, 4), np.int32))
    status, msg = code_and_message(lambda: client.infer("add", [wrong_type]))
    assert status == "StatusCode.INVALID_ARGUMENT" and "INT32" in msg
    status, msg = code_and_message(lambda: client.infer("add", [add_input(np.zeros((1, 4), np.float32))],
                                                        outputs=[grpcclient.InferRequestedOutput("z")]))
    assert status == "StatusCode.INVALID_ARGUMENT" and "z" in msg

    channel, stub = raw_stub(srv)
    with channel:
        def raw_error(req):
            with pytest.raises(grpc.RpcError) as e:
                stub.ModelInfer(req, timeout=30)
            return e.value.code(), e.value.details()

        req = service_pb2.ModelInferRequest(model_name="add")
        req.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        req.raw_input_contents.append(b"\0" * 15)  # truncated tensor
        code, details = raw_error(req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "raw_input_contents[0] holds 15 bytes, but FP32 [1,4] needs 16" in details

        req.raw_input_contents[0] = b"\0" * 16
        req.raw_input_contents.append(b"\0" * 16)  # more raw contents than inputs
        code, details = raw_error(req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "one per input" in details

        req = service_pb2.ModelInferRequest(model_name="add")
        req.inputs.add(name="x", datatype="FLOAT32", shape=[1, 4])
        req.raw_input_contents.append(b"\0" * 16)
        code, details = raw_error(req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "unknown datatype 'FLOAT32'" in details

        # Over the message size limit (64 MiB by default).
        req = service_pb2.ModelInferRequest(model_name="add")
        rows = (1 << 22) + 1  # 64 MiB + 16 bytes of FP32 [rows, 4]
        req.inputs.add(name="x", datatype="FP32", shape=[rows, 4])
        req.raw_input_contents.append(b"\0" * (rows * 16))
        code, _ = raw_error(req)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED

    x = np.full((1, 4), 3, np.float32)
    np.testing.assert_array_equal(client.infer("add", [add_input(x)]).as_numpy("y"), x + 1)


def test_grpc_model_control_explicit(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "add", make_add_model(dims=(4,), bias=1.0), config=ADD_CONFIG)
    write_model(repo, "add2", make_add_model(dims=(4,), bias=2.0))
    srv = serve(repo, "--model-control-mode", "explicit", "--load-model", "add")
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["add"]["state"] == "READY"
    assert index["add2"].get("state") != "READY"
    assert not client.is_model_ready("add2")

    client.load_model("add2")
    assert client.is_model_ready("add2")
    x = np.zeros((1, 4), np.float32)
    np.testing.assert_array_equal(client.infer("add2", [add_input(x)]).as_numpy("y"), x + 2)

    client.unload_model("add2")
    assert not client.is_model_ready("add2")
    with pytest.raises(InferenceServerException):
        client.infer("add2", [add_input(x)])
    ready = client.get_model_repository_index(as_json=True)["models"]
    assert [m["name"] for m in ready if m.get("state") == "READY"] == ["add"]

    with pytest.raises(InferenceServerException) as e:
        client.load_model("not_in_repo")
    assert "not_in_repo" in e.value.message()
    # A config override loads (tests/server/test_load_config.py); model files sent with a load
    # are refused by name, and the loaded version keeps serving.
    client.load_model("add", config='{"max_batch_size": 2}')
    assert client.get_model_config("add").config.max_batch_size == 2
    with pytest.raises(InferenceServerException) as e:
        client.load_model("add", config='{"max_batch_size": 2}', files={"file:1/model.onnx": b"onnx"})
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "file:1/model.onnx" in e.value.message()
    assert client.is_model_ready("add")


def test_grpc_model_control_token(serve, add_repo):
    srv = serve(add_repo, "--model-control-mode", "explicit", "--load-model", "*", "--model-control-token", "t0k")
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    with pytest.raises(InferenceServerException) as e:
        client.unload_model("add")
    assert e.value.status() == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(InferenceServerException) as e:
        client.unload_model("add", headers={"authorization": "Bearer nope"})
    assert e.value.status() == "StatusCode.UNAUTHENTICATED"
    assert client.is_model_ready("add")
    client.unload_model("add", headers={"authorization": "Bearer t0k"})
    assert not client.is_model_ready("add")
    client.load_model("add", headers={"authorization": "Bearer t0k"})
    assert client.is_model_ready("add")


def test_grpc_sigterm_ends_open_streams(serve, add_repo):
    srv = serve(add_repo)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("add", [add_input(np.ones((1, 4), np.float32))], request_id="one")
    result, error = results.get(timeout=30)
    assert error is None and result.get_response().id == "one"
    # The stream stays open; the server still exits promptly and cleanly.
    start = time.time()
    assert srv.stop() == 0
    assert time.time() - start < 5, srv.output()
    client.stop_stream()


# ---------------------------------------------------------------- real models (slow)

def test_slow_grpc_resnet50_and_ocr_rec_match_sampan_run(serve, tmp_path):
    repo = real_model_repo(tmp_path)
    srv = serve(repo, timeout=600)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    assert client.is_model_ready("ocr_rec") and client.is_model_ready("resnet50")
    config = client.get_model_config("ocr_rec").config
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == 8
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    meta = client.get_model_metadata("resnet50", as_json=True)
    assert meta["inputs"][0]["name"] == "input" and meta["outputs"][0]["name"] == "logits"

    rng = np.random.default_rng(2)
    image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    want = sampan_run(MODELS / "resnet50.onnx", {"input": image}, tmp_path, "resnet")["logits"]
    inp = grpcclient.InferInput("input", list(image.shape), "FP32")
    inp.set_data_from_numpy(image)
    got = client.infer("resnet50", [inp], client_timeout=600).as_numpy("logits")
    # The cpu backend picks each 3x3 convolution's kernel (Winograd or oneDNN's) by timing
    # them when a model loads, so the server and `sampan run` (two processes) may differ in
    # the last bits (seen: 1.1e-4 absolute on logits of magnitude ~100).
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)

    # Two text lines of different widths on one stream: each response matches
    # its own request (by id) and `sampan run` on the same input.
    lines = {f"line{w}": rng.uniform(-1, 1, (1, 3, 48, w)).astype(np.float32) for w in (160, 320)}
    wants = {rid: sampan_run(MODELS / "ocr_rec.onnx", {"x": x}, tmp_path, rid)["softmax_11.tmp_0"]
             for rid, x in lines.items()}
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    for rid, x in lines.items():
        inp = grpcclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        client.async_stream_infer("ocr_rec", [inp], request_id=rid)
    for _ in lines:
        result, error = results.get(timeout=600)
        assert error is None, error
        rid = result.get_response().id
        np.testing.assert_allclose(result.as_numpy("softmax_11.tmp_0"), wants[rid], rtol=1e-4, atol=1e-5, err_msg=rid)
    client.stop_stream()
