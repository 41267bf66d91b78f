"""Decoupled models (`model_transaction_policy { decoupled: true }`) through the real server with
tritonclient's gRPC streaming API, unmodified: a request gets one response per row of the outputs'
leading dimension (here the positive elements of the input), zero rows give zero responses, and
with `enable_empty_final_response` each request ends with an empty response marked
`triton_final_response`; unary gRPC and HTTP inference are refused by name, and an ensemble can
be decoupled too."""

import queue

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

CONFIG = """
max_batch_size: 0
input [{ name: "x" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "kept" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "index" data_type: TYPE_INT64 dims: [ -1, 1 ] }]
model_transaction_policy { decoupled: true }
"""


def positives_model():
    """kept = x[x > 0]; index = their positions, [N, 1]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    kept = helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["k"])
    index = helper.make_tensor_value_info("index", TensorProto.INT64, ["k", 1])
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["mask"]),
        helper.make_node("Compress", ["x", "mask"], ["kept"], axis=0),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["index"], perm=[1, 0]),
    ]
    g = helper.make_graph(nodes, "positives", [x], [kept, index], initializer=[zero])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def stream_all(url, model, arrays, final=True):
    """Sends each array as a request on one stream; returns the responses (or errors) per request id."""
    c = grpcclient.InferenceServerClient(url)
    q = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    for i, a in enumerate(arrays):
        inp = grpcclient.InferInput("x", list(a.shape), "FP32")
        inp.set_data_from_numpy(a)
        c.async_stream_infer(model, [inp], request_id=str(i), enable_empty_final_response=final)
    got = {str(i): [] for i in range(len(arrays))}
    ended = set()
    import time
    deadline = time.monotonic() + 30
    while len(ended) < len(arrays) and time.monotonic() < deadline:
        try:
            result, error = q.get(timeout=1)
        except queue.Empty:
            if not final:
                break
            continue
        assert error is None, error
        r = result.get_response()
        got[r.id].append(result)
        if r.parameters["triton_final_response"].bool_param:
            ended.add(r.id)
    c.stop_stream()
    return got


def test_each_row_is_a_response_and_a_final_marker_ends_the_request(serve, tmp_path, write_model):
    write_model(tmp_path / "repo", "positives", positives_model(), config=CONFIG)
    srv = serve(tmp_path / "repo", "--backend", "reference")
    arrays = [np.array([1.5, -2, 3, 0, 5], dtype=np.float32), np.array([-1, -2], dtype=np.float32),
              np.array([7], dtype=np.float32)]
    got = stream_all(srv.grpc_url, "positives", arrays)
    for i, a in enumerate(arrays):
        rows = got[str(i)][:-1]
        final = got[str(i)][-1]
        assert final.get_response().parameters["triton_final_response"].bool_param
        assert len(final.get_response().outputs) == 0
        want = a[a > 0]
        assert len(rows) == len(want), (i, len(rows))
        for k, r in enumerate(rows):
            assert not r.get_response().parameters["triton_final_response"].bool_param
            np.testing.assert_array_equal(r.as_numpy("kept"), want[k:k + 1])
            assert r.as_numpy("index").tolist() == [[int(np.flatnonzero(a > 0)[k])]]


def test_response_statistics_count_each_row(serve, tmp_path, write_model):
    write_model(tmp_path / "repo", "positives", positives_model(), config=CONFIG)
    srv = serve(tmp_path / "repo", "--backend", "reference")
    arrays = [np.array([1, 2, 3], dtype=np.float32), np.array([-1], dtype=np.float32), np.array([4], dtype=np.float32)]
    stream_all(srv.grpc_url, "positives", arrays)
    h = httpclient.InferenceServerClient(srv.http_url)
    rs = h.get_inference_statistics("positives")["model_stats"][0]["response_stats"]
    # Rows: 3, 0 and 1; index N of a request of N rows is its end (empty_response).
    assert {k: int(v["success"]["count"]) for k, v in rs.items()} == {"0": 2, "1": 1, "2": 1, "3": 0}
    assert {k: int(v["empty_response"]["count"]) for k, v in rs.items()} == {"0": 1, "1": 1, "2": 0, "3": 1}
    assert int(rs["0"]["compute_infer"]["count"]) == 2 and int(rs["0"]["compute_infer"]["ns"]) > 0
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    gs = g.get_inference_statistics("positives").model_stats[0].response_stats
    assert gs["0"].success.count == 2 and gs["3"].empty_response.count == 1


def test_without_the_final_marker_only_rows_come(serve, tmp_path, write_model):
    write_model(tmp_path / "repo", "positives", positives_model(), config=CONFIG)
    srv = serve(tmp_path / "repo", "--backend", "reference")
    got = stream_all(srv.grpc_url, "positives", [np.array([2, -1, 4], dtype=np.float32)], final=False)
    assert [r.as_numpy("kept").tolist() for r in got["0"]] == [[2.0], [4.0]]


def test_unary_inference_on_a_decoupled_model_is_refused(serve, tmp_path, write_model):
    write_model(tmp_path / "repo", "positives", positives_model(), config=CONFIG)
    srv = serve(tmp_path / "repo", "--backend", "reference")
    a = np.array([1, 2], dtype=np.float32)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    gi = grpcclient.InferInput("x", [2], "FP32")
    gi.set_data_from_numpy(a)
    with pytest.raises(InferenceServerException, match="is decoupled"):
        g.infer("positives", [gi])
    h = httpclient.InferenceServerClient(srv.http_url)
    hi = httpclient.InferInput("x", [2], "FP32")
    hi.set_data_from_numpy(a)
    with pytest.raises(InferenceServerException, match="ModelStreamInfer only"):
        h.infer("positives", [hi])
    # The stream still answers.
    assert len(stream_all(srv.grpc_url, "positives", [a])["0"]) == 3


def test_a_decoupled_ensemble_streams_its_rows(serve, tmp_path, write_model):
    repo = tmp_path / "repo"
    write_model(repo, "positives", positives_model(), config=CONFIG.replace("model_transaction_policy { decoupled: true }", ""))
    (repo / "stream").mkdir()
    (repo / "stream" / "1").mkdir()
    (repo / "stream" / "config.pbtxt").write_text("""
platform: "ensemble"
max_batch_size: 0
input [{ name: "x" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "kept" data_type: TYPE_FP32 dims: [ -1 ] }]
model_transaction_policy { decoupled: true }
ensemble_scheduling { step [{ model_name: "positives" model_version: -1
  input_map { key: "x" value: "x" } output_map { key: "kept" value: "kept" } }] }
""")
    srv = serve(repo, "--backend", "reference")
    got = stream_all(srv.grpc_url, "stream", [np.array([3, -3, 9, 1], dtype=np.float32)])
    assert [r.as_numpy("kept").tolist() for r in got["0"][:-1]] == [[3.0], [9.0], [1.0]]


@pytest.mark.parametrize("cfg,why", [
    (CONFIG.replace("max_batch_size: 0", "max_batch_size: 2"), "needs max_batch_size 0"),
    (CONFIG.replace('dims: [ -1, 1 ]', 'dims: [ 1, -1 ]'), "must be variable"),
])
def test_bad_decoupled_configs_fail_the_load(serve, tmp_path, write_model, cfg, why):
    write_model(tmp_path / "repo", "positives", positives_model(), config=cfg)
    srv = serve(tmp_path / "repo", "--backend", "reference", "--model-control-mode", "explicit")
    c = httpclient.InferenceServerClient(srv.http_url)
    with pytest.raises(InferenceServerException, match=why):
        c.load_model("positives")
