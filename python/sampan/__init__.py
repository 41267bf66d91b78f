"""Sampan from Python: build ONNX models into optimized plans and run them.

TensorRT-shaped::

    import numpy as np, sampan
    plan = sampan.build("resnet50.onnx", precision="fp16", backend="cuda")
    plan.save("resnet50.plan")
    engine = sampan.Engine(sampan.load("resnet50.plan"))
    ctx = engine.create_context()
    out = ctx.run({"input": np.zeros((1, 3, 224, 224), np.float32)})   # {name: ndarray}
    out = ctx.run({"input": torch_cuda_tensor})   # {name: sampan.DeviceArray}: device in, device out
    logits = torch.from_dlpack(out["logits"])      # no copy

ONNX Runtime-shaped (``import sampan as ort`` runs ORT's basic tutorial code)::

    sess = sampan.InferenceSession("model.onnx", providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    y, = sess.run(None, {sess.get_inputs()[0].name: x})

The work is done by the same C++ builder and runtime as the ``sampan`` command (the
extension module ``sampan._sampan``); the GIL is released while models are imported,
built, bound to a device and run, so Python threads run contexts in parallel. Errors
raise subclasses of :class:`sampan.Error` carrying the C++ message. docs/python.md has
the full reference and what is and is not ONNX Runtime-compatible.
"""

from __future__ import annotations

import concurrent.futures
import enum
import os
import queue
import threading
import warnings
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _sampan
from ._sampan import (
    CancelledError,
    DeadlineExceededError,
    Error,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    IoError,
    NotFoundError,
    OutOfRangeError,
    UnavailableError,
    UnsupportedError,
)

__version__: str = _sampan.__version__

__all__ = [
    "__version__", "Error", "InvalidArgumentError", "OutOfRangeError", "NotFoundError", "UnsupportedError",
    "IoError", "FailedPreconditionError", "InternalError", "UnavailableError", "CancelledError",
    "DeadlineExceededError", "TensorInfo", "Plan", "build", "load", "loads", "Engine", "Context", "backends",
    "available_backends", "InferenceSession", "SessionOptions", "GraphOptimizationLevel", "NodeArg",
    "get_available_providers", "get_device", "DeviceArray",
]

Dim = Union[int, str, None]
PathLike = Union[str, "os.PathLike[str]"]
ShapeRange = Tuple[Sequence[int], Sequence[int], Sequence[int]]

_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def backends() -> List[str]:
    """Backends compiled into this build ("cpu", "cuda", "reference", ...)."""
    return list(_sampan.backends())


def available_backends() -> List[str]:
    """Backends of this build that can run on this machine (cuda only with a GPU)."""
    return list(_sampan.available_backends())


def _default_backend() -> str:
    avail = _sampan.available_backends()
    for name in ("cuda", "cpu", "reference"):
        if name in avail:
            return name
    return "reference"


class TensorInfo:
    """An input or output of a plan: name, element type and shape.

    ``dtype`` is the numpy dtype (None for element types numpy lacks, e.g. bfloat16; then
    ``element_type`` names it). ``shape`` is a tuple whose dims are ints, symbol names
    (str) for dynamic dims, or None when unknown; ``shape`` is None when the rank is unknown.
    """

    __slots__ = ("name", "dtype", "element_type", "shape", "_onnx_type")

    def __init__(self, d: Mapping[str, Any]):
        self.name: str = d["name"]
        self.dtype: Optional[np.dtype] = d["dtype"]
        self.element_type: str = d["element_type"]
        self.shape: Optional[Tuple[Dim, ...]] = d["shape"]
        self._onnx_type: str = d["onnx_type"]

    def __repr__(self) -> str:
        return f"TensorInfo(name={self.name!r}, dtype={self.element_type}, shape={self.shape})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorInfo) and (self.name, self.element_type, self.shape) == (
            other.name, other.element_type, other.shape)

    __hash__ = None  # type: ignore[assignment]


class Plan:
    """A built model: optimized graph, precision, kernels chosen, bound to a backend.

    Made by :func:`build`, :func:`load` or :func:`loads`; run it with :class:`Engine`.
    """

    __slots__ = ("_h",)

    def __init__(self, handle: "_sampan.Plan"):
        if not isinstance(handle, _sampan.Plan):
            raise TypeError("Plan objects come from sampan.build(), sampan.load() or sampan.loads()")
        self._h = handle

    @property
    def inputs(self) -> List[TensorInfo]:
        return [TensorInfo(d) for d in self._h.inputs]

    @property
    def outputs(self) -> List[TensorInfo]:
        return [TensorInfo(d) for d in self._h.outputs]

    @property
    def profiles(self) -> List[Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]]]:
        """Optimization profiles: [{input: (min, opt, max)}]; [] for a static plan."""
        return self._h.profiles

    @property
    def backend(self) -> str:
        return self._h.fingerprint["backend"]

    @property
    def fingerprint(self) -> Dict[str, str]:
        """What the plan is bound to: backend, CPU ISA, GPU name, compute capability, library versions."""
        return self._h.fingerprint

    @property
    def precision(self) -> str:
        return self._h.precision

    def serialize(self) -> bytes:
        """The plan file's bytes (what :meth:`save` writes; :func:`loads` reads them)."""
        return self._h.serialize()

    def save(self, path: PathLike) -> None:
        self._h.save(os.fspath(path))

    def __repr__(self) -> str:
        return (f"Plan(backend={self.backend!r}, precision={self.precision!r}, "
                f"inputs={[i.name for i in self.inputs]}, outputs={[o.name for o in self.outputs]})")


def build(model: Union[PathLike, bytes, bytearray, memoryview], *, precision: str = "fp32",
          backend: Optional[str] = None, profiles: Optional[Sequence[Mapping[str, ShapeRange]]] = None,
          calib_data: Optional[PathLike] = None, calib_method: Optional[str] = None,
          calib_cache: Optional[PathLike] = None, timing_cache: Optional[PathLike] = None,
          progress: Optional[Callable[[str], Any]] = None, strict: bool = False, device: int = 0,
          optimization_level: int = 3, workspace: int = 0,
          disabled_passes: Iterable[str] = (), layer_precision: Iterable[str] = ()) -> Plan:
    """Builds an ONNX model (a path, or the model's bytes) into a :class:`Plan`, as ``sampan build``.

    precision: "fp32", "tf32", "fp16" or "bf16" (layers that overflow or must stay exact keep fp32).
    backend: "cuda", "cpu" or "reference"; default: cuda when a GPU is present, else cpu.
    profiles: optimization profiles for dynamic inputs, [{input: (min, opt, max)}], each shape a
        sequence of ints (trtexec's --minShapes/--optShapes/--maxShapes; one dict per profile).
    precision="int8": implicit INT8 as ``sampan build --int8`` (Conv/MatMul/Gemm layers; the others
        stay fp32), calibrated on calib_data or read from calib_cache.
    precision="fp8": implicit FP8 as ``sampan build --fp8`` (MatMul/Gemm layers in float8 e4m3 on the
        cuda backend, sm_89+; the others fp16), calibrated the same way (minmax unless calib_method).
    calib_data: a directory of calibration samples, INPUT.K.npy (one file per graph input per sample).
    calib_method: "entropy" (TensorRT's; the int8 default), "minmax" (the fp8 default) or "percentile[=P]".
    calib_cache: calibration cache file, read when it matches the graph, written after calibrating.
    timing_cache: a file the tactic timings are read from and written to (cuda, cpu).
    progress: called with each progress line (passes, tactic timing layer by layer).
    strict: refuse the build when any node would run on host reference kernels.
    device: GPU ordinal the plan is built and tuned for.
    optimization_level: builder effort 0..5 (cuda): 0 takes the libraries' heuristic choice
        untimed; 1..5 time every candidate, 3 + 4 x level runs each.
    workspace: cuda: tactics needing more device scratch (bytes) than this are not chosen (0 = no limit).
    disabled_passes: pass names to skip (:func:`pass_names`).
    layer_precision: "NAME_GLOB:precision" entries, later ones win (trtexec --layerPrecisions).
    """
    quantize = precision if precision in ("int8", "fp8") else ""
    if not quantize and (calib_data is not None or calib_cache is not None or calib_method is not None):
        raise InvalidArgumentError("calib_data, calib_method and calib_cache are for precision='int8' or 'fp8' only "
                                   f"(precision is {precision!r})")
    if quantize:
        if calib_data is not None and not isinstance(calib_data, (str, os.PathLike)):
            raise InvalidArgumentError("calib_data: a directory of INPUT.K.npy files (a path), got "
                                       f"{type(calib_data).__name__}")
        precision = "fp32" if quantize == "int8" else "fp16"
        if calib_method is None:
            calib_method = "entropy" if quantize == "int8" else "minmax"
    elif precision not in _PRECISIONS:
        raise InvalidArgumentError(f"precision {precision!r}: one of {', '.join(_PRECISIONS)}")
    if profiles is not None and isinstance(profiles, Mapping):
        profiles = [profiles]
    h = _sampan.build(
        model if isinstance(model, (bytes, bytearray, memoryview)) else os.fspath(model),
        backend or _default_backend(), precision, None if profiles is None else list(profiles),
        "" if timing_cache is None else os.fspath(timing_cache), progress, bool(strict), int(device),
        int(optimization_level), int(workspace), list(disabled_passes), list(layer_precision), quantize,
        "" if calib_data is None else os.fspath(calib_data), "" if calib_method is None else str(calib_method),
        "" if calib_cache is None else os.fspath(calib_cache))
    return Plan(h)


def load(path: PathLike) -> Plan:
    """Reads a plan file (written by :meth:`Plan.save` or ``sampan build --saveEngine``)."""
    return Plan(_sampan.load(os.fspath(path)))


def loads(data: Union[bytes, bytearray, memoryview]) -> Plan:
    """Parses plan bytes (:meth:`Plan.serialize`)."""
    return Plan(_sampan.loads(bytes(data)))


def pass_names() -> List[str]:
    """The optimization passes, in pipeline order (for ``disabled_passes``)."""
    return list(_sampan.pass_names())


_KDL_CPU = 1
_KDL_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged
_LEGACY_DEFAULT_STREAM = 1

DeviceArray = _sampan.DeviceArray
DeviceArray.__doc__ = """Device memory Sampan allocated (CUDA): what :meth:`Context.run` returns for outputs
when the run's feeds are device memory, or made with ``DeviceArray.empty(shape, dtype, device)`` /
``DeviceArray.from_numpy(array, device)``. It shares its memory with torch, CuPy and other DLPack or
``__cuda_array_interface__`` consumers without a copy (``torch.from_dlpack(a)``,
``torch.as_tensor(a, device="cuda")``, ``cupy.asarray(a)``); the memory is freed when the last of
them lets go. ``numpy()`` copies it to the host, ``copy_from(array)`` / ``copy_to(array)`` copy a
host array of the same dtype and shape in or out. Attributes: shape, dtype (numpy's name, or
"bfloat16"), device, ptr, nbytes."""


def _stream_handle(stream: Any) -> Optional[int]:
    """A CUDA stream as an integer handle: an int (0, the NULL stream, and 1: the legacy default
    stream; 2: the per-thread default stream), or an object carrying one (torch.cuda.Stream.cuda_stream,
    cupy's Stream.ptr)."""
    if stream is None:
        return None
    if isinstance(stream, bool):
        raise InvalidArgumentError(f"stream: a CUDA stream handle (int) or stream object, got {stream!r}")
    if isinstance(stream, int):
        handle = stream
    else:
        handle = None
        for attr in ("cuda_stream", "ptr", "handle"):
            v = getattr(stream, attr, None)
            if isinstance(v, int) and not isinstance(v, bool):
                handle = v
                break
        if handle is None:
            raise InvalidArgumentError(
                f"stream: a CUDA stream handle (int) or an object with .cuda_stream/.ptr, got {type(stream).__name__}")
    if handle < 0:
        raise InvalidArgumentError(f"stream: {handle} is not a stream handle")
    # 0 is the NULL stream: the legacy default stream (torch.cuda.default_stream().cuda_stream is 0).
    return _LEGACY_DEFAULT_STREAM if handle == 0 else handle


class _DeviceFeed:
    """One feed or output in device memory: what run_device takes, and what keeps it alive."""
    __slots__ = ("spec", "keep", "stream")

    def __init__(self, spec: Tuple[int, str, Tuple[int, ...], int], keep: Any, stream: Optional[int]):
        self.spec = spec
        self.keep = keep  # a DlpackView (released after the run) or the caller's object
        self.stream = stream  # the producer's stream to wait for (None: nothing)

    def release(self) -> None:
        if isinstance(self.keep, _sampan.DlpackView):
            self.keep.release()


def _cuda_array_interface(name: str, x: Any) -> Optional[Dict[str, Any]]:
    try:
        return x.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception as e:  # e.g. torch: a tensor that requires grad
        raise InvalidArgumentError(f"{name}: its __cuda_array_interface__ raised: {e}") from None


def _device_feed(name: str, x: Any, consumer_stream: int) -> Optional[_DeviceFeed]:
    """x as device memory, or None when it is host memory. DLPack first (it names the device and
    its producer makes the data ready on `consumer_stream`), then __cuda_array_interface__."""
    if isinstance(x, np.ndarray):
        return None
    if hasattr(x, "__dlpack_device__") and hasattr(x, "__dlpack__"):
        dev_type, dev_id = x.__dlpack_device__()
        if int(dev_type) in _KDL_CUDA:
            try:
                capsule = x.__dlpack__(stream=consumer_stream)
            except TypeError:  # producers of the older protocol take no stream
                capsule = x.__dlpack__()
            view = _sampan.import_dlpack(capsule, name)
            return _DeviceFeed((view.ptr, view.dtype, view.shape, view.device), view, None)
        if int(dev_type) != _KDL_CPU:
            raise UnsupportedError(f"{name}: DLPack device type {int(dev_type)} is neither host nor CUDA memory")
        return None
    cai = _cuda_array_interface(name, x)
    if cai is None:
        return None
    if cai.get("mask") is not None:
        raise UnsupportedError(f"{name}: masked device arrays are not supported")
    try:
        dtype = np.dtype(cai["typestr"])
    except TypeError:
        raise InvalidArgumentError(f"{name}: __cuda_array_interface__ typestr {cai['typestr']!r} is not a numpy type")
    shape = tuple(int(d) for d in cai["shape"])
    strides = cai.get("strides")
    if strides is not None:
        expect, ok = dtype.itemsize, True
        for d in range(len(shape) - 1, -1, -1):
            if shape[d] != 1 and strides[d] != expect:
                ok = False
            expect *= shape[d]
        if not ok:
            raise InvalidArgumentError(
                f"{name}: the device array is not C-contiguous (strides {tuple(strides)} bytes for shape {shape}); "
                "make it contiguous first")
    ptr = int(cai["data"][0])
    stream = cai.get("stream") if int(cai.get("version", 0)) >= 3 else None
    if stream is not None and (not isinstance(stream, int) or stream == 0):
        raise InvalidArgumentError(f"{name}: __cuda_array_interface__ stream {stream!r} is not a stream handle")
    dev = getattr(x, "device", None)  # torch: torch.device; CuPy: cupy.cuda.Device
    ordinal = getattr(dev, "index", None)
    if ordinal is None:
        ordinal = getattr(dev, "id", None)
    # An array that names no device is taken to be on the engine's (-1).
    return _DeviceFeed((ptr, dtype.name, shape, -1 if ordinal is None else int(ordinal)), x, stream)


def _host_array(name: str, x: Any) -> np.ndarray:
    """An input as a numpy array over the same memory where possible."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack_device__"):
        dev_type, _ = x.__dlpack_device__()
        if int(dev_type) != _KDL_CPU:
            raise UnsupportedError(f"input '{name}': DLPack device type {int(dev_type)} is not host memory")
        return np.from_dlpack(x)
    return np.asarray(x)


class _Prepared:
    """A run's feeds and outputs sorted into host and device memory (Context.run)."""
    __slots__ = ("host_feeds", "device_feeds", "host_outputs", "device_outputs", "streams")

    def __init__(self, feeds: Mapping[str, Any], outputs: Optional[Mapping[str, Any]], stream: Any, device: int):
        if not isinstance(feeds, Mapping):
            raise InvalidArgumentError(f"feeds: a dict {{input name: array}}, got {type(feeds).__name__}")
        if outputs is not None and not isinstance(outputs, Mapping):
            raise InvalidArgumentError(f"outputs: a dict {{output name: array}}, got {type(outputs).__name__}")
        handle = _stream_handle(stream)
        consumer = _LEGACY_DEFAULT_STREAM if handle is None else handle
        self.host_feeds: Dict[str, np.ndarray] = {}
        self.device_feeds: Dict[str, _DeviceFeed] = {}
        self.host_outputs: Dict[str, Any] = {}
        self.device_outputs: Dict[str, _DeviceFeed] = {}
        try:
            for name, x in feeds.items():
                d = _device_feed(f"input '{name}'", x, consumer)
                if d is None:
                    self.host_feeds[name] = _host_array(name, x)
                else:
                    self.device_feeds[name] = d
            for name, x in (outputs or {}).items():
                d = _device_feed(f"outputs['{name}']", x, consumer)
                if d is None:
                    self.host_outputs[name] = x
                else:
                    self.device_outputs[name] = d
        except BaseException:
            self.release()
            raise
        streams = [] if handle is None else [handle]
        for d in list(self.device_feeds.values()) + list(self.device_outputs.values()):
            if d.stream is not None and d.stream not in streams:
                streams.append(d.stream)
        self.streams = streams
        if handle is not None and not self.on_device:
            raise InvalidArgumentError("stream: a run reads and writes no device memory unless a feed or an output "
                                       "is device memory (a torch/CuPy CUDA tensor, a sampan.DeviceArray)")
        for d in list(self.device_feeds.values()) + list(self.device_outputs.values()):
            if d.spec[3] == -1:
                d.spec = d.spec[:3] + (device,)

    @property
    def on_device(self) -> bool:
        return bool(self.device_feeds or self.device_outputs)

    def release(self) -> None:
        for d in list(self.device_feeds.values()) + list(self.device_outputs.values()):
            d.release()


def _run_prepared(h: "_sampan.Context", names: List[str], p: _Prepared, outputs: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    if not p.on_device:
        return h.run(p.host_feeds, None if outputs is None else dict(outputs))
    try:
        result = h.run_device(p.host_feeds, {n: d.spec for n, d in p.device_feeds.items()},
                              {n: d.spec for n, d in p.device_outputs.items()}, p.streams)
    finally:
        p.release()
    out: Dict[str, Any] = {}
    for name, value in zip(names, result):
        if value is None:  # written into the caller's device buffer
            out[name] = outputs[name]  # type: ignore[index]
        elif name in p.host_outputs:
            target = p.host_outputs[name]
            if not isinstance(target, np.ndarray):
                raise InvalidArgumentError(f"outputs['{name}']: a numpy array or device memory")
            value.copy_to(target)
            out[name] = target
        else:
            out[name] = value
    return out


class Context:
    """One execution state of an :class:`Engine` (TensorRT's IExecutionContext).

    Contexts of one engine run concurrently (each from its own thread); one context runs one
    inference at a time (concurrent calls on it wait their turn).
    """

    __slots__ = ("_h", "_engine", "_executor", "_lock", "_output_names", "__weakref__")

    def __init__(self, handle: "_sampan.Context", engine: "Engine"):
        self._h = handle
        self._engine = engine
        self._output_names = [o.name for o in engine.outputs]
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._lock = threading.Lock()

    def run(self, feeds: Mapping[str, Any], outputs: Optional[Mapping[str, Any]] = None, *,
            stream: Any = None) -> Dict[str, Any]:
        """Runs one inference and returns {output name: array} in the model's output order.

        feeds: {input name: array}. Host memory: numpy arrays (used without a copy when C-contiguous)
        or anything numpy reads (``__array__``, a CPU tensor's ``__dlpack__``). Device memory (cuda
        plans): a torch or CuPy CUDA tensor, a :class:`DeviceArray`, anything with a CUDA
        ``__dlpack__`` or ``__cuda_array_interface__`` (C-contiguous) -- read on the device, never
        copied through the host.

        outputs: {output name: preallocated array} to write into, host (C-contiguous numpy) or
        device memory (like TensorRT's execute_v2 with device bindings); returned in the dict.

        When a feed or an output is device memory, outputs not given come back as
        :class:`DeviceArray` (``torch.from_dlpack(out[name])`` shares it); otherwise as numpy arrays.
        stream (device runs only): a CUDA stream (int handle, torch.cuda.Stream, CuPy stream) whose
        queued work the run waits for before it reads feeds or writes outputs; the streams that CUDA
        array interfaces name are waited for too, and DLPack producers are asked to make their data
        ready on it (default: the legacy default stream). The call returns when the outputs are written.
        """
        p = _Prepared(feeds, outputs, stream, self._engine._device)
        return _run_prepared(self._h, self._output_names, p, outputs)

    def run_async(self, feeds: Mapping[str, Any], outputs: Optional[Mapping[str, Any]] = None, *,
                  stream: Any = None) -> "concurrent.futures.Future[Dict[str, Any]]":
        """Like :meth:`run`, on this context's worker thread; returns a Future of the result dict.
        Calls on one context run in submission order. Feeds are taken now (device feeds: the run
        waits for `stream` and their producers' streams as of its start); they must not change
        until the future completes."""
        p = _Prepared(feeds, outputs, stream, self._engine._device)
        try:
            with self._lock:
                if self._h.closed:
                    raise FailedPreconditionError("the context is closed")
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sampan-ctx")
                return self._executor.submit(_run_prepared, self._h, self._output_names, p, outputs)
        except BaseException:
            p.release()
            raise

    @property
    def engine(self) -> "Engine":
        return self._engine

    @property
    def last_profile(self) -> int:
        """Index of the optimization profile the last run used (-1: the plan has none)."""
        return self._h.last_profile

    @property
    def last_timing(self) -> Dict[str, float]:
        """Where the last run's time went (ms): enqueue, h2d, compute, d2h."""
        return self._h.last_timing

    @property
    def closed(self) -> bool:
        return self._h.closed

    def close(self) -> None:
        """Waits for queued runs, then frees the context's memory. Later calls raise."""
        with self._lock:
            ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=True)
        self._h.close()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Engine:
    """A plan bound to a device (TensorRT's ICudaEngine): weights prepared once, shared by contexts.

    plan: a :class:`Plan`, or the path of a plan file. device: GPU ordinal (cuda plans).
    threads: CPU threads for this engine (0 = all cores). cuda_graph: capture and replay CUDA
    graphs per input shape (cuda plans; trtexec --useCudaGraph).
    """

    __slots__ = ("_h", "_plan", "_device", "__weakref__")

    def __init__(self, plan: Union[Plan, PathLike], device: int = 0, *, threads: int = 0, cuda_graph: bool = False):
        if not isinstance(plan, Plan):
            plan = load(plan)
        self._plan = plan
        self._device = int(device)
        self._h = _sampan.Engine(plan._h, int(device), int(threads), bool(cuda_graph))

    def create_context(self) -> Context:
        return Context(self._h.create_context(), self)

    @property
    def plan(self) -> Plan:
        return self._plan

    @property
    def inputs(self) -> List[TensorInfo]:
        return self._plan.inputs

    @property
    def outputs(self) -> List[TensorInfo]:
        return self._plan.outputs

    @property
    def backend(self) -> str:
        return self._plan.backend

    @property
    def healthy(self) -> bool:
        """False once the device hit an unrecoverable error."""
        return self._h.healthy

    @property
    def closed(self) -> bool:
        return self._h.closed

    def close(self) -> None:
        """Drops this handle's reference. Contexts already created keep the engine alive and keep
        working; create_context() on a closed engine raises FailedPreconditionError."""
        self._h.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- ONNX Runtime-shaped API ------------------------------------------------------------

class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's levels. Sampan has one optimization pipeline: every level but
    ORT_DISABLE_ALL runs all of it; ORT_DISABLE_ALL runs none of the graph passes."""
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class SessionOptions:
    """The subset of onnxruntime.SessionOptions Sampan acts on. Setting any other attribute
    raises AttributeError (rather than being ignored)."""

    __slots__ = ("intra_op_num_threads", "graph_optimization_level")

    def __init__(self) -> None:
        self.intra_op_num_threads: int = 0
        self.graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL


class NodeArg:
    """onnxruntime.NodeArg: name, type ("tensor(float)") and shape (ints, symbol names, None;
    a dim_param of "?" reads as None: Sampan treats it as an unnamed dynamic dim)."""

    __slots__ = ("name", "type", "shape")

    def __init__(self, info: TensorInfo):
        self.name: str = info.name
        self.type: str = info._onnx_type
        self.shape: List[Dim] = list(info.shape) if info.shape is not None else []

    def __repr__(self) -> str:
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


_PROVIDERS = {
    "CUDAExecutionProvider": "cuda",
    "TensorrtExecutionProvider": "cuda",
    "CPUExecutionProvider": "cpu",
}


def get_available_providers() -> List[str]:
    """Providers this machine can run: CUDAExecutionProvider with a GPU, CPUExecutionProvider."""
    avail = _sampan.available_backends()
    out = []
    if "cuda" in avail:
        out.append("CUDAExecutionProvider")
    out.append("CPUExecutionProvider")
    return out


def get_device() -> str:
    """"GPU" when the cuda backend can run here, else "CPU" (onnxruntime.get_device)."""
    return "GPU" if "cuda" in _sampan.available_backends() else "CPU"


def _choose_provider(providers: Optional[Sequence[Any]],
                     provider_options: Optional[Sequence[Mapping[str, Any]]]) -> Tuple[str, str, int]:
    """(provider name, backend, device) for the first usable provider of the list."""
    if providers is None:
        name = get_available_providers()[0]
        return name, _PROVIDERS[name], 0
    if isinstance(providers, str):
        raise InvalidArgumentError("providers: a list of provider names, e.g. ['CPUExecutionProvider']")
    entries: List[Tuple[str, Mapping[str, Any]]] = []
    for i, p in enumerate(providers):
        if isinstance(p, str):
            opts: Mapping[str, Any] = {}
        elif isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], Mapping):
            p, opts = p[0], p[1]
        else:
            raise InvalidArgumentError(f"providers[{i}]: a name or a (name, options dict) pair, got {p!r}")
        entries.append((p, opts))
    if provider_options is not None:
        if len(provider_options) != len(entries):
            raise InvalidArgumentError("provider_options must have one dict per provider")
        entries = [(n, dict(o)) for (n, _), o in zip(entries, provider_options)]
    avail = _sampan.available_backends()
    for name, opts in entries:
        backend = _PROVIDERS.get(name)
        if backend is None:
            warnings.warn(f"Specified provider '{name}' is not in available provider names. Available providers: "
                          f"'{', '.join(get_available_providers())}'", stacklevel=3)
            continue
        if backend == "cpu" and "cpu" not in avail:
            backend = "reference"
        if backend not in avail and backend != "reference":
            warnings.warn(f"Specified provider '{name}' is not available here "
                          f"({_sampan.backend_unavailable_reason(backend)}); trying the next one", stacklevel=3)
            continue
        device = 0
        for k, v in opts.items():
            if k == "device_id" and backend == "cuda":
                device = int(v)
            else:
                raise InvalidArgumentError(f"provider option '{k}' of {name} is not supported by Sampan "
                                           "(supported: device_id for CUDAExecutionProvider)")
        return name, backend, device
    backend = "cpu" if "cpu" in avail else "reference"
    return "CPUExecutionProvider", backend, 0


class InferenceSession:
    """onnxruntime.InferenceSession over Sampan: the model is built for the first usable
    provider (CUDAExecutionProvider/TensorrtExecutionProvider -> the cuda backend,
    CPUExecutionProvider -> the cpu backend) when the session is created; run() is thread-safe
    and runs concurrently from several threads (a context per concurrent call)."""

    def __init__(self, path_or_bytes: Union[PathLike, bytes], sess_options: Optional[SessionOptions] = None,
                 providers: Optional[Sequence[Any]] = None,
                 provider_options: Optional[Sequence[Mapping[str, Any]]] = None, **kwargs: Any):
        if kwargs:
            raise TypeError(f"InferenceSession: unsupported arguments {sorted(kwargs)}")
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise InvalidArgumentError("sess_options: a sampan.SessionOptions")
        self._options = sess_options or SessionOptions()
        self._provider, backend, device = _choose_provider(providers, provider_options)
        disabled: List[str] = []
        if self._options.graph_optimization_level == GraphOptimizationLevel.ORT_DISABLE_ALL:
            disabled = pass_names()
        threads = int(self._options.intra_op_num_threads or 0)
        self._model_path = path_or_bytes if isinstance(path_or_bytes, (str, os.PathLike)) else None
        plan = build(path_or_bytes, backend=backend, device=device, disabled_passes=disabled)
        self._engine = Engine(plan, device, threads=threads)
        self._idle: "queue.SimpleQueue[Context]" = queue.SimpleQueue()
        # The model's declared inputs and outputs (the optimized plan may know less of a shape).
        self._inputs = [NodeArg(TensorInfo(d)) for d in plan._h.model_inputs]
        self._outputs = [NodeArg(TensorInfo(d)) for d in plan._h.model_outputs]

    def get_inputs(self) -> List[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> List[str]:
        return [self._provider] if self._provider == "CPUExecutionProvider" else [self._provider, "CPUExecutionProvider"]

    def get_session_options(self) -> SessionOptions:
        return self._options

    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
            run_options: Any = None) -> List[np.ndarray]:
        """Runs the model: returns the outputs named (all when output_names is None), in that order."""
        if run_options is not None:
            raise InvalidArgumentError("run_options is not supported by Sampan (pass None)")
        names = [o.name for o in self._outputs]
        if output_names:
            for n in output_names:
                if n not in names:
                    raise InvalidArgumentError(f"Invalid output name: {n} (the model's outputs: {', '.join(names)})")
        try:
            ctx = self._idle.get_nowait()
        except queue.Empty:
            ctx = self._engine.create_context()
        try:
            result = ctx.run(input_feed)
        finally:
            self._idle.put(ctx)
        # onnxruntime's run answers numpy arrays, device-memory feeds or not.
        return [result[n].numpy() if isinstance(result[n], DeviceArray) else result[n] for n in (output_names or names)]
