"""The response cache (`--cache-config local,size=N`, `response_cache { enable: true }`)
through the real server with tritonclient: a repeated request is answered from the cache
(statistics and Triton's cache metrics say so, the model does not run again), different
bytes or outputs miss, models without the setting never use it, eviction keeps the cache
within its size, a model asking for a cache the server lacks fails to load, and a bad
--cache-config is refused."""

import re
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import sampan_bin

CONFIG = """
max_batch_size: 4
input [{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }]
response_cache { enable: true }
"""


def infer(c, x, model="cached"):
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return c.infer(model, [inp]).as_numpy("y")


def stats_of(c, model):
    return c.get_inference_statistics(model)["model_stats"][0]


def metric(text, name, model):
    m = re.search(r'^%s\{model="%s",version="1"\} (\S+)$' % (name, model), text, re.M)
    return float(m.group(1)) if m else None


def test_repeated_requests_are_answered_from_the_cache(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "cached", make_add_model(dims=(4,), bias=1.0), config=CONFIG)
    write_model(repo, "plain", make_add_model(dims=(4,), bias=1.0), config=CONFIG.replace("response_cache { enable: true }", ""))
    srv = serve(repo, "--backend", "reference", "--cache-config", "local,size=1048576")
    c = httpclient.InferenceServerClient(srv.http_url)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for _ in range(3):
        np.testing.assert_array_equal(infer(c, x), x + 1)
    s = stats_of(c, "cached")
    assert s["inference_stats"]["cache_miss"]["count"] == 1
    assert s["inference_stats"]["cache_hit"]["count"] == 2
    assert s["inference_stats"]["success"]["count"] == 3
    assert s["execution_count"] == 1 and s["inference_count"] == 2  # hits do not run the model
    # The same values over gRPC are the same key (the key is the tensors, not the protocol).
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    gi = grpcclient.InferInput("x", [2, 4], "FP32")
    gi.set_data_from_numpy(x)
    np.testing.assert_array_equal(g.infer("cached", [gi]).as_numpy("y"), x + 1)
    assert stats_of(c, "cached")["inference_stats"]["cache_hit"]["count"] == 3
    # One byte different, or a different shape: misses, with the right answer.
    y = x.copy()
    y[1, 3] += 0.5
    np.testing.assert_array_equal(infer(c, y), y + 1)
    np.testing.assert_array_equal(infer(c, x[:1]), x[:1] + 1)
    s = stats_of(c, "cached")
    assert s["inference_stats"]["cache_miss"]["count"] == 3 and s["execution_count"] == 3
    # A model without the setting never touches the cache.
    for _ in range(2):
        np.testing.assert_array_equal(infer(c, x, "plain"), x + 1)
    p = stats_of(c, "plain")
    assert p["inference_stats"]["cache_hit"]["count"] == 0 and p["execution_count"] == 2
    text = srv.metrics()
    assert metric(text, "nv_cache_num_hits_per_model", "cached") == 3
    assert metric(text, "nv_cache_num_misses_per_model", "cached") == 3
    assert metric(text, "nv_cache_hit_duration_per_model", "cached") > 0
    assert metric(text, "nv_cache_num_hits_per_model", "plain") is None
    assert metric(text, "nv_inference_count", "cached") == 2 + 2 + 1


def test_eviction_keeps_the_cache_within_its_size(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "cached", make_add_model(dims=(4,), bias=1.0), config=CONFIG)
    # Room for a few small entries only: the oldest goes first.
    srv = serve(repo, "--backend", "reference", "--cache-config", "local,size=1200")
    c = httpclient.InferenceServerClient(srv.http_url)
    xs = [np.full((1, 4), i, np.float32) for i in range(8)]
    for x in xs:
        infer(c, x)
    misses = stats_of(c, "cached")["inference_stats"]["cache_miss"]["count"]
    assert misses == 8
    infer(c, xs[-1])  # the newest is still there
    assert stats_of(c, "cached")["inference_stats"]["cache_hit"]["count"] == 1
    infer(c, xs[0])  # the oldest was evicted
    s = stats_of(c, "cached")
    assert s["inference_stats"]["cache_miss"]["count"] == 9 and s["inference_stats"]["cache_hit"]["count"] == 1


def test_a_model_that_wants_a_cache_the_server_lacks_fails_to_load(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    write_model(repo, "cached", make_add_model(dims=(4,), bias=1.0), config=CONFIG)
    write_model(repo, "plain", make_add_model(dims=(4,), bias=1.0), config=CONFIG.replace("response_cache { enable: true }", ""))
    srv = serve(repo, "--backend", "reference", "--strict-readiness", "false")
    c = httpclient.InferenceServerClient(srv.http_url)
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["cached"]["state"] == "UNAVAILABLE"
    assert "response_cache.enable: the server has no response cache" in index["cached"]["reason"]
    assert "--cache-config local,size=BYTES" in index["cached"]["reason"]
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(infer(c, x, "plain"), x + 1)
    with pytest.raises(InferenceServerException):
        infer(c, x)


@pytest.mark.parametrize("spec, why", [("redis,host=h", "the cache type 'redis' is not supported"),
                                       ("local", "expected local,size=BYTES"),
                                       ("local,size=0", "size must be a whole number of bytes > 0"),
                                       ("local,size=12k", "size must be a whole number of bytes > 0")])
def test_bad_cache_config_is_refused(tmp_path, spec, why):
    (tmp_path / "repo").mkdir()
    r = subprocess.run([sampan_bin(), "serve", "--model-repository", str(tmp_path / "repo"), "--http-port", "-1",
                        "--grpc-port", "-1", "--metrics-port", "-1", "--cache-config", spec],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert why in r.stderr, r.stderr
