"""End-to-end bad inputs through `sampan run`: every one must fail cleanly.

Each case checks: a non-zero exit status that is not a signal (returncode > 0), no sanitizer
report, and a message on stderr naming the problem. Run against an ASan+UBSan build:
    SAMPAN_BIN=build-asan/sampan .venv/bin/python -m pytest tests/cli/test_bad_inputs.py
"""
import os
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

SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error",
                     "Segmentation fault", "terminate called", "Aborted")


def run(*args, timeout=120):
    if not SAMPAN.exists():
        pytest.fail(f"sampan binary not found at {SAMPAN} (set SAMPAN_BIN)")
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    return subprocess.run([str(SAMPAN), "run", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def expect_clean_failure(proc, *needles):
    """Non-zero exit (not a signal), no sanitizer report, stderr names the problem."""
    err = proc.stderr
    assert proc.returncode > 0, f"expected a clean failure, got returncode {proc.returncode}\nstderr:\n{err}"
    for marker in SANITIZER_MARKERS:
        assert marker not in err, f"crash/sanitizer report ({marker}):\n{err}"
    assert err.strip(), "stderr is empty: the failure must be explained"
    low = err.lower()
    for needle in needles:
        assert needle.lower() in low, f"stderr does not mention {needle!r}:\n{err}"
    return err


def save(model, path):
    onnx.save(model, str(path))
    return path


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def add_model(shape=(2, 3), dtype=TensorProto.FLOAT):
    """y = x + w, with w an initializer of ones."""
    w = numpy_helper.from_array(np.ones(shape, dtype=np.float32), "w")
    return make_model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", dtype, list(shape))],
        [helper.make_tensor_value_info("y", dtype, list(shape))],
        [w],
    )


@pytest.fixture
def good_model(tmp_path):
    return save(add_model(), tmp_path / "add.onnx")


# ---- happy path ---------------------------------------------------------------------------

def test_happy_path_writes_correct_output(tmp_path, good_model):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    proc = run(good_model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", out)
    assert proc.returncode == 0, proc.stderr
    for marker in SANITIZER_MARKERS:
        assert marker not in proc.stderr
    assert "output y" in proc.stdout
    np.testing.assert_array_equal(np.load(out / "y.npy"), x + 1)


def test_happy_path_symbolic_dim_with_shape(tmp_path):
    model = make_model(
        [helper.make_node("Add", ["x", "x"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    )
    path = save(model, tmp_path / "sym.onnx")
    proc = run(path, "--random-inputs", "--shape", "x=4x3")
    assert proc.returncode == 0, proc.stderr
    assert "f32[4,3]" in proc.stdout


# ---- broken model files -------------------------------------------------------------------

def test_truncated_onnx(tmp_path, good_model):
    data = good_model.read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    expect_clean_failure(run(path, "--random-inputs"), "truncated.onnx", "not an onnx model")


def test_random_garbage_file(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    expect_clean_failure(run(path, "--random-inputs"), "garbage.onnx", "not an onnx model")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    expect_clean_failure(run(path, "--random-inputs"), "empty.onnx", "empty")


def test_nonexistent_path(tmp_path):
    path = tmp_path / "does_not_exist.onnx"
    expect_clean_failure(run(path, "--random-inputs"), "does_not_exist.onnx", "does not exist")


def test_directory_instead_of_file(tmp_path):
    expect_clean_failure(run(tmp_path, "--random-inputs"), str(tmp_path.name))


def test_dangling_input(tmp_path):
    model = make_model(
        [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    path = save(model, tmp_path / "dangling.onnx")
    expect_clean_failure(run(path, "--random-inputs"), "ghost", "not a graph input")


def test_missing_required_attribute(tmp_path):
    model = make_model(
        [helper.make_node("Cast", ["x"], ["y"], name="cast_no_to")],  # 'to' is required
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
    )
    path = save(model, tmp_path / "noattr.onnx")
    expect_clean_failure(run(path, "--random-inputs"), "cast_no_to", "missing required attribute 'to'")


def test_unsupported_ops_listed(tmp_path):
    model = make_model(
        [helper.make_node("TotallyMadeUpOp", ["x"], ["a"], name="made_up"),
         helper.make_node("AnotherFakeOp", ["a"], ["y"], name="fake2")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    path = save(model, tmp_path / "unsupported.onnx")
    err = expect_clean_failure(run(path, "--random-inputs"), "unsupported", "TotallyMadeUpOp", "AnotherFakeOp")
    assert "made_up" in err


def test_inconsistent_declared_output_shape(tmp_path):
    model = make_model(
        [helper.make_node("Add", ["x", "x"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 7])],
    )
    path = save(model, tmp_path / "badshape.onnx")
    expect_clean_failure(run(path, "--random-inputs"), "'y'", "declared")


def test_external_data_outside_model_dir(tmp_path):
    model = add_model()
    w = model.graph.initializer[0]
    w.ClearField("float_data")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../../etc/passwd"), ("offset", "0"), ("length", "24")):
        e = w.external_data.add()
        e.key, e.value = k, v
    path = tmp_path / "escape.onnx"
    path.write_bytes(model.SerializeToString())
    expect_clean_failure(run(path, "--random-inputs"), "external data", "inside the model's directory")


# ---- bad input tensors --------------------------------------------------------------------

def test_npy_wrong_dtype(tmp_path, good_model):
    np.save(tmp_path / "x.npy", np.zeros((2, 3), dtype=np.int32))
    expect_clean_failure(run(good_model, "--input", f"x={tmp_path / 'x.npy'}"), "'x'", "f32", "i32")


def test_npy_wrong_shape(tmp_path, good_model):
    np.save(tmp_path / "x.npy", np.zeros((3, 2), dtype=np.float32))
    expect_clean_failure(run(good_model, "--input", f"x={tmp_path / 'x.npy'}"), "'x'", "[3,2]")


def test_npy_wrong_rank(tmp_path, good_model):
    np.save(tmp_path / "x.npy", np.zeros((6,), dtype=np.float32))
    expect_clean_failure(run(good_model, "--input", f"x={tmp_path / 'x.npy'}"), "'x'", "rank")


def test_npy_corrupt_header(tmp_path, good_model):
    good = tmp_path / "good.npy"
    np.save(good, np.zeros((2, 3), dtype=np.float32))
    data = bytearray(good.read_bytes())
    header_end = data.index(b"\n")
    data[10:header_end] = b"{'descr': '<f4', 'shape': [[[" + b" " * (header_end - 10 - 28)
    bad = tmp_path / "corrupt.npy"
    bad.write_bytes(bytes(data))
    expect_clean_failure(run(good_model, "--input", f"x={bad}"), "corrupt.npy", ".npy")


def test_npy_bad_magic(tmp_path, good_model):
    bad = tmp_path / "notnpy.npy"
    bad.write_bytes(b"this is not a numpy file at all")
    expect_clean_failure(run(good_model, "--input", f"x={bad}"), "notnpy.npy", "bad magic")


def test_npy_truncated_data(tmp_path, good_model):
    good = tmp_path / "good.npy"
    np.save(good, np.zeros((2, 3), dtype=np.float32))
    bad = tmp_path / "short.npy"
    bad.write_bytes(good.read_bytes()[:-5])
    expect_clean_failure(run(good_model, "--input", f"x={bad}"), "short.npy", "bytes")


def test_npy_missing_file(tmp_path, good_model):
    expect_clean_failure(run(good_model, "--input", f"x={tmp_path / 'nope.npy'}"), "nope.npy")


def test_input_for_unknown_name(tmp_path, good_model):
    np.save(tmp_path / "x.npy", np.zeros((2, 3), dtype=np.float32))
    expect_clean_failure(run(good_model, "--input", f"bogus={tmp_path / 'x.npy'}"), "bogus")


def test_missing_input_without_random(good_model):
    expect_clean_failure(run(good_model), "'x'", "--input")


# ---- bad flags ----------------------------------------------------------------------------

@pytest.fixture
def symbolic_model(tmp_path):
    model = make_model(
        [helper.make_node("Add", ["x", "x"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    )
    return save(model, tmp_path / "sym.onnx")


@pytest.mark.parametrize("arg", ["x=2xax3", "x=", "=2x3", "x2x3", "x=2x-3", "x=2x3x", "x=99999999999999999999999"])
def test_shape_malformed(symbolic_model, arg):
    expect_clean_failure(run(symbolic_model, "--random-inputs", "--shape", arg), "--shape")


def test_shape_that_does_not_fit(symbolic_model):
    expect_clean_failure(run(symbolic_model, "--random-inputs", "--shape", "x=4x5"), "--shape", "does not fit")


def test_shape_too_large(symbolic_model):
    expect_clean_failure(run(symbolic_model, "--random-inputs", "--shape", "x=4000000000000x3"), "4000000000000")


def test_symbolic_dim_without_shape(symbolic_model):
    expect_clean_failure(run(symbolic_model, "--random-inputs"), "'batch'", "--shape")


def test_unknown_flag(good_model):
    expect_clean_failure(run(good_model, "--no-such-flag"), "no-such-flag")
