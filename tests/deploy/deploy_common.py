"""What the deploy/ tests share (a module, not a conftest.py, so that tests/server's conftest is never
imported in its place): the tools (from .venv, where scripts/test_deploy.sh installs
them, else PATH) and every kustomization rendered once with `kubectl kustomize`."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# The binary the live tests run: $SAMPAN_BIN, else the ASan build every stage of scripts/test.sh uses.
SAMPAN = os.environ.get("SAMPAN_BIN") or str(ROOT / "build-asan" / "sampan")
KUSTOMIZE_DIR = ROOT / "deploy" / "kubernetes"
SCHEMAS = ROOT / "deploy" / "schemas"

# Every kustomization CI renders: the four variants the issue asks for, the components in the
# two overlays that use them, and prometheus-adapter's rules.
OVERLAYS = ["cpu", "gpu", "mig", "keda", "full", "cpu-live"]
RENDERED = {name: KUSTOMIZE_DIR / "overlays" / name for name in OVERLAYS}
RENDERED["prometheus-adapter"] = KUSTOMIZE_DIR / "prometheus-adapter"


def tool(name: str) -> str:
    """The venv's copy of a tool (scripts/requirements-deploy.txt pins it), else PATH's."""
    venv = Path(sys.executable).parent / name
    if venv.exists():
        return str(venv)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: scripts/test_deploy.sh installs it")
    return found


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120, **kw)


def kustomize(path: Path) -> list:
    p = run([tool("kubectl"), "kustomize", path])
    assert p.returncode == 0, f"kubectl kustomize {path} failed:\n{p.stderr}"
    return [d for d in yaml.safe_load_all(p.stdout) if d]


@pytest.fixture(scope="session")
def rendered() -> dict:
    return {name: kustomize(path) for name, path in RENDERED.items()}


def find(docs: list, kind: str, name: str | None = None) -> list:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list, kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
