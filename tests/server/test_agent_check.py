"""`sampan serve --agent-port`: haproxy's agent check (src/server/agent/agent_check.h, issue #22)
over a real socket, as haproxy reads it: one line, then the end of the stream. An idle server
answers `up ready 100%`; requests in flight lower the node's weight as sampan_model_saturation
rises; a model's weight (agent-send `model=NAME`) comes from its measured rows per second; a
server draining after SIGTERM answers `drain`; a server that is not ready answers `down`; bad
flags are refused by name. Everything on 127.0.0.1, every wait bounded."""

import re
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import tritonclient.http as httpclient

from conftest import sampan_bin

# A lone request (or a few rows) waits out the queue delay: it is in flight meanwhile.
SLOW_CONFIG = "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 3000000 }\n"


def agent(port, send=b"", timeout=5):
    """What the agent port answers: everything until the server ends the stream."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        if send:
            s.sendall(send)
        data = b""
        while True:
            chunk = s.recv(256)
            if not chunk:
                return data.decode()
            data += chunk


def wait_for_answer(port, want, timeout=10):
    """Polls the agent until it answers `want`; returns every distinct answer seen, in order."""
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        a = agent(port)
        if not seen or seen[-1] != a:
            seen.append(a)
        if a == want:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"the agent never answered {want!r}; it answered {seen}")


def infer_async(srv, model, rows, results):
    def run():
        inp = httpclient.InferInput("x", [rows, 4], "FP32")
        inp.set_data_from_numpy(np.full((rows, 4), 2.0, np.float32))
        try:
            results.append(httpclient.InferenceServerClient(srv.http_url, network_timeout=60)
                           .infer(model, [inp]).as_numpy("y"))
        except Exception as e:  # noqa: BLE001 - checked by the caller
            results.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def saturation(srv, model):
    m = re.search(r'^sampan_model_saturation\{model="%s",version="1"\} (\S+)$' % model, srv.metrics(), re.M)
    return float(m.group(1)) if m else None


def test_an_idle_server_answers_up_ready_100(serve, tmp_path, write_model, make_add_model):
    write_model(tmp_path / "repo", "m", make_add_model())
    srv = serve(tmp_path / "repo", "--backend", "reference", "--agent-port", "0")
    assert srv.agent_port, srv.output()
    # The default address is --http-address (127.0.0.1 here).
    assert f"Agent check on 127.0.0.1:{srv.agent_port}\n" in srv.output()
    assert agent(srv.agent_port) == "up ready 100%\n"
    # haproxy's agent-send line: empty asks for the node, model=NAME for a model (nothing measured
    # yet: no figure, haproxy keeps its weight); a word the agent does not know is named in the
    # description haproxy shows, the node's state still answered.
    assert agent(srv.agent_port, send=b"\n") == "up ready 100%\n"
    assert agent(srv.agent_port, send=b"model=m unit=5\n") == "up ready\n"
    assert agent(srv.agent_port, send=b"model=other\n") == "down #model other is not in the repository\n"
    assert agent(srv.agent_port, send=b"ping\n") == \
        "up ready 100% #agent-send word 'ping': expected model=NAME [unit=ROWS_PER_S]\n"
    # Without the flag there is no agent port.
    plain = serve(tmp_path / "repo", "--backend", "reference")
    assert plain.agent_port is None and "Agent check" not in plain.output()


def test_the_weight_drops_while_requests_are_in_flight(serve, tmp_path, write_model, make_add_model):
    write_model(tmp_path / "repo", "slow", make_add_model(), config=SLOW_CONFIG)
    srv = serve(tmp_path / "repo", "--backend", "reference", "--agent-port", "0", "--agent-address", "127.0.0.1")
    assert agent(srv.agent_port) == "up ready 100%\n"
    results = []
    # Four requests queued on one instance of batch 8 (no latency SLO: the capacity is one full
    # batch): saturation 4 / 8, weight 50.
    threads = [infer_async(srv, "slow", 1, results) for _ in range(4)]
    seen = wait_for_answer(srv.agent_port, "up ready 50%\n", timeout=10)
    assert saturation(srv, "slow") == 0.5
    # On the way there it may have seen 1, 2 or 3 of them: 88%, 75%, 63%.
    assert set(seen) <= {"up ready 100%\n", "up ready 88%\n", "up ready 75%\n", "up ready 63%\n",
                         "up ready 50%\n"}, seen
    for t in threads:
        t.join(30)
    assert len(results) == 4 and all(isinstance(y, np.ndarray) and np.all(y == 3.0) for y in results), results
    wait_for_answer(srv.agent_port, "up ready 100%\n", timeout=10)
    # The model's own weight: its rows per busy second over the unit. The reference backend adds
    # 4 rows in microseconds: far over 256 rows/s, so haproxy's largest weight at unit 1, and the
    # smallest (never 0, drain's) at 10^9 rows/s a point.
    assert agent(srv.agent_port, send=b"model=slow\n") == "up ready 256%\n"
    assert agent(srv.agent_port, send=b"model=slow unit=1e9\n") == "up ready 1%\n"


def test_a_draining_server_answers_drain(serve, tmp_path, write_model, make_add_model):
    write_model(tmp_path / "repo", "slow", make_add_model(), config=SLOW_CONFIG)
    srv = serve(tmp_path / "repo", "--backend", "reference", "--agent-port", "0", "--exit-timeout-secs", "20")
    results = []
    t = infer_async(srv, "slow", 1, results)
    wait_for_answer(srv.agent_port, "up ready 88%\n", timeout=10)
    port = srv.agent_port
    srv.process.send_signal(signal.SIGTERM)
    wait_for_answer(port, "drain\n", timeout=2)
    assert srv.process.poll() is None, "the server stopped before the request in flight finished"
    t.join(30)
    assert len(results) == 1 and isinstance(results[0], np.ndarray) and np.all(results[0] == 3.0), results
    assert srv.process.wait(30) == 0
    try:
        agent(port, timeout=2)
        raise AssertionError("the agent port still answers after the server stopped")
    except ConnectionRefusedError:
        pass


def test_a_server_that_is_not_ready_answers_down(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "good", make_add_model())
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.onnx").write_bytes(b"not an ONNX model")
    srv = serve(repo, "--backend", "reference", "--agent-port", "0")
    assert srv.get("/v2/health/ready")[0] != 200
    assert agent(srv.agent_port) == "down #not ready\n"
    # Without strict readiness the same server is ready, and says so.
    lax = serve(repo, "--backend", "reference", "--agent-port", "0", "--strict-readiness", "false")
    assert lax.get("/v2/health/ready")[0] == 200
    assert agent(lax.agent_port) == "up ready 100%\n"


def test_bad_agent_flags_are_refused_by_name(tmp_path):
    (tmp_path / "repo").mkdir()

    def run(*flags):
        return subprocess.run([sampan_bin(), "serve", "--model-repository", str(tmp_path / "repo"),
                               "--http-port", "-1", "--grpc-port", "-1", "--metrics-port", "-1", *flags],
                              capture_output=True, text=True, timeout=60)

    for flags, want in ((["--agent-port", "70000"], "--agent-port 70000: expected 0..65535"),
                        (["--agent-port", "-2"], "--agent-port -2: expected 0..65535"),
                        (["--agent-port", "many"], "--agent-port"),
                        (["--agent-address", "127.0.0.1"], "--agent-address is given but the agent check is off"),
                        (["--agent-port", "0", "--agent-address", "nowhere"],
                         "'nowhere' is not an IP address")):
        r = run(*flags)
        assert r.returncode != 0 and want in r.stderr + r.stdout, (flags, r.stdout, r.stderr)
    r = run("--agent-port", "0", "--agent-address", "nowhere")
    assert "--agent-address nowhere --agent-port 0" in r.stderr, r.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = run("--agent-port", str(port), "--agent-address", "127.0.0.1")
    assert r.returncode != 0 and f"cannot listen for haproxy's agent check on 127.0.0.1:{port}" in r.stderr, r.stderr
