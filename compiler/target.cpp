// Target: parsing and naming, and the table of CUDA archs.
#include "compiler/target.h"

#include "compiler/options.h"

#include <array>

namespace kiln::compiler {

namespace {

constexpr size_t k_kib = 1024;

// Shared memory per block with the opt-in, from the CUDA programming guide's table of compute
// capabilities; sm_88 is not in it and gets the smallest 8.x figure. SM counts are those of a
// common part (named), used only to size tiles.
constexpr std::array<ArchFacts, 12> k_archs = {{
    {75, 40, 64 * k_kib, false},    // T4
    {80, 108, 163 * k_kib, true},   // A100
    {86, 84, 99 * k_kib, true},     // A10 / RTX 3090 class
    {87, 16, 163 * k_kib, true},    // Orin
    {88, 16, 99 * k_kib, true},
    {89, 128, 99 * k_kib, true},    // RTX 4090 / L40 class
    {90, 132, 227 * k_kib, true},   // H100 SXM
    {100, 148, 227 * k_kib, true},  // B200
    {103, 148, 227 * k_kib, true},
    {110, 20, 227 * k_kib, true},
    {120, 170, 99 * k_kib, true},   // RTX 5090 class
    {121, 48, 99 * k_kib, true},
}};

}  // namespace

std::span<const ArchFacts> arch_table() { return k_archs; }

const ArchFacts* arch_facts(int sm) {
  for (const ArchFacts& facts : k_archs)
    if (facts.sm == sm) return &facts;
  return nullptr;
}

bool has_sm80_mma(int sm) {
  const ArchFacts* facts = arch_facts(sm);
  return facts ? facts->sm80_mma : sm >= 80;
}

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
