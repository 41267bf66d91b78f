// .npy read/write: round trips for every dtype and clear errors for malformed files.
#include "base/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace sampan {
namespace {

std::string Header(const std::string& dict, int major = 1) {
  std::string h = dict;
  const size_t pre = major == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  if (major == 1) {
    out += static_cast<char>(h.size() & 0xff);
    out += static_cast<char>(h.size() >> 8);
  } else {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((h.size() >> (8 * i)) & 0xff);
  }
  return out + h;
}

std::string Floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

TEST(Npy, RoundTripsEveryDType) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt8, DType::kInt16, DType::kInt32,
                  DType::kInt64, DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kBool}) {
    Tensor x = Tensor::FromVector<int>(t, {0, 1, 0, 1, 1, 0}, {2, 3});
    auto back = ParseNpy(SerializeNpy(x), "mem");
    ASSERT_TRUE(back.ok()) << DTypeName(t) << ": " << back.status().ToString();
    EXPECT_EQ(back->dtype(), t);
    EXPECT_EQ(back->shape(), (Shape{2, 3}));
    EXPECT_EQ(std::memcmp(back->raw(), x.raw(), x.nbytes()), 0) << DTypeName(t);
  }
}

TEST(Npy, ShapesScalarOneDimAndEmpty) {
  for (const Shape& s : {Shape{}, Shape{5}, Shape{0}, Shape{2, 0, 3}, Shape{1, 1, 1, 1}}) {
    Tensor x = Tensor::Alloc(DType::kFloat32, s);
    const std::string bytes = SerializeNpy(x);
    EXPECT_EQ((bytes.size() - x.nbytes()) % 64, 0u) << "header must be 64-byte aligned";
    auto back = ParseNpy(bytes, "mem");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->shape(), s);
  }
}

TEST(Npy, BFloat16IsWrittenAsFloat32) {
  Tensor x = Tensor::FromVector<float>(DType::kBFloat16, {1.5f, -2.f}, {2});
  auto back = ParseNpy(SerializeNpy(x), "mem");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->dtype(), DType::kFloat32);
  EXPECT_EQ(back->data<float>()[0], 1.5f);
}

TEST(Npy, FileRoundTripAndMissingFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("sampan_npy_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "x.npy").string();
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3}, {3});
  ASSERT_TRUE(WriteNpy(path, x).ok());
  auto back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->data<float>()[2], 3.f);
  auto missing = ReadNpy((dir / "nope.npy").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.npy"), std::string::npos);
  EXPECT_EQ(WriteNpy((dir / "no_dir" / "x.npy").string(), x).code(), StatusCode::kIoError);
  std::filesystem::remove_all(dir);
}

TEST(Npy, AcceptsVersion2AndLongShapes) {
  auto t = ParseNpy(Header("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 1L), }", 2) + Floats({1, 2}), "v2");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape(), (Shape{2, 1}));
}

struct BadNpy {
  const char* name;
  std::string bytes;
  StatusCode code;
  const char* expected;
};

class NpyMalformed : public ::testing::TestWithParam<BadNpy> {};

TEST_P(NpyMalformed, GivesClearError) {
  auto t = ParseNpy(GetParam().bytes, "in.npy");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), GetParam().code) << t.status().ToString();
  EXPECT_NE(t.status().message().find(GetParam().expected), std::string::npos) << t.status().ToString();
  EXPECT_EQ(t.status().message().rfind("in.npy", 0), 0u) << "errors name the source: " << t.status().ToString();
}

const std::string kGoodDict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";

INSTANTIATE_TEST_SUITE_P(
    Cases, NpyMalformed,
    ::testing::Values(
        BadNpy{"empty", "", StatusCode::kInvalidArgument, "bad magic"},
        BadNpy{"text", "hello world, not numpy", StatusCode::kInvalidArgument, "bad magic"},
        BadNpy{"magic_only", "\x93NUMPY\x01", StatusCode::kInvalidArgument, "bad magic"},
        BadNpy{"version9", Header(kGoodDict).replace(6, 1, "\x09"), StatusCode::kUnsupported, "format version 9"},
        BadNpy{"header_len_past_end", Header(kGoodDict).substr(0, 40), StatusCode::kInvalidArgument,
               "truncated .npy header"},
        BadNpy{"v2_truncated", std::string("\x93NUMPY\x02\x00\x10\x00\x00", 11), StatusCode::kInvalidArgument,
               "truncated"},
        BadNpy{"no_descr", Header("{'fortran_order': False, 'shape': (2,), }") + Floats({1, 2}),
               StatusCode::kInvalidArgument, "no 'descr'"},
        BadNpy{"no_shape", Header("{'descr': '<f4', 'fortran_order': False, }") + Floats({1, 2}),
               StatusCode::kInvalidArgument, "no 'shape'"},
        BadNpy{"unterminated_shape", Header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, }") + Floats({1, 2}),
               StatusCode::kInvalidArgument, "shape"},
        BadNpy{"bad_shape_item", Header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }") + Floats({1, 2}),
               StatusCode::kInvalidArgument, "bad shape"},
        BadNpy{"negative_dim", Header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }") + Floats({1, 2}),
               StatusCode::kInvalidArgument, "bad shape"},
        BadNpy{"huge_shape", Header("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
               StatusCode::kOutOfRange, "elements"},
        // Found by tests/fuzz (fuzz_npy): an empty shape value threw std::out_of_range.
        BadNpy{"shape_not_a_tuple", Header("{'descr': '<f4', 'fortran_order': False, 'shape':, }") + Floats({1, 2}),
               StatusCode::kInvalidArgument, "expected a tuple"},
        // A shape of 2^35 floats (128 GiB) in a 100-byte file: refused by its byte count, before any allocation.
        BadNpy{"claims_128GiB",
               Header("{'descr': '<f4', 'fortran_order': False, 'shape': (34359738368,), }") + Floats({1, 2}),
               StatusCode::kInvalidArgument, "needs 137438953472"},
        BadNpy{"big_endian", Header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }") + Floats({1, 2}),
               StatusCode::kUnsupported, "'>f4'"},
        BadNpy{"object_dtype", Header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"),
               StatusCode::kUnsupported, "dtype"},
        BadNpy{"fortran", Header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }") + Floats({1, 2}),
               StatusCode::kUnsupported, "Fortran"},
        BadNpy{"short_data", Header(kGoodDict) + Floats({1}), StatusCode::kInvalidArgument,
               "has 4 bytes but f32[2] needs 8"},
        BadNpy{"long_data", Header(kGoodDict) + Floats({1, 2, 3}), StatusCode::kInvalidArgument, "has 12 bytes"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Npy, GarbageNeverCrashes) {
  const std::string good = Header(kGoodDict) + Floats({1, 2});
  for (size_t n = 0; n <= good.size(); ++n) (void)ParseNpy(good.substr(0, n), "prefix");
  uint32_t state = 7;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s = good;
    for (int e = 0; e < 3; ++e) {
      state = state * 1664525u + 1013904223u;
      s[(state >> 8) % s.size()] = static_cast<char>(state >> 24);
    }
    (void)ParseNpy(s, "mutated");
  }
}

}  // namespace
}  // namespace sampan
