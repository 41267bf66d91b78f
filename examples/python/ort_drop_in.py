"""ONNX Runtime's basic tutorial, unchanged but for the import: Sampan builds the model for the
first usable provider when the session is created.

    python examples/python/ort_drop_in.py model.onnx
"""
import sys

import numpy as np

import sampan as ort  # was: import onnxruntime as ort

sess = ort.InferenceSession(sys.argv[1], providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
print("providers:", sess.get_providers())
for i in sess.get_inputs():
    print("input ", i.name, i.type, i.shape)
for o in sess.get_outputs():
    print("output", o.name, o.type, o.shape)

feeds = {}
for i in sess.get_inputs():
    shape = [d if isinstance(d, int) else 1 for d in i.shape]
    dtype = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(float16)": np.float16}[i.type]
    feeds[i.name] = np.ones(shape, dtype)
outputs = sess.run(None, feeds)
for o, y in zip(sess.get_outputs(), outputs):
    print(o.name, y.shape, y.dtype, float(np.abs(y).mean()))
