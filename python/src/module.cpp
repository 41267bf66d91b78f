// sampan._sampan: the Python binding of the builder and the runtime (pybind11). The public
// API is python/sampan/__init__.py, which wraps these classes; this file only converts
// between numpy and sampan::Tensor, turns Status into exceptions, and releases the GIL
// around everything that computes (import, build, engine creation, inference).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "binding.h"
#include "builder/builder.h"
#include "onnx/importer.h"
#include "passes/pass.h"
#include "plan/plan.h"
#include "runtime/backend.h"
#include "runtime/engine.h"

namespace py = pybind11;

namespace sampan::python {
namespace {

// ---- errors ---------------------------------------------------------------------------

// One Python exception class per StatusCode, all subclasses of sampan.Error (a RuntimeError);
// those with an obvious builtin meaning also subclass it (ValueError, NotImplementedError...).
struct Errors {
  PyObject* base = nullptr;
  std::map<StatusCode, PyObject*> by_code;
};
Errors& errors() {
  static Errors e;
  return e;
}

PyObject* MakeError(py::module_& m, const char* name, PyObject* base, PyObject* builtin, const char* doc) {
  const std::string qual = std::string("sampan._sampan.") + name;
  PyObject* bases = builtin ? PyTuple_Pack(2, base, builtin) : PyTuple_Pack(1, base);
  PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));
  return cls;
}

void RegisterErrors(py::module_& m) {
  Errors& e = errors();
  const std::string qual = "sampan._sampan.Error";
  e.base = PyErr_NewExceptionWithDoc(qual.c_str(), "Base class of every error Sampan raises; str() is the message.",
                                     PyExc_RuntimeError, nullptr);
  if (!e.base) throw py::error_already_set();
  m.add_object("Error", py::handle(e.base));
  e.by_code[StatusCode::kInvalidArgument] = MakeError(m, "InvalidArgumentError", e.base, PyExc_ValueError,
                                                      "The input is wrong: a file, a shape, an argument.");
  e.by_code[StatusCode::kOutOfRange] =
      MakeError(m, "OutOfRangeError", e.base, PyExc_ValueError, "An index or shape outside what is allowed.");
  e.by_code[StatusCode::kNotFound] =
      MakeError(m, "NotFoundError", e.base, PyExc_LookupError, "A named thing (tensor, op, backend) does not exist.");
  e.by_code[StatusCode::kUnsupported] = MakeError(m, "UnsupportedError", e.base, PyExc_NotImplementedError,
                                                  "Valid input that Sampan does not implement.");
  e.by_code[StatusCode::kIoError] = MakeError(m, "IoError", e.base, PyExc_OSError, "The OS refused (open/read/write).");
  e.by_code[StatusCode::kFailedPrecondition] =
      MakeError(m, "FailedPreconditionError", e.base, nullptr, "Called in the wrong state (e.g. a closed engine).");
  e.by_code[StatusCode::kInternal] = MakeError(m, "InternalError", e.base, nullptr, "A bug in Sampan.");
  e.by_code[StatusCode::kUnavailable] =
      MakeError(m, "UnavailableError", e.base, nullptr, "Temporarily refused (e.g. a device error); retry later.");
  e.by_code[StatusCode::kCancelled] = MakeError(m, "CancelledError", e.base, nullptr, "The work was cancelled.");
  e.by_code[StatusCode::kDeadlineExceeded] =
      MakeError(m, "DeadlineExceededError", e.base, PyExc_TimeoutError, "A timeout expired before the work was done.");
}

}  // namespace

[[noreturn]] void Raise(const Status& st) {
  auto it = errors().by_code.find(st.code());
  PyErr_SetString(it != errors().by_code.end() ? it->second : errors().base, st.message().c_str());
  throw py::error_already_set();
}

namespace {

// ---- dtypes ---------------------------------------------------------------------------

// The ONNX name of an element type (TensorProto.DataType, lower case, as onnxruntime spells
// it inside "tensor(...)").
std::string OnnxTypeName(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float";
    case DType::kFloat64:
      return "double";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kBool:
      return "bool";
    case DType::kString:
      return "string";
    case DType::kInt8:
      return "int8";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt16:
      return "int16";
    case DType::kUInt16:
      return "uint16";
    case DType::kInt32:
      return "int32";
    case DType::kUInt32:
      return "uint32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt64:
      return "uint64";
    case DType::kComplex64:
      return "complex64";
    case DType::kComplex128:
      return "complex128";
    case DType::kFloat8E4M3FN:
      return "float8e4m3fn";
    case DType::kFloat8E4M3FNUZ:
      return "float8e4m3fnuz";
    case DType::kFloat8E5M2:
      return "float8e5m2";
    case DType::kFloat8E5M2FNUZ:
      return "float8e5m2fnuz";
    case DType::kFloat8E8M0:
      return "float8e8m0";
    case DType::kFloat4E2M1:
      return "float4e2m1";
    case DType::kInt4:
      return "int4";
    case DType::kUInt4:
      return "uint4";
    case DType::kInt2:
      return "int2";
    case DType::kUInt2:
      return "uint2";
    default:
      return DTypeName(t);
  }
}

// The element types whose storage numpy shares (the others: bfloat16, float8, packed ints,
// strings cannot cross the binding).
constexpr DType kNumpyTypes[] = {DType::kBool,      DType::kInt8,      DType::kUInt8,   DType::kInt16,
                                 DType::kUInt16,    DType::kInt32,     DType::kUInt32,  DType::kInt64,
                                 DType::kUInt64,    DType::kFloat16,   DType::kFloat32, DType::kFloat64,
                                 DType::kComplex64, DType::kComplex128};

}  // namespace

// numpy's name for a DType: the ONNX name but for float32/float64; "" when numpy lacks it.
std::string NumpyName(DType t) {
  if (std::find(std::begin(kNumpyTypes), std::end(kNumpyTypes), t) == std::end(kNumpyTypes)) return "";
  if (t == DType::kFloat32) return "float32";
  if (t == DType::kFloat64) return "float64";
  return OnnxTypeName(t);
}

// The DType of a numpy dtype from its kind and size (no dtype objects made per call);
// non-native byte orders have none.
std::optional<DType> FromNumpy(const py::dtype& d) {
  const char order = d.byteorder();
  if (order != '=' && order != '|') return std::nullopt;
  const py::ssize_t size = d.itemsize();
  switch (d.kind()) {
    case 'b':
      return size == 1 ? std::optional<DType>(DType::kBool) : std::nullopt;
    case 'i':
      return size == 1   ? DType::kInt8
             : size == 2 ? DType::kInt16
             : size == 4 ? DType::kInt32
             : size == 8 ? std::optional<DType>(DType::kInt64)
                         : std::nullopt;
    case 'u':
      return size == 1   ? DType::kUInt8
             : size == 2 ? DType::kUInt16
             : size == 4 ? DType::kUInt32
             : size == 8 ? std::optional<DType>(DType::kUInt64)
                         : std::nullopt;
    case 'f':
      return size == 2   ? DType::kFloat16
             : size == 4 ? DType::kFloat32
             : size == 8 ? std::optional<DType>(DType::kFloat64)
                         : std::nullopt;
    case 'c':
      return size == 8 ? DType::kComplex64 : size == 16 ? std::optional<DType>(DType::kComplex128) : std::nullopt;
    default:
      return std::nullopt;
  }
}

// ---- tensors --------------------------------------------------------------------------

// A numpy array (C-contiguous, of a numpy-shared dtype) as a read-only Tensor over the same
// memory: the Tensor's owner keeps the array alive and releases it under the GIL.
Tensor WrapArray(const std::string& name, const py::array& given) {
  const char kind = given.dtype().kind();
  if (kind == 'O' || kind == 'U' || kind == 'S') {
    // A string tensor (ONNX string, KServe BYTES): each element bytes (taken as they are) or str
    // (UTF-8), as onnxruntime takes them; copied, since the elements are Python objects.
    Shape shape(given.shape(), given.shape() + given.ndim());
    std::vector<std::string> values;
    values.reserve(static_cast<size_t>(given.size()));
    size_t i = 0;
    for (const py::handle item : given.attr("ravel")()) {
      if (py::isinstance<py::bytes>(item) || py::isinstance<py::str>(item)) {
        values.push_back(item.cast<std::string>());
      } else {
        Raise(InvalidArgument("input '", name, "': element ", i, " is ", std::string(py::repr(py::type::of(item))),
                              "; a string tensor takes str or bytes"));
      }
      ++i;
    }
    return Tensor::FromStrings(std::move(values), std::move(shape));
  }
  auto dt = FromNumpy(given.dtype());
  if (!dt)
    Raise(InvalidArgument("input '", name, "': numpy dtype ", std::string(py::str(given.dtype())),
                          " has no Sampan element type"));
  py::array a = given;
  if (!(a.flags() & py::array::c_style)) a = py::array::ensure(given, py::array::c_style);
  if (!a) throw py::error_already_set();
  Shape shape(a.shape(), a.shape() + a.ndim());
  auto* keep = new py::object(a);
  std::shared_ptr<const void> owner(keep, [](const void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<const py::object*>(p);
  });
  return Tensor::Wrap(*dt, std::move(shape), std::move(owner), a.data());
}

namespace {

py::array ToArray(const std::string& name, const Tensor& t) {
  if (t.is_string()) {
    // An object array of str, as onnxruntime returns string outputs; an element that is not
    // UTF-8 comes as bytes.
    py::list items;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const std::string& v = t.strings()[i];
      items.append(IsUtf8(v) ? py::object(py::str(v)) : py::object(py::bytes(v)));
    }
    std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
    py::module_ np = py::module_::import("numpy");
    return np.attr("array")(items, py::arg("dtype") = "O").attr("reshape")(shape).cast<py::array>();
  }
  const std::string np = NumpyName(t.dtype());
  if (np.empty())
    Raise(Unsupported("output '", name, "' is ", DTypeName(t.dtype()),
                      ", which numpy has no type for: build the plan so that the output is float32 or float16 "
                      "(e.g. Cast it in the model)"));
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array out(py::dtype(np), shape);
  if (t.nbytes()) std::memcpy(out.mutable_data(), t.raw(), t.nbytes());
  return out;
}

// ---- shapes and tensor descriptions -----------------------------------------------------

// A dim as Python sees it: an int, the symbol's name, or None.
py::object DimObject(const ir::Dim& d) {
  if (d.known()) return py::int_(d.value);
  if (!d.param.empty()) return py::str(d.param);
  return py::none();
}

py::dict Describe(const ir::Value* v) {
  py::dict d;
  d["name"] = v->name();
  const std::string np = v->type.dtype == DType::kString ? "O" : NumpyName(v->type.dtype);
  d["dtype"] = np.empty() ? py::object(py::none()) : py::object(py::dtype(np));
  d["element_type"] = OnnxTypeName(v->type.dtype);
  d["onnx_type"] = "tensor(" + OnnxTypeName(v->type.dtype) + ")";
  if (v->type.dims) {
    py::list shape;
    for (const ir::Dim& dim : *v->type.dims) shape.append(DimObject(dim));
    d["shape"] = py::tuple(shape);
  } else {
    d["shape"] = py::none();
  }
  return d;
}

py::list DescribeAll(const std::vector<ir::Value*>& values) {
  py::list l;
  for (const ir::Value* v : values) l.append(Describe(v));
  return l;
}

Shape ShapeFrom(const py::handle& h, const std::string& what) {
  Shape s;
  try {
    for (const py::handle& d : h) s.push_back(d.cast<int64_t>());
  } catch (const py::cast_error&) {
    Raise(InvalidArgument(what, ": a shape is a sequence of ints, got ", std::string(py::repr(h))));
  } catch (const py::error_already_set&) {
    Raise(InvalidArgument(what, ": a shape is a sequence of ints, got ", std::string(py::repr(h))));
  }
  return s;
}

// ---- plan -----------------------------------------------------------------------------

struct PlanHandle {
  std::shared_ptr<const plan::Plan> plan;
  // The model's inputs and outputs as declared in the ONNX file (before the passes), for a plan
  // built in this process; None for a loaded plan. InferenceSession describes these, as
  // onnxruntime does.
  py::object model_inputs = py::none(), model_outputs = py::none();
};

py::list ProfilesOf(const plan::Plan& p) {
  py::list out;
  for (const plan::Profile& prof : p.profiles) {
    py::dict d;
    for (const auto& [name, r] : prof)
      d[py::str(name)] =
          py::make_tuple(py::tuple(py::cast(r.min)), py::tuple(py::cast(r.opt)), py::tuple(py::cast(r.max)));
    out.append(d);
  }
  return out;
}

py::dict FingerprintOf(const plan::Fingerprint& f) {
  py::dict d;
  d["backend"] = f.backend.empty() ? std::string("reference") : f.backend;
  d["isa"] = f.isa;
  d["gpu_name"] = f.gpu_name;
  d["compute_capability"] = f.compute_capability;
  d["cuda_version"] = f.cuda_version;
  d["cudnn_version"] = f.cudnn_version;
  d["cublas_version"] = f.cublas_version;
  return d;
}

// profiles: a list of {input: (min, opt, max)}.
std::vector<plan::Profile> ParseProfiles(const py::object& given) {
  std::vector<plan::Profile> out;
  if (given.is_none()) return out;
  if (py::isinstance<py::dict>(given))
    Raise(InvalidArgument("profiles: a list of {input: (min, opt, max)} dicts, got a dict (wrap it in a list)"));
  size_t i = 0;
  for (const py::handle& item : given) {
    const std::string where = "profiles[" + std::to_string(i++) + "]";
    if (!py::isinstance<py::dict>(item)) Raise(InvalidArgument(where, ": a dict {input: (min, opt, max)}"));
    plan::Profile p;
    for (const auto& [k, v] : item.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k)) Raise(InvalidArgument(where, ": input names are strings"));
      const std::string name = k.cast<std::string>();
      py::sequence seq;
      try {
        seq = v.cast<py::sequence>();
      } catch (const py::cast_error&) {
        Raise(InvalidArgument(where, "['", name, "']: (min, opt, max) shapes"));
      }
      if (py::isinstance<py::str>(v) || seq.size() != 3)
        Raise(InvalidArgument(where, "['", name, "']: (min, opt, max) shapes"));
      plan::ShapeRange r;
      r.min = ShapeFrom(seq[0], where + "['" + name + "'] min");
      r.opt = ShapeFrom(seq[1], where + "['" + name + "'] opt");
      r.max = ShapeFrom(seq[2], where + "['" + name + "'] max");
      p[name] = r;
    }
    out.push_back(std::move(p));
  }
  return out;
}

PlanHandle Build(const py::object& model, const std::string& backend, const std::string& precision,
                 const py::object& profiles, const std::string& timing_cache, const py::object& progress, bool strict,
                 int device, int optimization_level, uint64_t workspace,
                 const std::vector<std::string>& disabled_passes, const std::vector<std::string>& layer_precision,
                 const std::string& quantize, const std::string& calib_data, const std::string& calib_method,
                 const std::string& calib_cache) {
  builder::BuildConfig config;
  if (!runtime::FindBackend(backend)) {
    std::string names;
    for (const auto& n : runtime::BackendNames()) names += (names.empty() ? "" : ", ") + n;
    Raise(InvalidArgument("backend '", backend, "' is not in this build (available: ", names, ")"));
  }
  config.backend = backend;
  config.precision = Take(builder::ParsePrecision(precision));
  // Implicit INT8 / FP8 (builder/calibrate.h): the other layers keep `precision`.
  if (!quantize.empty() && quantize != "int8" && quantize != "fp8")
    Raise(InvalidArgument("quantize '", quantize, "': int8, fp8 or empty"));
  config.calibration.int8 = quantize == "int8";
  config.calibration.fp8 = quantize == "fp8";
  config.calibration.data_dir = calib_data;
  config.calibration.cache_file = calib_cache;
  if (!calib_method.empty()) {
    Status st = builder::ParseCalibMethod(calib_method, &config.calibration);
    if (!st.ok()) Raise(st);
  }
  for (const std::string& lp : layer_precision)
    config.layer_precision.push_back(Take(builder::ParseLayerPrecision(lp)));
  config.profiles = ParseProfiles(profiles);
  config.timing_cache_file = timing_cache;
  config.strict = strict;
  if (device < 0) Raise(InvalidArgument("device must be >= 0, got ", device));
  if (optimization_level < 0 || optimization_level > 5)
    Raise(InvalidArgument("optimization_level must be in 0..5, got ", optimization_level));
  config.device = device;
  config.optimization_level = optimization_level;
  config.workspace_bytes = workspace;
  for (const std::string& p : disabled_passes) {
    if (!passes::FindPass(p)) Raise(InvalidArgument("disabled_passes: '", p, "' is not a pass name"));
    config.disabled_passes.insert(p);
  }
  // Progress lines go to the Python callable under the GIL; its first exception is raised
  // after the build (the build itself cannot be interrupted half way).
  std::optional<py::error_already_set> callback_error;
  if (!progress.is_none()) {
    if (!PyCallable_Check(progress.ptr())) Raise(InvalidArgument("progress must be callable"));
    config.progress = [&progress, &callback_error](const std::string& line) {
      py::gil_scoped_acquire gil;
      if (callback_error) return;
      try {
        progress(line);
      } catch (py::error_already_set& e) {
        callback_error.emplace(std::move(e));
      }
    };
  }
  std::string path, bytes;
  if (py::isinstance<py::bytes>(model) || py::isinstance<py::bytearray>(model) ||
      py::isinstance<py::memoryview>(model)) {
    bytes = py::isinstance<py::bytes>(model)
                ? model.cast<std::string>()
                : py::bytes(py::module_::import("builtins").attr("bytes")(model)).cast<std::string>();
    config.source_model = "<bytes>";
  } else {
    path = py::str(py::module_::import("os").attr("fspath")(model)).cast<std::string>();
    config.source_model = path;
  }
  Result<std::unique_ptr<ir::Graph>> graph = InvalidArgument("not imported");
  {
    py::gil_scoped_release nogil;
    graph = path.empty() ? onnx_import::ImportModelBytes(bytes, ".") : onnx_import::ImportModelFile(path);
  }
  std::unique_ptr<ir::Graph> g = Take(std::move(graph));
  py::list declared_in = DescribeAll(g->inputs()), declared_out = DescribeAll(g->outputs());
  Result<plan::Plan> built = InvalidArgument("not built");
  {
    py::gil_scoped_release nogil;
    builder::BuildReport report;
    built = builder::Build(std::move(g), config, &report);
  }
  if (callback_error) throw std::move(*callback_error);
  PlanHandle h{std::make_shared<const plan::Plan>(Take(std::move(built)))};
  h.model_inputs = std::move(declared_in);
  h.model_outputs = std::move(declared_out);
  return h;
}

// ---- engine and context -------------------------------------------------------------------

struct EngineHandle {
  std::shared_ptr<runtime::Engine> engine;
  runtime::Engine& get() const {
    if (!engine) Raise(FailedPrecondition("the engine is closed"));
    return *engine;
  }
};

EngineHandle CreateEngine(const PlanHandle& p, int device, int threads, bool cuda_graph) {
  if (!p.plan) Raise(FailedPrecondition("the plan is empty"));
  if (device < 0) Raise(InvalidArgument("device must be >= 0, got ", device));
  if (threads < 0) Raise(InvalidArgument("threads must be >= 0, got ", threads));
  runtime::EngineOptions eo;
  eo.device = device;
  eo.threads = threads;
  eo.use_cuda_graph = cuda_graph;
  Result<std::shared_ptr<runtime::Engine>> r = InvalidArgument("not created");
  {
    py::gil_scoped_release nogil;
    r = runtime::Engine::Create(*p.plan, eo);
  }
  return EngineHandle{Take(std::move(r))};
}

std::unique_ptr<ContextHandle> CreateContext(const EngineHandle& e) {
  e.get();
  // Our own reference: another thread may close the handle while the GIL is released.
  std::shared_ptr<runtime::Engine> engine = e.engine;
  Result<std::unique_ptr<runtime::Context>> r = InvalidArgument("not created");
  {
    py::gil_scoped_release nogil;
    r = engine->CreateContext();
  }
  auto c = std::make_unique<ContextHandle>();
  c->engine = std::move(engine);
  c->ctx = Take(std::move(r));
  return c;
}

// feeds: {name: numpy array}; outputs: {name: preallocated numpy array} or None. Returns
// {name: array} in the graph's output order (the caller's arrays where given).
py::dict Run(ContextHandle& c, const py::dict& feeds, const py::object& outputs) {
  c.check_open();
  const ir::Graph& graph = c.engine->graph();
  std::map<std::string, Tensor> inputs;
  for (const auto& [k, v] : feeds) {
    if (!py::isinstance<py::str>(k)) Raise(InvalidArgument("input names are strings, got ", std::string(py::repr(k))));
    const std::string name = k.cast<std::string>();
    if (!py::isinstance<py::array>(v))
      Raise(InvalidArgument("input '", name, "': a numpy array, got ", std::string(py::repr(py::type::of(v)))));
    inputs.emplace(name, WrapArray(name, v.cast<py::array>()));
  }
  std::map<std::string, py::array> into;
  if (!outputs.is_none()) {
    if (!py::isinstance<py::dict>(outputs)) Raise(InvalidArgument("outputs: a dict {name: numpy array}"));
    for (const auto& [k, v] : outputs.cast<py::dict>()) {
      const std::string name = py::str(k).cast<std::string>();
      bool known = false;
      for (const ir::Value* o : graph.outputs()) known |= o->name() == name;
      if (!known) Raise(InvalidArgument("outputs: the model has no output named '", name, "'"));
      if (!py::isinstance<py::array>(v)) Raise(InvalidArgument("outputs['", name, "']: a numpy array"));
      py::array a = v.cast<py::array>();
      if (!(a.flags() & py::array::c_style) || !a.writeable())
        Raise(InvalidArgument("outputs['", name, "']: the array must be C-contiguous and writeable"));
      into.emplace(name, a);
    }
  }
  Result<std::vector<Tensor>> r = InvalidArgument("not run");
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(c.mu);
    if (!c.ctx) {
      r = FailedPrecondition("the context is closed");
    } else {
      r = c.ctx->Run(inputs);
    }
  }
  inputs.clear();  // releases the wrapped arrays (under the GIL)
  std::vector<Tensor> out = Take(std::move(r));
  py::dict result;
  for (size_t i = 0; i < out.size() && i < graph.outputs().size(); ++i) {
    const std::string& name = graph.outputs()[i]->name();
    auto it = into.find(name);
    if (it == into.end()) {
      result[py::str(name)] = ToArray(name, out[i]);
      continue;
    }
    py::array& a = it->second;
    const std::string np = NumpyName(out[i].dtype());
    Shape shape(a.shape(), a.shape() + a.ndim());
    if (np.empty() || !a.dtype().equal(py::dtype(np)) || shape != out[i].shape())
      Raise(InvalidArgument("outputs['", name, "']: the output is ", out[i].Describe(), ", the array is ",
                            std::string(py::str(a.dtype())), ShapeToString(shape)));
    if (out[i].nbytes()) std::memcpy(a.mutable_data(), out[i].raw(), out[i].nbytes());
    result[py::str(name)] = a;
  }
  return result;
}

py::list AvailableBackends() {
  py::list l;
  for (const std::string& n : runtime::BackendNames()) {
    const runtime::Backend* b = runtime::FindBackend(n);
    if (b && (!b->available || b->available().ok())) l.append(n);
  }
  return l;
}

}  // namespace
}  // namespace sampan::python

PYBIND11_MODULE(_sampan, m) {
  using namespace sampan;
  using namespace sampan::python;
  m.doc() = "Sampan's C++ builder and runtime (internal: use the sampan package).";
  m.attr("__version__") = SAMPAN_VERSION_STRING;
  RegisterErrors(m);

  m.def(
      "backends", []() { return runtime::BackendNames(); }, "Backends in this build.");
  m.def("available_backends", &AvailableBackends, "Backends in this build that can run on this machine.");
  m.def(
      "backend_unavailable_reason",
      [](const std::string& name) -> std::string {
        const runtime::Backend* b = runtime::FindBackend(name);
        if (!b) return "backend '" + name + "' is not in this build";
        if (!b->available) return "";
        return b->available().message();
      },
      "Why a backend cannot run here ('' when it can).");
  m.def(
      "device_count",
      [](const std::string& name) {
        const runtime::Backend* b = runtime::FindBackend(name);
        if (!b) Raise(NotFound("backend '", name, "' is not in this build"));
        return runtime::DeviceCount(*b);
      },
      "Devices a backend sees in this process.");
  m.def(
      "pass_names",
      []() {
        std::vector<std::string> names;
        for (const passes::PassDef* p : passes::AllPasses()) names.push_back(p->name);
        return names;
      },
      "Names of the optimization passes, in pipeline order.");

  py::class_<PlanHandle>(m, "Plan")
      .def_property_readonly("inputs", [](const PlanHandle& p) { return DescribeAll(p.plan->graph->inputs()); })
      .def_property_readonly("outputs", [](const PlanHandle& p) { return DescribeAll(p.plan->graph->outputs()); })
      .def_property_readonly("profiles", [](const PlanHandle& p) { return ProfilesOf(*p.plan); })
      .def_property_readonly("model_inputs", [](const PlanHandle& p) { return p.model_inputs; })
      .def_property_readonly("model_outputs", [](const PlanHandle& p) { return p.model_outputs; })
      .def_property_readonly("fingerprint", [](const PlanHandle& p) { return FingerprintOf(p.plan->fingerprint); })
      .def_property_readonly("precision", [](const PlanHandle& p) { return p.plan->options.precision; })
      .def_property_readonly("source_model", [](const PlanHandle& p) { return p.plan->source_model; })
      .def("serialize",
           [](const PlanHandle& p) {
             Result<std::string> r = InvalidArgument("not serialized");
             {
               py::gil_scoped_release nogil;
               r = plan::SerializePlan(*p.plan);
             }
             return py::bytes(Take(std::move(r)));
           })
      .def("save", [](const PlanHandle& p, const std::string& path) {
        Status st;
        {
          py::gil_scoped_release nogil;
          st = plan::WritePlan(*p.plan, path);
        }
        Check(st);
      });

  m.def(
      "load",
      [](const std::string& path) {
        Result<plan::Plan> r = InvalidArgument("not read");
        {
          py::gil_scoped_release nogil;
          r = plan::ReadPlan(path);
        }
        return PlanHandle{std::make_shared<const plan::Plan>(Take(std::move(r)))};
      },
      py::arg("path"));
  m.def(
      "loads",
      [](const py::bytes& data) {
        auto owned = std::make_shared<const std::string>(data.cast<std::string>());
        Result<plan::Plan> r = InvalidArgument("not parsed");
        {
          py::gil_scoped_release nogil;
          r = plan::ParsePlan(owned, "<bytes>");
        }
        return PlanHandle{std::make_shared<const plan::Plan>(Take(std::move(r)))};
      },
      py::arg("data"));
  m.def(
      "is_plan_file", [](const std::string& path) { return plan::LooksLikePlan(path); }, py::arg("path"));

  m.def("build", &Build, py::arg("model"), py::arg("backend"), py::arg("precision"), py::arg("profiles"),
        py::arg("timing_cache"), py::arg("progress"), py::arg("strict"), py::arg("device"),
        py::arg("optimization_level"), py::arg("workspace"), py::arg("disabled_passes"), py::arg("layer_precision"),
        py::arg("quantize"), py::arg("calib_data"), py::arg("calib_method"), py::arg("calib_cache"));

  py::class_<EngineHandle>(m, "Engine")
      .def(py::init(&CreateEngine), py::arg("plan"), py::arg("device"), py::arg("threads"), py::arg("cuda_graph"))
      .def("create_context", &CreateContext)
      .def("close", [](EngineHandle& e) { e.engine.reset(); })
      .def_property_readonly("closed", [](const EngineHandle& e) { return !e.engine; })
      .def_property_readonly("healthy", [](const EngineHandle& e) { return e.get().healthy(); })
      .def_property_readonly(
          "plan",
          [](const EngineHandle& e) {
            return PlanHandle{std::shared_ptr<const plan::Plan>(e.get().shared_from_this(), &e.get().plan())};
          })
      .def_property_readonly("backend", [](const EngineHandle& e) {
        const std::string& b = e.get().plan().fingerprint.backend;
        return b.empty() ? std::string("reference") : b;
      });

  py::class_<ContextHandle> context(m, "Context");
  BindDevice(m, context);
  context.def("run", &Run, py::arg("feeds"), py::arg("outputs") = py::none())
      .def("close",
           [](ContextHandle& c) {
             py::gil_scoped_release nogil;  // waits for a run in progress
             std::lock_guard<std::mutex> lock(c.mu);
             c.ctx.reset();
             c.closed.store(true);
           })
      .def_property_readonly("closed", [](const ContextHandle& c) { return c.closed.load(); })
      .def_property_readonly("last_profile",
                             [](ContextHandle& c) {
                               int profile = -1;
                               bool open = false;
                               {
                                 py::gil_scoped_release nogil;  // a run in progress finishes first
                                 std::lock_guard<std::mutex> lock(c.mu);
                                 if (c.ctx) open = true, profile = c.ctx->last_profile();
                               }
                               if (!open) Raise(FailedPrecondition("the context is closed"));
                               return profile;
                             })
      .def_property_readonly("last_timing", [](ContextHandle& c) {
        runtime::Timing t;
        bool open = false;
        {
          py::gil_scoped_release nogil;
          std::lock_guard<std::mutex> lock(c.mu);
          if (c.ctx) open = true, t = c.ctx->last_timing();
        }
        if (!open) Raise(FailedPrecondition("the context is closed"));
        py::dict d;
        d["enqueue_ms"] = t.enqueue_ms;
        d["h2d_ms"] = t.h2d_ms;
        d["compute_ms"] = t.compute_ms;
        d["d2h_ms"] = t.d2h_ms;
        return d;
      });
}
