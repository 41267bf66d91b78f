"""`sampan perf` against a running `sampan serve`, and Triton's own perf_analyzer beside it.

perf_analyzer comes from scripts/get_perf_analyzer.sh (the C++ binary shipped in the
tritonclient 2.41 wheel; PyPI's `perf-analyzer` is an empty placeholder). Without network
access to fetch it, the agreement test skips and says so.
"""
import csv
import json
import re
import subprocess

import pytest

from conftest import ROOT, sampan_bin

CONFIG = """max_batch_size: 32
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { max_queue_delay_microseconds: 200 }
"""


@pytest.fixture
def add_server(serve, write_model, make_add_model, tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "add16", make_add_model(dims=(16,)), config=CONFIG)
    return serve(repo)


def perf(*args, timeout=180):
    return subprocess.run([sampan_bin(), "perf", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_reports_concurrency_sweep(add_server, tmp_path, protocol):
    url = add_server.http_url if protocol == "http" else add_server.grpc_url
    out_csv, out_json, out_svg = tmp_path / "r.csv", tmp_path / "r.json", tmp_path / "r.svg"
    r = perf("-m", "add16", "-u", url, "-i", protocol, "--concurrency-range", "1:4:3", "-p", "500",
             "-f", str(out_csv), "--json", str(out_json), "--chart", str(out_svg))
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"Concurrency: 1, throughput: [\d.]+ infer/sec", r.stdout), r.stdout
    assert re.search(r"Concurrency: 4, throughput: [\d.]+ infer/sec", r.stdout), r.stdout
    rows = list(csv.DictReader(out_csv.open()))
    assert [float(x["Concurrency"]) for x in rows] == [1, 4]
    res = json.loads(out_json.read_text())["results"]
    for level in res:
        assert level["errors"] == 0
        assert level["throughput_infer_per_s"] > 10
        lat = level["latency_us"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"]
        assert lat["p99_failed_as_late"] == lat["p99"]  # nothing failed
        # The server's own breakdown came from the statistics endpoint.
        assert level["server_us"]["request"] > 0 and level["server_us"]["compute_infer"] > 0
    # More clients batch together: the server ran fewer executions than inferences.
    assert res[1]["server_avg_batch"] > 1.0, res[1]
    svg = out_svg.read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 3


def test_perf_open_loop_rate_and_distribution(add_server, tmp_path):
    out_json = tmp_path / "r.json"
    r = perf("-m", "add16", "-u", add_server.http_url, "--request-rate-range", "200",
             "--request-distribution", "poisson", "-p", "1000", "--json", str(out_json))
    assert r.returncode == 0, r.stdout + r.stderr
    level = json.loads(out_json.read_text())["results"][0]
    # Open loop: the offered rate is what gets served (the server is far from saturated).
    assert abs(level["requests_per_s"] - 200) < 30, level
    assert level["errors"] == 0


def test_perf_batch_and_json_input_data(add_server, tmp_path):
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"x": list(range(16))}, {"x": {"content": [1.5] * 16, "shape": [16]}}]}))
    r = perf("-m", "add16", "-u", add_server.http_url, "-b", "4", "--input-data", str(data), "-p", "300")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Batch size: 4" in r.stdout


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_sends_bytes_inputs(serve, write_model, tmp_path, protocol):
    """A BYTES (string) input: random strings of --string-length, one --string-data string, and a
    JSON data file of strings, each served without an error; the server's statistics count them."""
    from test_bytes import CONFIG as TEXT_CONFIG, make_text_model
    import urllib.request
    write_model(tmp_path / "repo", "text", make_text_model(), config=TEXT_CONFIG)
    srv = serve(tmp_path / "repo", "--backend", "cpu")
    url = srv.http_url if protocol == "http" else srv.grpc_url
    data = tmp_path / "words.json"
    data.write_text(json.dumps({"data": [{"x": ["cat", "dog", "bird"]}, {"x": {"content": ["x", "y", "z"], "shape": [3]}}]}))
    runs = [["--string-length", "16"], ["--string-data", "cat"], ["--input-data", str(data)]]
    for extra in runs:
        out_json = tmp_path / "r.json"
        r = perf("-m", "text", "-u", url, "-i", protocol, "--shape", "x:3", "-b", "2", "--concurrency-range", "2",
                 "-p", "300", "--json", str(out_json), *extra)
        assert r.returncode == 0, (extra, r.stdout + r.stderr)
        level = json.loads(out_json.read_text())["results"][0]
        assert level["errors"] == 0 and level["throughput_infer_per_s"] > 0, (extra, level)
    with urllib.request.urlopen(f"{srv.http_base}/v2/models/text/stats", timeout=10) as resp:
        stats = json.loads(resp.read())["model_stats"][0]
    assert int(stats["inference_count"]) > 0, stats
    # Numbers where strings belong: refused naming the input.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"x": [1, 2, 3]}]}))
    r = perf("-m", "text", "-u", url, "-i", protocol, "--shape", "x:3", "--input-data", str(bad), "-p", "200")
    assert r.returncode != 0 and "BYTES input: give strings" in r.stderr, r.stderr


@pytest.mark.parametrize("args, message", [
    (["-m", "nope"], "unknown model|not found"),
    (["-m", "add16", "-b", "64"], "exceeds model 'add16' max_batch_size 32"),
    (["-m", "add16", "--shape", "z:3"], "'z', which is not an input"),
    (["-m", "add16", "--concurrency-range", "4:1"], "END is below START"),
    (["-m", "add16", "--concurrency-range", "1", "--request-rate-range", "5"], "give one of --concurrency-range"),
    (["-m", "add16", "--request-rate-range", "5", "--request-intervals", "/nonexistent"],
     "give one of --concurrency-range"),
    (["-m", "add16", "--request-intervals", "/nonexistent/trace.txt"], "cannot read '/nonexistent/trace.txt'"),
    (["-m", "add16", "-i", "udp"], "-i must be http or grpc"),
    (["-m", "add16", "--input-data", "/nonexistent.json"], "cannot read --input-data"),
])
def test_perf_bad_arguments(add_server, args, message):
    r = perf(*args, "-u", add_server.http_url, "-p", "200", timeout=60)
    assert r.returncode != 0
    assert re.search(message, r.stderr, re.I), r.stderr


def test_perf_request_intervals_replays_a_trace(add_server, tmp_path):
    # A bursty trace: 20 gaps of 20 ms, then 20 of 2 ms (mean 11 ms: ~91 requests/s), used in turn.
    trace = tmp_path / "trace.txt"
    trace.write_text("# microseconds between requests\n" + "20000\n" * 20 + "2000\n" * 20)
    out = tmp_path / "trace.json"
    r = perf("-m", "add16", "-u", add_server.http_url, "--request-intervals", str(trace), "-p", "500", "-r", "3",
             "--json", str(out), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Request intervals: " in r.stdout and "40 gaps, mean 90.9 requests/s" in r.stdout, r.stdout
    [level] = json.loads(out.read_text())["results"]
    assert abs(level["level"] - 90.9) < 0.1 and level["errors"] == 0, level
    assert 60 <= level["requests_per_s"] <= 130, level  # the trace's rate, not a closed loop's
    bad = tmp_path / "bad.txt"
    bad.write_text("1000\nfast\n")
    r = perf("-m", "add16", "-u", add_server.http_url, "--request-intervals", str(bad), timeout=60)
    assert r.returncode != 0 and "bad.txt:2: 'fast' is not a number of microseconds" in r.stderr, r.stderr


def test_perf_unreachable_server():
    r = perf("-m", "m", "-u", "127.0.0.1:1", timeout=60)
    assert r.returncode != 0 and "cannot connect" in r.stderr, r.stderr


def _perf_analyzer():
    r = subprocess.run(["bash", str(ROOT / "scripts" / "get_perf_analyzer.sh")], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        pytest.skip(f"perf_analyzer unavailable (scripts/get_perf_analyzer.sh failed): {r.stderr[-300:]}")
    return r.stdout.strip().splitlines()[-1]


def _matmul_chain_model(width=512, depth=6):
    """A compute-bound model (a few ms per request on one instance): the server, not the
    load generators' own CPU use, sets the throughput on a 2-core machine."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(depth):
        inits.append(numpy_helper.from_array((rng.standard_normal((width, width)) / width).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}" if i + 1 < depth else "y"]))
        prev = f"h{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_runs_unmodified_and_agrees(serve, write_model, tmp_path, protocol):
    """Triton's perf_analyzer drives sampan serve unmodified, and it and `sampan perf` count the same
    throughput for the same offered load: an open loop at 20 requests/s (about half what the ASan
    server sustains on 2 cores), where a server that keeps up completes what is offered, so each
    tool's throughput (median of three alternating runs) must be within 10% of the rate and of the other's."""
    pa = _perf_analyzer()
    write_model(tmp_path / "repo", "add16", _matmul_chain_model(),
                config="backend: \"sampan\"\nsampan { backend: \"reference\" }\n")
    srv = serve(tmp_path / "repo")
    url = srv.http_url if protocol == "http" else srv.grpc_url
    rate = 20
    pattern = rf"Request Rate: {rate}, throughput: ([\d.]+) infer/sec"
    theirs, ours = [], []
    for _ in range(3):
        r = subprocess.run([pa, "-m", "add16", "-u", url, "-i", protocol, "--request-rate-range", str(rate),
                            "-p", "2000", "-s", "25"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        theirs.append(float(re.search(pattern, r.stdout).group(1)))
        r = perf("-m", "add16", "-u", url, "-i", protocol, "--request-rate-range", str(rate), "-p", "2000",
                 "-s", "25")
        assert r.returncode == 0, r.stdout + r.stderr
        ours.append(float(re.search(pattern, r.stdout).group(1)))
    # A closed loop (a fixed concurrency) measured each tool's own appetite for the 2 shared cores as
    # much as the server: on an AVX-512 CI machine perf_analyzer's windows gave 42.3-42.5 infer/s and
    # ours 48.5-49.2, steadily, at concurrency 4 (the load generator that spends less CPU per request
    # leaves the ASan server more). An open loop below the server's capacity takes that out: both
    # tools must count what was offered. Each tool's median of three runs is compared, the same rule
    # for both: in one CI run perf_analyzer counted 14.9 infer/s at 20 offered in one of its runs
    # (19.8 in the other, ours 20.0 and 20.0 alternating with them on the same server), one
    # outlying run that a median of three absorbs and a steadily slow server or tool does not.
    med_theirs, med_ours = sorted(theirs)[1], sorted(ours)[1]
    assert all(abs(x - rate) <= 0.10 * rate for x in (med_theirs, med_ours)) and \
        abs(med_theirs - med_ours) <= 0.10 * rate, \
        f"{protocol}: at {rate} requests/s sampan perf counted {ours}, perf_analyzer {theirs} infer/s (medians compared)"
