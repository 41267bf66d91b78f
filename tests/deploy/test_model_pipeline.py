"""deploy/ci: the model release step (model-pipeline.sh: export -> publish -> gate -> canary) run
for real against `sampan serve` polling the repository under load, the GitHub Actions example
validated against GitHub's workflow schema (check-jsonschema's vendored copy), and the script's
refusals with their exit codes. Bounded: about 30 s, loopback only."""

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

from deploy_common import ROOT, SAMPAN, tool

PIPELINE = ROOT / "deploy" / "ci" / "model-pipeline.sh"

CONFIG = """
name: "m"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

# The export step of the pipeline: a script writing an ONNX model (y = x + BIAS) to
# $SAMPAN_EXPORT_ONNX, as a torch.onnx.export script would.
EXPORT = """
import os, sys
from onnx import TensorProto, helper, numpy_helper
import numpy as np
bias = float(sys.argv[1])
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
b = numpy_helper.from_array(np.full((4,), bias, np.float32), "bias")
g = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["y"])], "add", [x], [y], initializer=[b])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
open(os.environ["SAMPAN_EXPORT_ONNX"], "wb").write(m.SerializeToString())
"""


def pipeline(*args, timeout=120):
    env = dict(os.environ, SAMPAN_BIN=SAMPAN)
    return subprocess.run(["bash", str(PIPELINE), *[str(a) for a in args]], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_github_actions_example_is_a_valid_workflow(tmp_path):
    path = ROOT / "deploy" / "ci" / "github-actions-model-release.yml"
    r = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # And the check can fail: a typo'd key is refused.
    bad = tmp_path / "bad.yml"
    bad.write_text(path.read_text().replace("runs-on:", "runs_on:"))
    r = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode != 0


def test_both_ci_examples_call_the_pipeline_with_its_flags():
    flags = set(re.findall(r"--[a-z][a-z-]+", PIPELINE.read_text().split("set -euo")[0]))
    for name in ("Jenkinsfile", "github-actions-model-release.yml"):
        text = (ROOT / "deploy" / "ci" / name).read_text()
        assert "deploy/ci/model-pipeline.sh" in text, name
        # The pipeline's own flags (quoted text is the export command's business).
        used = set(re.findall(r"(--[a-z][a-z-]+) ", re.sub(r"'[^']*'", "", text)))
        assert used and used <= flags, (name, used - flags)


@pytest.mark.parametrize("args,code,message", [
    ([], 2, "--repository and --model are required"),
    (["--repository", "r", "--model", "m"], 2, "give exactly one of --onnx and --export-cmd"),
    (["--repository", "r", "--model", "m", "--onnx", "a", "--accuracy-data", "d"], 2, "go together"),
    (["--repository", "r", "--model", "m", "--onnx", "a", "--bogus"], 2, "unknown argument '--bogus'"),
    (["--repository", "r", "--model", "m", "--export-cmd", "exit 1"], 6, "the export command failed"),
])
def test_refusals_have_their_exit_codes(tmp_path, args, code, message):
    r = pipeline(*args)
    assert r.returncode == code and message in r.stderr, (r.returncode, r.stderr)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_release_through_the_pipeline_gate_and_canary(tmp_path):
    if not os.path.exists(SAMPAN):
        pytest.skip(f"no sampan binary at {SAMPAN} (set SAMPAN_BIN)")
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "config.pbtxt").write_text(CONFIG)
    (tmp_path / "export.py").write_text(EXPORT)
    samples = tmp_path / "samples"
    samples.mkdir()
    for k in range(3):
        np.save(samples / f"x.{k}.npy", np.random.default_rng(k).uniform(-1, 1, (2, 4)).astype(np.float32))
    export = f"{sys.executable} {tmp_path / 'export.py'}"

    r = pipeline("--repository", repo, "--model", "m", "--config", tmp_path / "config.pbtxt",
                 "--export-cmd", f"{export} 1.0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "published m version 1" in r.stdout and "no canary" in r.stdout

    http = free_port()
    srv = subprocess.Popen([SAMPAN, "serve", "--model-repository", str(repo), "--model-control-mode", "poll",
                            "--repository-poll-secs", "1", "--http-address", "127.0.0.1", "--http-port", str(http),
                            "--grpc-port", "-1", "--metrics-port", "-1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop = threading.Event()
    answers, errors = {}, []

    def load():
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                       "data": [0.1, 0.2, 0.3, 0.4]}]}).encode()
        while not stop.is_set():
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{http}/v2/models/m/infer", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=10) as resp:
                    v = json.loads(resp.read())["model_version"]
                    answers[v] = answers.get(v, 0) + 1
            except Exception as e:  # noqa: BLE001 - counted
                errors.append(str(e))
                time.sleep(0.05)

    t = threading.Thread(target=load, daemon=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2):
                    break
            except Exception:  # noqa: BLE001 - not up yet
                assert time.monotonic() < deadline and srv.poll() is None, "server did not start"
                time.sleep(0.2)
        t.start()
        # A model that misses the gate stops the pipeline with exit 3; nothing is published.
        r = pipeline("--repository", repo, "--model", "m", "--export-cmd", f"{export} 5.0",
                     "--accuracy-data", samples, "--accuracy-bound", 0.01, "--accuracy-metric", "rel_l2",
                     "--canary", 20, "--canary-window-secs", 2)
        assert r.returncode == 3 and "misses the bound" in r.stderr, (r.returncode, r.stderr)
        assert sorted(p.name for p in (repo / "m").iterdir() if p.name.isdigit()) == ["1"]
        # A good one passes the gate and the canary: exit 0 once the servers promote it.
        r = pipeline("--repository", repo, "--model", "m", "--export-cmd", f"{export} 1.0001",
                     "--accuracy-data", samples, "--accuracy-bound", 0.01, "--accuracy-metric", "rel_l2",
                     "--canary", 20, "--canary-window-secs", 2, "--canary-min-requests", 5, "--wait-secs", 40,
                     "--canary-max-p99-ratio", 3, "--canary-p99-slack-ms", 50)  # two busy cores (ASan): tails jitter
        assert r.returncode == 0, r.stdout + r.stderr
        assert "version 2 promoted" in r.stdout and '"decision": "promoted"' in r.stdout
    finally:
        stop.set()
        if t.is_alive():
            t.join(timeout=30)  # the last request is answered before the server stops
        srv.terminate()
        srv.wait(timeout=30)
    assert errors == [], errors[:3]
    assert answers.get("2", 0) > 0, answers
