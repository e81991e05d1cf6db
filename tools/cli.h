// Shared pieces of the kiln CLI: exit codes and the registration hook every command file provides.
#pragma once

#include "compiler/cpu/jit.h"
#include "compiler/options.h"
#include "ir/graph.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::tools {

inline constexpr int k_exit_ok = 0;       // the work succeeded
inline constexpr int k_exit_failure = 1;  // the work failed (a compile error, a bad cache entry)
inline constexpr int k_exit_usage = 2;    // bad usage or bad input
inline constexpr int k_exit_no_gpu = 3;   // work that needs a GPU, on a machine without one

// Each command file adds its subcommands to `app`; a subcommand's callback stores its exit code
// in `exit_code`.
void register_fmt_commands(CLI::App& app, int& exit_code);  // fmt, hash
void register_audit_commands(CLI::App& app, int& exit_code);  // audit
void register_run_commands(CLI::App& app, int& exit_code);  // run
void register_cache_commands(CLI::App& app, int& exit_code);  // stats ls show prune clear ...
void register_compile_commands(CLI::App& app, int& exit_code);  // emit compile why tune
// completion; registered last, it describes every command registered before it.
void register_completion_command(CLI::App& app, int& exit_code);

// Adds `--cache-dir DIR` to `cmd`; an empty DIR is bad usage (it would silently mean the
// default cache).
CLI::Option* add_cache_dir_option(CLI::App* cmd, std::string& dir, const std::string& help);

// Adds `--remote URL` (the remote cache tier, overriding $KILN_REMOTE_CACHE; "" turns it off) to
// `cmd`; a URL that is not redis://[:password@]host[:port][/db][?prefix=P] is bad usage.
CLI::Option* add_remote_option(CLI::App* cmd, std::optional<std::string>& remote);

// A validator for an integer option: the text must be a whole number from `lo` to `hi`
// ("expected a whole number from 1 to 1000000, got '2.5'"), checked before CLI11 converts it,
// which would clamp 10^20 to 2^63 - 1 and quote the clamped value.
CLI::Validator whole_number_in(int64_t lo, int64_t hi);

// --allow-fallback (precision fallbacks: a mode the arch lacks, run on the best available path)
// and --no-fallback (no fallback of any kind: an attention kiln cannot fuse is an error too);
// given together they are bad usage.
struct FallbackFlags {
  bool allow = false;
  bool refuse = false;
};
void add_fallback_options(CLI::App* cmd, FallbackFlags& flags, const std::string& allow_help);
// Sets options.fallback (precision: refused unless allowed) and options.fusion_fallback
// (unfused attention: warned about unless refused) from `flags`.
void apply_fallback_flags(const FallbackFlags& flags, compiler::CompileOptions& options);

// Adds `--target cuda|cpu|cpu:NAME` (cpu: the host's CPU; NAME an LLVM CPU such as x86-64-v3).
void add_target_option(CLI::App* cmd, std::string& target);
// The CPU `target` names (nullopt inside for cuda); prints "<command>: ..." and returns nullopt
// when it names neither or an unknown CPU (`exit_code` 2), or when the CPU plugin cannot be
// loaded to ask (1: the machine's failure, not the user's).
std::optional<std::optional<compiler::cpu::CpuMachine>> parse_cpu_target(const std::string& target,
                                                                         const std::string& command,
                                                                         int& exit_code);

// The sizes `--dims` gives a symbolic graph for one run, one value per dim (none for a static
// graph without --dims); prints "<command>: ..." and returns nullopt when they are missing or
// bad (a symbolic graph without --dims, 'all', a dim unknown, repeated or out of range).
std::optional<std::vector<int64_t>> run_dims(const std::string& dims, const ir::Graph& graph,
                                             const std::string& command);

// An error: "kiln <command>: ..." on stderr, or with --json a {"error": ..., "command": ...}
// object on stdout. A message may start "kiln: " or "<command>: " (either becomes the prefix).
void print_error(const std::string& message);
// A warning or note: always on stderr, prefixed as errors are.
void print_warning(const std::string& message);
// An error measure (relative L2, max abs, tolerance) as `kiln run` and `kiln audit` print it:
// "%.3e".
std::string format_error(double value);
// A CLI11 check of an option's value that may not be empty ('' would read as the option left
// out): "must not be empty", else "".
std::string not_empty(const std::string& value);

}  // namespace kiln::tools
