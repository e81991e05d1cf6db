// `kiln audit FILE --precision MODE`: a mode's rounding against fp64 on seeded random inputs or
// inputs from .npy files (--input); --save and --save-reference write both sides' outputs.
//
// Exit codes: 0 when the audit ran, even when an output exceeded its tolerance (the warnings go
// to stderr and, with --json, into "warnings"); with --strict such a warning exits 1. Bad usage or
// input (unreadable graph, unknown precision or arch, a missing, malformed or mismatched --input
// file) exits 2; a graph above --max-memory, a run out of host memory, a --save directory that
// cannot be created or an output file that cannot be written exits 1 (the work could not be done).
#include "tools/cli.h"

#include "compiler/options.h"
#include "compiler/precision.h"
#include "compiler/target.h"
#include "ir/hash.h"
#include "ir/parse.h"
#include "reference/audit.h"
#include "tools/data_flags.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

namespace kiln::tools {
namespace {

// Above this many matmul multiply-adds, the audit says up front that it will be slow.
constexpr int64_t k_slow_multiply_adds = int64_t{20} * 1000 * 1000 * 1000;

struct AuditArgs {
  std::string file;
  std::string precision;
  std::string arch = "sm_90";
  uint64_t seed = 0;
  std::string max_memory = "4G";
  std::string dims;  // --dims, for a symbolic graph
  std::string cache_dir;
  DataFlags data;  // --input, --save, --save-reference
  bool json = false;
  bool strict = false;
};

// Compute capability (major * 10 + minor) of an "sm_XX" (or "sm_90a") in kiln's table of archs.
std::optional<int> parse_arch(const std::string& arch) {
  if (arch.compare(0, 3, "sm_") != 0) return std::nullopt;
  auto target = compiler::parse_arch(arch);
  if (!target || !compiler::arch_facts(target->sm)) return std::nullopt;
  return target->sm;
}

int run_audit(const AuditArgs& args) {
  auto requested = ir::parse_precision(args.precision);
  if (!requested) {
    print_error("audit: unknown precision '" + args.precision +
                "' (expected highest, high, tf32x3, medium or auto)");
    return k_exit_usage;
  }
  auto capability = parse_arch(args.arch);
  if (!capability) {
    auto parsed = compiler::parse_arch(args.arch);  // its message, where it has one
    print_error("audit: " + (parsed ? "unknown arch '" + args.arch +
                                          "' (expected sm_XX, e.g. sm_90)"
                                    : parsed.error().message));
    return k_exit_usage;
  }
  auto max_bytes = parse_size(args.max_memory);
  if (!max_bytes) {
    print_error("audit: --max-memory '" + args.max_memory +
                "' is not a size (bytes, or a number with K, M or G)");
    return k_exit_usage;
  }
  auto parsed = ir::parse_graph_file(args.file);
  if (!parsed) {
    print_error(parsed.error().message);
    return k_exit_usage;
  }
  // A symbolic graph is audited at the sizes --dims or the --input files give.
  int code = k_exit_usage;
  auto data = prepare_data(*parsed, args.data, args.dims, args.seed, "audit", code);
  if (!data) return code;
  const ir::Graph& graph = data->bound;
  ir::Precision precision = *requested;
  if (precision == ir::Precision::automatic)
    precision = compiler::automatic_precision(*capability);

  reference::RunLimits limits;
  limits.max_bytes = *max_bytes;
  // Nothing caps the work itself; a long run is announced rather than refused.
  reference::RunCost cost = reference::estimate_cost(graph);
  if (cost.bytes > limits.max_bytes) {  // as run's --max-memory: the flag refuses it, exit 2
    print_error("audit: graph '" + graph.name() + "' needs about " + std::to_string(cost.bytes) +
                " bytes of host tensors, above --max-memory " + args.max_memory + " (" +
                std::to_string(limits.max_bytes) + " bytes)");
    return k_exit_usage;
  }
  if (cost.multiply_adds > k_slow_multiply_adds && cost.bytes <= limits.max_bytes)
    print_warning("audit: note: the graph needs about " + std::to_string(cost.multiply_adds) +
                " multiply-adds, run twice (fp64 and emulated) on one CPU core; this can take "
                "minutes");
  auto audited = reference::audit(graph, precision, std::move(data->inputs), limits);
  if (!audited) {
    print_error("audit: " + audited.error().message);
    return k_exit_failure;
  }
  auto saved = save_outputs(graph, args.data, audited->emulated, audited->fp64);
  if (!saved) {
    print_error(saved.error().message);
    return k_exit_failure;
  }
  const reference::AuditReport& report = audited->report;
  for (const std::string& warning : report.warnings)
    print_warning("audit: warning: " + warning);

  std::string hash = ir::graph_hash(*parsed).hex();  // the graph as written, dims and all
  if (args.json) {
    nlohmann::json out;
    out["graph"] = hash;
    out["precision"] = std::string(ir::to_string(precision));
    out["seed"] = args.seed;
    add_data_json(out, *parsed, *data, *saved);
    out["outputs"] = nlohmann::json::array();
    for (const auto& o : report.outputs)
      out["outputs"].push_back({{"name", o.name}, {"rel_l2", o.rel_l2}, {"max_abs", o.max_abs},
                                {"tolerance", o.tolerance}, {"ok", o.ok}});
    out["warnings"] = report.warnings;
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::string at = describe_dims(*parsed, *data);
    std::printf("graph %s (%s)%s, precision %s", graph.name().c_str(), hash.c_str(), at.c_str(),
                std::string(ir::to_string(precision)).c_str());
    if (*requested == ir::Precision::automatic) std::printf(" (auto on %s)", args.arch.c_str());
    std::printf(", seed %llu, %s\n", static_cast<unsigned long long>(args.seed),
                describe_inputs(*data).c_str());
    std::printf("%-20s %-12s %-12s %-12s %s\n", "output", "rel_l2", "max_abs", "tolerance", "ok");
    for (const auto& o : report.outputs)
      std::printf("%-20s %-12s %-12s %-12s %s\n", o.name.c_str(), format_error(o.rel_l2).c_str(),
                  format_error(o.max_abs).c_str(), format_error(o.tolerance).c_str(),
                  o.ok ? "yes" : "NO");
    for (const std::string& path : *saved) std::printf("saved %s\n", path.c_str());
  }
  if (args.strict && !report.warnings.empty()) return k_exit_failure;
  return k_exit_ok;
}

}  // namespace

void register_audit_commands(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<AuditArgs>();
  CLI::App* cmd = app.add_subcommand(
      "audit", "compare a precision mode's rounding with fp64 on seeded or given inputs");
  cmd->add_option("FILE", args->file, "graph file (.kg) or -")->required();
  cmd->add_option("--precision", args->precision, "highest, high, tf32x3, medium or auto")
      ->required();
  cmd->add_option("--arch", args->arch, "sm_XX, used only to resolve auto (default sm_90)");
  add_seed_option(cmd, args->seed);
  cmd->add_option("--dims", args->dims,
                  "sizes of a symbolic graph's dims, e.g. B=37,S=100 (default: the --input "
                  "files')");
  add_data_options(cmd, args->data,
                   "the mode's outputs, in their dtypes (bf16 as '<u2' bits),");
  cmd->add_option("--max-memory", args->max_memory,
                  "refuse graphs needing more host memory than this (default 4G)");
  add_cache_dir_option(cmd, args->cache_dir, "accepted for uniformity; audit uses no cache");
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->add_flag("--strict", args->strict,
                "exit 1 when an output's error exceeds its tolerance (a warning)");
  cmd->callback([args, &exit_code] { exit_code = run_audit(*args); });
}

}  // namespace kiln::tools
