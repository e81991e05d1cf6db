// Sizes and durations as written on the command line and in KILN_CACHE_MAX_SIZE.
#include "cache/units.h"

#include <cctype>
#include <cstdio>
#include <limits>

namespace kiln::cache {
namespace {

// Leading decimal digits of `text` into `value`; returns how many characters were used, or 0 on
// no digits or overflow.
size_t parse_digits(const std::string& text, uint64_t& value) {
  value = 0;
  size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return 0;
    value = value * 10 + digit;
  }
  return i;
}

Expected<uint64_t> scaled(uint64_t value, uint64_t unit, const std::string& text,
                          const char* what) {
  if (unit != 0 && value > std::numeric_limits<uint64_t>::max() / unit)
    return make_error("invalid ", what, " '", text, "': too large");
  return value * unit;
}

}  // namespace

Expected<uint64_t> parse_size(const std::string& text) {
  uint64_t value = 0;
  size_t used = parse_digits(text, value);
  if (used == 0)
    return make_error("invalid size '", text,
                      "': expected digits with an optional unit K, M, G or T");
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() >= 2 && unit.back() == 'B') {
    unit.pop_back();
    if (unit.size() == 2 && unit.back() == 'I') unit.pop_back();
  } else if (unit == "B") {
    unit.clear();
  }
  uint64_t scale = 0;
  if (unit.empty())
    scale = 1;
  else if (unit == "K")
    scale = uint64_t{1} << 10;
  else if (unit == "M")
    scale = uint64_t{1} << 20;
  else if (unit == "G")
    scale = uint64_t{1} << 30;
  else if (unit == "T")
    scale = uint64_t{1} << 40;
  else
    return make_error("invalid size '", text, "': unknown unit (use K, M, G or T)");
  return scaled(value, scale, text, "size");
}

Expected<uint64_t> parse_duration(const std::string& text) {
  uint64_t value = 0;
  size_t used = parse_digits(text, value);
  if (used == 0 || used + 1 < text.size())
    return make_error("invalid duration '", text, "': expected digits and a unit s, m, h or d");
  if (used == text.size()) {
    if (value == 0) return uint64_t{0};
    return make_error("invalid duration '", text, "': missing unit s, m, h or d");
  }
  switch (text[used]) {
    case 's':
      return value;
    case 'm':
      return scaled(value, 60, text, "duration");
    case 'h':
      return scaled(value, 3600, text, "duration");
    case 'd':
      return scaled(value, 86400, text, "duration");
    default:
      return make_error("invalid duration '", text, "': unknown unit (use s, m, h or d)");
  }
}

std::string format_size(uint64_t bytes) {
  static constexpr const char* k_units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, k_units[u]);
  return buf;
}

}  // namespace kiln::cache
