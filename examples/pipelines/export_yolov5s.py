#!/usr/bin/env python3
"""Exports the YOLOv5s detector of the `yolo` example pipeline: bench/gpu_zoo's layer-for-layer
re-implementation of ultralytics' YOLOv5s (yolo_blocks.py) with the zoo's seeded random weights and
BatchNorm statistics (export_zoo.py: construct + calibrate), as ONNX with a dynamic batch
dimension: images float32 [N, 3, 640, 640] (RGB in [0, 1]) -> output0 [N, 25200, 85] (centre x, y,
w, h in input pixels, objectness, 80 class probabilities).

Runs with Debian's python3-torch (/usr/bin/python3), as tests/models/export_torch.py does.
Usage: /usr/bin/python3 examples/pipelines/export_yolov5s.py OUT.onnx
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu_zoo"))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    if out.exists():
        print(f"export_yolov5s: {out} exists")
        return
    import torch
    import export_zoo

    entry = export_zoo.BY_NAME["yolov5s"]
    model = export_zoo.construct(entry)
    export_zoo.calibrate(model, entry)
    x = torch.rand(1, 3, 640, 640, generator=torch.Generator().manual_seed(1))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    torch.onnx.export(model, (x,), str(tmp), input_names=["images"], output_names=["output0"], opset_version=17,
                      do_constant_folding=True, dynamic_axes={"images": {0: "N"}, "output0": {0: "N"}})
    tmp.rename(out)
    print(f"export_yolov5s: wrote {out}")


if __name__ == "__main__":
    main()
