// The Executable of a symbolic graph (`dim B: 1..4096`): a bucket's entry compiled on first use.
#pragma once

#include "compiler/options.h"
#include "compiler/request.h"
#include "runtime/compile_service.h"
#include "runtime/executable_impl.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime {

// Compiles one bucket of the graph (through the cache) into an executable of its own.
using CompileBucket = std::function<Expected<std::shared_ptr<Executable>>(
    const std::vector<compiler::DimRange>& bucket)>;

// run() reads the dims' values from the input shapes, checks them against their ranges and
// runs the bucket holding them, compiling it with `compile` on first use (once per bucket,
// other buckets' runs going on meanwhile; a failed compile's error is kept); prepare(values)
// compiles and prepares ahead of time. `request` is the graph's checked request (its precision
// and fallbacks).
std::shared_ptr<Executable> make_symbolic_executable(const ir::Graph& graph,
                                                     CompileBucket compile, int device,
                                                     std::string arch, bool on_host,
                                                     const compiler::CompileRequest& request,
                                                     std::string graph_hash);

}  // namespace kiln::runtime
