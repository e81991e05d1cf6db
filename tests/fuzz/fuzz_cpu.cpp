// libFuzzer entry: the CPU target's code generation. A graph that parses and plans for the CPU
// must build as LLVM IR (compiler/cpu/codegen.h) for two machines (AVX2's 8-float vectors and
// AVX-512's 16) in four modes, and that IR must pass LLVM's verifier, without a crash, a sanitizer
// report or an unbounded allocation. A plan that fails says why; IR the verifier refuses is a bug
// of the builders (their error names it), so the fuzzer aborts on it. A symbolic graph is built
// at its smallest bucket. Nothing is optimised or compiled to object code: LLVM's own passes are
// not what is fuzzed.
#include "compiler/compiler.h"
#include "compiler/cpu/codegen.h"
#include "compiler/cpu/impl.h"
#include "compiler/target.h"
#include "ir/parse.h"
#include "tests/fuzz/graph_fuzz.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

namespace {

using namespace kiln;
using fuzz::holds;

// An x86-64 machine LLVM knows (the fuzzer is built for x86-64 hosts); anything else aborts.
compiler::cpu::CpuMachine known_machine(const char* cpu) {
  auto machine = compiler::cpu::impl::cpu_machine(cpu, "");
  if (!machine) {
    std::fprintf(stderr, "fuzz_cpu: %s: %s\n", cpu, machine.error().message.c_str());
    std::abort();
  }
  return *machine;
}

const compiler::cpu::CpuMachine& machine(bool avx512) {
  static const compiler::cpu::CpuMachine machines[2] = {known_machine("x86-64-v3"),
                                                        known_machine("x86-64-v4")};
  return machines[avx512 ? 1 : 0];
}

// Plans `graph` as compile_cpu() does, then builds its module for both machines.
void build_for_cpu(const ir::Graph& graph, ir::Precision precision) {
  // Target::for_cpu sets sm to k_cpu_modes_as_on_sm, as compile_cpu() requires of a request.
  auto request = fuzz::smallest_request(graph, compiler::Target::for_cpu("x86-64-v3", ""),
                                        precision);
  if (!holds(request)) return;
  auto planned = compiler::plan_program(graph, *request);
  if (!holds(planned)) return;
  for (bool avx512 : {false, true}) {
    llvm::LLVMContext context;
    llvm::Module module("kiln", context);
    auto kernels = compiler::cpu::build_module(module, planned->bound, planned->plan,
                                               planned->sizes, machine(avx512).facts);
    if (!holds(kernels)) {
      // build_module fails only where LLVM's verifier refuses the IR: a bug of the builders.
      std::fprintf(stderr, "%s\n", kernels.error().message.c_str());
      std::abort();
    }
    if (kernels->size() != planned->plan.kernels.size()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto graph = ir::parse_graph(text, "fuzz.kg");
  if (!graph) return 0;
  for (ir::Precision precision : {ir::Precision::highest, ir::Precision::high,
                                  ir::Precision::tf32x3, ir::Precision::medium}) {
    build_for_cpu(*graph, precision);
  }
  return 0;
}
