// Precision resolution: auto per arch, per-op overrides, refusals and recorded fallbacks.
#include "compiler/precision.h"

#include "compiler/target.h"

namespace kiln::compiler {

std::string_view to_string(Numerics numerics) {
  switch (numerics) {
    case Numerics::fp32:
      return "fp32";
    case Numerics::tf32:
      return "tf32";
    case Numerics::tf32x3:
      return "tf32x3";
    case Numerics::bf16_of_f32:
      return "bf16f32";
    case Numerics::f16:
      return "f16";
    case Numerics::bf16:
      return "bf16";
  }
  return "?";
}

std::string_view to_string(MatmulPath path) {
  switch (path.strategy) {
    case MmaStrategy::ffma:
      return "ffma";
    case MmaStrategy::mma_sync:
      return to_string(path.numerics);
  }
  return "?";
}

bool uses_mma(MatmulPath path) {
  switch (path.strategy) {
    case MmaStrategy::ffma:
      return false;
    case MmaStrategy::mma_sync:
      return true;
  }
  return false;
}

std::string error_location(const ir::Graph& graph, ir::NodeId id) {
  const ir::Node& node = graph.node(id);
  if (graph.source_file().empty() || node.line <= 0) return {};
  return graph.source_file() + ":" + std::to_string(node.line) + ":" +
         std::to_string(node.column) + ": error: ";
}

std::string describe_node(const ir::Graph& graph, ir::NodeId id) {
  const ir::Node& node = graph.node(id);
  std::string op(ir::to_string(node.kind));
  if (!node.name.empty()) return op + " '" + node.name + "'";
  return op + " #" + std::to_string(id);
}

namespace {

struct Choice {
  MatmulPath path;
  const char* needs;  // empty when the arch can run it
};

Choice choose(ir::DType dtype, ir::Precision mode, int sm) {
  bool ampere = arch_has(sm, Feature::tf32_bf16_mma);
  if (dtype == ir::DType::f16) return {MatmulPath::f16, ""};
  if (dtype == ir::DType::bf16) {
    return {MatmulPath::bf16, ampere ? "" : "bf16 mma.sync needs sm_80 or newer"};
  }
  switch (mode) {
    case ir::Precision::highest:
    case ir::Precision::automatic:
      return {MatmulPath::ffma, ""};
    case ir::Precision::high:
      return {MatmulPath::tf32, ampere ? "" : "tf32 mma.sync needs sm_80 or newer"};
    case ir::Precision::tf32x3:
      return {MatmulPath::tf32x3, ampere ? "" : "tf32 mma.sync needs sm_80 or newer"};
    case ir::Precision::medium:
      return {MatmulPath::bf16_of_f32, ampere ? "" : "bf16 mma.sync needs sm_80 or newer"};
  }
  return {MatmulPath::ffma, ""};
}

}  // namespace

ir::Precision automatic_precision(int sm) {
  return arch_has(sm, Feature::tf32_bf16_mma) ? ir::Precision::high : ir::Precision::highest;
}

Expected<PrecisionPlan> resolve_precision(const ir::Graph& graph, const CompileOptions& options) {
  PrecisionPlan plan;
  plan.graph_mode = options.precision;
  int sm = options.target.sm;
  // "sm_90a" for that target; the CPU target's modes are those of sm_90.
  std::string arch = options.target.arch().empty() ? arch_name(sm) : options.target.arch();
  if (options.precision == ir::Precision::automatic) {
    plan.graph_mode = automatic_precision(sm);
    plan.decision = "auto -> " + std::string(ir::to_string(plan.graph_mode)) + " on " + arch +
                    (arch_has(sm, Feature::tf32_bf16_mma) ? " (tf32 tensor cores available)"
                                                          : " (no tf32 before sm_80)");
  } else {
    plan.decision = std::string(ir::to_string(plan.graph_mode)) + " on " + arch;
  }
  plan.paths.assign(graph.nodes().size(), MatmulPath::ffma);
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const ir::Node& node = graph.nodes()[i];
    if (node.kind != ir::OpKind::matmul && node.kind != ir::OpKind::attention) continue;
    auto id = static_cast<ir::NodeId>(i);
    ir::DType dtype = graph.node(node.operands[0]).type.dtype;
    ir::Precision mode = node.attrs.precision.value_or(plan.graph_mode);
    Choice choice = choose(dtype, mode, sm);
    if (*choice.needs == '\0') {
      plan.paths[i] = choice.path;
      continue;
    }
    std::string what = describe_node(graph, id) + " (" + std::string(ir::to_string(dtype)) +
                       ", precision " + std::string(ir::to_string(mode)) + ") on " + arch;
    if (options.fallback == FallbackPolicy::refuse) {
      return make_error(
          error_location(graph, id), what, ": ", choice.needs,
          "; to run it as fp32 ffma (highest), allow fallbacks (`kiln compile --allow-fallback`, "
          "RuntimeOptions::allow_fallback)");
    }
    plan.paths[i] = MatmulPath::ffma;
    plan.fallbacks.push_back(what + ": " + choice.needs + "; fell back to fp32 ffma (highest)");
  }
  return plan;
}

}  // namespace kiln::compiler
