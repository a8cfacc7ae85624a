// What the collectives share (cpu/algorithms.h): a range split into aligned parts.
#include "cpu/algorithms.h"

#include <gtest/gtest.h>

namespace cohort::detail {
namespace {

TEST(Split, AlignedPartsCoverTheRange) {
  for (size_t count : {0, 1, 15, 16, 17, 1000, 4099}) {
    for (int parts = 1; parts <= 5; ++parts) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const Range r = split(count, parts, i, 4);
        EXPECT_EQ(r.begin, next);
        if (i + 1 < parts && r.size() > 0) {
          EXPECT_EQ(r.begin % 16, 0u);
        }
        next = r.end;
      }
      EXPECT_EQ(next, count);
    }
  }
}

}  // namespace
}  // namespace cohort::detail
