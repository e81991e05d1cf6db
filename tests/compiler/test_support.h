// Helpers shared by the compiler tests: graphs from text or examples/, option shorthands.
#pragma once

#include "compiler/compiler.h"
#include "ir/graph.h"

#include <string>
#include <vector>

namespace kiln::compiler::test {

// Parses graph text; throws (failing the test) on a parse error.
ir::Graph parse(const std::string& text);
// Parses examples/graphs/<name>.kg.
ir::Graph example(const std::string& name);
// The names of every example graph (attention, gated_mlp, ...), sorted.
std::vector<std::string> example_names();

// The kinds of fuse()'s groups, in order.
std::vector<GroupKind> kinds(const std::vector<KernelGroup>& groups);

// The text of a graph that adds `inputs` inputs of `type` (e.g. "f32[8]") one after another:
// x0 + x1, then + x2, ... (every input read once, one output).
std::string wide_sum(int inputs, const std::string& type);

CompileOptions options(int sm, ir::Precision precision,
                       FallbackPolicy fallback = FallbackPolicy::refuse);
// `o` with, for a symbolic graph, the bucket holding 37 (or the range's top, when lower) for
// every dim: kernels whose sizes are parameters.
CompileOptions with_bucket(const ir::Graph& graph, CompileOptions o);

// True when libnvrtc can be loaded here (tests that need it skip otherwise).
bool have_nvrtc();

// Number of non-overlapping occurrences of `needle` in `text`.
size_t count(const std::string& text, const std::string& needle);

}  // namespace kiln::compiler::test
