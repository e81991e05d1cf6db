// A compile request checked once: the decisions every lowering needs before it starts.
#pragma once

#include "compiler/attention.h"
#include "compiler/options.h"
#include "compiler/precision.h"
#include "ir/graph.h"
#include "support/expected.h"

#include <string>
#include <vector>

namespace kiln::compiler {

// What a compile has to tell its caller, decided once by check_request() and carried through
// lowering into the artifact (Artifact::fallbacks) and the CLI's reports: every fallback line,
// precision ones first, then the attentions run unfused.
struct Diagnostics {
  std::vector<std::string> fallbacks;
};

// The options, checked (arch and bucket), with the graph's precision plan and attentions as
// resolved on `sm`. Built by check_request(); the cache key, lower() and the CPU target's
// lowering read it and neither check nor resolve again.
struct CompileRequest {
  CompileOptions options;
  int sm = 0;  // the arch modes resolve on: options.target.sm, or k_cpu_modes_as_on_sm on the CPU
  PrecisionPlan precision;
  AttentionPlan attention;
  Diagnostics diagnostics;
  // Every fallback line: precision ones first (diagnostics.fallbacks).
  const std::vector<std::string>& fallbacks() const { return diagnostics.fallbacks; }
};

// Checks the arch (kiln's table; the CPU target resolves modes as on sm_90) and the bucket,
// resolves the precision plan and finds the attentions: a refused combination or an unfused
// attention under a refusing policy fails here, naming op, reason and arch. Every error is the
// caller's input to fix. Loads no library.
Expected<CompileRequest> check_request(const ir::Graph& graph, const CompileOptions& options);

}  // namespace kiln::compiler
