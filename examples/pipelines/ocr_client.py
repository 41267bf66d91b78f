#!/usr/bin/env python3
"""Reads the text of an image through the served `ocr` pipeline, as a user calls it: the encoded
file as one BYTES element, text lines (top to bottom), their boxes and scores back.

  sampan serve --model-repository examples/pipelines/ocr &
  python examples/pipelines/ocr_client.py label.png [--url 127.0.0.1:8000] [--grpc]
"""
import argparse

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--url", default=None, help="host:port (default 127.0.0.1:8000, or :8001 with --grpc)")
    ap.add_argument("--grpc", action="store_true")
    args = ap.parse_args()
    if args.grpc:
        import tritonclient.grpc as client
    else:
        import tritonclient.http as client
    url = args.url or ("127.0.0.1:8001" if args.grpc else "127.0.0.1:8000")
    c = client.InferenceServerClient(url)
    with open(args.image, "rb") as f:
        data = np.array([f.read()], dtype=object)
    inp = client.InferInput("IMAGE", [1], "BYTES")
    inp.set_data_from_numpy(data)
    r = c.infer("ocr", [inp], outputs=[client.InferRequestedOutput(n) for n in ("TEXT", "BOXES", "SCORES")])
    for text, box, score in zip(r.as_numpy("TEXT"), r.as_numpy("BOXES"), r.as_numpy("SCORES")):
        corners = " ".join(f"({x:.0f},{y:.0f})" for x, y in box)
        print(f"{score:.3f}  {text.decode()}  [{corners}]")


if __name__ == "__main__":
    main()
