"""Zero-copy with PyTorch on the GPU: a torch CUDA tensor goes into Sampan and the result comes
back as device memory that torch shares (DLPack), without a trip through the host. The run
waits for the work queued on torch's current stream before it reads the input.

    python examples/python/zero_copy_torch.py model.onnx     # one float32 input, batch in dim 0
"""
import sys

import torch

import sampan

plan = sampan.build(sys.argv[1], backend="cuda", precision="fp16")
ctx = sampan.Engine(plan).create_context()
info = plan.inputs[0]
shape = tuple(d if isinstance(d, int) else 4 for d in info.shape)
x = torch.rand(shape, device="cuda") * 2 - 1                   # made on the GPU
stream = torch.cuda.current_stream()
out = ctx.run({info.name: x}, stream=stream)                   # sampan.DeviceArray per output
for name, arr in out.items():
    y = torch.from_dlpack(arr)                                 # the same memory, now a torch tensor
    print(name, tuple(y.shape), y.dtype, y.device, "shared" if y.data_ptr() == arr.ptr else "copied",
          f"mean {y.float().mean().item():.4f}")
