"""The flow of TensorRT's Python samples (deserialize an engine, allocate device buffers, copy
in, execute, copy back) with Sampan and no pycuda. On a cuda plan the buffers are device memory
(``sampan.DeviceArray``) bound to the run as TensorRT binds device pointers to execute_v2; on a
host plan (cpu, reference) they are numpy arrays. Every run writes into the same buffers
(``ctx.run(feeds, outputs=...)``).

    python examples/python/execute_with_bindings.py model.plan   # from `sampan build --saveEngine`
"""
import sys

import numpy as np

import sampan

plan = sampan.load(sys.argv[1])                        # deserialize
engine = sampan.Engine(plan)
ctx = engine.create_context()
on_gpu = engine.backend == "cuda"


def concrete(info):
    return tuple(d if isinstance(d, int) else 1 for d in info.shape)


def buffer(shape, dtype):                              # cuda.mem_alloc / np.empty
    return sampan.DeviceArray.empty(shape, np.dtype(dtype).name, 0) if on_gpu else np.empty(shape, dtype)


host_in = {i.name: np.zeros(concrete(i), i.dtype) for i in engine.inputs}
first = ctx.run(host_in)                                # learn the output shapes once
bound_in = {name: buffer(a.shape, a.dtype) for name, a in host_in.items()}    # input bindings
bound_out = {name: buffer(y.shape, y.dtype) for name, y in first.items()}      # output bindings
host_out = {name: np.empty_like(y) for name, y in first.items()}
for step in range(3):
    for name, a in host_in.items():
        a[...] = step
        if on_gpu:
            bound_in[name].copy_from(a)                 # memcpy_htod
        else:
            bound_in[name][...] = a
    ctx.run(bound_in, outputs=bound_out)                # execute_v2 with the bindings
    for name, d in bound_out.items():
        if on_gpu:
            d.copy_to(host_out[name])                   # memcpy_dtoh
        else:
            host_out[name][...] = d
    print(step, {name: float(y.ravel()[0]) for name, y in host_out.items()})
