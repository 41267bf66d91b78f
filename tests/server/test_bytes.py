"""BYTES tensors end to end with Triton's own clients: a model whose input and outputs are
strings (StringConcat, RegexFullMatch, LabelEncoder) served over HTTP (JSON and the binary
extension), gRPC (raw contents and bytes_contents) and system shared memory, batched across
concurrent requests, with malformed BYTES payloads refused and the server still serving."""

import concurrent.futures
import json
import re
import struct
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

CONFIG = """name: "text"
max_batch_size: 8
input { name: "x" data_type: TYPE_STRING dims: [ -1 ] }
output { name: "y" data_type: TYPE_STRING dims: [ -1 ] }
output { name: "match" data_type: TYPE_BOOL dims: [ -1 ] }
output { name: "id" data_type: TYPE_INT64 dims: [ -1 ] }
dynamic_batching { max_queue_delay_microseconds: 20000 }
"""


def make_text_model():
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        [helper.make_node("StringConcat", ["x", "suffix"], ["y"]),
         helper.make_node("RegexFullMatch", ["x"], ["match"], pattern=r"[a-z]+"),
         helper.make_node("LabelEncoder", ["x"], ["id"], domain="ai.onnx.ml", keys_strings=["cat", "dog"],
                          values_int64s=[1, 2], default_int64=0)],
        "text", [vi("x", TensorProto.STRING, ["N", "L"])],
        [vi("y", TensorProto.STRING, ["N", "L"]), vi("match", TensorProto.BOOL, ["N", "L"]),
         vi("id", TensorProto.INT64, ["N", "L"])],
        [helper.make_tensor("suffix", TensorProto.STRING, [1], [b"!"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 4)])
    m.ir_version = 9
    return m.SerializeToString()


def expected(words):
    w = np.asarray(words, dtype=object)
    y = np.vectorize(lambda s: (s.decode() if isinstance(s, bytes) else s) + "!", otypes=[object])(w)
    ids = np.vectorize(lambda s: {"cat": 1, "dog": 2}.get(s.decode() if isinstance(s, bytes) else s, 0),
                       otypes=[np.int64])(w)
    return y, ids


@pytest.fixture
def text_server(serve, tmp_path, write_model):
    write_model(tmp_path / "repo", "text", make_text_model(), config=CONFIG)
    return serve(tmp_path / "repo", "--backend", "cpu")


def check(result, words, as_numpy):
    y, ids = expected(words)
    got = as_numpy("y")
    assert got.dtype == np.object_
    assert [[v.decode() if isinstance(v, bytes) else v for v in row] for row in got] == y.tolist()
    assert as_numpy("id").tolist() == ids.tolist()
    text = [[v.decode() if isinstance(v, bytes) else v for v in r] for r in words]
    assert as_numpy("match").tolist() == [[re.fullmatch("[a-z]+", w) is not None for w in row] for row in text]


WORDS = np.array([["cat", "Dog", "été"], ["dog", "x1", ""]], dtype=object)


@pytest.mark.parametrize("binary", [False, True])
def test_http_json_and_binary(text_server, binary):
    c = httpclient.InferenceServerClient(text_server.http_url)
    meta = c.get_model_metadata("text")
    assert meta["inputs"][0]["datatype"] == "BYTES"
    inp = httpclient.InferInput("x", list(WORDS.shape), "BYTES")
    inp.set_data_from_numpy(WORDS, binary_data=binary)
    outs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("y", "match", "id")]
    r = c.infer("text", [inp], outputs=outs)
    check(r, WORDS, r.as_numpy)


def test_grpc_raw_and_bytes_contents(text_server):
    c = grpcclient.InferenceServerClient(text_server.grpc_url)
    inp = grpcclient.InferInput("x", list(WORDS.shape), "BYTES")
    inp.set_data_from_numpy(WORDS)  # raw_input_contents, length-prefixed
    r = c.infer("text", [inp])
    check(r, WORDS, r.as_numpy)
    # The same through the typed field, as other KServe clients send it.
    from tritonclient.grpc import service_pb2
    req = service_pb2.ModelInferRequest(model_name="text")
    t = req.inputs.add(name="x", datatype="BYTES", shape=list(WORDS.shape))
    t.contents.bytes_contents.extend([w.encode() for w in WORDS.flatten()])
    resp = c._client_stub.ModelInfer(req)
    y = resp.raw_output_contents[[o.name for o in resp.outputs].index("y")]
    parts, pos = [], 0
    while pos < len(y):
        (n,) = struct.unpack_from("<I", y, pos)
        parts.append(y[pos + 4:pos + 4 + n].decode())
        pos += 4 + n
    assert parts == [w + "!" for w in WORDS.flatten()]


def test_requests_batch_together(text_server):
    """64 concurrent one-row requests of different words: each gets its own answer, and they
    ran in fewer executions than requests (the batcher concatenated string rows)."""
    def one(i):
        c = httpclient.InferenceServerClient(text_server.http_url)
        words = np.array([[f"w{i}", "cat" if i % 2 else "dog"]], dtype=object)
        inp = httpclient.InferInput("x", [1, 2], "BYTES")
        inp.set_data_from_numpy(words, binary_data=i % 3 == 0)
        r = c.infer("text", [inp])
        return words, r.as_numpy("y"), r.as_numpy("id")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(64)))
    for words, y, ids in results:
        ey, eids = expected(words)
        assert [v.decode() if isinstance(v, bytes) else v for v in y[0]] == ey[0].tolist()
        assert ids.tolist() == eids.tolist()
    stats = httpclient.InferenceServerClient(text_server.http_url).get_inference_statistics("text")
    s = stats["model_stats"][0]
    assert s["inference_count"] == 64
    assert s["execution_count"] < 64, s


def post(srv, body, binary=b""):
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/octet-stream"}
    if binary:
        headers["Inference-Header-Content-Length"] = str(len(data))
    req = urllib.request.Request(f"{srv.http_base}/v2/models/text/infer", data=data + binary, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_malformed_bytes_are_clear_errors(text_server):
    good = struct.pack("<I", 3) + b"cat"
    cases = [
        # element claims more bytes than remain
        (struct.pack("<I", 50) + b"cat", [1, 1], "says 50 bytes but only 3 remain"),
        # fewer elements than the shape holds
        (good, [1, 2], "holds 2 elements but 7 bytes can hold at most 1"),
        # bytes left after the last element
        (good + b"zz", [1, 1], "2 bytes follow the last"),
        # a length cut short
        (good + b"\x01\x00", [1, 2], "has no 4-byte length"),
    ]
    for payload, shape, message in cases:
        body = {"inputs": [{"name": "x", "datatype": "BYTES", "shape": shape,
                            "parameters": {"binary_data_size": len(payload)}}]}
        status, answer = post(text_server, body, payload)
        assert status == 400, (status, answer)
        assert message in answer["error"], answer
    # JSON: a number where a string belongs; an empty BYTES tensor is fine (0 rows of words).
    status, answer = post(text_server, {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1, 1], "data": [7]}]})
    assert status == 400 and "expected a string" in answer["error"], answer
    status, answer = post(text_server, {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1, 0], "data": []}]})
    assert status == 200, answer
    # Still serving.
    status, answer = post(text_server, {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1, 1], "data": ["cat"]}]})
    assert status == 200 and answer["outputs"][0]["data"] == ["cat!"], answer


def test_non_utf8_output_needs_binary(text_server):
    """JSON cannot carry arbitrary bytes: such an output is refused in JSON and exact in binary."""
    c = httpclient.InferenceServerClient(text_server.http_url)
    words = np.array([[b"\xff\xfe"]], dtype=object)
    inp = httpclient.InferInput("x", [1, 1], "BYTES")
    inp.set_data_from_numpy(words, binary_data=True)
    r = c.infer("text", [inp], outputs=[httpclient.InferRequestedOutput("y", binary_data=True)])
    assert r.as_numpy("y")[0][0] == b"\xff\xfe!"
    with pytest.raises(Exception, match="not UTF-8"):
        c.infer("text", [inp], outputs=[httpclient.InferRequestedOutput("y", binary_data=False)])
