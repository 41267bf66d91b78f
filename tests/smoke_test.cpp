#include <gtest/gtest.h>
#include "base/status.h"
TEST(Status, Basics) { EXPECT_TRUE(sampan::Status::Ok().ok()); }
