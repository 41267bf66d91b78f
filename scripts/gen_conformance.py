#!/usr/bin/env python3
"""Materialises the ONNX backend node-test suite into build/conformance/node.

The cases come from the onnx wheel of the Python that runs this script. A wheel that ships
the data (onnx/backend/test/data/node, as the pinned 1.19.1 does) is copied; a wheel that
ships only the case definitions (onnx >= 1.20) has its cases generated from
onnx.backend.test.case.node, in the same layout (model.onnx, test_data_set_0/input_N.pb,
output_N.pb). Either way the suite is written to a fresh folder and swapped in whole, and
the work is skipped when --out already holds the suite of the same onnx version. Cases
whose expected outputs a later onnx release corrected (SUPERSEDED) are left out of older
suites.

Usage: .venv/bin/python scripts/gen_conformance.py [--out build/conformance/node] [--force]
       [--generate] [--expect-onnx VERSION]
  --generate       generate from the case definitions even when the wheel ships data
  --expect-onnx    fail unless the imported onnx is this version (guards against the wrong venv)
"""
import argparse
import os
import shutil
import sys
from pathlib import Path

import onnx

STAMP = ".onnx-version"

# Cases whose expected outputs a later onnx release corrected without an opset bump (the
# models are the same, the data is not), so no importer can pass both versions. Older
# suites leave them out; the newest suite checks them with the corrected data.
SUPERSEDED = {
    # onnx 1.23 Attention errata: softcap before the mask, qk_matmul_output modes 1/2 swapped.
    (1, 23): [
        "test_attention_3d_with_past_and_present_qk_matmul_bias",
        "test_attention_3d_with_past_and_present_qk_matmul_softcap",
        "test_attention_4d_with_past_and_present_qk_matmul_bias",
        "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask",
        "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal",
        "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask",
        "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal",
        "test_attention_4d_with_qk_matmul_bias",
        "test_attention_4d_with_qk_matmul_softcap",
        # LpNormalization of a zero vector: 0, no longer NaN.
        "test_l2normalization_axis_0",
        # QLinearMatMul int8: results out of range saturate (the spec); 1.19.1's data wrapped them
        # around (a true -236 stored as 20). Corrected by 1.23.2 at the latest.
        "test_qlinearmatmul_2D_int8_float16",
        "test_qlinearmatmul_2D_int8_float32",
        "test_qlinearmatmul_3D_int8_float16",
        "test_qlinearmatmul_3D_int8_float32",
        # Cast float -> int4/uint4 of values out of range: 1.19.1's data wrapped them around
        # (-9 -> 7, 8 -> -8), 1.23.2's gives 0 (the case definitions changed, the opset did not).
        *[f"test_{op}_{src}_to_{dst}{suffix}"
          for op, suffixes in (("cast", ("",)), ("castlike", ("", "_expanded")))
          for src in ("FLOAT", "FLOAT16") for dst in ("INT4", "UINT4") for suffix in suffixes],
    ],
}


def version_tuple(version: str) -> tuple:
    parts = []
    for p in version.split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def superseded_cases(version: str) -> list:
    return [c for since, cases in SUPERSEDED.items() if version_tuple(version) < since for c in cases]


def copy_shipped(src: Path, dst: Path, leave_out: list) -> int:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", *leave_out))
    return sum(1 for p in dst.iterdir() if p.is_dir() and p.name.startswith("test_"))


def value_proto(value, type_proto: onnx.TypeProto, name: str) -> bytes:
    """One input or output value as the serialized proto the test-data format expects."""
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return value.SerializeToString()
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        return numpy_helper.from_list(value, name).SerializeToString()
    if kind == "map_type":
        return numpy_helper.from_dict(value, name).SerializeToString()
    if kind == "optional_type":
        return numpy_helper.from_optional(value, name).SerializeToString()
    return numpy_helper.from_array(value, name).SerializeToString()


def generate_from_cases(dst: Path) -> int:
    # Node cases register themselves with expect() when their modules are imported.
    import warnings

    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cases' own numpy warnings (divide by zero, ...)
        cases = node_cases.collect_testcases()
    dst.mkdir(parents=True)
    for case in cases:
        case_dir = dst / case.name
        case_dir.mkdir()
        (case_dir / "model.onnx").write_bytes(case.model.SerializeToString())
        graph = case.model.graph
        for n, (inputs, outputs) in enumerate(case.data_sets):
            data_dir = case_dir / f"test_data_set_{n}"
            data_dir.mkdir()
            for prefix, values, protos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
                for i, value in enumerate(values):
                    (data_dir / f"{prefix}_{i}.pb").write_bytes(value_proto(value, protos[i].type, protos[i].name))
    return len(cases)


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(root / "build" / "conformance" / "node"))
    ap.add_argument("--force", action="store_true", help="write even if up to date")
    ap.add_argument("--generate", action="store_true", help="generate from the case definitions")
    ap.add_argument("--expect-onnx", metavar="VERSION", help="fail unless onnx is this version")
    args = ap.parse_args()

    if args.expect_onnx and onnx.__version__ != args.expect_onnx:
        print(f"gen_conformance: onnx {onnx.__version__} imported, {args.expect_onnx} expected "
              f"({sys.executable})", file=sys.stderr)
        return 1
    src = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "node"
    generate = args.generate or not src.is_dir()
    leave_out = [] if generate else superseded_cases(onnx.__version__)
    # The stamp names the source; the number of cases is only known after the work.
    want = f"onnx {onnx.__version__} {'generated from case definitions' if generate else 'shipped data'}"
    if leave_out:
        want += f" without {len(leave_out)} superseded cases"

    out = Path(args.out)
    stamp = out / STAMP
    if not args.force and not out.is_symlink() and stamp.is_file() and stamp.read_text().startswith(want + ","):
        print(f"gen_conformance: {out} up to date ({stamp.read_text().strip()})")
        return 0

    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    count = generate_from_cases(tmp) if generate else copy_shipped(src, tmp, leave_out)
    if leave_out:
        print(f"gen_conformance: left out {len(leave_out)} cases whose expected outputs a later onnx "
              f"corrected: {' '.join(leave_out)}")
    (tmp / STAMP).write_text(f"{want}, {count} cases\n")
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
    print(f"gen_conformance: wrote {count} cases to {out} ({want})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
