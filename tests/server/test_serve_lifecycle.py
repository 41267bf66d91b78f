"""Model lifecycle through the real server: reload under load in poll mode
(no failed request; traffic moves to the new version), a garbage
config.pbtxt beside good models, explicit load/unload, and graceful
shutdown on SIGTERM (readiness false, in-flight requests finish, exit 0)."""

import os
import signal
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient


def infer(client, model, value=0.0, version=""):
    x = np.full((1, 4), value, np.float32)
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    return client.infer(model, [inp], model_version=version)


def drop_in_version(repo, model, version, model_bytes):
    """Adds <repo>/<model>/<version>/model.onnx atomically (written aside, then renamed in)."""
    tmp = repo / model / f".incoming-{version}"
    tmp.mkdir()
    (tmp / "model.onnx").write_bytes(model_bytes)
    os.rename(tmp, repo / model / str(version))


def test_reload_under_load_in_poll_mode_drops_no_request(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "live", make_add_model(bias=1.0),
                config="max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 1000 }\n")
    srv = serve(repo, "--backend", "reference", "--model-control-mode", "poll", "--repository-poll-secs", "1")

    stop = threading.Event()
    failures, seen = [], {"1": 0, "2": 0}
    lock = threading.Lock()

    def client():
        c = httpclient.InferenceServerClient(srv.http_url)
        while not stop.is_set():
            try:
                r = infer(c, "live", 10.0)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                failures.append(str(e))
                continue
            v = r.get_response()["model_version"]
            y = r.as_numpy("y")
            expected = 11.0 if v == "1" else 12.0
            with lock:
                seen[v] = seen.get(v, 0) + 1
            if not np.all(y == expected):
                failures.append(f"version {v} answered {y.tolist()}")

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    drop_in_version(repo, "live", 2, make_add_model(bias=2.0))
    deadline = time.time() + 30
    while time.time() < deadline:
        with lock:
            if seen["2"] >= 50:
                break
        time.sleep(0.1)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    assert not failures, failures[:5]
    assert seen["1"] > 0 and seen["2"] >= 50, seen
    # Version 1 is retired (latest 1 policy); version 2 serves alone.
    c = httpclient.InferenceServerClient(srv.http_url)
    assert c.get_model_metadata("live")["versions"] == ["2"]
    assert c.is_model_ready("live", "2") and not c.is_model_ready("live", "1")
    assert c.is_server_ready()


def test_garbage_config_does_not_stop_the_other_models(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "good", make_add_model())
    write_model(repo, "garbage", make_add_model(), config="max_batch_size: 4\n\x00\x01 {{{ not a config }}}\n")
    srv = serve(repo, "--backend", "reference")
    c = httpclient.InferenceServerClient(srv.http_url)
    assert c.is_server_live()
    assert not c.is_server_ready()  # strict readiness: a model failed to load
    assert c.is_model_ready("good") and not c.is_model_ready("garbage")
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["good"]["state"] == "READY"
    assert index["garbage"]["state"] == "UNAVAILABLE"
    assert "config.pbtxt:2" in index["garbage"]["reason"], index["garbage"]
    assert np.all(infer(c, "good", 1.0).as_numpy("y") == 2.0)
    with pytest.raises(Exception, match="garbage"):
        infer(c, "garbage")
    assert "garbage" in srv.output() and "UNAVAILABLE" in srv.output()


def test_explicit_mode_loads_and_unloads_on_request(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "a", make_add_model(bias=1.0))
    write_model(repo, "b", make_add_model(bias=3.0))
    srv = serve(repo, "--backend", "reference", "--model-control-mode", "explicit", "--load-model", "a")
    c = httpclient.InferenceServerClient(srv.http_url)
    assert c.is_model_ready("a") and not c.is_model_ready("b")
    c.load_model("b")
    assert np.all(infer(c, "b").as_numpy("y") == 3.0)
    c.unload_model("a")
    assert not c.is_model_ready("a")
    with pytest.raises(Exception):
        infer(c, "a")
    assert np.all(infer(c, "b").as_numpy("y") == 3.0)


def test_sigterm_finishes_in_flight_requests_then_exits_0(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    # A 1.5 s queue delay keeps a lone request in flight while the server is told to stop.
    write_model(repo, "slow", make_add_model(),
                config="max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 1500000 }\n")
    srv = serve(repo, "--backend", "reference", "--exit-timeout-secs", "20")
    x = np.full((1, 4), 5.0, np.float32)
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    result = {}

    def in_flight():
        try:
            result["y"] = httpclient.InferenceServerClient(srv.http_url).infer("slow", [inp]).as_numpy("y")
        except Exception as e:  # noqa: BLE001 - checked below
            result["error"] = e

    t = threading.Thread(target=in_flight)
    t.start()
    deadline = time.time() + 10
    while 'nv_inference_pending_request_count{model="slow",version="1"} 1' not in srv.metrics():
        assert time.time() < deadline, "the request never reached the queue"
        time.sleep(0.02)
    srv.process.send_signal(signal.SIGTERM)
    # While draining: not ready, new requests refused, the server still answers.
    time.sleep(0.3)
    status, _ = srv.get("/v2/health/ready")
    assert status != 200
    with pytest.raises(Exception, match="shutting down"):
        httpclient.InferenceServerClient(srv.http_url).infer("slow", [inp])
    t.join(30)
    assert "error" not in result, result
    assert np.all(result["y"] == 6.0)
    assert srv.process.wait(30) == 0
    out = srv.output()
    assert "received SIGTERM" in out and "stopped" in out, out


def test_bad_flags_fail_with_a_message(tmp_path):
    import subprocess
    from conftest import sampan_bin
    r = subprocess.run([sampan_bin(), "serve", "--model-repository", str(tmp_path / "missing"),
                        "--http-port", "-1", "--grpc-port", "-1", "--metrics-port", "-1"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "missing" in r.stderr and "not a directory" in r.stderr, r.stderr
    r = subprocess.run([sampan_bin(), "serve", "--model-repository", str(tmp_path), "--model-control-mode", "sometimes"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "sometimes" in (r.stderr + r.stdout)


def test_sigterm_past_the_exit_timeout_exits_1_without_waiting(serve, tmp_path, write_model, make_add_model):
    """A request still queued when --exit-timeout-secs runs out: the server exits 1 at
    the timeout (it used to stop its front ends first, which wait for that request)."""
    repo = tmp_path / "repo"
    # A 30 s queue delay: the lone request is still waiting long after the 1 s exit timeout.
    write_model(repo, "stuck", make_add_model(),
                config="max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 30000000 }\n")
    srv = serve(repo, "--backend", "reference", "--exit-timeout-secs", "1")
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), np.float32))

    def in_flight():
        try:
            httpclient.InferenceServerClient(srv.http_url, network_timeout=60).infer("stuck", [inp])
        except Exception:  # noqa: BLE001 - the server goes away under it
            pass

    t = threading.Thread(target=in_flight, daemon=True)
    t.start()
    deadline = time.time() + 10
    while 'nv_inference_pending_request_count{model="stuck",version="1"} 1' not in srv.metrics():
        assert time.time() < deadline, "the request never reached the queue"
        time.sleep(0.02)
    start = time.time()
    srv.process.send_signal(signal.SIGTERM)
    assert srv.process.wait(20) == 1
    assert time.time() - start < 10, "exited only after the queued request, not at the exit timeout"
    assert "still running after --exit-timeout-secs 1" in srv.output()
