"""Security of the front ends, checked with tritonclient unmodified: restricted APIs as Triton
has them (`--http-restricted-api`, `--grpc-restricted-protocol`: refused without the header,
accepted with it), gRPC over TLS and mutual TLS (`--grpc-use-ssl`, `--grpc-use-ssl-mutual` with
Triton's certificate flags), HTTPS and mutual TLS on the KServe HTTP listener (`--http-use-ssl`,
`--http-use-ssl-mutual`, tritonclient.http with `ssl=True`), and the wrong inputs each named: an expired or mismatched server
certificate, a client certificate from another CA, a header with the wrong value, malformed flag
values. Certificates come from the `openssl` tool (scripts/setup.sh installs it)."""
import shutil
import subprocess
import urllib.request

import numpy as np
import pytest

from conftest import sampan_bin

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

X = np.arange(4, dtype=np.float32).reshape(1, 4)


def _openssl(*args, cwd=None):
    tool = shutil.which("openssl")
    if tool is None:
        pytest.fail("the openssl tool is missing (scripts/setup.sh installs it)")
    r = subprocess.run([tool, *map(str, args)], capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


def _ca(d, name):
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d / f"{name}.key", "-out", d / f"{name}.pem",
             "-days", "2", "-subj", f"/CN={name}")


def _signed(d, name, ca, *, san="DNS:localhost,IP:127.0.0.1", expired=False):
    """A key and a certificate signed by `ca` (localhost / 127.0.0.1); expired: valid in 2020 only."""
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", d / f"{name}.key", "-out", d / f"{name}.csr",
             "-subj", f"/CN={name}", "-addext", f"subjectAltName={san}")
    if not expired:
        ext = d / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n")
        _openssl("x509", "-req", "-in", d / f"{name}.csr", "-CA", d / f"{ca}.pem", "-CAkey", d / f"{ca}.key",
                 "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", d / f"{name}.pem")
        return
    cnf = d / "ca.cnf"
    (d / "index.txt").write_text("")
    (d / "serial").write_text("01\n")
    cnf.write_text("[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n"
                   "default_md = sha256\npolicy = any\ncopy_extensions = copy\n[any]\ncommonName = supplied\n")
    _openssl("ca", "-batch", "-config", cnf, "-keyfile", d / f"{ca}.key", "-cert", d / f"{ca}.pem", "-in",
             d / f"{name}.csr", "-out", d / f"{name}.pem", "-startdate", "20200101000000Z", "-enddate",
             "20200102000000Z", "-notext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "other_ca")
    _signed(d, "server", "ca")
    _signed(d, "client", "ca", san="DNS:client")
    _signed(d, "stranger", "other_ca", san="DNS:stranger")
    _signed(d, "expired", "ca", expired=True)
    return d


def _http_infer(srv, headers=None):
    c = httpclient.InferenceServerClient(srv.http_url)
    i = httpclient.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(X)
    return c.infer("add", [i], headers=headers).as_numpy("y")


def _grpc_client(srv, **kw):
    return grpcclient.InferenceServerClient(kw.pop("url", srv.grpc_url), **kw)


def _grpc_infer(client, headers=None):
    i = grpcclient.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(X)
    return client.infer("add", [i], headers=headers).as_numpy("y")


def test_http_restricted_apis(serve, add_repo):
    srv = serve(add_repo, "--http-restricted-api", "inference,model-config:infer-key=secret-1",
                "--http-restricted-api", "model-repository,statistics:Admin-Key=secret-2", grpc=False)
    c = httpclient.InferenceServerClient(srv.http_url)
    for headers in (None, {"infer-key": "wrong"}, {"admin-key": "secret-2"}):
        with pytest.raises(InferenceServerException, match="This API is restricted, expecting header 'infer-key'"):
            _http_infer(srv, headers)
    np.testing.assert_array_equal(_http_infer(srv, {"infer-key": "secret-1"}), X + 1)
    with pytest.raises(InferenceServerException, match="expecting header 'infer-key'"):
        c.get_model_config("add")
    assert c.get_model_config("add", headers={"infer-key": "secret-1"})["name"] == "add"
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        c.get_model_repository_index()
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        c.get_inference_statistics("add", headers={"infer-key": "secret-1"})
    assert c.get_model_repository_index(headers={"Admin-Key": "secret-2"})[0]["name"] == "add"
    assert c.get_inference_statistics("add", headers={"admin-key": "secret-2"})["model_stats"]
    # Open categories stay open.
    assert c.is_server_live() and c.is_model_ready("add") and c.get_server_metadata()["name"]
    # 403 over plain HTTP, the body naming the header.
    req = urllib.request.Request(f"{srv.http_base}/v2/models/add/config")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 403 and b"infer-key" in e.value.read()
    np.testing.assert_array_equal(_http_infer(srv, {"infer-key": "secret-1"}), X + 1)  # still serving


def test_grpc_restricted_protocols(serve, add_repo):
    srv = serve(add_repo, "--grpc-restricted-protocol", "inference:infer-key=secret-1",
                "--grpc-restricted-protocol", "model-repository,metadata:admin-key=secret-2", http=False)
    c = _grpc_client(srv)
    want = "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
    for headers in (None, {"triton-grpc-protocol-infer-key": "wrong"}, {"infer-key": "secret-1"}):
        with pytest.raises(InferenceServerException, match=want):
            _grpc_infer(c, headers)
    np.testing.assert_array_equal(_grpc_infer(c, {"triton-grpc-protocol-infer-key": "secret-1"}), X + 1)
    with pytest.raises(InferenceServerException, match="triton-grpc-protocol-admin-key"):
        c.get_server_metadata()
    assert c.get_server_metadata(headers={"triton-grpc-protocol-admin-key": "secret-2"}).name
    with pytest.raises(InferenceServerException, match="triton-grpc-protocol-admin-key"):
        c.unload_model("add")
    assert c.is_server_live() and c.is_model_ready("add")  # health is not restricted here
    # The stream is refused as a whole without the header, and serves with it.
    results = []
    c.start_stream(callback=lambda result, error: results.append((result, error)))
    i = grpcclient.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(X)
    try:
        c.async_stream_infer("add", [i])
    except InferenceServerException as e:  # the stream already ended: the client says so
        assert "no longer in valid state" in str(e)
    c.stop_stream()
    assert results and results[0][1] is not None and "triton-grpc-protocol-infer-key" in str(results[0][1])
    results.clear()
    c.start_stream(callback=lambda result, error: results.append((result, error)),
                   headers={"triton-grpc-protocol-infer-key": "secret-1"})
    c.async_stream_infer("add", [i])
    c.stop_stream()
    assert len(results) == 1 and results[0][1] is None
    np.testing.assert_array_equal(results[0][0].as_numpy("y"), X + 1)


def test_grpc_tls(serve, add_repo, pki):
    srv = serve(add_repo, "--grpc-use-ssl", "--grpc-server-cert", pki / "server.pem", "--grpc-server-key",
                pki / "server.key", http=False)
    url = f"localhost:{srv.grpc_port}"
    c = _grpc_client(srv, url=url, ssl=True, root_certificates=str(pki / "ca.pem"))
    np.testing.assert_array_equal(_grpc_infer(c), X + 1)
    plain = _grpc_client(srv, url=url)
    with pytest.raises(InferenceServerException):
        plain.is_server_live(client_timeout=5)
    wrong_ca = _grpc_client(srv, url=url, ssl=True, root_certificates=str(pki / "other_ca.pem"))
    with pytest.raises(InferenceServerException):
        wrong_ca.is_server_live(client_timeout=5)
    np.testing.assert_array_equal(_grpc_infer(c), X + 1)  # still serving


def test_grpc_mutual_tls(serve, add_repo, pki):
    srv = serve(add_repo, "--grpc-use-ssl-mutual", "--grpc-server-cert", pki / "server.pem", "--grpc-server-key",
                pki / "server.key", "--grpc-root-cert", pki / "ca.pem", http=False)
    url = f"localhost:{srv.grpc_port}"
    ok = _grpc_client(srv, url=url, ssl=True, root_certificates=str(pki / "ca.pem"),
                      private_key=str(pki / "client.key"), certificate_chain=str(pki / "client.pem"))
    np.testing.assert_array_equal(_grpc_infer(ok), X + 1)
    no_cert = _grpc_client(srv, url=url, ssl=True, root_certificates=str(pki / "ca.pem"))
    with pytest.raises(InferenceServerException):
        no_cert.is_server_live(client_timeout=5)
    stranger = _grpc_client(srv, url=url, ssl=True, root_certificates=str(pki / "ca.pem"),
                            private_key=str(pki / "stranger.key"), certificate_chain=str(pki / "stranger.pem"))
    with pytest.raises(InferenceServerException):
        stranger.is_server_live(client_timeout=5)
    np.testing.assert_array_equal(_grpc_infer(ok), X + 1)  # still serving


def _https_client(srv, **ssl_options):
    """tritonclient.http over TLS, verifying the server against ssl_options' ca_certs."""
    return httpclient.InferenceServerClient(f"localhost:{srv.http_port}", ssl=True, ssl_options=ssl_options,
                                            network_timeout=10, connection_timeout=5)


def _http_infer_with(client):
    i = httpclient.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(X)
    return client.infer("add", [i]).as_numpy("y")


def _fails(call):
    with pytest.raises(Exception) as e:  # an ssl error, a reset or tritonclient's exception: never an answer
        call()
    return e.value


def _plain_get(port, path="/v2/health/live"):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).status


def test_http_tls(serve, add_repo, pki):
    srv = serve(add_repo, "--http-use-ssl", "--http-server-cert", pki / "server.pem", "--http-server-key",
                pki / "server.key", grpc=False)
    assert "HTTP speaks TLS only (https://)" in srv.output()
    c = _https_client(srv, ca_certs=str(pki / "ca.pem"))
    assert c.is_server_live() and c.is_model_ready("add")
    np.testing.assert_array_equal(_http_infer_with(c), X + 1)
    for _ in range(3):  # keep-alive: one TLS connection, several requests
        np.testing.assert_array_equal(_http_infer_with(c), X + 1)
    assert c.get_model_metadata("add")["name"] == "add"
    _fails(lambda: _plain_get(srv.http_port))  # plain HTTP to the TLS port gets no answer
    wrong_ca = _https_client(srv, ca_certs=str(pki / "other_ca.pem"))
    _fails(wrong_ca.is_server_live)  # the client does not trust the server's CA
    # Many handshakes that go wrong (a client that sends garbage, one that closes at once) leave the
    # server serving.
    import socket
    for payload in (b"\x16\x03\x01\x00\x05hello", b"GET / HTTP/1.1\r\n\r\n", b""):
        with socket.create_connection(("127.0.0.1", srv.http_port), timeout=5) as sock:
            sock.sendall(payload)
            sock.settimeout(5)
            try:
                sock.recv(100)
            except (ConnectionError, socket.timeout):
                pass
    np.testing.assert_array_equal(_http_infer_with(c), X + 1)  # still serving
    # Metrics stay on their own plain listener.
    assert 'nv_inference_request_success{model="add",version="1"} 5' in srv.metrics()


def test_http_mutual_tls(serve, add_repo, pki):
    srv = serve(add_repo, "--http-use-ssl-mutual", "--http-server-cert", pki / "server.pem", "--http-server-key",
                pki / "server.key", "--http-root-cert", pki / "ca.pem", grpc=False)
    assert "clients must show a certificate" in srv.output()
    ok = _https_client(srv, ca_certs=str(pki / "ca.pem"), certfile=str(pki / "client.pem"),
                       keyfile=str(pki / "client.key"))
    np.testing.assert_array_equal(_http_infer_with(ok), X + 1)
    no_cert = _https_client(srv, ca_certs=str(pki / "ca.pem"))
    _fails(no_cert.is_server_live)
    stranger = _https_client(srv, ca_certs=str(pki / "ca.pem"), certfile=str(pki / "stranger.pem"),
                             keyfile=str(pki / "stranger.key"))
    _fails(stranger.is_server_live)
    np.testing.assert_array_equal(_http_infer_with(ok), X + 1)  # still serving
    # A client that resumes its TLS session (curl, Java and Python with session= do) is served:
    # the server names its session id context, without which OpenSSL refuses resumption when
    # client certificates are verified.
    import socket
    import ssl
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    session = None
    for attempt in range(3):
        with socket.create_connection(("127.0.0.1", srv.http_port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s:
                s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                answer = b""
                while chunk := s.recv(4096):
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 200"), answer
                if attempt > 0:
                    assert s.session_reused, f"attempt {attempt}: the session was not resumed"
                session = s.session
    # An HTTPS request that is refused inside the TLS session still gets its HTTP answer.
    with pytest.raises(InferenceServerException) as e:
        ok.get_model_metadata("no_such_model")
    assert "no_such_model" in str(e.value)


def _start_fails(repo, *args):
    ports = (["--metrics-port", "-1"] + ([] if "--grpc-port" in args else ["--grpc-port", "0"]) +
             ([] if "--http-port" in args else ["--http-port", "0"]))
    r = subprocess.run([sampan_bin(), "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1",
                        "--grpc-address", "127.0.0.1", *ports, *map(str, args)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0, r.stdout + r.stderr
    return r.stderr


@pytest.mark.parametrize("args, message", [
    (["--grpc-use-ssl", "--grpc-server-cert", "{d}/expired.pem", "--grpc-server-key", "{d}/expired.key"],
     "the server certificate '{d}/expired.pem' expired on Jan  2 00:00:00 2020 GMT"),
    (["--grpc-use-ssl", "--grpc-server-cert", "{d}/server.pem", "--grpc-server-key", "{d}/client.key"],
     "'{d}/client.key' is not the private key of the certificate '{d}/server.pem'"),
    (["--grpc-use-ssl", "--grpc-server-cert", "{d}/missing.pem", "--grpc-server-key", "{d}/server.key"],
     "--grpc-server-cert: cannot read '{d}/missing.pem'"),
    (["--grpc-use-ssl", "--grpc-server-cert", "{d}/server.pem"], "--grpc-use-ssl needs --grpc-server-cert and"),
    (["--grpc-use-ssl-mutual", "--grpc-server-cert", "{d}/server.pem", "--grpc-server-key", "{d}/server.key"],
     "--grpc-use-ssl-mutual needs --grpc-root-cert"),
    (["--grpc-server-cert", "{d}/server.pem"], "given without --grpc-use-ssl"),
    (["--http-restricted-api", "inference,bogus:k=v"], "--http-restricted-api 'inference,bogus:k=v': unknown API 'bogus'"),
    (["--http-restricted-api", "inference:k=v", "--http-restricted-api", "inference,health:j=w"],
     "API 'inference' is already in another restricted group"),
    (["--grpc-restricted-protocol", "inference:k"], "expected KEY=VALUE after ':'"),
    (["--grpc-restricted-protocol", "inference"], "expected API[,API...]:KEY=VALUE"),
    (["--grpc-restricted-protocol", "inference:k=v", "--grpc-port", "-1"], "gRPC is off"),
    (["--http-use-ssl", "--http-server-cert", "{d}/expired.pem", "--http-server-key", "{d}/expired.key"],
     "the server certificate '{d}/expired.pem' expired on Jan  2 00:00:00 2020 GMT"),
    (["--http-use-ssl", "--http-server-cert", "{d}/server.pem", "--http-server-key", "{d}/client.key"],
     "'{d}/client.key' is not the private key of the certificate '{d}/server.pem'"),
    (["--http-use-ssl", "--http-server-cert", "{d}/missing.pem", "--http-server-key", "{d}/server.key"],
     "--http-server-cert: cannot read '{d}/missing.pem'"),
    (["--http-use-ssl", "--http-server-key", "{d}/server.key"], "--http-use-ssl needs --http-server-cert and"),
    (["--http-use-ssl-mutual", "--http-server-cert", "{d}/server.pem", "--http-server-key", "{d}/server.key"],
     "--http-use-ssl-mutual needs --http-root-cert"),
    (["--http-use-ssl", "--http-server-cert", "{d}/server.pem", "--http-server-key", "{d}/server.key",
      "--http-root-cert", "{d}/ca.pem"], "--http-root-cert verifies client certificates, which only"),
    (["--http-use-ssl-mutual", "--http-server-cert", "{d}/server.pem", "--http-server-key", "{d}/server.key",
      "--http-root-cert", "{d}/server.key"], "'{d}/server.key'"),
    (["--http-server-cert", "{d}/server.pem"], "given without --http-use-ssl"),
    (["--http-use-ssl", "--http-server-cert", "{d}/server.pem", "--http-server-key", "{d}/server.key",
      "--http-port", "-1"], "HTTP is off"),
])
def test_bad_security_inputs_are_named(add_repo, pki, args, message):
    err = _start_fails(add_repo, *[a.format(d=pki) for a in args])
    assert message.format(d=pki) in err, err


# ---- limits ---------------------------------------------------------------------------------

def test_request_element_limit(serve, add_repo):
    srv = serve(add_repo, "--max-request-elements", "8")
    h = httpclient.InferenceServerClient(srv.http_url)
    g = _grpc_client(srv)
    for client, mod in ((h, httpclient), (g, grpcclient)):
        ok = mod.InferInput("x", [2, 4], "FP32")
        ok.set_data_from_numpy(np.zeros((2, 4), np.float32))
        assert client.infer("add", [ok]).as_numpy("y").shape == (2, 4)  # 8 elements: at the limit
        big = mod.InferInput("x", [3, 4], "FP32")
        big.set_data_from_numpy(np.zeros((3, 4), np.float32))
        with pytest.raises(InferenceServerException, match="more than 8 elements, the server's limit"):
            client.infer("add", [big])
    np.testing.assert_array_equal(_http_infer(srv), X + 1)  # still serving


def _count_admitted(call, n, rate):
    """Calls `call` n times; returns how many were admitted, checking the refusals' message and that the
    admitted count fits a token bucket of `rate` (burst max(1, rate)) over the measured time."""
    import time
    t0 = time.monotonic()
    admitted = 0
    for _ in range(n):
        try:
            call()
            admitted += 1
        except InferenceServerException as e:
            assert f"more than {rate:g} requests per second" in str(e), str(e)
    elapsed = time.monotonic() - t0
    assert max(1, rate) <= admitted <= max(1, rate) + rate * elapsed + 1, (admitted, elapsed)
    assert admitted < n, "nothing was refused"
    return admitted


def test_rate_limit_per_connection(serve, add_repo):
    srv = serve(add_repo, "--rate-limit-per-connection", "2")
    h = httpclient.InferenceServerClient(srv.http_url)  # one keep-alive connection
    _count_admitted(lambda: h.infer("add", [_input(httpclient)]), 20, 2)
    assert all(h.is_server_live() for _ in range(30))  # health checks are not counted
    # 429 with Retry-After over plain HTTP, on a connection of its own (its own bucket).
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=10)
    codes = []
    for _ in range(12):
        conn.request("GET", "/v2/models/add/config")
        r = conn.getresponse()
        r.read()
        codes.append((r.status, r.getheader("Retry-After")))
    conn.close()
    assert (429, "1") in codes and codes[0] == (200, None), codes
    g = _grpc_client(srv)

    def grpc_call():
        try:
            g.infer("add", [_input(grpcclient)])
        except InferenceServerException as e:
            assert "RESOURCE_EXHAUSTED" in str(e.status()), e.status()
            raise
    _count_admitted(grpc_call, 20, 2)
    # A stream's requests: the ones over the limit get an error response, the stream stays open.
    import time
    time.sleep(1.5)  # the bucket refills
    results = []
    g.start_stream(callback=lambda result, error: results.append(error))
    for _ in range(15):
        g.async_stream_infer("add", [_input(grpcclient)])
    g.stop_stream()
    errors = [e for e in results if e is not None]
    assert len(results) == 15 and 1 <= len(errors) <= 13, [str(e) for e in errors]
    assert all("more than 2 requests per second" in str(e) for e in errors)


def _input(mod):
    i = mod.InferInput("x", [1, 4], "FP32")
    i.set_data_from_numpy(X)
    return i
