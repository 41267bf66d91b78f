"""Statistics' memory_usage (Triton's statistics extension), read with tritonclient unmodified over
HTTP and gRPC: a loaded version reports the memory its engines hold that the server can see, the
plan's weights in host memory (CPU, id 0), and on a GPU machine the copy each cuda engine makes on
its device (GPU, id = device). Each context's arenas are not in it (docs/cli.md, Statistics, says why)."""
import numpy as np
import pytest

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")


def test_memory_usage_reports_the_plan_weights(serve, tmp_path, write_model, make_add_model):
    repo = tmp_path / "repo"
    # y = x + bias with a bias of 256 floats: 1024 bytes of weights.
    write_model(repo, "add", make_add_model(dims=(256,)),
                config="max_batch_size: 4\ninstance_group [{ kind: KIND_CPU count: 2 }]\n")
    srv = serve(repo)
    h = httpclient.InferenceServerClient(srv.http_url)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    http_stats = h.get_inference_statistics("add")["model_stats"][0]
    # Two instances share one engine and its weights (1 KiB, counted once); their arenas add to it.
    [mem] = http_stats["memory_usage"]
    assert (mem["type"], mem["id"]) == ("CPU", 0) and mem["byte_size"] >= 1024, mem
    grpc_stats = g.get_inference_statistics("add").model_stats[0]
    assert [(m.type, m.id) for m in grpc_stats.memory_usage] == [("CPU", 0)]
    assert grpc_stats.memory_usage[0].byte_size >= 1024
    # An inference may plan an instance's arena for its shape: the figure never shrinks.
    inp = httpclient.InferInput("x", [1, 256], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 256), dtype=np.float32))
    h.infer("add", [inp])
    [after] = h.get_inference_statistics("add")["model_stats"][0]["memory_usage"]
    assert (after["type"], after["id"]) == ("CPU", 0) and after["byte_size"] >= mem["byte_size"], (mem, after)


def test_memory_usage_counts_each_cuda_engines_copy(serve, tmp_path, write_model, make_add_model):
    from test_serve_devices import visible_gpus
    gpus = visible_gpus()
    if not gpus:
        pytest.skip("no NVIDIA GPU on this machine")
    repo = tmp_path / "repo"
    write_model(repo, "add", make_add_model(dims=(256,)),
                config="max_batch_size: 4\ninstance_group [{ kind: KIND_GPU count: 2 }]\n")
    srv = serve(repo, timeout=600)
    usage = httpclient.InferenceServerClient(srv.http_url).get_inference_statistics("add")["model_stats"][0][
        "memory_usage"]
    by_kind = {(m["type"], m["id"]): m["byte_size"] for m in usage}
    host = by_kind.pop(("CPU", 0))
    # One engine per GPU, each holding a device copy of the plan's weights (one plan per GPU type).
    assert sorted(by_kind) == [("GPU", d) for d in range(len(gpus))], usage
    assert all(n > 0 for n in by_kind.values()), usage
    if len(set(gpus)) == 1:
        assert set(by_kind.values()) == {host}, usage
