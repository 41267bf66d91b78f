// Restricted-API groups (--http-restricted-api / --grpc-restricted-protocol): parsing, the errors
// that name what is wrong, and the header comparison.
#include "server/core/restricted_api.h"

#include <gtest/gtest.h>

namespace sampan::server {
namespace {

TEST(RestrictedApis, ParsesGroupsAndLowercasesKeys) {
  auto r = RestrictedApis::Parse({"inference, model-config:Infer-Key=s:e=cret", "model-repository:admin=x"}, "--flag");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_NE(r->Find(ApiCategory::kInference), nullptr);
  EXPECT_EQ(r->Find(ApiCategory::kInference)->key, "infer-key");
  EXPECT_EQ(r->Find(ApiCategory::kModelConfig)->value, "s:e=cret");  // the first ':' and '=' split
  EXPECT_EQ(r->Find(ApiCategory::kModelRepository)->key, "admin");
  EXPECT_EQ(r->Find(ApiCategory::kHealth), nullptr);
  EXPECT_FALSE(r->empty());
  EXPECT_TRUE(RestrictedApis::Parse({}, "--flag")->empty());
}

TEST(RestrictedApis, WrongSpecsAreNamed) {
  struct Case {
    const char* spec;
    const char* message;
  };
  for (const Case& c :
       {Case{"inference", "expected API[,API...]:KEY=VALUE"}, Case{"inference:key", "expected KEY=VALUE after ':'"},
        Case{"inference:=v", "is not a header name"}, Case{"inference:k y=v", "is not a header name"},
        Case{"inference:k=", "the value is empty"}, Case{":k=v", "no API named before ':'"},
        Case{"infer:k=v", "unknown API 'infer' (one of: health, metadata, inference"}}) {
    auto r = RestrictedApis::Parse({c.spec}, "--http-restricted-api");
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_NE(r.status().message().find(std::string("--http-restricted-api '") + c.spec + "'"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
  auto twice = RestrictedApis::Parse({"health:a=1", "metadata,health:b=2"}, "--flag");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("API 'health' is already in another restricted group"), std::string::npos);
}

TEST(RestrictedApis, MatchesOnlyTheExactValue) {
  RestrictedApis::Rule rule{"k", "secret"};
  EXPECT_TRUE(RestrictedApis::Matches(rule, std::string_view("secret")));
  EXPECT_FALSE(RestrictedApis::Matches(rule, std::nullopt));
  EXPECT_FALSE(RestrictedApis::Matches(rule, std::string_view("")));
  EXPECT_FALSE(RestrictedApis::Matches(rule, std::string_view("secre")));
  EXPECT_FALSE(RestrictedApis::Matches(rule, std::string_view("secrets")));
  EXPECT_FALSE(RestrictedApis::Matches(rule, std::string_view("Secret")));
}

}  // namespace
}  // namespace sampan::server
