// Structure-aware mutation of protobuf messages for the fuzz targets whose
// input is a serialized message (ONNX models, plan metadata, gRPC requests):
// random byte flips almost never survive protobuf parsing, so these change one
// field at a time through reflection and serialize again. The changes are the
// ones that find bugs in readers: numbers set to edge values, names swapped for
// other names of the same message (dangling or duplicated references), repeated
// elements duplicated, dropped or reordered, sub-messages cleared, bytes cut.
//
// Used from LLVMFuzzerCustomMutator (libFuzzer's hook; tests/fuzz/driver.cpp
// calls it too), mixed with LLVMFuzzerMutate's byte-level changes.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/reflection.h>
#include <google/protobuf/stubs/logging.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace sampan::fuzz {

// Protobuf logs every string field that is not UTF-8 as it parses: noise at
// thousands of inputs a second (the target checks what the reader does with it).
inline const bool kQuietProtobuf = (google::protobuf::SetLogHandler(nullptr), true);

class ProtoMutator {
 public:
  explicit ProtoMutator(unsigned seed) : rng_(seed) {}

  //! Applies 1-3 field changes to `m`.
  void Mutate(google::protobuf::Message* m) {
    const int n = 1 + static_cast<int>(Below(3));
    for (int i = 0; i < n; ++i) MutateOnce(m);
  }

  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

 private:
  using FD = google::protobuf::FieldDescriptor;
  struct Site {
    google::protobuf::Message* msg;
    const FD* field;
  };

  void Collect(google::protobuf::Message* m, std::vector<Site>* sites, std::vector<std::string>* strings, int depth) {
    const auto* d = m->GetDescriptor();
    const auto* r = m->GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
      const FD* f = d->field(i);
      sites->push_back({m, f});
      if (f->cpp_type() == FD::CPPTYPE_STRING) {
        if (f->is_repeated()) {
          for (int k = 0; k < r->FieldSize(*m, f) && strings->size() < 256; ++k)
            strings->push_back(r->GetRepeatedString(*m, f, k));
        } else if (strings->size() < 256) {
          strings->push_back(r->GetString(*m, f));
        }
      }
      if (f->cpp_type() != FD::CPPTYPE_MESSAGE || depth > 12) continue;
      if (f->is_repeated()) {
        for (int k = 0; k < r->FieldSize(*m, f); ++k)
          Collect(r->MutableRepeatedMessage(m, f, k), sites, strings, depth + 1);
      } else if (r->HasField(*m, f)) {
        Collect(r->MutableMessage(m, f), sites, strings, depth + 1);
      }
    }
  }

  int64_t EdgeInt() {
    static const int64_t kEdges[] = {0,
                                     1,
                                     -1,
                                     2,
                                     3,
                                     7,
                                     8,
                                     64,
                                     255,
                                     256,
                                     65536,
                                     INT32_MAX,
                                     INT32_MIN,
                                     int64_t{1} << 31,
                                     int64_t{1} << 32,
                                     INT64_MAX,
                                     INT64_MIN,
                                     int64_t{1} << 40};
    return kEdges[Below(std::size(kEdges))];
  }

  double EdgeFloat() {
    static const double kEdges[] = {0.0,
                                    -0.0,
                                    1.0,
                                    -1.0,
                                    1e-40,
                                    1e30,
                                    3.5e38,
                                    std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity(),
                                    std::numeric_limits<double>::quiet_NaN()};
    return kEdges[Below(std::size(kEdges))];
  }

  std::string MutateBytes(std::string s) {
    switch (Below(5)) {
      case 0:
        s.resize(Below(s.size() + 1));
        break;
      case 1:
        if (!s.empty()) s[Below(s.size())] = static_cast<char>(Below(256));
        break;
      case 2:
        s += static_cast<char>(Below(256));
        break;
      case 3:
        s.clear();
        break;
      default: {  // the byte-level mutator, with room to grow
        const size_t old = s.size();
        s.resize(old * 2 + 16);
        s.resize(LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(s.data()), old, s.size()));
        break;
      }
    }
    return s;
  }

  void MutateOnce(google::protobuf::Message* root) {
    std::vector<Site> sites;
    std::vector<std::string> strings;
    Collect(root, &sites, &strings, 0);
    if (sites.empty()) return;
    const Site s = sites[Below(sites.size())];
    google::protobuf::Message* m = s.msg;
    const FD* f = s.field;
    const auto* r = m->GetReflection();
    if (f->is_repeated()) {
      const int size = r->FieldSize(*m, f);
      switch (Below(size == 0 ? 1 : 4)) {
        case 0:  // add an element: a copy of an existing one, or a fresh one
          if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
            google::protobuf::Message* added = r->AddMessage(m, f);
            if (size > 0) added->CopyFrom(r->GetRepeatedMessage(*m, f, static_cast<int>(Below(size))));
          } else {
            AddScalar(m, f, strings);
          }
          return;
        case 1:  // drop one
          r->SwapElements(m, f, static_cast<int>(Below(size)), size - 1);
          r->RemoveLast(m, f);
          return;
        case 2:  // reorder
          r->SwapElements(m, f, static_cast<int>(Below(size)), static_cast<int>(Below(size)));
          return;
        default:  // change one in place
          SetRepeated(m, f, static_cast<int>(Below(size)), strings);
          return;
      }
    }
    switch (f->cpp_type()) {
      case FD::CPPTYPE_MESSAGE:
        if (r->HasField(*m, f) && Below(2) == 0)
          r->ClearField(m, f);
        else
          r->MutableMessage(m, f);  // present but empty
        return;
      case FD::CPPTYPE_INT32:
        r->SetInt32(m, f, static_cast<int32_t>(NewInt(r->GetInt32(*m, f))));
        return;
      case FD::CPPTYPE_INT64:
        r->SetInt64(m, f, NewInt(r->GetInt64(*m, f)));
        return;
      case FD::CPPTYPE_UINT32:
        r->SetUInt32(m, f, static_cast<uint32_t>(NewInt(r->GetUInt32(*m, f))));
        return;
      case FD::CPPTYPE_UINT64:
        r->SetUInt64(m, f, static_cast<uint64_t>(NewInt(static_cast<int64_t>(r->GetUInt64(*m, f)))));
        return;
      case FD::CPPTYPE_FLOAT:
        r->SetFloat(m, f, static_cast<float>(EdgeFloat()));
        return;
      case FD::CPPTYPE_DOUBLE:
        r->SetDouble(m, f, EdgeFloat());
        return;
      case FD::CPPTYPE_BOOL:
        r->SetBool(m, f, !r->GetBool(*m, f));
        return;
      case FD::CPPTYPE_ENUM: {
        const auto* e = f->enum_type();
        r->SetEnum(m, f, e->value(static_cast<int>(Below(e->value_count()))));
        return;
      }
      case FD::CPPTYPE_STRING:
        r->SetString(m, f, NewString(r->GetString(*m, f), strings));
        return;
    }
  }

  int64_t NewInt(int64_t old) {
    switch (Below(3)) {
      case 0:
        return EdgeInt();
      case 1:
        return static_cast<int64_t>(static_cast<uint64_t>(old) + (Below(2) ? 1 : ~uint64_t{0}));  // +-1, wrapping
      default:
        return static_cast<int64_t>(rng_() >> Below(64));
    }
  }

  std::string NewString(const std::string& old, const std::vector<std::string>& strings) {
    if (!strings.empty() && Below(2) == 0) return strings[Below(strings.size())];  // another name of this message
    return MutateBytes(old);
  }

  void AddScalar(google::protobuf::Message* m, const FD* f, const std::vector<std::string>& strings) {
    const auto* r = m->GetReflection();
    switch (f->cpp_type()) {
      case FD::CPPTYPE_INT32:
        r->AddInt32(m, f, static_cast<int32_t>(EdgeInt()));
        return;
      case FD::CPPTYPE_INT64:
        r->AddInt64(m, f, EdgeInt());
        return;
      case FD::CPPTYPE_UINT32:
        r->AddUInt32(m, f, static_cast<uint32_t>(EdgeInt()));
        return;
      case FD::CPPTYPE_UINT64:
        r->AddUInt64(m, f, static_cast<uint64_t>(EdgeInt()));
        return;
      case FD::CPPTYPE_FLOAT:
        r->AddFloat(m, f, static_cast<float>(EdgeFloat()));
        return;
      case FD::CPPTYPE_DOUBLE:
        r->AddDouble(m, f, EdgeFloat());
        return;
      case FD::CPPTYPE_BOOL:
        r->AddBool(m, f, Below(2) == 0);
        return;
      case FD::CPPTYPE_ENUM:
        r->AddEnum(m, f, f->enum_type()->value(static_cast<int>(Below(f->enum_type()->value_count()))));
        return;
      case FD::CPPTYPE_STRING:
        r->AddString(m, f, NewString("", strings));
        return;
      case FD::CPPTYPE_MESSAGE:
        return;
    }
  }

  void SetRepeated(google::protobuf::Message* m, const FD* f, int k, const std::vector<std::string>& strings) {
    const auto* r = m->GetReflection();
    switch (f->cpp_type()) {
      case FD::CPPTYPE_INT32:
        r->SetRepeatedInt32(m, f, k, static_cast<int32_t>(NewInt(r->GetRepeatedInt32(*m, f, k))));
        return;
      case FD::CPPTYPE_INT64:
        r->SetRepeatedInt64(m, f, k, NewInt(r->GetRepeatedInt64(*m, f, k)));
        return;
      case FD::CPPTYPE_UINT32:
        r->SetRepeatedUInt32(m, f, k, static_cast<uint32_t>(NewInt(r->GetRepeatedUInt32(*m, f, k))));
        return;
      case FD::CPPTYPE_UINT64:
        r->SetRepeatedUInt64(m, f, k,
                             static_cast<uint64_t>(NewInt(static_cast<int64_t>(r->GetRepeatedUInt64(*m, f, k)))));
        return;
      case FD::CPPTYPE_FLOAT:
        r->SetRepeatedFloat(m, f, k, static_cast<float>(EdgeFloat()));
        return;
      case FD::CPPTYPE_DOUBLE:
        r->SetRepeatedDouble(m, f, k, EdgeFloat());
        return;
      case FD::CPPTYPE_BOOL:
        r->SetRepeatedBool(m, f, k, !r->GetRepeatedBool(*m, f, k));
        return;
      case FD::CPPTYPE_ENUM:
        r->SetRepeatedEnum(m, f, k, f->enum_type()->value(static_cast<int>(Below(f->enum_type()->value_count()))));
        return;
      case FD::CPPTYPE_STRING:
        r->SetRepeatedString(m, f, k, NewString(r->GetRepeatedString(*m, f, k), strings));
        return;
      case FD::CPPTYPE_MESSAGE:
        MutateOnce(r->MutableRepeatedMessage(m, f, k));
        return;
    }
  }

  std::mt19937_64 rng_;
};

//! The body of an LLVMFuzzerCustomMutator for a target whose input is a
//! serialized `Msg`: three times in four a field change (when the input parses),
//! else a byte-level change. Returns the new size (at most max_size).
template <class Msg>
size_t MutateSerialized(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  ProtoMutator mutator(seed);
  Msg msg;
  if (mutator.Below(4) != 0 && msg.ParseFromArray(data, static_cast<int>(size))) {
    mutator.Mutate(&msg);
    std::string out;
    if (msg.SerializeToString(&out) && out.size() <= max_size) {
      std::copy(out.begin(), out.end(), data);
      return out.size();
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

}  // namespace sampan::fuzz
