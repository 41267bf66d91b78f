// Shared by the fuzz targets: a finding is a crash, a sanitizer report, a hang,
// or a broken promise checked here (an accepted input the next stage rejects,
// an error without a message). Rejecting bad input with a Status is the
// expected outcome, not a finding.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "base/status.h"

namespace sampan::fuzz {

inline std::map<std::string, long>*& Counts() {
  static std::map<std::string, long>* counts = nullptr;
  return counts;
}

[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

//! An error must say what was wrong: a rejected input with an empty message is a finding.
inline void ExpectExplained(const Status& s, const char* stage) {
  if (!s.ok() && s.message().empty()) Fail(std::string(stage) + ": error without a message");
}

//! `s` must be ok: the input was accepted by an earlier stage that promised this one would take it.
inline void ExpectOk(const Status& s, const char* stage) {
  if (!s.ok()) Fail(std::string(stage) + ": " + s.ToString());
}

//! An input of a request the front end accepted: its tensor matches its datatype and
//! shape, and every byte is read (a range outside the body, message or shared-memory
//! region it wraps is a sanitizer report). `T` is server::InferTensor.
template <class T>
void CheckAcceptedInput(const T& in) {
  if (in.data.dtype() != in.dtype || in.data.shape() != in.shape)
    Fail("input '" + in.name + "': tensor data does not match its datatype/shape");
  volatile unsigned long sum = 0;
  const auto* p = static_cast<const unsigned char*>(in.data.raw());
  for (size_t i = 0; i < in.data.nbytes(); ++i) sum = sum + p[i];
}

//! Counts inputs that got as far as `stage`; with SAMPAN_FUZZ_STATS set the
//! counts print at exit, to see how deep a corpus and mutator reach.
inline void Reached(const char* stage) {
  static std::map<std::string, long>* counts = [] {
    auto* m = new std::map<std::string, long>();
    if (std::getenv("SAMPAN_FUZZ_STATS"))
      std::atexit([] {
        for (const auto& [k, v] : *Counts()) std::fprintf(stderr, "fuzz stats: %8ld  %s\n", v, k.c_str());
      });
    return m;
  }();
  Counts() = counts;
  ++(*counts)[stage];
}

}  // namespace sampan::fuzz
