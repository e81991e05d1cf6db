// Sealing and opening remote values; the signature is compared in constant time.
#include "cache/remote/envelope.h"

#include "support/byte_reader.h"
#include "support/byte_writer.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

namespace kiln::cache::remote {
namespace {

constexpr std::string_view k_magic = "KILNREM1";
constexpr uint64_t k_signed = 1;
constexpr size_t k_mac_bytes = 32;

std::string mac(const std::string& secret, const std::string& key, std::string_view record) {
  // key || record, with the key's length first so that no key can run into the record.
  ByteWriter w;
  w.str(key);
  std::string prefix = w.take();
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* mctx = hmac ? EVP_MAC_CTX_new(hmac) : nullptr;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                         OSSL_PARAM_construct_end()};
  size_t len = 0;
  bool ok = mctx &&
            EVP_MAC_init(mctx, reinterpret_cast<const unsigned char*>(secret.data()),
                         secret.size(), params) == 1 &&
            EVP_MAC_update(mctx, reinterpret_cast<const unsigned char*>(prefix.data()),
                           prefix.size()) == 1 &&
            EVP_MAC_update(mctx, reinterpret_cast<const unsigned char*>(record.data()),
                           record.size()) == 1 &&
            EVP_MAC_final(mctx, out, &len, sizeof out) == 1;
  EVP_MAC_CTX_free(mctx);
  EVP_MAC_free(hmac);
  out_len = static_cast<unsigned int>(len);
  // A failing libcrypto gives an empty MAC, which never verifies.
  if (!ok || out_len != k_mac_bytes) return {};
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

}  // namespace

std::string signed_prefix() {
  ByteWriter w;
  w.raw(k_magic);
  w.u64(k_signed);
  return w.take();
}

std::string seal(const std::string& key, std::string_view record, const std::string& secret) {
  ByteWriter w;
  w.raw(k_magic);
  w.u64(secret.empty() ? 0 : k_signed);
  if (!secret.empty()) {
    std::string m = mac(secret, key, record);
    m.resize(k_mac_bytes, '\0');
    w.raw(m);
  }
  w.raw(record);
  return w.take();
}

Opened open(const std::string& key, std::string_view value, const std::string& secret,
            std::string_view& record) {
  ByteReader r(value);
  uint64_t flags = 0;
  if (!r.expect(k_magic) || !r.u64(flags) || (flags & ~k_signed) != 0) return Opened::damaged;
  std::string_view tag;
  if (flags & k_signed) {
    if (r.remaining() < k_mac_bytes) return Opened::damaged;
    tag = value.substr(r.position(), k_mac_bytes);
  }
  record = value.substr(r.position() + tag.size());
  if (secret.empty()) return Opened::good;
  if (tag.empty()) return Opened::unsigned_entry;
  std::string expected = mac(secret, key, record);
  if (expected.size() != k_mac_bytes || CRYPTO_memcmp(expected.data(), tag.data(), k_mac_bytes) != 0)
    return Opened::bad_signature;
  return Opened::good;
}

const char* describe(Opened opened) {
  switch (opened) {
    case Opened::good: return "good";
    case Opened::damaged: return "damaged";
    case Opened::unsigned_entry: return "unsigned";
    case Opened::bad_signature: return "badly signed";
  }
  return "damaged";
}

}  // namespace kiln::cache::remote
