// `kiln run FILE [--arch ARCH] --precision MODE [--emulate]`: runs the graph's kernels on seeded
// random inputs or inputs from .npy files (--input), through the runtime and its cache: on the GPU,
// on the CPU target (--target cpu), or (--emulate, the runtime's "emulate:sm_XX" target) on the
// CPU under the host emulation of CUDA; compares them with the fp64 reference
// and writes the outputs as .npy files (--save, --save-reference).
//
// Exit codes: 0 when every output is within its tolerance, 1 when one is not or the run fails
// (no GPU without --emulate, a kernel that does not compile, a deadlock, a bad address, a --save
// directory that cannot be created or an output file that cannot be written), 2 on bad usage or
// input (unreadable graph, unknown arch or precision, --arch with --target cpu, a mode the arch
// cannot run, a missing, malformed or mismatched --input file, a run above --max-memory).
#include "tools/cli.h"

#include "compiler/cpu/compile.h"
#include "compiler/options.h"
#include "compiler/request.h"
#include "compiler/sizes.h"
#include "emulation/check.h"
#include "ir/parse.h"
#include "kiln/kiln.h"
#include "reference/check.h"
#include "tools/data_flags.h"
#include "tools/run_memory.h"

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
  bool arch_given = false;
  FallbackFlags fallback;
  bool json = false;
  std::string cache_dir;
  std::optional<std::string> remote;
  std::string dims;  // --dims B=37,S=100 for a symbolic graph
  DataFlags data;    // --input, --save, --save-reference
  std::optional<std::string> schedule;  // --schedule SEED|kind|adversarial (with --emulate)
  std::optional<std::string> sm_count;  // --sm-count N (with --emulate): the device's SMs
  std::string target = "cuda";  // --target cuda|cpu|cpu:NAME
  std::optional<std::string> max_memory;  // --max-memory SIZE: refuse a run estimated above it
  int64_t repeat = 1;  // --repeat N: runs, each timed; the first one's outputs are checked
};

// The most runs --repeat takes.
constexpr int64_t k_max_repeat = 1000000;

// The median of `values` (0 when empty).
double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid)) +
          upper) / 2;
}

// `repeat` runs of `exe` (the CPU target) on `inputs` at the dims' `values`, into output buffers
// allocated once: each run's wall time (the run_timed call) to `run_us`, its kernels' to
// `kernel_us`. Returns the outputs (every run writes the same ones).
Expected<std::vector<reference::Bytes>> run_cpu_timed(Executable& exe,
                                                      const std::vector<reference::Bytes>& inputs,
                                                      const std::vector<int64_t>& values,
                                                      int64_t repeat, std::vector<double>& run_us,
                                                      std::vector<std::vector<KernelTime>>& kernel_us) {
  auto in_specs = exe.inputs_at(values);
  if (!in_specs) return in_specs.error();
  auto out_specs = exe.outputs_at(values);
  if (!out_specs) return out_specs.error();
  if (inputs.size() != in_specs->size()) return make_error("the inputs do not match the graph");
  std::vector<TensorRef> in, out;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back({const_cast<unsigned char*>(inputs[i].data()), (*in_specs)[i].dtype, (*in_specs)[i].shape});
  std::vector<reference::Bytes> outputs;
  for (const TensorSpec& spec : *out_specs) {
    int64_t bytes = ir::byte_size(spec.dtype);
    for (int64_t d : spec.shape) bytes *= d;
    outputs.emplace_back(static_cast<size_t>(bytes));
  }
  for (size_t o = 0; o < outputs.size(); ++o)
    out.push_back({outputs[o].data(), (*out_specs)[o].dtype, (*out_specs)[o].shape});
  for (int64_t r = 0; r < repeat; ++r) {
    std::vector<KernelTime> kernels;
    auto start = std::chrono::steady_clock::now();
    Status s = exe.run_timed(in, out, kernels);
    run_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    if (!s) return s.error();
    kernel_us.push_back(std::move(kernels));
  }
  return outputs;
}

// Per kernel, the median of its times over the runs; outside the kernels, the median over the
// runs of each run's time less its kernels' sum, and that as a share of the median run.
struct KernelShares {
  std::vector<std::pair<std::string, double>> kernels;
  double outside_us = 0, outside_share = 0;
};

KernelShares kernel_shares(const std::vector<double>& run_us,
                           const std::vector<std::vector<KernelTime>>& kernel_us) {
  KernelShares shares;
  std::vector<double> outside;
  for (size_t r = 0; r < kernel_us.size() && r < run_us.size(); ++r) {
    double sum = 0;
    for (const KernelTime& k : kernel_us[r]) sum += k.us;
    outside.push_back(std::max(0.0, run_us[r] - sum));
  }
  for (size_t i = 0; !kernel_us.empty() && i < kernel_us[0].size(); ++i) {
    std::vector<double> times;
    for (const auto& run : kernel_us)
      if (i < run.size()) times.push_back(run[i].us);
    shares.kernels.emplace_back(kernel_us[0][i].name, median(times));
  }
  shares.outside_us = median(outside);
  double total = median(run_us);
  shares.outside_share = total > 0 ? shares.outside_us / total : 0.0;
  return shares;
}

int run_graph(const RunArgs& args) {
  auto sm = compiler::parse_arch(args.arch);  // the CUDA target of --arch
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
  std::optional<int64_t> max_bytes;
  if (args.max_memory) {
    max_bytes = parse_size(*args.max_memory);
    if (!max_bytes) {
      print_error("run: --max-memory '" + *args.max_memory +
                  "' is not a size (bytes, or a number with K, M or G)");
      return k_exit_usage;
    }
  }
  int exit_code = k_exit_usage;
  auto cpu = parse_cpu_target(args.target, "run", exit_code);
  if (!cpu) return exit_code;
  if (*cpu && args.emulate) {
    print_error("run: --emulate runs CUDA kernels under emulation; --target cpu runs native ones");
    return k_exit_usage;
  }
  if (*cpu && args.arch_given) {
    print_error("run: --arch applies to CUDA targets only; --target " + args.target +
                " runs on the CPU");
    return k_exit_usage;
  }
  emulation::Schedule schedule;
  if (args.schedule) {
    if (!args.emulate) {
      print_error("run: --schedule orders the emulator's threads; it needs --emulate");
      return k_exit_usage;
    }
    auto parsed = emulation::parse_schedule(*args.schedule);
    if (!parsed) {
      print_error("run: --schedule: " + parsed.error().message);
      return k_exit_usage;
    }
    schedule = *parsed;
  }
  if (args.sm_count) {
    if (!args.emulate) {
      print_error("run: --sm-count sizes the emulated device; it needs --emulate");
      return k_exit_usage;
    }
    // Decimal digits only (no sign, no space), at most 4 of them before the range check.
    const std::string& text = *args.sm_count;
    bool digits = !text.empty() && text.size() <= 4 &&
                  text.find_first_not_of("0123456789") == std::string::npos;
    uint32_t count = digits ? static_cast<uint32_t>(std::stoul(text)) : 0;
    if (count < 1 || count > emulation::k_max_sm_count) {
      print_error("run: --sm-count '" + text + "' is not a multiprocessor count from 1 to " +
                  std::to_string(emulation::k_max_sm_count));
      return k_exit_usage;
    }
    schedule.sm_count = count;
  }
  if (args.repeat < 1 || args.repeat > k_max_repeat) {
    print_error("run: --repeat " + std::to_string(args.repeat) + " is not a run count from 1 to " +
                std::to_string(k_max_repeat));
    return k_exit_usage;
  }
  auto graph = ir::parse_graph_file(args.file);
  if (!graph) {
    print_error(graph.error().message);
    return k_exit_usage;
  }
  // A symbolic graph runs at the sizes --dims or the --input files give: `bound` is the graph
  // with them written in.
  int code = k_exit_usage;
  auto data = prepare_data(*graph, args.data, args.dims, args.seed, "run", code);
  if (!data) return code;
  const std::vector<int64_t>& values = data->dims;
  const ir::Graph& bound = data->bound;
  compiler::CompileOptions options;
  options.target = *sm;
  options.precision = *precision;
  apply_fallback_flags(args.fallback, options);
  for (size_t i = 0; i < values.size(); ++i)
    options.bucket.push_back(compiler::bucket_of(values[i], graph->symbols()[i]));
  if (max_bytes) {
    // Before anything of the run is allocated (the --input files aside) or compiled.
    int64_t read = 0;
    for (const auto& given : data->inputs.given)
      if (given) {
        read += static_cast<int64_t>(given->values.size()) *
                reference::host_bytes_per_element(given->dtype);
      }
    // On a GPU the temporaries are device memory.
    bool on_cpu = cpu->has_value();
    int64_t temporaries = args.emulate || on_cpu ? host_temporary_bytes(bound, options, on_cpu) : 0;
    int64_t needs = run_host_bytes(bound, read, temporaries);
    if (needs > *max_bytes) {
      print_error("run: graph '" + bound.name() + "'" + describe_dims(*graph, *data) +
                  " needs about " + std::to_string(needs) + " bytes of host memory, above " +
                  "--max-memory " + *args.max_memory + " (" + std::to_string(*max_bytes) +
                  " bytes)");
      return k_exit_usage;
    }
  }
  Expected<reference::CheckRun> checked = Error{};
  std::vector<double> run_us;  // each run's wall time: inputs in, the kernels, outputs out
  std::vector<std::vector<KernelTime>> kernel_us;  // the CPU target: each run's kernels
  std::vector<std::string> fallbacks;
  std::string where = "emulated";
  {
    // On the GPU (the device's arch unless --arch was given), the CPU target, or under emulation
    // (the CUDA kernels of --arch, sm_90 by default, built for this CPU), compiled through the
    // cache like any runtime's.
    Status gpu = *cpu || args.emulate ? Status::success() : gpu_status();
    if (!gpu) {
      print_error("run: " + gpu.error().message + "; --emulate runs the kernels on the CPU");
      return k_exit_failure;
    }
    if (args.emulate || *cpu) {
      // What the request refuses (an arch, a precision, a fallback, an attention no kernel
      // runs) is the user's to fix.
      compiler::CompileOptions request_options = options;
      if (*cpu) request_options.target = compiler::Target::for_cpu((*cpu)->cpu, (*cpu)->features);
      if (auto request = compiler::check_request(*graph, request_options); !request) {
        print_error("run: " + request.error().message);
        return k_exit_usage;
      }
    }
    RuntimeOptions runtime_options;
    runtime_options.arch = args.arch_given && !*cpu && !args.emulate ? args.arch : "";
    runtime_options.target = args.emulate ? "emulate:" + sm->arch() : args.target;
    if (args.emulate) {
      runtime_options.emulate_schedule = emulation::to_string(schedule);
      runtime_options.emulate_sm_count = static_cast<int>(schedule.sm_count);
    }
    runtime_options.precision = *precision;
    runtime_options.allow_fallback = args.fallback.allow;
    runtime_options.fallbacks =
        args.fallback.refuse ? FallbackPolicy::refuse : FallbackPolicy::warn;
    runtime_options.cache_dir = args.cache_dir;
    runtime_options.remote_cache = args.remote;
    auto runtime = Runtime::create(runtime_options);
    if (!runtime) {
      print_error("run: " + runtime.error().message);
      return k_exit_usage;
    }
    auto exe = (*runtime)->compile(*graph);
    if (!exe) {
      print_error("run: " + exe.error().message);
      return k_exit_failure;
    }
    fallbacks = (*exe)->fallbacks();
    if (!args.emulate) {
      where = *cpu ? "CPU" : "GPU";
      if (auto ran = compiler::parse_arch((*exe)->arch()); !*cpu && ran) *sm = *ran;
    }
    checked = reference::check_against_fp64(
        bound, *ir::parse_precision((*exe)->precision()), std::move(data->inputs),
        reference::bytes_runner(bound, [&](const std::vector<reference::Bytes>& inputs) {
          // On the CPU target: the kernels on host buffers allocated once, each run and each
          // kernel timed (run_timed), as a serving process runs them.
          if (*cpu) return run_cpu_timed(**exe, inputs, values, args.repeat, run_us, kernel_us);
          // --repeat N runs N times; the first run's outputs are the ones checked.
          Expected<std::vector<reference::Bytes>> first = Error{};
          for (int64_t r = 0; r < args.repeat; ++r) {
            auto start = std::chrono::steady_clock::now();
            auto outputs = (*exe)->run_host(inputs, values);
            run_us.push_back(std::chrono::duration<double, std::micro>(
                                 std::chrono::steady_clock::now() - start)
                                 .count());
            if (!outputs) return outputs;
            if (r == 0) first = std::move(outputs);
          }
          return first;
        }));
  }
  if (!checked) {
    print_error("run: " + checked.error().message);
    return k_exit_failure;
  }
  // The outputs are written whether or not they pass: a failing run is what one wants to inspect.
  auto saved = save_outputs(bound, args.data, checked->actual, checked->fp64);
  if (!saved) {
    print_error(saved.error().message);
    return k_exit_failure;
  }
  const reference::CheckReport& report = checked->report;
  std::string mode(ir::to_string(report.precision));
  if (args.json) {
    nlohmann::json out;
    out["ok"] = report.ok;
    out["tolerance"] = report.tolerance;
    out["arch"] = *cpu ? compiler::cpu::target_name(**cpu) : sm->arch();
    out["precision"] = mode;
    out["seed"] = args.seed;
    out["fallbacks"] = fallbacks;
    out["device"] = where;
    if (args.emulate) {
      out["schedule"] = emulation::to_string(schedule);
      out["sm_count"] = schedule.sm_count;
    }
    out["runs"] = run_us.size();
    out["run_us"] = median(run_us);
    if (!kernel_us.empty()) {
      KernelShares shares = kernel_shares(run_us, kernel_us);
      out["kernels"] = nlohmann::json::array();
      for (const auto& [name, us] : shares.kernels)
        out["kernels"].push_back({{"name", name}, {"run_us", us}});
      out["outside_us"] = shares.outside_us;
      out["outside_share"] = shares.outside_share;
    }
    add_data_json(out, *graph, *data, *saved);
    out["outputs"] = nlohmann::json::array();
    for (const auto& o : report.outputs)
      out["outputs"].push_back({{"name", o.name}, {"rel_l2", o.rel_l2}, {"max_abs", o.max_abs},
                                {"tolerance", o.tolerance}, {"ok", o.ok}});
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::string at = describe_dims(*graph, *data);
    std::string device =
        args.emulate ? where + ", schedule " + emulation::to_string(schedule) : where;
    if (args.sm_count) device += ", " + std::to_string(schedule.sm_count) + " multiprocessors";
    std::string arch = *cpu ? compiler::cpu::target_name(**cpu) : sm->arch();
    std::printf("graph %s%s on %s (%s), precision %s, seed %llu, %s\n", graph->name().c_str(),
                at.c_str(), arch.c_str(), device.c_str(), mode.c_str(),
                static_cast<unsigned long long>(args.seed), describe_inputs(*data).c_str());
    for (const std::string& f : fallbacks)
      std::printf("fallback: %s\n", f.c_str());
    std::printf("%-20s %-12s %-12s %-12s %s\n", "output", "rel_l2", "max_abs", "tolerance", "ok");
    for (const auto& o : report.outputs)
      std::printf("%-20s %-12s %-12s %-12s %s\n", o.name.c_str(), format_error(o.rel_l2).c_str(),
                  format_error(o.max_abs).c_str(), format_error(o.tolerance).c_str(),
                  o.ok ? "yes" : "NO");
    for (const std::string& path : *saved) std::printf("saved %s\n", path.c_str());
    if (args.repeat > 1 && !kernel_us.empty()) {
      KernelShares shares = kernel_shares(run_us, kernel_us);
      std::printf("run: %.1f us median over %zu runs (the kernels on buffers allocated once); "
                  "outside the kernels %.1f us (%.1f%%)\n",
                  median(run_us), run_us.size(), shares.outside_us, 100.0 * shares.outside_share);
      for (const auto& [name, us] : shares.kernels) std::printf("  %-28s %10.1f us\n", name.c_str(), us);
    } else if (args.repeat > 1) {
      std::printf("run: %.1f us median over %zu runs (inputs in, kernels, outputs out)\n",
                  median(run_us), run_us.size());
    }
    std::printf("%s\n", report.ok ? "ok" : "FAILED: an output is past its tolerance");
  }
  return report.ok ? k_exit_ok : k_exit_failure;
}

}  // namespace

std::optional<std::vector<int64_t>> run_dims(const std::string& dims, const ir::Graph& graph,
                                             const std::string& command) {
  if (graph.symbolic() && dims.empty()) {
    print_error(command + ": " + compiler::check_bucket(graph, {}).error().message);
    return std::nullopt;
  }
  std::vector<int64_t> values;
  if (dims.empty()) return values;
  auto given = compiler::parse_dims(dims, graph);
  if (!given) {
    print_error(command + ": " + given.error().message);
    return std::nullopt;
  }
  for (size_t i = 0; i < given->size(); ++i) {
    if (!(*given)[i]) {
      print_error(command + ": --dims " + graph.symbols()[i].name + "=all: a " + command +
                  " needs one value per dim");
      return std::nullopt;
    }
    values.push_back(*(*given)[i]);
  }
  return values;
}

void register_run_commands(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run", "run a graph's kernels on the GPU (--emulate: on the CPU) and check them against fp64");
  cmd->add_option("FILE", args->file, "graph file (.kg) or -")->required();
  cmd->add_option("--arch", args->arch,
                  "target arch, sm_XX or sm_90a (default: the GPU's, sm_90a on compute capability "
                  "9.0; sm_90 with --emulate)");
  cmd->add_option("--precision", args->precision, "highest, high, tf32x3, medium or auto");
  add_seed_option(cmd, args->seed);
  cmd->add_flag("--emulate", args->emulate, "run under the host emulation of CUDA");
  add_target_option(cmd, args->target);
  cmd->add_option("--schedule", args->schedule,
                  "with --emulate: how threads are ordered and cp.async copies land: kind (the "
                  "default), adversarial, or a seed of a random schedule");
  cmd->add_option("--sm-count", args->sm_count,
                  "with --emulate: the emulated device's multiprocessors, 1 to 1024 (default "
                  "132): a persistent kernel runs min(its work tiles, N) blocks");
  cmd->add_option("--dims", args->dims,
                  "sizes of a symbolic graph's dims, e.g. B=37,S=100 (default: the --input "
                  "files')");
  add_data_options(cmd, args->data, "the outputs, in their dtypes (bf16 as '<u2' bits),");
  add_fallback_options(cmd, args->fallback,
                       "run a mode the arch lacks on the best available path instead of refusing");
  cmd->add_option("--max-memory", args->max_memory,
                  "refuse, before allocating, a run whose host memory (the fp64 reference and "
                  "the kernels' buffers) is estimated above SIZE, e.g. 4G (default: no limit)")
      ->type_name("SIZE");
  add_cache_dir_option(cmd, args->cache_dir,
                       "cache directory (the emulated run's entries hold its kernel text)");
  add_remote_option(cmd, args->remote);
  cmd->add_option("--repeat", args->repeat,
                  "run N times, each timed (inputs in, kernels, outputs out; compile and the fp64 "
                  "reference excluded): the median is printed, and is run_us in --json; the "
                  "first run's outputs are checked (1 to 1000000, default 1)")
      ->type_name("N")
      ->check(whole_number_in(1, k_max_repeat));
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->callback([args, cmd, &exit_code] {
    args->arch_given = cmd->count("--arch") > 0;
    exit_code = run_graph(*args);
  });
}

}  // namespace kiln::tools
