#!/usr/bin/env python3
"""Copies the PaddleOCR (PP-OCRv4 det/rec, mobile v2.0 cls) ONNX models and the character
dictionary out of the pinned rapidocr package into build/models/ (skipped when up to date).

Usage: .venv/bin/python tests/models/copy_ocr.py [--out build/models]
"""
import argparse
import importlib.util
import shutil
import sys
from pathlib import Path

FILES = {
    "ch_PP-OCRv4_det_infer.onnx": "ocr_det.onnx",
    "ch_PP-OCRv4_rec_infer.onnx": "ocr_rec.onnx",
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": "ocr_cls.onnx",
    "ppocr_keys_v1.txt": "ppocr_keys_v1.txt",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "build" / "models"))
    args = ap.parse_args()
    spec = importlib.util.find_spec("rapidocr")  # locate without importing (deps not installed)
    if spec is None or not spec.submodule_search_locations:
        sys.exit("copy_ocr: package rapidocr is not installed (run scripts/setup.sh)")
    src_dir = Path(list(spec.submodule_search_locations)[0]) / "models"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for src_name, dst_name in FILES.items():
        src, dst = src_dir / src_name, out / dst_name
        if dst.exists() and dst.stat().st_size == src.stat().st_size and dst.stat().st_mtime >= src.stat().st_mtime:
            print(f"copy_ocr: {dst} up to date")
            continue
        shutil.copy2(src, dst)
        print(f"copy_ocr: wrote {dst}")


if __name__ == "__main__":
    main()
