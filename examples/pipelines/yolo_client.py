#!/usr/bin/env python3
"""Detects objects in an image through the served `detect` pipeline (letterbox, YOLOv5s, NMS, boxes
in the image's pixels). The example's YOLOv5s has random weights: the boxes show the plumbing, not
objects.

  sampan serve --model-repository examples/pipelines/yolo &
  python examples/pipelines/yolo_client.py photo.jpg [--url 127.0.0.1:8000]
"""
import argparse

import numpy as np
import tritonclient.http as httpclient


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--url", default="127.0.0.1:8000")
    ap.add_argument("--top", type=int, default=10, help="print this many detections")
    args = ap.parse_args()
    c = httpclient.InferenceServerClient(args.url)
    with open(args.image, "rb") as f:
        data = np.array([f.read()], dtype=object)
    inp = httpclient.InferInput("IMAGE", [1], "BYTES")
    inp.set_data_from_numpy(data)
    r = c.infer("detect", [inp])
    boxes, scores, classes = r.as_numpy("BOXES"), r.as_numpy("SCORES"), r.as_numpy("CLASSES")
    print(f"{len(scores)} detections")
    for (x1, y1, x2, y2), s, k in list(zip(boxes, scores, classes))[: args.top]:
        print(f"class {k:2d}  score {s:.3f}  box ({x1:.0f}, {y1:.0f}) - ({x2:.0f}, {y2:.0f})")


if __name__ == "__main__":
    main()
