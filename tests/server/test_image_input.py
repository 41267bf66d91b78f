"""Raw-image input served: config.pbtxt's `sampan { image_input {...} }` makes the model take
uint8 HWC images (a quarter of the bytes) and normalise them in the plan; the answer equals
onnxruntime's on the normalised float NCHW input."""
import numpy as np
import onnxruntime as ort
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

MEAN = np.array([123.675, 116.28, 103.53], np.float32)
STD = np.array([58.395, 57.12, 57.375], np.float32)


def conv_model():
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 3, 16, 16])
    y = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", 4, 16, 16])
    g = helper.make_graph([helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["features"])], "conv", [x], [y], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


CONFIG = """max_batch_size: 8
input [ { name: "image" data_type: TYPE_UINT8 dims: [ 16, 16, 3 ] } ]
output [ { name: "features" data_type: TYPE_FP32 dims: [ 4, 16, 16 ] } ]
sampan {
  image_input { format: "uint8-nhwc" mean: [ 123.675, 116.28, 103.53 ] std: [ 58.395, 57.12, 57.375 ] }
}
"""


def test_uint8_images_are_normalised_in_the_plan(serve, write_model, tmp_path):
    model = conv_model()
    write_model(tmp_path / "repo", "conv", model, config=CONFIG)
    srv = serve(tmp_path / "repo")
    client = httpclient.InferenceServerClient(srv.http_url)
    meta = client.get_model_metadata("conv")
    assert meta["inputs"][0]["datatype"] == "UINT8" and meta["inputs"][0]["shape"] == [-1, 16, 16, 3]
    img = np.random.default_rng(5).integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    inp = httpclient.InferInput("image", list(img.shape), "UINT8")
    inp.set_data_from_numpy(img, binary_data=True)
    got = client.infer("conv", [inp]).as_numpy("features")
    x = ((img.astype(np.float32) - MEAN) / STD).transpose(0, 3, 1, 2).copy()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_bad_image_input_section_names_the_field(serve, write_model, tmp_path):
    write_model(tmp_path / "repo", "conv", conv_model(),
                config=CONFIG.replace('format: "uint8-nhwc"', 'format: "rgb565"'))
    srv = serve(tmp_path / "repo", "--strict-readiness", "false")
    client = httpclient.InferenceServerClient(srv.http_url)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["conv"]["state"] == "UNAVAILABLE"
    assert "sampan.image_input[0]" in index["conv"]["reason"] and "rgb565" in index["conv"]["reason"]
