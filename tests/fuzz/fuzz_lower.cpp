// libFuzzer entry: a graph that parses must lower for CUDA (three archs and modes), have its cost
// estimated and, where that is small (1 MiB of host tensors, 2^20 multiply-adds), run on the
// reference in fp64 and in `high`'s emulated rounding (an audit), without a crash, a sanitizer
// report or an unbounded allocation; a lowering or a run that fails says why. sm_80 is lowered as
// the emulate target does it, and its artifact must write and read back the same. A symbolic
// graph is lowered at its smallest bucket and run at its dims' smallest values.
#include "compiler/compiler.h"
#include "compiler/sizes.h"
#include "ir/parse.h"
#include "tests/fuzz/graph_fuzz.h"
#include "reference/audit.h"
#include "reference/execute.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

using namespace kiln;
using fuzz::holds;

void lower_for(const ir::Graph& graph, compiler::Target target, ir::Precision precision) {
  bool emulated = target.is_emulated();
  auto request = fuzz::smallest_request(graph, std::move(target), precision);
  if (!holds(request)) return;
  if (!emulated) {
    auto program = compiler::lower(graph, *request);
    if (!holds(program)) return;
    if (program->kernel_sources.size() != program->plan.kernels.size()) std::abort();
    (void)compiler::program_source(*program, compiler::Prelude::omit);
    return;
  }
  // The emulate target's artifact (lower() with its schedule, the kernels' source, no NVRTC) is
  // written and read back whole.
  auto artifact = compiler::compile_emulated(graph, *request);
  if (!holds(artifact)) return;
  auto back = compiler::deserialize(compiler::serialize(*artifact));
  if (!back) {
    std::fprintf(stderr, "an artifact does not read back: %s\n", back.error().message.c_str());
    std::abort();
  }
  if (!(*back == *artifact)) std::abort();
}

void run_reference(const ir::Graph& graph) {
  std::vector<int64_t> lows;
  for (const ir::Symbol& symbol : graph.symbols()) lows.push_back(symbol.lo);
  auto bound = graph.bind(lows);
  if (!holds(bound)) return;
  reference::RunCost cost = reference::estimate_cost(*bound);
  constexpr int64_t k_bytes = int64_t{1} << 20;
  if (cost.bytes > k_bytes || cost.multiply_adds > (int64_t{1} << 20)) return;
  auto report = reference::audit(*bound, ir::Precision::high, 0, reference::RunLimits{k_bytes});
  (void)holds(report);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto graph = ir::parse_graph(text, "fuzz.kg");
  if (!graph) return 0;
  run_reference(*graph);
  compiler::Target sm80 = compiler::Target::cuda(80);
  sm80.kind = compiler::Target::Kind::emulate;
  lower_for(*graph, sm80, ir::Precision::high);
  lower_for(*graph, compiler::Target::cuda(90, "a"), ir::Precision::automatic);
  lower_for(*graph, compiler::Target::cuda(75), ir::Precision::tf32x3);
  return 0;
}
