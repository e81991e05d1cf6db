// The entry record: round trip, and every damage refused before anything is decoded.
#include "cache/entry_codec.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <random>

namespace kiln::cache {
namespace {

StoredEntry sample() {
  StoredEntry e;
  e.info.fields = testing::fields_for("a");
  sort_fields(e.info.fields);
  e.info.key = make_key(e.info.fields);
  e.info.summary = R"({"graph":"a"})";
  e.info.compile_ms = 250;
  e.info.created_ms = 1'700'000'000'000;
  e.payloads.push_back({"cubin:k0", encode(std::string(4000, '\x11'), Encoding::raw).value()});
  e.payloads.push_back({"ptx:k0", encode(std::string(9000, 'p'), Encoding::zstd).value()});
  return e;
}

TEST(EntryCodec, RoundTripsEveryField) {
  StoredEntry e = sample();
  auto back = decode_entry(encode_entry(e));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->info.key, e.info.key);
  EXPECT_EQ(back->info.fields, e.info.fields);
  EXPECT_EQ(back->info.summary, e.info.summary);
  EXPECT_EQ(back->info.compile_ms, 250);
  EXPECT_EQ(back->info.created_ms, e.info.created_ms);
  ASSERT_EQ(back->payloads.size(), 2u);
  EXPECT_EQ(back->payloads[0].encoded.encoding, Encoding::raw);
  EXPECT_EQ(back->payloads[1].encoded.data, e.payloads[1].encoded.data);
  auto entry = verify_stored(*back);
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->payloads[1].bytes, std::string(9000, 'p'));
}

TEST(EntryCodec, APayloadNamedTwiceIsRefused) {
  StoredEntry e = sample();
  e.payloads.push_back({"cubin:k0", encode(std::string(10, '\x22'), Encoding::raw).value()});
  auto back = decode_entry(encode_entry(e));
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("payload 'cubin:k0' appears twice"), std::string::npos)
      << back.error().message;
  // An entry built with the repeat, never encoded, is refused by every check too.
  EXPECT_EQ(repeated_payload(e.payloads), "cubin:k0");
  EXPECT_EQ(repeated_payload(sample().payloads), "");
  EXPECT_FALSE(check_stored(e).ok());
  auto verified = verify_stored(e);
  ASSERT_FALSE(verified.ok());
  EXPECT_EQ(verified.error().message, "payload 'cubin:k0' appears twice");
}

TEST(EntryCodec, ApartPayloadsTravelAsDescriptorsOnly) {
  StoredEntry e = sample();
  e.payloads[1].apart = true;
  std::string bytes = encode_entry(e);
  EXPECT_EQ(bytes.find(e.payloads[1].encoded.data), std::string::npos);
  auto back = decode_entry(bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->payloads[1].apart);
  EXPECT_EQ(back->payloads[1].encoded.raw_size, 9000u);
  EXPECT_TRUE(verify_stored(*back).ok()) << "payloads not there are not checked";
}

TEST(EntryCodec, EveryFlippedByteAndEveryTruncationIsRefused) {
  std::string bytes = encode_entry(sample());
  for (size_t at = 0; at < bytes.size(); at += 7) {
    std::string damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x20);
    EXPECT_FALSE(decode_entry(damaged).ok()) << "byte " << at;
  }
  for (size_t n = 0; n < bytes.size(); n += 13)
    EXPECT_FALSE(decode_entry(bytes.substr(0, n)).ok()) << "length " << n;
}

TEST(EntryCodec, DeclaredSizesOverTheLimitAreRefusedBeforeDecoding) {
  // A zstd bomb: 1 GiB declared in a few hundred bytes, with a valid record checksum.
  StoredEntry e = sample();
  e.payloads[1].encoded.raw_size = uint64_t{1} << 30;
  auto back = decode_entry(encode_entry(e));
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("over the limit"), std::string::npos)
      << back.error().message;
  // Many payloads each under the limit, together over the entry's.
  StoredEntry many = sample();
  many.payloads.clear();
  for (int i = 0; i < 3; ++i) {
    Encoded big;
    big.raw_size = k_max_payload_bytes;
    many.payloads.push_back({"cubin:k" + std::to_string(i), big, true});
  }
  back = decode_entry(encode_entry(many));
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("more than the limit"), std::string::npos);
}

// A payload's frame: junk is "not a zstd frame"; a real frame written without its size (kiln
// writes every frame with it) is named as that, where it read as "not a zstd frame" too.
TEST(EntryCodec, AFrameWithoutItsSizeIsNamedAsSuch) {
  std::string raw(5000, 'q');
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ASSERT_NE(cctx, nullptr);
  ASSERT_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)));
  std::string frame(ZSTD_compressBound(raw.size()), '\0');
  size_t n = ZSTD_compress2(cctx, frame.data(), frame.size(), raw.data(), raw.size());
  ZSTD_freeCCtx(cctx);
  ASSERT_FALSE(ZSTD_isError(n));
  frame.resize(n);
  Encoded sizeless = encode(raw, Encoding::zstd).value();
  sizeless.data = frame;
  auto decoded = decode(sizeless);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().message, "compressed frame does not record its size (kiln's frames do)");
  Encoded junk = sizeless;
  junk.data = "not zstd at all";
  decoded = decode(junk);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().message, "compressed data is not a zstd frame");
  EXPECT_EQ(decode(encode(raw, Encoding::zstd).value()).value(), raw);
}

TEST(EntryCodec, RandomBytesNeverDecode) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 300, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (i % 2) junk.replace(0, std::min<size_t>(8, junk.size()), "KILNENTR");
    EXPECT_FALSE(decode_entry(junk).ok());
  }
}

}  // namespace
}  // namespace kiln::cache
