// Buckets of symbol ranges and the extents kernels compute with.
#include "compiler/sizes.h"

#include <algorithm>
#include <charconv>

namespace kiln::compiler {

DimRange bucket_of(int64_t value, const ir::Symbol& symbol) {
  int64_t hi = 1;
  while (hi < value) hi *= 2;
  int64_t lo = hi <= 2 ? hi : hi / 2 + 1;
  return {std::max(lo, symbol.lo), std::min(hi, symbol.hi)};
}

std::vector<DimRange> buckets(const ir::Symbol& symbol) {
  std::vector<DimRange> out;
  for (int64_t v = symbol.lo; v <= symbol.hi;) {
    out.push_back(bucket_of(v, symbol));
    v = out.back().hi + 1;
  }
  return out;
}

std::string to_string(const DimRange& range) {
  return "[" + std::to_string(range.lo) + ", " + std::to_string(range.hi) + "]";
}

namespace {

std::string list_symbols(const ir::Graph& graph) {
  std::string text;
  for (const ir::Symbol& s : graph.symbols()) text += (text.empty() ? "" : ", ") + ir::describe(s);
  return text;
}

}  // namespace

Status check_bucket(const ir::Graph& graph, const std::vector<DimRange>& bucket) {
  const auto& symbols = graph.symbols();
  if (symbols.empty() && !bucket.empty())
    return make_error("graph '", graph.name(), "' has no symbolic dims; it takes no sizes");
  if (!symbols.empty() && bucket.empty())
    return make_error("graph '", graph.name(), "' has symbolic dims (", list_symbols(graph),
                      "): give their sizes, e.g. --dims ", symbols[0].name, "=",
                      std::to_string(symbols[0].hi));
  if (bucket.size() != symbols.size())
    return make_error("graph '", graph.name(), "' has ", std::to_string(symbols.size()),
                      " symbolic dims; the bucket gives ", std::to_string(bucket.size()));
  for (size_t i = 0; i < symbols.size(); ++i) {
    const DimRange& range = bucket[i];
    if (range.lo < symbols[i].lo || range.hi > symbols[i].hi || range.lo > range.hi ||
        bucket_of(range.lo, symbols[i]) != range)
      return make_error(to_string(range), " is not a bucket of ", ir::describe(symbols[i]));
  }
  return Status::success();
}

Expected<std::vector<std::optional<int64_t>>> parse_dims(std::string_view text,
                                                         const ir::Graph& graph) {
  const auto& symbols = graph.symbols();
  if (symbols.empty())
    return make_error("graph '", graph.name(), "' has no symbolic dims; drop --dims");
  std::vector<std::optional<int64_t>> values(symbols.size());
  std::vector<bool> given(symbols.size(), false);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find(',', start), text.size());
    std::string_view item = text.substr(start, end - start);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return make_error("--dims: expected NAME=VALUE (or NAME=all), got '", std::string(item), "'");
    std::string name(item.substr(0, eq));
    std::string_view value = item.substr(eq + 1);
    size_t index = symbols.size();
    for (size_t i = 0; i < symbols.size(); ++i)
      if (symbols[i].name == name) index = i;
    if (index == symbols.size())
      return make_error("--dims: '", name, "' is not a dim of graph '", graph.name(),
                        "'; its dims: ", list_symbols(graph));
    if (given[index]) return make_error("--dims: '", name, "' is given twice");
    given[index] = true;
    if (value != "all") {
      int64_t v = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec == std::errc::result_out_of_range && ptr == value.data() + value.size())
        return make_error("--dims: ", name, " = ", std::string(value), " is outside its range ",
                          std::to_string(symbols[index].lo), "..",
                          std::to_string(symbols[index].hi));
      if (ec != std::errc() || ptr != value.data() + value.size())
        return make_error("--dims: ", name, "=", std::string(value),
                          " is not a whole number (or 'all')");
      if (v < symbols[index].lo || v > symbols[index].hi)
        return make_error("--dims: ", name, " = ", std::to_string(v), " is outside its range ",
                          std::to_string(symbols[index].lo), "..", std::to_string(symbols[index].hi));
      values[index] = v;
    }
    start = end + 1;
  }
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (!given[i])
      return make_error("--dims: no value for ", ir::describe(symbols[i]), " (give ",
                        symbols[i].name, "=N or ", symbols[i].name, "=all)");
  }
  return values;
}

std::vector<std::vector<DimRange>> buckets_for(const ir::Graph& graph,
                                               const std::vector<std::optional<int64_t>>& values) {
  std::vector<std::vector<DimRange>> out = {{}};
  for (size_t i = 0; i < values.size() && i < graph.symbols().size(); ++i) {
    const ir::Symbol& symbol = graph.symbols()[i];
    std::vector<DimRange> choices =
        values[i] ? std::vector<DimRange>{bucket_of(*values[i], symbol)} : buckets(symbol);
    std::vector<std::vector<DimRange>> next;
    for (const auto& prefix : out) {
      for (const DimRange& range : choices) {
        next.push_back(prefix);
        next.back().push_back(range);
      }
    }
    out = std::move(next);
  }
  return out;
}

std::string Extent::expr() const {
  if (symbols.empty()) return std::to_string(coef);
  std::string text;
  for (uint32_t s : symbols) text += (text.empty() ? "" : " * ") + std::string(k_dim_param) + std::to_string(s);
  if (coef != 1) text += " * " + std::to_string(coef);
  return symbols.size() == 1 && coef == 1 ? text : "(" + text + ")";
}

Extent Extent::operator*(const Extent& other) const {
  Extent out;
  out.coef = coef * other.coef;
  out.symbols = symbols;
  out.symbols.insert(out.symbols.end(), other.symbols.begin(), other.symbols.end());
  std::sort(out.symbols.begin(), out.symbols.end());
  out.lo = lo * other.lo;
  out.hi = hi * other.hi;
  return out;
}

Extent batch_dims_after(const MatmulExtents& e, int d) {
  Extent after = Extent::constant(1);
  for (size_t j = static_cast<size_t>(d) + 1; j < e.batch_dims.size(); ++j) after = after * e.batch_dims[j];
  return after;
}

std::vector<OperandBatchDim> operand_batch_dims(const MatmulExtents& e, int rank, bool b) {
  std::vector<OperandBatchDim> dims;
  auto add = [&](int dim, const Extent& size, const Extent& stride) {
    if (stride.coef != 0) dims.push_back({dim, size, stride});
  };
  if (e.per_dim()) {
    const std::vector<Extent>& strides = b ? e.b_dim_strides : e.a_dim_strides;
    for (int d = static_cast<int>(e.batch_dims.size()) - 1; d >= 0; --d)
      add(d, e.batch_dims[static_cast<size_t>(d)], strides[static_cast<size_t>(d)]);
  } else if (rank == 4) {
    add(1, e.inner_batch, b ? e.b_batch_stride : e.a_batch_stride);
    add(0, e.outer_batch, b ? e.b_outer_stride : e.a_outer_stride);
  } else if (rank == 3) {
    add(0, e.batch, b ? e.b_batch_stride : e.a_batch_stride);
  }
  return dims;
}

SizeTerm Extent::term(int64_t divisor) const {
  return SizeTerm{coef, symbols, divisor};
}

Sizes::Sizes(ir::Graph graph, std::vector<DimRange> bucket)
    : m_graph(std::move(graph)), m_bucket(std::move(bucket)) {}

Extent Sizes::dim(ir::NodeId id, int axis) const {
  const ir::Shape& shape = m_graph.node(id).type.shape;
  int32_t s = shape.symbol(axis);
  if (s < 0) return Extent::constant(shape.dim(axis));
  const DimRange& range = m_bucket[static_cast<size_t>(s)];
  if (range.lo == range.hi) return Extent::constant(range.hi);
  return {1, {static_cast<uint32_t>(s)}, range.lo, range.hi};
}

Extent Sizes::product(ir::NodeId id, int from, int to) const {
  Extent out;
  for (int d = from; d < to; ++d) out = out * dim(id, d);
  return out;
}

Extent Sizes::elements(ir::NodeId id) const {
  return product(id, 0, m_graph.node(id).type.shape.rank());
}

}  // namespace kiln::compiler
