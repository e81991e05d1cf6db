// The precision audit behind `kiln audit`: per-output tolerances and the fp64 comparison.
#include "reference/audit.h"

#include "reference/metrics.h"
#include "reference/tensor.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>

namespace kiln::reference {
namespace {

std::string scientific(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2e", value);
  return buffer;
}

}  // namespace

double tolerance(ir::Precision precision) {
  switch (precision) {
    case ir::Precision::highest:
      return k_tolerance_highest;
    case ir::Precision::high:
      return k_tolerance_high;
    case ir::Precision::tf32x3:
      return k_tolerance_tf32x3;
    case ir::Precision::medium:
      return k_tolerance_medium;
    case ir::Precision::automatic:
      break;
  }
  assert(false && "tolerance of an unresolved precision");
  return k_tolerance_highest;
}

double tolerance(ir::Precision precision, int64_t k) {
  double sum = k_tolerance_sum_growth * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1))) *
               std::ldexp(1.0, -24);
  return std::max(tolerance(precision), sum);
}

double half_product_tolerance(int64_t k) {
  return std::max(k_tolerance_highest,
                  static_cast<double>(std::max<int64_t>(k, 1)) * std::ldexp(1.0, -24));
}

namespace {

// The most terms one sum of `node` (a matmul or attention) runs over.
int64_t longest_sum(const ir::Graph& graph, const ir::Node& node) {
  const ir::Shape& a = graph.node(node.operands[0]).type.shape;
  if (node.kind == ir::OpKind::matmul)
    return a.dim(a.rank() - (node.attrs.transpose_a ? 2 : 1));
  const ir::Shape& k = graph.node(node.operands[1]).type.shape;
  return std::max(a.dim(a.rank() - 1), k.dim(k.rank() - 2));  // head dim, keys
}

}  // namespace

double output_tolerance(const ir::Graph& graph, ir::NodeId output, ir::Precision precision) {
  double result = k_tolerance_highest;
  bool float_math = false;  // a float value computed on the way: rounding can reach the output
  std::vector<bool> seen(graph.nodes().size(), false);
  std::vector<ir::NodeId> stack{output};
  seen[static_cast<size_t>(output)] = true;
  while (!stack.empty()) {
    const ir::Node& node = graph.node(stack.back());
    stack.pop_back();
    // A value computed in f16/bf16 rounds there; an f16/bf16 input is read exactly (into an
    // out_dtype=f32 matmul's fp32 sums, or a cast to f32).
    bool computed = node.kind != ir::OpKind::input;
    if (ir::is_float(node.type.dtype) && node.type.dtype != ir::DType::f32 && computed)
      result = std::max(result, k_tolerance_half);
    if (ir::is_float(node.type.dtype) && computed) float_math = true;
    bool products = node.kind == ir::OpKind::matmul || node.kind == ir::OpKind::attention;
    if (products && node.type.dtype == ir::DType::f32) {
      // f16/bf16 operands take no mode: exact products, truncated fp32 sums.
      int64_t k = longest_sum(graph, node);
      result = std::max(result, graph.node(node.operands[0]).type.dtype == ir::DType::f32
                                    ? tolerance(node.attrs.precision.value_or(precision), k)
                                    : half_product_tolerance(k));
    }
    for (ir::NodeId operand : node.operands) {
      if (seen[static_cast<size_t>(operand)]) continue;
      seen[static_cast<size_t>(operand)] = true;
      stack.push_back(operand);
    }
  }
  // An integer or bool output computed from integers and bools alone (casts of float inputs
  // included) is exact.
  if (!ir::is_float(graph.node(output).type.dtype) && !float_math) return 0.0;
  return result;
}

Status check_embedding_ids(const ir::Graph& graph, const std::vector<const Tensor*>& inputs) {
  for (const ir::EmbeddingIds& e : ir::embedding_ids(graph)) {
    if (e.input >= inputs.size() || inputs[e.input] == nullptr) continue;
    const Tensor& t = *inputs[e.input];
    for (size_t i = 0; i < t.values.size(); ++i) {
      int64_t id = t.integer(i);
      if (id >= 0 && id < e.rows) continue;
      return make_error(ir::embedding_id_error(graph.node(graph.inputs()[e.input]).name, id,
                                               static_cast<int64_t>(i), t.shape.dims(),
                                               graph.node(e.table).name, e.rows));
    }
  }
  return Status::success();
}

Expected<std::vector<Tensor>> make_inputs(const ir::Graph& graph, InputSource source) {
  std::vector<Tensor> inputs = random_inputs(graph, source.seed);
  if (source.given.empty()) return inputs;
  if (source.given.size() != inputs.size())
    return make_error("graph '", graph.name(), "' takes ", std::to_string(inputs.size()),
                      " inputs, ", std::to_string(source.given.size()), " given");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!source.given[i]) continue;
    const ir::Node& input = graph.node(graph.inputs()[i]);
    if (!(source.given[i]->type() == input.type))
      return make_error("input '", input.name, "' is ", ir::to_string(input.type), ", given ",
                        ir::to_string(source.given[i]->type()));
    inputs[i] = std::move(*source.given[i]);
  }
  std::vector<const Tensor*> all;
  for (const Tensor& t : inputs) all.push_back(&t);
  if (Status s = check_embedding_ids(graph, all); !s) return s.error();
  return inputs;
}

Expected<AuditReport> audit(const ir::Graph& graph, ir::Precision precision, uint64_t seed,
                            RunLimits limits) {
  auto run = audit(graph, precision, InputSource{seed, {}}, limits);
  if (!run) return run.error();
  return std::move(run->report);
}

Expected<AuditRun> audit(const ir::Graph& graph, ir::Precision precision, InputSource source,
                         RunLimits limits) {
  if (precision == ir::Precision::automatic)
    return make_error("audit: precision 'auto' must be resolved for an arch first");
  if (Status s = check_limits(graph, limits); !s) return s.error();
  uint64_t seed = source.seed;
  auto inputs = make_inputs(graph, std::move(source));
  if (!inputs) return inputs.error();
  auto truth = run(graph, *inputs, RunMode::fp64(), limits);
  if (!truth) return truth.error();
  auto emulated = run(graph, *inputs, RunMode::emulate(precision), limits);
  if (!emulated) return emulated.error();

  AuditReport report;
  report.precision = precision;
  report.seed = seed;
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    ir::NodeId id = graph.outputs()[i];
    OutputAudit out;
    out.name = graph.node(id).name;
    out.rel_l2 = relative_l2((*emulated)[i], (*truth)[i]);
    out.max_abs = max_abs_error((*emulated)[i], (*truth)[i]);
    out.tolerance = output_tolerance(graph, id, precision);
    out.ok = out.rel_l2 <= out.tolerance;
    if (!out.ok)
      report.warnings.push_back("output '" + out.name + "': relative l2 error " +
                                scientific(out.rel_l2) + " exceeds the tolerance " +
                                scientific(out.tolerance) + " of precision " +
                                std::string(ir::to_string(precision)));
    report.outputs.push_back(std::move(out));
  }
  return AuditRun{std::move(report), std::move(*emulated), std::move(*truth)};
}

}  // namespace kiln::reference
