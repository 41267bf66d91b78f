"""Fixtures of the cluster rehearsal (rehearsal.py says what runs and how it is bounded).

`topology` (module scope): the sim plans, the repositories, and a Cluster of NODES nodes behind the
gateway with Prometheus, torn down (every process SIGKILLed) at the end, whatever happened.
`cluster` (per test): the same Cluster, with every node first brought back to its standard state
(running the standard repository, READY, UP in the gateway), so one scenario's failure does not
leave the next with a dead or stopped node.
`nothing_left_behind` (session, automatic): at the session's end, no process this run started is
still running and no namespace, veth or bridge of this run remains (the issue's "leaves no process
or namespace behind").
"""

import os
import shutil
import signal

import pytest

import rehearsal as R
from rehearsal import CHECK_MS, M_FACTOR, NODES, Q_FACTOR, Q_MAX_QUEUE, SLO_MS, TIMEOUT_MS


def m_config():
    return R.model_config(16, 2000, slo_ms=SLO_MS)


def q_config():
    return R.model_config(1, 0, max_queue=Q_MAX_QUEUE, slo_ms=SLO_MS)


def _missing():
    if not os.path.exists(R.sampan_bin()):
        return f"{R.sampan_bin()} is not built (SAMPAN_BIN)"
    if not R.HAPROXY:
        return "haproxy is not installed (scripts/setup.sh installs Debian's)"
    if not R.PROMETHEUS:
        return "prometheus is not installed (scripts/setup.sh installs Debian's)"
    return None


def pytest_report_header(config):
    return f"cluster network: {R.network_reason()}"


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind():
    yield
    running = R.running()
    namespaces, links = R.our_leftovers(os.getpid())
    assert not running and not namespaces and not links, \
        (f"left behind: processes {[p.args for p in running]}, namespaces {namespaces}, links {links}")


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    missing = _missing()
    if missing:
        pytest.skip(missing)
    work = tmp_path_factory.mktemp("cluster")
    onnx_path = work / "add.onnx"
    onnx_path.write_bytes(R.make_add_onnx())
    m_plan = R.build_sim_plan(work / "m", onnx_path, M_FACTOR, 16)
    m_slow_plan = R.build_sim_plan(work / "m_slow", onnx_path, 3 * M_FACTOR, 16)
    q_plan = R.build_sim_plan(work / "q", onnx_path, Q_FACTOR, 16)
    standard = R.write_repo(work / "repo", {"m": (m_plan, m_config()), "q": (q_plan, q_config())})
    slow = R.write_repo(work / "repo_slow", {"m": (m_slow_plan, m_config()), "q": (q_plan, q_config())})
    cluster = R.Cluster(work, NODES, CHECK_MS, TIMEOUT_MS, standard)
    cluster.slow_repository = slow
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()
        if os.environ.get("SAMPAN_CLUSTER_KEEP") != "1":
            shutil.rmtree(work / "tsdb", ignore_errors=True)


@pytest.fixture
def cluster(topology):
    c = topology
    for n in c.nodes:
        if n.process is not None and n.process.poll() is None:
            if getattr(n, "stopped", False):
                os.kill(n.process.pid, signal.SIGCONT)
                n.stopped = False
            if n.repository == c.repository and not getattr(n, "nonstandard", False):
                continue
            R.stop(n.process)
        n.nonstandard = False
        n.start(c.repository)
    R.wait_for(c.all_up, 30, "every node UP in the gateway")
    yield c
