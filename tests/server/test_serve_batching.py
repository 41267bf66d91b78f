"""Dynamic batching through the real server: 64 concurrent tritonclient HTTP
clients each send distinct inputs; every response must carry its own
request's result, and the server must have run far fewer executions than
inferences (nv_inference_exec_count well below nv_inference_count)."""

import json
import re
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

CONFIG = """
max_batch_size: 32
input [{ name: "x" data_type: TYPE_FP32 dims: [ 8 ] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [ 8 ] }]
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [{ kind: KIND_CPU count: 1 }]
"""


def metric(text, name, model):
    m = re.search(r'^%s\{model="%s",version="1"\} (\S+)$' % (name, model), text, re.M)
    assert m, f"{name} for {model} not in /metrics:\n{text}"
    return float(m.group(1))


def test_64_concurrent_clients_are_batched_and_each_gets_its_own_result(serve, tmp_path, write_model,
                                                                     make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "adder", make_add_model(dims=(8,), bias=0.25), config=CONFIG)
    srv = serve(repo, "--backend", "reference")

    clients, per_client = 64, 6
    errors, wrong = [], []
    barrier = threading.Barrier(clients)

    def client(cid):
        c = httpclient.InferenceServerClient(srv.http_url)
        barrier.wait()
        for k in range(per_client):
            x = (np.arange(8, dtype=np.float32) + cid * 100 + k * 1000).reshape(1, 8)
            inp = httpclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=(k % 2 == 0))  # JSON and binary tensors alike
            try:
                r = c.infer("adder", [inp], request_id=f"{cid}-{k}")
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"client {cid} request {k}: {e}")
                continue
            y = r.as_numpy("y")
            if r.get_response()["id"] != f"{cid}-{k}" or y is None or not np.array_equal(y, x + np.float32(0.25)):
                wrong.append((cid, k, None if y is None else y.tolist()))
        c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert not wrong, wrong[:5]

    text = srv.metrics()
    count = metric(text, "nv_inference_count", "adder")
    execs = metric(text, "nv_inference_exec_count", "adder")
    assert count == clients * per_client
    assert metric(text, "nv_inference_request_success", "adder") == clients * per_client
    assert execs <= count / 4, f"{execs} executions for {count} inferences: requests were not batched"

    stats = httpclient.InferenceServerClient(srv.http_url).get_inference_statistics("adder")
    s = stats["model_stats"][0]
    assert s["inference_count"] == count and s["execution_count"] == execs
    assert max(b["batch_size"] for b in s["batch_stats"]) > 1
    assert all(b["batch_size"] <= 32 for b in s["batch_stats"])


def test_queue_full_is_rejected_with_a_clear_error(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "small_queue", make_add_model(dims=(8,)), config="""
max_batch_size: 4
dynamic_batching {
  max_queue_delay_microseconds: 3000000
  default_queue_policy { max_queue_size: 2 }
}
""")
    srv = serve(repo, "--backend", "reference")
    x = np.zeros((1, 8), np.float32)
    inp = httpclient.InferInput("x", [1, 8], "FP32")
    inp.set_data_from_numpy(x)
    results = []

    def waiting():
        results.append(httpclient.InferenceServerClient(srv.http_url).infer("small_queue", [inp]).as_numpy("y"))

    # Two requests wait out the 3 s delay in the queue; a third finds it full.
    threads = [threading.Thread(target=waiting) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.time() + 10
    while 'nv_inference_pending_request_count{model="small_queue",version="1"} 2' not in srv.metrics():
        assert time.time() < deadline, "the two requests never reached the queue"
        time.sleep(0.02)
    with pytest.raises(Exception, match="[Mm]aximum queue size"):
        httpclient.InferenceServerClient(srv.http_url).infer("small_queue", [inp])
    # Over plain HTTP: 503 with Retry-After (the shed answer a gateway retries elsewhere).
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.0] * 8}]}).encode()
    try:
        urllib.request.urlopen(urllib.request.Request(srv.http_base + "/v2/models/small_queue/infer", data=body),
                               timeout=10)
        pytest.fail("a third request was admitted to a full queue")
    except urllib.error.HTTPError as e:
        assert e.code == 503 and e.headers.get("Retry-After") == "1", (e.code, dict(e.headers))
        assert "Exceeds maximum queue size" in e.read().decode()
    for t in threads:
        t.join(30)
    assert len(results) == 2 and all(np.array_equal(y, x + 1) for y in results)
    assert 'reason="REJECTED",version="1"} 2' in srv.metrics()


def _batch_size_model():
    """y = x + (rows the engine ran): reveals the batch size the engine saw."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "sf"], ["y"]),
    ]
    m = helper.make_model(helper.make_graph(nodes, "rows", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


BUCKET_CONFIG = """
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [ 2 ] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [ 2 ] }]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [{ kind: KIND_CPU count: 1 }]
sampan { batch_buckets: [ 4, 6 ] }
"""


def test_batches_are_padded_to_the_configured_buckets(serve, tmp_path, write_model):
    """sampan.batch_buckets [4, 6] (max 8 added): a request of 1, 5 or 7 rows runs as 4, 6 or 8 rows,
    and each caller gets back only its own rows."""
    repo = tmp_path / "repo"
    write_model(repo, "rows", _batch_size_model(), config=BUCKET_CONFIG)
    write_model(repo, "rows_plain", _batch_size_model(), config=BUCKET_CONFIG.replace("[ 4, 6 ]", "[ 0 ]"))
    srv = serve(repo, "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    for rows, engine_rows in [(1, 4), (4, 4), (5, 6), (7, 8), (8, 8)]:
        x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
        for model, want in [("rows", engine_rows), ("rows_plain", rows)]:
            inp = httpclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            y = c.infer(model, [inp]).as_numpy("y")
            assert y.shape == (rows, 2), (model, rows, y.shape)
            np.testing.assert_array_equal(y, x + want, err_msg=f"{model}, {rows} rows")


@pytest.mark.parametrize("buckets,error", [
    ("[ 4, 2 ]", "sampan.batch_buckets[1]: sizes must increase"),
    ("[ 9 ]", "sampan.batch_buckets[0]: must be in 1..max_batch_size (8)"),
])
def test_bad_batch_buckets_name_the_field(serve, tmp_path, write_model, buckets, error):
    repo = tmp_path / "repo"
    write_model(repo, "rows", _batch_size_model(), config=BUCKET_CONFIG.replace("[ 4, 6 ]", buckets))
    srv = serve(repo, "--backend", "reference", "--strict-readiness", "false")
    index = {m["name"]: m for m in httpclient.InferenceServerClient(srv.http_url).get_model_repository_index()}
    assert index["rows"]["state"] == "UNAVAILABLE"
    assert error in index["rows"]["reason"], index["rows"]["reason"]
