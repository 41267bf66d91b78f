"""deploy/kubernetes: every overlay renders with `kubectl kustomize`; core kinds pass
`kubernetes-validate --strict` against Kubernetes 1.30 and the newest schemas it ships; custom
resources pass `check-jsonschema` against deploy/schemas; a typo'd field fails both; and the
relations that keep the manifests coherent hold in every variant (flags that `sampan serve`
has, ports, probes, the grace period against --exit-timeout-secs, GPU resources against node
affinity and the plan cache key, selectors, the HPA's metric against the adapter's rules)."""

import copy
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy_common import OVERLAYS, RENDERED, ROOT, SCHEMAS, find, one, rendered, run, tool  # noqa: F401 (fixture)

K8S_VERSIONS = ["1.30.0", "1.37.0"]  # the oldest this packaging supports, the newest schemas shipped
CRD_SCHEMAS = {
    "ServiceMonitor": "servicemonitor.yaml",
    "PrometheusRule": "prometheusrule.yaml",
    "ScaledObject": "scaledobject.yaml",
    "HTTPRoute": "gateway-api.yaml",
    "GRPCRoute": "gateway-api.yaml",
    "DestinationRule": "destinationrule.yaml",
}
CORE_KINDS = {"Deployment", "Service", "ConfigMap", "PersistentVolumeClaim", "PodDisruptionBudget",
              "HorizontalPodAutoscaler"}


def write_docs(path: Path, docs: list) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def kubernetes_validate(path: Path, version: str) -> subprocess.CompletedProcess:
    return run([tool("kubernetes-validate"), "--strict", "--quiet", "-k", version, path])


def check_jsonschema(schema: str, paths: list) -> subprocess.CompletedProcess:
    return run([tool("check-jsonschema"), "--schemafile", SCHEMAS / schema, *paths])


# ---------------------------------------------------------------------------------------------
# Rendering and schema validation


@pytest.mark.parametrize("name", list(RENDERED))
def test_every_kind_is_known(rendered, name):
    kinds = {d["kind"] for d in rendered[name]}
    unknown = kinds - CORE_KINDS - set(CRD_SCHEMAS)
    assert not unknown, f"{name}: no validation set up for {unknown}"


def test_overlays_hold_what_they_promise(rendered):
    def kinds(name):
        return sorted(d["kind"] for d in rendered[name])

    common = ["ConfigMap", "ConfigMap", "Deployment", "PersistentVolumeClaim", "PersistentVolumeClaim",
              "PodDisruptionBudget", "PrometheusRule", "Service", "Service", "ServiceMonitor"]
    for name in ["cpu", "gpu", "mig", "cpu-live"]:
        assert kinds(name) == sorted(common + ["HorizontalPodAutoscaler"]), name
    assert kinds("keda") == sorted(common + ["ScaledObject"])  # KEDA owns the HPA it makes
    full = list(common)
    full.remove("PersistentVolumeClaim")  # the repository comes from object storage
    assert kinds("full") == sorted(full + ["HorizontalPodAutoscaler", "HTTPRoute", "GRPCRoute",
                                           "DestinationRule"])


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", list(RENDERED))
def test_core_kinds_validate_strictly(rendered, tmp_path, name, version):
    core = [d for d in rendered[name] if d["kind"] in CORE_KINDS]
    assert core
    p = kubernetes_validate(write_docs(tmp_path / f"{name}.yaml", core), version)
    assert p.returncode == 0, f"{name} against {version}:\n{p.stdout}{p.stderr}"


@pytest.mark.parametrize("name", list(RENDERED))
def test_custom_resources_validate(rendered, tmp_path, name):
    by_schema = {}
    for i, d in enumerate(rendered[name]):
        if d["kind"] in CRD_SCHEMAS:
            path = write_docs(tmp_path / f"{i}-{d['kind']}.yaml", [d])
            by_schema.setdefault(CRD_SCHEMAS[d["kind"]], []).append(path)
    if name == "prometheus-adapter":
        assert not by_schema
        return
    assert "servicemonitor.yaml" in by_schema and "prometheusrule.yaml" in by_schema
    for schema, paths in by_schema.items():
        p = check_jsonschema(schema, paths)
        assert p.returncode == 0, f"{name}, {schema}:\n{p.stdout}{p.stderr}"


def test_adapter_config_validates(tmp_path):
    p = check_jsonschema("prometheus-adapter-config.yaml",
                         [ROOT / "deploy/kubernetes/prometheus-adapter/config.yaml"])
    assert p.returncode == 0, p.stdout + p.stderr


# A misspelt field must fail validation: one typo per validated kind, at the depth where
# the real field lives (the API server would drop it silently, or the operator ignore it).
def rename_key(obj, path, new):
    *parents, last = path
    for key in parents:
        obj = obj[key]
    obj[new] = obj.pop(last)


TYPOS = [
    # (overlay, kind, path to the field, misspelling)
    ("cpu", "Deployment", ["spec", "template", "spec", "containers", 0, "readinessProbe"], "readinesProbe"),
    ("gpu", "Deployment", ["spec", "template", "spec", "terminationGracePeriodSeconds"],
     "terminationGracePeriodSecond"),
    ("cpu", "HorizontalPodAutoscaler", ["spec", "behavior", "scaleDown", "stabilizationWindowSeconds"],
     "stabilisationWindowSeconds"),
    ("cpu", "PodDisruptionBudget", ["spec", "maxUnavailable"], "maxUnavailible"),
    ("cpu", "ServiceMonitor", ["spec", "endpoints", 0, "interval"], "intervall"),
    ("cpu", "PrometheusRule", ["spec", "groups", 2, "rules", 0, "for"], "four"),
    ("keda", "ScaledObject", ["spec", "triggers", 0, "metadata", "threshold"], "treshold"),
    ("keda", "ScaledObject", ["spec", "advanced", "horizontalPodAutoscalerConfig"], "horizontalPodAutoscalerConfg"),
    ("full", "HTTPRoute", ["spec", "rules", 0, "backendRefs"], "backendRef"),
    ("full", "GRPCRoute", ["spec", "rules", 0, "matches", 0, "method", "service"], "servce"),
    ("full", "DestinationRule", ["spec", "trafficPolicy", "outlierDetection", "consecutive5xxErrors"],
     "consecutive5xxError"),
]


@pytest.mark.parametrize("name,kind,path,typo", TYPOS, ids=[f"{t[1]}.{t[3]}" for t in TYPOS])
def test_typo_fails_validation(rendered, tmp_path, name, kind, path, typo):
    doc = copy.deepcopy(one(rendered[name], kind))
    rename_key(doc, path, typo)
    bad = write_docs(tmp_path / "typo.yaml", [doc])
    if kind in CORE_KINDS:
        p = kubernetes_validate(bad, K8S_VERSIONS[0])
    else:
        p = check_jsonschema(CRD_SCHEMAS[kind], [bad])
    assert p.returncode != 0, f"{kind} with '{typo}' passed validation"
    assert typo in p.stdout + p.stderr, f"the error does not name '{typo}':\n{p.stdout}{p.stderr}"


def test_typo_in_adapter_config_fails(tmp_path):
    config = yaml.safe_load((ROOT / "deploy/kubernetes/prometheus-adapter/config.yaml").read_text())
    config["rules"][0]["metricQuery"] = config["rules"][0].pop("metricsQuery")
    bad = write_docs(tmp_path / "adapter.yaml", [config])
    p = check_jsonschema("prometheus-adapter-config.yaml", [bad])
    assert p.returncode != 0 and "metricQuery" in p.stdout


# ---------------------------------------------------------------------------------------------
# Coherence of each variant

SERVE_FLAGS = set(re.findall(r'add_(?:option|flag)\("((?:--[a-z0-9-]+,?)+)',
                             (ROOT / "src/cli/serve.cpp").read_text()))
SERVE_FLAGS = {f for group in SERVE_FLAGS for f in group.split(",")}
DEPLOYMENTS = OVERLAYS


def deployment(rendered, name):
    return one(rendered[name], "Deployment", "sampan")


def server(dep):
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "sampan"]
    return c


def flag_values(args):
    out = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            out[a] = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
    return out


def test_serve_flags_found_in_source():
    assert {"--model-repository", "--http-port", "--exit-timeout-secs"} <= SERVE_FLAGS


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_server_command_and_ports(rendered, name):
    c = server(deployment(rendered, name))
    assert c["command"] == ["/usr/local/bin/sampan", "serve"]
    flags = flag_values(c["args"])
    unknown = set(flags) - SERVE_FLAGS
    assert not unknown, f"flags sampan serve does not have (src/cli/serve.cpp): {unknown}"
    assert flags["--model-repository"] == "/models"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert flags["--http-port"] == "8000" and flags["--grpc-port"] == "8001" and flags["--metrics-port"] == "8002"


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_probes_follow_triton(rendered, name):
    c = server(deployment(rendered, name))
    for probe, path in [("startupProbe", "/v2/health/ready"), ("readinessProbe", "/v2/health/ready"),
                        ("livenessProbe", "/v2/health/live")]:
        assert c[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    s = c["startupProbe"]
    budget = s["periodSeconds"] * s["failureThreshold"]
    gpu = name not in ("cpu", "cpu-live")
    # Plan builds: 10 min on a CPU, 30 min for a GPU's cold cache (build + tactic tuning).
    assert budget >= (1800 if gpu else 600), f"startup budget {budget} s"
    # Once started, a dead server is restarted within a minute.
    live = c["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] <= 60


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_grace_period_covers_prestop_and_exit_timeout(rendered, name):
    dep = deployment(rendered, name)
    c = server(dep)
    exit_timeout = int(flag_values(c["args"])["--exit-timeout-secs"])
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # SIGTERM comes after preStop; the server then drains for up to exit_timeout seconds.
    assert pre_stop + exit_timeout + 5 <= grace <= pre_stop + exit_timeout + 30, (pre_stop, exit_timeout, grace)


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_runs_as_non_root(rendered, name):
    pod = deployment(rendered, name)["spec"]["template"]["spec"]
    sc = pod["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0 and sc["seccompProfile"]["type"] == "RuntimeDefault"
    for c in pod["containers"] + pod.get("initContainers", []):
        csc = c["securityContext"]
        assert csc["allowPrivilegeEscalation"] is False, c["name"]
        assert csc["readOnlyRootFilesystem"] is True, c["name"]
        assert csc["capabilities"]["drop"] == ["ALL"], c["name"]


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_volumes_and_config_maps_resolve(rendered, name):
    docs = rendered[name]
    pod = deployment(rendered, name)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for c in pod["containers"] + pod.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{c['name']} mounts {m['name']}, which is no volume"
    config_maps = {d["metadata"]["name"] for d in find(docs, "ConfigMap")}
    claims = {d["metadata"]["name"] for d in find(docs, "PersistentVolumeClaim")}
    for v in volumes.values():
        if "configMap" in v:
            assert v["configMap"]["name"] in config_maps
        if "persistentVolumeClaim" in v:
            assert v["persistentVolumeClaim"]["claimName"] in claims
    for c in pod.get("initContainers", []):
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("configMapKeyRef")
            if ref:
                assert ref["name"] in config_maps


def accelerator(rendered, name):
    cm = [d for d in find(rendered[name], "ConfigMap") if d["metadata"]["name"].startswith("sampan-accelerator")]
    assert len(cm) == 1
    return cm[0]["data"]["gpu-product"]


def gpu_products(pod):
    terms = pod.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    return [v for t in terms for e in t["matchExpressions"] if e["key"] == "nvidia.com/gpu.product"
            for v in e["values"]]


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_accelerator_resources_affinity_and_plan_cache_key(rendered, name):
    pod = deployment(rendered, name)["spec"]["template"]["spec"]
    labels = deployment(rendered, name)["spec"]["template"]["metadata"]["labels"]
    limits = server(deployment(rendered, name))["resources"]["limits"]
    products = gpu_products(pod)
    key = accelerator(rendered, name)
    if name in ("cpu", "cpu-live"):
        assert not any(r.startswith("nvidia.com/") for r in limits)
        assert not products and key == "cpu" and labels["sampan.dev/accelerator"] == "cpu"
        return
    assert labels["sampan.dev/accelerator"] == "gpu"
    assert products, "a GPU variant is pinned to a GPU product (the plans are built for it)"
    mig = [r for r in limits if r.startswith("nvidia.com/mig-")]
    if name == "mig":
        assert "nvidia.com/gpu" not in limits and len(mig) == 1 and limits[mig[0]] == 1
        profile = mig[0].removeprefix("nvidia.com/mig-")
        # Plans are built per slice type: the cache key names the product and the profile.
        assert key in {f"{p}-MIG-{profile}" for p in products}
    else:
        assert limits["nvidia.com/gpu"] == 1 and not mig
        assert key in products, "the plan cache folder must be the GPU type the pods run on"


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_spread_over_nodes_and_zones(rendered, name):
    pod_spec = deployment(rendered, name)["spec"]["template"]
    keys = {c["topologyKey"]: c for c in pod_spec["spec"]["topologySpreadConstraints"]}
    assert set(keys) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    for c in keys.values():
        assert c["labelSelector"]["matchLabels"].items() <= pod_spec["metadata"]["labels"].items()


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_services_pdb_and_scrape_select_the_pods(rendered, name):
    docs = rendered[name]
    dep = deployment(rendered, name)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    svc = one(docs, "Service", "sampan")
    headless = one(docs, "Service", "sampan-headless")
    assert headless["spec"]["clusterIP"] == "None"
    for s in (svc, headless):
        assert s["spec"]["selector"].items() <= pod_labels.items()
        assert {p["name"]: p["port"] for p in s["spec"]["ports"]} == {"http": 8000, "grpc": 8001, "metrics": 8002}
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    sm = one(docs, "ServiceMonitor")
    selected = [s for s in find(docs, "Service")
                if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"].get("labels", {}).items()]
    assert [s["metadata"]["name"] for s in selected] == ["sampan"], "scrape each pod once, through one Service"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    # The GPU alerts read the accelerator label that the ServiceMonitor copies from the pods.
    assert "sampan.dev/accelerator" in sm["spec"]["podTargetLabels"]


def recorded(docs):
    rules = one(docs, "PrometheusRule")["spec"]["groups"]
    return {r["record"] for g in rules for r in g["rules"] if "record" in r}


@pytest.mark.parametrize("name", ["cpu", "gpu", "mig", "full", "cpu-live"])
def test_hpa_scales_on_the_adapters_metric(rendered, name):
    hpa = one(rendered[name], "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "sampan"}
    (m,) = hpa["spec"]["metrics"]
    assert m["type"] == "Pods" and m["pods"]["target"] == {"type": "AverageValue", "averageValue": "700m"}
    adapter = yaml.safe_load(one(rendered["prometheus-adapter"], "ConfigMap")["data"]["config.yaml"])
    served = {r["name"]["as"]: r for r in adapter["rules"]}
    rule = served[m["pods"]["metric"]["name"]]
    series = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{", rule["seriesQuery"]).group(1)
    assert series in recorded(rendered[name]), "the adapter serves a series the PrometheusRule records"
    b = hpa["spec"]["behavior"]
    assert b["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert b["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert hpa["spec"]["minReplicas"] >= 2  # the PDB's maxUnavailable 1 leaves one pod serving


def test_keda_replaces_the_hpa(rendered):
    docs = rendered["keda"]
    so = one(docs, "ScaledObject")
    assert so["spec"]["scaleTargetRef"]["name"] == "sampan"
    (t,) = so["spec"]["triggers"]
    assert t["type"] == "prometheus" and t["metadata"]["threshold"] == "0.7"
    used = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*:[a-zA-Z0-9_:]+", t["metadata"]["query"]))
    assert used and used <= recorded(docs)
    hpa_behavior = one(rendered["gpu"], "HorizontalPodAutoscaler")["spec"]["behavior"]
    assert so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa_behavior


def test_object_storage_syncs_before_linking_plans(rendered):
    pod = deployment(rendered, "full")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["sync-models", "prepare-models"]
    prep = pod["initContainers"][1]
    assert {e["name"]: e.get("value") for e in prep["env"]}["MODEL_SOURCE"] == ""
    assert "model-source" not in {v["name"] for v in pod["volumes"]}


def test_live_repository_serves_in_place_in_poll_mode(rendered):
    dep = deployment(rendered, "cpu-live")
    pod = dep["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    flags = flag_values(server(dep)["args"])
    assert flags["--model-control-mode"] == "poll"
    models = {v["name"]: v for v in pod["volumes"]}["models"]
    assert models == {"name": "models", "persistentVolumeClaim": {"claimName": "sampan-models"}}
    claim = one(rendered["cpu-live"], "PersistentVolumeClaim", "sampan-models")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
