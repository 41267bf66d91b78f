// Device memory in the Python API: sampan.DeviceArray (device memory Sampan allocated, handed
// to torch/CuPy through DLPack or __cuda_array_interface__ without a copy), the DLPack import
// of device tensors that callers feed, and Context.run_device (runtime::Context::RunDevice).
// python/sampan/__init__.py decides which feeds are device memory; this file only moves
// pointers, shapes and element types across.
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "binding.h"
#include "runtime/backend.h"

namespace py = pybind11;

namespace sampan::python {
namespace {

// ---- DLPack's ABI (dlpack.h 0.8: the unversioned DLManagedTensor that frameworks exchange) ----
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: C-contiguous
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr int32_t kDLCUDA = 2;
constexpr int32_t kDLCUDAManaged = 13;
enum : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6 };

std::optional<DLDataType> ToDL(DType t) {
  auto dl = [](uint8_t code, uint8_t bits) { return DLDataType{code, bits, 1}; };
  switch (t) {
    case DType::kBool:
      return dl(kDLBool, 8);
    case DType::kInt8:
      return dl(kDLInt, 8);
    case DType::kInt16:
      return dl(kDLInt, 16);
    case DType::kInt32:
      return dl(kDLInt, 32);
    case DType::kInt64:
      return dl(kDLInt, 64);
    case DType::kUInt8:
      return dl(kDLUInt, 8);
    case DType::kUInt16:
      return dl(kDLUInt, 16);
    case DType::kUInt32:
      return dl(kDLUInt, 32);
    case DType::kUInt64:
      return dl(kDLUInt, 64);
    case DType::kFloat16:
      return dl(kDLFloat, 16);
    case DType::kFloat32:
      return dl(kDLFloat, 32);
    case DType::kFloat64:
      return dl(kDLFloat, 64);
    case DType::kBFloat16:
      return dl(kDLBfloat, 16);
    case DType::kComplex64:
      return dl(kDLComplex, 64);
    case DType::kComplex128:
      return dl(kDLComplex, 128);
    default:
      return std::nullopt;
  }
}

std::optional<DType> FromDL(const DLDataType& d) {
  if (d.lanes != 1) return std::nullopt;
  for (DType t : {DType::kBool, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kUInt8,
                  DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kFloat16, DType::kFloat32, DType::kFloat64,
                  DType::kBFloat16, DType::kComplex64, DType::kComplex128}) {
    auto dl = ToDL(t);
    if (dl->code == d.code && dl->bits == d.bits) return t;
  }
  if (d.code == kDLUInt && d.bits == 8) return DType::kUInt8;
  return std::nullopt;
}

// The element type a feed names: numpy's names, and "bfloat16" (which numpy lacks).
DType ParseDType(const std::string& name, const std::string& what) {
  if (name == "bfloat16") return DType::kBFloat16;
  std::optional<DType> t;
  try {
    t = FromNumpy(py::dtype(name));
  } catch (const py::error_already_set&) {
    t = std::nullopt;
  }
  if (!t) Raise(InvalidArgument(what, ": element type '", name, "' has no Sampan type"));
  return *t;
}

// numpy's name of a DType where it has one, else Sampan's ("bfloat16").
std::string TypeName(DType t) {
  std::string n = NumpyName(t);
  return n.empty() ? DTypeName(t) : n;
}

// The device backend's memory hooks (runtime::Backend::device_alloc/device_copy).
const runtime::Backend& DeviceBackend() {
  const runtime::Backend* b = runtime::FindBackend("cuda");
  if (!b || !b->device_alloc || !b->device_copy)
    Raise(Unsupported("device memory needs the cuda backend, which this build of Sampan does not have"));
  if (Status st = b->available(); !st.ok()) Raise(Unsupported("device memory: ", st.message()));
  return *b;
}

// ---- sampan.DeviceArray ----------------------------------------------------------------

struct DeviceArray {
  runtime::DeviceTensor t;  // t.owner frees the memory when the last holder (array, DLPack export) goes
  int device = 0;
};

DeviceArray NewDeviceArray(DType dtype, const Shape& shape, int device) {
  if (device < 0) Raise(InvalidArgument("device must be >= 0, got ", device));
  Check(CheckShape(shape));
  const runtime::Backend& b = DeviceBackend();
  DeviceArray a;
  a.device = device;
  a.t.dtype = dtype;
  a.t.shape = shape;
  Result<std::shared_ptr<void>> mem = InvalidArgument("not allocated");
  {
    py::gil_scoped_release nogil;
    mem = b.device_alloc(device, a.t.nbytes());
  }
  a.t.owner = Take(std::move(mem));
  a.t.data = a.t.owner.get();
  return a;
}

// Host <-> device copies of a whole array; the host array must have the device array's type and shape.
void CopyHost(DeviceArray& a, const py::array& host, bool to_device) {
  const std::string np = NumpyName(a.t.dtype);
  const Shape shape(host.shape(), host.shape() + host.ndim());
  if (np.empty() || !host.dtype().equal(py::dtype(np)) || shape != a.t.shape)
    Raise(InvalidArgument("the device array is ", TypeName(a.t.dtype), ShapeToString(a.t.shape), ", the host array is ",
                          std::string(py::str(host.dtype())), ShapeToString(shape)));
  if (!(host.flags() & py::array::c_style)) Raise(InvalidArgument("the host array must be C-contiguous"));
  const runtime::Backend& b = DeviceBackend();
  Status st;
  if (to_device) {
    const void* src = host.data();
    py::gil_scoped_release nogil;
    st = b.device_copy(a.device, a.t.data, src, a.t.nbytes(), runtime::Backend::CopyKind::kHostToDevice);
  } else {
    py::array out = host;
    if (!out.writeable()) Raise(InvalidArgument("the host array is read-only"));
    void* dst = out.mutable_data();
    py::gil_scoped_release nogil;
    st = b.device_copy(a.device, dst, a.t.data, a.t.nbytes(), runtime::Backend::CopyKind::kDeviceToHost);
  }
  Check(st);
}

py::array ToNumpy(DeviceArray& a) {
  const std::string np = NumpyName(a.t.dtype);
  if (np.empty())
    Raise(Unsupported("the device array is ", DTypeName(a.t.dtype),
                      ", which numpy has no type for (use DLPack: "
                      "torch.from_dlpack)"));
  std::vector<py::ssize_t> shape(a.t.shape.begin(), a.t.shape.end());
  py::array out(py::dtype(np), shape);
  CopyHost(a, out, false);
  return out;
}

py::dict CudaArrayInterface(const DeviceArray& a) {
  const std::string np = NumpyName(a.t.dtype);
  // bfloat16 has no typestr: such arrays go through DLPack only.
  if (np.empty())
    throw py::attribute_error("__cuda_array_interface__: " + std::string(DTypeName(a.t.dtype)) +
                              " has no array-interface type string; use __dlpack__");
  py::dict d;
  d["shape"] = py::tuple(py::cast(std::vector<int64_t>(a.t.shape.begin(), a.t.shape.end())));
  d["typestr"] = py::dtype(np).attr("str");
  d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(a.t.data), false);
  d["version"] = 3;
  d["strides"] = py::none();
  d["stream"] = py::none();  // written before run()/empty()/from_numpy() returned: nothing to wait for
  return d;
}

// __dlpack__: a "dltensor" capsule that shares the memory; the consumer's deleter call (or the
// capsule's destruction when nobody consumed it) drops the export's reference.
struct Exported {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  runtime::DeviceTensor keep;
};

void DeleteExported(DLManagedTensor* m) {
  delete static_cast<Exported*>(m->manager_ctx);
}

void DestroyCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;  // consumed ("used_dltensor"): the consumer deletes
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (m && m->deleter) m->deleter(m);
}

// max_version: the consumer's newest DLPack version; the unversioned capsule is what every
// version takes (a producer may answer it whatever max_version says).
py::object ToDlpack(const DeviceArray& a, const py::object& stream, const py::object& max_version,
                    const py::object& dl_device, const py::object& copy) {
  (void)max_version;
  if (!stream.is_none() && !py::isinstance<py::int_>(stream))
    Raise(InvalidArgument("__dlpack__: stream is an integer or None, got ", std::string(py::repr(stream))));
  if (!copy.is_none() && copy.cast<bool>())
    Raise(Unsupported("__dlpack__(copy=True): Sampan exports its device arrays without copying"));
  if (!dl_device.is_none()) {
    auto dev = dl_device.cast<std::pair<int, int>>();
    if (dev.first != kDLCUDA || dev.second != a.device)
      Raise(Unsupported("__dlpack__: the array is on CUDA device ", a.device, ", dl_device asks for (", dev.first, ", ",
                        dev.second, ")"));
  }
  auto dl = ToDL(a.t.dtype);
  if (!dl) Raise(Unsupported("__dlpack__: DLPack has no type for ", DTypeName(a.t.dtype)));
  auto* e = new Exported;
  e->shape.assign(a.t.shape.begin(), a.t.shape.end());
  e->keep = a.t;
  DLTensor& t = e->managed.dl_tensor;
  t.data = a.t.data;
  t.device = DLDevice{kDLCUDA, a.device};
  t.ndim = static_cast<int32_t>(e->shape.size());
  t.dtype = *dl;
  t.shape = e->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = &DeleteExported;
  PyObject* capsule = PyCapsule_New(&e->managed, "dltensor", &DestroyCapsule);
  if (!capsule) {
    delete e;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

// ---- DLPack import ------------------------------------------------------------------------

// A device tensor a caller fed through DLPack: holds the producer's memory until released.
struct DlpackView {
  DLManagedTensor* managed = nullptr;
  uintptr_t ptr = 0;
  std::string dtype;
  Shape shape;
  int device = 0;
  DlpackView() = default;
  DlpackView(const DlpackView&) = delete;
  DlpackView& operator=(const DlpackView&) = delete;
  ~DlpackView() { Release(); }
  void Release() {
    DLManagedTensor* m = managed;
    managed = nullptr;
    if (m && m->deleter) m->deleter(m);
  }
};

std::unique_ptr<DlpackView> ImportDlpack(const py::object& capsule, const std::string& what) {
  PyObject* c = capsule.ptr();
  if (PyCapsule_IsValid(c, "dltensor_versioned"))
    Raise(Unsupported(what, ": a versioned DLPack capsule; Sampan asks for and takes the unversioned form"));
  if (!PyCapsule_IsValid(c, "dltensor"))
    Raise(InvalidArgument(what, ": __dlpack__() did not return an unused \"dltensor\" capsule"));
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
  if (!m) throw py::error_already_set();
  auto view = std::make_unique<DlpackView>();
  view->managed = m;
  if (PyCapsule_SetName(c, "used_dltensor") != 0) {  // consumed: the view's Release calls the deleter
    view->managed = nullptr;
    throw py::error_already_set();
  }
  const DLTensor& t = m->dl_tensor;
  if (t.device.device_type != kDLCUDA && t.device.device_type != kDLCUDAManaged)
    Raise(InvalidArgument(what, ": DLPack device type ", t.device.device_type, " is not CUDA memory"));
  auto dtype = FromDL(t.dtype);
  if (!dtype)
    Raise(InvalidArgument(what, ": DLPack element type (code ", int(t.dtype.code), ", ", int(t.dtype.bits), " bits, ",
                          t.dtype.lanes, " lanes) has no Sampan type"));
  if (t.ndim < 0 || (t.ndim > 0 && !t.shape)) Raise(InvalidArgument(what, ": a DLPack tensor without a shape"));
  view->shape.assign(t.shape, t.shape + t.ndim);
  Check(CheckShape(view->shape));
  if (t.strides) {  // strides of size-1 dims do not matter
    int64_t expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (view->shape[d] != 1 && t.strides[d] != expect)
        Raise(InvalidArgument(what, ": the tensor is not C-contiguous (strides ",
                              ShapeToString(Shape(t.strides, t.strides + t.ndim)), " for shape ",
                              ShapeToString(view->shape), "); make it contiguous first (.contiguous())"));
      expect *= view->shape[d];
    }
  }
  view->ptr = reinterpret_cast<uintptr_t>(static_cast<char*>(t.data) + t.byte_offset);
  view->dtype = TypeName(*dtype);
  view->device = t.device.device_id;
  return view;
}

// ---- Context.run_device -------------------------------------------------------------------

// A device buffer a feed or output names: (pointer, element type, shape, device ordinal).
runtime::DeviceTensor DeviceFeed(const py::handle& h, const std::string& what, int engine_device) {
  py::tuple t;
  try {
    t = h.cast<py::tuple>();
  } catch (const py::cast_error&) {
    Raise(InvalidArgument(what, ": (pointer, dtype, shape, device) expected"));
  }
  if (t.size() != 4) Raise(InvalidArgument(what, ": (pointer, dtype, shape, device) expected"));
  runtime::DeviceTensor d;
  d.data = reinterpret_cast<void*>(t[0].cast<uintptr_t>());
  d.dtype = ParseDType(t[1].cast<std::string>(), what);
  for (const py::handle& dim : t[2]) d.shape.push_back(dim.cast<int64_t>());
  Check(CheckShape(d.shape));
  const int device = t[3].cast<int>();
  if (device != engine_device)
    Raise(InvalidArgument(what, " is on CUDA device ", device, ", the engine on device ", engine_device,
                          " (copy it there first)"));
  return d;
}

py::list RunDevice(ContextHandle& c, const py::dict& host_feeds, const py::dict& device_feeds, const py::dict& outputs,
                   const std::vector<uintptr_t>& wait_streams) {
  c.check_open();
  const int device = c.engine->options().device;
  runtime::DeviceRun run;
  for (const auto& [k, v] : host_feeds) {
    const std::string name = py::str(k).cast<std::string>();
    if (!py::isinstance<py::array>(v)) Raise(InvalidArgument("input '", name, "': a numpy array"));
    run.host_inputs.emplace(name, WrapArray(name, v.cast<py::array>()));
  }
  for (const auto& [k, v] : device_feeds) {
    const std::string name = py::str(k).cast<std::string>();
    run.device_inputs.emplace(name, DeviceFeed(v, "input '" + name + "'", device));
  }
  const ir::Graph& graph = c.engine->graph();
  for (const auto& [k, v] : outputs) {
    const std::string name = py::str(k).cast<std::string>();
    bool known = false;
    for (const ir::Value* o : graph.outputs()) known |= o->name() == name;
    if (!known) Raise(InvalidArgument("outputs: the model has no output named '", name, "'"));
    run.outputs.emplace(name, DeviceFeed(v, "outputs['" + name + "']", device));
  }
  run.wait_streams = wait_streams;
  Result<std::vector<runtime::DeviceTensor>> r = InvalidArgument("not run");
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(c.mu);
    if (!c.ctx) {
      r = FailedPrecondition("the context is closed");
    } else {
      r = c.ctx->RunDevice(run);
    }
  }
  run.host_inputs.clear();  // releases the wrapped arrays (under the GIL)
  std::vector<runtime::DeviceTensor> out = Take(std::move(r));
  py::list result;
  for (size_t i = 0; i < out.size(); ++i) {
    // The caller's own buffers come back as None: the Python layer returns the caller's object.
    if (i < graph.outputs().size() && outputs.contains(py::str(graph.outputs()[i]->name()))) {
      result.append(py::none());
      continue;
    }
    DeviceArray a;
    a.t = std::move(out[i]);
    a.device = device;
    result.append(py::cast(std::move(a)));
  }
  return result;
}

}  // namespace

void BindDevice(py::module_& m, py::class_<ContextHandle>& context) {
  py::class_<DeviceArray>(m, "DeviceArray")
      .def_static(
          "empty",
          [](const py::handle& shape, const std::string& dtype, int device) {
            Shape s;
            for (const py::handle& d : shape) s.push_back(d.cast<int64_t>());
            return NewDeviceArray(ParseDType(dtype, "DeviceArray.empty"), s, device);
          },
          py::arg("shape"), py::arg("dtype"), py::arg("device"))
      .def_static(
          "from_numpy",
          [](const py::array& host, int device) {
            py::array a = py::array::ensure(host, py::array::c_style);
            if (!a) throw py::error_already_set();
            auto dt = FromNumpy(a.dtype());
            if (!dt) Raise(InvalidArgument("numpy dtype ", std::string(py::str(a.dtype())), " has no Sampan type"));
            DeviceArray d = NewDeviceArray(*dt, Shape(a.shape(), a.shape() + a.ndim()), device);
            CopyHost(d, a, true);
            return d;
          },
          py::arg("array"), py::arg("device"))
      .def("numpy", &ToNumpy)
      .def(
          "copy_from", [](DeviceArray& a, const py::array& host) { CopyHost(a, host, true); }, py::arg("array"))
      .def(
          "copy_to", [](DeviceArray& a, const py::array& host) { CopyHost(a, host, false); }, py::arg("array"))
      .def_property_readonly("shape",
                             [](const DeviceArray& a) {
                               return py::tuple(py::cast(std::vector<int64_t>(a.t.shape.begin(), a.t.shape.end())));
                             })
      .def_property_readonly("dtype", [](const DeviceArray& a) { return TypeName(a.t.dtype); })
      .def_property_readonly("device", [](const DeviceArray& a) { return a.device; })
      .def_property_readonly("ptr", [](const DeviceArray& a) { return reinterpret_cast<uintptr_t>(a.t.data); })
      .def_property_readonly("nbytes", [](const DeviceArray& a) { return a.t.nbytes(); })
      .def_property_readonly("__cuda_array_interface__", &CudaArrayInterface)
      .def("__dlpack__", &ToDlpack, py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const DeviceArray& a) { return py::make_tuple(kDLCUDA, a.device); });

  py::class_<DlpackView>(m, "DlpackView")
      .def_readonly("ptr", &DlpackView::ptr)
      .def_readonly("dtype", &DlpackView::dtype)
      .def_property_readonly(
          "shape",
          [](const DlpackView& v) { return py::tuple(py::cast(std::vector<int64_t>(v.shape.begin(), v.shape.end()))); })
      .def_readonly("device", &DlpackView::device)
      .def("release", &DlpackView::Release);
  m.def("import_dlpack", &ImportDlpack, py::arg("capsule"), py::arg("what"),
        "Takes a DLPack capsule of CUDA memory (consumes it); the view holds the memory until released.");
  m.def("device_memory_available", []() {
    const runtime::Backend* b = runtime::FindBackend("cuda");
    if (!b || !b->device_alloc) return std::string("this build of Sampan has no cuda backend");
    Status st = b->available();
    return st.ok() ? std::string() : st.message();
  });

  context.def("run_device", &RunDevice, py::arg("host_feeds"), py::arg("device_feeds"), py::arg("outputs"),
              py::arg("wait_streams"));
}

}  // namespace sampan::python
