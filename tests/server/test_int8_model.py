"""A repository model served in INT8 (issue #16): `sampan { precision: "int8" calibration_data:
"calib" }` quantizes it at load time as `sampan build --int8` does; the answers are close to the
float model's but not equal (it really is quantized); the plan is cached and reused; bad INT8
sections are refused naming the field."""

import numpy as np
import onnx
import onnxruntime as ort
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

CONFIG = """
max_batch_size: 4
input [{ name: "x" data_type: TYPE_FP32 dims: [ 32 ] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [ 10 ] }]
instance_group [{ kind: KIND_CPU }]
sampan { backend: "cpu" precision: "int8" calibration_data: "calib" calibration_method: "minmax" }
"""


def mlp() -> bytes:
    rng = np.random.default_rng(5)
    w1 = numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32) * 0.2, "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32) * 0.1, "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 10)).astype(np.float32) * 0.2, "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], [w1, b1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def write_repo(write_model, repo, config=CONFIG, samples=4):
    model_dir = write_model(repo, "mlp", mlp(), config=config)
    calib = model_dir / "calib"
    calib.mkdir(exist_ok=True)
    rng = np.random.default_rng(9)
    for k in range(samples):
        np.save(calib / f"x.{k}.npy", rng.standard_normal((2, 32)).astype(np.float32))
    return model_dir


def test_int8_model_is_quantized_and_cached(serve, write_model, tmp_path):
    repo = tmp_path / "repo"
    model_dir = write_repo(write_model, repo)
    srv = serve(repo)
    client = httpclient.InferenceServerClient(srv.http_url)
    x = np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)
    inp = httpclient.InferInput("x", [3, 32], "FP32")
    inp.set_data_from_numpy(x)
    y = client.infer("mlp", [inp]).as_numpy("y")
    ref = ort.InferenceSession(mlp(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
    assert 0 < err < 0.05, f"relative L2 to the float model {err}: not quantized, or quantized badly"
    plans = list((model_dir / "1" / ".sampan").glob("*.plan"))
    assert len(plans) == 1
    built = plans[0].stat().st_mtime_ns
    srv.stop()
    # A second server reuses the cached plan (same samples): same answers.
    srv2 = serve(repo)
    client2 = httpclient.InferenceServerClient(srv2.http_url)
    np.testing.assert_array_equal(client2.infer("mlp", [inp]).as_numpy("y"), y)
    assert plans[0].stat().st_mtime_ns == built, "the plan was built again"
    srv2.stop()
    # New calibration samples are a new plan.
    np.save(model_dir / "calib" / "x.0.npy", np.full((2, 32), 3.0, np.float32))
    srv3 = serve(repo)
    httpclient.InferenceServerClient(srv3.http_url).infer("mlp", [inp])
    assert plans[0].stat().st_mtime_ns != built, "new calibration data did not rebuild the plan"


def test_bad_int8_sections_name_the_field(serve, write_model, tmp_path):
    cases = {
        "nodata": (CONFIG.replace(' calibration_data: "calib"', ""), "sampan.calibration_data"),
        "escape": (CONFIG.replace('calibration_data: "calib"', 'calibration_data: "../calib"'), "inside the model's"),
        "method": (CONFIG.replace('"minmax"', '"kl"'), "sampan.calibration_method"),
        "nobound": (CONFIG.replace('calibration_method: "minmax"', 'accuracy_data: "calib"'), "go together"),
        "fp16": (CONFIG.replace('precision: "int8"', 'precision: "fp16"'), "needs precision: \"int8\""),
    }
    repo = tmp_path / "repo"
    for name, (config, _) in cases.items():
        model_dir = write_repo(write_model, repo, config)
        model_dir.rename(repo / name)
    srv = serve(repo, "--strict-readiness", "false")
    client = httpclient.InferenceServerClient(srv.http_url)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    for name, (_, why) in cases.items():
        assert index[name]["state"] == "UNAVAILABLE", (name, index[name])
        assert why in index[name]["reason"], (name, index[name]["reason"])
    # Calibration data that does not fit the model fails the load naming the file.
    bad = write_repo(write_model, tmp_path / "repo2")
    np.save(bad / "calib" / "x.0.npy", np.zeros((2, 31), np.float32))
    srv2 = serve(tmp_path / "repo2", "--strict-readiness", "false")
    index = {m["name"]: m for m in httpclient.InferenceServerClient(srv2.http_url).get_model_repository_index()}
    assert index["mlp"]["state"] == "UNAVAILABLE"
    assert "x.0.npy" in index["mlp"]["reason"], index["mlp"]["reason"]
