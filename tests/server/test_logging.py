"""The server log and Triton's logging API, with tritonclient unmodified: the settings read and
changed over HTTP (/v2/logging) and gRPC (LogSettings), taking effect at once (verbose lines,
the file, the format); the access log (one line per inference, JSON or text); the wrong settings
each named with nothing changed; and changes refused without the model-control token."""
import json
import time

import numpy as np
import pytest

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

X = np.arange(4, dtype=np.float32).reshape(1, 4)


def _infer(client, mod):
    i = mod.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(X)
    return client.infer("add", [i]).as_numpy("y")


def _lines(path, timeout=10):
    deadline = time.time() + timeout
    while True:
        text = path.read_text() if path.exists() else ""
        if text or time.time() > deadline:
            return [line for line in text.splitlines() if line]
        time.sleep(0.05)


def test_logging_api_over_http_and_grpc(serve, add_repo, tmp_path):
    srv = serve(add_repo)
    h = httpclient.InferenceServerClient(srv.http_url)
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    settings = h.get_log_settings()
    assert settings == {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
                        "log_verbose_level": 0, "log_format": "default", "log_access": False}, settings
    log = tmp_path / "server.log"
    new = h.update_log_settings({"log_file": str(log), "log_format": "json", "log_access": True})
    assert new["log_file"] == str(log) and new["log_format"] == "json" and new["log_access"] is True
    np.testing.assert_array_equal(_infer(h, httpclient), X + 1)
    np.testing.assert_array_equal(_infer(g, grpcclient), X + 1)
    records = [json.loads(line) for line in _lines(log)]
    access = [r for r in records if r["message"] == "inference"]
    assert [r["protocol"] for r in access] == ["http", "grpc"], records
    for r in access:
        assert r["level"] == "INFO" and r["model"] == "add" and r["outcome"] == "OK" and int(r["microseconds"]) > 0
        assert r["time"].endswith("Z") and "T" in r["time"]
    # gRPC: read and change; the answer is every setting.
    got = g.get_log_settings(as_json=True)["settings"]
    assert got["log_format"]["string_param"] == "json" and got["log_access"]["bool_param"] is True
    g.update_log_settings({"log_access": False, "log_format": "ISO8601", "log_verbose_level": 1})
    assert h.get_log_settings()["log_verbose_level"] == 1
    np.testing.assert_array_equal(_infer(h, httpclient), X + 1)  # access log off: no line
    h.update_log_settings({"log_info": False})
    h.update_log_settings({"log_info": True, "log_access": True, "log_format": "default"})
    np.testing.assert_array_equal(_infer(h, httpclient), X + 1)
    lines = _lines(log)
    assert sum("inference" in line for line in lines) == 3, lines
    assert lines[-1].startswith("[serve] inference protocol=http model=add"), lines[-1]


# tritonclient.grpc picks each value's protobuf type by the setting's name, so wrong types are
# sent over HTTP only.
@pytest.mark.parametrize("settings, message, over_grpc", [
    ({"log_bogus": True}, "unknown log setting 'log_bogus'", True),
    ({"log_info": "yes"}, "log setting 'log_info' takes a boolean", False),
    ({"log_format": "xml"}, "log format 'xml': one of default, ISO8601, json", True),
    ({"log_file": "/nonexistent-dir/x.log"}, "log file '/nonexistent-dir/x.log' cannot be opened", True),
    ({"log_verbose_level": True, "log_format": "json"}, "takes a non-negative integer", False),
])
def test_wrong_log_settings_are_named_and_change_nothing(serve, add_repo, settings, message, over_grpc):
    srv = serve(add_repo)
    clients = [httpclient.InferenceServerClient(srv.http_url)]
    if over_grpc:
        clients.append(grpcclient.InferenceServerClient(srv.grpc_url))
    for client in clients:
        with pytest.raises(InferenceServerException, match=message.replace("(", "\\(").replace(")", "\\)")):
            client.update_log_settings(settings)
    h = httpclient.InferenceServerClient(srv.http_url)
    assert h.get_log_settings()["log_format"] == "default" and h.get_log_settings()["log_file"] == ""
    np.testing.assert_array_equal(_infer(h, httpclient), X + 1)


def test_log_flags_and_changes_need_the_control_token(serve, add_repo):
    srv = serve(add_repo, "--log-format", "ISO8601", "--log-access", "true", "--model-control-token", "s3cret")
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    np.testing.assert_array_equal(_infer(g, grpcclient), X + 1)
    deadline = time.time() + 10
    while "INFO inference protocol=grpc model=add" not in srv.output() and time.time() < deadline:
        time.sleep(0.05)
    line = next(ln for ln in srv.output().splitlines() if "INFO inference protocol=grpc" in ln)
    assert line[:4].isdigit() and line[10] == "T", line  # 2026-12-06T04:31:02.123456Z INFO ...
    h = httpclient.InferenceServerClient(srv.http_url)
    assert h.get_log_settings()["log_access"] is True  # reading needs no token
    with pytest.raises(InferenceServerException, match="Bearer"):
        h.update_log_settings({"log_access": False})
    with pytest.raises(InferenceServerException, match="model control token"):
        g.update_log_settings({"log_access": False})
    assert h.update_log_settings({"log_access": False}, headers={"Authorization": "Bearer s3cret"})["log_access"] is False
