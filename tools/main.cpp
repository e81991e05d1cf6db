// Entry point of the kiln CLI: parses the command line and dispatches to one command.
#include "tools/cli.h"

#include "cache/remote/redis.h"
#include "cache/types.h"
#include "compiler/key.h"
#include "compiler/nvrtc.h"
#include "compiler/pool.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

namespace kiln::tools {
namespace {

// The command being run and whether it was asked for JSON: every error says which command it
// comes from, and with --json it is a JSON object on stdout, as the command's output would be.
std::string g_command;
bool g_json = false;

// `kiln --version`: the version, then what this kiln would use. Cheap on purpose (benchmarks
// use it as the cost of a bare process): NVRTC is found by its file, never loaded.
std::string version_text() {
  std::string out = "kiln 0.1.0\n";
  auto nvrtc = compiler::nvrtc_identity();
  out += "nvrtc: " + (nvrtc ? *nvrtc : "not found (" + nvrtc.error().message + ")") + "\n";
  out += "codegen: " + std::string(compiler::codegen_version()) + " (CUDA), " +
         std::string(compiler::cpu_codegen_version()) + " (CPU)\n";
  std::string dir = cache::resolve_cache_dir("");
  out += "cache: " + (dir.empty() ? std::string("none (set KILN_CACHE_DIR or HOME)") : dir) + "\n";
  const char* remote = std::getenv("KILN_REMOTE_CACHE");
  auto secret = cache::remote_secret(std::nullopt);
  out += "remote tier: redis (hiredis), " +
         std::string(remote && *remote ? "KILN_REMOTE_CACHE set" : "off (KILN_REMOTE_CACHE unset)") +
         (!secret ? ", " + secret.error().message
          : secret->empty() ? ", entries unsigned (CPU-target entries are not shared)"
                            : ", entries signed (KILN_REMOTE_KEY)") +
         "\n";
  out += "run: GPU through the CUDA driver (loaded by `kiln run`), or --emulate on the CPU";
  return out;
}

constexpr const char* k_environment_help =
    "Environment:\n"
    "  KILN_CACHE_DIR        cache folder (else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)\n"
    "  KILN_CACHE_MAX_SIZE   cache size cap, e.g. 2G (default), 500M, 0 for none\n"
    "  KILN_REMOTE_CACHE     remote tier, redis://[:password@]host:port[/db][?prefix=P]\n"
    "  KILN_REMOTE_KEY       secret that signs and checks remote entries (16 bytes or more)\n"
    "  KILN_REMOTE_MAX_BYTES largest remote entry taken, e.g. 64M (default)\n"
    "  KILN_REMOTE_TTL       how long remote entries live, e.g. 30d (default)\n"
    "  KILN_KERNEL_CACHE_DIR folder keeping compiled kernels for later compiles (default: none)\n"
    "  KILN_COMPILE_THREADS  NVRTC threads per graph, 1 to 1024 (default: the core count)\n"
    "  KILN_CPU_THREADS      threads of the CPU target's kernels, 1 to 1024 (default: cores)\n"
    "  KILN_CPU_PLUGIN       the CPU target's LLVM plugin (else the installed, then the built one)\n"
    "  KILN_NVRTC_PATH       libnvrtc to use (else CUDA_HOME, then the loader's search)\n"
    "  KILN_CUDA_DRIVER_PATH libcuda to use (default libcuda.so.1)\n";

// Edit distance between `a` and `b` (insertions, deletions, substitutions and swaps of two
// neighbouring characters each cost 1).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// "unknown command 'compil'; did you mean 'compile'?" when `command` names no subcommand of
// `app` ("" when it does). A name counts as close within a third of its length (at least 1, at
// most 2 edits); the closest wins, the first registered on a tie.
std::string unknown_command(const CLI::App& app, const std::string& command) {
  std::string best;
  size_t best_distance = 0;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    const std::string& name = sub->get_name();
    if (name == command) return "";
    size_t distance = edit_distance(command, name);
    size_t close = std::clamp<size_t>(name.size() / 3, 1, 2);
    if (distance <= close && (best.empty() || distance < best_distance)) {
      best = name;
      best_distance = distance;
    }
  }
  std::string message = "unknown command '" + command + "'";
  if (!best.empty()) return message + "; did you mean '" + best + "'?";
  return message + " (kiln --help lists the commands)";
}

void note_command_line(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--json") g_json = true;
    if (g_command.empty() && !arg.empty() && arg[0] != '-') g_command = arg;
  }
}

}  // namespace
}  // namespace kiln::tools

int main(int argc, char** argv) {
  kiln::tools::note_command_line(argc, argv);
  CLI::App app{"kiln: compile tensor graphs to CUDA kernels and cache them"};
  app.require_subcommand(1);
  app.set_version_flag("--version", kiln::tools::version_text);
  app.footer(kiln::tools::k_environment_help);
  if (std::string problem = kiln::compiler::compile_threads_env_problem(); !problem.empty())
    kiln::tools::print_warning("kiln: warning: " + problem);
  // An unusable secret would leave the remote tier unsigned: refuse to run rather than warn.
  if (auto secret = kiln::cache::remote_secret(std::nullopt); !secret) {
    bool version_or_help = argc == 2 && (std::string(argv[1]) == "--version" ||
                                         std::string(argv[1]) == "--help" ||
                                         std::string(argv[1]) == "-h");
    if (!version_or_help) {
      kiln::tools::print_error("kiln: " + secret.error().message);
      return kiln::tools::k_exit_usage;
    }
  }
  int exit_code = kiln::tools::k_exit_ok;
  kiln::tools::register_fmt_commands(app, exit_code);
  kiln::tools::register_audit_commands(app, exit_code);
  kiln::tools::register_run_commands(app, exit_code);
  kiln::tools::register_cache_commands(app, exit_code);
  kiln::tools::register_compile_commands(app, exit_code);
  kiln::tools::register_completion_command(app, exit_code);
  // CLI11 would say only "A subcommand is required" for a misspelt command, an option given
  // before any command, or none at all.
  if (kiln::tools::g_command.empty()) {
    bool help_or_version = false;
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      help_or_version = help_or_version || arg == "--help" || arg == "-h" || arg == "--version";
    }
    if (!help_or_version) {
      std::string first = argc > 1 ? argv[1] : "";
      kiln::tools::print_error(
          first.empty() ? "kiln: no command given (kiln --help lists the commands)"
                        : "kiln: unknown option '" + first + "' before a command (options follow "
                          "the command: kiln COMMAND --help lists its own)");
      return kiln::tools::k_exit_usage;
    }
  } else {
    std::string unknown = kiln::tools::unknown_command(app, kiln::tools::g_command);
    if (!unknown.empty()) {
      kiln::tools::g_command.clear();  // the message names no command of kiln's
      kiln::tools::print_error("kiln: " + unknown);
      return kiln::tools::k_exit_usage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // CLI11's own words ("FILE is required"), prefixed as kiln's errors are: "kiln run: ...".
    kiln::tools::print_error(std::string("kiln: ") + e.what());
    if (!kiln::tools::g_json) {
      std::fprintf(stderr, "(kiln %s--help lists the options)\n",
                   kiln::tools::g_command.empty() ? "" : (kiln::tools::g_command + " ").c_str());
    }
    return kiln::tools::k_exit_usage;
  } catch (const std::bad_alloc&) {
    // A last line of defence: inputs are bounded before allocating, but a report beats an abort.
    kiln::tools::print_error("kiln: out of memory");
    return kiln::tools::k_exit_failure;
  } catch (const std::exception& e) {
    kiln::tools::print_error(std::string("kiln: internal error: ") + e.what());
    return kiln::tools::k_exit_failure;
  }
  return exit_code;
}

namespace kiln::tools {
CLI::Option* add_cache_dir_option(CLI::App* cmd, std::string& dir, const std::string& help) {
  return cmd->add_option("--cache-dir", dir, help)->check([](const std::string& value) {
    return value.empty() ? std::string("must name a directory, not be empty") : std::string();
  });
}

void add_fallback_options(CLI::App* cmd, FallbackFlags& flags, const std::string& allow_help) {
  auto* allow = cmd->add_flag("--allow-fallback", flags.allow, allow_help);
  cmd->add_flag("--no-fallback", flags.refuse,
                "refuse every fallback: an attention that cannot be fused fails the compile "
                "instead of running unfused with a warning")
      ->excludes(allow);
}

void apply_fallback_flags(const FallbackFlags& flags, compiler::CompileOptions& options) {
  compiler::set_fallback_policy(
      options, flags.refuse ? compiler::FallbackPolicy::refuse : compiler::FallbackPolicy::warn,
      flags.allow);
}

CLI::Validator whole_number_in(int64_t lo, int64_t hi) {
  std::string range = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& value) {
        int64_t v = 0;
        const char* first = value.data() + (!value.empty() && value[0] == '+');
        auto [end, ec] = std::from_chars(first, value.data() + value.size(), v);
        if (value.empty() || ec != std::errc() || end != value.data() + value.size() || v < lo ||
            v > hi)
          return "expected " + range + ", got '" + value + "'";
        return std::string();
      },
      "");
}

CLI::Option* add_remote_option(CLI::App* cmd, std::optional<std::string>& remote) {
  return cmd
      ->add_option("--remote", remote,
                   "remote cache tier, redis://[:password@]host:port[/db][?prefix=P] "
                   "(default: $KILN_REMOTE_CACHE; \"\" for none)")
      ->type_name("URL")
      ->check([](const std::string& value) {
        if (value.empty()) return std::string();
        auto parsed = cache::remote::parse_redis_url(value);
        return parsed ? std::string() : parsed.error().message;
      });
}

namespace {

// "kiln: X" and "<command>: X" become "kiln <command>: X"; anything else (a located graph error,
// "file:line:col: ...") is left as it is. `bare` is the message without either prefix.
std::string with_prefix(const std::string& message, std::string* bare = nullptr) {
  std::string rest = message;
  for (const std::string& p : {std::string("kiln: "), g_command + ": "}) {
    if (!g_command.empty() && rest.rfind(p, 0) == 0) {
      rest = rest.substr(p.size());
      if (bare) *bare = rest;
      return "kiln " + g_command + ": " + rest;
    }
  }
  if (bare) *bare = message;
  return message;
}

}  // namespace

std::string format_error(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3e", value);
  return buffer;
}

std::string not_empty(const std::string& value) {
  return value.empty() ? "must not be empty" : "";
}

void print_error(const std::string& message) {
  std::string bare;
  std::string text = with_prefix(message, &bare);
  if (!g_json) {
    std::fprintf(stderr, "%s\n", text.c_str());
    return;
  }
  nlohmann::json out = {{"error", bare}};
  if (!g_command.empty()) out["command"] = g_command;
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void print_warning(const std::string& message) {
  std::fprintf(stderr, "%s\n", with_prefix(message).c_str());
}

}  // namespace kiln::tools
