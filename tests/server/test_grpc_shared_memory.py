"""The system shared-memory extension over gRPC and the standard gRPC health service, black-box.

Shared memory is driven by tritonclient.grpc with tritonclient.utils.shared_memory (unmodified):
inputs read from and outputs written into regions the client registered, mixed with inputs and
outputs that travel in the message (raw_input_contents holds only the others, and the empty
raw_output_contents entry of an output in shared memory keeps the others where tritonclient
looks for them), streaming, status, unregistration, errors naming tensor and region, a region
registered over HTTP used over gRPC (one registry), the extension off, and `sampan perf -i grpc
--shared-memory system`.

Health is grpc.health.v1.Health (what Kubernetes' gRPC probes call), spoken with grpcio and
messages built from the protocol's descriptor here (grpcio-health-checking is not installed).
"""

import queue
import re
import signal
import subprocess

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import sampan_bin

ADD_CONFIG = """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""

TWO_CONFIG = """max_batch_size: 8
input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "b" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "sum" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "diff" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def make_two_input_model():
    """sum = a + b, diff = a - b: two inputs and two outputs, FP32 [N, 4]."""
    import onnx
    from onnx import TensorProto, helper

    io = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", 4])  # noqa: E731
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["sum"], name="add"),
         helper.make_node("Sub", ["a", "b"], ["diff"], name="sub")],
        "two", [io("a"), io("b")], [io("sum"), io("diff")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture
def regions():
    """make(name, key, size) -> a POSIX shared-memory region, destroyed at the end of the test."""
    made = []

    def make(name, key, size):
        h = shm.create_shared_memory_region(name, key, size)
        made.append(h)
        return h
    yield make
    for h in made:
        shm.destroy_shared_memory_region(h)


def status_by_name(client):
    return {name: r for name, r in client.get_system_shared_memory_status(as_json=True).get("regions", {}).items()}


def test_grpc_inputs_and_outputs_through_shared_memory(serve, write_model, make_add_model, tmp_path, regions):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,), bias=1.0), config=ADD_CONFIG)
    srv = serve(tmp_path / "repo", "--enable-shared-memory")
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    assert "system_shared_memory" in c.get_server_metadata(as_json=True)["extensions"]
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    hin = regions("gin0", "/sampan_grpc_test_in0", x.nbytes)
    hout = regions("gout0", "/sampan_grpc_test_out0", x.nbytes + 64)
    shm.set_shared_memory_region(hin, [x])
    c.register_system_shared_memory("gin0", "/sampan_grpc_test_in0", x.nbytes)
    c.register_system_shared_memory("gout0", "/sampan_grpc_test_out0", x.nbytes + 64)
    status = status_by_name(c)
    assert set(status) == {"gin0", "gout0"}
    assert status["gin0"]["key"] == "/sampan_grpc_test_in0" and int(status["gin0"]["byte_size"]) == x.nbytes
    one = c.get_system_shared_memory_status("gout0", as_json=True)["regions"]
    assert list(one) == ["gout0"] and int(one["gout0"]["byte_size"]) == x.nbytes + 64

    inp = grpcclient.InferInput("x", [2, 16], "FP32")
    inp.set_shared_memory("gin0", x.nbytes)
    out = grpcclient.InferRequestedOutput("y")
    out.set_shared_memory("gout0", x.nbytes + 64)
    res = c.infer("add", [inp], outputs=[out])
    y_params = res.get_output("y").parameters  # (get_output's as_json returns None in tritonclient 2.73)
    assert y_params["shared_memory_region"].string_param == "gout0"
    assert y_params["shared_memory_byte_size"].int64_param == x.nbytes
    assert res.get_response().raw_output_contents == [b""]  # the bytes went to the region, not the message
    np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [2, 16]), x + 1)

    # The same regions serve again with new contents (no re-registration); an offset into the output region.
    shm.set_shared_memory_region(hin, [x * 2])
    out_at = grpcclient.InferRequestedOutput("y")
    out_at.set_shared_memory("gout0", x.nbytes, offset=64)
    res = c.infer("add", [inp], outputs=[out_at])
    assert res.get_output("y").parameters["shared_memory_offset"].int64_param == 64
    np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [2, 16], offset=64), x * 2 + 1)

    # Input in shared memory, output in the message.
    np.testing.assert_array_equal(c.infer("add", [inp]).as_numpy("y"), x * 2 + 1)

    # Streaming takes the same parameters.
    results = queue.Queue()
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        shm.set_shared_memory_region(hin, [x * 3])
        c.async_stream_infer("add", [inp], outputs=[out], request_id="s1")
        result, error = results.get(timeout=30)
        assert error is None, error
        assert result.get_response().id == "s1"
        np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [2, 16]), x * 3 + 1)
        small = grpcclient.InferRequestedOutput("y")
        small.set_shared_memory("gout0", 8)
        c.async_stream_infer("add", [inp], outputs=[small], request_id="s2")
        result, error = results.get(timeout=30)
        assert error is not None and "more than the 8 bytes" in str(error) and "gout0" in str(error)
    finally:
        c.stop_stream()

    c.unregister_system_shared_memory("gin0")
    assert list(status_by_name(c)) == ["gout0"]
    c.unregister_system_shared_memory("never_registered")  # not an error (as Triton)
    c.unregister_system_shared_memory()
    assert status_by_name(c) == {}
    plain = grpcclient.InferInput("x", [2, 16], "FP32")
    plain.set_data_from_numpy(x)
    np.testing.assert_array_equal(c.infer("add", [plain]).as_numpy("y"), x + 1)


def test_grpc_shared_memory_mixed_with_message_tensors(serve, write_model, tmp_path, regions):
    """Input 'a' in shared memory, 'b' in raw_input_contents; 'sum' into a region, 'diff' in the message."""
    write_model(tmp_path / "repo", "two", make_two_input_model(), config=TWO_CONFIG)
    srv = serve(tmp_path / "repo", "--enable-shared-memory")
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 0.5, np.float32)
    # a sits after 16 bytes of something else in its region: the offset parameter.
    ha = regions("ga", "/sampan_grpc_test_a", 16 + a.nbytes)
    hs = regions("gs", "/sampan_grpc_test_sum", a.nbytes)
    shm.set_shared_memory_region(ha, [a], offset=16)
    c.register_system_shared_memory("ga", "/sampan_grpc_test_a", 16 + a.nbytes)
    c.register_system_shared_memory("gs", "/sampan_grpc_test_sum", a.nbytes)

    ia = grpcclient.InferInput("a", [3, 4], "FP32")
    ia.set_shared_memory("ga", a.nbytes, offset=16)
    ib = grpcclient.InferInput("b", [3, 4], "FP32")
    ib.set_data_from_numpy(b)
    osum = grpcclient.InferRequestedOutput("sum")
    osum.set_shared_memory("gs", a.nbytes)
    odiff = grpcclient.InferRequestedOutput("diff")
    for inputs in ([ia, ib], [ib, ia]):  # the raw entry belongs to b wherever b is
        res = c.infer("two", inputs, outputs=[osum, odiff])
        assert [len(r) for r in res.get_response().raw_output_contents] == [0, a.nbytes]
        np.testing.assert_array_equal(res.as_numpy("diff"), a - b)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(hs, np.float32, [3, 4]), a + b)
        shm.set_shared_memory_region(hs, [np.zeros((3, 4), np.float32)])
    # The output in shared memory first in the response too: 'diff' is still found at its index.
    res = c.infer("two", [ia, ib], outputs=[odiff, osum])
    assert [len(r) for r in res.get_response().raw_output_contents] == [a.nbytes, 0]
    np.testing.assert_array_equal(res.as_numpy("diff"), a - b)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(hs, np.float32, [3, 4]), a + b)


def test_grpc_shared_memory_errors_name_tensor_and_region(serve, write_model, make_add_model, tmp_path, regions):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,)), config=ADD_CONFIG)
    srv = serve(tmp_path / "repo", "--enable-shared-memory", "--model-control-token", "s3cret")
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    auth = {"authorization": "Bearer s3cret"}
    x = np.zeros((2, 16), np.float32)
    regions("gerr", "/sampan_grpc_test_err", x.nbytes)

    # Registration needs the model control token when one is set.
    with pytest.raises(InferenceServerException, match="Bearer <token>") as e:
        c.register_system_shared_memory("gerr", "/sampan_grpc_test_err", x.nbytes)
    assert e.value.status() == "StatusCode.UNAUTHENTICATED"
    c.register_system_shared_memory("gerr", "/sampan_grpc_test_err", x.nbytes, headers=auth)
    with pytest.raises(InferenceServerException, match="already registered"):
        c.register_system_shared_memory("gerr", "/sampan_grpc_test_err", x.nbytes, headers=auth)
    with pytest.raises(InferenceServerException, match="sampan_no_such_key"):
        c.register_system_shared_memory("ghost", "/sampan_no_such_key", 64, headers=auth)
    with pytest.raises(InferenceServerException, match="beyond"):
        c.register_system_shared_memory("big", "/sampan_grpc_test_err", x.nbytes + 1, headers=auth)
    with pytest.raises(InferenceServerException, match="'ghost'") as e:
        c.get_system_shared_memory_status("ghost")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException, match="Bearer <token>"):
        c.unregister_system_shared_memory("gerr")

    def infer_error(inp, out=None):
        with pytest.raises(InferenceServerException) as e:
            c.infer("add", [inp], outputs=[out] if out else None)
        return str(e.value)

    unknown = grpcclient.InferInput("x", [2, 16], "FP32")
    unknown.set_shared_memory("nope", x.nbytes)
    msg = infer_error(unknown)
    assert "input 'x'" in msg and "'nope'" in msg
    short = grpcclient.InferInput("x", [2, 16], "FP32")
    short.set_shared_memory("gerr", x.nbytes - 4)
    msg = infer_error(short)
    assert "input 'x'" in msg and "shared_memory_byte_size is 124 bytes (region 'gerr')" in msg and "needs 128" in msg
    past = grpcclient.InferInput("x", [2, 16], "FP32")
    past.set_shared_memory("gerr", x.nbytes, offset=4)
    msg = infer_error(past)
    assert "input 'x'" in msg and "'gerr'" in msg and "beyond" in msg
    ok_in = grpcclient.InferInput("x", [2, 16], "FP32")
    ok_in.set_data_from_numpy(x)
    out_unknown = grpcclient.InferRequestedOutput("y")
    out_unknown.set_shared_memory("nope", x.nbytes)
    msg = infer_error(ok_in, out_unknown)
    assert "output 'y'" in msg and "'nope'" in msg
    out_small = grpcclient.InferRequestedOutput("y")
    out_small.set_shared_memory("gerr", 8)
    msg = infer_error(ok_in, out_small)
    assert "output 'y' has 128 bytes, more than the 8 bytes given in shared-memory region 'gerr'" in msg

    # What tritonclient would not send: raw stub.
    channel = grpc.insecure_channel(srv.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        req = service_pb2.ModelInferRequest(model_name="add")
        t = req.inputs.add(name="x", datatype="FP32", shape=[2, 16])
        t.parameters["shared_memory_region"].string_param = "gerr"
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(req)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "input 'x'" in e.value.details() and "'shared_memory_byte_size' is required" in e.value.details()
        t.parameters["shared_memory_byte_size"].int64_param = x.nbytes
        req.raw_input_contents.append(x.tobytes())  # an entry for the input in shared memory
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(req)
        assert "0 inputs not in shared memory but 1 raw_input_contents" in e.value.details()
        del req.raw_input_contents[:]
        t.parameters["shared_memory_byte_size"].int64_param = -1
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(req)
        assert "'shared_memory_byte_size' must be a non-negative integer" in e.value.details()
        t.parameters["shared_memory_byte_size"].uint64_param = x.nbytes  # uint64 is accepted too
        res = stub.ModelInfer(req)
        np.testing.assert_array_equal(np.frombuffer(res.raw_output_contents[0], np.float32), np.ones(32))
    finally:
        channel.close()

    c.unregister_system_shared_memory(headers=auth)
    assert status_by_name(c) == {}


def test_grpc_uses_regions_registered_over_http(serve, write_model, make_add_model, tmp_path, regions):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,), bias=1.0), config=ADD_CONFIG)
    srv = serve(tmp_path / "repo", "--enable-shared-memory")
    x = np.full((1, 16), 7, np.float32)
    h = regions("shared", "/sampan_grpc_test_shared", x.nbytes)
    shm.set_shared_memory_region(h, [x])
    httpclient.InferenceServerClient(srv.http_url).register_system_shared_memory(
        "shared", "/sampan_grpc_test_shared", x.nbytes)
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    assert list(status_by_name(c)) == ["shared"]
    inp = grpcclient.InferInput("x", [1, 16], "FP32")
    inp.set_shared_memory("shared", x.nbytes)
    np.testing.assert_array_equal(c.infer("add", [inp]).as_numpy("y"), x + 1)
    c.unregister_system_shared_memory("shared")
    assert httpclient.InferenceServerClient(srv.http_url).get_system_shared_memory_status() == []


def test_grpc_shared_memory_is_off_unless_enabled(serve, write_model, make_add_model, tmp_path, regions):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,)), config=ADD_CONFIG)
    srv = serve(tmp_path / "repo")
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    assert "system_shared_memory" not in c.get_server_metadata(as_json=True)["extensions"]
    regions("goff", "/sampan_grpc_test_off", 128)
    for call in (lambda: c.register_system_shared_memory("goff", "/sampan_grpc_test_off", 128),
                 lambda: c.get_system_shared_memory_status(),
                 lambda: c.unregister_system_shared_memory()):
        with pytest.raises(InferenceServerException, match="--enable-shared-memory") as e:
            call()
        assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    inp = grpcclient.InferInput("x", [2, 16], "FP32")
    inp.set_shared_memory("goff", 128)
    with pytest.raises(InferenceServerException, match=r"input 'x': the shared memory extensions \(system and CUDA\) are not enabled"):
        c.infer("add", [inp])


def test_perf_over_grpc_sends_inputs_through_shared_memory(serve, write_model, make_add_model, tmp_path):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,)), config=ADD_CONFIG)
    srv = serve(tmp_path / "repo", "--enable-shared-memory")
    r = subprocess.run([sampan_bin(), "perf", "-m", "add", "-i", "grpc", "-u", srv.grpc_url,
                        "--shared-memory", "system", "-p", "300", "-b", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "inputs in system shared memory" in r.stdout
    m = re.search(r"Concurrency: 1, throughput: ([\d.]+) infer/sec", r.stdout)
    assert m and float(m.group(1)) > 0, r.stdout
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    assert status_by_name(c) == {}  # perf unregistered its regions
    stats = c.get_inference_statistics("add", as_json=True)["model_stats"][0]
    assert int(stats["inference_stats"]["success"]["count"]) > 0
    assert int(stats["inference_stats"].get("fail", {}).get("count", 0)) == 0


def test_perf_over_grpc_shared_memory_needs_the_extension(serve, write_model, make_add_model, tmp_path):
    write_model(tmp_path / "repo", "add", make_add_model(dims=(16,)), config=ADD_CONFIG)
    srv = serve(tmp_path / "repo")
    r = subprocess.run([sampan_bin(), "perf", "-m", "add", "-i", "grpc", "-u", srv.grpc_url,
                        "--shared-memory", "system", "-p", "300"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "--enable-shared-memory" in r.stdout + r.stderr


# ---------------------------------------------------------------- grpc.health.v1

SERVING, NOT_SERVING, SERVICE_UNKNOWN = 1, 2, 3


def health_messages():
    """HealthCheckRequest / HealthCheckResponse of grpc/health/v1/health.proto, from their descriptor."""
    f = descriptor_pb2.FileDescriptorProto(name="sampan_test/health.proto", package="grpc.health.v1", syntax="proto3")
    req = f.message_type.add(name="HealthCheckRequest")
    req.field.add(name="service", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    resp = f.message_type.add(name="HealthCheckResponse")
    enum = resp.enum_type.add(name="ServingStatus")
    for name, number in (("UNKNOWN", 0), ("SERVING", 1), ("NOT_SERVING", 2), ("SERVICE_UNKNOWN", 3)):
        enum.value.add(name=name, number=number)
    resp.field.add(name="status", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_ENUM,
                   type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
                   label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    get = lambda n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n))  # noqa: E731
    return get("grpc.health.v1.HealthCheckRequest"), get("grpc.health.v1.HealthCheckResponse")


class Health:
    def __init__(self, url):
        self.Request, self.Response = health_messages()
        self.channel = grpc.insecure_channel(url)
        kw = dict(request_serializer=self.Request.SerializeToString, response_deserializer=self.Response.FromString)
        self._check = self.channel.unary_unary("/grpc.health.v1.Health/Check", **kw)
        self._watch = self.channel.unary_stream("/grpc.health.v1.Health/Watch", **kw)

    def check(self, service=""):
        return self._check(self.Request(service=service), timeout=10).status

    def watch(self, service=""):
        return self._watch(self.Request(service=service), timeout=60)


def test_grpc_health_check_follows_readiness(serve, write_model, make_add_model, tmp_path):
    """Explicit model control, strict readiness: a wanted model that failed to load makes the server
    NOT_SERVING; unloading it makes it SERVING, seen by Check and by an open Watch; stopping the
    server ends SERVING."""
    repo = tmp_path / "repo"
    write_model(repo, "add", make_add_model(dims=(16,)), config=ADD_CONFIG)
    write_model(repo, "broken", b"this is not an onnx model")
    srv = serve(repo, "--model-control-mode", "explicit", "--load-model", "add", "--load-model", "broken")
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    assert not client.is_server_ready()
    health = Health(srv.grpc_url)
    try:
        assert health.check() == NOT_SERVING
        assert health.check("inference.GRPCInferenceService") == NOT_SERVING
        with pytest.raises(grpc.RpcError) as e:
            health.check("no.such.Service")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND

        watch = health.watch()
        assert next(watch).status == NOT_SERVING
        client.unload_model("broken")
        assert client.is_server_ready()
        assert next(watch).status == SERVING  # pushed within the refresh interval
        assert health.check() == SERVING
        assert health.check("inference.GRPCInferenceService") == SERVING
        unknown = health.watch("no.such.Service")
        assert next(unknown).status == SERVICE_UNKNOWN
        unknown.cancel()

        srv.process.send_signal(signal.SIGTERM)
        statuses = []
        try:
            for r in watch:
                statuses.append(r.status)
        except grpc.RpcError:
            pass  # the stream ends with the server
        assert statuses[:1] == [NOT_SERVING], statuses
        assert srv.stop(timeout=30) == 0
    finally:
        health.channel.close()
