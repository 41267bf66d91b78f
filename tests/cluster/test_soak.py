"""Soak (issue #22): three sim nodes behind the gateway under a steady open-loop load at 80% of their
capacity for SAMPAN_SOAK_SECONDS (CI: 180; scripts/soak.sh: 3600), with a model reload on one node
every RELOAD_EVERY_S (the nodes in turn) and a node restart (SIGTERM, drain, start) every
RESTART_EVERY_S (nodes 1.., in turn: node 0 runs the whole soak, so its series spans it). Every
node's RSS, open file descriptors and threads are sampled every SAMPLE_S. Fails on growth beyond 5%
of any of them after the warm-up (node 0: from the end of the warm-up to the soak's end, the mean of
its last three samples against the mean of its first three; a restarted node: the same over its own
life, when it lived past a warm-up) and on any lost request (perf's errors, the gateway's non-200
answers). Figures: build/cluster/soak.json.

The CI run's reload and restart intervals are those of the hour scaled to its length (one restart
in 180 s is 1 an hour's 6): it runs the same machinery, not the same counts.
"""

import os
import shutil
import signal
import threading
import time

import pytest

import rehearsal as R

SOAK_S = float(os.environ.get("SAMPAN_SOAK_SECONDS") or 180)
HOUR = SOAK_S >= 3600
RESTART_EVERY_S = 600 if HOUR else SOAK_S / 3
RELOAD_EVERY_S = 120 if HOUR else SOAK_S / 6
SAMPLE_S = 10 if HOUR else 5
WARMUP_S = 300 if HOUR else SOAK_S / 3
FACTOR = 200      # model m: batches of up to 16, b16 keeps a node 318 ms: ~50 requests/s a node
LOAD_SHARE = 0.8
GROWTH = 0.05
NODES = 3


def proc_figures(pid):
    """(RSS KiB, open fds, threads) of a live process."""
    rss = threads = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads


class Sampler:
    """Every SAMPLE_S: each live node process's figures, keyed by (node, pid)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.series = {}  # (node name, pid) -> [(t, rss, fds, threads)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while True:
            now = time.time()
            for n in self.cluster.nodes:
                p = n.process
                if p is not None and p.poll() is None and not getattr(n, "restarting", False):
                    try:
                        self.series.setdefault((n.name, p.pid), []).append((now, *proc_figures(p.pid)))
                    except (OSError, ValueError):
                        pass
            if self._stop.wait(SAMPLE_S):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)


def growth(samples, since):
    """Per figure, (last three's mean - first three's mean) / first three's mean over the samples
    at or after `since`; None when fewer than six."""
    rows = [s for s in samples if s[0] >= since]
    if len(rows) < 6:
        return None
    out = {}
    for k, name in ((1, "rss_kib"), (2, "fds"), (3, "threads")):
        a = sum(r[k] for r in rows[:3]) / 3
        b = sum(r[k] for r in rows[-3:]) / 3
        out[name] = {"first": a, "last": b, "growth": (b - a) / a if a else 0.0}
    return out


@pytest.fixture(scope="module")
def soak_cluster(tmp_path_factory):
    if not os.path.exists(R.sampan_bin()):
        pytest.skip(f"{R.sampan_bin()} is not built (SAMPAN_BIN)")
    if not R.HAPROXY or not R.PROMETHEUS:
        pytest.skip("haproxy or prometheus is not installed (scripts/setup.sh)")
    work = tmp_path_factory.mktemp("soak")
    onnx_path = work / "add.onnx"
    onnx_path.write_bytes(R.make_add_onnx())
    plan = R.build_sim_plan(work / "m", onnx_path, FACTOR, 16)
    repo = R.write_repo(work / "repo", {"m": (plan, R.model_config(16, 2000, slo_ms=1000))})
    cluster = R.Cluster(work, NODES, 200, 3000, repo)
    try:
        for n in cluster.nodes:
            n.start(repo, wait=False, extra=("--model-control-mode", "explicit", "--load-model", "*"))
        for n in cluster.nodes:
            n.wait_ready()
        cluster.start_gateway()
        cluster.start_prometheus()
        yield cluster
    finally:
        for p in [n.process for n in cluster.nodes if n.process is not None] + [cluster.gateway, cluster.prometheus]:
            if p is not None:
                R._kill_group(p)
        cluster.remove_network()
        shutil.rmtree(work / "tsdb", ignore_errors=True)


def test_soak(soak_cluster, tmp_path):
    cluster = soak_cluster
    capacity = NODES * 16 * 1000 / R.occupancy_ms(16, FACTOR)
    rate = round(LOAD_SHARE * capacity)
    events = []
    t0 = time.time()
    with Sampler(cluster) as sampler:
        _, finish = R.perf_start(cluster, tmp_path / "soak.json", "m", SOAK_S, rate=rate, extra=("--max-threads", "128"))
        next_reload, next_restart = t0 + RELOAD_EVERY_S, t0 + RESTART_EVERY_S
        reloads = restarts = 0
        end = t0 + SOAK_S - 5
        while time.time() < end:
            now = time.time()
            if now >= next_restart and now + 30 < end:
                n = cluster.nodes[1 + restarts % (NODES - 1)]
                n.restarting = True
                t = time.time()
                n.process.send_signal(signal.SIGTERM)
                code = n.process.wait(60)
                n.start(cluster.repository, extra=("--model-control-mode", "explicit", "--load-model", "*"))
                n.restarting = False
                R.wait_for(cluster.all_up, 30, "every node UP after a restart")
                events.append({"t": round(t - t0, 1), "restart": n.name, "exit_code": code,
                               "back_after_s": round(time.time() - t, 2)})
                restarts += 1
                next_restart += RESTART_EVERY_S
            elif now >= next_reload:
                n = cluster.nodes[reloads % NODES]
                # A changed config (the batcher's delay, 2000 or 2001 us) so the load reloads the
                # model (an unchanged one is left serving as it is): a new version instance,
                # its plan loaded again, the old one drained.
                (cluster.repository / "m" / "config.pbtxt").write_text(
                    R.model_config(16, 2000 + (reloads + 1) % 2, slo_ms=1000))
                t = time.time()
                status, body = R.http_post(n.http + "/v2/repository/models/m/load", b"{}", timeout=60)
                events.append({"t": round(t - t0, 1), "reload": n.name, "status": status,
                               "took_s": round(time.time() - t, 2), "error": body.decode(errors="replace")[:200]
                               if status != 200 else ""})
                reloads += 1
                next_reload += RELOAD_EVERY_S
            time.sleep(0.2)
        _, r = finish()
    log = cluster.access_log(since=t0)
    fails = [x for x in log if x["status"] != 200 and x["path"].endswith("/infer")]
    node0 = cluster.nodes[0]
    per_process = {}
    for (name, pid), samples in sampler.series.items():
        since = t0 + WARMUP_S if name == node0.name else samples[0][0] + min(WARMUP_S, 60)
        per_process[f"{name}:{pid}"] = {"samples": len(samples), "first": samples[0][1:], "last": samples[-1][1:],
                                        "growth_after_warmup": growth(samples, since)}
    figures = R.record("soak", {
        "seconds": SOAK_S, "rate_per_s": rate, "capacity_per_s": capacity, "load_share": LOAD_SHARE,
        "reload_every_s": RELOAD_EVERY_S, "restart_every_s": RESTART_EVERY_S, "sample_every_s": SAMPLE_S,
        "warmup_s": WARMUP_S, "perf": r, "gateway_requests": len(log), "gateway_failures": len(fails),
        "events": events, "processes": per_process,
        "series": {f"{k[0]}:{k[1]}": [(round(s[0] - t0, 1), *s[1:]) for s in v] for k, v in sampler.series.items()}})
    assert r["errors"] == 0 and not fails, (r["first_error"], fails[:5])
    assert all(e.get("status", 200) == 200 and e.get("exit_code", 0) == 0 for e in events), events
    assert restarts >= 1 and reloads >= 1, events
    g0 = per_process[next(k for k in per_process if k.startswith(node0.name + ":"))]["growth_after_warmup"]
    assert g0 is not None, per_process
    for name, p in per_process.items():
        g = p["growth_after_warmup"]
        if g is None:
            continue
        for figure, v in g.items():
            assert v["growth"] <= GROWTH, (name, figure, v, figures["events"])
