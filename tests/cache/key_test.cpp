// Key composition: every field changes the key, order does not, field boundaries do.
#include "cache/key.h"

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

std::vector<KeyField> base() {
  return {{"graph", "g"},
          {"arch", "sm_90"},
          {"precision", "high"},
          {"nvrtc_version", "13.0"},
          {"codegen_version", "abc"},
          {"options", "-O3"}};
}

TEST(CacheKey, IsThirtyTwoLowerCaseHexDigits) {
  std::string key = make_key(base());
  ASSERT_EQ(key.size(), 32u);
  EXPECT_TRUE(is_key_prefix(key));
}

TEST(CacheKey, IsDeterministic) { EXPECT_EQ(make_key(base()), make_key(base())); }

TEST(CacheKey, EveryFieldValueChangesTheKey) {
  const std::string original = make_key(base());
  for (size_t i = 0; i < base().size(); ++i) {
    auto fields = base();
    fields[i].value += "x";
    EXPECT_NE(make_key(fields), original) << "field " << fields[i].name;
  }
}

TEST(CacheKey, FieldNamesChangeTheKey) {
  auto fields = base();
  fields[1].name = "arch2";
  EXPECT_NE(make_key(fields), make_key(base()));
}

TEST(CacheKey, AddingOrRemovingAFieldChangesTheKey) {
  auto more = base();
  more.push_back({"extra", ""});
  auto fewer = base();
  fewer.pop_back();
  EXPECT_NE(make_key(more), make_key(base()));
  EXPECT_NE(make_key(fewer), make_key(base()));
}

TEST(CacheKey, FieldOrderDoesNotMatter) {
  auto fields = base();
  std::reverse(fields.begin(), fields.end());
  EXPECT_EQ(make_key(fields), make_key(base()));
}

TEST(CacheKey, FieldBoundariesMatter) {
  EXPECT_NE(make_key({{"a", "bc"}}), make_key({{"ab", "c"}}));
  EXPECT_NE(make_key({{"a", "b"}, {"c", ""}}), make_key({{"a", "bc"}}));
  EXPECT_NE(make_key({{"x", std::string("\0", 1)}}), make_key({{"x", ""}}));
}

TEST(CacheKey, KeyPrefixAcceptsOnlyLowerHex) {
  EXPECT_TRUE(is_key_prefix("0af"));
  EXPECT_FALSE(is_key_prefix(""));
  EXPECT_FALSE(is_key_prefix("0AF"));
  EXPECT_FALSE(is_key_prefix("xyz"));
  EXPECT_FALSE(is_key_prefix(std::string(33, 'a')));
}

TEST(CacheKey, DiffFieldsNamesChangedAndMissingFields) {
  std::vector<KeyField> requested = {{"arch", "sm_90"}, {"graph", "g"}, {"precision", "high"}};
  std::vector<KeyField> stored = {{"arch", "sm_80"}, {"graph", "g"}, {"options", "-O3"}};
  auto diffs = diff_fields(requested, stored);
  ASSERT_EQ(diffs.size(), 3u);
  EXPECT_EQ(diffs[0].name, "arch");
  EXPECT_EQ(diffs[0].requested, "sm_90");
  EXPECT_EQ(diffs[0].stored, "sm_80");
  EXPECT_EQ(diffs[1].name, "options");
  EXPECT_FALSE(diffs[1].requested_present);
  EXPECT_EQ(diffs[2].name, "precision");
  EXPECT_FALSE(diffs[2].stored_present);
}

}  // namespace
}  // namespace kiln::cache
