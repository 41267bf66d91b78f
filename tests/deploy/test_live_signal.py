"""The autoscaling signal, live: `sampan serve` under load, a real Prometheus (Debian's)
scraping it with the recording rules of deploy/kubernetes/base/prometheusrule.yaml, and the
query prometheus-adapter sends for the HPA's Pods metric (deploy/kubernetes/prometheus-adapter)
evaluated by that Prometheus. The value must rise above the HPA's target (0.7) within 30 s of a
load step that pushes p99 past the model's latency SLO, and fall back below it once the load
stops. Bounded: about 90 s, loopback only."""

import concurrent.futures
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from deploy_common import ROOT, SAMPAN

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
TARGET = 0.7  # deploy/kubernetes/base/hpa.yaml averageValue 700m


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def write_repo(repo):
    """Model `m`: four 256x256 MatMuls, batching up to 8, SLO 2 ms."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(4):
        w = (rng.standard_normal((256, 256)) * 0.05).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 256])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    d = repo / "m"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").write_bytes(m.SerializeToString())
    (d / "config.pbtxt").write_text(
        'name: "m"\nmax_batch_size: 8\n'
        'input { name: "x" data_type: TYPE_FP32 dims: [ 256 ] }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: [ 256 ] }\n'
        # A hand-set delay keeps the SLO batcher off (it would shed at this 2 ms SLO): the SLO here
        # only scales the saturation signal the HPA reads.
        "dynamic_batching { max_queue_delay_microseconds: 100 }\n"
        "sampan { latency_slo_ms: 2 }\n")


def autoscaling_rules(tmp_path):
    """The PrometheusRule's autoscaling group as a plain rule file, evaluated every second here
    (10 s in the cluster) so the test does not wait for evaluation ticks."""
    pr = yaml.safe_load((ROOT / "deploy/kubernetes/base/prometheusrule.yaml").read_text())
    group = next(g for g in pr["spec"]["groups"] if g["name"] == "sampan.autoscaling")
    group = dict(group, interval="1s", rules=[r for r in group["rules"] if "record" in r])
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [group]}))
    return path


def adapter_query(namespace, pod):
    """The metricsQuery prometheus-adapter sends for sampan_pod_saturation, expanded as it does."""
    cfg = yaml.safe_load((ROOT / "deploy/kubernetes/prometheus-adapter/config.yaml").read_text())
    rule = next(r for r in cfg["rules"] if r["name"]["as"] == "sampan_pod_saturation")
    series = rule["seriesQuery"].split("{")[0]
    return (rule["metricsQuery"].replace("<<.GroupBy>>", "pod").replace("<<.Series>>", series)
            .replace("<<.LabelMatchers>>", f'namespace="{namespace}",pod=~"{pod}"'))


@pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason="Prometheus is not installed (Debian: apt install prometheus)")
@pytest.mark.skipif(not os.path.exists(SAMPAN), reason=f"no sampan binary at {SAMPAN} (build it or set SAMPAN_BIN)")
def test_hpa_signal_follows_a_load_step(tmp_path):
    import tritonclient.http as httpclient

    repo = tmp_path / "repo"
    write_repo(repo)
    http, grpc, metrics = free_port(), free_port(), free_port()
    srv = subprocess.Popen([SAMPAN, "serve", "--model-repository", str(repo), "--backend", "reference",
                            "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    prom = None
    try:
        deadline = time.time() + 120
        while True:
            try:
                if get(f"http://127.0.0.1:{http}/v2/health/ready")[0] == 200:
                    break
            except OSError:
                pass
            assert srv.poll() is None, srv.stdout.read()
            assert time.time() < deadline, "sampan serve never became ready"
            time.sleep(0.2)

        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["{autoscaling_rules(tmp_path)}"]
scrape_configs:
  - job_name: sampan
    static_configs:
      - targets: ["127.0.0.1:{metrics}"]
        labels: {{namespace: "test", pod: "sampan-0"}}
""")
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        query = adapter_query("test", "sampan-0")

        def hpa_value():
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
            try:
                body = json.loads(get(url)[1])
            except OSError:
                return None
            result = body.get("data", {}).get("result", [])
            return float(result[0]["value"][1]) if result else None

        # Idle: the signal exists and is below the target.
        deadline = time.time() + 30
        idle = None
        while idle is None:
            assert prom.poll() is None, prom.stdout.read()
            assert time.time() < deadline, "Prometheus never produced the adapter's series"
            time.sleep(0.5)
            idle = hpa_value()
        assert idle < TARGET, idle

        # The load step: 24 clients sending back to back.
        stop = threading.Event()
        latencies = []

        def client():
            c = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
            inp = httpclient.InferInput("x", [1, 256], "FP32")
            inp.set_data_from_numpy(np.ones((1, 256), np.float32))
            while not stop.is_set():
                t0 = time.perf_counter()
                c.infer("m", [inp])
                latencies.append(time.perf_counter() - t0)

        pool = concurrent.futures.ThreadPoolExecutor(24)
        futures = [pool.submit(client) for _ in range(24)]
        t_step = time.time()
        rose_after = None
        while time.time() - t_step < 30:
            v = hpa_value()
            if v is not None and v > TARGET:
                rose_after = time.time() - t_step
                break
            time.sleep(0.5)
        stop.set()
        for f in futures:
            f.result(timeout=30)
        pool.shutdown()
        p99 = float(np.percentile(latencies, 99))
        assert p99 > 0.002, f"the load did not push p99 ({p99 * 1e3:.2f} ms) past the 2 ms SLO"
        assert rose_after is not None, f"the HPA's value stayed below {TARGET} for 30 s under load (last {hpa_value()})"

        # Load gone: back below the target once the 30 s average forgets the burst.
        t_end = time.time()
        fell = None
        while time.time() - t_end < 45:
            v = hpa_value()
            if v is not None and v < TARGET:
                fell = time.time() - t_end
                break
            time.sleep(1)
        assert fell is not None, f"the HPA's value stayed above {TARGET} 45 s after the load stopped"
        print(f"HPA value: idle {idle:.3f}, above {TARGET} {rose_after:.1f} s after the load step "
              f"(p99 {p99 * 1e3:.1f} ms vs SLO 2 ms), below again {fell:.1f} s after it stopped")
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(30)
        srv.terminate()
        srv.wait(30)
