"""`sampan deploy kubernetes`: an overlay for a model repository, sized from the figures its versions
were published with. On the CPU: models published by `sampan publish` here (real bench figures),
the overlay rendered by `kubectl kustomize` and validated strictly, and every number of the rendered
Deployment and HPA traced back through sizing.json to the reports. The GPU path reads a report as a
GPU machine writes it (the fields `sampan publish` fills there: backend cuda, the device name, the
device memory one engine and context took); no GPU runs here. Plus the refusals, each naming what
is wrong."""

import json
import math
import os
import subprocess

import numpy as np
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from deploy_common import ROOT, SAMPAN, kustomize, one, tool
from test_manifests import CORE_KINDS, K8S_VERSIONS, kubernetes_validate, write_docs

OVERLAYS = ROOT / "deploy" / "kubernetes" / "overlays"


def sampan(*args, check=True):
    r = subprocess.run([SAMPAN, *[str(a) for a in args]], capture_output=True, text=True, timeout=180)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def mlp(width):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])
    w = numpy_helper.from_array(np.random.default_rng(width).standard_normal((width, width)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                          "mlp", [x], [y], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def config(name, width, count, slo=None):
    return (f'name: "{name}"\nmax_batch_size: 8\ninput [ {{ name: "x" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
            f'output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
            f'instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n'
            + (f"sampan {{ latency_slo_ms: {slo} }}\n" if slo else ""))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    if not os.path.exists(SAMPAN):
        pytest.skip(f"no sampan binary at {SAMPAN} (set SAMPAN_BIN)")
    d = tmp_path_factory.mktemp("deploy")
    r = d / "repo"
    r.mkdir()
    for name, width, count, slo in (("small", 64, 2, 5), ("wide", 512, 1, None)):
        (d / f"{name}.onnx").write_bytes(mlp(width))
        (d / f"{name}.pbtxt").write_text(config(name, width, count, slo))
        sampan("publish", "--onnx", d / f"{name}.onnx", "--repository", r, "--model", name, "--config",
               d / f"{name}.pbtxt", "--benchSecs", 0.3)
    return r


def reports(repo):
    return {m: json.loads((repo / m / "1" / "report.json").read_text()) for m in ("small", "wide")}


def test_cpu_overlay_renders_validates_and_traces_to_the_reports(repo, tmp_path):
    out = tmp_path / "overlay"
    r = sampan("deploy", "kubernetes", "--repository", repo, "--out", out, "--base", OVERLAYS / "cpu",
               "--peak-rps", "small=40000", "--peak-rps", "wide=3000", "--min-replicas", 1)
    assert "Assumed:" in r.stdout
    docs = kustomize(out)
    for version in K8S_VERSIONS:
        core = [d for d in docs if d["kind"] in CORE_KINDS]
        p = kubernetes_validate(write_docs(tmp_path / f"core-{version}.yaml", core), version)
        assert p.returncode == 0, p.stdout + p.stderr

    sizing = json.loads((out / "sizing.json").read_text())
    rep = reports(repo)
    by_model = {m["model"]: m for m in sizing["models"]}
    assert sizing["variant"] == "cpu" and set(by_model) == {"small", "wide"}
    for name, m in by_model.items():
        bench = rep[name]["bench"]
        assert m["source"] == str(repo / name / "1" / "report.json")
        assert m["inferences_per_second"] == pytest.approx(bench["inferences_per_second"], rel=1e-5)
        assert m["p99_ms"] == pytest.approx(bench["latency_ms"]["p99"], rel=1e-5)
        plan = sum(f["bytes"] for k, f in rep[name]["files"].items() if k.endswith(".plan"))
        assert m["plan_bytes"] == plan and m["memory_bytes_per_instance"] >= plan
    assert by_model["small"]["instances"] == 2 and by_model["wide"]["instances"] == 1
    assert by_model["small"]["slo_ms"] == 5 and by_model["wide"]["slo_ms"] is None

    # The HPA: the target from the tightest SLO's headroom, the replicas the peaks need.
    small = by_model["small"]
    assert sizing["target_saturation"] == pytest.approx(min(0.7, max(0.3, 1 - small["p99_ms"] / 5)), abs=1e-3)
    load = 40000 / small["inferences_per_second"] + 3000 / by_model["wide"]["inferences_per_second"]
    assert sizing["load_replicas"] == pytest.approx(load, rel=1e-3)
    need = math.ceil(load / sizing["target_saturation"])
    assert sizing["replicas_needed_at_peak"] == need
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["minReplicas"] == 1 and hpa["spec"]["maxReplicas"] == max(10, need)
    target = hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"]
    assert target == f"{round(sizing['target_saturation'] * 1000)}m"
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300  # the base's, kept

    # The pod: requests from the measured memory per instance x instances, one core per instance.
    res = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["resources"]
    mem = sum(m["memory_bytes_per_instance"] * m["instances"] for m in sizing["models"]) + 2 * 2**30
    want = f"{math.ceil(max(mem, 4 * 2**30) / 2**20)}Mi"
    assert res["requests"]["memory"] == want == sizing["requests"]["memory"]
    assert res["requests"]["cpu"] == "3" and res["limits"]["memory"] == sizing["limits"]["memory"]
    assert "--backend" in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]


def fake_gpu_report(vdir, device="NVIDIA H100 80GB HBM3", rate=18000.0, p99=7.5, device_bytes=3 * 2**30):
    """report.json as `sampan publish` writes it on a GPU machine (the fields sizing reads)."""
    vdir.mkdir(parents=True)
    (vdir / "model.onnx").write_bytes(mlp(8))
    (vdir / "report.json").write_text(json.dumps({
        "model": vdir.parent.name, "version": 1, "files": {".sampan/model.cuda.NVIDIA_H100_80GB_HBM3_sm90.plan":
                                                             {"sha256": "0" * 64, "bytes": 220 * 2**20}},
        "bench": {"batch": 32, "iterations": 500, "latency_ms": {"p50": p99 * 0.9, "p99": p99},
                  "inferences_per_second": rate, "instances": 1, "backend": "cuda", "isa": "avx512",
                  "device": device, "memory": {"host_bytes": 2**28, "device_bytes": device_bytes}},
        "canary": None}))


def test_gpu_overlay_from_gpu_figures(tmp_path):
    repo = tmp_path / "repo"
    fake_gpu_report(repo / "bert" / "1")
    (repo / "bert" / "config.pbtxt").write_text(
        'name: "bert"\nmax_batch_size: 32\ninstance_group [ { count: 3 kind: KIND_GPU } ]\n'
        'sampan { latency_slo_ms: 25 }\n')
    out = tmp_path / "overlay"
    sampan("deploy", "kubernetes", "--repository", repo, "--out", out, "--base", OVERLAYS / "gpu",
           "--peak-rps", "bert=60000", "--max-replicas", 20)
    docs = kustomize(out)
    core = [d for d in docs if d["kind"] in CORE_KINDS]
    p = kubernetes_validate(write_docs(tmp_path / "core.yaml", core), K8S_VERSIONS[-1])
    assert p.returncode == 0, p.stdout + p.stderr
    sizing = json.loads((out / "sizing.json").read_text())
    assert sizing["variant"] == "gpu" and sizing["gpu_product"] == "NVIDIA-H100-80GB-HBM3"
    assert sizing["gpu_memory_needed_bytes"] == 3 * 3 * 2**30
    assert sizing["models"][0]["max_instances_per_gpu"] == int(0.9 * 80 * 2**30 / (3 * 2**30))
    assert sizing["target_saturation"] == pytest.approx(0.7)  # 1 - 7.5/25 = 0.7
    assert sizing["replicas_needed_at_peak"] == math.ceil(60000 / 18000 / 0.7) == 5
    dep = one(docs, "Deployment")["spec"]["template"]["spec"]
    term = dep["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term[0]["matchExpressions"][0]["values"] == ["NVIDIA-H100-80GB-HBM3"]
    assert dep["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("sampan-accelerator")]
    assert cm and cm[0]["data"]["gpu-product"] == "NVIDIA-H100-80GB-HBM3"
    assert one(docs, "HorizontalPodAutoscaler")["spec"]["maxReplicas"] == 20


@pytest.mark.parametrize("case,message", [
    ("cpu figures, gpu overlay", "was benchmarked on backend 'cpu'"),
    ("two GPU types", "figures from one GPU type do not carry over"),
    ("too much GPU memory", "more than 90% of the NVIDIA-H100-80GB-HBM3's 80 GiB"),
    ("no bench", "\"bench\" is missing"),
    ("unknown peak model", "--peak-rps names model 'nope'"),
    ("bad peak", "expected MODEL=REQUESTS_PER_SECOND"),
    ("infinite peak", "expected MODEL=REQUESTS_PER_SECOND"),
    ("bad variant", "--variant 'tpu' is not one of cpu, gpu, mig"),
    ("mig without memory", "--variant mig: give --gpu-memory-gib"),
])
def test_refusals_name_the_problem(repo, tmp_path, case, message):
    r2 = tmp_path / "repo"
    args = ["--base", OVERLAYS / "gpu"]
    if case == "cpu figures, gpu overlay":
        src = repo
        args += ["--variant", "gpu"]
    elif case == "two GPU types":
        fake_gpu_report(r2 / "a" / "1")
        fake_gpu_report(r2 / "b" / "1", device="NVIDIA H200")
        src = r2
    elif case == "too much GPU memory":
        fake_gpu_report(r2 / "a" / "1", device_bytes=30 * 2**30)
        (r2 / "a" / "config.pbtxt").write_text('name: "a"\ninstance_group [ { count: 3 kind: KIND_GPU } ]\n')
        src = r2
    elif case == "no bench":
        (tmp_path / "m.onnx").write_bytes(mlp(8))
        r2.mkdir()
        sampan("publish", "--onnx", tmp_path / "m.onnx", "--repository", r2, "--model", "m", "--benchSecs", 0)
        src = r2
    elif case == "unknown peak model":
        src, args = repo, ["--base", OVERLAYS / "cpu", "--peak-rps", "nope=5"]
    elif case == "bad peak":
        src, args = repo, ["--base", OVERLAYS / "cpu", "--peak-rps", "small"]
    elif case == "infinite peak":
        src, args = repo, ["--base", OVERLAYS / "cpu", "--peak-rps", "small=inf"]
    elif case == "bad variant":
        src, args = repo, ["--variant", "tpu"]
    else:
        fake_gpu_report(r2 / "a" / "1")
        src, args = r2, ["--variant", "mig", "--base", OVERLAYS / "mig"]
    r = sampan("deploy", "kubernetes", "--repository", src, "--out", tmp_path / "o", *args, check=False)
    assert r.returncode != 0 and message in r.stderr, r.stderr


@pytest.mark.parametrize("example", ["ocr", "vision", "text"])
def test_example_repositories_size_and_validate(example, tmp_path):
    """examples/repositories: their committed report.json files are what `publish.sh --keep-reports`
    wrote on the machine each report names; the overlay sized from them renders, validates, and
    carries their figures."""
    if not os.path.exists(SAMPAN):
        pytest.skip(f"no sampan binary at {SAMPAN} (set SAMPAN_BIN)")
    repo = ROOT / "examples" / "repositories" / example
    out = tmp_path / "overlay"
    sampan("deploy", "kubernetes", "--repository", repo, "--out", out, "--base", OVERLAYS / "cpu")
    docs = kustomize(out)
    core = [d for d in docs if d["kind"] in CORE_KINDS]
    p = kubernetes_validate(write_docs(tmp_path / "core.yaml", core), K8S_VERSIONS[-1])
    assert p.returncode == 0, p.stdout + p.stderr
    sizing = json.loads((out / "sizing.json").read_text())
    models = sorted(d.name for d in repo.iterdir() if (d / "config.pbtxt").exists())
    assert sorted(m["model"] for m in sizing["models"]) == models
    for m in sizing["models"]:
        report = json.loads((repo / m["model"] / "1" / "report.json").read_text())
        assert m["inferences_per_second"] == pytest.approx(report["bench"]["inferences_per_second"], rel=1e-5)
        assert m["slo_ms"] and m["instances"] >= 1
    res = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["requests"]["memory"] == sizing["requests"]["memory"]
