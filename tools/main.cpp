// Entry point of the kiln CLI: parses the command line and dispatches to one command.
#include "tools/cli.h"

#include "cache/remote/redis.h"

#include <cstdio>
#include <exception>
#include <new>
#include <string>

int main(int argc, char** argv) {
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

void print_error(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
}
}  // namespace kiln::tools
