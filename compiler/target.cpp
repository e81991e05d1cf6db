// Target: parsing and naming.
#include "compiler/target.h"

#include "compiler/options.h"

namespace kiln::compiler {

std::string Target::name() const {
  if (is_cpu()) return "cpu:" + cpu;
  return sm ? "cuda:" + arch_name(sm) : "cuda";
}

Expected<Target> parse_target(std::string_view text) {
  Target target;
  if (text == "cuda" || text.empty()) return target;
  if (text == "cpu") {
    target.kind = Target::Kind::cpu;
    target.cpu = "native";
    return target;
  }
  if (text.substr(0, 4) == "cpu:" && text.size() > 4) {
    target.kind = Target::Kind::cpu;
    target.cpu = std::string(text.substr(4));
    return target;
  }
  std::string_view arch = text.substr(0, 5) == "cuda:" ? text.substr(5) : text;
  if (auto sm = parse_arch(arch); sm && (arch != text || arch.substr(0, 3) == "sm_")) {
    target.sm = *sm;
    return target;
  }
  return make_error("unknown target '", std::string(text),
                    "' (expected cuda, cuda:sm_XX, cpu or cpu:NAME)");
}

}  // namespace kiln::compiler
