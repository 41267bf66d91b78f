// base/report_util.h: JSON string literals, nearest-rank percentiles, the version.
#include "base/report_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace sampan {
namespace {

TEST(JsonQuote, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("plain/path.plan"), "\"plain/path.plan\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("l1\nl2\tx"), "\"l1\\nl2\\tx\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonQuote(std::string("a\0b", 3)), "\"a\\u0000b\"");
  EXPECT_EQ(JsonQuote("\xc3\xa9"), "\"\xc3\xa9\"");   // UTF-8 passes through
  EXPECT_EQ(JsonQuote("a\rb\x7f"), "\"a\\rb\x7f\"");  // JSON allows a raw DEL
}

TEST(QuotedString, CLikeStyleWritesHexEscapesAsTheIrTextFormReadsThem) {
  EXPECT_EQ(QuotedString("a\"b\\c", QuoteStyle::kCLike), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(QuotedString("l1\nl2\tx\r", QuoteStyle::kCLike), "\"l1\\nl2\\tx\\r\"");
  EXPECT_EQ(QuotedString(std::string("\x01\x1f\x7f", 3), QuoteStyle::kCLike), "\"\\x01\\x1f\\x7f\"");
  EXPECT_EQ(QuotedString("\xc3\xa9", QuoteStyle::kCLike), "\"\xc3\xa9\"");
}

TEST(NearestRankPercentile, MatchesTrtexecsDefinition) {
  std::vector<double> v;
  for (int i = 10; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  EXPECT_EQ(NearestRankPercentile(v, 50), 5);
  EXPECT_EQ(NearestRankPercentile(v, 90), 9);
  EXPECT_EQ(NearestRankPercentile(v, 95), 10);
  EXPECT_EQ(NearestRankPercentile(v, 99), 10);
  EXPECT_EQ(NearestRankPercentile(v, 100), 10);
  EXPECT_EQ(NearestRankPercentile(v, 1), 1);
  EXPECT_EQ(NearestRankPercentile(v, 0), 1);
  EXPECT_EQ(NearestRankPercentile({7.5}, 99), 7.5);
  EXPECT_EQ(NearestRankPercentile({}, 50), 0);
  EXPECT_EQ(NearestRankPercentile({3, 1, 2, 4}, 50), 2);
}

TEST(Version, IsCmakesProjectVersion) {
  const std::string v = Version();
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.find_first_not_of("0123456789."), std::string::npos) << v;
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
}

}  // namespace
}  // namespace sampan
