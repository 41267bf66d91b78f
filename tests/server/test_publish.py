"""`sampan publish` end to end on the CPU backend, against a real `sampan serve` in poll mode under
load from tritonclient: the first version, the accuracy gate refusing a bad model (the serving
version untouched), a canary promoted with no failed request, a fault-injected canary rolled back
by the servers within its window (and kept out after a restart), and `--rollback`."""
import hashlib
import json
import pathlib
import re
import subprocess
import threading
import time

import numpy as np
import pytest

from conftest import sampan_bin

httpclient = pytest.importorskip("tritonclient.http")

CONFIG = """
name: "m"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { }
"""


def faulty_model():
    """Same inputs and outputs as the add model, but every run fails: y = table[100 + 0 * x], a
    Gather whose index is out of range at run time (nothing about it is wrong before it runs)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    inits = [numpy_helper.from_array(np.zeros((), np.float32), "zero"),
             numpy_helper.from_array(np.full((), 100, np.float32), "hundred"),
             numpy_helper.from_array(np.arange(10, dtype=np.float32), "table")]
    nodes = [helper.make_node("Mul", ["x", "zero"], ["z"]),
             helper.make_node("Add", ["z", "hundred"], ["h"]),
             helper.make_node("Cast", ["h"], ["idx"], to=TensorProto.INT64),
             helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)]
    model = helper.make_model(helper.make_graph(nodes, "faulty", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def publish(*args, check=True, timeout=120):
    r = subprocess.run([sampan_bin(), "publish", *[str(a) for a in args]], capture_output=True, text=True,
                       timeout=timeout)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


class Load:
    """Threads sending unversioned requests until stopped; counts answers by version and failures."""

    def __init__(self, url, threads=2):
        self.url = url
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.by_version = {}
        self.failures = []
        self.log = []  # (time, version or None)
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self):
        client = httpclient.InferenceServerClient(self.url, network_timeout=30)
        x = np.random.default_rng(0).uniform(-1, 1, (1, 4)).astype(np.float32)
        while not self.stop_event.is_set():
            inp = httpclient.InferInput("x", [1, 4], "FP32")
            inp.set_data_from_numpy(x)
            try:
                r = client.infer("m", [inp])
                v = r.get_response()["model_version"]
                with self.lock:
                    self.by_version[v] = self.by_version.get(v, 0) + 1
                    self.log.append((time.monotonic(), v))
            except Exception as e:  # noqa: BLE001 - counted and reported
                with self.lock:
                    self.failures.append(str(e))
                    self.log.append((time.monotonic(), None))
            time.sleep(0.002)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=30)

    def snapshot(self):
        with self.lock:
            return dict(self.by_version), list(self.failures), list(self.log)


def metric(srv, name, **labels):
    total = None
    for line in srv.metrics().splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total = (total or 0) + float(line.rsplit(" ", 1)[1])
    return total or 0


def wait_for(cond, timeout, what, srv=None):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.1)
    log = "" if srv is None else "\n".join(l for l in srv.output().splitlines() if "canary" in l)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{log}")


def visible(repo):
    """What a server sees in a directory (hidden entries are the publish tool's)."""
    return sorted(p.name for p in repo.iterdir() if not p.name.startswith("."))


def versions_on_disk(repo):
    return sorted(p.name for p in (repo / "m").iterdir())


@pytest.fixture
def release(tmp_path, make_add_model):
    """A repository with version 1 published by `sampan publish` (the first-version path), samples
    for the gate, and the models of the later steps."""
    repo = tmp_path / "repo"
    repo.mkdir()
    models = tmp_path / "models"
    models.mkdir()
    for name, bias in (("v1", 1.0), ("good", 1.0005), ("bad", -3.0)):
        (models / f"{name}.onnx").write_bytes(make_add_model(bias=bias))
    (models / "faulty.onnx").write_bytes(faulty_model())
    (tmp_path / "config.pbtxt").write_text(CONFIG)
    samples = tmp_path / "samples"
    samples.mkdir()
    rng = np.random.default_rng(1)
    for k in range(4):
        np.save(samples / f"x.{k}.npy", rng.uniform(-1, 1, (2, 4)).astype(np.float32))
    r = publish("--onnx", models / "v1.onnx", "--repository", repo, "--model", "m", "--config",
                tmp_path / "config.pbtxt", "--accuracyData", samples, "--accuracyBound", 0.01,
                "--accuracyMetric", "rel_l2", "--benchSecs", 0.2)
    assert "nothing to compare with" in r.stdout
    assert versions_on_disk(repo) == ["1", "config.pbtxt"]
    return repo, models, samples


def test_first_version_report_and_plan_cache(release):
    repo, models, _ = release
    vdir = repo / "m" / "1"
    report = json.loads((vdir / "report.json").read_text())
    assert report["version"] == 1 and report["previous_version"] is None and report["canary"] is None
    assert report["source"]["sha256"] == hashlib.sha256((models / "v1.onnx").read_bytes()).hexdigest()
    for rel, entry in report["files"].items():  # every hash is the file's own
        assert hashlib.sha256((vdir / rel).read_bytes()).hexdigest() == entry["sha256"], rel
    assert any(rel.startswith(".sampan/") and rel.endswith(".plan") for rel in report["files"]), report["files"]
    assert report["config_sha256"] == hashlib.sha256((repo / "m" / "config.pbtxt").read_bytes()).hexdigest()
    bench = report["bench"]
    assert bench["iterations"] >= 10 and bench["latency_ms"]["p99"] >= bench["latency_ms"]["p50"] > 0
    assert bench["inferences_per_second"] > 0 and bench["backend"] == "cpu" and bench["isa"]


def test_accuracy_gate_refuses_a_bad_model_and_leaves_serving_untouched(serve, release):
    repo, models, samples = release
    srv = serve(repo, "--model-control-mode", "poll", "--repository-poll-secs", 1)
    before = sorted((repo / "m").rglob("*"))
    r = publish("--onnx", models / "bad.onnx", "--repository", repo, "--model", "m", "--accuracyData", samples,
                "--accuracyBound", 0.01, "--accuracyMetric", "rel_l2", check=False)
    assert r.returncode != 0
    assert "accuracy gate: rel_l2 = " in r.stderr and "misses the bound 0.01" in r.stderr, r.stderr
    assert "version 2 is not published and version 1 is untouched" in r.stderr
    assert sorted((repo / "m").rglob("*")) == before  # no version 2, no staging left behind
    time.sleep(2.5)  # two polls
    client = httpclient.InferenceServerClient(srv.http_url)
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 4), np.float32))
    res = client.infer("m", [inp])
    assert res.get_response()["model_version"] == "1"
    np.testing.assert_allclose(res.as_numpy("y"), np.ones((1, 4)))


def test_canary_promoted_under_load_with_no_failed_request(serve, release):
    repo, models, samples = release
    srv = serve(repo, "--model-control-mode", "poll", "--repository-poll-secs", 1)
    with Load(srv.http_url) as load:
        time.sleep(0.5)
        r = publish("--onnx", models / "good.onnx", "--repository", repo, "--model", "m", "--accuracyData", samples,
                    "--accuracyBound", 0.01, "--accuracyMetric", "rel_l2", "--canary", 10, "--canaryWindowSecs", 3,
                    "--canaryMinRequests", 10, "--canaryMaxP99Ratio", 3, "--canaryP99SlackMs", 50,
                    "--benchSecs", 0.2)
        # (p99 allowed up to 3x and 50 ms over: both versions share two busy cores under ASan, where a
        # 193-request canary's p99 of 2.7 ms against 0.9 ms once rolled a good model back; the rule
        # itself is unit-tested in canary_test.cpp, and the slack is checked to reach the servers below)
        assert "as a canary: 10% of unversioned requests for 3 s against version 1" in r.stdout, r.stdout
        took = wait_for(lambda: metric(srv, "sampan_version_promotions_total", model="m") == 1, 40, "the promotion",
                        srv)
        promoted_at = time.monotonic()
        time.sleep(1.0)
        by_version, failures, log = load.snapshot()
    assert failures == [], failures[:3]
    assert by_version.get("2", 0) > 0 and by_version.get("1", 0) > 0, by_version
    # During the canary about 10% went to version 2; after the promotion every request does.
    during = [v for t, v in log if t < promoted_at - 0.05 and v is not None]
    first2 = next(i for i, v in enumerate(during) if v == "2")
    share = during[first2:].count("2") / max(1, len(during[first2:]))
    assert 0.03 < share < 0.25, (share, len(during))
    after = [v for t, v in log if t > promoted_at + 0.3]
    assert after and set(after) == {"2"}, set(after)
    report = json.loads((repo / "m" / "2" / "report.json").read_text())
    assert report["previous_version"] == 1 and report["accuracy"]["passed"] is True
    assert report["accuracy"]["value"] <= 0.01 and report["canary"]["percent"] == 10
    assert report["canary"]["p99_slack_ms"] == 50 and report["canary"]["max_p99_ratio"] == 3
    decision = json.loads((repo / "m" / "2" / ".sampan" / "canary-decision.json").read_text())
    assert decision["decision"] == "promoted"
    index = {(e["name"], e.get("version")): e for e in
             httpclient.InferenceServerClient(srv.http_url).get_model_repository_index()}
    assert index[("m", "2")]["state"] == "READY" and index[("m", "1")]["state"] == "UNAVAILABLE"
    assert re.search(r"canary: model 'm' version 2 promoted after", srv.output())
    assert metric(srv, "sampan_version_canary_requests_total", model="m", version="2", outcome="success") > 0
    assert metric(srv, "sampan_version_canary_percent", model="m", version="2") == 0
    print(f"promoted {took:.1f} s after publish returned; answers by version: {by_version}")


def test_faulty_canary_rolled_back_within_its_window_and_rollback_command(serve, release):
    repo, models, samples = release
    publish("--onnx", models / "good.onnx", "--repository", repo, "--model", "m", "--benchSecs", 0)  # version 2
    srv = serve(repo, "--model-control-mode", "poll", "--repository-poll-secs", 1)
    with Load(srv.http_url) as load:
        time.sleep(0.5)
        published = time.monotonic()
        # A release that skipped the gate and fails every request (fault injected): 30% canary, 60 s window.
        publish("--onnx", models / "faulty.onnx", "--repository", repo, "--model", "m", "--canary", 30,
                "--canaryWindowSecs", 60, "--benchSecs", 0)
        took = wait_for(lambda: metric(srv, "sampan_version_rollbacks_total", model="m") == 1, 30, "the rollback",
                        srv)
        rolled_at = time.monotonic()
        time.sleep(1.0)
        by_version, failures, log = load.snapshot()
    assert rolled_at - published < 60, "rolled back only after the window"
    assert failures, "the faulty canary never received a request"
    assert "3" not in by_version, by_version
    after = [v for t, v in log if t > rolled_at + 0.3]
    assert after and set(after) == {"2"}, set(after)  # no failure once rolled back
    index = {(e["name"], e.get("version")): e for e in
             httpclient.InferenceServerClient(srv.http_url).get_model_repository_index()}
    assert index[("m", "3")]["state"] == "UNAVAILABLE" and "canary rolled back" in index[("m", "3")]["reason"]
    assert index[("m", "2")]["state"] == "READY"
    assert "rolled back after" in srv.output()
    decision = json.loads((repo / "m" / "3" / ".sampan" / "canary-decision.json").read_text())
    assert decision["decision"] == "rolled_back" and "error rate" in decision["reason"]
    print(f"rolled back {took:.1f} s after publish; answers {by_version}, {len(failures)} failed (all on version 3)")

    # A restarted server keeps the rolled-back version out.
    srv.stop()
    srv = serve(repo, "--model-control-mode", "poll", "--repository-poll-secs", 1)
    client = httpclient.InferenceServerClient(srv.http_url)
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 4), np.float32))
    assert client.infer("m", [inp]).get_response()["model_version"] == "2"

    # The next publish is judged against version 2 (the one serving), not the rolled-back 3.
    r = publish("--onnx", models / "good.onnx", "--repository", repo, "--model", "m", "--canary", 50,
                "--canaryWindowSecs", 30, "--benchSecs", 0)
    assert "against version 2" in r.stdout
    assert json.loads((repo / "m" / "4" / "report.json").read_text())["canary"]["baseline_version"] == 2

    # --rollback: version 4 moves out (kept under .rolled-back); then to version 1 explicitly.
    r = publish("--rollback", "--repository", repo, "--model", "m")
    assert "version 4 moved to" in r.stdout and "version 3 is the newest" in r.stdout, r.stdout
    r = publish("--rollback", "--repository", repo, "--model", "m", "--rollbackTo", 1)
    assert "versions 3, 2 moved to" in r.stdout, r.stdout
    assert [p.name for p in (repo / "m").iterdir() if p.name.isdigit()] == ["1"]
    assert len(list((repo / "m" / ".rolled-back").iterdir())) == 3
    wait_for(lambda: client.infer("m", [inp]).get_response()["model_version"] == "1", 15, "version 1 to serve")
    np.testing.assert_allclose(client.infer("m", [inp]).as_numpy("y"), np.ones((1, 4)))


@pytest.mark.parametrize("args,message", [
    (["--model", "a/b"], "is not a model directory name"),
    (["--model", "m", "--canary", "100"], "--canary 100: a percentage in (0, 100)"),
    (["--model", "m", "--accuracyData", "d"], "--accuracyData and --accuracyBound go together"),
    (["--model", "m", "--accuracyData", "d", "--accuracyBound", "1", "--accuracyMetric", "l1"], "is not one of"),
    (["--model", "m", "--rollbackTo", "1"], "--rollbackTo goes with --rollback"),
    (["--model", "m", "--canaryWindowSecs", "inf"], "--canaryWindowSecs must be a finite number"),
    (["--model", "m", "--canaryP99SlackMs", "-1"], "--canaryP99SlackMs must be in [0, 1e9]"),
    (["--model", "m", "--accuracyData", "d", "--accuracyBound", "inf"], "--accuracyBound must be a finite number"),
])
def test_bad_flags_are_named(tmp_path, make_add_model, args, message):
    (tmp_path / "a.onnx").write_bytes(make_add_model())
    r = publish("--onnx", tmp_path / "a.onnx", "--repository", tmp_path, *args, check=False)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_errors_without_a_serving_version(tmp_path, make_add_model):
    (tmp_path / "a.onnx").write_bytes(make_add_model())
    repo = tmp_path / "repo"
    repo.mkdir()
    r = publish("--onnx", tmp_path / "a.onnx", "--repository", repo, "--model", "m", "--canary", 10, check=False)
    assert r.returncode != 0 and "--canary needs a version that serves now" in r.stderr
    assert visible(repo) == []  # no empty model directory left for servers to find
    r = publish("--rollback", "--repository", repo, "--model", "m", check=False)
    assert r.returncode != 0 and "is not in repository" in r.stderr
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    r = publish("--onnx", tmp_path / "junk.onnx", "--repository", repo, "--model", "m", check=False)
    assert r.returncode != 0 and "is not an ONNX model" in r.stderr
    assert visible(repo) == [] and not any(p.name.startswith(".publish-m-") for p in repo.iterdir())


def test_malformed_canary_report_is_named_and_the_old_version_keeps_serving(serve, release):
    repo, models, _ = release
    srv = serve(repo, "--model-control-mode", "poll", "--repository-poll-secs", 1)
    publish("--onnx", models / "good.onnx", "--repository", repo, "--model", "m", "--canary", 10, "--benchSecs", 0)
    report = repo / "m" / "2" / "report.json"
    data = json.loads(report.read_text())
    data["canary"]["percnt"] = data["canary"].pop("percent")
    report.write_text(json.dumps(data))
    client = httpclient.InferenceServerClient(srv.http_url)

    def reason():
        for e in client.get_model_repository_index():
            if e["name"] == "m" and "report.json" in e.get("reason", ""):
                return e["reason"]
        return None
    wait_for(lambda: reason() is not None, 15, "the report error in the index")
    assert "canary.percnt is not a canary field" in reason()
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 4), np.float32))
    assert client.infer("m", [inp]).get_response()["model_version"] == "1"


def test_rollback_to_a_negative_version_is_refused(tmp_path):
    r = publish("--rollback", "--repository", tmp_path, "--model", "m", "--rollbackTo", -1, check=False)
    assert r.returncode != 0 and "--rollbackTo -1 is not a version" in r.stderr


def test_no_release_on_top_of_a_canary_being_judged_and_numbers_are_not_reused(release):
    repo, models, _ = release
    publish("--onnx", models / "good.onnx", "--repository", repo, "--model", "m", "--canary", 10, "--benchSecs", 0)
    r = publish("--onnx", models / "good.onnx", "--repository", repo, "--model", "m", "--benchSecs", 0, check=False)
    assert r.returncode != 0 and "version 2 is a canary still being judged" in r.stderr, r.stderr
    # Moved out, the next release is version 3, not a second version 2 (whose old decision or
    # cached plans would otherwise be taken for its own).
    publish("--rollback", "--repository", repo, "--model", "m")
    r = publish("--onnx", models / "good.onnx", "--repository", repo, "--model", "m", "--benchSecs", 0)
    assert "published model 'm' version 3" in r.stdout, r.stdout
    assert visible(repo / "m") == ["1", "3", "config.pbtxt"]


def test_gate_fails_a_model_whose_outputs_are_nan(release):
    """NaN outputs are the worst figure there is, not a perfect one (min/max ignore NaN)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    repo, models, samples = release
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nan = numpy_helper.from_array(np.full((4,), np.nan, np.float32), "nan")
    g = helper.make_graph([helper.make_node("Add", ["x", "nan"], ["y"])], "nan", [x], [y], initializer=[nan])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    (models / "nan.onnx").write_bytes(m.SerializeToString())
    for metric, bound, shown in (("cosine", 0.9, "cosine = -1"), ("rel_l2", 0.5, "rel_l2 = inf")):
        r = publish("--onnx", models / "nan.onnx", "--repository", repo, "--model", "m", "--accuracyData", samples,
                    "--accuracyBound", bound, "--accuracyMetric", metric, "--benchSecs", 0, check=False)
        assert r.returncode != 0 and shown in r.stderr, r.stderr
    assert versions_on_disk(repo) == ["1", "config.pbtxt"]
