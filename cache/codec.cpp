// Raw or zstd payloads and their XXH3 checksums.
#include "cache/codec.h"

#include <xxhash.h>
#if defined(__x86_64__) || defined(_M_X64)
// After xxhash.h: XXH3_64bits becomes the run-time dispatched variant (SSE2, AVX2 or AVX-512),
// about 2.8x faster on AVX2 than the SSE2 build Debian's libxxhash exports under that name.
// (Other CPUs have one vector unit to choose: the plain symbol is already it.)
#include <xxh_x86dispatch.h>
#endif
#include <zstd.h>

#include <sys/random.h>

#include <chrono>
#include <cstdint>
#include <new>
#include <utility>

namespace kiln::cache {

namespace {

constexpr int k_zstd_level = 3;

// One decompression context per thread, made on first use: creating one per payload costs more
// than decompressing a small cubin.
ZSTD_DCtx* thread_dctx() {
  struct Owner {
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    ~Owner() { ZSTD_freeDCtx(dctx); }
  };
  thread_local Owner owner;
  return owner.dctx;
}

}  // namespace

uint64_t checksum(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

Fingerprint fingerprint(std::string_view bytes) {
  static const uint64_t seed = [] {
    uint64_t drawn = 0;
    if (::getrandom(&drawn, sizeof drawn, 0) != static_cast<ssize_t>(sizeof drawn)) {
      // No random source (a seccomp filter, a kernel before 3.17): the clock and an address,
      // which another process still cannot read.
      auto now = std::chrono::steady_clock::now().time_since_epoch().count();
      drawn = static_cast<uint64_t>(now) ^ reinterpret_cast<uintptr_t>(&drawn);
    }
    return drawn;
  }();
  XXH128_hash_t h = XXH3_128bits_withSeed(bytes.data(), bytes.size(), seed);
  return {h.low64, h.high64};
}

StreamingChecksum::StreamingChecksum() : m_state(XXH3_createState()) {
  if (m_state == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(m_state));
}

StreamingChecksum::~StreamingChecksum() { XXH3_freeState(static_cast<XXH3_state_t*>(m_state)); }

void StreamingChecksum::update(std::string_view bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(m_state), bytes.data(), bytes.size());
}

uint64_t StreamingChecksum::digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(m_state));
}

Expected<Encoded> encode(const std::string& raw, Encoding encoding) {
  if (raw.size() > k_max_payload_bytes)
    return make_error("payload of ", std::to_string(raw.size()), " bytes exceeds the limit");
  Encoded out;
  out.encoding = encoding;
  out.raw_size = raw.size();
  out.checksum = checksum(raw);
  if (encoding == Encoding::raw) {
    out.data = raw;
    return out;
  }
  out.data.resize(ZSTD_compressBound(raw.size()));
  size_t n = ZSTD_compress(out.data.data(), out.data.size(), raw.data(), raw.size(),
                           k_zstd_level);
  if (ZSTD_isError(n)) return make_error("zstd: compressing failed: ", ZSTD_getErrorName(n));
  out.data.resize(n);
  return out;
}

namespace {

Status check_raw(const Encoded& encoded, RawCheck check) {
  if (encoded.data.size() != encoded.raw_size)
    return make_error("stored ", std::to_string(encoded.data.size()), " bytes, expected ",
                      std::to_string(encoded.raw_size));
  if (check == RawCheck::size_and_checksum && checksum(encoded.data) != encoded.checksum)
    return make_error("checksum mismatch");
  return Status::success();
}

}  // namespace

Expected<std::string> decode(Encoded&& encoded, RawCheck check) {
  if (encoded.encoding != Encoding::raw) return decode(std::as_const(encoded));
  if (Status s = check_raw(encoded, check); !s) return s.error();
  return std::move(encoded.data);
}

Expected<std::string> decode(const Encoded& encoded) {
  if (encoded.raw_size > k_max_payload_bytes)
    return make_error("stored size ", std::to_string(encoded.raw_size), " exceeds the limit");
  if (encoded.encoding == Encoding::raw) {
    if (Status s = check_raw(encoded, RawCheck::size_and_checksum); !s) return s.error();
    return encoded.data;
  }
  if (encoded.encoding != Encoding::zstd) return make_error("unknown payload encoding");
  unsigned long long frame =
      ZSTD_getFrameContentSize(encoded.data.data(), encoded.data.size());
  if (frame == ZSTD_CONTENTSIZE_ERROR) return make_error("compressed data is not a zstd frame");
  // kiln writes every frame with its size; one without cannot be bounded before it is inflated.
  if (frame == ZSTD_CONTENTSIZE_UNKNOWN)
    return make_error("compressed frame does not record its size (kiln's frames do)");
  if (frame != encoded.raw_size)
    return make_error("compressed frame holds ", std::to_string(frame), " bytes, expected ",
                      std::to_string(encoded.raw_size));
  ZSTD_DCtx* dctx = thread_dctx();
  if (!dctx) return make_error("zstd: cannot create a decompression context");
  std::string raw(encoded.raw_size, '\0');
  size_t n = ZSTD_decompressDCtx(dctx, raw.data(), raw.size(), encoded.data.data(),
                                 encoded.data.size());
  if (ZSTD_isError(n)) return make_error("zstd: ", ZSTD_getErrorName(n));
  if (n != encoded.raw_size) return make_error("decompressed size does not match");
  if (checksum(raw) != encoded.checksum) return make_error("checksum mismatch");
  return raw;
}

}  // namespace kiln::cache
