"""`sampan serve` under malformed HTTP: seeded random mutations of valid requests to
every endpoint (methods, paths, headers, Content-Length and
Inference-Header-Content-Length that lie, chunked bodies, truncated JSON and
binary tensors, shared-memory registrations pointing anywhere) sent over raw
sockets to a live server. Every request must get an HTTP answer in time (or the
connection closed, for requests that are not HTTP); no answer may be a 5xx
except 503; and afterwards the server is alive and still infers correctly.

SAMPAN_HTTP_FUZZ_REQUESTS sets the count (default 1500; the slow tier runs more),
SAMPAN_HTTP_FUZZ_SEED the seed. A failure prints the request that caused it."""
import json
import os
import random
import socket
import struct
import urllib.request

import numpy as np
import pytest

REQUESTS = int(os.environ.get("SAMPAN_HTTP_FUZZ_REQUESTS", "1500"))
SEED = int(os.environ.get("SAMPAN_HTTP_FUZZ_SEED", "1"))


def _request(method, path, headers=(), body=b""):
    head = f"{method} {path} HTTP/1.1\r\nHost: fuzz\r\n"
    for k, v in headers:
        head += f"{k}: {v}\r\n"
    if body and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in headers):
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def _seeds():
    infer = json.dumps({"id": "1", "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                              "data": [0, 1, 2, 3, 4, 5, 6, 7]}],
                        "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
    header = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}}]}).encode()
    binary = header + struct.pack("<4f", 1, 2, 3, 4)
    shm_reg = json.dumps({"key": "/sampan_http_fuzz", "offset": 0, "byte_size": 64}).encode()
    shm_infer = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                        "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 16,
                                                       "shared_memory_offset": 8}}]}).encode()
    return [
        _request("GET", "/v2/health/live"),
        _request("GET", "/v2/health/ready"),
        _request("GET", "/v2"),
        _request("GET", "/v2/models/add"),
        _request("GET", "/v2/models/add/versions/1/ready"),
        _request("GET", "/v2/models/add/config"),
        _request("GET", "/v2/models/add/stats"),
        _request("GET", "/v2/models/stats"),
        _request("POST", "/v2/repository/index", body=b'{"ready": true}'),
        _request("POST", "/v2/repository/models/add/load", body=b"{}"),
        _request("POST", "/v2/models/add/infer", [("Content-Type", "application/json")], infer),
        _request("POST", "/v2/models/add/versions/1/infer",
                 [("Inference-Header-Content-Length", str(len(header))),
                  ("Content-Type", "application/octet-stream")], binary),
        _request("POST", "/v2/systemsharedmemory/region/r/register", body=shm_reg),
        _request("GET", "/v2/systemsharedmemory/status"),
        _request("POST", "/v2/models/add/infer", body=shm_infer),
        _request("POST", "/v2/systemsharedmemory/region/r/unregister"),
        _request("POST", "/v2/models/add/infer", [("Transfer-Encoding", "chunked")],
                 b"%x\r\n" % len(infer) + infer + b"\r\n0\r\n\r\n"),
    ]


TOKENS = [b"/v2/models/add", b"/v2/models/", b"/versions/", b"/infer", b"/ready", b"/../", b"%00", b"%2e%2e",
          b"Content-Length: 99999999999\r\n", b"Content-Length: -1\r\n", b"Inference-Header-Content-Length: 4\r\n",
          b"Inference-Header-Content-Length: 18446744073709551615\r\n", b"Transfer-Encoding: chunked\r\n",
          b"Connection: close\r\n", b'"shape": [4294967296, 4294967296]', b'"datatype": "BYTES"', b'"data": [[[[',
          b'"binary_data_size": 1099511627776', b'"shared_memory_offset": 18446744073709551615', b'"byte_size": 0',
          b"null", b"1e999", b"\xff\xfe", b"\r\n\r\n", b"GET", b"POST", b"DELETE", b"HTTP/1.0", b"HTTP/2.0"]


def _mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1 and data:
            del data[pos:pos + rng.randint(1, 32)]
        elif op == 2:
            data[pos:pos] = rng.choice(TOKENS)
        elif op == 3:
            data = data[:pos]
        elif op == 4 and data:
            a = rng.randrange(len(data))
            data[pos:pos] = data[a:a + rng.randint(1, 64)]
        elif op == 5:
            for digit in (b"4", b"16", b"8", b"1"):
                i = data.find(digit, pos)
                if i >= 0:
                    data[i:i + len(digit)] = str(rng.choice([0, 1, 3, 17, 65535, 2 ** 31, 2 ** 63])).encode()
                    break
        elif op == 6:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        else:
            data[pos:pos] = rng.choice(TOKENS)
    return bytes(data)


def _complete(data):
    """True when `data` looks like one whole request (headers end, Content-Length matches
    the bytes after them, no chunking): it is sent without closing our side, so the
    server runs it rather than taking the half-close for a client that left."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep or b"transfer-encoding" in head.lower():
        return False
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return False
    return length == len(body)


def _send(port, data, timeout=10.0):
    """The first response's status code, or None when the server closed without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        half_closed = False
        try:
            s.sendall(data)
            if not _complete(data):  # incomplete: EOF tells the server no more is coming
                s.shutdown(socket.SHUT_WR)
                half_closed = True
        except (BrokenPipeError, ConnectionResetError):
            pass
        got = b""
        s.settimeout(timeout if half_closed else 3.0)
        while b"\r\n" not in got:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                return None
            except socket.timeout:
                if half_closed:
                    raise AssertionError("no answer within %.0f s" % timeout)
                # The server waits for more than we judged complete: end our side and wait again.
                s.shutdown(socket.SHUT_WR)
                half_closed = True
                s.settimeout(timeout)
                continue
            if not chunk:
                break
            got += chunk
    if not got:
        return None
    line = got.split(b"\r\n", 1)[0]
    assert line.startswith(b"HTTP/1."), f"not an HTTP status line: {line[:80]!r}"
    return int(line.split()[1])


@pytest.fixture
def shm_region():
    from multiprocessing import shared_memory
    shm = shared_memory.SharedMemory(name="sampan_http_fuzz", create=True, size=64)
    yield shm
    shm.close()
    shm.unlink()


def test_malformed_http_never_crashes_or_hangs_the_server(serve, write_model, make_add_model, tmp_path, shm_region):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(4,)),
                config='backend: "sampan"\nmax_batch_size: 8\ndynamic_batching { }\n'
                       'sampan { backend: "reference" }\n')
    srv = serve(tmp_path / "repo", "--enable-shared-memory", "--model-control-mode", "explicit",
                "--load-model", "add")
    port = int(srv.http_url.rsplit(":", 1)[1])
    rng = random.Random(SEED)
    seeds = _seeds()
    for s in seeds:  # the seeds themselves are well-formed: none is refused by the server
        code = _send(port, s)
        assert code is not None and code < 500, f"seed got {code}: {s[:300]!r}"
    counts = {}
    for i in range(REQUESTS):
        data = _mutate(rng, rng.choice(seeds))
        try:
            code = _send(port, data)
        except (AssertionError, OSError) as e:
            pytest.fail(f"request {i} (seed {SEED}): {e}\n{data[:2000]!r}")
        assert srv.process.poll() is None, f"the server exited ({srv.process.returncode}) on request {i}: {data[:2000]!r}"
        assert code is None or code < 500 or code == 503, f"request {i} got {code}: {data[:2000]!r}"
        counts[code] = counts.get(code, 0) + 1
    print("answers:", dict(sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))))
    # Still alive, still right.
    base = "http://" + srv.http_url
    with urllib.request.urlopen(base + "/v2/health/live", timeout=10) as r:
        assert r.status == 200
    urllib.request.urlopen(urllib.request.Request(base + "/v2/repository/models/add/load", data=b"{}",
                                                  method="POST"), timeout=30).read()
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
    req = urllib.request.Request(base + "/v2/models/add/infer", data=body.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        out = json.loads(r.read())
    np.testing.assert_allclose(out["outputs"][0]["data"], [2, 3, 4, 5])
