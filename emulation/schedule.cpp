// Schedules by name or seed.
#include "emulation/schedule.h"

#include <charconv>

namespace kiln::emulation {

Expected<Schedule> parse_schedule(std::string_view text) {
  if (text == "kind") return Schedule{};
  if (text == "adversarial") return Schedule::adversarial();
  uint64_t seed = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return make_error("schedule '", std::string(text),
                      "': expected kind, adversarial or a seed (0 to 2^64 - 1)");
  return Schedule::seeded_by(seed);
}

std::string to_string(const Schedule& schedule) {
  switch (schedule.mode) {
    case Schedule::Mode::kind:
      return "kind";
    case Schedule::Mode::adversarial:
      return "adversarial";
    case Schedule::Mode::seeded:
      break;
  }
  return std::to_string(schedule.seed);
}

}  // namespace kiln::emulation
