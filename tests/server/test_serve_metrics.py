"""/metrics as Prometheus sees it: promtool accepts the exposition, and a
real Prometheus server (Debian's package) scrapes `sampan serve` and answers
queries for Triton's series and our latency histogram."""

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_some_inferences(srv, n=5):
    c = httpclient.InferenceServerClient(srv.http_url)
    for i in range(n):
        x = np.full((1, 4), float(i), np.float32)
        inp = httpclient.InferInput("x", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        assert np.all(c.infer("m", [inp]).as_numpy("y") == i + 1.0)
    bad = httpclient.InferInput("x", [1, 3], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
    with pytest.raises(Exception):
        c.infer("m", [bad])


def test_metrics_text_is_valid_exposition(serve, tmp_path, write_model, make_add_model):
    write_model(tmp_path / "repo", "m", make_add_model())
    srv = serve(tmp_path / "repo", "--backend", "reference")
    run_some_inferences(srv)
    text = srv.metrics()
    for name in ["nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
                 "nv_inference_exec_count", "nv_inference_pending_request_count", "nv_inference_request_duration_us",
                 "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
                 "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us"]:
        assert re.search(r"^# TYPE %s (counter|gauge)$" % name, text, re.M), name
    assert 'nv_inference_request_success{model="m",version="1"} 5' in text
    assert 'nv_inference_request_failure{model="m",reason="OTHER",version="1"} 1' in text
    assert 'sampan_request_latency_seconds_count{model="m",version="1"} 5' in text
    assert 'sampan_request_latency_seconds_bucket{model="m",version="1",le="+Inf"} 5' in text
    if not os.path.exists("/dev/nvidiactl"):
        assert "nv_gpu_" not in text  # no GPU: no GPU series at all
    if os.path.exists(PROMTOOL):
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        # promtool exits 1 for lint warnings too; parse errors say "error while linting".
        assert "error while linting" not in (r.stdout + r.stderr), r.stdout + r.stderr


def test_autoscaling_signals(serve, tmp_path, write_model, make_add_model):
    """The series an HPA scales on (deploy/kubernetes): queue and compute histograms, requests
    in flight, and saturation against the model's latency SLO (config.pbtxt sampan.latency_slo_ms)."""
    import threading
    # A 1.5 s queue delay keeps a lone request queued long enough to be seen in flight.
    write_model(tmp_path / "repo", "m", make_add_model(),
                config="max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 1500000 }\n"
                       "sampan { latency_slo_ms: 50 }\n")
    write_model(tmp_path / "repo", "plain", make_add_model())
    srv = serve(tmp_path / "repo", "--backend", "reference")
    text = srv.metrics()
    assert 'sampan_model_latency_slo_seconds{model="m",version="1"} 0.05' in text
    assert 'sampan_model_latency_slo_seconds{model="plain"' not in text  # no SLO, no series
    assert 'sampan_inflight_requests{model="m",version="1"} 0' in text
    assert 'sampan_model_saturation{model="m",version="1"} 0' in text

    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.full((1, 4), 2.0, np.float32))
    done = {}
    t = threading.Thread(target=lambda: done.update(
        y=httpclient.InferenceServerClient(srv.http_url).infer("m", [inp]).as_numpy("y")))
    t.start()
    deadline = time.time() + 10
    while 'sampan_inflight_requests{model="m",version="1"} 1' not in srv.metrics():
        assert time.time() < deadline, "the request was never seen in flight"
        time.sleep(0.02)
    # Before any execution the capacity is one full batch per instance: 1 request / 8 rows.
    sat = re.search(r'^sampan_model_saturation\{model="m",version="1"\} (\S+)$', srv.metrics(), re.M)
    assert sat and float(sat.group(1)) == pytest.approx(1 / 8), sat
    t.join(30)
    assert np.all(done["y"] == 3.0)
    text = srv.metrics()
    assert 'sampan_queue_duration_seconds_count{model="m",version="1"} 1' in text
    assert 'sampan_compute_duration_seconds_count{model="m",version="1"} 1' in text
    q = re.search(r'^sampan_queue_duration_seconds_sum\{model="m",version="1"\} (\S+)$', text, re.M)
    assert q and 1.0 < float(q.group(1)) < 10, "the queued request waited ~1.5 s"
    assert 'sampan_inflight_requests{model="m",version="1"} 0' in text
    assert re.search(r"^# TYPE sampan_queue_duration_seconds histogram$", text, re.M)
    assert re.search(r"^# TYPE sampan_model_saturation gauge$", text, re.M)


@pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason="Prometheus is not installed (Debian: apt install prometheus)")
def test_real_prometheus_scrapes_the_series(serve, tmp_path, write_model, make_add_model):
    write_model(tmp_path / "repo", "m", make_add_model())
    srv = serve(tmp_path / "repo", "--backend", "reference")
    run_some_inferences(srv)

    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: sampan
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:{srv.metrics_port}"]
""")
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def query(q):
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            with urllib.request.urlopen(url, timeout=5) as r:
                body = json.load(r)
            assert body["status"] == "success", body
            return body["data"]["result"]

        deadline = time.time() + 60
        result = []
        while time.time() < deadline:
            try:
                result = query('nv_inference_request_success{model="m",version="1"}')
                if result:
                    break
            except (OSError, urllib.error.URLError):
                pass
            if prom.poll() is not None:
                pytest.fail("prometheus exited:\n" + prom.stdout.read())
            time.sleep(0.5)
        assert result, "Prometheus never scraped nv_inference_request_success"
        assert float(result[0]["value"][1]) == 5
        assert float(query('nv_inference_count{model="m"}')[0]["value"][1]) == 5
        assert query('nv_inference_request_failure{model="m",reason="OTHER"}')[0]["value"][1] == "1"
        assert query("nv_inference_compute_infer_duration_us")
        # The histogram is usable for percentiles.
        p99 = query('histogram_quantile(0.99, sum by (le) (sampan_request_latency_seconds_bucket{model="m"}))')
        assert p99 and float(p99[0]["value"][1]) > 0
        up = query('up{job="sampan"}')
        assert up and up[0]["value"][1] == "1"
    finally:
        prom.terminate()
        prom.wait(30)
