#include "base/split.h"

#include <gtest/gtest.h>

namespace sampan {
namespace {

TEST(SplitFieldsTest, KeepsEmptyFields) {
  EXPECT_EQ(SplitFields("R1:2:0", ':'), (std::vector<std::string>{"R1", "2", "0"}));
  EXPECT_EQ(SplitFields("host:1:2:", ':'), (std::vector<std::string>{"host", "1", "2", ""}));
  EXPECT_EQ(SplitFields(":a::", ':'), (std::vector<std::string>{"", "a", "", ""}));
  EXPECT_EQ(SplitFields("", ':'), (std::vector<std::string>{""}));
  EXPECT_EQ(SplitFields("no separator", ':'), (std::vector<std::string>{"no separator"}));
}

}  // namespace
}  // namespace sampan
