#!/usr/bin/env python3
"""Exports the torchvision CNNs of the CPU peer benchmark to ONNX (opset 17) with a
dynamic batch dimension, random weights (fixed seed): resnet50, mobilenet_v2,
efficientnet_b0. Run with Debian's torch: /usr/bin/python3 bench/cpu_peers/export_cnns.py --out DIR
"""
import argparse
from pathlib import Path

import torch
import torchvision

MODELS = {
    "resnet50": torchvision.models.resnet50,
    "mobilenet_v2": torchvision.models.mobilenet_v2,
    "efficientnet_b0": torchvision.models.efficientnet_b0,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/bench_models")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, ctor in MODELS.items():
        dst = out / f"{name}.onnx"
        if dst.exists():
            print(f"export_cnns: {dst} exists")
            continue
        torch.manual_seed(0)
        model = ctor().eval()
        x = torch.randn(1, 3, 224, 224)
        tmp = dst.with_suffix(".tmp.onnx")
        with torch.no_grad():
            kw = dict(opset_version=17, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
            try:  # the TorchScript exporter (torch >= 2.9 defaults to the dynamo one, which needs onnxscript)
                torch.onnx.export(model, x, str(tmp), dynamo=False, **kw)
            except TypeError as e:  # an older torch: no dynamo argument
                if "dynamo" not in str(e):
                    raise
                torch.onnx.export(model, x, str(tmp), **kw)
        tmp.rename(dst)
        print(f"export_cnns: wrote {dst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
