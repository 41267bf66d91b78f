"""deploy/kubernetes/base/scripts/prepare-models.sh, the Deployment's init container, run with the
POSIX shell on a temporary repository: the copy, the plan-cache links keyed by GPU type, plans
shipped in the source seeded into the cache, and its refusals."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy_common import ROOT

SCRIPT = ROOT / "deploy/kubernetes/base/scripts/prepare-models.sh"


def prepare(tmp_path: Path, source: str | None, gpu: str = "NVIDIA-H100-80GB-HBM3") -> subprocess.CompletedProcess:
    env = dict(os.environ, MODEL_DIR=str(tmp_path / "models"), PLAN_CACHE=str(tmp_path / "plans"), GPU_PRODUCT=gpu)
    env["MODEL_SOURCE"] = source if source is not None else ""
    (tmp_path / "models").mkdir(exist_ok=True)
    return subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def source(tmp_path) -> Path:
    src = tmp_path / "source"
    write(src / "resnet/config.pbtxt", 'name: "resnet"\n')
    write(src / "resnet/1/model.onnx", "v1")
    write(src / "resnet/2/model.onnx", "v2")
    write(src / "resnet/2/.sampan/cuda-h100.plan", "shipped plan")
    write(src / "bert/3/model.onnx", "b3")
    write(src / "bert/labels/x.txt", "not a version")
    return src


def test_copies_and_links_plan_caches_by_gpu_type(tmp_path, source):
    p = prepare(tmp_path, str(source))
    assert p.returncode == 0, p.stderr
    assert "3 model versions" in p.stdout
    models, plans = tmp_path / "models", tmp_path / "plans/NVIDIA-H100-80GB-HBM3"
    assert (models / "resnet/config.pbtxt").read_text() == 'name: "resnet"\n'
    assert (models / "resnet/1/model.onnx").read_text() == "v1"
    for model, version in [("resnet", "1"), ("resnet", "2"), ("bert", "3")]:
        link = models / model / version / ".sampan"
        assert link.is_symlink() and link.resolve() == (plans / model / version).resolve()
    assert not (models / "bert/labels/.sampan").exists()
    # A plan shipped with the source seeds the cache; the server then finds it through the link.
    assert (plans / "resnet/2/cuda-h100.plan").read_text() == "shipped plan"
    assert (models / "resnet/2/.sampan/cuda-h100.plan").read_text() == "shipped plan"
    # What the server writes lands in the shared cache.
    (models / "resnet/1/.sampan/cpu.plan").write_text("built")
    assert (plans / "resnet/1/cpu.plan").read_text() == "built"


def test_restart_keeps_the_cache_and_refreshes_the_copy(tmp_path, source):
    assert prepare(tmp_path, str(source)).returncode == 0
    (tmp_path / "models/resnet/1/.sampan/built.plan").write_text("built on the first start")
    (tmp_path / "models/stale").mkdir()
    write(source / "resnet/2/.sampan/cuda-h100.plan", "a newer shipped plan")
    p = prepare(tmp_path, str(source))
    assert p.returncode == 0, p.stderr
    assert not (tmp_path / "models/stale").exists()
    assert (tmp_path / "models/resnet/1/.sampan/built.plan").read_text() == "built on the first start"
    # The cache's plan is kept (the server checks its key and rebuilds a stale one itself).
    assert (tmp_path / "plans/NVIDIA-H100-80GB-HBM3/resnet/2/cuda-h100.plan").read_text() == "shipped plan"


def test_other_gpu_type_gets_its_own_cache(tmp_path, source):
    assert prepare(tmp_path, str(source)).returncode == 0
    assert prepare(tmp_path, str(source), gpu="NVIDIA-L4").returncode == 0
    assert (tmp_path / "models/resnet/1/.sampan").resolve() == (tmp_path / "plans/NVIDIA-L4/resnet/1").resolve()
    assert (tmp_path / "plans/NVIDIA-H100-80GB-HBM3/resnet/1").is_dir()


def test_without_a_source_links_what_a_sync_put_there(tmp_path, source):
    shutil.copytree(source, tmp_path / "models")
    p = prepare(tmp_path, None)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "models/bert/3/.sampan").is_symlink()


@pytest.mark.parametrize("gpu", ["", "../etc", "a/b", ".hidden"])
def test_refuses_a_gpu_product_that_is_no_folder_name(tmp_path, source, gpu):
    p = prepare(tmp_path, str(source), gpu=gpu)
    assert p.returncode != 0


def test_refuses_a_missing_source(tmp_path):
    p = prepare(tmp_path, str(tmp_path / "nowhere"))
    assert p.returncode != 0 and "no model source" in p.stderr
