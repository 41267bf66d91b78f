"""Build ResNet-50 into a plan and run it (TensorRT's build-then-execute flow).

    python examples/python/build_and_run_resnet50.py resnet50.onnx [--backend cuda|cpu] [--fp16]

The model: tests/models/export_all.sh writes build/models/resnet50.onnx (torchvision, random
weights), or bring your own with an input named like its first graph input.
"""
import argparse
import time

import numpy as np

import sampan


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--backend", default=None, help="cuda, cpu or reference (default: cuda with a GPU, else cpu)")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--plan", default="resnet50.plan")
    a = ap.parse_args()

    t0 = time.perf_counter()
    plan = sampan.build(a.model, backend=a.backend, precision="fp16" if a.fp16 else "fp32",
                        progress=lambda line: print("  build:", line, end="\r"))
    print(f"\nbuilt for {plan.backend} in {time.perf_counter() - t0:.1f} s: {plan}")
    plan.save(a.plan)

    engine = sampan.Engine(sampan.load(a.plan))
    ctx = engine.create_context()
    inp = engine.inputs[0]
    shape = tuple(d if isinstance(d, int) else 1 for d in inp.shape)
    x = np.random.default_rng(0).standard_normal(shape).astype(inp.dtype)
    out = ctx.run({inp.name: x})
    t0 = time.perf_counter()
    n = 20
    for _ in range(n):
        out = ctx.run({inp.name: x})
    ms = (time.perf_counter() - t0) / n * 1e3
    for name, y in out.items():
        print(f"{name}: {y.shape} {y.dtype}, top-5 classes {np.argsort(y.ravel())[::-1][:5].tolist()}")
    print(f"{ms:.2f} ms per inference (batch {shape[0]}, host arrays in and out)")


if __name__ == "__main__":
    main()
