"""`sampan deploy haproxy` and Debian's haproxy in front of several `sampan serve` nodes (issue #22):
the configuration checks with `haproxy -c`, requests through the gateway's HTTP and gRPC frontends
reach every node, a model goes only to the nodes that have it READY, the nodes' agent checks
(`serve --agent-port`) set their weights in the gateway and drain a node that shuts down, and bad
arguments are refused by name. Every process is bound to loopback and stopped by the test."""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import sampan_bin

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deploy(*args):
    return subprocess.run([sampan_bin(), "deploy", "haproxy", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def repo_with(tmp_path, name, models, make_add_model, write_model):
    for m, bias in models:
        write_model(tmp_path / name, m, make_add_model(bias=bias), config="max_batch_size: 8\n")
    return tmp_path / name


def metric(srv, name, model):
    for line in srv.metrics().splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Haproxy:
    def __init__(self, cfg):
        self.process = subprocess.Popen([HAPROXY, "-f", str(cfg), "-db"], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.stdout.read() if self.process.stdout else ""


def wait_routed(url, timeout=20):
    """Whether the gateway answered 200 on `url` (the nodes' checks passed) within `timeout` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def test_config_names_every_model_and_node(tmp_path, make_add_model, write_model):
    repo = repo_with(tmp_path, "repo", [("add", 1.0), ("add_two", 2.0)], make_add_model, write_model)
    cfg = tmp_path / "haproxy.cfg"
    r = deploy("--repository", repo, "--out", cfg, "--node", "127.0.0.1:9000:9001",
               "--node", "127.0.0.2:9000:9001", "--node", "localhost:9000:9001:9002", "--check-interval-ms", "500",
               "--timeout-ms", "2000")
    assert r.returncode == 0, r.stderr
    text = cfg.read_text()
    for line in ("acl model_0 path /v2/models/add\n  acl model_0 path_beg /v2/models/add/\n",
                 "use_backend http_model_add_two if model_1",
                 "option httpchk GET /v2/models/add_two/ready",
                 "option httpchk GET /v2/health/ready",
                 "retry-on conn-failure empty-response response-timeout 503",
                 "bind 127.0.0.1:8001 proto h2",
                 "server node0 127.0.0.1:9000 check inter 500ms fall 2 rise 2 weight 100 observe layer7 "
                 "error-limit 10 on-error mark-down\n",
                 "server node1 127.0.0.2:9001 proto h2 check port 9000 check-proto h1 inter 500ms",
                 # The node with an agent port: its agent check, in every backend (HTTP and gRPC); a
                 # model's backend asks for that model's weight, the node-wide ones send an empty line.
                 "server node2 localhost:9000 check inter 500ms fall 2 rise 2 weight 100 agent-check agent-addr "
                 "localhost agent-port 9002 agent-inter 500ms agent-send \"model=add_two unit=1\\n\" observe layer7",
                 "server node2 localhost:9000 check inter 500ms fall 2 rise 2 weight 100 agent-check agent-addr "
                 "localhost agent-port 9002 agent-inter 500ms agent-send \"\\n\" observe layer7",
                 "server node2 localhost:9001 proto h2 check port 9000 check-proto h1 inter 500ms fall 2 rise 2 "
                 "weight 100 agent-check agent-addr localhost agent-port 9002 agent-inter 500ms agent-send \"\\n\"",
                 "timeout server 2000ms"):
        assert line in text, f"{line!r} not in\n{text}"
    assert text.count("agent-check") == 4 and "node0 127.0.0.1:9000 check inter 500ms fall 2 rise 2 weight 100 " \
        "observe" in text, text  # one per backend (add, add_two, http_all, grpc_all), node2's only
    # --agent-rate-unit sets the model backends' unit.
    r = deploy("--repository", repo, "--out", cfg, "--node", "localhost:9000:9001:9002", "--agent-rate-unit", "25")
    assert r.returncode == 0, r.stderr
    assert 'agent-send "model=add unit=25\\n"' in cfg.read_text(), cfg.read_text()
    if HAPROXY:
        c = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
        assert c.returncode == 0, c.stdout + c.stderr


def test_bad_arguments_are_named(tmp_path, make_add_model, write_model):
    repo = repo_with(tmp_path, "repo", [("add", 1.0)], make_add_model, write_model)
    cfg = tmp_path / "h.cfg"
    for node, want in (("127.0.0.1:9000", "HOST:HTTP_PORT:GRPC_PORT[:AGENT_PORT]"),
                       ("127.0.0.1:x:9001", "HTTP port 'x'"), ("127.0.0.1:9000:70000", "gRPC port '70000'"),
                       ("bad host:1:2", "host 'bad host'"), ("127.0.0.1:1:2:3:4", "HOST:HTTP_PORT:GRPC_PORT[:AGENT_PORT]"),
                       ("127.0.0.1:1:2:x", "agent port 'x'"), ("127.0.0.1:1:2:0", "agent port '0'"),
                       ("127.0.0.1:1:2:", "agent port ''")):
        r = deploy("--repository", repo, "--out", cfg, "--node", node)
        assert r.returncode != 0 and want in r.stderr, (node, r.stderr)
    r = deploy("--repository", repo, "--out", cfg, "--node", "127.0.0.1:1:2", "--retries", "11")
    assert r.returncode != 0 and "--retries" in r.stderr, r.stderr
    for unit in ("0", "-3", "inf"):
        r = deploy("--repository", repo, "--out", cfg, "--node", "127.0.0.1:1:2:3", "--agent-rate-unit", unit)
        assert r.returncode != 0 and "--agent-rate-unit must be a positive number" in r.stderr, (unit, r.stderr)
    odd = repo_with(tmp_path, "odd", [("has space", 1.0)], make_add_model, write_model)
    r = deploy("--repository", odd, "--out", cfg, "--node", "127.0.0.1:1:2")
    assert r.returncode != 0 and "model 'has space'" in r.stderr, r.stderr
    r = deploy("--repository", tmp_path / "missing", "--out", cfg, "--node", "127.0.0.1:1:2")
    assert r.returncode != 0 and "missing" in r.stderr, r.stderr
    assert not cfg.exists()


@pytest.mark.skipif(not HAPROXY, reason="haproxy is not installed (scripts/setup.sh installs Debian's)")
def test_requests_through_the_gateway_reach_the_nodes_that_have_the_model(serve, tmp_path, make_add_model,
                                                                         write_model):
    # Node 0 serves `add` and `only0`; node 1 serves `add` only.
    r0 = repo_with(tmp_path, "r0", [("add", 1.0), ("only0", 5.0)], make_add_model, write_model)
    r1 = repo_with(tmp_path, "r1", [("add", 1.0)], make_add_model, write_model)
    nodes = [serve(r0, "--backend", "reference"), serve(r1, "--backend", "reference")]
    http_port, grpc_port = free_port(), free_port()
    cfg = tmp_path / "haproxy.cfg"
    args = ["--repository", r0, "--out", cfg, "--http-port", http_port, "--grpc-port", grpc_port,
            "--check-interval-ms", "200", "--timeout-ms", "5000"]
    for n in nodes:
        args += ["--node", f"127.0.0.1:{n.http_port}:{n.grpc_port}"]
    r = deploy(*args)
    assert r.returncode == 0, r.stderr
    gw = Haproxy(cfg)
    try:
        for model in ("add", "only0"):
            if not wait_routed(f"http://127.0.0.1:{http_port}/v2/models/{model}/ready"):
                pytest.fail(f"the gateway never routed {model}:\n{gw.stop()}\n{cfg.read_text()}")
        time.sleep(1.0)  # both nodes' checks up (rise 2 x 200 ms)
        # Eight clients at once: least-connections spreads them over both nodes.
        def one(i):
            http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
            x = np.full((1, 4), float(i), np.float32)
            for model, bias in (("add", 1.0), ("only0", 5.0)):
                inp = httpclient.InferInput("x", [1, 4], "FP32")
                inp.set_data_from_numpy(x)
                assert np.all(http.infer(model, [inp]).as_numpy("y") == x + bias), model

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(40)))
        counts = [metric(n, "nv_inference_count", "add") for n in nodes]
        assert sum(counts) == 40 and min(counts) > 0, counts
        assert metric(nodes[0], "nv_inference_count", "only0") == 40
        # gRPC through the h2 frontend.
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        for i in range(10):
            inp = grpcclient.InferInput("x", [1, 4], "FP32")
            inp.set_data_from_numpy(np.full((1, 4), float(i), np.float32))
            assert np.all(g.infer("add", [inp]).as_numpy("y") == i + 1)
        counts = [metric(n, "nv_inference_count", "add") for n in nodes]
        assert sum(counts) == 50, counts
    finally:
        log = gw.stop()
    assert "ALERT" not in log, log


def gateway_stats(port):
    """haproxy's statistics (the CSV of the stats page) by (backend, server)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats;csv", timeout=2) as r:
        lines = r.read().decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    rows = (dict(zip(header, line.split(","))) for line in lines[1:] if line)
    return {(row["pxname"], row["svname"]): row for row in rows}


def wait_stats(port, predicate, what, timeout=10):
    """Polls the stats until `predicate(stats)` holds; fails naming `what` and the last rows."""
    deadline = time.time() + timeout
    while True:
        stats = gateway_stats(port)
        if predicate(stats):
            return stats
        if time.time() > deadline:
            rows = {k: (v["status"], v["weight"], v.get("agent_status"), v.get("agent_desc"))
                    for k, v in stats.items() if k[1].startswith("node")}
            pytest.fail(f"the gateway never showed {what}: {rows}")
        time.sleep(0.1)


@pytest.mark.skipif(not HAPROXY, reason="haproxy is not installed (scripts/setup.sh installs Debian's)")
def test_the_agent_check_sets_weights_and_drains_a_node_that_shuts_down(serve, tmp_path, make_add_model,
                                                                      write_model):
    # `slow` holds a request in flight for its 5 s queue delay (batch 8); `add` answers at once.
    slow = "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 5000000 }\n"
    repos = []
    for name in ("r0", "r1"):
        write_model(tmp_path / name, "slow", make_add_model(bias=1.0), config=slow)
        write_model(tmp_path / name, "add", make_add_model(bias=1.0), config="max_batch_size: 8\n")
        repos.append(tmp_path / name)
    nodes = [serve(r, "--backend", "reference", "--agent-port", "0", "--exit-timeout-secs", "30") for r in repos]
    http_port, grpc_port, stats_port = free_port(), free_port(), free_port()
    cfg = tmp_path / "haproxy.cfg"
    args = ["--repository", repos[0], "--out", cfg, "--http-port", http_port, "--grpc-port", grpc_port,
            "--stats-port", stats_port, "--check-interval-ms", "200", "--timeout-ms", "20000"]
    for n in nodes:
        args += ["--node", f"127.0.0.1:{n.http_port}:{n.grpc_port}:{n.agent_port}"]
    r = deploy(*args)
    assert r.returncode == 0, r.stderr
    c = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    assert c.returncode == 0, c.stdout + c.stderr
    gw = Haproxy(cfg)
    backends = ("http_model_slow", "http_model_add", "http_all", "grpc_all")
    direct_threads, direct_results = [], []

    def direct(node, rows):
        def run():
            inp = httpclient.InferInput("x", [rows, 4], "FP32")
            inp.set_data_from_numpy(np.ones((rows, 4), np.float32))
            try:
                direct_results.append(httpclient.InferenceServerClient(node.http_url, network_timeout=60)
                                      .infer("slow", [inp]).as_numpy("y"))
            except Exception as e:  # noqa: BLE001 - checked below
                direct_results.append(e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        direct_threads.append(t)

    try:
        if not wait_routed(f"http://127.0.0.1:{http_port}/v2/models/add/ready"):
            pytest.fail(f"the gateway never routed add:\n{gw.stop()}\n{cfg.read_text()}")
        # Idle nodes: every server UP at weight 100: the node-wide backends' agents say 100% (no
        # saturation), the model backends' say `up ready` with no figure (no batch measured yet),
        # which keeps the configured weight.
        wait_stats(stats_port, lambda s: all(s[(b, f"node{i}")]["status"] == "UP" and
                                             s[(b, f"node{i}")]["weight"] == "100" and
                                             s[(b, f"node{i}")]["agent_status"].startswith("L7OK")
                                             for b in backends for i in (0, 1)), "both nodes UP at weight 100")
        # Four requests in flight on node 0 (sent to it directly): saturation 4 / 8, weight 50 in
        # the node-wide backends, node 1 unchanged; the model backends still have nothing measured.
        for _ in range(4):
            direct(nodes[0], 1)
        node_wide = ("http_all", "grpc_all")
        wait_stats(stats_port, lambda s: all(s[(b, "node0")]["weight"] == "50" and s[(b, "node1")]["weight"] == "100"
                                             for b in node_wide), "node0 at weight 50 under load", timeout=4)
        s = gateway_stats(stats_port)
        assert all(s[(b, f"node{i}")]["weight"] == "100" for b in ("http_model_slow", "http_model_add") for i in (0, 1))
        for t in direct_threads:
            t.join(30)
        wait_stats(stats_port, lambda s: all(s[(b, "node0")]["weight"] == "100" for b in node_wide),
                   "node0 back at weight 100")
        # Its batch of `slow` measured: the reference backend computes thousands of rows a busy
        # second, over unit 1 haproxy's largest weight, 256; node 1 measured nothing and keeps 100.
        wait_stats(stats_port, lambda s: s[("http_model_slow", "node0")]["weight"] == "256" and
                   s[("http_model_slow", "node1")]["weight"] == "100", "node0's measured weight for slow")

        # Node 0 shuts down with a request in flight: its agent answers `drain` until it is answered.
        direct(nodes[0], 1)
        deadline = time.time() + 10
        while 'nv_inference_pending_request_count{model="slow",version="1"} 1' not in nodes[0].metrics():
            assert time.time() < deadline, "the request never reached node 0's queue"
            time.sleep(0.02)
        nodes[0].process.send_signal(signal.SIGTERM)
        # DRAIN from the agent's `drain`; on a loaded machine haproxy's HTTP check can see the
        # draining node's 503 ready answer first and mark it DOWN: either takes it out of rotation.
        # (tests/server/test_agent_check.py checks the `drain` answer itself.)
        wait_stats(stats_port, lambda s: all(s[(b, "node0")]["status"].startswith(("DRAIN", "DOWN")) for b in backends),
                   "node0 draining or down", timeout=3)
        # Meanwhile new requests through the gateway go to node 1 only.
        http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        for i in range(10):
            inp = httpclient.InferInput("x", [1, 4], "FP32")
            inp.set_data_from_numpy(np.full((1, 4), float(i), np.float32))
            assert np.all(http.infer("add", [inp]).as_numpy("y") == i + 1.0)
        assert nodes[0].process.poll() is None, "node 0 stopped before the drain could be seen"
        assert metric(nodes[0], "nv_inference_count", "add") == 0
        assert metric(nodes[1], "nv_inference_count", "add") == 10
        for t in direct_threads:
            t.join(30)
        assert len(direct_results) == 5 and all(isinstance(y, np.ndarray) and np.all(y == 2.0)
                                                for y in direct_results), direct_results
        assert nodes[0].process.wait(30) == 0
    finally:
        log = gw.stop()
    assert "ALERT" not in log, log
