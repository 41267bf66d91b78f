"""Triton's rate limiter (`--rate-limit=execution_count`, `--rate-limit-resource`), checked with
tritonclient unmodified: configs with `instance_group.rate_limiter` load and serve over HTTP and
gRPC with the limiter on (the models' instances share one resource), the config comes back with
its rate_limiter through both protocols, and wrong input is refused by name: a malformed flag, a
model needing more of a resource than the flag gives, a negative count in config.pbtxt.
That the limiter keeps two models from running together is proven in process
(tests/server/instance_rate_limiter_test.cpp), where executions can be counted."""
import subprocess
import threading

import numpy as np
import pytest

from conftest import sampan_bin

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

CONFIG = """
max_batch_size: 8
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
dynamic_batching {{ }}
instance_group [ {{ kind: KIND_CPU count: 2
  rate_limiter {{ resources [ {{ name: "R" count: {count} }}, {{ name: "G" global: true count: 1 }} ] priority: {priority} }} }} ]
"""


@pytest.fixture
def limited_repo(tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "a", make_add_model(bias=1.0), config=CONFIG.format(count=1, priority=1))
    write_model(repo, "b", make_add_model(bias=2.0), config=CONFIG.format(count=2, priority=2))
    return repo


def _infer(mod, client, model, x):
    inp = mod.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp]).as_numpy("y")


def test_models_with_rate_limiters_serve_with_the_limiter_on(serve, limited_repo):
    srv = serve(limited_repo, "--rate-limit=execution_count", "--rate-limit-resource", "R:2")
    h = httpclient.InferenceServerClient(srv.http_url, concurrency=8)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(_infer(httpclient, h, "a", x), x + 1)
    np.testing.assert_array_equal(_infer(grpcclient, g, "b", x), x + 2)
    # Many requests to both models at once: every one answered, and right.
    errors = []

    def worker(model, bias):
        client = httpclient.InferenceServerClient(srv.http_url)
        for i in range(10):
            xi = np.full((1, 4), i, dtype=np.float32)
            try:
                y = _infer(httpclient, client, model, xi)
                if not np.array_equal(y, xi + bias):
                    errors.append((model, i, y))
            except Exception as e:  # noqa: BLE001 - collected and reported below
                errors.append((model, i, e))

    threads = [threading.Thread(target=worker, args=(m, b)) for m, b in (("a", 1), ("b", 2)) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    # The config comes back with its rate limiter, in Triton's schema, on both protocols.
    group = g.get_model_config("b").config.instance_group[0]
    assert [(r.name, r.count, r.__getattribute__("global")) for r in group.rate_limiter.resources] == \
        [("R", 2, False), ("G", 1, True)]
    assert group.rate_limiter.priority == 2
    limiter = h.get_model_config("a")["instance_group"][0]["rate_limiter"]
    assert limiter["resources"][0] == {"name": "R", "global": False, "count": 1}
    assert limiter["priority"] == 1
    stats = h.get_inference_statistics("a")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] >= 31


def test_the_limiter_off_still_serves_them(serve, limited_repo):
    srv = serve(limited_repo)  # --rate-limit=off: validated, no effect
    x = np.ones((1, 4), dtype=np.float32)
    np.testing.assert_array_equal(_infer(httpclient, httpclient.InferenceServerClient(srv.http_url), "b", x), x + 2)


def test_a_model_needing_more_than_the_flag_gives_does_not_load(serve, limited_repo):
    srv = serve(limited_repo, "--rate-limit=execution_count", "--rate-limit-resource", "R:1",
                "--strict-readiness", "false")
    h = httpclient.InferenceServerClient(srv.http_url)
    index = {m["name"]: m for m in h.get_model_repository_index()}
    assert index["a"]["state"] == "READY"
    assert index["b"]["state"] == "UNAVAILABLE"
    assert "instance_group[0].rate_limiter: resource 'R' on device 0 is limited to 1 by --rate-limit-resource" in index["b"]["reason"]


def _refused(repo, *args):
    r = subprocess.run([sampan_bin(), "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
                        "--http-port", "0", "--grpc-port", "-1", "--metrics-port", "-1", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout + r.stderr
    return r.stderr


@pytest.mark.parametrize("args, message", [
    (["--rate-limit=execution_count", "--rate-limit-resource", "R"],
     "--rate-limit-resource=R: has 1 part(s) (expected <name>:<count>[:<device>]"),
    (["--rate-limit=execution_count", "--rate-limit-resource", "R:-2"], "count '-2' is not a whole number >= 0"),
    (["--rate-limit=execution_count", "--rate-limit-resource", "R:1:gpu"], "device 'gpu' is not a device number"),
    (["--rate-limit=sometimes"], "--rate-limit=sometimes: expected off or execution_count"),
    (["--rate-limit-resource", "R:1"], "resources apply only with --rate-limit=execution_count"),
])
def test_malformed_flags_are_refused_by_name(limited_repo, args, message):
    assert message in _refused(limited_repo, *args)


def test_a_negative_count_is_refused_at_its_position(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "a", make_add_model(), config="max_batch_size: 8\n"
                "instance_group [ { kind: KIND_CPU rate_limiter { resources [ { name: \"R\" count: -1 } ] } } ]\n")
    write_model(repo, "ok", make_add_model())
    srv = serve(repo, "--rate-limit=execution_count", "--strict-readiness", "false")
    index = {m["name"]: m for m in httpclient.InferenceServerClient(srv.http_url).get_model_repository_index()}
    assert index["ok"]["state"] == "READY"
    assert "config.pbtxt:2:81: must be a whole number >= 0 (this field cannot be negative)" in index["a"]["reason"]
