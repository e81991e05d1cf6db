// Size and duration parsing for prune and KILN_CACHE_MAX_SIZE.
#include "cache/units.h"

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

TEST(CacheUnits, ParsesSizesWithBinaryUnits) {
  EXPECT_EQ(*parse_size("0"), 0u);
  EXPECT_EQ(*parse_size("4096"), 4096u);
  EXPECT_EQ(*parse_size("100K"), 100u << 10);
  EXPECT_EQ(*parse_size("500M"), 500ull << 20);
  EXPECT_EQ(*parse_size("2G"), 2ull << 30);
  EXPECT_EQ(*parse_size("1T"), 1ull << 40);
  EXPECT_EQ(*parse_size("2g"), 2ull << 30);
  EXPECT_EQ(*parse_size("2GiB"), 2ull << 30);
  EXPECT_EQ(*parse_size("2GB"), 2ull << 30);
}

TEST(CacheUnits, RejectsBadSizes) {
  for (const char* bad :
       {"", "M", "-1", "1.5G", "2X", "2GG", "99999999999999999999", "20000000000T"}) {
    auto size = parse_size(bad);
    EXPECT_FALSE(size.ok()) << bad;
    if (!size) {
      EXPECT_NE(size.error().message.find("invalid size"), std::string::npos);
    }
  }
}

TEST(CacheUnits, ParsesDurations) {
  EXPECT_EQ(*parse_duration("45s"), 45u);
  EXPECT_EQ(*parse_duration("15m"), 900u);
  EXPECT_EQ(*parse_duration("12h"), 43200u);
  EXPECT_EQ(*parse_duration("30d"), 2592000u);
  EXPECT_EQ(*parse_duration("0"), 0u);
}

TEST(CacheUnits, RejectsBadDurations) {
  for (const char* bad : {"", "d", "30", "30x", "30dd", "-3d", "1.5h"})
    EXPECT_FALSE(parse_duration(bad).ok()) << bad;
}

TEST(CacheUnits, FormatsSizes) {
  EXPECT_EQ(format_size(312), "312 B");
  EXPECT_EQ(format_size(1536), "1.5 KiB");
  EXPECT_EQ(format_size(2ull << 30), "2.0 GiB");
}

}  // namespace
}  // namespace kiln::cache
