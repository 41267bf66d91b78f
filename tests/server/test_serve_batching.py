"""Dynamic batching through the real server: 64 concurrent tritonclient HTTP
clients each send distinct inputs; every response must carry its own
request's result, and the server must have run far fewer executions than
inferences (nv_inference_exec_count well below nv_inference_count)."""

import re
import threading
import time

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
    for t in threads:
        t.join(30)
    assert len(results) == 2 and all(np.array_equal(y, x + 1) for y in results)
    assert 'reason="REJECTED",version="1"} 1' in srv.metrics()
