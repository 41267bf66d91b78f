"""Ensembles (platform "ensemble", Triton's ensemble_scheduling) through the real server with
tritonclient, unmodified: a four-step DAG with two independent branches and a BYTES output,
requests of many clients batched at the composing models, statistics per model, a step that
fails at run time, configs that must not load (each naming the step and the tensor), a
composing model unloaded while the ensemble serves, and unload_dependents."""

import threading

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException


def onnx_model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, ["N"] + list(dims))


F = TensorProto.FLOAT


def unary(op, const=None):
    """y = op(x, c) (or op(x)) over FP32 [N, 4]."""
    inits = []
    ins = ["x"]
    if const is not None:
        inits.append(numpy_helper.from_array(np.full((4,), const, np.float32), "c"))
        ins.append("c")
    return onnx_model([helper.make_node(op, ins, ["y"])], [vi("x", F, [4])], [vi("y", F, [4])], inits)


def model_config(name, inputs, outputs, batching="dynamic_batching { max_queue_delay_microseconds: 20000 }"):
    def tensors(items):
        return ", ".join(f'{{ name: "{n}" data_type: {t} dims: [ {d} ] }}' for n, t, d in items)
    return (f'name: "{name}"\nmax_batch_size: 8\ninput [ {tensors(inputs)} ]\noutput [ {tensors(outputs)} ]\n'
            f'{batching}\ninstance_group [ {{ kind: KIND_CPU count: 1 }} ]\n')


def write_composing(repo, write_model):
    write_model(repo, "scale", unary("Mul", 2.0), config=model_config("scale", [("x", "TYPE_FP32", 4)], [("y", "TYPE_FP32", 4)]))
    write_model(repo, "shift", unary("Add", 1.0), config=model_config("shift", [("x", "TYPE_FP32", 4)], [("y", "TYPE_FP32", 4)]))
    sub = onnx_model([helper.make_node("Sub", ["a", "b"], ["z"])], [vi("a", F, [4]), vi("b", F, [4])], [vi("z", F, [4])])
    write_model(repo, "combine", sub, config=model_config(
        "combine", [("a", "TYPE_FP32", 4), ("b", "TYPE_FP32", 4)], [("z", "TYPE_FP32", 4)]))
    text = onnx_model([helper.make_node("Cast", ["x"], ["t"], to=TensorProto.STRING)], [vi("x", F, [4])],
                      [vi("t", TensorProto.STRING, [4])])
    write_model(repo, "label", text, config=model_config("label", [("x", "TYPE_FP32", 4)], [("t", "TYPE_STRING", 4)]))


PIPE_STEPS = """
ensemble_scheduling {
  step [
    { model_name: "scale" model_version: -1 input_map { key: "x" value: "IN" } output_map { key: "y" value: "S" } },
    { model_name: "shift" model_version: -1 input_map { key: "x" value: "IN" } output_map { key: "y" value: "T" } },
    { model_name: "combine" model_version: -1
      input_map [ { key: "a" value: "S" }, { key: "b" value: "T" } ] output_map { key: "z" value: "D" } },
    { model_name: "label" model_version: -1 input_map { key: "x" value: "D" } output_map { key: "t" value: "TXT" } }
  ]
}
"""


def write_ensemble(repo, name, steps=PIPE_STEPS, in_type="TYPE_FP32", extra=""):
    d = repo / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        f'input [ {{ name: "IN" data_type: {in_type} dims: [ 4 ] }} ]\n'
        'output [ { name: "D" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "TXT" data_type: TYPE_STRING dims: [ 4 ] } ]\n'
        + steps + extra)


def expected(x):
    d = (x * np.float32(2)) - (x + np.float32(1))
    return d, np.array([[repr(float(v)).encode() for v in row] for row in d], dtype=object)


def infer_http(client, name, x, outputs=("D", "TXT")):
    inp = httpclient.InferInput("IN", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(name, [inp], outputs=[httpclient.InferRequestedOutput(o) for o in outputs])


def test_dag_runs_over_http_and_grpc_with_a_bytes_output(serve, tmp_path, write_model):
    repo = tmp_path / "repo"
    write_composing(repo, write_model)
    write_ensemble(repo, "pipe")
    srv = serve(repo, "--backend", "reference")
    x = np.array([[0.5, -1, 3, 10], [2, 2, 2, 2]], np.float32)
    d, txt = expected(x)
    h = httpclient.InferenceServerClient(srv.http_url)
    r = infer_http(h, "pipe", x)
    np.testing.assert_array_equal(r.as_numpy("D"), d)
    assert r.as_numpy("TXT").tolist() == txt.tolist()
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    gi = grpcclient.InferInput("IN", list(x.shape), "FP32")
    gi.set_data_from_numpy(x)
    gr = g.infer("pipe", [gi], outputs=[grpcclient.InferRequestedOutput("TXT")])
    assert gr.as_numpy("TXT").tolist() == txt.tolist()
    assert gr.as_numpy("D") is None  # only what was asked for
    md = h.get_model_metadata("pipe")
    assert md["platform"] == "ensemble"
    assert [(t["name"], t["datatype"], t["shape"]) for t in md["outputs"]] == [("D", "FP32", [-1, 4]),
                                                                                ("TXT", "BYTES", [-1, 4])]
    assert h.get_model_config("pipe")["ensemble_scheduling"]["step"][2]["model_name"] == "combine"
    stats = {s["name"]: s for s in h.get_inference_statistics()["model_stats"]}
    assert stats["pipe"]["inference_stats"]["success"]["count"] == 2
    assert stats["pipe"]["inference_count"] == 4  # two requests of two rows
    for m in ("scale", "shift", "combine", "label"):
        assert stats[m]["inference_stats"]["success"]["count"] == 2, m


def test_requests_of_many_clients_batch_at_every_composing_model(serve, tmp_path, write_model):
    repo = tmp_path / "repo"
    write_composing(repo, write_model)
    write_ensemble(repo, "pipe")
    srv = serve(repo, "--backend", "reference")
    clients, per_client = 32, 4
    barrier = threading.Barrier(clients)
    errors = []

    def client(cid):
        c = httpclient.InferenceServerClient(srv.http_url)
        barrier.wait()
        for k in range(per_client):
            x = (np.arange(4, dtype=np.float32) + cid * 10 + k * 1000).reshape(1, 4)
            try:
                r = infer_http(c, "pipe", x)
                d, txt = expected(x)
                if not np.array_equal(r.as_numpy("D"), d) or r.as_numpy("TXT").tolist() != txt.tolist():
                    errors.append((cid, k, r.as_numpy("D")))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((cid, k, str(e)))
        c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]
    stats = {s["name"]: s for s in httpclient.InferenceServerClient(srv.http_url).get_inference_statistics()["model_stats"]}
    total = clients * per_client
    assert stats["pipe"]["inference_stats"]["success"]["count"] == total
    for m in ("scale", "shift", "combine", "label"):
        assert stats[m]["inference_count"] == total, m
        # Rows of different ensemble requests went through one execution.
        assert stats[m]["execution_count"] < total / 2, (m, stats[m]["execution_count"])


def test_a_step_that_fails_ends_the_request_with_the_steps_error(serve, tmp_path, write_model):
    repo = tmp_path / "repo"
    # A lookup whose index comes from the request: an index past the table fails at run time.
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "table")
    gather = onnx_model([helper.make_node("Gather", ["table", "i"], ["y"], axis=0)],
                        [helper.make_tensor_value_info("i", TensorProto.INT64, ["N"])],
                        [helper.make_tensor_value_info("y", F, ["N", 4])], [table])
    write_model(repo, "lookup", gather, config=(
        'name: "lookup"\nmax_batch_size: 8\ninput [ { name: "i" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'))
    write_model(repo, "scale", unary("Mul", 2.0), config=model_config("scale", [("x", "TYPE_FP32", 4)], [("y", "TYPE_FP32", 4)]))
    d = repo / "pick"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text("""
name: "pick"
platform: "ensemble"
max_batch_size: 8
input [ { name: "I" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "lookup" input_map { key: "i" value: "I" } output_map { key: "y" value: "ROW" } },
  { model_name: "scale" input_map { key: "x" value: "ROW" } output_map { key: "y" value: "OUT" } }
] }
""")
    srv = serve(repo, "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)

    def pick(i):
        inp = httpclient.InferInput("I", [1, 1], "INT64")
        inp.set_data_from_numpy(np.array([[i]], np.int64))
        return c.infer("pick", [inp])

    np.testing.assert_array_equal(pick(2).as_numpy("OUT"), np.arange(8, 12, dtype=np.float32)[None] * 2)
    with pytest.raises(InferenceServerException) as e:
        pick(7)
    assert "ensemble step 0 (model 'lookup')" in str(e.value), str(e.value)
    assert "out of range" in str(e.value) or "index" in str(e.value), str(e.value)
    np.testing.assert_array_equal(pick(0).as_numpy("OUT"), np.arange(4, dtype=np.float32)[None] * 2)
    stats = {s["name"]: s for s in c.get_inference_statistics()["model_stats"]}
    assert stats["pick"]["inference_stats"]["fail"]["count"] == 1
    assert stats["scale"]["inference_stats"]["success"]["count"] == 2  # the failed request never reached it


BAD_STEPS = {
    "cycle": ("""ensemble_scheduling { step [
  { model_name: "scale" input_map [ { key: "x" value: "IN" } ] output_map { key: "y" value: "A" } },
  { model_name: "combine" input_map [ { key: "a" value: "A" }, { key: "b" value: "C" } ] output_map { key: "z" value: "B" } },
  { model_name: "shift" input_map { key: "x" value: "B" } output_map { key: "y" value: "C" } },
  { model_name: "combine" input_map [ { key: "a" value: "B" }, { key: "b" value: "C" } ] output_map { key: "z" value: "D" } },
  { model_name: "label" input_map { key: "x" value: "D" } output_map { key: "t" value: "TXT" } }
] }""", ["cycle", "steps 1 ('combine'), 2 ('shift')"]),
    "missing_model": (PIPE_STEPS.replace('"shift"', '"no_such_model"'),
                      ["ensemble 'bad': step model 'no_such_model' failed to load", "not in the model repository"]),
    "unknown_input": (PIPE_STEPS.replace('{ key: "a" value: "S" }', '{ key: "alpha" value: "S" }'),
                      ["ensemble step 2 (model 'combine')", "'alpha', which is not an input", "its inputs: a, b"]),
    "unread_tensor": (PIPE_STEPS.replace('value: "D" } output_map { key: "t"', 'value: "NOPE" } output_map { key: "t"'),
                      ["ensemble_scheduling.step[3].input_map", "tensor 'NOPE', which no ensemble input or step output"]),
}


@pytest.mark.parametrize("case", ["cycle", "missing_model", "unknown_input", "input_type", "unread_tensor"])
def test_bad_ensembles_fail_to_load_naming_the_step(serve, tmp_path, write_model, case):
    repo = tmp_path / "repo"
    write_composing(repo, write_model)
    if case == "input_type":
        # The ensemble declares IN as INT32; the steps that read it take FP32.
        write_ensemble(repo, "bad", in_type="TYPE_INT32")
        want = ["ensemble step 0 (model 'scale')", "input 'x' is FP32 but tensor 'IN' (ensemble input 'IN') is INT32"]
    else:
        steps, want = BAD_STEPS[case]
        write_ensemble(repo, "bad", steps=steps)
    write_ensemble(repo, "pipe")
    srv = serve(repo, "--backend", "reference", "--model-control-mode", "explicit", "--load-model", "pipe")
    c = httpclient.InferenceServerClient(srv.http_url)
    with pytest.raises(InferenceServerException) as e:
        c.load_model("bad")
    msg = str(e.value)
    for part in want:
        assert part in msg, msg
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["bad"]["state"] == "UNAVAILABLE"
    # Everything else keeps serving.
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(infer_http(c, "pipe", x).as_numpy("D"), expected(x)[0])


def test_a_composing_model_unloaded_while_the_ensemble_serves(serve, tmp_path, write_model):
    repo = tmp_path / "repo"
    write_composing(repo, write_model)
    write_ensemble(repo, "pipe")
    srv = serve(repo, "--backend", "reference", "--model-control-mode", "explicit", "--load-model", "pipe")
    c = httpclient.InferenceServerClient(srv.http_url)
    x = np.full((1, 4), 3, np.float32)
    # Loading the ensemble loaded its steps' models.
    assert all(c.is_model_ready(m) for m in ("scale", "shift", "combine", "label"))
    np.testing.assert_array_equal(infer_http(c, "pipe", x).as_numpy("D"), expected(x)[0])
    c.unload_model("shift")
    with pytest.raises(InferenceServerException) as e:
        infer_http(c, "pipe", x)
    assert "ensemble step 1 (model 'shift')" in str(e.value) and "not ready" in str(e.value), str(e.value)
    c.load_model("shift")
    np.testing.assert_array_equal(infer_http(c, "pipe", x).as_numpy("D"), expected(x)[0])
    # unload_dependents: the composing models go with the ensemble.
    c.unload_model("pipe", unload_dependents=True)
    assert not any(c.is_model_ready(m) for m in ("pipe", "scale", "shift", "combine", "label"))


# Fan-out (sampan.fan_out): a step whose model batches takes the N rows of a tensor that a
# non-batching step made (an OCR detector's N lines), as requests of at most max_rows rows that
# its dynamic batcher batches with other requests' rows; the answers come back in row order.

def write_fan_out(repo, write_model, fan_out='sampan { fan_out [ { step: 1 }, { step: 2 max_rows: 3 } ] }'):
    write_composing(repo, write_model)
    # rows: IN (FP32 [N]) -> R (FP32 [N, 4]) = IN[i] * (1, 2, 3, 4); a model that does not batch.
    c = numpy_helper.from_array(np.array([1, 2, 3, 4], np.float32), "c")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    rows = helper.make_graph(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["u"]), helper.make_node("Mul", ["u", "c"], ["r"])], "rows",
        [helper.make_tensor_value_info("x", F, ["N"])], [helper.make_tensor_value_info("r", F, ["N", 4])], [c, axes])
    m = helper.make_model(rows, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    write_model(repo, "rows", m.SerializeToString(), config=(
        'name: "rows"\nmax_batch_size: 0\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "r" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]\n'))
    d = repo / "fan"
    (d / "1").mkdir(parents=True, exist_ok=True)
    (d / "config.pbtxt").write_text(f"""
name: "fan"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "S" data_type: TYPE_FP32 dims: [ -1, 4 ] }}, {{ name: "TXT" data_type: TYPE_STRING dims: [ -1, 4 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "rows" input_map {{ key: "x" value: "IN" }} output_map {{ key: "r" value: "R" }} }},
  {{ model_name: "scale" input_map {{ key: "x" value: "R" }} output_map {{ key: "y" value: "S" }} }},
  {{ model_name: "label" input_map {{ key: "x" value: "S" }} output_map {{ key: "t" value: "TXT" }} }}
] }}
{fan_out}
""")


def fan_expected(x):
    s = (x[:, None] * np.array([1, 2, 3, 4], np.float32)) * np.float32(2)
    return s, [[repr(float(v)).encode() for v in row] for row in s]


def infer_fan(client, x):
    inp = httpclient.InferInput("IN", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer("fan", [inp])


def stats_of(client):
    return {s["name"]: s for s in client.get_inference_statistics()["model_stats"]}


def test_fan_out_sends_rows_as_batches_and_gathers_them_in_order(serve, tmp_path, write_model):
    repo = tmp_path / "repo"
    write_fan_out(repo, write_model)
    srv = serve(repo, "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    x = np.arange(20, dtype=np.float32) - 7
    r = infer_fan(c, x)
    s, txt = fan_expected(x)
    np.testing.assert_array_equal(r.as_numpy("S"), s)
    assert r.as_numpy("TXT").tolist() == txt
    st = stats_of(c)
    assert st["scale"]["inference_count"] == 20 and st["scale"]["inference_stats"]["success"]["count"] == 3  # 8+8+4
    assert st["label"]["inference_count"] == 20 and st["label"]["inference_stats"]["success"]["count"] == 7  # max_rows 3
    assert st["fan"]["inference_stats"]["success"]["count"] == 1
    # Zero rows: nothing is sent, the outputs have 0 rows.
    r0 = infer_fan(c, np.zeros((0,), np.float32))
    assert r0.as_numpy("S").shape == (0, 4)
    assert r0.as_numpy("TXT").shape == (0, 4)
    assert stats_of(c)["scale"]["inference_stats"]["success"]["count"] == 3
    # gRPC too.
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    gi = grpcclient.InferInput("IN", [5], "FP32")
    gi.set_data_from_numpy(x[:5])
    assert g.infer("fan", [gi]).as_numpy("TXT").tolist() == txt[:5]


def test_fan_out_rows_of_many_requests_batch_together(serve, tmp_path, write_model):
    repo = tmp_path / "repo"
    # Parts of at most 2 rows: up to four parts (of different requests) fit one batch of 8.
    write_fan_out(repo, write_model, fan_out='sampan { fan_out [ { step: 1 max_rows: 2 }, { step: 2 } ] }')
    srv = serve(repo, "--backend", "reference")
    clients, per_client = 16, 3
    barrier = threading.Barrier(clients)
    errors, parts = [], [0]
    lock = threading.Lock()

    def client(cid):
        c = httpclient.InferenceServerClient(srv.http_url)
        rng = np.random.default_rng(cid)
        barrier.wait()
        for k in range(per_client):
            n = int(rng.integers(1, 13))
            x = (np.arange(n, dtype=np.float32) + cid * 100 + k * 1000)
            with lock:
                parts[0] += -(-n // 2)
            try:
                r = infer_fan(c, x)
                s, txt = fan_expected(x)
                if not np.array_equal(r.as_numpy("S"), s) or r.as_numpy("TXT").tolist() != txt:
                    errors.append((cid, k, "wrong answer"))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((cid, k, str(e)))
        c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]
    st = stats_of(httpclient.InferenceServerClient(srv.http_url))
    assert st["scale"]["inference_stats"]["success"]["count"] == parts[0]
    # The parts of different requests ran together.
    assert st["scale"]["execution_count"] < parts[0] / 2, (st["scale"]["execution_count"], parts[0])


def test_fan_out_limits_and_bad_configs(serve, tmp_path, write_model):
    repo = tmp_path / "repo"
    write_fan_out(repo, write_model, fan_out='sampan { fan_out [ { step: 1 max_total_rows: 10 }, { step: 2 } ] }')
    srv = serve(repo, "--backend", "reference", "--model-control-mode", "explicit", "--load-model", "fan")
    c = httpclient.InferenceServerClient(srv.http_url)
    np.testing.assert_array_equal(infer_fan(c, np.ones(10, np.float32)).as_numpy("S"), fan_expected(np.ones(10, np.float32))[0])
    with pytest.raises(InferenceServerException) as e:
        infer_fan(c, np.ones(11, np.float32))
    assert "ensemble step 1 (model 'scale')" in str(e.value) and "11 rows" in str(e.value) \
        and "max_total_rows 10" in str(e.value), str(e.value)
    bad = {
        # The step's model does not batch.
        "{ step: 0 }": ["ensemble step 0 (model 'rows')", "does not batch"],
        "{ step: 1 max_rows: 9 }": ["max_rows 9 is larger than model 'scale''s max_batch_size 8"],
        "{ step: 3 }": ["sampan.fan_out[0].step", "steps 0..2"],
        "{ step: 1 }, { step: 1 }": ["step 1 is listed twice"],
        # Step 2's model batches and reads what step 1 gathers (any number of rows): it must fan out too.
        "{ step: 1 }": ["ensemble step 2 (model 'label')", "fan-out ensemble step 1 (model 'scale') gathers",
                        "list this step in sampan.fan_out"],
    }
    for fan_out, want in bad.items():
        (repo / "fan" / "config.pbtxt").write_text(
            (repo / "fan" / "config.pbtxt").read_text().split("sampan {")[0] + f"sampan {{ fan_out [ {fan_out} ] }}\n")
        with pytest.raises(InferenceServerException) as e:
            c.load_model("fan")
        for part in want:
            assert part in str(e.value), (fan_out, str(e.value))
    # Not for a model that runs.
    cfg = repo / "scale" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "sampan { fan_out [ { step: 0 } ] }\n")
    with pytest.raises(InferenceServerException) as e:
        c.load_model("scale")
    assert "sampan.fan_out" in str(e.value) and "is for ensembles" in str(e.value), str(e.value)
