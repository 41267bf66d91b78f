"""The flow of TensorRT's Python samples (deserialize an engine, allocate buffers, execute,
read the outputs) with Sampan and no pycuda: output buffers are allocated once and every
run writes into them (``ctx.run(feeds, outputs=...)``).

    python examples/python/execute_with_bindings.py model.plan   # from `sampan build --saveEngine`

The buffers are host (numpy) arrays: device-pointer bindings (__cuda_array_interface__ /
DLPack CUDA tensors) are not accepted yet; a cuda plan copies host<->device inside run().
"""
import sys

import numpy as np

import sampan

plan = sampan.load(sys.argv[1])                        # deserialize
engine = sampan.Engine(plan)
ctx = engine.create_context()


def concrete(info):
    return tuple(d if isinstance(d, int) else 1 for d in info.shape)


inputs = {i.name: np.zeros(concrete(i), i.dtype) for i in engine.inputs}  # input buffers
first = ctx.run(inputs)                                 # learn the output shapes once
outputs = {name: np.empty_like(y) for name, y in first.items()}         # output buffers
for step in range(3):
    for a in inputs.values():                           # "copy in"
        a[...] = step
    ctx.run(inputs, outputs=outputs)                    # execute into the bound outputs
    print(step, {name: float(y.ravel()[0]) for name, y in outputs.items()})
