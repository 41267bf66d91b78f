"""Signed plans: `sampan build --sign KEY` appends an Ed25519 signature over the whole plan file,
`sampan serve --plan-trust PUBKEY` loads a repository's plan files only when a trusted key signed
them and nothing changed since. A plan with one flipped byte (signed before the flip), a plan
signed by another key and an unsigned plan each fail to load with a clear reason naming the file,
while the server keeps serving the trusted model. Keys come from the `openssl` tool
(scripts/setup.sh installs it)."""
import json
import shutil
import subprocess
import urllib.request

import numpy as np
import pytest

from conftest import sampan_bin


def _openssl(*args):
    tool = shutil.which("openssl")
    if tool is None:
        pytest.fail("the openssl tool is missing (scripts/setup.sh installs it)")
    subprocess.run([tool, *args], check=True, capture_output=True)


@pytest.fixture
def keys(tmp_path):
    k = tmp_path / "keys"
    k.mkdir()
    _openssl("genpkey", "-algorithm", "ed25519", "-out", str(k / "signer.pem"))
    _openssl("pkey", "-in", str(k / "signer.pem"), "-pubout", "-out", str(k / "signer.pub.pem"))
    _openssl("genpkey", "-algorithm", "ed25519", "-out", str(k / "other.pem"))
    _openssl("genpkey", "-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(k / "rsa.pem"))
    return k


def _build(onnx_path, plan_path, *extra):
    return subprocess.run([sampan_bin(), "build", str(onnx_path), "--backend", "cpu", "-o", str(plan_path), *extra],
                          capture_output=True, text=True, timeout=120)


def _plan_repo(tmp_path, make_add_model, keys):
    """A repository of four plan models: trusted (signed by signer), flipped (signed by signer, one
    byte changed after), other (signed by another key), unsigned."""
    onnx_path = tmp_path / "add.onnx"
    onnx_path.write_bytes(make_add_model(batch=False, bias=2.0))
    repo = tmp_path / "repo"
    plans = {}
    for name, key in [("trusted", "signer.pem"), ("flipped", "signer.pem"), ("other", "other.pem"), ("unsigned", None)]:
        vdir = repo / name / "1"
        vdir.mkdir(parents=True)
        r = _build(onnx_path, vdir / "model.plan", *(["--sign", str(keys / key)] if key else []))
        assert r.returncode == 0, r.stdout + r.stderr
        if key:
            assert "signed:     Ed25519" in r.stdout, r.stdout
        plans[name] = vdir / "model.plan"
    data = bytearray(plans["flipped"].read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the plan's bytes, before the signature trailer
    plans["flipped"].write_bytes(bytes(data))
    return repo, plans


def _infer(srv, model):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}
    req = urllib.request.Request(f"{srv.http_base}/v2/models/{model}/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _model_reason(srv, model):
    req = urllib.request.Request(f"{srv.http_base}/v2/repository/index", data=b"{}",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        index = json.loads(r.read())
    for entry in index:
        if entry["name"] == model:
            return entry.get("state"), entry.get("reason", "")
    return None, ""


def test_plan_trust_loads_only_plans_a_trusted_key_signed(serve, tmp_path, make_add_model, keys):
    repo, plans = _plan_repo(tmp_path, make_add_model, keys)
    srv = serve(repo, "--plan-trust", keys / "signer.pub.pem", "--strict-readiness", "false")
    out = _infer(srv, "trusted")
    assert np.allclose(out["outputs"][0]["data"], [3, 4, 5, 6])
    state, reason = _model_reason(srv, "flipped")
    assert state == "UNAVAILABLE" and "signature check failed" in reason and "changed after signing" in reason \
        and str(plans["flipped"]) in reason, reason
    state, reason = _model_reason(srv, "other")
    assert state == "UNAVAILABLE" and "which is not trusted" in reason and str(plans["other"]) in reason, reason
    state, reason = _model_reason(srv, "unsigned")
    assert state == "UNAVAILABLE" and "not signed" in reason, reason
    # The refused loads left the trusted model serving.
    out = _infer(srv, "trusted")
    assert np.allclose(out["outputs"][0]["data"], [3, 4, 5, 6])


def test_without_plan_trust_signed_and_unsigned_plans_load(serve, tmp_path, make_add_model, keys):
    repo, plans = _plan_repo(tmp_path, make_add_model, keys)
    shutil.rmtree(repo / "flipped")  # (its checksum catches the flip even unsigned)
    srv = serve(repo)
    for model in ("trusted", "other", "unsigned"):
        assert np.allclose(_infer(srv, model)["outputs"][0]["data"], [3, 4, 5, 6]), model
    # `sampan run` reads a signed plan as any plan.
    r = subprocess.run([sampan_bin(), "run", str(plans["trusted"]), "--random-inputs"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_signing_and_trust_refuse_wrong_keys(tmp_path, make_add_model, keys):
    onnx_path = tmp_path / "add.onnx"
    onnx_path.write_bytes(make_add_model(batch=False))
    r = _build(onnx_path, tmp_path / "m.plan", "--sign", str(keys / "rsa.pem"))
    assert r.returncode != 0 and "Ed25519" in r.stderr and "rsa.pem" in r.stderr, r.stderr
    assert not (tmp_path / "m.plan").exists()
    r = _build(onnx_path, tmp_path / "m.plan", "--sign", str(tmp_path / "missing.pem"))
    assert r.returncode != 0 and "missing.pem" in r.stderr, r.stderr
    r = _build(onnx_path, tmp_path / "m.plan", "--sign", str(keys / "signer.pub.pem"))
    assert r.returncode != 0 and "no private key" in r.stderr, r.stderr
    r = subprocess.run([sampan_bin(), "serve", "--model-repository", str(tmp_path), "--plan-trust",
                        str(keys / "rsa.pem"), "--http-port", "-1", "--grpc-port", "-1", "--metrics-port", "-1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--plan-trust" in r.stderr and "Ed25519" in r.stderr, r.stderr
