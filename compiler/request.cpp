// check_request(): arch, bucket, precision and attention, decided once per request.
#include "compiler/request.h"

#include "compiler/sizes.h"
#include "compiler/target.h"

namespace kiln::compiler {

Expected<CompileRequest> check_request(const ir::Graph& graph, const CompileOptions& options) {
  CompileRequest request;
  request.options = options;
  request.sm = options.target.is_cpu() ? k_cpu_modes_as_on_sm : options.target.sm;
  request.options.target.sm = request.sm;
  if (Status s = check_arch(request.sm, known_archs()); !s) return s.error();
  // A suffix set other than by parse_arch (an embedding's own Target).
  if (!options.target.is_cpu())
    if (Status s = check_suffix(options.target); !s) return s.error();
  if (Status s = check_bucket(graph, options.bucket); !s) return s.error();
  auto precision = resolve_precision(graph, request.options);
  if (!precision) return precision.error();
  request.precision = std::move(*precision);
  auto attention = plan_attention(graph, request.precision, options.fusion_fallback);
  if (!attention) return attention.error();
  request.attention = std::move(*attention);
  request.diagnostics.fallbacks = request.precision.fallbacks;
  request.diagnostics.fallbacks.insert(request.diagnostics.fallbacks.end(),
                                       request.attention.fallbacks.begin(),
                                       request.attention.fallbacks.end());
  return request;
}

}  // namespace kiln::compiler
