"""Device memory in the Python API: torch/CuPy CUDA tensors and sampan.DeviceArray in and out of
Context.run without a host copy (DLPack and __cuda_array_interface__), caller buffers on the
device, streams. The argument checks run everywhere; the GPU tests need a CUDA device, torch
with CUDA and the cuda backend (the GPU machine), and skip saying so elsewhere."""
import json

import numpy as np
import pytest

from conftest import torch_cuda_or_skip


class FakeCuda:
    """Looks like CUDA memory through __cuda_array_interface__ (never dereferenced here)."""

    def __init__(self, shape=(4, 32), typestr="<f4", strides=None, stream=None, ptr=0x1000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3,
                                         "strides": strides, "stream": stream}


class FakeDlpackCuda:
    """A CUDA DLPack producer that hands back something other than a capsule."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        return "not a capsule"


@pytest.fixture(scope="module")
def mlp_ctx(sampan, mlp_path, backend):
    return sampan.Engine(sampan.build(mlp_path, backend=backend)).create_context()


def test_device_feeds_are_checked_before_they_run(sampan, mlp_ctx):
    x = np.zeros((4, 32), np.float32)
    with pytest.raises(sampan.InvalidArgumentError, match="input 'x': the device array is not C-contiguous"):
        mlp_ctx.run({"x": FakeCuda(strides=(4, 16))})
    with pytest.raises(sampan.InvalidArgumentError, match="typestr"):
        mlp_ctx.run({"x": FakeCuda(typestr="<x9")})
    with pytest.raises(sampan.InvalidArgumentError, match="stream 0 is not a stream handle"):
        mlp_ctx.run({"x": FakeCuda(stream=0)})
    with pytest.raises(sampan.InvalidArgumentError, match="did not return an unused \"dltensor\" capsule"):
        mlp_ctx.run({"x": FakeDlpackCuda()})
    with pytest.raises(sampan.InvalidArgumentError, match="stream: a run reads and writes no device memory"):
        mlp_ctx.run({"x": x}, stream=1)
    with pytest.raises(sampan.InvalidArgumentError, match="stream: -5 is not a stream handle"):
        mlp_ctx.run({"x": FakeCuda()}, stream=-5)
    with pytest.raises(sampan.InvalidArgumentError, match="stream: a CUDA stream handle"):
        mlp_ctx.run({"x": FakeCuda()}, stream=object())
    # Host runs are unaffected.
    assert mlp_ctx.run({"x": x})["y"].shape == (4, 10)


def test_host_backends_refuse_device_memory(sampan, mlp_ctx, backend):
    if backend == "cuda":
        pytest.skip("the cuda backend takes device memory")
    with pytest.raises(sampan.UnsupportedError, match="needs a plan built for a GPU backend"):
        mlp_ctx.run({"x": FakeCuda()})
    with pytest.raises(sampan.UnsupportedError, match="needs a plan built for a GPU backend"):
        mlp_ctx.run({"x": np.zeros((4, 32), np.float32)}, outputs={"y": FakeCuda(shape=(4, 10))})


def test_device_arrays_need_a_gpu(sampan):
    why = sampan._sampan.device_memory_available()
    if not why:
        pytest.skip("this machine has a GPU: covered by the GPU tests")
    with pytest.raises(sampan.UnsupportedError, match="device memory"):
        sampan.DeviceArray.empty((2, 3), "float32", 0)
    with pytest.raises(sampan.UnsupportedError, match="device memory"):
        sampan.DeviceArray.from_numpy(np.zeros(3, np.float32), 0)


# ---- on a GPU ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_ctx(sampan, mlp_path):
    torch = torch_cuda_or_skip(sampan)
    engine = sampan.Engine(sampan.build(mlp_path, backend="cuda"))
    return torch, engine.create_context()


def test_torch_cuda_tensor_in_and_out(sampan, cuda_ctx):
    torch, ctx = cuda_ctx
    x = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    want = ctx.run({"x": x})["y"]  # the same plan from host memory
    xt = torch.from_numpy(x).cuda()
    for _ in range(2):  # the first run plans the shape bucket, the second replays it
        out = ctx.run({"x": xt})
        y = out["y"]
        assert isinstance(y, sampan.DeviceArray)
        assert (y.shape, y.dtype, y.device) == ((8, 10), "float32", 0)
        yt = torch.from_dlpack(y)  # shares the memory
        assert yt.is_cuda and yt.data_ptr() == y.ptr
        np.testing.assert_array_equal(yt.cpu().numpy(), want)
        yc = torch.as_tensor(y, device="cuda")  # through __cuda_array_interface__
        assert yc.data_ptr() == y.ptr
        np.testing.assert_array_equal(y.numpy(), want)
    # The memory outlives the DeviceArray while torch holds it.
    del out, y, yc
    np.testing.assert_array_equal(yt.cpu().numpy(), want)


def test_outputs_into_caller_device_memory(sampan, cuda_ctx):
    torch, ctx = cuda_ctx
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    want = ctx.run({"x": x})["y"]
    xt = torch.from_numpy(x).cuda()
    yt = torch.full((4, 10), float("nan"), device="cuda")
    ptr = yt.data_ptr()
    res = ctx.run({"x": xt}, outputs={"y": yt})
    assert res["y"] is yt and yt.data_ptr() == ptr
    np.testing.assert_array_equal(yt.cpu().numpy(), want)
    # Device feeds with a host output buffer: written there.
    host = np.empty((4, 10), np.float32)
    assert ctx.run({"x": xt}, outputs={"y": host})["y"] is host
    np.testing.assert_array_equal(host, want)
    # A host feed with a device output buffer.
    yt.zero_()
    ctx.run({"x": x}, outputs={"y": yt})
    np.testing.assert_array_equal(yt.cpu().numpy(), want)
    with pytest.raises(sampan.InvalidArgumentError, match="output 'y' is f32\\[4,10\\], the buffer given for it is"):
        ctx.run({"x": xt}, outputs={"y": torch.empty((2, 10), device="cuda")})
    with pytest.raises(sampan.InvalidArgumentError, match="input 'x' must be"):
        ctx.run({"x": xt.half()})
    with pytest.raises(sampan.InvalidArgumentError, match="not C-contiguous"):
        ctx.run({"x": torch.empty((32, 4), device="cuda").t()})
    np.testing.assert_array_equal(ctx.run({"x": xt})["y"].numpy(), want)  # the context still serves


def test_streams_and_run_async(sampan, cuda_ctx):
    torch, ctx = cuda_ctx
    x = np.random.default_rng(2).standard_normal((64, 32)).astype(np.float32)
    want = ctx.run({"x": 3 * x})["y"]
    xt = torch.from_numpy(x).cuda()
    s = torch.cuda.Stream()
    for _ in range(3):
        with torch.cuda.stream(s):
            torch.cuda._sleep(2_000_000)  # ~1 ms of queued work before the producer writes
            x3 = xt * 3                   # queued on s, not finished when run is called
            got = ctx.run({"x": x3}, stream=s)["y"].numpy()
        np.testing.assert_array_equal(got, want)
        with torch.cuda.stream(s):
            torch.cuda._sleep(2_000_000)
            x3 = xt * 3
            fut = ctx.run_async({"x": x3}, stream=s)
        np.testing.assert_array_equal(fut.result(timeout=60)["y"].numpy(), want)
    s.synchronize()


def test_seeds_flow_without_pycuda(sampan, cuda_ctx):
    """Load a plan, allocate device buffers, copy in, execute, copy back."""
    torch, ctx = cuda_ctx
    x = np.random.default_rng(4).standard_normal((2, 32)).astype(np.float32)
    want = ctx.run({"x": x})["y"]
    d_in = sampan.DeviceArray.empty((2, 32), "float32", 0)
    d_out = sampan.DeviceArray.empty((2, 10), "float32", 0)
    d_in.copy_from(x)
    assert ctx.run({"x": d_in}, outputs={"y": d_out})["y"] is d_out
    host = np.empty((2, 10), np.float32)
    d_out.copy_to(host)
    np.testing.assert_array_equal(host, want)
    np.testing.assert_array_equal(sampan.DeviceArray.from_numpy(x, 0).numpy(), x)
    with pytest.raises(sampan.InvalidArgumentError, match="the host array is"):
        d_in.copy_from(np.zeros((3, 32), np.float32))


def test_no_host_copies_on_a_device_run(sampan, cuda_ctx, tmp_path):
    """A torch profiler trace of device-in/device-out runs: no host-to-device copy, and device-to-host
    only of the 4-byte index-check flag each run reads back."""
    torch, ctx = cuda_ctx
    from torch.profiler import ProfilerActivity, profile
    xt = torch.randn((256, 32), device="cuda")
    yt = torch.empty((256, 10), device="cuda")
    ctx.run({"x": xt}, outputs={"y": yt})  # plans the bucket (reads the inputs back once)
    torch.cuda.synchronize()
    runs = 5
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            ctx.run({"x": xt}, outputs={"y": yt})
        torch.cuda.synchronize()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    copies = [(e["name"], int(e.get("args", {}).get("bytes", 0))) for e in events if e.get("cat") == "gpu_memcpy"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels, "the profiler saw no kernels: the trace does not show device work"
    print("copies:", sorted(set(copies)))
    htod = [c for c in copies if "HtoD" in c[0]]
    dtoh = [c for c in copies if "DtoH" in c[0]]
    dtod = [c for c in copies if "DtoD" in c[0]]
    assert not htod, htod
    assert all(b <= 4 for _, b in dtoh) and len(dtoh) <= runs, dtoh
    assert sum(b for _, b in dtod) == runs * (256 * 32 + 256 * 10) * 4, dtod


def test_outputs_are_freed(sampan, cuda_ctx):
    torch, ctx = cuda_ctx
    xt = torch.randn((1024, 32), device="cuda")
    for _ in range(3):
        ctx.run({"x": xt})
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info()
    for _ in range(200):  # 200 x 40 KiB outputs, each dropped
        ctx.run({"x": xt})
    free1, _ = torch.cuda.mem_get_info()
    assert free0 - free1 < 4 << 20, (free0, free1)
