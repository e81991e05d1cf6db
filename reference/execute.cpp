// Runs a graph node by node on host tensors, checking its inputs and freeing each intermediate
// after its last use.
#include "reference/execute.h"

#include "reference/kernels.h"

#include <limits>
#include <new>
#include <string>

namespace kiln::reference {
namespace {

int64_t saturating_add(int64_t a, int64_t b) {
  if (a > std::numeric_limits<int64_t>::max() - b) return std::numeric_limits<int64_t>::max();
  return a + b;
}

int64_t saturating_mul(int64_t a, int64_t b) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a)
    return std::numeric_limits<int64_t>::max();
  return a * b;
}

Status check_inputs(const ir::Graph& graph, const std::vector<Tensor>& inputs) {
  if (inputs.size() != graph.inputs().size())
    return make_error("reference: graph '", graph.name(), "' takes ",
                      std::to_string(graph.inputs().size()), " inputs, got ",
                      std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Node& node = graph.node(graph.inputs()[i]);
    const Tensor& tensor = inputs[i];
    if (!(tensor.type() == node.type))
      return make_error("reference: input '", node.name, "' must be ", ir::to_string(node.type),
                        ", got ", ir::to_string(tensor.type()));
    if (tensor.values.size() != static_cast<size_t>(node.type.shape.elements()))
      return make_error("reference: input '", node.name, "' holds ",
                        std::to_string(tensor.values.size()), " values for ",
                        std::to_string(node.type.shape.elements()), " elements");
  }
  return Status::success();
}

Tensor run_node(const ir::Node& node, const std::vector<Tensor>& values, const RunMode& mode) {
  auto operand = [&](size_t i) -> const Tensor& {
    return values[static_cast<size_t>(node.operands[i])];
  };
  switch (ir::category(node.kind)) {
    case ir::OpCategory::matmul:
      return detail::run_matmul(node, operand(0), operand(1), mode);
    case ir::OpCategory::binary:
      return detail::run_binary(node, operand(0),
                                node.operands.size() > 1 ? &operand(1) : nullptr, mode);
    case ir::OpCategory::unary:
      return detail::run_unary(node, operand(0), mode);
    case ir::OpCategory::cast:
      return detail::run_cast(node, operand(0), mode);
    case ir::OpCategory::softmax:
      return detail::run_softmax(node, operand(0), mode);
    case ir::OpCategory::reduce:
      return detail::run_reduce(node, operand(0), mode);
    case ir::OpCategory::scan:
      return detail::run_scan(node, operand(0), mode);
    case ir::OpCategory::norm:
      return detail::run_norm(node, operand(0), operand(1),
                              node.operands.size() > 2 ? &operand(2) : nullptr, mode);
    case ir::OpCategory::layout: {
      std::vector<const Tensor*> operands;
      for (size_t i = 0; i < node.operands.size(); ++i) operands.push_back(&operand(i));
      return detail::run_layout(node, operands);
    }
    case ir::OpCategory::attention:
      return detail::run_attention(node, operand(0), operand(1), operand(2),
                                   node.operands.size() > 3 ? &operand(3) : nullptr, mode);
    case ir::OpCategory::gather: {
      // Row ids[i] of the table, or zeros for an id outside [0, V).
      const Tensor& table = operand(0);
      const Tensor& ids = operand(1);
      Tensor out = zeros(node.type);
      int64_t rows = table.shape.dim(0), width = table.shape.dim(1);
      for (size_t i = 0; i < ids.values.size(); ++i) {
        int64_t id = ids.integer(i);
        if (id < 0 || id >= rows) continue;
        auto r = static_cast<size_t>(id);
        for (int64_t d = 0; d < width; ++d)
          out.values[i * static_cast<size_t>(width) + static_cast<size_t>(d)] =
              table.values[r * static_cast<size_t>(width) + static_cast<size_t>(d)];
      }
      return out;
    }
    case ir::OpCategory::arange: {
      Tensor out = zeros(node.type);
      for (size_t i = 0; i < out.values.size(); ++i) {
        if (ir::is_float(out.dtype)) {
          out.values[i] = static_cast<double>(i);
        } else {
          out.set_integer(i, static_cast<int64_t>(i));
        }
      }
      return out;
    }
    case ir::OpCategory::select: {
      const Tensor* a = nullptr;
      const Tensor* b = nullptr;
      size_t next = 1;
      ir::LiteralSide side = node.attrs.literal_side;
      if (side == ir::LiteralSide::none || side == ir::LiteralSide::rhs) a = &operand(next++);
      if (side == ir::LiteralSide::none || side == ir::LiteralSide::lhs) b = &operand(next);
      return detail::run_where(node, operand(0), a, b, mode);
    }
    case ir::OpCategory::input:
      break;
  }
  return Tensor{};  // inputs are placed by run() itself
}

}  // namespace

RunCost estimate_cost(const ir::Graph& graph) {
  RunCost cost;
  for (const ir::Node& node : graph.nodes()) {
    int64_t elements = node.type.shape.elements();
    cost.bytes = saturating_add(cost.bytes,
                                saturating_mul(elements, host_bytes_per_element(node.type.dtype)));
    if (node.kind == ir::OpKind::attention) {
      // D multiply-adds per score, then Dv per score for the weighted sum of v.
      const ir::Shape& out = node.type.shape;
      const ir::Shape& q = graph.node(node.operands[0]).type.shape;
      const ir::Shape& k = graph.node(node.operands[1]).type.shape;
      int64_t dv = out.dim(out.rank() - 1);
      int64_t scores = saturating_mul(elements / dv, k.dim(k.rank() - 2));
      int64_t per_score = q.dim(q.rank() - 1) + dv;
      cost.multiply_adds = saturating_add(cost.multiply_adds, saturating_mul(scores, per_score));
      continue;
    }
    if (node.kind != ir::OpKind::matmul) continue;
    const ir::Shape& a = graph.node(node.operands[0]).type.shape;
    int64_t k = node.attrs.transpose_a ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
    cost.multiply_adds = saturating_add(cost.multiply_adds, saturating_mul(elements, k));
  }
  return cost;
}

Status check_limits(const ir::Graph& graph, RunLimits limits) {
  RunCost cost = estimate_cost(graph);
  if (cost.bytes > limits.max_bytes)
    return make_error("reference: graph '", graph.name(), "' needs ", std::to_string(cost.bytes),
                      " bytes of host tensors, above the limit of ",
                      std::to_string(limits.max_bytes), " bytes");
  return Status::success();
}

Expected<std::vector<Tensor>> run(const ir::Graph& graph, const std::vector<Tensor>& inputs,
                                  RunMode mode, RunLimits limits) {
  if (graph.symbolic()) {
    // Run at the sizes the inputs give: the static graph with those values written in.
    std::vector<std::vector<int64_t>> shapes;
    for (const Tensor& input : inputs) shapes.push_back(input.type().shape.dims());
    auto values = graph.symbol_values(shapes);
    if (!values) return make_error("reference: ", values.error().message);
    auto bound = graph.bind(*values);
    if (!bound) return make_error("reference: ", bound.error().message);
    return run(*bound, inputs, mode, limits);
  }
  if (mode.arithmetic == Arithmetic::emulated && mode.precision == ir::Precision::automatic)
    return make_error("reference: precision 'auto' must be resolved for an arch before running");
  if (Status status = check_inputs(graph, inputs); !status) return status.error();
  if (Status status = check_limits(graph, limits); !status) return status.error();
  try {
    std::vector<Tensor> values(graph.nodes().size());
    std::vector<int> remaining_uses = graph.use_counts();
    for (size_t i = 0; i < graph.inputs().size(); ++i)
      values[static_cast<size_t>(graph.inputs()[i])] = inputs[i];
    for (size_t id = 0; id < graph.nodes().size(); ++id) {
      const ir::Node& node = graph.nodes()[id];
      if (node.kind == ir::OpKind::input) continue;
      values[id] = run_node(node, values, mode);
      for (ir::NodeId operand : node.operands) {
        auto index = static_cast<size_t>(operand);
        if (--remaining_uses[index] == 0) {
          std::vector<double>().swap(values[index].values);
          std::vector<int64_t>().swap(values[index].exact);
        }
      }
    }
    std::vector<Tensor> outputs;
    outputs.reserve(graph.outputs().size());
    for (ir::NodeId id : graph.outputs()) outputs.push_back(values[static_cast<size_t>(id)]);
    return outputs;
  } catch (const std::bad_alloc&) {
    return make_error("reference: out of host memory running graph '", graph.name(), "' (",
                      std::to_string(estimate_cost(graph).bytes), " bytes of tensors)");
  }
}

}  // namespace kiln::reference
