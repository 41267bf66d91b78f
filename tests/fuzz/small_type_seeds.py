"""Seeds for fuzz_onnx with the packed and float8 element types (issue #15): a DequantizeLinear
of a blocked int4 weight initializer (packed two a byte, odd count: a padding nibble) and a
float8e4m3fn round trip (Cast in, DequantizeLinear out). make_seeds.py's onnx_seeds() takes these
through small_type_seeds(); run alone, this writes just them:

    .venv/bin/python tests/fuzz/small_type_seeds.py
"""
import pathlib

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper, numpy_helper


def small_type_seeds():
    """name -> ModelProto."""
    vi = helper.make_tensor_value_info
    f32 = TensorProto.FLOAT
    models = {}

    def model(name, nodes, inputs, outputs, inits, opset):
        g = helper.make_graph(nodes, name, inputs, outputs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 10
        models[name] = m

    # A 3x5 int4 weight in blocks of 2 along axis 1 (15 values: 8 bytes, the last nibble padding).
    w = np.array([[-8, -3, 0, 1, 7], [2, -1, 5, -6, 3], [0, 4, -2, 6, -7]], dtype=ml_dtypes.int4)
    scale = np.array([[0.5, 0.25, 1.0], [2.0, 0.125, 0.5], [1.0, 1.0, 0.25]], dtype=np.float32)
    model("int4_blocked_dequantize",
          [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=1, block_size=2),
           helper.make_node("MatMul", ["x", "wf"], ["y"])],
          [vi("x", f32, ["N", 3])], [vi("y", f32, ["N", 5])],
          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scale, "s")], 21)
    # float8: x -> Cast(e4m3fn, saturating) -> DequantizeLinear with a float8 zero point, scale 2.
    zp = numpy_helper.from_array(np.zeros(1, dtype=ml_dtypes.float8_e4m3fn), "zp")
    model("float8_cast_dequantize",
          [helper.make_node("Cast", ["x"], ["q"], to=TensorProto.FLOAT8E4M3FN, saturate=1),
           helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=0)],
          [vi("x", f32, [4])], [vi("y", f32, [4])],
          [numpy_helper.from_array(np.array([2.0], dtype=np.float32), "s"), zp], 21)
    return models


if __name__ == "__main__":
    d = pathlib.Path(__file__).resolve().parent / "corpus" / "fuzz_onnx"
    for name, m in small_type_seeds().items():
        (d / f"{name}.onnx").write_bytes(m.SerializeToString())
        print(d / f"{name}.onnx")
