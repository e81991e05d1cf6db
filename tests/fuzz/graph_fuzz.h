// What the graph fuzzers share: a result must hold a value or say why, and a graph's request for
// a target and mode, at its smallest bucket.
#pragma once

#include "compiler/request.h"
#include "compiler/sizes.h"
#include "ir/graph.h"
#include "support/expected.h"

#include <cstdlib>

namespace kiln::fuzz {

// Whether `result` holds a value; a failure must say why (else the fuzzer aborts).
template <class T>
bool holds(const Expected<T>& result) {
  if (!result && result.error().message.empty()) std::abort();
  return result.ok();
}

// check_request() of `graph` for `target` in `precision`, precision fallbacks allowed, a symbolic
// graph at the bucket of each symbol's smallest value.
inline Expected<compiler::CompileRequest> smallest_request(const ir::Graph& graph,
                                                           compiler::Target target,
                                                           ir::Precision precision) {
  compiler::CompileOptions options;
  options.target = std::move(target);
  options.precision = precision;
  compiler::set_fallback_policy(options, compiler::FallbackPolicy::allow, true);
  for (const ir::Symbol& symbol : graph.symbols()) {
    options.bucket.push_back(compiler::bucket_of(symbol.lo, symbol));
  }
  return compiler::check_request(graph, options);
}

}  // namespace kiln::fuzz
