// Edits of generated kernel text for the tests that break a kernel on purpose.
#pragma once

#include "support/expected.h"

#include <string>
#include <vector>

namespace kiln::emulation::testing {

struct TextEdit {
  std::string from, to;  // every occurrence of `from` (at least one) becomes `to`
};

// `text` with each edit applied in order; an error naming the first `from` that does not occur,
// so a check whose edit no longer applies fails instead of passing on unchanged text.
inline Expected<std::string> apply_edits(std::string text, const std::vector<TextEdit>& edits) {
  for (const TextEdit& e : edits) {
    size_t at = text.find(e.from);
    if (at == std::string::npos) return make_error("the generated text has no '", e.from, "'");
    for (; at != std::string::npos; at = text.find(e.from, at + e.to.size()))
      text.replace(at, e.from.size(), e.to);
  }
  return text;
}

}  // namespace kiln::emulation::testing
