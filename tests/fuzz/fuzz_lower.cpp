// libFuzzer entry: a graph that parses must lower for CUDA (three archs and modes) and have its
// cost estimated without a crash, a sanitizer report or an unbounded allocation; a lowering that
// fails says why. A symbolic graph is lowered at its smallest bucket.
#include "compiler/compiler.h"
#include "compiler/sizes.h"
#include "ir/parse.h"
#include "reference/execute.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

using namespace kiln;

void lower_for(const ir::Graph& graph, compiler::Target target, ir::Precision precision) {
  compiler::CompileOptions options;
  options.target = std::move(target);
  options.precision = precision;
  compiler::set_fallback_policy(options, compiler::FallbackPolicy::allow, true);
  for (const ir::Symbol& symbol : graph.symbols()) {
    options.bucket.push_back(compiler::bucket_of(symbol.lo, symbol));
  }
  auto program = compiler::lower(graph, options);
  if (!program) {
    if (program.error().message.empty()) std::abort();  // a failure must say why
    return;
  }
  if (program->kernel_sources.size() != program->plan.kernels.size()) std::abort();
  (void)compiler::program_source(*program, compiler::Prelude::omit);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto graph = ir::parse_graph(text, "fuzz.kg");
  if (!graph) return 0;
  (void)reference::estimate_cost(*graph);
  lower_for(*graph, compiler::Target::cuda(80), ir::Precision::high);
  lower_for(*graph, compiler::Target::cuda(90, "a"), ir::Precision::automatic);
  lower_for(*graph, compiler::Target::cuda(75), ir::Precision::tf32x3);
  return 0;
}
