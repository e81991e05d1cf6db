// Arch names and the option fields that enter the cache key.
#include "compiler/options.h"

#include "compiler/target.h"

#include <charconv>

namespace kiln::compiler {

const std::vector<int>& known_archs() {
  static const std::vector<int> archs = [] {
    std::vector<int> list;
    for (const ArchFacts& facts : arch_table()) list.push_back(facts.sm);
    return list;
  }();
  return archs;
}

Expected<Target> parse_arch(std::string_view text) {
  std::string_view digits = text;
  // compute_XX names a virtual arch (PTX for a family); kiln builds code for one real sm_XX, so
  // reading one as the other would build something other than what was asked for.
  if (text.substr(0, 8) == "compute_") {
    std::string real = "sm_" + std::string(text.substr(8));
    bool valid = real.size() < 16 && real.find("compute_") == std::string::npos && parse_arch(real);
    return make_error("arch '", std::string(text), "' is a virtual arch (compute_XX, PTX only); "
                      "kiln compiles for a real arch: give ",
                      valid ? real : std::string("sm_XX, e.g. sm_90"));
  }
  for (std::string_view prefix : {"sm_", "sm"}) {
    if (digits.substr(0, prefix.size()) == prefix) {
      digits.remove_prefix(prefix.size());
      break;
    }
  }
  // An arch-specific target: "sm_90a".
  std::string suffix;
  if (!digits.empty() && digits.back() == 'a') {
    suffix = "a";
    digits.remove_suffix(1);
  }
  int sm = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), sm);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || sm < 10 ||
      sm > 999) {
    return make_error("bad arch '", std::string(text), "': expected sm_XX, e.g. sm_90 (or sm_90a)");
  }
  if (!suffix.empty()) {
    const ArchFacts* facts = arch_facts(sm);
    if (!facts || !facts->specific) {
      std::string planned;
      for (const ArchFacts& f : arch_table())
        if (f.specific) planned += (planned.empty() ? "" : ", ") + arch_name(f.sm) + "a";
      return make_error("arch '", std::string(text), "': kiln plans arch-specific code for ",
                        planned, " only; give ", arch_name(sm), " for this arch");
    }
  }
  return Target::cuda(sm, std::move(suffix));
}

std::string arch_name(int sm) { return "sm_" + std::to_string(sm); }

Status check_suffix(const Target& target) {
  if (target.suffix.empty()) return Status::success();
  auto parsed = target.is_cpu() ? Expected<Target>(Error{"cpu"}) : parse_arch(target.arch());
  if (!parsed || parsed->sm != target.sm || parsed->suffix != target.suffix)
    return make_error("target suffix '", target.suffix.substr(0, 16), "' of sm ",
                      std::to_string(target.sm), " is not one this kiln knows",
                      parsed || target.is_cpu() || target.suffix.size() > 16
                          ? ""
                          : ": " + parsed.error().message);
  return Status::success();
}

Status check_arch(int sm, const std::vector<int>& supported) {
  for (int s : supported) {
    if (s == sm) return Status::success();
  }
  std::string list;
  for (int s : supported) list += (list.empty() ? "" : " ") + arch_name(s);
  return make_error("unsupported arch ", arch_name(sm), ": supported are ", list);
}

std::string options_key(const CompileOptions& options) {
  std::string key = std::string("fallback=") +
                    (options.fallback != FallbackPolicy::refuse ? "allow" : "refuse");
  switch (options.target.kind) {
    case Target::Kind::cuda:
      return key + ";nvrtc=-std=c++17 -Xptxas=-v";
    case Target::Kind::emulate:
      return key + ";emulate";
    case Target::Kind::cpu:
      return key + ";llvm=O3";
  }
  return key;
}

void set_fallback_policy(CompileOptions& options, FallbackPolicy policy, bool allow_precision) {
  bool refuse = policy == FallbackPolicy::refuse;
  options.fallback = allow_precision && !refuse ? FallbackPolicy::allow : FallbackPolicy::refuse;
  options.fusion_fallback = policy;
}

}  // namespace kiln::compiler
