"""Writes the seed corpora of tests/fuzz (corpus/<target>/): small, valid
inputs of each kind, which the fuzz drivers mutate. The seeds are committed;
run this again after a format changes:

    .venv/bin/python tests/fuzz/make_seeds.py build/sampan

(the sampan binary builds the plan seeds from the ONNX seeds, on the reference
backend). Existing seeds that came from a fuzz finding (named crash-* or
regress-*) are kept.
"""
import json
import pathlib
import struct
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tritonclient.grpc import service_pb2 as pb

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus"


def reset(target):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    for f in d.iterdir():
        if not f.name.startswith(("crash-", "regress-")):
            f.unlink()
    return d


def control_flow_seeds(model, vi):
    """Subgraphs: a Loop reading outer values with loop-carried and scan outputs and a nested If,
    Scan 9+ with non-default axes and directions, Scan 8 with its batch axis and sequence_lens."""
    f32, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    inner_if = helper.make_node(
        "If", ["odd"], ["step"],
        then_branch=helper.make_graph([helper.make_node("Neg", ["w"], ["nw"])], "t", [], [vi("nw", f32, [2])]),
        else_branch=helper.make_graph([helper.make_node("Identity", ["w"], ["iw"])], "e", [], [vi("iw", f32, [2])]))
    body = helper.make_graph(
        [helper.make_node("Mod", ["i", "two"], ["r"]), helper.make_node("Cast", ["r"], ["odd"], to=b), inner_if,
         helper.make_node("Add", ["acc", "step"], ["acc2"]), helper.make_node("Identity", ["c"], ["c2"]),
         helper.make_node("ReduceSum", ["acc2"], ["s"], keepdims=0)],
        "body", [vi("i", i64, []), vi("c", b, []), vi("acc", f32, [2])],
        [vi("c2", b, []), vi("acc2", f32, [2]), vi("s", f32, [])])
    model("loop_outer_scope",
          [helper.make_node("Loop", ["m", "", "x"], ["y", "sums"], body=body)],
          [vi("m", i64, []), vi("x", f32, [2])], [vi("y", f32, [2]), vi("sums", f32, ["T"])],
          [numpy_helper.from_array(np.array([0.5, -1], np.float32), "w"),
           numpy_helper.from_array(np.array(2, np.int64), "two")])
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["st", "xs"], ["st2"]), helper.make_node("Mul", ["st2", "k"], ["out"])],
        "scan_body", [vi("st", f32, [3]), vi("xs", f32, [3])], [vi("st2", f32, [3]), vi("out", f32, [3])])
    model("scan_axes",
          [helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=scan_body, num_scan_inputs=1,
                            scan_input_axes=[-1], scan_input_directions=[1], scan_output_axes=[1],
                            scan_output_directions=[1])],
          [vi("s0", f32, [3]), vi("x", f32, [3, 4])], [vi("s", f32, [3]), vi("y", f32, [3, 4])],
          [numpy_helper.from_array(np.array(0.5, np.float32), "k")], opset=16)
    scan8_body = helper.make_graph(
        [helper.make_node("Add", ["st", "xs"], ["st2"]), helper.make_node("Identity", ["st2"], ["out"])],
        "scan8_body", [vi("st", f32, [2]), vi("xs", f32, [2])], [vi("st2", f32, [2]), vi("out", f32, [2])])
    model("scan8_batch",
          [helper.make_node("Scan", ["lens", "s0", "x"], ["s", "y"], body=scan8_body, num_scan_inputs=1,
                            directions=[0])],
          [vi("lens", TensorProto.INT32, [2]), vi("s0", f32, [2, 2]), vi("x", f32, [2, 3, 2])],
          [vi("s", f32, [2, 2]), vi("y", f32, [2, 3, 2])], opset=8)


def onnx_seeds():
    f32 = TensorProto.FLOAT
    models = {}

    def model(name, nodes, inputs, outputs, inits=(), opset=17):
        g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        models[name] = m

    vi = helper.make_tensor_value_info
    model("add", [helper.make_node("Add", ["x", "b"], ["y"])], [vi("x", f32, ["N", 4])], [vi("y", f32, ["N", 4])],
          [numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")])
    rng = np.random.default_rng(0)
    model("conv_relu_pool",
          [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
           helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
          [vi("x", f32, [1, 3, 8, 8])], [vi("y", f32, [1, 4, 4, 4])],
          [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
           numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])
    model("batchnorm",
          [helper.make_node("Conv", ["x", "w"], ["c"]),
           helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["y"])],
          [vi("x", f32, [1, 2, 4, 4])], [vi("y", f32, [1, 2, 4, 4])],
          [numpy_helper.from_array(rng.standard_normal((2, 2, 1, 1)).astype(np.float32), "w")] +
          [numpy_helper.from_array(np.ones(2, np.float32) * k, n) for k, n in ((1, "s"), (0, "o"), (0, "m"), (1, "v"))])
    model("gemm_softmax",
          [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
           helper.make_node("Softmax", ["g"], ["y"], axis=-1)],
          [vi("x", f32, ["N", 8])], [vi("y", f32, ["N", 3])],
          [numpy_helper.from_array(rng.standard_normal((3, 8)).astype(np.float32), "w"),
           numpy_helper.from_array(np.zeros(3, np.float32), "b")])
    model("reshape_transpose_concat",
          [helper.make_node("Reshape", ["x", "s"], ["r"]),
           helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
           helper.make_node("Concat", ["t", "t"], ["y"], axis=0)],
          [vi("x", f32, [2, 3])], [vi("y", f32, [4, 3])],
          [numpy_helper.from_array(np.array([3, 2], np.int64), "s")])
    model("gather_slice",
          [helper.make_node("Gather", ["x", "i"], ["g"], axis=0),
           helper.make_node("Slice", ["g", "st", "en", "ax"], ["y"])],
          [vi("x", f32, [5, 4])], [vi("y", f32, [2, 2])],
          [numpy_helper.from_array(np.array([4, 0], np.int64), "i"),
           numpy_helper.from_array(np.array([1], np.int64), "st"),
           numpy_helper.from_array(np.array([3], np.int64), "en"),
           numpy_helper.from_array(np.array([1], np.int64), "ax")])
    model("shape_expand_where",
          [helper.make_node("Shape", ["x"], ["s"]),
           helper.make_node("ConstantOfShape", ["s"], ["z"], value=numpy_helper.from_array(np.array([2.0], np.float32))),
           helper.make_node("Greater", ["x", "z"], ["m"]),
           helper.make_node("Where", ["m", "x", "z"], ["y"])],
          [vi("x", f32, ["N", 3])], [vi("y", f32, ["N", 3])])
    model("layernorm_matmul",
          [helper.make_node("MatMul", ["x", "w"], ["h"]),
           helper.make_node("LayerNormalization", ["h", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
          [vi("x", f32, [1, 4, 8])], [vi("y", f32, [1, 4, 8])],
          [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
           numpy_helper.from_array(np.ones(8, np.float32), "g"),
           numpy_helper.from_array(np.zeros(8, np.float32), "b")])
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", f32, [2])])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", f32, [2])])
    model("if_subgraph", [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
          [vi("c", TensorProto.BOOL, []), vi("x", f32, [2])], [vi("y", f32, [2])])
    control_flow_seeds(model, vi)
    model("resize_cast",
          [helper.make_node("Resize", ["x", "", "sc"], ["r"], mode="nearest"),
           helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT16)],
          [vi("x", f32, [1, 1, 2, 2])], [vi("y", TensorProto.FLOAT16, [1, 1, 4, 4])],
          [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")])
    # A weight in external data: the fuzz target's scratch directory holds weights.bin (4 KiB).
    w = helper.make_tensor("w", f32, [4], vals=[])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "64"), ("length", "16")):
        e = w.external_data.add()
        e.key, e.value = k, v
    model("external_data", [helper.make_node("Mul", ["x", "w"], ["y"])], [vi("x", f32, [4])], [vi("y", f32, [4])],
          [w])
    # Classical ML (ai.onnx.ml): a tree ensemble whose node lists the mutator can break into
    # cycles and dangling ids, and an n-gram vectorizer with its pool layout.
    ml = helper.make_model(
        helper.make_graph(
            [helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1,
                              nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[1, 0, 0],
                              nodes_values=[0.5, 0.0, 0.0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
                              nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                              nodes_missing_value_tracks_true=[1, 0, 0], target_treeids=[0, 0],
                              target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[-1.0, 2.0],
                              base_values=[0.25], aggregate_function="SUM")],
            "ml_tree_regressor", [vi("x", f32, ["N", 2])], [vi("y", f32, ["N", 1])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    ml.ir_version = 8
    models["ml_tree_regressor"] = ml
    model("tfidf",
          [helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TFIDF", min_gram_length=1, max_gram_length=2,
                            max_skip_count=1, ngram_counts=[0, 3], ngram_indexes=[0, 1, 2, 3, 4],
                            pool_int64s=[2, 3, 5, 2, 3, 5, 7], weights=[1.0, 0.5, 2.0, 1.5, 3.0])],
          [vi("x", TensorProto.INT64, [2, 6])], [vi("y", f32, [2, 5])])
    # String tensors: an initializer in string_data, the string ops and a LabelEncoder (issue #15).
    strings = helper.make_graph(
        [helper.make_node("StringConcat", ["x", "suffix"], ["c"]),
         helper.make_node("StringSplit", ["c"], ["parts", "n"], delimiter=","),
         helper.make_node("RegexFullMatch", ["x"], ["m"], pattern=r"[a-z]+\d*"),
         helper.make_node("LabelEncoder", ["x"], ["id"], domain="ai.onnx.ml", keys_strings=["a", "b"],
                          values_int64s=[1, 2], default_int64=0)],
        "strings", [vi("x", TensorProto.STRING, ["N"])],
        [vi("parts", TensorProto.STRING, ["N", None]), vi("n", TensorProto.INT64, ["N"]),
         vi("m", TensorProto.BOOL, ["N"]), vi("id", TensorProto.INT64, ["N"])],
        [helper.make_tensor("suffix", TensorProto.STRING, [1], [b",tail"])])
    sm = helper.make_model(strings, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 4)])
    sm.ir_version = 9
    models["strings"] = sm
    # The packed and float8 element types (small_type_seeds.py, beside this file).
    sys.path.insert(0, str(HERE))
    from small_type_seeds import small_type_seeds
    models.update(small_type_seeds())
    return models


def npy_seeds(d):
    arrays = {
        "f32_2x3": np.arange(6, dtype=np.float32).reshape(2, 3),
        "f16_4": np.ones(4, np.float16),
        "i64_scalar": np.array(7, np.int64),
        "u8_img": np.zeros((2, 2, 3), np.uint8),
        "bool_3": np.array([True, False, True]),
        "f64_empty": np.zeros((0, 3), np.float64),
        "i32_big_endian": np.arange(3, dtype=">i4"),
        "f32_fortran": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "str_unicode": np.array([["a", "\u00e9t\u00e9"], ["", "long string"]]),
        "str_bytes": np.array([b"ab", b"\x00x", b""]),
    }
    for name, a in arrays.items():
        with open(d / f"{name}.npy", "wb") as f:
            np.lib.format.write_array(f, a, allow_pickle=False)
    for version in ((2, 0), (3, 0)):
        with open(d / f"f32_v{version[0]}.npy", "wb") as f:
            np.lib.format.write_array(f, np.arange(4, dtype=np.float32), version=version)


IR_TEXT = {
    "block": """opset 17
graph block (x: f32[N,3,8,8]) -> (y) {
  w = const f32[4,3,3,3] random
  b = const f32[4] {0.5, 1, -2, 0}
  c = Conv(x, w, b) {pads=[1,1,1,1], strides=[1,1]} @conv1
  a: f32[N,2,8,8], d = Split(c) {axis=1}
  y = Relu(a)
}
""",
    "attrs": """opset 17
graph g (x: f32[2,3], i: i64[2]) -> (y: f32[2,3], z) {
  s = const i64[2] {3, 2}
  r = Reshape(x, s)
  t = Transpose(r) {perm=[1,0]}
  y = Gather(x, i) {axis=0}
  z = Cast(t) {to=10}
  _ = Identity(x) {note="a \\"quoted\\" string", f=1.5e-3, fs=floats[], v=tensor f32[2] {1, 2}}
  w = const string[2] {"x", "\u00e9t\u00e9"}
  _ = Equal(w, w)
}
""",
    "subgraphs": """opset 17
graph g (m: i64[], c: bool[], x: f32[2]) -> (y, s) {
  w = const f32[2] {0.5, -1}
  y, s = Loop(m, _, x) {body = graph b (i: i64[], go: bool[], acc: f32[2]) -> (go, acc2, t) {
    step = If(c) {then_branch = graph t () -> (nw) { nw = Neg(w) }, else_branch = graph e () -> (w) { }}
    acc2 = Add(acc, step)
    t = ReduceSum(acc2) {keepdims=0}
  }}
}
""",
    "domains": """opset 17
opset com.microsoft 1
graph "a graph" (x: f16[*], "weird name": ?[?,4]) -> (y) {
  y = com.microsoft::FusedGelu(x) @"node 1"
}
""",
    "scalar": """graph s (x: f32[]) -> (y: f32[]) {
  one = const f32[] {1}
  y = Add(x, one)
}
""",
}


def config_seeds(d):
    configs = {
        "full": """name: "m"
backend: "sampan"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, -1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3, -1 ] label_filename: "labels.txt" } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 1000 allow_timeout_override: true max_queue_size: 16 }
  priority_queue_policy { key: 1 value { max_queue_size: 4 } }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy { specific { versions: [ 1, 3 ] } }
parameters { key: "k" value { string_value: "v" } }
""",
        "gpu": """name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "img" data_type: TYPE_UINT8 format: FORMAT_NHWC dims: [ 224, 224, 3 ] } ]
output [ { name: "logits" data_type: TYPE_FP16 dims: [ 1000 ] reshape { shape: [ 1, 1000 ] } } ]
instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0, 1 ] } ]
optimization { cuda { graphs: false } }
version_policy { latest { num_versions: 2 } }
""",
        "sampan_section": """backend: "sampan"
max_batch_size: 16
sampan {
  backend: "cpu"
  precision: "fp16"
  batch_buckets: [ 1, 4, 16 ]
  image_input { mean: [ 123.675, 116.28, 103.53 ] std: [ 58.395, 57.12, 57.375 ] }
  profile { input: "x" min: [ 1, 3 ] opt: [ 8, 3 ] max: [ 16, 3 ] }
}
version_policy { all { } }
""",
        "minimal": 'name: "m"\n',
    }
    for name, text in configs.items():
        (d / f"{name}.pbtxt").write_text(text)
    fixture = pathlib.Path(HERE.parent / "server/fixtures/triton_repo/ocr_rec/config.pbtxt")
    if fixture.exists():
        (d / "triton_ocr_rec.pbtxt").write_text(fixture.read_text().replace('name: "ocr_rec"', 'name: "m"'))


def http_seeds(d):
    def write(name, header, binary=b""):
        js = json.dumps(header).encode()
        (d / f"{name}.bin").write_bytes(struct.pack("<I", len(js)) + js + binary)

    write("json_fp32", {"id": "1", "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32",
                                               "data": [[1.0, 2.0], [3.0, 4.5]]}],
                        "outputs": [{"name": "y", "parameters": {"binary_data": True}}]})
    write("json_types", {"inputs": [{"name": "b", "shape": [3], "datatype": "BOOL", "data": [True, False, True]},
                                    {"name": "i", "shape": [1, 2], "datatype": "INT64", "data": [-1, 9007199254740993]},
                                    {"name": "u", "shape": [2], "datatype": "UINT8", "data": [0, 255]},
                                    {"name": "h", "shape": [1], "datatype": "FP16", "data": [0.5]}],
                         "parameters": {"binary_data_output": True, "priority": 1, "timeout": 1000}})
    write("binary", {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32",
                                 "parameters": {"binary_data_size": 8}},
                                {"name": "y", "shape": [3], "datatype": "INT8", "parameters": {"binary_data_size": 3}}]},
          struct.pack("<2f", 1.5, -2.0) + b"\x01\x02\x03")
    write("shm", {"inputs": [{"name": "x", "shape": [4], "datatype": "FP32",
                              "parameters": {"shared_memory_region": "r0", "shared_memory_byte_size": 16,
                                             "shared_memory_offset": 64}}],
                  "outputs": [{"name": "y", "parameters": {"shared_memory_region": "r0",
                                                           "shared_memory_byte_size": 1024}}]})
    write("classification", {"inputs": [{"name": "x", "shape": [], "datatype": "FP64", "data": [1e300]}],
                              "outputs": [{"name": "y", "parameters": {"classification": 3}}]})


def grpc_seeds(d):
    r = pb.ModelInferRequest(model_name="m", model_version="1", id="7")
    t = r.inputs.add(name="x", datatype="FP32", shape=[2, 2])
    r.raw_input_contents.append(struct.pack("<4f", 1, 2, 3, 4))
    r.outputs.add(name="y")
    (d / "raw.bin").write_bytes(r.SerializeToString())

    r = pb.ModelInferRequest(model_name="m")
    t = r.inputs.add(name="i", datatype="INT64", shape=[3])
    t.contents.int64_contents.extend([1, -2, 3])
    t = r.inputs.add(name="b", datatype="BOOL", shape=[2])
    t.contents.bool_contents.extend([True, False])
    t = r.inputs.add(name="f", datatype="FP64", shape=[1])
    t.contents.fp64_contents.append(2.5)
    r.parameters["priority"].uint64_param = 1
    r.parameters["timeout"].int64_param = 100
    (d / "typed.bin").write_bytes(r.SerializeToString())

    r = pb.ModelInferRequest(model_name="m")
    t = r.inputs.add(name="x", datatype="FP32", shape=[4])
    t.parameters["shared_memory_region"].string_param = "r0"
    t.parameters["shared_memory_byte_size"].int64_param = 16
    t.parameters["shared_memory_offset"].uint64_param = 32
    o = r.outputs.add(name="y")
    o.parameters["shared_memory_region"].string_param = "r0"
    o.parameters["shared_memory_byte_size"].int64_param = 256
    o.parameters["binary_data"].bool_param = True
    (d / "shm.bin").write_bytes(r.SerializeToString())


def main():
    sampan = sys.argv[1] if len(sys.argv) > 1 else str(HERE.parent.parent / "build" / "sampan")
    d = reset("fuzz_onnx")
    models = onnx_seeds()
    for name, m in models.items():
        (d / f"{name}.onnx").write_bytes(m.SerializeToString())
    d = reset("fuzz_plan")
    for plan in sorted((HERE.parent / "fixtures").glob("*.plan")):
        (d / plan.name).write_bytes(plan.read_bytes())
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("add", "conv_relu_pool", "gemm_softmax", "reshape_transpose_concat", "gather_slice",
                     "shape_expand_where", "layernorm_matmul", "resize_cast", "strings"):
            src = pathlib.Path(tmp) / f"{name}.onnx"
            src.write_bytes(models[name].SerializeToString())
            out = d / f"{name}.plan"
            args = [sampan, "build", str(src), "-o", str(out), "--backend", "reference"]
            if name in ("add", "gemm_softmax", "shape_expand_where"):
                args += ["--minShapes", f"x:1x{4 if name == 'add' else 8 if name == 'gemm_softmax' else 3}",
                         "--optShapes", f"x:2x{4 if name == 'add' else 8 if name == 'gemm_softmax' else 3}",
                         "--maxShapes", f"x:4x{4 if name == 'add' else 8 if name == 'gemm_softmax' else 3}"]
            if name == "strings":  # a string constant in the plan
                args += ["--minShapes", "x:1", "--optShapes", "x:2", "--maxShapes", "x:4"]
            subprocess.run(args, check=True, capture_output=True)
    npy_seeds(reset("fuzz_npy"))
    d = reset("fuzz_ir_text")
    for name, text in IR_TEXT.items():
        (d / f"{name}.txt").write_text(text)
    config_seeds(reset("fuzz_model_config"))
    http_seeds(reset("fuzz_http_infer"))
    grpc_seeds(reset("fuzz_grpc_infer"))
    for t in sorted(CORPUS.iterdir()):
        files = list(t.iterdir())
        print(f"{t.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
