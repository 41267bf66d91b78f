"""The rehearsal's two network modes (rehearsal.py's docstring), one quick check each: two nodes
started as the scenarios start them, reached from the test, signalled as the scenarios signal them
(SIGSTOP/SIGCONT, SIGKILL), and nothing left once they are removed. The netns mode also checks that a
node's namespace routes nothing but its subnet and that a run's start sweeps only dead runs'
leftovers. The scenarios themselves run in whichever mode network_mode() picks (the pytest header
says which; SAMPAN_CLUSTER_NETNS=0 forces the loopback one).
"""

import os
import signal
import subprocess
import time

import pytest

import rehearsal as R
from rehearsal import CHECK_MS, M_FACTOR, TIMEOUT_MS


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    if not os.path.exists(R.sampan_bin()):
        pytest.skip(f"{R.sampan_bin()} is not built (SAMPAN_BIN)")
    work = tmp_path_factory.mktemp("network")
    onnx_path = work / "add.onnx"
    onnx_path.write_bytes(R.make_add_onnx())
    plan = R.build_sim_plan(work / "m", onnx_path, M_FACTOR, 16)
    return R.write_repo(work / "repo", {"m": (plan, R.model_config(16, 2000))})


def state(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


@pytest.mark.parametrize("mode", ["netns", "loopback"])
def test_nodes_run_reachable_and_signalled_in_each_network_mode(mode, repository, tmp_path):
    if mode == "netns" and os.environ.get("SAMPAN_CLUSTER_NETNS") != "1" and R.network_mode() != "netns":
        pytest.skip(f"network namespaces are not used here: {R.network_reason()}")
    cluster = R.Cluster(tmp_path, 2, CHECK_MS, TIMEOUT_MS, repository, network=mode)
    assert cluster.network == mode == R.NETWORK, cluster.network_note
    net = cluster.net
    try:
        for n in cluster.nodes:
            n.start(repository, wait=False)
        for n in cluster.nodes:
            n.wait_ready()
        for n in cluster.nodes:
            pid = n.process.pid
            # The Popen pid is the server itself (ip netns exec execs it), leading its own group.
            assert os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(R.sampan_bin())
            assert os.getpgid(pid) == pid
            ours = os.readlink("/proc/self/ns/net")
            if mode == "netns":
                assert n.address in map(str, net.subnet.hosts()) and n.netns in net.namespaces
                assert os.readlink(f"/proc/{pid}/ns/net") != ours
                assert subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True,
                                      text=True).stdout.split() == [n.netns]
            else:
                assert n.address.startswith("127.0.0.") and n.netns is None
                assert os.readlink(f"/proc/{pid}/ns/net") == ours
        if mode == "netns":
            net.check_routing()
            for ns in net.namespaces:
                # A route lookup (no packet leaves): an address outside the subnet is unreachable.
                r = subprocess.run(["ip", "-n", ns, "route", "get", "198.51.100.1"], capture_output=True, text=True)
                assert r.returncode != 0 and "unreachable" in r.stderr, (r.stdout, r.stderr)
        # The test refuses to send anything elsewhere (asserted before any connection is made).
        with pytest.raises(AssertionError):
            R.http_get("http://198.51.100.1:8000/v2/health/ready")
        # SIGSTOP to the process group hangs the node, SIGCONT resumes it, SIGKILL kills it.
        a, b = cluster.nodes
        os.killpg(a.process.pid, signal.SIGSTOP)
        R.wait_for(lambda: state(a.process.pid) == "T", 5, "the node stopped")
        assert not a.ready() and b.ready()
        os.killpg(a.process.pid, signal.SIGCONT)
        R.wait_for(a.ready, 10, "the node answering again")
        os.killpg(a.process.pid, signal.SIGKILL)
        assert a.process.wait(10) == -signal.SIGKILL
        a.start(repository)  # restarted in the same namespace, at the same address
        assert R.stop(b.process) == 0  # SIGTERM: drains and exits 0
    finally:
        for n in cluster.nodes:
            if n.process is not None:
                R._kill_group(n.process)
        cluster.remove_network()  # asserts that nothing of it remains
    if net:
        namespaces, links = R.our_leftovers(os.getpid())
        assert not set(namespaces) & set(net.namespaces) and not set(links) & set(net.links)
        assert not R.allowed_host(cluster.nodes[0].address)  # its subnet is no longer the test's


def test_the_sweep_removes_only_dead_runs_leftovers():
    if R.network_mode() != "netns":
        pytest.skip(f"network namespaces are not used here: {R.network_reason()}")
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    made = []
    try:
        for pid in (dead.pid, live.pid):
            ns, bridge = f"{R.NET_PREFIX}{pid}n999", f"{R.NET_PREFIX}{pid}b999"
            R._ip("netns", "add", ns)
            made.append(ns)
            R._ip("link", "add", bridge, "type", "bridge")
            made.append(bridge)
        time.sleep(0.1)
        removed = R.sweep_leftovers()
        assert sorted(removed) == sorted(made[:2]), removed
        namespaces, links = R.our_leftovers()
        assert made[2] in namespaces and made[3] in links and made[0] not in namespaces and made[1] not in links
    finally:
        live.kill()
        live.wait()
        R._remove([x for x in made if "n999" in x], [x for x in made if "b999" in x])
    namespaces, links = R.our_leftovers()
    assert not set(made) & (set(namespaces) | set(links))
