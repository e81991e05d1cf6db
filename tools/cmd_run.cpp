// `kiln run FILE --arch ARCH --precision MODE --emulate`: runs the generated kernels under the
// host emulation of CUDA on seeded random inputs and compares them with the fp64 reference.
//
// Exit codes: 0 when every output is within its tolerance, 1 when one is not or the emulated run
// fails (a kernel that does not compile for the host, a deadlock, a bad address), 2 on bad usage
// or input (unreadable graph, unknown arch or precision, a mode the arch cannot run, no
// --emulate: running on a GPU needs the runtime).
#include "tools/cli.h"

#include "compiler/options.h"
#include "emulation/check.h"
#include "ir/parse.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

namespace kiln::tools {
namespace {

struct RunArgs {
  std::string file;
  std::string arch = "sm_90";
  std::string precision = "auto";
  uint64_t seed = 0;
  bool emulate = false;
  bool allow_fallback = false;
  bool json = false;
  std::string cache_dir;
};

std::string format_error(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3e", value);
  return buffer;
}

int run_graph(const RunArgs& args) {
  auto sm = compiler::parse_arch(args.arch);
  if (!sm) {
    print_error("run: " + sm.error().message);
    return k_exit_usage;
  }
  auto precision = ir::parse_precision(args.precision);
  if (!precision) {
    print_error("run: unknown precision '" + args.precision +
                "' (expected highest, high, tf32x3, medium or auto)");
    return k_exit_usage;
  }
  if (!args.emulate) {
    print_error("run: running on a GPU needs kiln's runtime, which is not built yet; use --emulate "
                "to run the generated kernels on the CPU");
    return k_exit_usage;
  }
  auto graph = ir::parse_graph_file(args.file);
  if (!graph) {
    print_error(graph.error().message);
    return k_exit_usage;
  }
  compiler::CompileOptions options;
  options.sm = *sm;
  options.precision = *precision;
  options.fallback =
      args.allow_fallback ? compiler::FallbackPolicy::allow : compiler::FallbackPolicy::refuse;
  auto lowered = compiler::lower(*graph, options);
  if (!lowered) {
    print_error("run: " + lowered.error().message);
    return k_exit_usage;
  }
  auto program = emulation::build_program(*graph, std::move(*lowered));
  if (!program) {
    print_error("run: " + program.error().message);
    return k_exit_failure;
  }
  auto report = emulation::check_program(*graph, *program, args.seed);
  if (!report) {
    print_error("run: " + report.error().message);
    return k_exit_failure;
  }
  std::string mode(ir::to_string(report->precision));
  if (args.json) {
    nlohmann::json out;
    out["ok"] = report->ok;
    out["tolerance"] = report->tolerance;
    out["arch"] = compiler::arch_name(*sm);
    out["precision"] = mode;
    out["seed"] = args.seed;
    out["fallbacks"] = program->lowered().precision.fallbacks;
    out["outputs"] = nlohmann::json::array();
    for (const auto& o : report->outputs)
      out["outputs"].push_back({{"name", o.name}, {"rel_l2", o.rel_l2}, {"max_abs", o.max_abs},
                                {"tolerance", o.tolerance}, {"ok", o.ok}});
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("graph %s on %s (emulated), precision %s, seed %llu, inputs uniform in [-1, 1]\n",
                graph->name().c_str(), compiler::arch_name(*sm).c_str(), mode.c_str(),
                static_cast<unsigned long long>(args.seed));
    for (const std::string& f : program->lowered().precision.fallbacks)
      std::printf("fallback: %s\n", f.c_str());
    std::printf("%-20s %-12s %-12s %-12s %s\n", "output", "rel_l2", "max_abs", "tolerance", "ok");
    for (const auto& o : report->outputs)
      std::printf("%-20s %-12s %-12s %-12s %s\n", o.name.c_str(), format_error(o.rel_l2).c_str(),
                  format_error(o.max_abs).c_str(), format_error(o.tolerance).c_str(),
                  o.ok ? "yes" : "NO");
    std::printf("%s\n", report->ok ? "ok" : "FAILED: an output is past its tolerance");
  }
  return report->ok ? k_exit_ok : k_exit_failure;
}

}  // namespace

void register_run_commands(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run", "run a graph's generated kernels (--emulate: on the CPU) and check them against fp64");
  cmd->add_option("FILE", args->file, "graph file (.kg) or -")->required();
  cmd->add_option("--arch", args->arch, "target arch, sm_XX (default sm_90)");
  cmd->add_option("--precision", args->precision, "highest, high, tf32x3, medium or auto");
  cmd->add_option("--seed", args->seed, "seed of the random inputs (default 0)");
  cmd->add_flag("--emulate", args->emulate, "run under the host emulation of CUDA");
  cmd->add_flag("--allow-fallback", args->allow_fallback,
                "run a mode the arch lacks on the best available path instead of refusing");
  cmd->add_option("--cache-dir", args->cache_dir, "accepted for uniformity; emulation uses no cache");
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->callback([args, &exit_code] { exit_code = run_graph(*args); });
}

}  // namespace kiln::tools
