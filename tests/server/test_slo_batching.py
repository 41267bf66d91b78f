"""The SLO batcher served end to end (issue #23) on the simulated GPU (`--backend sim`: the
recorded ResNet-50 FP16 H100 latencies, slowed down so that a 2-core machine can drive it).

With only `sampan { latency_slo_ms }` (no dynamic-batching knobs) the server batches by itself:
under Poisson load it meets the SLO and batches; under overload it sheds the requests that can
no longer meet it, with 503 and the reason, and what it admits still meets it; its decisions show
in the metrics. Bounded: each perf run has a timeout and a fixed number of windows.
"""

import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest

from conftest import ROOT, sampan_bin

sys.path.insert(0, str(ROOT / "bench" / "serve_gpu"))
import slo_grid  # noqa: E402  (build_sim_plan: the sim plan the GPU bench's rehearsal uses)


def write_repo(repo, plan, io, max_batch, slo_ms, instances=1):
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "1" / "model.plan").write_bytes(plan.read_bytes())
    (repo / "m" / "config.pbtxt").write_text(
        f"max_batch_size: {max_batch}\n{io}instance_group [ {{ count: {instances} kind: KIND_GPU }} ]\n"
        f'sampan {{ backend: "sim" latency_slo_ms: {slo_ms} }}\n')
    return repo


def perf(srv, tmp_path, rate, tag):
    out = tmp_path / f"{tag}.json"
    r = subprocess.run([sampan_bin(), "perf", "-m", "m", "-u", srv.http_url, "--request-rate-range", str(rate),
                        "--request-distribution", "poisson", "-p", "2000", "-r", "3", "-s", "100", "--seed", "3",
                        "--json", str(out), "--max-threads", "256"],
                       capture_output=True, text=True, timeout=120)
    assert out.exists(), r.stdout + r.stderr
    return json.loads(out.read_text())["results"][-1], r.stdout


def metrics(srv):
    text = urllib.request.urlopen(srv.metrics_url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(sampan_slo_\w+|sampan_batch_bucket_executions_total)\{([^}]*)\} (\S+)$', line)
        if m and 'model="m"' in m.group(2):
            b = re.search(r'bucket="(\d+)"', m.group(2))
            out[m.group(1) + (f"[{b.group(1)}]" if b else "")] = float(m.group(3))
    return out


@pytest.fixture(scope="module")
def sim_plan(tmp_path_factory):
    # x10: a batch of 32 takes ~30 ms, of 128 ~95 ms (the H100's 3.0 and 9.5 ms).
    return slo_grid.build_sim_plan(sampan_bin(), tmp_path_factory.mktemp("sim"), 10, 64)


def test_meets_the_slo_under_poisson_load_and_batches_by_itself(serve, tmp_path, sim_plan):
    plan, io = sim_plan
    srv = serve(write_repo(tmp_path / "repo", plan, io, 64, 150), "--model-control-mode", "explicit",
                "--load-model", "m", env=dict(os.environ, SAMPAN_SIM_DEVICES="1"))
    assert "the SLO batcher schedules it (latency SLO 150 ms" in srv.output()
    r, log = perf(srv, tmp_path, 250, "poisson")
    assert r["errors"] == 0, log
    assert r["latency_us"]["p99"] <= 150e3, r
    assert r["server_avg_batch"] > 1.5, r  # it batches
    m = metrics(srv)
    assert m["sampan_slo_capacity_inferences_per_second"] > 250, m
    assert m["sampan_slo_target_batch_size"] >= 1, m
    assert "sampan_slo_arrival_inferences_per_second" in m, m  # (0 once the load has stopped)
    assert m.get("sampan_slo_shed_total", 0) == 0, m
    assert m["sampan_slo_deadline_misses_total"] <= 0.01 * r["requests"], m
    buckets = {k: v for k, v in m.items() if k.startswith("sampan_batch_bucket_executions_total[")}
    assert len(buckets) >= 2 and sum(buckets.values()) > 0, m
    # The statistics carry the same state: each bucket's estimate and how often it ran.
    stats = json.loads(urllib.request.urlopen(srv.http_base + "/v2/models/m/stats", timeout=10).read())
    slo = stats["model_stats"][0]["slo_batcher"]
    assert slo["latency_slo_ms"] == 150 and slo["capacity_per_s"] > 250 and slo["shed"] == 0, slo
    assert sum(b["executions"] for b in slo["buckets"]) == stats["model_stats"][0]["execution_count"], slo
    assert all(b["samples"] >= 3 and b["mean_us"] > 0 for b in slo["buckets"]), slo  # timed at warm-up


@pytest.fixture(scope="module")
def slow_sim_plan(tmp_path_factory):
    # x50: a batch of 8 takes ~60 ms, so the overload below stays within what two cores serve over HTTP.
    return slo_grid.build_sim_plan(sampan_bin(), tmp_path_factory.mktemp("sim50"), 50, 8)


def test_overload_sheds_only_the_late_and_what_it_admits_meets_the_slo(serve, tmp_path, slow_sim_plan):
    plan, io = slow_sim_plan
    # max_batch 8 at x50 (~130 inferences/s at most), offered 2x that, a 500 ms SLO.
    srv = serve(write_repo(tmp_path / "repo", plan, io, 8, 500), "--model-control-mode", "explicit",
                "--load-model", "m", env=dict(os.environ, SAMPAN_SIM_DEVICES="1"))
    m0 = metrics(srv)
    cap = m0["sampan_slo_capacity_inferences_per_second"]
    assert cap > 0, m0  # timed at warm-up
    r, log = perf(srv, tmp_path, round(2 * cap), "overload")
    assert r["errors"] > 0, r
    first = re.search(r"first error: (.*)", log)
    assert first and "can no longer meet the latency SLO" in first.group(1), log
    # What it admitted: within the SLO, plus the HTTP tail the client adds.
    assert r["latency_us"]["p99"] <= 500e3 * 1.1, r
    # Failures ranked as infinitely late: over 1% shed, that p99 is past any SLO (null).
    rank = -(-99 * (r["errors"] + r["requests"]) // 100)  # nearest rank, failures last
    assert (r["latency_us"]["p99_failed_as_late"] is None) == (rank > r["requests"]), r
    if rank <= r["requests"]:
        assert r["latency_us"]["p99_failed_as_late"] >= r["latency_us"]["p99"], r
    assert r["throughput_infer_per_s"] >= 0.7 * cap, (r, cap)
    m = metrics(srv)
    assert m["sampan_slo_shed_total"] > 0, m
    assert srv.process.poll() is None, "the server died under overload"
