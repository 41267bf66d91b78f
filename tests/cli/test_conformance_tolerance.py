"""`sampan conformance` compares 16-bit float outputs within --ulps units in the last place.

Each case is an Identity model whose expected output is its input moved by k units in the last
place (bit patterns + k), so the tolerance decides the outcome.
Run: SAMPAN_BIN=build/sampan .venv/bin/python -m pytest tests/cli/test_conformance_tolerance.py
"""
import json
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

VALUES = [0.3, 0.47, 1.5, 100.0, -2.75]


def sampan_bin():
    path = os.environ.get("SAMPAN_BIN", "build/sampan")
    if not os.path.exists(path):
        pytest.skip(f"sampan binary not found at {path} (set SAMPAN_BIN)")
    return path


def bits(values, elem):
    """uint16 bit patterns of values as float16 or bfloat16 (round to nearest even)."""
    if elem == TensorProto.FLOAT16:
        return np.asarray(values, np.float16).view(np.uint16)
    u = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def tensor(name, b, elem):
    t = TensorProto(name=name, data_type=elem, dims=[len(b)])
    t.raw_data = b.astype("<u2").tobytes()
    return t


def make_case(suite, name, elem, k):
    d = suite / name
    (d / "test_data_set_0").mkdir(parents=True)
    x = helper.make_tensor_value_info("x", elem, [len(VALUES)])
    y = helper.make_tensor_value_info("y", elem, [len(VALUES)])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], name, [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "model.onnx")
    b = bits(VALUES, elem)
    (d / "test_data_set_0" / "input_0.pb").write_bytes(tensor("x", b, elem).SerializeToString())
    moved = (b.astype(np.int32) + k).astype(np.uint16)  # k units in the last place, same sign
    (d / "test_data_set_0" / "output_0.pb").write_bytes(tensor("y", moved, elem).SerializeToString())


def outcomes(suite, tmp_path, *extra):
    out = tmp_path / "r.json"
    subprocess.run([sampan_bin(), "conformance", "--suite", str(suite), "--json", str(out), *extra],
                   capture_output=True, text=True, timeout=120)
    return {c["name"]: c["outcome"] for c in json.loads(out.read_text())["cases"]}


@pytest.fixture
def suite(tmp_path):
    s = tmp_path / "suite"
    for elem, tag in ((TensorProto.FLOAT16, "f16"), (TensorProto.BFLOAT16, "bf16")):
        for k in (0, 1, 2, 3):
            make_case(s, f"test_{tag}_{k}ulp", elem, k)
    return s


def test_default_accepts_two_ulps_and_no_more(suite, tmp_path):
    r = outcomes(suite, tmp_path)
    for tag in ("f16", "bf16"):
        assert r[f"test_{tag}_0ulp"] == "pass"
        assert r[f"test_{tag}_1ulp"] == "pass"
        assert r[f"test_{tag}_2ulp"] == "pass"
        assert r[f"test_{tag}_3ulp"] == "fail", tag


def test_zero_ulps_is_rtol_only(suite, tmp_path):
    r = outcomes(suite, tmp_path, "--ulps", "0")
    assert r["test_f16_0ulp"] == "pass" and r["test_bf16_0ulp"] == "pass"
    # One bfloat16 step (2^-8 relative) is above rtol 1e-3.
    assert r["test_bf16_1ulp"] == "fail"
    assert r["test_f16_3ulp"] == "fail"
