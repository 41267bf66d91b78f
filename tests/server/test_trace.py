"""Triton's trace extension, checked with tritonclient unmodified: `--trace-config` (Triton's
syntax), the trace file in Triton's JSON form with every stage's timestamp in order (HTTP, gRPC and
gRPC streaming requests), trace_rate / trace_count / log_frequency, the settings API over HTTP and
gRPC for the server and per model (a model's own value, cleared with null), the read-only and wrong
settings refused by name, and OTLP/HTTP JSON export to a collector (a local test server)."""
import http.server
import json
import queue
import re
import subprocess
import threading
import time

import numpy as np
import pytest

from conftest import sampan_bin

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

X = np.arange(4, dtype=np.float32).reshape(1, 4)

HTTP_ORDER = ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START",
              "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END", "HTTP_SEND_START",
              "HTTP_SEND_END"]
GRPC_ORDER = ["GRPC_WAITREAD_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
              "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END", "GRPC_SEND_START"]


def _http_infer(srv, request_id=""):
    c = httpclient.InferenceServerClient(srv.http_url)
    i = httpclient.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(X)
    np.testing.assert_array_equal(c.infer("add", [i], request_id=request_id).as_numpy("y"), X + 1)


def _grpc_input():
    i = grpcclient.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(X)
    return i


def _traces(path):
    """{id: {"model_name", "model_version", "request_id", "timestamps": [(name, ns)]}} of a trace file."""
    objs = json.loads(path.read_text())
    out = {}
    for o in objs:
        t = out.setdefault(o["id"], {})
        if "timestamps" in o:
            t["timestamps"] = [(s["name"], s["ns"]) for s in o["timestamps"]]
        else:
            t.update(o)
    return out


def _check_order(stamps, order):
    names = [n for n, _ in stamps]
    assert names == order or sorted(names) == sorted(order), names
    by_name = dict(stamps)
    ns = [by_name[n] for n in order]
    assert ns == sorted(ns), list(zip(order, ns))


def test_trace_file_has_every_stage_in_order(serve, add_repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    srv = serve(add_repo, "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1",
                "--trace-config", f"triton,file={trace_file}")
    for k in range(3):
        _http_infer(srv, request_id=f"h{k}")
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    for k in range(2):
        np.testing.assert_array_equal(g.infer("add", [_grpc_input()], request_id=f"g{k}").as_numpy("y"), X + 1)
    done = queue.Queue()
    g.start_stream(callback=lambda result, error: done.put((result, error)))
    g.async_stream_infer("add", [_grpc_input()], request_id="s0")
    result, error = done.get(timeout=30)
    assert error is None
    g.stop_stream()
    assert "trace" in httpclient.InferenceServerClient(srv.http_url).get_server_metadata()["extensions"]
    assert json.loads(trace_file.read_text()) == []  # log_frequency 0: written at shutdown
    assert srv.stop() == 0
    traces = _traces(trace_file)
    assert len(traces) == 6, traces
    by_request = {t["request_id"]: t for t in traces.values()}
    assert sorted(by_request) == ["g0", "g1", "h0", "h1", "h2", "s0"]
    for rid, t in by_request.items():
        assert t["model_name"] == "add" and t["model_version"] == 1 and t["parent_id"] == 0
        if rid.startswith("h"):
            _check_order(t["timestamps"], HTTP_ORDER)
        elif rid.startswith("g"):
            _check_order(t["timestamps"], GRPC_ORDER + ["GRPC_SEND_END"])
        else:
            _check_order(t["timestamps"], GRPC_ORDER)
    assert sorted(traces) == list(range(1, 7))  # ids from 1, one per trace


def test_tensors_level_writes_each_requests_inputs_and_outputs(serve, add_repo, tmp_path):
    """trace_level TENSORS (Triton's): one object a tensor, TENSOR_QUEUE_INPUT for the input as queued and
    TENSOR_BACKEND_OUTPUT for the output returned, with every element; set at start-up (with
    TIMESTAMPS: both kinds of object) and through the settings API (TENSORS alone: no timestamps)."""
    trace_file = tmp_path / "trace.json"
    srv = serve(add_repo, "--trace-config", "level=TIMESTAMPS", "--trace-config", "level=TENSORS",
                "--trace-config", "rate=1", "--trace-config", f"triton,file={trace_file}")
    h = httpclient.InferenceServerClient(srv.http_url)
    assert h.get_trace_settings()["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    _http_infer(srv, request_id="both")
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    g.update_trace_settings(settings={"trace_level": ["TENSORS"]})
    assert h.get_trace_settings()["trace_level"] == ["TENSORS"]
    x = np.array([[0.5, -1.25, 3e-7, 1e20]], dtype=np.float32)
    i = grpcclient.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    np.testing.assert_array_equal(g.infer("add", [i], request_id="tensors").as_numpy("y"), x + 1)
    assert srv.stop() == 0
    objs = json.loads(trace_file.read_text())
    ids = {o["request_id"]: o["id"] for o in objs if "request_id" in o}
    assert sorted(ids) == ["both", "tensors"]

    def of(rid, key):
        return [o for o in objs if o["id"] == ids[rid] and key in o]

    assert len(of("both", "timestamps")) == 1 and of("tensors", "timestamps") == []
    for rid, xin in (("both", X), ("tensors", x)):
        t = {o["activity"]: o["tensor"] for o in of(rid, "activity")}
        assert sorted(t) == ["TENSOR_BACKEND_OUTPUT", "TENSOR_QUEUE_INPUT"], t
        q, out = t["TENSOR_QUEUE_INPUT"], t["TENSOR_BACKEND_OUTPUT"]
        assert (q["name"], q["shape"], q["dtype"]) == ("x", "1,4", "FP32")
        assert (out["name"], out["shape"], out["dtype"]) == ("y", "1,4", "FP32")
        np.testing.assert_array_equal(np.array([float(v) for v in q["data"].split(",")], np.float32), xin.ravel())
        np.testing.assert_array_equal(np.array([float(v) for v in out["data"].split(",")], np.float32),
                                      (xin + 1).ravel())


def test_rate_count_and_log_frequency(serve, add_repo, tmp_path):
    trace_file = tmp_path / "t.json"
    srv = serve(add_repo, "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=2",
                "--trace-config", f"triton,file={trace_file}", "--trace-config", "triton,log-frequency=2", grpc=False)
    for _ in range(8):  # one request in two: 4 traces, in two files of 2
        _http_infer(srv)
    deadline = time.time() + 10
    while not (tmp_path / "t.json.1").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert len(_traces(tmp_path / "t.json.0")) == 2 and len(_traces(tmp_path / "t.json.1")) == 2
    c = httpclient.InferenceServerClient(srv.http_url)
    s = c.update_trace_settings(settings={"trace_rate": "1", "trace_count": "3", "log_frequency": "3"})
    assert s["trace_rate"] == "1" and s["trace_count"] == "3" and s["log_frequency"] == "3"
    for _ in range(5):  # only 3 more are traced: trace_count runs out
        _http_infer(srv)
    deadline = time.time() + 10
    while not (tmp_path / "t.json.2").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert len(_traces(tmp_path / "t.json.2")) == 3
    assert c.get_trace_settings()["trace_count"] == "0"
    srv.stop()
    assert not (tmp_path / "t.json.3").exists()


def test_settings_api_http_and_grpc(serve, add_repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    srv = serve(add_repo, "--trace-config", f"triton,file={trace_file}")
    h = httpclient.InferenceServerClient(srv.http_url)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    start = h.get_trace_settings()
    assert start == {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0",
                     "trace_file": str(trace_file), "trace_mode": "triton"}
    as_grpc = g.get_trace_settings(as_json=True)["settings"]
    assert as_grpc["trace_level"]["value"] == ["OFF"] and as_grpc["trace_rate"]["value"] == ["1000"]
    # A model's own values (over gRPC), seen over HTTP; the server's stay as they were.
    g.update_trace_settings(model_name="add", settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    assert h.get_trace_settings(model_name="add")["trace_level"] == ["TIMESTAMPS"]
    assert h.get_trace_settings(model_name="add")["trace_rate"] == "1"
    assert h.get_trace_settings()["trace_level"] == ["OFF"]
    _http_infer(srv)
    # The server's rate changes; the model keeps its own until it is cleared (null / no value).
    h.update_trace_settings(settings={"trace_rate": "7"})
    assert h.get_trace_settings(model_name="add")["trace_rate"] == "1"
    h.update_trace_settings(model_name="add", settings={"trace_rate": None})
    assert h.get_trace_settings(model_name="add")["trace_rate"] == "7"
    g.update_trace_settings(model_name="add", settings={"trace_level": None})
    assert h.get_trace_settings(model_name="add")["trace_level"] == ["OFF"]
    h.update_trace_settings(settings={"trace_rate": None})  # the server's: back to its start-up value
    assert h.get_trace_settings()["trace_rate"] == "1000"
    # Wrong and read-only settings are refused by name, and nothing changes.
    for bad, message in [
        ({"trace_file": "/tmp/elsewhere.json"}, "trace setting 'trace_file' is fixed at start-up"),
        ({"trace_mode": "opentelemetry"}, "trace setting 'trace_mode' is fixed at start-up"),
        ({"trace_rate": "0"}, "trace setting 'trace_rate' '0' must be a whole number >= 1"),
        ({"trace_count": "-2"}, "must be a whole number >= -1"),
        ({"trace_level": ["TENSORS", "OFF"]}, "OFF cannot go with another level"),
        ({"trace_level": ["LOUD"]}, "'LOUD' is not a trace level"),
        ({"trace_rate": "5", "bogus": "1"}, "unknown trace setting 'bogus'"),
    ]:
        for client in (h, g):
            with pytest.raises(InferenceServerException) as e:
                client.update_trace_settings(settings=bad)
            assert message in str(e.value), (bad, str(e.value))
    with pytest.raises(InferenceServerException) as e:
        h.update_trace_settings(model_name="add", settings={"log_frequency": "2"})
    assert "belongs to the server's trace file" in str(e.value)
    with pytest.raises(InferenceServerException) as e:
        h.get_trace_settings(model_name="nope")
    assert "nope" in str(e.value)
    assert h.get_trace_settings() == start
    srv.stop()
    assert len(_traces(trace_file)) == 1  # the one request while the model traced


def test_changing_trace_settings_is_model_control(serve, add_repo, tmp_path):
    srv = serve(add_repo, "--trace-config", f"triton,file={tmp_path / 't.json'}", "--model-control-token", "tok",
                grpc=False)
    c = httpclient.InferenceServerClient(srv.http_url)
    assert c.get_trace_settings()["trace_level"] == ["OFF"]  # reading needs no token
    with pytest.raises(InferenceServerException) as e:
        c.update_trace_settings(settings={"trace_rate": "1"})
    assert "Authorization: Bearer" in str(e.value)
    s = c.update_trace_settings(settings={"trace_rate": "1"}, headers={"Authorization": "Bearer tok"})
    assert s["trace_rate"] == "1"


def test_trace_settings_belong_to_the_trace_api_group(serve, add_repo, tmp_path):
    srv = serve(add_repo, "--trace-config", f"triton,file={tmp_path / 't.json'}", "--http-restricted-api",
                "trace:tkey=tval", grpc=False)
    c = httpclient.InferenceServerClient(srv.http_url)
    for model in ("", "add"):  # /v2/trace/setting and /v2/models/add/trace/setting alike
        with pytest.raises(InferenceServerException) as e:
            c.get_trace_settings(model_name=model)
        assert "This API is restricted, expecting header 'tkey'" in str(e.value)
        assert c.get_trace_settings(model_name=model, headers={"tkey": "tval"})["trace_level"] == ["OFF"]
    assert c.get_model_metadata("add")["name"] == "add"  # metadata is not in the group


def test_no_trace_file_no_tracing(serve, add_repo):
    srv = serve(add_repo, grpc=False)
    c = httpclient.InferenceServerClient(srv.http_url)
    with pytest.raises(InferenceServerException) as e:
        c.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
    assert "tracing needs a trace file" in str(e.value)
    assert c.get_trace_settings()["trace_level"] == ["OFF"]


class _Collector(http.server.BaseHTTPRequestHandler):
    bodies = None
    status = 200

    def do_POST(self):  # noqa: N802 (the standard library's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).bodies.put((self.path, self.headers["Content-Type"], body))
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def collector():
    handler = type("Collector", (_Collector,), {"bodies": queue.Queue(), "status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def test_opentelemetry_export(serve, add_repo, collector):
    server, handler = collector
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    srv = serve(add_repo, "--trace-config", "mode=opentelemetry", "--trace-config", f"opentelemetry,url={url}",
                "--trace-config", "opentelemetry,resource=deployment.environment=test", "--trace-config",
                "level=TIMESTAMPS", "--trace-config", "rate=1", grpc=False)
    assert httpclient.InferenceServerClient(srv.http_url).get_trace_settings()["trace_mode"] == "opentelemetry"
    _http_infer(srv, request_id="r1")
    _http_infer(srv, request_id="r2")
    spans = []
    deadline = time.time() + 15
    while len([s for s in spans if s["name"] == "InferRequest"]) < 2 and time.time() < deadline:
        try:
            path, ctype, body = handler.bodies.get(timeout=1)
        except queue.Empty:
            continue
        assert path == "/v1/traces" and ctype == "application/json"
        doc = json.loads(body)
        rs = doc["resourceSpans"][0]
        attrs = {a["key"]: a["value"]["stringValue"] for a in rs["resource"]["attributes"]}
        assert attrs == {"deployment.environment": "test", "service.name": "sampan"}
        spans += rs["scopeSpans"][0]["spans"]
    requests = {s["spanId"]: s for s in spans if s["name"] == "InferRequest"}
    assert len(requests) == 2, spans
    for s in requests.values():
        assert re.fullmatch("[0-9a-f]{32}", s["traceId"]) and re.fullmatch("[0-9a-f]{16}", s["spanId"])
        a = {x["key"]: x["value"]["stringValue"] for x in s["attributes"]}
        assert a["triton.model_name"] == "add" and a["triton.model_version"] == "1"
        assert a["triton.request_id"] in ("r1", "r2")
        events = [(e["name"], int(e["timeUnixNano"])) for e in s["events"]]
        _check_order(events, HTTP_ORDER)
        start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
        assert abs(start / 1e9 - time.time()) < 60 and start <= end  # wall-clock (Unix) nanoseconds
    computes = [s for s in spans if s["name"] == "compute"]
    assert len(computes) == 2 and {c["parentSpanId"] for c in computes} == set(requests)
    assert all(c["traceId"] == requests[c["parentSpanId"]]["traceId"] for c in computes)


def test_a_failing_collector_does_not_stop_serving(serve, add_repo, collector):
    server, handler = collector
    handler.status = 500
    url = f"127.0.0.1:{server.server_address[1]}/v1/traces"  # Triton's examples leave out the scheme
    srv = serve(add_repo, "--trace-config", "mode=opentelemetry", "--trace-config", f"opentelemetry,url={url}",
                "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1", grpc=False)
    for _ in range(3):
        _http_infer(srv)
    handler.bodies.get(timeout=15)
    deadline = time.time() + 10
    while "spans not sent to the OpenTelemetry collector" not in srv.output() and time.time() < deadline:
        time.sleep(0.1)
    assert "answered 'HTTP/1.0 500" in srv.output() or "answered 'HTTP/1.1 500" in srv.output(), srv.output()
    _http_infer(srv)  # still serving


@pytest.mark.parametrize("args, message", [
    (["level=TENSORS"], "level=TENSORS needs a trace file: --trace-config triton,file=PATH"),
    (["level=TENSORS", "mode=opentelemetry", "opentelemetry,url=http://127.0.0.1:9/v1/traces"],
     "tensors are written to Triton's trace file only"),
    (["rate=0"], "--trace-config 'rate=0' '0' must be a whole number >= 1"),
    (["count=x"], "must be a whole number >= -1"),
    (["level=TIMESTAMPS"], "level=TIMESTAMPS needs a trace file: --trace-config triton,file=PATH"),
    (["bogus=1"], "unknown setting 'bogus'"),
    (["triton,colour=blue"], "unknown triton setting 'colour'"),
    (["jaeger,url=x"], "unknown section 'jaeger'"),
    (["mode=zipkin"], "mode is triton (a trace file) or opentelemetry"),
    (["mode=opentelemetry"], "needs --trace-config opentelemetry,url=URL"),
    (["mode=opentelemetry", "opentelemetry,url=https://collector:4318/v1/traces"], "only http:// is supported"),
    (["mode=opentelemetry", "opentelemetry,url=http://host:99999/v1/traces"], "is not a port number"),
    (["opentelemetry,url=http://127.0.0.1:4318/v1/traces"], "settings need --trace-config mode=opentelemetry"),
    (["triton,file={d}/no/such/dir/t.json", "level=TIMESTAMPS"], "--trace-config triton,file"),
    (["level"], "expected [triton,|opentelemetry,]SETTING=VALUE"),
])
def test_bad_trace_config_is_named(add_repo, tmp_path, args, message):
    cmd = [sampan_bin(), "serve", "--model-repository", str(add_repo), "--http-port", "0", "--grpc-port", "-1",
           "--metrics-port", "-1", "--http-address", "127.0.0.1"]
    for a in args:
        cmd += ["--trace-config", a.format(d=tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and message in r.stderr, r.stdout + r.stderr
