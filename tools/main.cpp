// Entry point of the kiln CLI: parses the command line and dispatches to one command.
#include "tools/cli.h"

#include "cache/remote/redis.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

namespace kiln::tools {
namespace {

// The command being run and whether it was asked for JSON: every error says which command it
// comes from, and with --json it is a JSON object on stdout, as the command's output would be.
std::string g_command;
bool g_json = false;

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
  app.set_version_flag("--version", "kiln 0.1.0");
  int exit_code = kiln::tools::k_exit_ok;
  kiln::tools::register_fmt_commands(app, exit_code);
  kiln::tools::register_audit_commands(app, exit_code);
  kiln::tools::register_run_commands(app, exit_code);
  kiln::tools::register_cache_commands(app, exit_code);
  kiln::tools::register_compile_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (kiln::tools::g_json && e.get_exit_code() != 0) {
      kiln::tools::print_error(std::string("kiln: ") + e.what());
      return kiln::tools::k_exit_usage;
    }
    int code = app.exit(e);
    return code == 0 ? 0 : kiln::tools::k_exit_usage;
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
    return value.empty() ? std::string("--cache-dir must name a directory") : std::string();
  });
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
