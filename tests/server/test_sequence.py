"""Sequence batching (stateful models, Triton's sequence batcher) through the real server
with tritonclient's sequence API, unmodified: an accumulator model whose running sum lives in
the server as implicit state (`state { input_name, output_name }`) and that reads the START,
READY and CORRID controls. Both strategies (direct, oldest), HTTP, gRPC and gRPC streaming,
numeric and string correlation IDs, interleaved and concurrent sequences, the backlog when every
slot is taken, the idle timeout releasing a sequence, START again on a running sequence,
initial_state from a file, and each bad request or config refused by name."""

import threading
import time

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException


def make_accumulator(corrid_type=TensorProto.UINT64, batch=True):
    """OUT = IN + STATE_IN * (1 - START); STATE_OUT = OUT; ID = CORRID (as int64, or the string);
    SEEN = READY (1 for a request, 0 for an idle slot)."""
    d = ["B", 1] if batch else [1]
    inputs = [helper.make_tensor_value_info(n, t, d) for n, t in (
        ("IN", TensorProto.INT32), ("START", TensorProto.INT32), ("READY", TensorProto.INT32),
        ("CORRID", corrid_type), ("STATE_IN", TensorProto.INT32))]
    id_type = TensorProto.STRING if corrid_type == TensorProto.STRING else TensorProto.INT64
    outputs = [helper.make_tensor_value_info(n, t, d) for n, t in (
        ("OUT", TensorProto.INT32), ("STATE_OUT", TensorProto.INT32), ("ID", id_type), ("SEEN", TensorProto.INT32))]
    one = helper.make_tensor("one", TensorProto.INT32, [], [1])
    nodes = [
        helper.make_node("Sub", ["one", "START"], ["keep"]),
        helper.make_node("Mul", ["STATE_IN", "keep"], ["carried"]),
        helper.make_node("Add", ["IN", "carried"], ["OUT"]),
        helper.make_node("Identity", ["OUT"], ["STATE_OUT"]),
        helper.make_node("Identity", ["READY"], ["SEEN"]),
        helper.make_node("Identity", ["CORRID"], ["ID"]) if corrid_type == TensorProto.STRING
        else helper.make_node("Cast", ["CORRID"], ["ID"], to=TensorProto.INT64),
    ]
    g = helper.make_graph(nodes, "accumulator", inputs, outputs, initializer=[one])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def config(strategy="direct { }", max_batch=4, corrid="TYPE_UINT64", idle_us=0, extra="", initial=""):
    return f"""
max_batch_size: {max_batch}
input [{{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }}]
output [{{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
        {{ name: "ID" data_type: {"TYPE_STRING" if corrid == "TYPE_STRING" else "TYPE_INT64"} dims: [ 1 ] }},
        {{ name: "SEEN" data_type: TYPE_INT32 dims: [ 1 ] }}]
sequence_batching {{
  {strategy}
  {f"max_sequence_idle_microseconds: {idle_us}" if idle_us else ""}
  control_input [
    {{ name: "START" control [{{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }}] }},
    {{ name: "READY" control [{{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }}] }},
    {{ name: "CORRID" control [{{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid} }}] }}
  ]
  state [{{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] {initial} }}]
}}
{extra}
"""


def http_step(c, model, value, seq, start=False, end=False):
    x = np.array([[value]], dtype=np.int32)
    i = httpclient.InferInput("IN", [1, 1], "INT32")
    i.set_data_from_numpy(x)
    r = c.infer(model, [i], sequence_id=seq, sequence_start=start, sequence_end=end)
    return int(r.as_numpy("OUT")[0, 0]), r.as_numpy("ID")[0, 0], int(r.as_numpy("SEEN")[0, 0])


def grpc_input(value):
    i = grpcclient.InferInput("IN", [1, 1], "INT32")
    i.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return i


def stats(c, model):
    return c.get_inference_statistics(model)["model_stats"][0]


@pytest.fixture
def accumulator_repo(tmp_path, write_model):
    def make(name="acc", **kw):
        repo = tmp_path / "repo"
        corrid = kw.get("corrid", "TYPE_UINT64")
        ctype = TensorProto.STRING if corrid == "TYPE_STRING" else {
            "TYPE_UINT64": TensorProto.UINT64, "TYPE_INT64": TensorProto.INT64,
            "TYPE_INT32": TensorProto.INT32, "TYPE_UINT32": TensorProto.UINT32}[corrid]
        write_model(repo, name, make_accumulator(ctype, batch=kw.get("max_batch", 4) > 0), config=config(**kw))
        return repo
    return make


def test_interleaved_sequences_keep_their_own_state_over_http(serve, accumulator_repo):
    srv = serve(accumulator_repo(), "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    a = [1, 2, 3, 4, 5]
    b = [10, 20, 30, 40, 50]
    got_a, got_b = [], []
    for k in range(5):
        last = k == 4
        out, ident, seen = http_step(c, "acc", a[k], 1001, start=k == 0, end=last)
        assert ident == 1001 and seen == 1
        got_a.append(out)
        got_b.append(http_step(c, "acc", b[k], 1002, start=k == 0, end=last)[0])
    assert got_a == list(np.cumsum(a)) and got_b == list(np.cumsum(b))
    s = stats(c, "acc")
    assert s["inference_count"] == 10  # requests, not idle slots


def test_start_on_a_running_sequence_begins_it_again(serve, accumulator_repo):
    srv = serve(accumulator_repo(), "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    assert http_step(c, "acc", 5, 7, start=True)[0] == 5
    assert http_step(c, "acc", 5, 7)[0] == 10
    assert http_step(c, "acc", 1, 7, start=True)[0] == 1  # the old sum is gone
    assert http_step(c, "acc", 1, 7, end=True)[0] == 2


def test_string_correlation_ids_over_grpc(serve, accumulator_repo):
    srv = serve(accumulator_repo(corrid="TYPE_STRING"), "--backend", "reference")
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    total = 0
    for k, v in enumerate([3, 4, 5]):
        r = g.infer("acc", [grpc_input(v)], sequence_id="order-17", sequence_start=k == 0, sequence_end=k == 2)
        total += v
        assert int(r.as_numpy("OUT")[0, 0]) == total
        assert r.as_numpy("ID")[0, 0] == b"order-17"
    # A numeric ID on a string-CORRID model is its decimal text.
    r = g.infer("acc", [grpc_input(1)], sequence_id=99, sequence_start=True, sequence_end=True)
    assert r.as_numpy("ID")[0, 0] == b"99"


def test_numeric_model_refuses_a_string_id(serve, accumulator_repo):
    srv = serve(accumulator_repo(corrid="TYPE_INT32"), "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    with pytest.raises(InferenceServerException, match="numeric correlation IDs"):
        http_step(c, "acc", 1, "abc", start=True)
    with pytest.raises(InferenceServerException, match="does not fit"):
        http_step(c, "acc", 1, 2**40, start=True)
    assert http_step(c, "acc", 1, 2**31 - 1, start=True, end=True)[1] == 2**31 - 1


def test_sequences_over_a_grpc_stream(serve, accumulator_repo):
    srv = serve(accumulator_repo(), "--backend", "reference")
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    results, done = [], threading.Event()

    def callback(result, error):
        results.append((result, error))
        if len(results) == 8:
            done.set()

    g.start_stream(callback=callback)
    for k in range(4):
        for seq, base in ((11, 1), (12, 100)):
            g.async_stream_infer("acc", [grpc_input(base * (k + 1))], sequence_id=seq, sequence_start=k == 0,
                                 sequence_end=k == 3, request_id=f"{seq}-{k}")
    assert done.wait(30)
    g.stop_stream()
    by_id = {}
    for result, error in results:
        assert error is None, str(error) + repr(getattr(error, "message", lambda: "")())
        by_id[result.get_response().id] = int(result.as_numpy("OUT")[0, 0])
    assert [by_id[f"11-{k}"] for k in range(4)] == [1, 3, 6, 10]
    assert [by_id[f"12-{k}"] for k in range(4)] == [100, 300, 600, 1000]


@pytest.mark.parametrize("strategy", ["direct { max_queue_delay_microseconds: 20000 minimum_slot_utilization: 1.0 }",
                                      "oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 20000 }"])
def test_concurrent_sequences_batch_together_and_stay_correct(serve, accumulator_repo, strategy):
    srv = serve(accumulator_repo(strategy=strategy, max_batch=4), "--backend", "reference")
    n_seq, steps = 8, 6
    outs, errors = {}, []

    def run(seq):
        try:
            c = httpclient.InferenceServerClient(srv.http_url)
            got = []
            for k in range(steps):
                got.append(http_step(c, "acc", seq * 10 + k, seq + 1, start=k == 0, end=k == steps - 1)[0])
            outs[seq] = got
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(n_seq)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for seq in range(n_seq):
        assert outs[seq] == list(np.cumsum([seq * 10 + k for k in range(steps)])), seq
    s = stats(httpclient.InferenceServerClient(srv.http_url), "acc")
    assert s["inference_count"] == n_seq * steps
    # Rows of different sequences share executions.
    assert s["execution_count"] < n_seq * steps
    assert any(int(b["batch_size"]) > 1 for b in s["batch_stats"])


def test_a_sequence_without_a_free_slot_waits_in_the_backlog(serve, accumulator_repo):
    # One instance, max_batch_size 2: two slots.
    srv = serve(accumulator_repo(max_batch=2), "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    assert http_step(c, "acc", 1, 1, start=True)[0] == 1
    assert http_step(c, "acc", 2, 2, start=True)[0] == 2
    answer = {}

    def third():
        answer["out"] = http_step(httpclient.InferenceServerClient(srv.http_url), "acc", 3, 3, start=True,
                                  end=True)[0]
        answer["at"] = time.monotonic()

    t = threading.Thread(target=third)
    t.start()
    time.sleep(0.5)
    assert "out" not in answer  # both slots are held by sequences 1 and 2
    ended = time.monotonic()
    assert http_step(c, "acc", 10, 1, end=True)[0] == 11
    t.join(10)
    assert answer["out"] == 3 and answer["at"] >= ended
    assert http_step(c, "acc", 10, 2, end=True)[0] == 12


def test_idle_sequences_are_released(serve, accumulator_repo):
    srv = serve(accumulator_repo(idle_us=300000), "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    assert http_step(c, "acc", 4, 5, start=True)[0] == 4
    assert http_step(c, "acc", 4, 5)[0] == 8
    time.sleep(0.8)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        http_step(c, "acc", 4, 5)
    assert http_step(c, "acc", 4, 5, start=True, end=True)[0] == 4


def test_initial_state_from_a_file(serve, tmp_path, write_model):
    repo = tmp_path / "repo"
    write_model(repo, "acc", make_accumulator(TensorProto.UINT64),
                config=config(initial='initial_state [{ data_type: TYPE_INT32 dims: [ 1 ] data_file: "hundred" }]'))
    (repo / "acc" / "initial_state").mkdir()
    np.array([100], dtype=np.int32).tofile(repo / "acc" / "initial_state" / "hundred")
    # The model ignores STATE_IN on START (keep = 1 - START), so read it on the second step via a
    # sequence whose START flag the model sees as 0: a model without the START control.
    cfg = config(initial='initial_state [{ data_type: TYPE_INT32 dims: [ 1 ] data_file: "hundred" }]')
    cfg = cfg.replace('{ name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }] },',
                      '{ name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 0 ] }] },')
    (repo / "acc" / "config.pbtxt").write_text(cfg)
    srv = serve(repo, "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    assert http_step(c, "acc", 1, 3, start=True)[0] == 101
    assert http_step(c, "acc", 1, 3, end=True)[0] == 102


def test_bad_requests_are_refused_by_name(serve, accumulator_repo, write_model, make_add_model):
    repo = accumulator_repo()
    write_model(repo, "plain", make_add_model(dims=(1,)), config="""
max_batch_size: 4
input [{ name: "x" data_type: TYPE_FP32 dims: [ 1 ] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [ 1 ] }]
""")
    srv = serve(repo, "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        http_step(c, "acc", 1, 42)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        g.infer("acc", [grpc_input(1)], sequence_id=43)
    with pytest.raises(InferenceServerException, match="needs a sequence_id"):
        i = httpclient.InferInput("IN", [1, 1], "INT32")
        i.set_data_from_numpy(np.array([[1]], dtype=np.int32))
        c.infer("acc", [i])
    with pytest.raises(InferenceServerException, match="batch size 1"):
        i = httpclient.InferInput("IN", [2, 1], "INT32")
        i.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
        c.infer("acc", [i], sequence_id=44, sequence_start=True)
    with pytest.raises(InferenceServerException, match="unexpected inference input 'START'"):
        i = httpclient.InferInput("START", [1, 1], "INT32")
        i.set_data_from_numpy(np.array([[1]], dtype=np.int32))
        c.infer("acc", [i], sequence_id=45, sequence_start=True)
    with pytest.raises(InferenceServerException, match="is not a sequence model"):
        x = httpclient.InferInput("x", [1, 1], "FP32")
        x.set_data_from_numpy(np.zeros((1, 1), dtype=np.float32))
        c.infer("plain", [x], sequence_id=46, sequence_start=True)
    # After END the sequence is over: continuing it needs START again.
    assert http_step(c, "acc", 2, 47, start=True, end=True)[0] == 2
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        http_step(c, "acc", 2, 47)
    # Still serving.
    assert http_step(c, "acc", 6, 48, start=True, end=True)[0] == 6


BAD_CONFIGS = [
    ('control_input [{ name: "IN" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }] }]',
     "also listed in `input`"),
    ('control_input [{ name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID int32_false_true: [ 0, 1 ] }] }]',
     "takes data_type"),
    ('control_input [{ name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1, 2 ] }] }]',
     "holds 2 values"),
    ('control_input [{ name: "START" control [{ kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] }] }]',
     "is TYPE_FP32 but the model's input is TYPE_INT32"),
    ('control_input [{ name: "NOPE" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }] }]',
     "'NOPE' is not an input of model"),
    ('state [{ input_name: "STATE_IN" output_name: "MISSING" data_type: TYPE_INT32 dims: [ 1 ] }]',
     "'MISSING' is not an output of model"),
    ('state [{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ -1 ] }]',
     "needs fixed dims"),
    ('state [{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] '
     'use_same_buffer_for_input_output: true }]', "use_same_buffer_for_input_output is not supported"),
    ('iterative_sequence: true', "iterative_sequence"),
]


@pytest.mark.parametrize("body,why", BAD_CONFIGS)
def test_bad_sequence_configs_fail_the_load_by_name(serve, tmp_path, write_model, body, why):
    repo = tmp_path / "repo"
    cfg = f"""
max_batch_size: 4
input [{{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }}]
sequence_batching {{ {body} }}
"""
    write_model(repo, "acc", make_accumulator(TensorProto.UINT64), config=cfg)
    srv = serve(repo, "--backend", "reference", "--model-control-mode", "explicit")
    c = httpclient.InferenceServerClient(srv.http_url)
    with pytest.raises(InferenceServerException, match=why.replace("(", r"\(").replace(")", r"\)")):
        c.load_model("acc")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_perf_analyzer_drives_a_sequence_model(serve, accumulator_repo, protocol):
    """Triton's perf_analyzer reads sequence_batching from the model config and sends sequences
    (correlation IDs, START/END) on its own; every request succeeds and rows of different
    sequences share executions (oldest strategy)."""
    import re
    import subprocess

    from test_perf import _perf_analyzer
    pa = _perf_analyzer()
    srv = serve(accumulator_repo(strategy="oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 1000 }"),
                "--backend", "reference")
    url = srv.http_url if protocol == "http" else srv.grpc_url
    r = subprocess.run([pa, "-m", "acc", "-u", url, "-i", protocol, "--sequence-length", "5", "--concurrency-range",
                        "4", "-p", "1000", "-s", "50", "--max-trials", "4"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    seqs = int(re.search(r"Sequence count: (\d+)", r.stdout).group(1))
    ok = int(re.search(r"Successful request count: (\d+)", r.stdout).group(1))
    execs = int(re.search(r"Execution count: (\d+)", r.stdout).group(1))
    assert seqs > 0 and ok > 0
    assert execs < ok  # batched across sequences
    s = stats(httpclient.InferenceServerClient(srv.http_url), "acc")
    assert int(s["inference_stats"]["fail"]["count"]) == 0


def test_preserve_ordering_is_not_held_back_by_the_backlog(serve, accumulator_repo):
    strategy = "oldest { max_candidate_sequences: 2 preserve_ordering: true }"
    srv = serve(accumulator_repo(strategy=strategy), "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    assert http_step(c, "acc", 1, 1, start=True)[0] == 1
    assert http_step(c, "acc", 2, 2, start=True)[0] == 2
    answer = {}
    t = threading.Thread(target=lambda: answer.setdefault(
        "out", http_step(httpclient.InferenceServerClient(srv.http_url), "acc", 3, 3, start=True, end=True)[0]))
    t.start()
    time.sleep(0.3)  # sequence 3 waits in the backlog for a slot
    began = time.monotonic()
    assert http_step(c, "acc", 1, 1)[0] == 2  # answered while sequence 3 still waits
    assert time.monotonic() - began < 0.5
    assert "out" not in answer
    assert http_step(c, "acc", 1, 1, end=True)[0] == 3
    t.join(10)
    assert answer["out"] == 3


def test_a_huge_idle_limit_means_never(serve, accumulator_repo):
    srv = serve(accumulator_repo(idle_us=18446744073709551615), "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    assert http_step(c, "acc", 2, 9, start=True)[0] == 2
    time.sleep(0.3)
    assert http_step(c, "acc", 2, 9, end=True)[0] == 4


ENSEMBLE_OF_ACC = """
platform: "ensemble"
max_batch_size: 4
input [{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "DOUBLED" data_type: TYPE_INT32 dims: [ 1 ] }]
ensemble_scheduling { step [
  { model_name: "acc" model_version: -1 input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "SUM" } },
  { model_name: "dbl" model_version: -1 input_map { key: "A" value: "SUM" } input_map { key: "B" value: "SUM" }
    output_map { key: "C" value: "DOUBLED" } }
] }
%s
"""


def add_int_model(write_model, repo):
    """dbl: C = A + B (int32, batching): a plain step beside the sequence model."""
    g = helper.make_graph([helper.make_node("Add", ["A", "B"], ["C"])], "dbl",
                          [helper.make_tensor_value_info(n, TensorProto.INT32, ["B", 1]) for n in ("A", "B")],
                          [helper.make_tensor_value_info("C", TensorProto.INT32, ["B", 1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    write_model(repo, "dbl", m.SerializeToString(), config="""
max_batch_size: 4
input [{ name: "A" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "C" data_type: TYPE_INT32 dims: [ 1 ] }]
""")


def ensemble_repo(accumulator_repo, write_model, extra=""):
    repo = accumulator_repo()
    add_int_model(write_model, repo)
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(ENSEMBLE_OF_ACC % extra)
    return repo


def test_an_ensemble_forwards_sequence_ids_to_its_sequence_step(serve, accumulator_repo, write_model):
    """Triton forwards an ensemble request's correlation ID and flags to the composing sequence
    models: two interleaved sequences through the ensemble keep their own running sums, over HTTP
    and over a gRPC stream; the plain step beside it gets no sequence parameters."""
    srv = serve(ensemble_repo(accumulator_repo, write_model), "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)

    def step(value, seq, start=False, end=False):
        i = httpclient.InferInput("X", [1, 1], "INT32")
        i.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        r = c.infer("ens", [i], sequence_id=seq, sequence_start=start, sequence_end=end)
        return int(r.as_numpy("SUM")[0, 0]), int(r.as_numpy("DOUBLED")[0, 0])

    assert step(1, 11, start=True) == (1, 2)
    assert step(10, 22, start=True) == (10, 20)
    assert step(2, 11) == (3, 6)
    assert step(20, 22) == (30, 60)
    assert step(3, 11, end=True) == (6, 12)
    assert step(30, 22, end=True) == (60, 120)
    # A new sequence under an ID that ended starts from zero again.
    assert step(5, 11, start=True, end=True) == (5, 10)
    assert stats(c, "acc")["inference_count"] == 7 and stats(c, "dbl")["inference_count"] == 7

    g = grpcclient.InferenceServerClient(srv.grpc_url)
    results = []
    done = threading.Event()

    def callback(result, error):
        results.append(error or result)
        if len(results) == 3:
            done.set()

    g.start_stream(callback=callback)
    for k, (v, start, end) in enumerate([(4, True, False), (4, False, False), (4, False, True)]):
        x = grpcclient.InferInput("X", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[v]], dtype=np.int32))
        g.async_stream_infer("ens", [x], sequence_id=33, sequence_start=start, sequence_end=end,
                             request_id=str(k))
    assert done.wait(30)
    g.stop_stream()
    assert not any(isinstance(r, InferenceServerException) for r in results), results
    ordered = sorted(results, key=lambda r: int(r.get_response().id))
    assert [int(r.as_numpy("SUM")[0, 0]) for r in ordered] == [4, 8, 12]


def test_an_ensemble_of_a_sequence_model_refuses_what_the_sequence_cannot_take(serve, accumulator_repo,
                                                                                 write_model):
    repo = ensemble_repo(accumulator_repo, write_model)
    srv = serve(repo, "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    i = httpclient.InferInput("X", [1, 1], "INT32")
    i.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="forwards its requests to sequence model 'acc'.*needs a sequence_id"):
        c.infer("ens", [i])
    two = httpclient.InferInput("X", [2, 1], "INT32")
    two.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="batch size 1 \\(got 2\\)"):
        c.infer("ens", [two], sequence_id=5, sequence_start=True)
    assert stats(c, "acc")["inference_count"] == 0
    # The plain step's model still refuses sequence parameters sent to it directly.
    a = httpclient.InferInput("A", [1, 1], "INT32")
    a.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    b = httpclient.InferInput("B", [1, 1], "INT32")
    b.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="is not a sequence model"):
        c.infer("dbl", [a, b], sequence_id=5)


def test_a_sequence_step_cannot_fan_out(serve, accumulator_repo, write_model):
    repo = ensemble_repo(accumulator_repo, write_model, 'sampan { fan_out [{ step: 0 }] }')
    srv = serve(repo, "--backend", "reference", "--model-control-mode", "explicit", "--load-model", "acc",
                "--load-model", "dbl")
    c = httpclient.InferenceServerClient(srv.http_url)
    with pytest.raises(InferenceServerException, match="is a sequence model; sampan.fan_out would send"):
        c.load_model("ens")


@pytest.mark.parametrize("protocol,corrid", [("http", "TYPE_UINT64"), ("grpc", "TYPE_STRING")])
def test_sampan_perf_drives_a_sequence_model(serve, accumulator_repo, tmp_path, protocol, corrid):
    """`sampan perf` reads sequence_batching from the config and runs sequences itself (perf_analyzer's
    --sequence-length / --sequence-id-range): every request is accepted (a step that did not follow a
    START of its ID would be refused), string IDs for a string CORRID, and the sequences cut short at
    the end of a level are ended, so a second level with more workers than slots still runs."""
    import json
    import subprocess

    from conftest import sampan_bin
    srv = serve(accumulator_repo(corrid=corrid, strategy="direct { max_queue_delay_microseconds: 1000 }"),
                "--backend", "reference")
    url = srv.http_url if protocol == "http" else srv.grpc_url
    out = tmp_path / "perf.json"
    r = subprocess.run([sampan_bin(), "perf", "-m", "acc", "-u", url, "-i", protocol, "--sequence-length", "5",
                        "--sequence-id-range", "100:109", "--concurrency-range", "2:6:4", "-p", "400", "-s", "60",
                        "--max-trials", "3", "--json", str(out)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Sequences: about 5 requests each" in r.stdout, r.stdout
    levels = json.loads(out.read_text())["results"]
    assert [lv["level"] for lv in levels] == [2, 6]
    assert all(lv["errors"] == 0 and lv["requests"] > 0 for lv in levels), levels
    s = stats(httpclient.InferenceServerClient(srv.http_url), "acc")
    assert int(s["inference_stats"]["fail"]["count"]) == 0, (r.stderr, s)  # the sequences' ends too
    assert "warning: ending sequence" not in r.stderr, r.stderr
    assert int(s["inference_stats"]["success"]["count"]) >= sum(lv["requests"] for lv in levels)


@pytest.mark.parametrize("args,message", [
    (["-b", "2"], "is a sequence model: each request is one step of one sequence, use -b 1"),
    (["--request-rate-range", "10"], "use --concurrency-range"),
    (["--sequence-id-range", "0:5"], "--sequence-id-range '0:5': want START[:END] with positive integers"),
    (["--sequence-id-range", "9:5"], "END is below START"),
    (["--sequence-id-range", "1:2", "--concurrency-range", "3"], "holds 2 IDs, fewer than the 3 sequences"),
    (["--sequence-length", "0"], "--sequence-length must be >= 1"),
    (["--sequence-length-variation", "100"], "--sequence-length-variation must be a percentage"),
])
def test_sampan_perf_refuses_what_a_sequence_model_cannot_take(serve, accumulator_repo, args, message):
    import subprocess

    from conftest import sampan_bin
    srv = serve(accumulator_repo(), "--backend", "reference")
    r = subprocess.run([sampan_bin(), "perf", "-m", "acc", "-u", srv.http_url, "-p", "200", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and message in r.stderr, r.stdout[-1000:] + r.stderr
