#!/usr/bin/python3
"""Exports the torch-defined test models to ONNX (opset 17), random weights, fixed seed.

Run with Debian's /usr/bin/python3 (python3-torch 1.13 + python3-torchvision 0.14):
    /usr/bin/python3 tests/models/export_torch.py [--out build/models] [--only NAME] [--force]
A model is skipped when its .onnx is newer than this script and tiny_yolo.py.
"""
import argparse
import os
import sys
from pathlib import Path

import torch
import torchvision

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import tiny_yolo  # noqa: E402

OPSET = 17


def torchvision_model(name):
    def build():
        ctor = getattr(torchvision.models, name)
        return ctor(weights=None)
    return build


# name -> (builder, input shape, input name, output name)
MODELS = {
    "resnet50": (torchvision_model("resnet50"), (1, 3, 224, 224), "input", "logits"),
    "mobilenet_v2": (torchvision_model("mobilenet_v2"), (1, 3, 224, 224), "input", "logits"),
    "mobilenet_v3_large": (torchvision_model("mobilenet_v3_large"), (1, 3, 224, 224), "input", "logits"),
    "efficientnet_b0": (torchvision_model("efficientnet_b0"), (1, 3, 224, 224), "input", "logits"),
    "tiny_yolo": (lambda: tiny_yolo.TinyYolo(nc=8, img_size=320), (1, 3, 320, 320), "images", "detections"),
    # ResNet-50 with its BatchNormalization nodes kept (torch folds them by default), so
    # Sampan's own BN folding has something to do.
    "resnet50_bn": (torchvision_model("resnet50"), (1, 3, 224, 224), "input", "logits"),
}
# Exported without torch's eval-mode folding of BatchNormalization into Conv.
KEEP_BATCHNORM = {"resnet50_bn"}


def randomize_batchnorm(model, gen):
    """Non-trivial BN statistics so the (folded) BN actually changes the numbers."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(n, generator=gen) * 0.1)


def export(name, out_dir: Path, force: bool) -> None:
    build, shape, in_name, out_name = MODELS[name]
    dst = out_dir / f"{name}.onnx"
    deps = [Path(__file__), HERE / "tiny_yolo.py"]
    if not force and dst.exists() and all(dst.stat().st_mtime >= d.stat().st_mtime for d in deps):
        print(f"export_torch: {dst} up to date")
        return
    torch.manual_seed(0)
    model = build()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        randomize_batchnorm(model, gen)
    model.eval()
    x = torch.randn(*shape, generator=gen)
    tmp = dst.with_suffix(".onnx.tmp")
    with torch.no_grad():
        if name in KEEP_BATCHNORM:
            torch.onnx.export(model, x, str(tmp), opset_version=OPSET, input_names=[in_name],
                              output_names=[out_name], do_constant_folding=False,
                              training=torch.onnx.TrainingMode.PRESERVE)
        else:
            torch.onnx.export(model, x, str(tmp), opset_version=OPSET, input_names=[in_name],
                              output_names=[out_name], do_constant_folding=True)
    os.replace(tmp, dst)
    print(f"export_torch: wrote {dst} ({dst.stat().st_size / 1e6:.1f} MB)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE.parent.parent / "build" / "models"))
    ap.add_argument("--only", action="append", choices=sorted(MODELS))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for name in args.only or MODELS:
        export(name, out, args.force)


if __name__ == "__main__":
    main()
