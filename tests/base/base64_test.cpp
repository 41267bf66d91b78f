// DecodeBase64 (src/base/base64.h): RFC 4648 vectors, binary bytes, and strict refusal of what
// is not base64 (sampan perf's {"b64": ...} input data relies on it).
#include "base/base64.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sampan {
namespace {

TEST(Base64, DecodesRfc4648Vectors) {
  const std::pair<const char*, const char*> cases[] = {{"", ""},
                                                       {"Zg==", "f"},
                                                       {"Zm8=", "fo"},
                                                       {"Zm9v", "foo"},
                                                       {"Zm9vYg==", "foob"},
                                                       {"Zm9vYmE=", "fooba"},
                                                       {"Zm9vYmFy", "foobar"}};
  for (const auto& [in, want] : cases) {
    auto r = DecodeBase64(in);
    ASSERT_TRUE(r.ok()) << in << ": " << r.status().ToString();
    EXPECT_EQ(*r, want) << in;
  }
  auto bin = DecodeBase64("/9j/AA==");  // bytes ff d8 ff 00 (a JPEG's start)
  ASSERT_TRUE(bin.ok());
  EXPECT_EQ(*bin, std::string("\xff\xd8\xff\x00", 4));
}

TEST(Base64, RefusesWhatIsNotBase64) {
  for (const char* bad : {"Zm9", "Zm9v*A==", "Zg=a", "=Zg=", "Zg==Zg==", "Zm 9v"}) {
    auto r = DecodeBase64(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), ::testing::HasSubstr("base64")) << bad;
    }
  }
}

}  // namespace
}  // namespace sampan
