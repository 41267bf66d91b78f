// What the binding's files share (python/src/*.cpp): errors as Python exceptions, numpy
// element types, and the context handle that module.cpp creates and device.cpp runs.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/tensor.h"
#include "runtime/engine.h"

namespace sampan::python {

//! Raises the Python exception for `st` (the GIL must be held): sampan.Error's subclass for its code.
[[noreturn]] void Raise(const Status& st);
inline void Check(const Status& st) {
  if (!st.ok()) Raise(st);
}
template <class T>
T Take(Result<T>&& r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

//! numpy's name for a DType ("float32", "float16", "int64"...); "" when numpy has none.
std::string NumpyName(DType t);
//! The DType of a numpy dtype; none for non-native byte orders and types Sampan lacks.
std::optional<DType> FromNumpy(const pybind11::dtype& d);
//! A numpy array (made C-contiguous when it is not) as a read-only Tensor over its memory.
Tensor WrapArray(const std::string& name, const pybind11::array& given);

struct ContextHandle {
  std::shared_ptr<runtime::Engine> engine;  // also held by the context; kept for describing I/O
  std::unique_ptr<runtime::Context> ctx;
  std::mutex mu;                    // guards ctx: one run at a time; taken with the GIL released
  std::atomic<bool> closed{false};  // set (under mu) when ctx is released
  void check_open() const {
    if (closed.load()) Raise(FailedPrecondition("the context is closed"));
  }
};

//! Device memory in Python (device.cpp): the DeviceArray class, DLPack import, and
//! Context.run_device.
void BindDevice(pybind11::module_& m, pybind11::class_<ContextHandle>& context);

}  // namespace sampan::python
