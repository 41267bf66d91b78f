"""End-to-end tests of `sampan build`, `sampan run` on plans and `sampan bench`.

Run: SAMPAN_BIN=build/sampan .venv/bin/python -m pytest tests/cli/test_build_bench.py
"""
import json
import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sampan_bin():
    path = os.environ.get("SAMPAN_BIN", "build/sampan")
    if not os.path.isabs(path):
        path = os.path.join(REPO, path)
    if not os.path.exists(path):
        pytest.skip(f"sampan binary not found at {path} (set SAMPAN_BIN)")
    return path


def sampan(*args, check=True, timeout=120):
    r = subprocess.run([sampan_bin(), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"sampan {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def make_conv_net(batch="N"):
    """conv-bn-relu -> conv -> residual add -> relu -> pool -> fc."""
    rng = np.random.default_rng(0)

    def init(name, shape, lo=-1.0, hi=1.0):
        return numpy_helper.from_array(rng.uniform(lo, hi, size=shape).astype(np.float32), name)

    inits = [
        init("w1", (8, 3, 3, 3)), init("b1", (8,)),
        init("bn_scale", (8,), 0.5, 1.5), init("bn_bias", (8,)), init("bn_mean", (8,), -0.2, 0.2),
        init("bn_var", (8,), 0.5, 2.0),
        init("w2", (8, 8, 3, 3), -0.3, 0.3), init("b2", (8,)),
        init("wf", (8, 10)), init("bf", (10,)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["n1"],
                         name="bn1", epsilon=1e-5),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "wf"], ["m"], name="fc"),
        helper.make_node("Add", ["m", "bf"], ["logits"], name="fc_bias"),
    ]
    graph = helper.make_graph(
        nodes, "small_convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 12, 12])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("build_bench")
    onnx_path = d / "convnet.onnx"
    onnx.save(make_conv_net(), onnx_path)
    static_path = d / "convnet_static.onnx"
    onnx.save(make_conv_net(batch=2), static_path)
    plan_path = d / "convnet.plan"
    build = sampan("build", "--onnx", static_path, "--saveEngine", plan_path, "--verbose")
    x = np.random.default_rng(1).uniform(-2, 2, size=(2, 3, 12, 12)).astype(np.float32)
    np.save(d / "x.npy", x)
    return {"dir": d, "onnx": onnx_path, "static": static_path, "plan": plan_path, "build": build, "x": x}


def test_build_summary_lines(work):
    out = work["build"].stdout
    assert work["plan"].exists()
    for line in ("=== Build summary ===", "model:", "backend:    reference", "nodes:", "rewrites:", "precision:",
                 "plan:", "build time:"):
        assert line in out, f"missing {line!r} in:\n{out}"
    # 10 nodes in, the fusions leave 5 (conv1, conv2, pool, flatten, gemm).
    assert "nodes:      10 -> 5" in out, out
    assert "fp32=5" in out, out


def test_build_verbose_lists_fusions(work):
    out = work["build"].stdout
    assert "--- passes ---" in out and "--- rewrites ---" in out and "--- layers ---" in out, out
    assert "[fold_batchnorm] folded BatchNormalization 'bn1' into Conv 'conv1'" in out, out
    assert "[fuse_conv_residual]" in out and "[fuse_activation]" in out and "[fuse_matmul_add]" in out, out
    assert "sampan::FusedConv" in out, out


def test_build_not_verbose_is_short(work, tmp_path):
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "p.plan")
    assert "=== Build summary ===" in r.stdout
    assert "--- rewrites ---" not in r.stdout
    assert "fold_batchnorm=1" in r.stdout, r.stdout


def test_run_plan_equals_run_onnx(work, tmp_path):
    x_arg = f"x={work['dir'] / 'x.npy'}"
    sampan("run", work["plan"], "--input", x_arg, "--output-dir", tmp_path / "plan")
    sampan("run", work["static"], "--input", x_arg, "--output-dir", tmp_path / "onnx")
    y_plan = np.load(tmp_path / "plan" / "logits.npy")
    y_onnx = np.load(tmp_path / "onnx" / "logits.npy")
    assert y_plan.shape == (2, 10) and y_plan.dtype == np.float32
    np.testing.assert_allclose(y_plan, y_onnx, rtol=1e-5, atol=1e-5)
    (y_ort,) = ort.InferenceSession(str(work["static"]), providers=["CPUExecutionProvider"]).run(
        None, {"x": work["x"]})
    np.testing.assert_allclose(y_plan, y_ort, rtol=1e-4, atol=1e-4)


def test_dynamic_model_with_profile(work, tmp_path):
    plan = tmp_path / "dyn.plan"
    r = sampan("build", "--onnx", work["onnx"], "--saveEngine", plan, "--minShapes", "x:1x3x12x12",
               "--optShapes", "x:2x3x12x12", "--maxShapes", "x:4x3x12x12")
    assert "profiles:   1" in r.stdout, r.stdout
    x_arg = f"x={work['dir'] / 'x.npy'}"
    sampan("run", plan, "--input", x_arg, "--output-dir", tmp_path / "out")
    (y_ort,) = ort.InferenceSession(str(work["onnx"]), providers=["CPUExecutionProvider"]).run(
        None, {"x": work["x"]})
    np.testing.assert_allclose(np.load(tmp_path / "out" / "logits.npy"), y_ort, rtol=1e-4, atol=1e-4)
    # Outside the profile: a clear error.
    big = np.zeros((8, 3, 12, 12), np.float32)
    np.save(tmp_path / "big.npy", big)
    r = sampan("run", plan, "--input", f"x={tmp_path / 'big.npy'}", check=False)
    assert r.returncode != 0
    assert "profile" in r.stderr and "'x'" in r.stderr, r.stderr
    # A dynamic model without a profile for its dynamic input is rejected at build time.
    r = sampan("build", "--onnx", work["onnx"], "--saveEngine", tmp_path / "no.plan",
               "--minShapes", "y:1x3", check=False)
    assert r.returncode != 0 and "'y'" in r.stderr, r.stderr


def test_fp16_build_close_to_fp32(work, tmp_path):
    plan = tmp_path / "fp16.plan"
    r = sampan("build", "--onnx", work["static"], "--saveEngine", plan, "--fp16",
               "--layer-precision", "fc:fp32", "--verbose")
    assert "fp16=" in r.stdout and "fp32=1" in r.stdout, r.stdout
    x_arg = f"x={work['dir'] / 'x.npy'}"
    sampan("run", plan, "--input", x_arg, "--output-dir", tmp_path / "out")
    y = np.load(tmp_path / "out" / "logits.npy")
    assert y.dtype == np.float32
    (ref,) = ort.InferenceSession(str(work["static"]), providers=["CPUExecutionProvider"]).run(
        None, {"x": work["x"]})
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-2


def test_disable_pass_and_unknown_pass(work, tmp_path):
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "p.plan", "--disable-pass",
               "fold_batchnorm", "--verbose")
    assert "folded BatchNormalization" not in r.stdout
    assert "disabled" in r.stdout
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "q.plan", "--disable-pass",
               "fold_batchnrom", check=False)
    assert r.returncode != 0
    assert "fold_batchnrom" in r.stderr and "fold_batchnorm" in r.stderr and "fuse_activation" in r.stderr, r.stderr
    assert not (tmp_path / "q.plan").exists()


def test_dump_ir(work, tmp_path):
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "p.plan", "--dump-ir",
               "fold_batchnorm")
    assert "=== IR after fold_batchnorm ===" in r.stdout
    assert "BatchNormalization" not in r.stdout.split("=== IR after fold_batchnorm ===")[1].split("=== Build")[0]
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "p.plan", "--dump-ir", "nope",
               check=False)
    assert r.returncode != 0 and "nope" in r.stderr


def test_bench_summary_and_json(work, tmp_path):
    j = tmp_path / "bench.json"
    times = tmp_path / "times.json"
    r = sampan("bench", "--loadEngine", work["plan"], "--iterations", "5", "--duration", "0", "--warmUp", "0",
               "--json", j, "--exportTimes", times)
    out = r.stdout
    assert "=== Performance summary ===" in out, out
    assert "Throughput:" in out and "qps" in out, out
    assert "Latency: min = " in out and "percentile(99%)" in out, out
    assert "Compute Time:" in out and "Inferences:" in out, out
    data = json.loads(j.read_text())
    assert data["inferences"] >= 5
    assert data["throughput_qps"] > 0
    assert data["batch"] == 2
    for key in ("min", "max", "mean", "median", "p90", "p95", "p99"):
        assert data["latency_ms"][key] >= 0
    assert data["latency_ms"]["min"] <= data["latency_ms"]["median"] <= data["latency_ms"]["max"]
    t = json.loads(times.read_text())
    assert len(t) == data["inferences"]
    assert all("latencyMs" in s for s in t)


def test_bench_streams(work, tmp_path):
    j = tmp_path / "bench.json"
    r = sampan("bench", "--loadEngine", work["plan"], "--iterations", "6", "--duration", "0", "--warmUp", "0",
               "--streams", "3", "--json", j)
    assert "3 streams" in r.stdout, r.stdout
    assert json.loads(j.read_text())["streams"] == 3


def test_bench_dynamic_plan_uses_opt_shape_and_shapes_flag(work, tmp_path):
    plan = tmp_path / "dyn.plan"
    sampan("build", "--onnx", work["onnx"], "--saveEngine", plan, "--minShapes", "x:1x3x12x12",
           "--optShapes", "x:2x3x12x12", "--maxShapes", "x:4x3x12x12")
    j = tmp_path / "b.json"
    sampan("bench", "--loadEngine", plan, "--iterations", "2", "--duration", "0", "--warmUp", "0", "--json", j)
    assert json.loads(j.read_text())["batch"] == 2
    sampan("bench", "--loadEngine", plan, "--iterations", "2", "--duration", "0", "--warmUp", "0", "--json", j,
           "--shapes", "x:4x3x12x12")
    assert json.loads(j.read_text())["batch"] == 4
    r = sampan("bench", "--loadEngine", plan, "--iterations", "2", "--duration", "0", "--warmUp", "0",
               "--shapes", "x:9x3x12x12", check=False)
    assert r.returncode != 0 and "'x'" in r.stderr, r.stderr


def corrupt_copies(plan_path, tmp_path):
    data = plan_path.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    (tmp_path / "flipped.plan").write_bytes(bytes(flipped))
    (tmp_path / "truncated.plan").write_bytes(data[: len(data) - 100])
    (tmp_path / "magic.plan").write_bytes(b"NOTAPLAN" + data[8:])
    return {"flipped": tmp_path / "flipped.plan", "truncated": tmp_path / "truncated.plan",
            "magic": tmp_path / "magic.plan"}


@pytest.mark.parametrize("kind,needle", [("flipped", "checksum"), ("truncated", "truncated"),
                                         ("magic", "not a Sampan plan")])
def test_bench_rejects_bad_plans(work, tmp_path, kind, needle):
    path = corrupt_copies(work["plan"], tmp_path)[kind]
    r = sampan("bench", "--loadEngine", path, "--iterations", "1", "--duration", "0", check=False)
    assert r.returncode != 0
    assert "error:" in r.stderr and needle in r.stderr, r.stderr
    assert str(path) in r.stderr, r.stderr
    assert "Performance summary" not in r.stdout


@pytest.mark.parametrize("kind,needle", [("flipped", "checksum"), ("truncated", "truncated")])
def test_run_rejects_bad_plans(work, tmp_path, kind, needle):
    path = corrupt_copies(work["plan"], tmp_path)[kind]
    r = sampan("run", path, "--random-inputs", check=False)
    assert r.returncode != 0
    assert "error:" in r.stderr and needle in r.stderr, r.stderr


def test_run_rejects_plan_with_wrong_magic(work, tmp_path):
    path = corrupt_copies(work["plan"], tmp_path)["magic"]
    r = sampan("run", path, "--random-inputs", check=False)
    assert r.returncode != 0
    assert "error:" in r.stderr, r.stderr


def test_bench_missing_plan(tmp_path):
    r = sampan("bench", "--loadEngine", tmp_path / "nope.plan", check=False)
    assert r.returncode != 0 and "nope.plan" in r.stderr


def test_bench_json_escapes_plan_path(work, tmp_path):
    odd = tmp_path / 'we"ird\\name.plan'
    odd.write_bytes(work["plan"].read_bytes())
    j = tmp_path / "b.json"
    sampan("bench", "--loadEngine", odd, "--iterations", "1", "--duration", "0", "--warmUp", "0", "--json", j)
    assert json.loads(j.read_text())["plan"] == str(odd)


def test_run_plan_on_another_backend_is_an_error(work):
    r = sampan("run", work["plan"], "--random-inputs", "--backend", "cpu", check=False)
    assert r.returncode != 0
    assert "was built for backend 'reference'" in r.stderr + r.stdout, r.stderr
    ok = sampan("run", work["plan"], "--random-inputs")
    assert "(backend reference)" in ok.stdout, ok.stdout


def has_cuda_backend():
    r = sampan("build", "--help")
    return "cuda" in r.stdout and sampan("build", "--onnx", "x", "--backend", "cuda", "--dry-run", check=False).stderr.find(
        "not in this build") < 0


def test_dry_run_answers_node_by_node_without_a_gpu(work):
    if not has_cuda_backend():
        pytest.skip("the CUDA backend is not in this build")
    r = sampan("build", "--onnx", work["static"], "--backend", "cuda", "--dry-run", "--fp16", "--strict")
    assert "host nodes: 0" in r.stdout, r.stdout
    assert "none written (--dry-run)" in r.stdout, r.stdout


def test_strict_refuses_a_host_node_and_names_it(tmp_path):
    if not has_cuda_backend():
        pytest.skip("the CUDA backend is not in this build")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("LogSoftmax", ["r"], ["l"], name="logsoftmax", axis=1),
        helper.make_node("NegativeLogLikelihoodLoss", ["l", "t"], ["loss"], name="nll"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
                                           helper.make_tensor_value_info("t", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])])
    model = tmp_path / "nll.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    r = sampan("build", "--onnx", model, "--backend", "cuda", "--dry-run", check=False)
    assert r.returncode == 0, r.stderr
    assert "host nodes: 1" in r.stdout and "NegativeLogLikelihoodLoss 'nll'" in r.stdout, r.stdout
    r = sampan("build", "--onnx", model, "--backend", "cuda", "--dry-run", "--strict", check=False)
    assert r.returncode != 0
    assert "--strict" in r.stderr and "'nll'" in r.stderr and "no CUDA kernel for NegativeLogLikelihoodLoss" in r.stderr, r.stderr


def test_strict_needs_a_backend_with_a_capability_query(work, tmp_path):
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "p.plan", "--strict", check=False)
    assert r.returncode != 0 and "no capability query" in r.stderr, r.stderr


def test_layer_precisions_takes_trtexecs_comma_list(work, tmp_path):
    """--layerPrecisions=a:P,b:P as trtexec: one flag, two overrides (the later one wins)."""
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "lp.plan", "--fp16",
               "--layerPrecisions", "fc:fp32,conv*:fp32", "--verbose")
    layer = {ln.split()[0]: ln.split()[-1] for ln in r.stdout.splitlines() if ln.startswith("  ") and len(ln.split()) == 3}
    assert layer.get("conv1") == layer.get("conv2") == layer.get("fc") == "fp32", r.stdout
    assert layer.get("pool") == "fp16", r.stdout
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "lp2.plan", "--fp16",
               "--layerPrecisions", "fc:fp32,conv1", check=False)
    assert r.returncode != 0 and "'conv1'" in r.stderr, r.stderr


def test_workspace_takes_trtexecs_pool_form_and_notes_what_has_no_effect(work, tmp_path):
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "w.plan", "--backend", "cpu",
               "--memPoolSize", "workspace:64", "--timingCacheFile", tmp_path / "cache",
               "--builderOptimizationLevel", "1")
    for flag in ("--workspace", "--timingCacheFile", "--builderOptimizationLevel"):
        assert f"{flag} " in r.stderr and "note: backend 'cpu'" in r.stderr, r.stderr
    assert not (tmp_path / "cache").exists()
    for bad in ("dlaSRAM:1", "-1", "64MiB", "workspace:"):
        r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "x.plan", "--workspace", bad,
                   check=False)
        assert r.returncode != 0, bad
    # --threads was accepted and never read by a build: it is gone (threads are a run-time choice).
    r = sampan("build", "--onnx", work["static"], "--saveEngine", tmp_path / "t.plan", "--threads", "2", check=False)
    assert r.returncode != 0 and "--threads" in r.stderr, r.stderr


def test_run_refuses_flags_it_would_ignore(work, tmp_path):
    r = sampan("run", work["static"], "--verbose", "--random-inputs", check=False)
    assert r.returncode != 0 and "--verbose" in r.stderr, r.stderr
    r = sampan("run", work["static"], "--backend", "cpu", "--verbose", "--random-inputs")
    assert "pass constant_folding" in r.stdout and "optimized:" in r.stdout, r.stdout
