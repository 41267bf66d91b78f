"""SAMPAN_CPU_ISA and `sampan info` end to end: the levels this CPU has, a cap that changes what
runs (and what `sampan bench` reports), and wrong values refused by name.

    SAMPAN_BIN=build-asan/sampan .venv/bin/python -m pytest tests/cli/test_cpu_isa.py
"""
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[2]
SAMPAN = Path(os.environ.get("SAMPAN_BIN", REPO / "build" / "sampan"))
if not SAMPAN.is_absolute():
    SAMPAN = REPO / SAMPAN
LEVELS = ["baseline", "avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx"]


def sampan(*args, isa=None, timeout=300):
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
    env.pop("SAMPAN_CPU_ISA", None)
    if isa is not None:
        env["SAMPAN_CPU_ISA"] = isa
    return subprocess.run([str(SAMPAN), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def host_levels():
    proc = sampan("info")
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"instruction set levels: (.*)", proc.stdout)
    assert m, proc.stdout
    levels = [x.strip() for x in m.group(1).split(",")]
    assert levels == LEVELS[: len(levels)], levels
    return levels


@pytest.fixture
def conv_model(tmp_path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Sigmoid", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    return path


def test_info_lists_the_levels_and_what_runs():
    levels = host_levels()
    proc = sampan("info")
    assert f"runs: kernels {min(levels[-1], 'avx512', key=LEVELS.index)}" in proc.stdout, proc.stdout


def test_every_level_runs_and_gives_the_same_result(tmp_path, conv_model):
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for level in host_levels():
        out = tmp_path / level
        proc = sampan("run", conv_model, "--backend", "cpu", "--input", f"x={tmp_path / 'x.npy'}",
                      "--output-dir", out, isa=level)
        assert proc.returncode == 0, f"{level}: {proc.stderr}"
        outs[level] = np.load(out / "y.npy")
    first = next(iter(outs.values()))
    for level, y in outs.items():
        np.testing.assert_allclose(y, first, rtol=1e-5, atol=1e-5, err_msg=level)


def test_bench_reports_the_capped_variant(tmp_path, conv_model):
    plan = tmp_path / "conv.plan"
    proc = sampan("build", conv_model, "--backend", "cpu", "-o", plan)
    assert proc.returncode == 0, proc.stderr
    for level, kernels, onednn in (("baseline", "baseline", "sse41"), ("avx2", "avx2", "avx2")):
        if level not in host_levels():
            continue
        proc = sampan("bench", plan, "--iterations", "3", "--duration", "0", "--warmUp", "0", isa=level)
        assert proc.returncode == 0, proc.stderr
        line = next(l for l in proc.stdout.splitlines() if l.startswith("Runs on:"))
        assert f"kernels {kernels}, instruction set {level}" in line, line
        assert f"oneDNN {onednn}" in line, line


@pytest.mark.parametrize("value,needle", [("avx1024", "is not an instruction set level"),
                                          ("AVX2", "is not an instruction set level")])
def test_wrong_values_are_refused_by_name(conv_model, value, needle):
    proc = sampan("run", conv_model, "--backend", "cpu", "--random-inputs", isa=value)
    assert proc.returncode > 0
    assert "SAMPAN_CPU_ISA" in proc.stderr and needle in proc.stderr, proc.stderr
    assert "AddressSanitizer" not in proc.stderr


def test_a_level_above_the_cpu_is_refused(conv_model):
    levels = host_levels()
    if levels[-1] == "amx":
        pytest.skip("this CPU has every level (amx): none is above it")
    proc = sampan("run", conv_model, "--backend", "cpu", "--random-inputs", isa="amx")
    assert proc.returncode > 0
    assert "SAMPAN_CPU_ISA=amx is above what this CPU supports" in proc.stderr, proc.stderr
