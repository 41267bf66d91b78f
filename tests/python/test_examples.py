"""examples/python/*.py run as a user runs them (a fresh interpreter, the installed package)."""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, torch_cuda_or_skip

EXAMPLES = ROOT / "examples" / "python"


def run(args, cwd):
    r = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_build_and_run(mlp_path, backend, tmp_path):
    out = run([EXAMPLES / "build_and_run_resnet50.py", mlp_path, "--backend", backend], tmp_path)
    assert f"built for {backend}" in out and "y: (1, 10) float32" in out
    assert (tmp_path / "resnet50.plan").exists()


def test_ort_drop_in(mlp_path, tmp_path):
    out = run([EXAMPLES / "ort_drop_in.py", mlp_path], tmp_path)
    assert "input  x tensor(float) ['N', 32]" in out and "y (1, 10) float32" in out


def test_execute_with_bindings(sampan, mlp_path, backend, tmp_path):
    sampan.build(mlp_path, backend=backend).save(tmp_path / "mlp.plan")
    out = run([EXAMPLES / "execute_with_bindings.py", tmp_path / "mlp.plan"], tmp_path)
    lines = out.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith(f"{i} {{'y': ") for i, line in enumerate(lines))


def test_zero_copy_torch(sampan, mlp_path, tmp_path):
    torch_cuda_or_skip(sampan)
    out = run([EXAMPLES / "zero_copy_torch.py", mlp_path], tmp_path)
    assert "y (4, 10) torch.float32 cuda:0 shared" in out, out
