"""The PrometheusRule's recording rules and alerts under `promtool test rules` on synthetic
series (tests/deploy/rules_test.yaml: steady, burst, short burst, errors, one pod stuck), with
prometheus-adapter's queries expanded as the adapter expands them for the HPA; every rule must
be exercised and every alert seen firing; a weakened alert must make the tests fail; and
`promtool check config` passes for the scrape configuration."""

import copy
import re
import shutil
from pathlib import Path

import pytest
import yaml

from deploy_common import ROOT, one, rendered, run  # noqa: F401 (fixture)

RULES_TEST = Path(__file__).with_name("rules_test.yaml")
# What the adapter substitutes for the HPA's Pods metric in namespace prod (the pods of the
# scale target, grouped by pod): the names rules_test.yaml uses.
ADAPTER_MATCHERS = 'namespace="prod",pod=~"sampan-a|sampan-b|sampan-c"'


def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.fail("promtool not found (Debian's prometheus package; scripts/test_deploy.sh installs it)")
    return found


def rule_groups(rendered) -> list:
    return one(rendered["cpu"], "PrometheusRule")["spec"]["groups"]


def adapter_rules(rendered) -> list:
    """Each adapter rule's metricsQuery as the adapter runs it for the HPA, recorded as
    adapter:<metric name>, and the HPA's desired replicas on the saturation metric."""
    config = yaml.safe_load(one(rendered["prometheus-adapter"], "ConfigMap")["data"]["config.yaml"])
    hpa = one(rendered["cpu"], "HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    target = metric["pods"]["target"]["averageValue"]
    target = float(target[:-1]) / 1000 if target.endswith("m") else float(target)
    rules = []
    for r in config["rules"]:
        series = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{", r["seriesQuery"]).group(1)
        expr = (r["metricsQuery"].replace("<<.Series>>", series)
                .replace("<<.LabelMatchers>>", ADAPTER_MATCHERS).replace("<<.GroupBy>>", "pod"))
        assert "<<" not in expr, f"unexpanded template in {expr}"
        rules.append({"record": f"adapter:{r['name']['as']}", "expr": expr})
    hpa_metric = f"adapter:{metric['pods']['metric']['name']}"
    # The HPA's rule (its 10% tolerance aside): ceil(current pods x average / target).
    rules.append({"record": "hpa:desired_replicas",
                  "expr": f"ceil(count({hpa_metric}) * avg({hpa_metric}) / {target})"})
    return rules


def rules_with_adapter(rendered) -> dict:
    """The PrometheusRule's groups, the adapter's queries appended to the group that records the
    series the HPA reads (rules_test.yaml says why)."""
    groups = copy.deepcopy(rule_groups(rendered))
    (auto,) = [g for g in groups if any(r.get("record") == "sampan:pod_saturation:avg30s" for r in g["rules"])]
    auto["rules"] += adapter_rules(rendered)
    return {"groups": groups}


@pytest.fixture
def rules_dir(rendered, tmp_path) -> Path:
    (tmp_path / "sampan.rules.yaml").write_text(yaml.safe_dump(rules_with_adapter(rendered), sort_keys=False))
    shutil.copy(RULES_TEST, tmp_path / "rules_test.yaml")
    return tmp_path


def test_rules_are_the_same_in_every_overlay(rendered):
    groups = rule_groups(rendered)
    for name in ["gpu", "mig", "keda", "full", "cpu-live"]:
        assert one(rendered[name], "PrometheusRule")["spec"]["groups"] == groups, name


def test_promtool_check_rules(rules_dir):
    p = run([promtool(), "check", "rules", rules_dir / "sampan.rules.yaml"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout


def test_promtool_unit_tests(rules_dir):
    p = run([promtool(), "test", "rules", rules_dir / "rules_test.yaml"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout


def test_every_rule_and_alert_is_tested(rendered):
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    exprs = " ".join(t["expr"] for test in tests for t in test.get("promql_expr_test", []))
    firing = {a["alertname"] for test in tests for a in test.get("alert_rule_test", []) if a["exp_alerts"]}
    quiet = {a["alertname"] for test in tests for a in test.get("alert_rule_test", []) if not a["exp_alerts"]}
    records = {r["record"] for g in rule_groups(rendered) for r in g["rules"] if "record" in r}
    records |= {r["record"] for r in adapter_rules(rendered)}
    alerts = {r["alert"] for g in rule_groups(rendered) for r in g["rules"] if "alert" in r}
    untested = {r for r in records if not re.search(rf"(?<![\w:]){re.escape(r)}(?![\w:])", exprs)}
    assert not untested, f"recording rules without a promql_expr_test: {untested}"
    assert alerts - firing == set(), f"alerts never seen firing: {alerts - firing}"
    assert alerts - quiet == set(), f"alerts never checked to stay quiet: {alerts - quiet}"
    assert {t["name"] for t in tests} >= {"steady", "burst", "one pod stuck"}


# Each weakened or broken rule must fail the unit tests: they test the rules, not only run them.
MUTATIONS = [
    ("SampanHighErrorRate", "> 0.01", "> 0.5"),
    ("SampanPodStuck", "for", None),  # firing at once instead of after 5 min
    ("sampan:pod_saturation:avg30s", "max by", "min by"),
    ("SampanGPUUnavailable", 'sampan_dev_accelerator="gpu"', 'sampan_dev_accelerator=~".+"'),
]


@pytest.mark.parametrize("name,old,new", MUTATIONS, ids=[f"{m[0]}:{m[1]}" for m in MUTATIONS])
def test_unit_tests_catch_a_broken_rule(rendered, rules_dir, name, old, new):
    rules = rules_with_adapter(rendered)
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert", r.get("record")) == name]
    if new is None:
        del rule[old]
    else:
        assert old in rule["expr"]
        rule["expr"] = rule["expr"].replace(old, new)
    (rules_dir / "sampan.rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    p = run([promtool(), "test", "rules", rules_dir / "rules_test.yaml"])
    assert p.returncode != 0, f"promtool tests still pass with {name} broken ({old} -> {new})"


def scrape_config_for_debian_promtool(tmp_path: Path, text: str) -> Path:
    """deploy/prometheus/prometheus.yml with its kubernetes_sd_configs block swapped for a
    file_sd_configs block: Debian's Prometheus 2.42 is built without Kubernetes service discovery
    (its promtool refuses the field), so that one block is checked for its shape here and the
    rest of the file (relabelling, rule files, intervals) by promtool."""
    config = yaml.safe_load(text)
    (job,) = config["scrape_configs"]
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
    (tmp_path / "targets.yaml").write_text(yaml.safe_dump([{"targets": ["127.0.0.1:8002"]}]))
    job["file_sd_configs"] = [{"files": [str(tmp_path / "targets.yaml")]}]
    (tmp_path / "rules").mkdir(exist_ok=True)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_promtool_check_scrape_config(rendered, tmp_path):
    config = scrape_config_for_debian_promtool(tmp_path, (ROOT / "deploy/prometheus/prometheus.yml").read_text())
    (tmp_path / "rules/sampan.rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups(rendered)}))
    p = run([promtool(), "check", "config", config])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 rule files found" in p.stdout and "SUCCESS" in p.stdout
    # The labels the recording rules group by and the GPU alerts select on are produced.
    targets = {r.get("target_label") for r in yaml.safe_load(config.read_text())["scrape_configs"][0]["relabel_configs"]}
    assert {"job", "namespace", "pod", "sampan_dev_accelerator"} <= targets


def test_promtool_check_config_fails_on_a_typo(tmp_path):
    text = (ROOT / "deploy/prometheus/prometheus.yml").read_text()
    assert "target_label: namespace" in text
    config = scrape_config_for_debian_promtool(tmp_path, text.replace("target_label: namespace", "target_labels: namespace"))
    p = run([promtool(), "check", "config", config])
    assert p.returncode != 0 and "target_labels" in p.stdout + p.stderr
