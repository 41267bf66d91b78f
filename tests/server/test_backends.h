// Backends for the server's in-process tests: the reference backend with each engine wrapped
// (to count runs, to break its health, ...), and a builder that plans for it under the same name.
// A test defines the engine and registers both with SAMPAN_REGISTER_TEST_BACKEND.
#pragma once

#include <memory>
#include <string>

#include "builder/backend_builder.h"
#include "runtime/backend.h"

namespace sampan::server {

inline plan::Fingerprint TestFingerprint(const std::string& name) {
  plan::Fingerprint f;
  f.backend = name;
  return f;
}

//! Backend `name`: the reference backend's engines, each wrapped in an `Engine` (which takes the
//! reference engine in its constructor).
template <class Engine>
runtime::Backend WrappedReferenceBackend(const std::string& name) {
  runtime::Backend b;
  b.name = name;
  b.available = [] { return Status::Ok(); };
  b.fingerprint = [name](int) { return TestFingerprint(name); };
  b.create = [](const plan::Plan& plan,
                const runtime::EngineOptions& o) -> Result<std::unique_ptr<runtime::BackendEngine>> {
    SP_ASSIGN_OR_RETURN(auto inner, runtime::FindBackend("reference")->create(plan, o));
    return std::unique_ptr<runtime::BackendEngine>(std::make_unique<Engine>(std::move(inner)));
  };
  return b;
}

//! The builder of backend `name` (reference kernels, `name`'s fingerprint).
inline builder::BackendBuilder TestBackendBuilder(const std::string& name) {
  builder::BackendBuilder b;
  b.name = name;
  b.fingerprint = [name](const builder::BuildConfig&) { return TestFingerprint(name); };
  return b;
}

}  // namespace sampan::server

//! SAMPAN_REGISTER_TEST_BACKEND(faulty_test, FaultyEngine): backend and builder `faulty_test`.
#define SAMPAN_REGISTER_TEST_BACKEND(id, Engine)                        \
  ::sampan::runtime::Backend SP_CONCAT(MakeTestBackend_, id)() {        \
    return ::sampan::server::WrappedReferenceBackend<Engine>(#id);      \
  }                                                                     \
  ::sampan::builder::BackendBuilder SP_CONCAT(MakeTestBuilder_, id)() { \
    return ::sampan::server::TestBackendBuilder(#id);                   \
  }                                                                     \
  SAMPAN_REGISTER_BACKEND(id, SP_CONCAT(MakeTestBackend_, id))          \
  SAMPAN_REGISTER_BACKEND_BUILDER(id, SP_CONCAT(MakeTestBuilder_, id))
