// The usage side file: a fixed header of counters and an open-addressed table of entry touches.
#include "cache/local/usage.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kiln::cache::local {
namespace {

// Layout (FORMAT.md, "Usage file"): u64 magic, u64 slot count, the counters, padding to
// k_header_bytes; then k_slots slots of {u64 key tag, u64 hits, i64 last used ms}.
constexpr uint64_t k_magic = 0x314553554e4c494bull;  // "KILNUSE1" little-endian
constexpr uint64_t k_slots = 8192;
constexpr size_t k_header_bytes = 128;
constexpr size_t k_slot_words = 3;
constexpr size_t k_file_bytes = k_header_bytes + k_slots * k_slot_words * 8;
constexpr int k_max_probe = 32;

static_assert(16 + 8 * k_counter_count <= k_header_bytes);

std::atomic_ref<uint64_t> word(unsigned char* base, size_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + offset));
}

size_t counter_offset(int i) { return 16 + 8 * static_cast<size_t>(i); }
size_t slot_offset(uint64_t slot, size_t field) {
  return k_header_bytes + (slot * k_slot_words + field) * 8;
}

// The first 16 hex digits of a key as a number; 0 when they are not hex (0 marks a free slot).
uint64_t key_tag(const std::string& key) {
  if (key.size() < 16) return 0;
  uint64_t tag = 0;
  for (int i = 0; i < 16; ++i) {
    char c = key[i];
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return 0;
    tag = tag << 4 | static_cast<uint64_t>(digit);
  }
  return tag;
}

void max_into(std::atomic_ref<uint64_t> target, int64_t value) {
  uint64_t seen = target.load();
  while (static_cast<int64_t>(seen) < value &&
         !target.compare_exchange_weak(seen, static_cast<uint64_t>(value))) {
  }
}

}  // namespace

const char* counter_name(Counter counter) {
  static const char* const k_names[k_counter_count] = {
      "hits",        "misses",        "errors",          "time_saved_ms", "remote_hits",
      "remote_misses", "remote_errors", "remote_rejected", "remote_puts"};
  return k_names[static_cast<int>(counter)];
}

Usage::Usage(const std::string& dir) {
  std::string path = dir + "/usage";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  struct stat st {};
  bool usable = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  // A new file is sized once; any other size is not ours to map.
  if (usable && st.st_size != 0) usable = static_cast<size_t>(st.st_size) == k_file_bytes;
  // Its blocks are allocated before it is mapped (and again by every opener, which costs nothing
  // once they exist): a store into a mapped page the filesystem cannot back, on a full disk, is
  // SIGBUS. A filesystem without fallocate gets a sparse file, as before.
  if (usable && ::fallocate(fd, 0, 0, static_cast<off_t>(k_file_bytes)) != 0)
    usable = (errno == EOPNOTSUPP || errno == ENOSYS) &&
             (st.st_size != 0 || ::ftruncate(fd, k_file_bytes) == 0);
  void* base = usable ? ::mmap(nullptr, k_file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
  ::close(fd);
  if (base == MAP_FAILED) return;
  m_base = static_cast<unsigned char*>(base);
  // Processes creating it together write the same header; a foreign header disables the file.
  uint64_t expected = 0;
  word(m_base, 8).compare_exchange_strong(expected, k_slots);
  expected = 0;
  word(m_base, 0).compare_exchange_strong(expected, k_magic);
  if (word(m_base, 0).load() != k_magic || word(m_base, 8).load() != k_slots) {
    ::munmap(m_base, k_file_bytes);
    m_base = nullptr;
  }
}

Usage::~Usage() {
  if (m_base) ::munmap(m_base, k_file_bytes);
}

void Usage::add(Counter counter, uint64_t value) {
  if (m_base && value) word(m_base, counter_offset(static_cast<int>(counter))).fetch_add(value);
}

bool Usage::touch(const std::string& key, int64_t now_ms) {
  uint64_t tag = key_tag(key);
  if (!m_base || tag == 0) return false;
  for (int probe = 0; probe < k_max_probe; ++probe) {
    uint64_t slot = (tag + static_cast<uint64_t>(probe)) % k_slots;
    auto slot_tag = word(m_base, slot_offset(slot, 0));
    uint64_t seen = slot_tag.load();
    if (seen == 0 && slot_tag.compare_exchange_strong(seen, tag)) seen = tag;
    if (seen != tag) continue;
    word(m_base, slot_offset(slot, 1)).fetch_add(1);
    max_into(word(m_base, slot_offset(slot, 2)), now_ms);
    return true;
  }
  return false;
}

void Usage::take(uint64_t counters[k_counter_count], std::vector<Touch>& touches) {
  for (int i = 0; i < k_counter_count; ++i)
    counters[i] = m_base ? word(m_base, counter_offset(i)).exchange(0) : 0;
  if (!m_base) return;
  for (uint64_t slot = 0; slot < k_slots; ++slot) {
    uint64_t tag = word(m_base, slot_offset(slot, 0)).load();
    if (tag == 0) continue;
    uint64_t hits = word(m_base, slot_offset(slot, 1)).exchange(0);
    uint64_t last = word(m_base, slot_offset(slot, 2)).exchange(0);
    if (hits == 0 && last == 0) continue;
    char prefix[17];
    std::snprintf(prefix, sizeof prefix, "%016llx", static_cast<unsigned long long>(tag));
    touches.push_back({prefix, hits, static_cast<int64_t>(last)});
  }
}

void Usage::put_back(const uint64_t counters[k_counter_count], const std::vector<Touch>& touches) {
  if (!m_base) return;
  for (int i = 0; i < k_counter_count; ++i) add(static_cast<Counter>(i), counters[i]);
  for (const Touch& t : touches) {
    uint64_t tag = key_tag(t.key_prefix);
    for (int probe = 0; probe < k_max_probe; ++probe) {
      uint64_t slot = (tag + static_cast<uint64_t>(probe)) % k_slots;
      if (word(m_base, slot_offset(slot, 0)).load() != tag) continue;
      word(m_base, slot_offset(slot, 1)).fetch_add(t.hits);
      max_into(word(m_base, slot_offset(slot, 2)), t.last_used_ms);
      break;
    }
  }
}

void Usage::peek(uint64_t counters[k_counter_count]) const {
  for (int i = 0; i < k_counter_count; ++i)
    counters[i] = m_base ? word(m_base, counter_offset(i)).load() : 0;
}

}  // namespace kiln::cache::local
