"""Shared fixtures of the Python package tests (tests/python): they import the *installed*
`sampan` package (CI installs the wheel it built into .venv; run from the repository root, the
source folder python/ is not on sys.path), and use the real models of tests/models/export_all.sh
in $SAMPAN_MODELS (default build/models) and the CLI binary $SAMPAN_BIN (default
build-asan/sampan) for the bit-for-bit comparison."""
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(os.environ.get("SAMPAN_MODELS", ROOT / "build" / "models"))
SAMPAN_BIN = Path(os.environ.get("SAMPAN_BIN", ROOT / "build-asan" / "sampan"))


def torch_cuda_or_skip(sampan):
    """torch, when this machine has a GPU Sampan can use and torch with CUDA; else the test skips saying why."""
    why = sampan._sampan.device_memory_available()
    if why:
        pytest.skip(f"needs a GPU: {why}")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA")
    return torch


def model_path(name: str) -> Path:
    p = MODELS / f"{name}.onnx"
    if not p.exists():
        pytest.fail(f"{p} is missing: run tests/models/export_all.sh {MODELS}")
    return p


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def image(rng, shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def tokens(rng, batch=1, seq=16):
    ids = rng.integers(1000, 30522, size=(batch, seq), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def mlp_model(path: Path, batch="N", hidden=64, seed=0) -> Path:
    """y = relu(x W1 + b1) W2 + b2 with x: f32[batch, 32] (batch symbolic when a str)."""
    rng = np.random.default_rng(seed)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [32, hidden], rng.standard_normal((32, hidden)).astype(np.float32).ravel())
    b1 = helper.make_tensor("b1", TensorProto.FLOAT, [hidden], rng.standard_normal(hidden).astype(np.float32))
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [hidden, 10], rng.standard_normal((hidden, 10)).astype(np.float32).ravel())
    b2 = helper.make_tensor("b2", TensorProto.FLOAT, [10], rng.standard_normal(10).astype(np.float32))
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["y0"]),
        helper.make_node("Add", ["y0", "b2"], ["y"]),
    ]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], [w1, b1, w2, b2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


@pytest.fixture(scope="session")
def sampan():
    import sampan as s
    src = ROOT / "python" / "sampan"
    assert Path(s.__file__).resolve().parent != src.resolve(), (
        "tests/python must run against the installed package, not the source folder python/sampan")
    return s


@pytest.fixture(scope="session")
def mlp_path(tmp_path_factory):
    return mlp_model(tmp_path_factory.mktemp("mlp") / "mlp.onnx")


@pytest.fixture(scope="session")
def backend(sampan):
    """The backend the suite builds for: $SAMPAN_BACKEND, else cpu."""
    b = os.environ.get("SAMPAN_BACKEND", "cpu")
    if b not in sampan.available_backends():
        pytest.skip(f"backend {b} is not available here")
    return b
