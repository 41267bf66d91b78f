#!/usr/bin/env python3
"""Materialises the ONNX backend node-test suite into build/conformance/node.

The cases come from the pinned onnx wheel in .venv (onnx/backend/test/data/node) and are
copied (not symlinked) so the suite stays fixed even if the venv changes. The copy is
skipped when build/conformance/node already holds the suite of the same onnx version.

Usage: .venv/bin/python scripts/gen_conformance.py [--out build/conformance/node] [--force]
"""
import argparse
import os
import shutil
import sys
from pathlib import Path

import onnx

STAMP = ".onnx-version"


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(root / "build" / "conformance" / "node"))
    ap.add_argument("--force", action="store_true", help="copy even if up to date")
    args = ap.parse_args()

    src = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "node"
    if not src.is_dir():
        print(f"gen_conformance: {src} not found (onnx {onnx.__version__})", file=sys.stderr)
        return 1
    cases = sorted(p.name for p in src.iterdir() if p.is_dir() and p.name.startswith("test_"))
    want = f"onnx {onnx.__version__} {len(cases)} cases\n"

    out = Path(args.out)
    stamp = out / STAMP
    if not args.force and not out.is_symlink() and stamp.is_file() and stamp.read_text() == want:
        print(f"gen_conformance: {out} up to date ({want.strip()})")
        return 0

    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / STAMP).write_text(want)
    # Swap in the fresh copy. An older copy or a symlink from a manual set-up is replaced.
    if out.is_symlink() or out.is_file():
        out.unlink()
    elif out.exists():
        old = out.with_name(out.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        os.rename(out, old)
        shutil.rmtree(old)
    os.rename(tmp, out)
    print(f"gen_conformance: wrote {len(cases)} cases to {out} ({want.strip()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
