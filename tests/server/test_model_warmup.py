"""Triton's model_warmup: samples (zeros, random values, a file under <model>/warmup/) run on every
instance when the model loads, before it is READY, `count` times each, and count in no statistics.
A sample that does not fit the model (a file of the wrong size, an input left out or unknown, a
wrong type or dims, a file outside warmup/, a batch size the model cannot take, no data), or whose
run fails, fails that model's load with the sample and the input named; the server keeps serving
the others."""
import json
import re
import struct
import urllib.request

import numpy as np

CONFIG = """
name: "{name}"
max_batch_size: 4
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
{warmup}
"""

GOOD = """
model_warmup [
  { name: "zeros" batch_size: 2 count: 3 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } },
  { name: "random" batch_size: 4 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } },
  { name: "file" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "x.bin" } } }
]
"""

BAD = {
    "short_file": ('{ name: "f" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] '
                   'input_data_file: "short.bin" } } }', r"'short.bin' has 12 bytes, but one batch element of f32\[4\] is 16"),
    "missing_input": ('{ name: "m" batch_size: 1 }', r"input 'x' is not given"),
    "unknown_input": ('{ name: "u" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } '
                      'inputs { key: "z" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }', r"'z' is not an input"),
    "wrong_type": ('{ name: "t" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } } }',
                   r"data_type TYPE_INT32 differs from the input's TYPE_FP32"),
    "wrong_dims": ('{ name: "d" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 5 ] zero_data: true } } }',
                   r"dims\[0\] is 5, the input's is 4"),
    "escape": ('{ name: "e" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] '
               'input_data_file: "../config.pbtxt" } } }', r"inside the model's warmup/ folder"),
    "batch_zero": ('{ name: "b" inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }',
                   r"batch_size 0 must be 1..4"),
    "no_data": ('{ name: "n" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] } } }',
                r"give its data"),
    "no_name": ('{ batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }',
                r"model_warmup\[0\]: name must be given"),
}


def _index(srv):
    req = urllib.request.Request(f"{srv.http_base}/v2/repository/index", data=b"{}",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return {m["name"]: m for m in json.loads(r.read())}


def _infer(srv, model, x):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}]}
    req = urllib.request.Request(f"{srv.http_base}/v2/models/{model}/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return np.array(json.loads(r.read())["outputs"][0]["data"], np.float32).reshape(x.shape)


def test_warmup_samples_run_before_ready_and_bad_ones_fail_the_load(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    model = make_add_model(bias=1.5)
    d = write_model(repo, "good", model, config=CONFIG.format(name="good", warmup=GOOD))
    (d / "warmup").mkdir()
    (d / "warmup" / "x.bin").write_bytes(struct.pack("<4f", 1, 2, 3, 4))
    for name, (sample, _) in BAD.items():
        d = write_model(repo, name, model, config=CONFIG.format(name=name, warmup=f"model_warmup [ {sample} ]"))
        (d / "warmup").mkdir()
        (d / "warmup" / "short.bin").write_bytes(b"\0" * 12)
    srv = serve(repo, "--strict-readiness", "false", "--log-verbose", "1")
    index = _index(srv)
    assert index["good"]["state"] == "READY", index["good"]
    out = srv.output()
    # Each sample ran on both instances, `count` times, before the model was READY.
    for sample, count in (("zeros", 3), ("random", 1), ("file", 1)):
        assert re.search(rf"model 'good' version 1: model_warmup\[\d\] '{sample}' ran {count} time\(s\) on each of 2 "
                         r"instance\(s\)", out), out[-3000:]
    # Warm-up runs are no inferences.
    with urllib.request.urlopen(f"{srv.http_base}/v2/models/good/stats", timeout=10) as r:
        stats = json.loads(r.read())["model_stats"][0]
    assert int(stats["inference_count"]) == 0, stats
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert np.allclose(_infer(srv, "good", x), x + 1.5)
    for name, (_, why) in BAD.items():
        assert index[name]["state"] == "UNAVAILABLE", (name, index[name])
        assert re.search(why, index[name].get("reason", "")), (name, index[name].get("reason"))
    # The server still serves.
    assert np.allclose(_infer(srv, "good", x), x + 1.5)


def test_a_warmup_run_that_fails_fails_the_load(serve, tmp_path, write_model):
    """Random indices (0..99) into a 5-row table: the warm-up run itself fails, naming the sample."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    table = numpy_helper.from_array(np.arange(10, dtype=np.float32).reshape(5, 2), "table")
    g = helper.make_graph([helper.make_node("Gather", ["table", "i"], ["y"], axis=0)], "lookup",
                          [helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], [table])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    cfg = """
name: "lookup"
input [ { name: "i" data_type: TYPE_INT64 dims: [ 3 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3, 2 ] } ]
model_warmup [ { name: "rand" inputs { key: "i" value: { data_type: TYPE_INT64 dims: [ 3 ] random_data: true } } } ]
"""
    write_model(tmp_path / "repo", "lookup", m.SerializeToString(), config=cfg)
    srv = serve(tmp_path / "repo", "--strict-readiness", "false")
    entry = _index(srv)["lookup"]
    assert entry["state"] == "UNAVAILABLE" and "model_warmup[0] 'rand'" in entry["reason"], entry


def test_an_ensemble_refuses_model_warmup(serve, tmp_path, write_model, make_add_model):
    """An ensemble runs no instances of its own: model_warmup there is refused (warm its steps up)."""
    repo = tmp_path / "repo"
    write_model(repo, "add", make_add_model(bias=1.0), config=CONFIG.format(name="add", warmup=""))
    ens = repo / "pipe"
    (ens / "1").mkdir(parents=True)
    (ens / "config.pbtxt").write_text("""
name: "pipe"
platform: "ensemble"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "add" model_version: -1 input_map { key: "x" value: "IN" }
                               output_map { key: "y" value: "OUT" } } ] }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
""")
    srv = serve(repo, "--strict-readiness", "false")
    entry = _index(srv)["pipe"]
    assert entry["state"] == "UNAVAILABLE" and "model_warmup" in entry["reason"] \
        and "is not used by an ensemble" in entry["reason"], entry
