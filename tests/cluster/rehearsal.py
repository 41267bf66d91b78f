"""The cluster rehearsal's machinery (issue #22): N `sampan serve` nodes on the sim backend, each
on its own address, `sampan deploy haproxy` and a real haproxy in front of them, a real Prometheus
scraping every node's metrics port, and `sampan perf` load through the gateway. Everything bounded:
every process is started in its own session and killed (SIGKILL to its process group, after
SIGCONT) when the topology is torn down, every load has a fixed duration, every wait a timeout.

Tiers: by default (CI) short loads on 3 nodes; SAMPAN_CLUSTER_SECONDS=N (the slow tier) makes
each scenario's steady load last about N seconds. Figures go to build/cluster/<scenario>.json
(SAMPAN_CLUSTER_OUT overrides the folder), with the network mode that ran ("network").

The network, two modes (SAMPAN_CLUSTER_NETNS: 0 forces "loopback", 1 requires "netns", unset: netns
where permitted, that is where `ip netns add` works, as root):
  netns     each node in a network namespace of its own, created by the test: a bridge in the root
            namespace (smp<pid>b<k>) holding a private 10.x.y.0/24 that overlaps no route or address
            of the host (checked under a lock, so concurrent runs pick different ones), .1 on the
            bridge, and per node a namespace (smp<pid>n<j>) with a veth pair (smp<pid>v<j> on the
            bridge, smp<pid>p<j> in the namespace with .2+i, `lo` up), IPv6 off on all of them.
            The namespaces have no default route: a node reaches the subnet and nothing else. Before
            any node starts, the test checks that every node address is routed out of its bridge and
            that each namespace's only route is the connected /24. Nodes run under `ip netns exec`
            (which execs: the Popen pid is the server's). The gateway, Prometheus and the load
            generator stay in the root namespace on 127.0.0.x (see Cluster). Torn down by the fixtures
            (and at exit); a run's start removes leftovers of earlier runs whose pid is dead.
  loopback  every node on its own 127.0.0.x (a free block picked at random).
Either way, every request the test sends goes to 127.0.0.x or to the test's own subnet (asserted in
http_get/http_post), and Prometheus's targets are those of the nodes.
"""
import atexit
import datetime
import fcntl
import ipaddress
import json
import os
import pathlib
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROFILES = ROOT / "bench" / "results" / "sim_profiles"
HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
PROMETHEUS = shutil.which("prometheus")

SECONDS = float(os.environ.get("SAMPAN_CLUSTER_SECONDS") or 0)  # 0: the CI tier
SLOW_TIER = SECONDS > 0
RUN_ID = f"{os.getpid()}-{time.time_ns()}"  # which pytest run wrote a figures file
OUT_DIR = pathlib.Path(os.environ.get("SAMPAN_CLUSTER_OUT") or ROOT / "build" / "cluster")

# Every node binds these ports on its own address; the gateway its HTTP/gRPC/stats ports on its own.
HTTP, GRPC, METRICS, AGENT = 8000, 8001, 8002, 8003
STATS = 8404
PROM_PORT = 9090


# The CI topology and its models.
NODES = 3
CHECK_MS = 200       # haproxy's health and agent check interval (fall 2, rise 2)
TIMEOUT_MS = 1000    # haproxy's `timeout server`: a hung node's requests are retried after it

# Time dilation of the recorded ResNet-50 FP16 H100 tables: the simulated GPUs run FACTOR times
# slower than the real one, so that 2 CPU cores (the ASan build, haproxy, Prometheus and the load
# generator together) can drive them into batching and saturation. Ratios (batching gain, 3x slow)
# are the recorded ones.
M_FACTOR = 50        # model m: max batch 16 (b16: 79 ms a batch), the balance and fault scenarios
Q_FACTOR = 80        # model q: one request a batch (30 ms), at most 2 queued: the overload scenario
SLO_MS = 250         # the latency SLO of both models (config's sampan.latency_slo_ms): the agent's
                     # saturation is in-flight rows over what a node completes within it
Q_MAX_QUEUE = 2


# An ASan build holds freed memory in a quarantine (256 MiB by default) before reusing it, so its RSS
# grows under load whether or not anything leaks; a small one lets RSS show the live memory.
ASAN_OPTIONS = ":".join(o for o in (os.environ.get("ASAN_OPTIONS", ""), "quarantine_size_mb=16") if o)


def sampan_bin():
    return os.environ.get("SAMPAN_BIN") or str(ROOT / "build" / "sampan")


def fake_nvml():
    """The fake NVML library (tests/fixtures/fake_nvml), built beside the sampan binary's tests."""
    return os.environ.get("SAMPAN_FAKE_NVML") or str(pathlib.Path(sampan_bin()).parent / "tests" /
                                                      "libsampan_fake_nvml.so")


def write_nvml_state(path, **figures):
    """The fake NVML's state file (one GPU): figures as its keys (xids: a list), written whole."""
    lines = ["gpus 1", "gpu0.uuid GPU-rehearsal-0"]
    for key, value in figures.items():
        lines.append(f"gpu0.{key} {','.join(map(str, value)) if isinstance(value, (list, tuple)) else value}")
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def load_seconds(ci):
    """A steady load's length: `ci` seconds in CI, SAMPAN_CLUSTER_SECONDS in the slow tier."""
    return SECONDS if SLOW_TIER else ci


# ---------------------------------------------------------------- processes

_ALL = []
_EVER = []  # every process start() started: the session's end checks that none is left running
_ALL_LOCK = threading.Lock()


def _kill_group(p):
    if p.poll() is not None:
        return
    for sig in (signal.SIGCONT, signal.SIGKILL):  # a SIGSTOPped process first resumes, then dies
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        pass


def kill_everything():
    with _ALL_LOCK:
        procs = list(_ALL)
        _ALL.clear()
    for p in procs:
        _kill_group(p)


def running():
    """The processes start() started in this run that are still running."""
    with _ALL_LOCK:
        return [p for p in _EVER if p.poll() is None]


def _backstop():
    kill_everything()
    remove_networks()  # after the processes: a process in a namespace keeps it alive


atexit.register(_backstop)  # the backstop: the fixtures' finalizers come first


def start(args, log_path, env=None):
    """Starts `args` in its own session (its process group is its pid), output appended to log_path."""
    log = open(log_path, "ab")
    try:
        p = subprocess.Popen([str(a) for a in args], stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    finally:
        log.close()
    with _ALL_LOCK:
        _ALL.append(p)
        _EVER.append(p)
    return p


def stop(p, sig=signal.SIGTERM, timeout=30):
    """Signals p and waits up to `timeout` s (then SIGKILL); returns its exit code."""
    if p.poll() is None:
        try:
            os.kill(p.pid, sig)
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(p)
        except ProcessLookupError:
            pass
    return p.wait(10)


def wait_for(predicate, timeout, what, interval=0.05):
    """Polls predicate() until truthy (returned) or `timeout` s (AssertionError naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = predicate()
        except OSError:
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def allowed_host(host):
    """Whether the test may send traffic to `host`: a 127.0.0.x, or an address of a subnet this
    run created for its nodes' namespaces (and has not removed)."""
    try:
        a = ipaddress.IPv4Address(host)
    except ValueError:
        return False
    if a in ipaddress.IPv4Network("127.0.0.0/24"):
        return True
    with _NETWORKS_LOCK:
        return any(a in n.subnet for n in _NETWORKS)


def check_host(host):
    assert allowed_host(host), f"{host} is neither a 127.0.0.x nor in a subnet of this test's namespaces"


def http_get(url, timeout=2.0):
    """(status, body bytes); (None, b"") when nothing answered."""
    check_host(urllib.parse.urlparse(url).hostname)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return None, b""


def http_post(url, body=b"", timeout=30.0):
    """(status, body bytes) of a POST; (None, b"") when nothing answered."""
    check_host(urllib.parse.urlparse(url).hostname)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return None, b""


def free_block(count, ports):
    """127.0.0.x .. x+count-1 with every one of `ports` free on each (SO_REUSEADDR binds: only a
    listener makes one busy). The block's start is random, so concurrent rehearsals rarely meet."""
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(50):
        first = rng.randrange(16, 250 - count)
        addrs = [f"127.0.0.{first + i}" for i in range(count)]
        try:
            for a in addrs:
                for port in ports:
                    with socket.socket() as s:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                        s.bind((a, port))
            return addrs
        except OSError:
            continue
    raise AssertionError("no free block of 127.0.0.x addresses")


# ---------------------------------------------------------------- the nodes' network

# Every link and namespace a rehearsal creates is named smp<pid><kind><serial>: <pid> the pytest
# process's (whole, so a later run can tell a dead run's leftovers from a live one's), <kind> b (the
# bridge), v (a veth's bridge end), p (its namespace end) or n (a namespace), <serial> a counter of
# this process. At most 3 + 7 + 1 + 3 = 14 characters: an interface name holds 15.
NET_PREFIX = "smp"
_NAME = re.compile(rf"^{NET_PREFIX}(\d+)([bvpn])(\d+)$")
_NETWORKS = []  # the live Networks of this process: the atexit backstop removes them
_NETWORKS_LOCK = threading.Lock()
_SERIAL = iter(range(1000))
_LOCK_FILE = "/run/lock/sampan-rehearsal-net.lock" if os.path.isdir("/run/lock") else "/tmp/sampan-rehearsal-net.lock"
_netns_refused = None  # why namespaces are not used in this process (None: not tried yet or used)


class NetworkUnavailable(Exception):
    """Creating a namespace, a bridge or a veth was refused: the loopback mode runs instead."""


def _ip(*args, ns=None, check=True, json_out=False):
    cmd = ["ip"] + (["-n", ns] if ns else []) + (["-j"] if json_out else []) + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise NetworkUnavailable(f"`{' '.join(cmd)}` failed ({r.returncode}): {r.stderr.strip()}")
    if json_out:
        return json.loads(r.stdout or "[]") if r.returncode == 0 else []
    return r


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ipv6_off(device, ns=None):
    """IPv6 off on one of our devices (no link-local address, no fe80::/64 route, nothing sent)."""
    args = ["sysctl", "-q", "-w", f"net.ipv6.conf.{device}.disable_ipv6=1"]
    if ns:
        args = ["ip", "netns", "exec", ns] + args
    subprocess.run(args, capture_output=True, timeout=30)  # no IPv6 in the kernel: nothing to turn off


def our_leftovers(pid=None):
    """(namespaces, links) named as a rehearsal names them; `pid`: only that run's."""
    namespaces = [n["name"] for n in _ip("netns", "list", check=False, json_out=True) if _NAME.match(n["name"])]
    links = [link["ifname"] for link in _ip("link", "show", check=False, json_out=True)
             if _NAME.match(link.get("ifname", ""))]
    if pid is not None:
        namespaces = [n for n in namespaces if int(_NAME.match(n).group(1)) == pid]
        links = [x for x in links if int(_NAME.match(x).group(1)) == pid]
    return namespaces, links


def _remove(namespaces, links):
    """Kills whatever still runs in `namespaces` (only a rehearsal's processes run in them), then
    deletes the namespaces (which deletes their veth ends, and so their pairs) and the links."""
    for ns in namespaces:
        for pid in _ip("netns", "pids", ns, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGCONT)
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        deadline = time.monotonic() + 10
        while _ip("netns", "pids", ns, check=False).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        _ip("netns", "delete", ns, check=False)
    present = {link["ifname"] for link in _ip("link", "show", check=False, json_out=True)}
    for link in sorted(links, key=lambda x: _NAME.match(x).group(2) == "b"):  # the veths, then the bridge
        if link in present:
            _ip("link", "delete", link, check=False)


def sweep_leftovers():
    """Removes the namespaces and links of earlier rehearsals whose pytest process is dead (only
    names of our pattern, only of pids that no longer run); returns what it removed."""
    namespaces, links = our_leftovers()
    dead = lambda name: not _pid_alive(int(_NAME.match(name).group(1)))  # noqa: E731
    namespaces, links = [n for n in namespaces if dead(n)], [x for x in links if dead(x)]
    _remove(namespaces, links)
    return namespaces + links


def _used_networks():
    """Every IPv4 network the host's routes (all tables, default routes aside) and addresses cover."""
    used = []
    for r in _ip("-4", "route", "show", "table", "all", check=False, json_out=True):
        dst = r.get("dst", "default")
        if dst != "default":
            try:
                used.append(ipaddress.IPv4Network(dst, strict=False))
            except ValueError:
                pass
    for link in _ip("-4", "addr", "show", check=False, json_out=True):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet":
                used.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    return [n for n in used if n.prefixlen > 0]


class Network:
    """A bridge with a private 10.x.y.0/24 in the root namespace and `count` namespaces on it, one
    per node, each with its address (.2, .3, ...) and no route but the connected /24 (the module's
    docstring). Raises NetworkUnavailable (having removed what it made) where namespaces, bridges or
    veths are refused; an AssertionError where the routing is not as it must be."""

    def __init__(self, count):
        self.pid = os.getpid()
        self.bridge = f"{NET_PREFIX}{self.pid}b{next(_SERIAL)}"
        self.namespaces, self.links, self.inner = [], [self.bridge], []
        self.subnet = None
        with _NETWORKS_LOCK:
            _NETWORKS.append(self)
        try:
            with open(_LOCK_FILE, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent runs: one picks and claims a subnet at a time
                self.swept = sweep_leftovers()
                self.subnet = self._pick_subnet()
                _ip("link", "add", self.bridge, "type", "bridge")
                _ipv6_off(self.bridge)
                _ip("addr", "add", f"{self.subnet[1]}/{self.subnet.prefixlen}", "dev", self.bridge)
                _ip("link", "set", self.bridge, "up")
            hosts = list(self.subnet.hosts())
            self.addresses = []
            for i in range(count):
                j = next(_SERIAL)
                ns, outer, inner = (f"{NET_PREFIX}{self.pid}{k}{j}" for k in "nvp")
                _ip("netns", "add", ns)
                self.namespaces.append(ns)
                _ipv6_off("all", ns)
                _ipv6_off("default", ns)
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
                self.links.append(outer)
                self.inner.append(inner)
                _ipv6_off(outer)
                _ip("link", "set", outer, "master", self.bridge)
                _ip("link", "set", outer, "up")
                address = str(hosts[1 + i])  # .2 + i
                _ip("addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", inner, ns=ns)
                _ip("link", "set", "lo", "up", ns=ns)
                _ip("link", "set", inner, "up", ns=ns)
                self.addresses.append(address)
            self.check_routing()
        except BaseException:
            self.remove()
            raise

    def _pick_subnet(self):
        used = _used_networks()
        rng = random.Random(os.getpid() ^ time.time_ns())
        for _ in range(200):
            subnet = ipaddress.IPv4Network(f"10.{rng.randrange(1, 255)}.{rng.randrange(0, 256)}.0/24")
            if not any(subnet.overlaps(u) for u in used):
                return subnet
        raise AssertionError(f"no 10.x.y.0/24 free of the host's routes and addresses ({used})")

    def check_routing(self):
        """Every node address is routed out of our bridge; in each namespace, the only route is the
        connected /24 (no default route, no IPv6 route): a node reaches the subnet and nothing else."""
        for address, ns, inner in zip(self.addresses, self.namespaces, self.inner):
            route = _ip("route", "get", address, json_out=True)
            assert route and route[0].get("dev") == self.bridge, (address, route)
            routes = _ip("route", "show", "table", "all", ns=ns, json_out=True)
            # The main table: the connected /24 alone; the local table: the namespace's own
            # addresses (loopback and its node address) and broadcasts, nothing routed out.
            main = [r for r in routes if r.get("table", "main") == "main"]
            assert [(r.get("dst"), r.get("dev")) for r in main] == [(str(self.subnet), inner)], (ns, routes)
            assert all(r.get("table") == "local" and r.get("type") in ("local", "broadcast") for r in routes
                       if r not in main), (ns, routes)
            assert _ip("-6", "route", "show", "table", "all", ns=ns, json_out=True) == [], ns

    def remove(self):
        """Deletes the namespaces (after killing anything left in them), the veths and the bridge;
        idempotent. Asserts that none of them remains."""
        _remove(self.namespaces, self.links)
        with _NETWORKS_LOCK:
            if self in _NETWORKS:
                _NETWORKS.remove(self)
        namespaces, links = our_leftovers(self.pid)
        left = [n for n in namespaces if n in self.namespaces] + [x for x in links if x in self.links]
        assert not left, f"left behind: {left}"


def remove_networks():
    with _NETWORKS_LOCK:
        networks = list(_NETWORKS)
    for n in networks:
        try:
            n.remove()
        except AssertionError:
            pass


def network_mode():
    """"netns" or "loopback", as SAMPAN_CLUSTER_NETNS says; unset: netns where this process may
    create namespaces (root, `ip` installed, no earlier refusal)."""
    forced = os.environ.get("SAMPAN_CLUSTER_NETNS", "")
    if forced == "0":
        return "loopback"
    if forced == "1":
        return "netns"
    if os.geteuid() != 0 or not shutil.which("ip") or _netns_refused:
        return "loopback"
    return "netns"


def network_reason():
    """One line saying which mode runs and why (the pytest header prints it)."""
    mode = network_mode()
    forced = os.environ.get("SAMPAN_CLUSTER_NETNS", "")
    if forced in ("0", "1"):
        return f"{mode} (SAMPAN_CLUSTER_NETNS={forced})"
    if mode == "loopback":
        return "loopback (" + (_netns_refused or ("not root" if os.geteuid() != 0 else "no `ip`")) + ")"
    return "netns (root: namespaces where `ip netns add` works, else loopback)"


NETWORK = None  # the mode of the last Cluster made: record() writes it into the figures


# ---------------------------------------------------------------- models

def make_add_onnx():
    """y = x + 1 over [N, 4] FP32: the sim backend needs only the graph's types and shapes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    b = numpy_helper.from_array(np.ones((4,), np.float32), "bias")
    graph = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["y"])], "add", [x], [y], initializer=[b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


RECORDED_BATCHES = (1, 2, 8, 16, 32)


def scaled_profiles(out_dir, factor):
    """The recorded ResNet-50 FP16 H100 tables (bench/results/sim_profiles) with every latency
    multiplied and the throughput divided by `factor`: the same GPU, `factor` times slower."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for b in RECORDED_BATCHES:
        d = json.loads((PROFILES / f"resnet50_fp16_b{b}.json").read_text())
        for key in ("latency_ms", "compute_ms", "h2d_ms", "d2h_ms", "enqueue_ms"):
            if key in d:
                d[key] = {k: v * factor for k, v in d[key].items()}
        d["throughput_qps"] /= factor
        d["throughput_items_per_s"] = d.get("throughput_items_per_s", d["throughput_qps"] * b) / factor
        d["runs_on"] = f"NVIDIA H100 80GB HBM3 (recorded), time x{factor:g}"
        p = out_dir / f"b{b}.json"
        p.write_text(json.dumps(d))
        paths.append(p)
    return paths


def occupancy_ms(batch, factor):
    """How long a run of a recorded batch size keeps the simulated device busy (1000 / the
    profile's throughput_qps, times `factor`): the sim's occupancy (src/backends/sim/sim.h)."""
    return factor * 1000 / json.loads((PROFILES / f"resnet50_fp16_b{batch}.json").read_text())["throughput_qps"]


def build_sim_plan(work, onnx_path, factor, max_batch):
    work.mkdir(parents=True, exist_ok=True)
    profiles = scaled_profiles(work / "profiles", factor)
    plan = work / "model.plan"
    args = [sampan_bin(), "build", onnx_path, "--backend", "sim", "--minShapes", "x:1x4",
            "--optShapes", f"x:{max_batch}x4", "--maxShapes", f"x:{max_batch}x4", "-o", plan]
    for p in profiles:
        args += ["--sim-profile", p]
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return plan


def model_config(max_batch, delay_us, max_queue=0, slo_ms=0, gpus=None):
    """A config.pbtxt: dynamic batching (max_queue > 0: Triton's default_queue_policy.max_queue_size,
    beyond which requests are shed with "Exceeds maximum queue size"), one instance on the simulated
    GPU (`gpus`: on those sim devices), and the latency SLO (the agent check's saturation is relative
    to it)."""
    queue = f"\n  default_queue_policy {{ max_queue_size: {max_queue} }}" if max_queue else ""
    slo = f" latency_slo_ms: {slo_ms}" if slo_ms else ""
    on = f" gpus: [ {', '.join(map(str, gpus))} ]" if gpus else ""
    return (f"max_batch_size: {max_batch}\n"
            f"dynamic_batching {{\n  max_queue_delay_microseconds: {delay_us}{queue}\n}}\n"
            f"instance_group [ {{ kind: KIND_GPU count: 1{on} }} ]\n"
            f'sampan {{ backend: "sim"{slo} }}\n')


def write_repo(repo, models):
    """models: {name: (plan path, config text)} -> a repository of sim plans."""
    for name, (plan, config) in models.items():
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy(plan, repo / name / "1" / "model.plan")
        (repo / name / "config.pbtxt").write_text(config)
    return repo


# ---------------------------------------------------------------- the topology

class Node:
    def __init__(self, index, address, work, netns=None):
        self.index, self.address, self.work = index, address, work
        self.netns = netns  # the network namespace it runs in (None: the root one, on a 127.0.0.x)
        self.name = f"node{index}"
        self.process = None
        self.repository = None
        self.log = work / f"{self.name}.log"

    @property
    def http(self):
        return f"http://{self.address}:{HTTP}"

    def start(self, repository, wait=True, timeout=90, extra=(), env=None):
        """`sampan serve` on this node's address (in its namespace, under `ip netns exec`, which
        execs the server: the process's pid and group are the server's); `extra`: more flags, `env`:
        more environment."""
        assert self.process is None or self.process.poll() is not None, f"{self.name} is running"
        self.repository = repository
        a = self.address
        netns = ["ip", "netns", "exec", self.netns] if self.netns else []
        if self.netns:
            # The test, on the bridge's address, is a remote client to a node in a namespace (as a
            # real cluster's controller is): its model loads and reloads need this. The subnet
            # holds no host but the test's own.
            extra = ("--allow-remote-model-control", *extra)
        self.process = start([*netns, sampan_bin(), "serve", "--model-repository", repository, "--backend", "sim",
                              "--http-address", a, "--grpc-address", a, "--metrics-address", a,
                              "--http-port", HTTP, "--grpc-port", GRPC, "--metrics-port", METRICS,
                              "--agent-port", AGENT, "--exit-timeout-secs", "20", *extra],
                             self.log, env={**os.environ, "SAMPAN_SIM_DEVICES": "1", "ASAN_OPTIONS": ASAN_OPTIONS,
                                            **(env or {})})
        self.started_at = time.monotonic()
        if wait:
            self.wait_ready(timeout)
        return self

    def ready(self):
        return http_get(self.http + "/v2/health/ready", timeout=1)[0] == 200

    def wait_ready(self, timeout=90):
        def check():
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.output()[-3000:]}")
            return self.ready()
        wait_for(check, timeout, f"{self.name} ready")

    def output(self):
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def metrics(self):
        status, body = http_get(f"http://{self.address}:{METRICS}/metrics", timeout=5)
        assert status == 200, f"{self.name}'s metrics answered {status}"
        return body.decode()

    def counter(self, name, model):
        """The value of `name{model="model",...}` on this node (summed over its other labels)."""
        total, seen = 0.0, False
        for line in self.metrics().splitlines():
            if line.startswith(name + "{") and f'model="{model}"' in line:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
        return total if seen else 0.0

    def rss_kib(self):
        for line in pathlib.Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


class Cluster:
    """N nodes, a gateway, Prometheus. `up()` starts them; `down()` kills whatever is left and
    removes the nodes' network.

    `network`: "netns" or "loopback" (the module's docstring); None: network_mode()'s, where a
    refused namespace, bridge or veth falls back to loopback (recorded: self.network_note). In the
    netns mode the gateway and Prometheus stay in the root namespace on 127.0.0.x addresses, as the
    load generator: they are the cluster's outside (clients reach the gateway, the gateway and
    Prometheus reach the nodes through the bridge), every scenario addresses them as before, and a
    namespace of their own would add a second routed hop to check and nothing that the nodes'
    isolation does not already show."""

    def __init__(self, work, nodes, check_ms, timeout_ms, repository, network=None):
        global NETWORK, _netns_refused
        self.work = work
        self.net = None
        self.network_note = ""
        mode = network or network_mode()
        if mode == "netns":
            try:
                self.net = Network(nodes)
            except NetworkUnavailable as e:
                if network == "netns" or os.environ.get("SAMPAN_CLUSTER_NETNS") == "1":
                    raise
                _netns_refused = self.network_note = f"namespaces refused: {e}"
                mode = "loopback"
        self.network = NETWORK = mode
        ports = (HTTP, GRPC, METRICS, AGENT, STATS, PROM_PORT)
        if self.net:
            addrs = self.net.addresses + free_block(2, ports)
            self.nodes = [Node(i, a, work, ns) for i, (a, ns) in enumerate(zip(addrs[:nodes], self.net.namespaces))]
        else:
            addrs = free_block(nodes + 2, ports)
            self.nodes = [Node(i, a, work) for i, a in enumerate(addrs[:nodes])]
        self.gateway_address, self.prom_address = addrs[nodes], addrs[nodes + 1]
        (work / "network.txt").write_text(
            f"{mode}{' ' + self.network_note if self.network_note else ''}\n"
            + (f"subnet {self.net.subnet} bridge {self.net.bridge} namespaces {' '.join(self.net.namespaces)}\n"
               if self.net else "") +
            "".join(f"{n.name} {n.address}\n" for n in self.nodes) +
            f"gateway {self.gateway_address} prometheus {self.prom_address}\n")
        self.check_ms, self.timeout_ms = check_ms, timeout_ms
        self.repository = repository
        self.gateway = self.prometheus = None
        self.gateway_log = work / "haproxy.log"

    # -- bring up
    def up(self):
        for n in self.nodes:
            n.start(self.repository, wait=False)
        for n in self.nodes:
            n.wait_ready()
        self.start_gateway()
        self.start_prometheus()
        return self

    def start_gateway(self, ready=None):
        """haproxy in front of every node; waits until `ready()` (default: every node UP)."""
        cfg = self.work / "haproxy.cfg"
        args = [sampan_bin(), "deploy", "haproxy", "--repository", self.repository, "--out", cfg,
                "--bind", self.gateway_address, "--http-port", HTTP, "--grpc-port", GRPC, "--stats-port", STATS,
                "--check-interval-ms", self.check_ms, "--timeout-ms", self.timeout_ms]
        for n in self.nodes:
            args += ["--node", f"{n.address}:{HTTP}:{GRPC}:{AGENT}"]
        r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        # The rehearsal's own addition: haproxy's log on its stdout, each line stamped with the
        # time haproxy wrote it (format iso: microseconds): an access log line per request (the
        # gateway's view of every request: access_log()) and haproxy's own server state changes
        # (gateway_events()).
        text = cfg.read_text()
        text = text.replace("global\n", "global\n  log stdout format iso local0 info\n", 1)
        text = text.replace("defaults\n", f"defaults\n  log global\n  log-format \"{LOG_FORMAT}\"\n", 1)
        cfg.write_text(text)
        c = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
        assert c.returncode == 0, c.stdout + c.stderr
        self.gateway = start([HAPROXY, "-f", cfg, "-db"], self.gateway_log)
        wait_for(ready or self.all_up, 30, "the nodes UP in the gateway")

    def start_prometheus(self, running=None, rule_files=()):
        """Prometheus scraping every node's metrics port; waits until `running` (default: all)
        targets are up."""
        cfg = self.work / "prometheus.yml"
        targets = ", ".join(f'"{n.address}:{METRICS}"' for n in self.nodes)
        rules = "".join(f"  - {r}\n" for r in rule_files)
        cfg.write_text("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n  evaluation_interval: 500ms\n"
                       + (f"rule_files:\n{rules}" if rules else "") +
                       f"scrape_configs:\n  - job_name: sampan\n    static_configs:\n      - targets: [{targets}]\n")
        self.prometheus = start([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={self.work / 'tsdb'}",
                                 f"--web.listen-address={self.prom_address}:{PROM_PORT}", "--log.level=warn"],
                                self.work / "prometheus.log")
        wait_for(lambda: http_get(f"http://{self.prom_address}:{PROM_PORT}/-/ready")[0] == 200, 60,
                 "Prometheus ready")
        want = len(self.nodes) if running is None else running
        wait_for(lambda: len(self.prom_query("up == 1")) >= want, 30, "Prometheus scraping the nodes")

    def down(self):
        """Kills every process this run started, then removes the nodes' network."""
        kill_everything()
        self.remove_network()

    def remove_network(self):
        """Removes the nodes' namespaces, veths and bridge (the nodes killed first if still running);
        asserts none is left. Nothing to do in the loopback mode."""
        if self.net:
            self.net.remove()

    # -- the gateway's view
    def stats(self):
        status, body = http_get(f"http://{self.gateway_address}:{STATS}/stats;csv", timeout=2)
        if status != 200:
            raise OSError(f"the gateway's stats page answered {status}")
        lines = body.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = (dict(zip(header, line.split(","))) for line in lines[1:] if line)
        return {(row["pxname"], row["svname"]): row for row in rows}

    def status_of(self, node, backend="http_model_m"):
        return self.stats()[(backend, node.name)]["status"]

    def all_up(self):
        s = self.stats()
        return all(v["status"] == "UP" for (b, sv), v in s.items() if sv.startswith("node"))

    def url(self):
        return f"{self.gateway_address}:{HTTP}"

    def access_log(self, since=0.0):
        """The gateway's log lines (dicts) of requests accepted at or after `since` (time.time()).

        "t" is haproxy's accept date (%Ts.%ms), which is NOT when the request came: on a keep-alive
        connection it is when the connection became ready for this request, i.e. the end of the
        previous response on it (haproxy's docs, "accept_date"), and the request's first byte came
        Th + Ti later (Ti: how long the client kept the connection idle). "start" is that: the
        request's arrival, after which haproxy picked its server (t + Th + Ti; Th is 0 on a reused
        connection). "end" is when haproxy logged it (the response sent), "ms" its active time
        (%Ta: first byte of the request to last of the response), "retries" %rc ("+N":
        redispatched), "client_port" and "server_port" the client's and the server-side
        connection's ports (%cp, %bp: which connections a request went over)."""
        out = []
        for line in self.gateway_log.read_text(errors="replace").splitlines():
            stamp, _, rest = line.partition(" ")
            parts = rest.split()
            if len(parts) != len(LOG_FIELDS) or not parts[3].isdigit() or not stamp[:4].isdigit():
                continue
            x = dict(zip(LOG_FIELDS, parts))
            t = float(x["t"])
            if t < since:
                continue
            for k in LOG_FIELDS[9:]:
                x[k] = int(x[k]) if x[k].lstrip("-").isdigit() else None
            x.update(t=t, status=int(x["status"]), ms=int(x["ms"]), end=_iso_time(stamp))
            x["start"] = t + (max(0, x["Th"] or 0) + max(0, x["Ti"] or 0)) / 1000
            out.append(x)
        return out

    def gateway_events(self, since=0.0, backend=None, server=None):
        """haproxy's own server state changes, as it logged them when it made them: dicts of "t"
        (Unix time), "backend", "server", "state" (the words after "is": "DOWN", "UP", "going
        DOWN for maintenance", ...) and "reason". Unlike a status sampled from the stats page, the
        time is the change's own."""
        out = []
        for line in self.gateway_log.read_text(errors="replace").splitlines():
            stamp, _, rest = line.partition(" ")
            m = _STATE_CHANGE.match(rest)
            if not m or not stamp[:4].isdigit():
                continue
            t = _iso_time(stamp)
            if t < since or (backend and m["backend"] != backend) or (server and m["server"] != server):
                continue
            out.append({"t": t, "backend": m["backend"], "server": m["server"], "state": m["state"],
                        "reason": m["reason"] or ""})
        return out

    # -- Prometheus
    def prom_query(self, query, at=None):
        q = {"query": query}
        if at is not None:
            q["time"] = f"{at:.3f}"
        status, body = http_get(f"http://{self.prom_address}:{PROM_PORT}/api/v1/query?" + urllib.parse.urlencode(q),
                                timeout=5)
        assert status == 200, (status, body)
        return {r["metric"].get("instance", ""): float(r["value"][1]) for r in json.loads(body)["data"]["result"]}

    # -- nodes
    def counts(self, model, name="nv_inference_request_success"):
        return [n.counter(name, model) for n in self.nodes]


# haproxy's access log line (log-format; the log's iso format puts the time it was written before
# it), one field a name of access_log()'s dicts.
LOG_FIELDS = ("t", "backend", "server", "status", "ms", "retries", "term", "method", "path",
              "Th", "Ti", "TR", "Tw", "Tc", "Tr", "Tt", "client_port", "server_port", "server_conns")
LOG_FORMAT = "%Ts.%ms %b %s %ST %Ta %rc %tsc %HM %HU %Th %Ti %TR %Tw %Tc %Tr %Tt %cp %bp %sc"
# haproxy's log line of a server state change ("Server http_model_m/node0 is DOWN, reason: ...").
_STATE_CHANGE = re.compile(r"Server (?P<backend>[^/ ]+)/(?P<server>\S+) is (?P<state>[^,.]+)(?:, reason: (?P<reason>[^,]+))?")


def _iso_time(stamp):
    """Unix time of the log's iso stamp (2026-12-07T19:19:29.641011+00:00)."""
    return datetime.datetime.fromisoformat(stamp).timestamp()




def perf(cluster, out_json, model, seconds, concurrency=None, rate=None, extra=(), protocol="http"):
    """`sampan perf` through the gateway for about `seconds` (three windows of seconds/3 after a
    warm-up; the stability test is off, so the three windows always run): returns (process, the
    result's dict). Start it with perf_start to run something meanwhile. protocol "grpc": through
    the gateway's gRPC (h2) frontend."""
    p, finish = perf_start(cluster, out_json, model, seconds, concurrency, rate, extra, protocol)
    return finish()


def perf_start(cluster, out_json, model, seconds, concurrency=None, rate=None, extra=(), protocol="http"):
    window_ms = max(100, int(seconds * 1000 / 3))
    url = cluster.url() if protocol == "http" else f"{cluster.gateway_address}:{GRPC}"
    args = [sampan_bin(), "perf", "-m", model, "-u", url, "-i", protocol, "-p", window_ms, "-r", "3", "-s", "100000",
            "--json", out_json]
    args += ["--concurrency-range", concurrency] if rate is None else ["--request-rate-range", rate]
    args += list(extra)
    log = out_json.with_suffix(".log")
    p = start(args, log)
    began = time.time()
    budget = seconds + 120  # warm-up, connecting, the last requests

    def finish():
        try:
            p.wait(budget)
        except subprocess.TimeoutExpired:
            _kill_group(p)
            raise AssertionError(f"sampan perf did not finish within {budget} s:\n{log.read_text()}")
        text = log.read_text(errors="replace")
        assert out_json.exists(), f"sampan perf wrote no JSON (exit {p.returncode}):\n{text}"
        result = json.loads(out_json.read_text())["results"][0]
        result["exit_code"] = p.returncode
        result["began"] = began
        result["first_error"] = next((line.split("first error:", 1)[1].strip() for line in text.splitlines()
                                      if "first error:" in line), "")
        return p, result

    return p, finish


def record(scenario, figures):
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    figures = dict(figures, scenario=scenario, tier="slow" if SLOW_TIER else "ci", recorded_by=RUN_ID, network=NETWORK,
                   sampan=sampan_bin(), recorded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    (OUT_DIR / f"{scenario}.json").write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return figures
