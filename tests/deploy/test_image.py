"""The CPU image scripts/image.sh builds (an OCI image layout): unpacked with umoci, `sampan serve`
run from its rootfs as the image says (entrypoint, user 10001, /models) under chroot in a private
mount and PID namespace, on the host's loopback; it passes health and one KServe v2 inference.

Runs when SAMPAN_IMAGE names the image (LAYOUT:TAG; `bash scripts/test_deploy.sh --image` builds
build/image/oci:cpu and sets it); skipped otherwise: building the image takes 2-3 min on CI's
machine, past the deploy stage's budget (docs/deploy.md)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

IMAGE = os.environ.get("SAMPAN_IMAGE", "")
pytestmark = pytest.mark.skipif(not IMAGE, reason="SAMPAN_IMAGE not set (bash scripts/test_deploy.sh --image)")

CONFIG = """name: "add"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  { name: "a" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "b" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "c" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def add_model(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    assert os.geteuid() == 0, "unpacking and chroot need root"
    out = tmp_path_factory.mktemp("image") / "bundle"
    p = subprocess.run(["umoci", "unpack", "--image", IMAGE, str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return out


def test_image_config(bundle):
    spec = json.loads((bundle / "config.json").read_text())
    proc = spec["process"]
    assert (proc["user"]["uid"], proc["user"]["gid"]) == (10001, 10001)
    assert proc["args"][:4] == ["/usr/local/bin/sampan", "serve", "--model-repository", "/models"]
    assert proc["cwd"] == "/models"
    rootfs = bundle / "rootfs"
    assert (rootfs / "models").stat().st_uid == 10001
    assert "sampan:x:10001:10001:" in (rootfs / "etc/passwd").read_text()
    # The image holds exactly the list's run packages (and what this binary added, named in
    # image.txt beside the layout).
    listed = (rootfs / "usr/share/sampan/packages.txt").read_text()
    status = (rootfs / "var/lib/dpkg/status").read_text()
    for line in listed.splitlines():
        f = line.split()
        if f and f[0] == "run":
            assert f"Package: {f[1]}\n" in status, f[1]


def test_serves_health_and_one_inference(bundle):
    rootfs = bundle / "rootfs"
    spec = json.loads((bundle / "config.json").read_text())
    models = rootfs / "models"
    shutil.rmtree(models / "add", ignore_errors=True)
    (models / "add/1").mkdir(parents=True)
    (models / "add/config.pbtxt").write_text(CONFIG)
    add_model(models / "add/1/model.onnx")
    for p in [models / "add", models / "add/1", models / "add/config.pbtxt", models / "add/1/model.onnx"]:
        os.chown(p, 10001, 10001)
    http, grpc, metrics = free_port(), free_port(), free_port()
    args = spec["process"]["args"] + [
        "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
        "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
        "--exit-timeout-secs", "5"]
    env = dict(e.split("=", 1) for e in spec["process"]["env"])
    env["ASAN_OPTIONS"] = "detect_leaks=0"  # an ASan build of sampan runs in the image too
    # The image's process, as a runtime would start it: own mount and PID namespaces, /proc and
    # /dev inside, the user and working directory of the image config, the host's loopback.
    script = ('mount -t proc proc "$R/proc" && mount --rbind /dev "$R/dev" && '
              'cd "$R/models" && exec chroot --userspec=10001:10001 "$R" "$@"')
    server = subprocess.Popen(
        ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", script, "sh", *args],
        env={**env, "R": str(rootfs)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        ready = False
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2) as r:
                    ready = r.status == 200
                    break
            except OSError:
                time.sleep(0.5)
        assert ready, f"not ready (exit {server.poll()})"
        body = json.dumps({"inputs": [
            {"name": "a", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "b", "shape": [4], "datatype": "FP32", "data": [10, 20, 30, 40]}]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{http}/v2/models/add/infer", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            out = json.loads(r.read())
        (c,) = out["outputs"]
        assert c["name"] == "c" and c["data"] == [11, 22, 33, 44]
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as r:
            assert b'nv_inference_request_success{model="add"' in r.read()
    finally:
        # sampan is PID 1 of its PID namespace, the child of unshare; a signal to unshare would
        # not reach it (chroot --userspec drops unshare's parent-death signal with the uid).
        children = Path(f"/proc/{server.pid}/task/{server.pid}/children")
        (child,) = [int(c) for c in children.read_text().split()] if children.exists() else [None]
        if child:
            os.kill(child, signal.SIGTERM)
        try:
            log, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            if child:
                os.kill(child, signal.SIGKILL)
            log, _ = server.communicate(timeout=30)
        print(log[-4000:])
    assert server.returncode == 0, log[-4000:]
    assert "received SIGTERM" in log and log.rstrip().endswith("stopped")
