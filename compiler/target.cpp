// Target: parsing and naming, and the table of CUDA archs.
#include "compiler/target.h"

#include "compiler/options.h"

#include <array>

namespace kiln::compiler {

namespace {

constexpr size_t k_kib = 1024;

constexpr uint32_t bit(Feature f) { return 1u << static_cast<unsigned>(f); }
// Turing (sm_75): f16 mma.sync m16n8k8, ldmatrix, no cp.async.
constexpr uint32_t k_turing = 0;
// Ampere and every later arch kiln plans for: tf32/bf16 mma.sync, f16 m16n8k16, cp.async, and
// at least 99 KiB of opt-in shared memory (the planner uses 96).
constexpr uint32_t k_ampere = bit(Feature::tf32_bf16_mma) | bit(Feature::f16_mma_k16) |
                              bit(Feature::cp_async) | bit(Feature::smem_96k);
// Hopper and every later arch: TMA (cp.async.bulk.tensor, mbarrier transaction bytes).
constexpr uint32_t k_hopper = k_ampere | bit(Feature::tma);
// What sm_90a adds to sm_90 (PTX ISA: wgmma and setmaxnreg need sm_90a).
constexpr uint32_t k_hopper_a = bit(Feature::wgmma) | bit(Feature::setmaxnreg);

// Shared memory per block with the opt-in, from the CUDA programming guide's table of compute
// capabilities; sm_88 is not in it and gets the smallest 8.x figure. SM counts are those of a
// common part (named), used only to size tiles.
constexpr std::array<ArchFacts, 12> k_archs = {{
    {75, 40, 64 * k_kib, k_turing},     // T4
    {80, 108, 163 * k_kib, k_ampere},   // A100
    {86, 84, 99 * k_kib, k_ampere},     // A10 / RTX 3090 class
    {87, 16, 163 * k_kib, k_ampere},    // Orin
    {88, 16, 99 * k_kib, k_ampere},
    {89, 128, 99 * k_kib, k_ampere},    // RTX 4090 / L40 class
    {90, 132, 227 * k_kib, k_hopper, k_hopper_a},  // H100 SXM
    {100, 148, 227 * k_kib, k_hopper},  // B200
    {103, 148, 227 * k_kib, k_hopper},
    {110, 20, 227 * k_kib, k_hopper},
    {120, 170, 99 * k_kib, k_hopper},   // RTX 5090 class
    {121, 48, 99 * k_kib, k_hopper},
}};

}  // namespace

std::span<const ArchFacts> arch_table() { return k_archs; }

const ArchFacts* arch_facts(int sm) {
  for (const ArchFacts& facts : k_archs)
    if (facts.sm == sm) return &facts;
  return nullptr;
}

bool arch_has(int sm, Feature feature) {
  const ArchFacts* facts = arch_facts(sm);
  uint32_t features = facts ? facts->features : sm >= 80 ? k_ampere : k_turing;
  return features >> static_cast<unsigned>(feature) & 1u;
}

bool Target::has(Feature feature) const {
  switch (kind) {
    case Kind::cuda:
    case Kind::emulate: {
      if (sm == 0) return false;
      if (arch_has(sm, feature)) return true;
      const ArchFacts* facts = arch_facts(sm);
      return arch_specific() && facts && facts->specific >> static_cast<unsigned>(feature) & 1u;
    }
    case Kind::cpu:
      return false;
  }
  return false;
}

std::string Target::arch() const {
  return is_cpu() || !sm ? std::string() : arch_name(sm) + suffix;
}

std::string Target::name() const {
  switch (kind) {
    case Kind::cuda: return sm ? "cuda:" + arch() : "cuda";
    case Kind::cpu: return "cpu:" + cpu;
    case Kind::emulate: return "emulate:" + arch();
  }
  return "cuda";
}

Target device_target(int sm) {
  const ArchFacts* facts = arch_facts(sm);
  return Target::cuda(sm, facts && facts->specific ? "a" : "");
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
  if (text == "emulate") {
    target.kind = Target::Kind::emulate;
    target.sm = 90;
    return target;
  }
  if (text.substr(0, 8) == "emulate:") {
    auto arch = parse_arch(text.substr(8));
    if (!arch) return make_error("unknown target '", std::string(text), "': ", arch.error().message);
    target = *arch;
    target.kind = Target::Kind::emulate;
    return target;
  }
  std::string_view arch = text.substr(0, 5) == "cuda:" ? text.substr(5) : text;
  if (arch != text || arch.substr(0, 3) == "sm_") {
    auto parsed = parse_arch(arch);
    // An arch-specific suffix kiln does not plan for is worth its own message.
    if (parsed || arch.find_first_not_of("sm_0123456789") != std::string_view::npos)
      return parsed ? Expected<Target>(*parsed)
                    : make_error("unknown target '", std::string(text), "': ", parsed.error().message);
  }
  return make_error("unknown target '", std::string(text),
                    "' (expected cuda, cuda:sm_XX, cuda:sm_90a, cpu, cpu:NAME, emulate or "
                    "emulate:sm_XX)");
}

}  // namespace kiln::compiler
