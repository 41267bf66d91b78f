"""Loading a model with a config override (the repository extension's load parameter `config`,
tritonclient's `load_model(name, config=...)`), over HTTP and gRPC: the override replaces the
repository's config.pbtxt for that load (batching, outputs, metadata), a later load without it
goes back to the file, and a bad override is refused naming what is wrong while the loaded
version keeps serving."""

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

FILE_CONFIG = """
max_batch_size: 2
input [{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }]
"""


def override(max_batch):
    return json.dumps({
        "name": "add", "max_batch_size": max_batch,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [4]}],
        "dynamic_batching": {"max_queue_delay_microseconds": 100},
    })


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_load_with_a_config_override(serve, tmp_path, write_model, make_add_model, protocol):
    repo = tmp_path / "repo"
    write_model(repo, "add", make_add_model(dims=(4,), bias=1.0), config=FILE_CONFIG)
    srv = serve(repo, "--backend", "reference", "--model-control-mode", "explicit", "--load-model", "add")
    mod = httpclient if protocol == "http" else grpcclient
    c = mod.InferenceServerClient(srv.http_url if protocol == "http" else srv.grpc_url)

    def max_batch():
        cfg = c.get_model_config("add")
        cfg = cfg if protocol == "http" else json.loads(
            __import__("google.protobuf.json_format", fromlist=["x"]).MessageToJson(cfg, preserving_proto_field_name=True))
        cfg = cfg.get("config", cfg)
        return int(cfg.get("max_batch_size", 0)), "dynamic_batching" in cfg

    assert max_batch() == (2, False)
    c.load_model("add", config=override(8))
    assert max_batch() == (8, True)
    x = np.ones((8, 4), np.float32)
    inp = mod.InferInput("x", [8, 4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(c.infer("add", [inp]).as_numpy("y"), x + 1)  # 8 rows: the override's batch
    # Bad overrides: not JSON, an unknown field, a failing check; the version loaded keeps serving.
    for bad, why in [("{not json", "load request config: not a valid model configuration"),
                     (json.dumps({"name": "add", "max_batchsize": 4}), "max_batchsize"),
                     (json.dumps({"name": "add", "max_batch_size": -1}), "max_batch_size: must be >= 0")]:
        with pytest.raises(InferenceServerException) as e:
            c.load_model("add", config=bad)
        assert why in str(e.value), str(e.value)
    assert max_batch() == (8, True)
    np.testing.assert_array_equal(c.infer("add", [inp]).as_numpy("y"), x + 1)
    # Without an override the repository's config.pbtxt applies again.
    c.load_model("add")
    assert max_batch() == (2, False)
    with pytest.raises(InferenceServerException):
        c.infer("add", [inp])  # 8 rows > max_batch_size 2
