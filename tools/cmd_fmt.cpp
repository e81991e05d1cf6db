// `kiln fmt FILE` and `kiln hash FILE`: the canonical form and the graph hash.
#include "tools/cli.h"

#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"

#include <cstdio>
#include <memory>

namespace kiln::tools {

void register_fmt_commands(CLI::App& app, int& exit_code) {
  auto file = std::make_shared<std::string>();
  CLI::App* fmt = app.add_subcommand("fmt", "print a graph in canonical form ('-' reads stdin)");
  fmt->add_option("FILE", *file, "graph file (.kg) or -")->required();
  fmt->callback([file, &exit_code] {
    auto graph = ir::parse_graph_file(*file);
    if (!graph) {
      print_error(graph.error().message);
      exit_code = k_exit_usage;
      return;
    }
    std::fputs(ir::print_graph(*graph).c_str(), stdout);
    exit_code = k_exit_ok;
  });

  auto hash_file = std::make_shared<std::string>();
  CLI::App* hash = app.add_subcommand("hash", "print a graph's hash (XXH3-128, 32 hex digits)");
  hash->add_option("FILE", *hash_file, "graph file (.kg) or -")->required();
  hash->callback([hash_file, &exit_code] {
    auto graph = ir::parse_graph_file(*hash_file);
    if (!graph) {
      print_error(graph.error().message);
      exit_code = k_exit_usage;
      return;
    }
    std::printf("%s\n", ir::graph_hash(*graph).hex().c_str());
    exit_code = k_exit_ok;
  });
}

}  // namespace kiln::tools
