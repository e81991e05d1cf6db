// Builder: validating constructors for every op kind, shape/dtype inference, and graph checks.
#include "ir/graph.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <optional>
#include <utility>

namespace kiln::ir {

namespace {

struct OpInfo {
  std::string_view name;
  int min_operands;
  int max_operands;
  OpCategory category;
  FusionClass fusion;
  ResultDType result;
};

constexpr std::array k_ops = {
#define KILN_OP(op, min_operands, max_operands, cat, fusion, result)                        \
  OpInfo{#op, min_operands, max_operands, OpCategory::cat, FusionClass::fusion,            \
         ResultDType::result},
#include "ir/ops.def"
};

const OpInfo& info(OpKind kind) { return k_ops[static_cast<size_t>(kind)]; }

std::string describe(const Node& node) {
  if (!node.name.empty()) return "'" + node.name + "' (" + to_string(node.type) + ")";
  return std::string(to_string(node.kind)) + " result (" + to_string(node.type) + ")";
}

// One dimension of a shape as broadcasting sees it: a constant, or symbol `symbol`.
struct DimRef {
  int64_t value = 1;
  SymbolicDim symbol;
};

DimRef dim_ref(const Shape& shape, int i) {
  if (i < 0) return {};
  DimRef d{shape.dim(i), {}};
  if (shape.symbol(i) >= 0) d.symbol = shape.symbols()[static_cast<size_t>(i)];
  return d;
}

std::string show(const DimRef& d) {
  return d.symbol.index >= 0 ? d.symbol.name : std::to_string(d.value);
}

// Broadcasts one pair of dims: equal constants or equal symbols match, 1 broadcasts against
// anything; nullopt when they do not broadcast.
std::optional<DimRef> broadcast_dim(const DimRef& a, const DimRef& b) {
  bool sa = a.symbol.index >= 0, sb = b.symbol.index >= 0;
  if (sa && sb) return a.symbol.index == b.symbol.index ? std::optional(a) : std::nullopt;
  if (sa) return !sb && b.value == 1 ? std::optional(a) : std::nullopt;
  if (sb) return a.value == 1 ? std::optional(b) : std::nullopt;
  if (a.value != b.value && a.value != 1 && b.value != 1) return std::nullopt;
  return a.value >= b.value ? a : b;
}

Expected<Shape> make_shape(const std::vector<DimRef>& dims) {
  std::vector<int64_t> values;
  std::vector<SymbolicDim> symbols;
  for (const DimRef& d : dims) {
    values.push_back(d.value);
    symbols.push_back(d.symbol);
  }
  return Shape::make(std::move(values), std::move(symbols));
}

const char* k_symbol_rule =
    "; a symbolic dimension matches only itself or 1";

// Two dims that do not broadcast, as found by broadcast_batch.
struct DimClash {
  DimRef have;
  DimRef got;
};

// Broadcasts the batch dims of `shape` (all but its last two) into `batch`, both aligned at their
// last batch dim and `batch` growing on the left as needed, as matmul's and attention's operands
// broadcast; on a clash, `batch` is left unspecified and the clashing pair is returned.
std::optional<DimClash> broadcast_batch(std::vector<DimRef>& batch, const Shape& shape) {
  int shape_batch = shape.rank() - 2;
  int grow = shape_batch - static_cast<int>(batch.size());
  if (grow > 0) batch.insert(batch.begin(), static_cast<size_t>(grow), DimRef{});
  int offset = static_cast<int>(batch.size()) - shape_batch;
  for (int i = 0; i < shape_batch; ++i) {
    DimRef& have = batch[static_cast<size_t>(offset + i)];
    DimRef got = dim_ref(shape, i);
    auto d = broadcast_dim(have, got);
    if (!d) return DimClash{have, got};
    have = *d;
  }
  return std::nullopt;
}

// numpy broadcasting of two shapes, aligned at their last dimension.
Expected<Shape> broadcast(const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<DimRef> dims(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    DimRef da = dim_ref(a, a.rank() - rank + i);
    DimRef db = dim_ref(b, b.rank() - rank + i);
    auto d = broadcast_dim(da, db);
    if (!d) {
      bool symbolic = da.symbol.index >= 0 || db.symbol.index >= 0;
      return make_error("shapes ", to_string(a), " and ", to_string(b),
                        " do not broadcast: dimension ", std::to_string(i), " is ", show(da),
                        " against ", show(db), symbolic ? k_symbol_rule : "");
    }
    dims[static_cast<size_t>(i)] = *d;
  }
  return make_shape(dims);
}

}  // namespace

namespace {

// The kinds the text writes as another op with an attribute (see ops.def): their text name.
struct Spelling {
  OpKind kind;
  std::string_view written_as;
};
constexpr std::array k_spellings = {Spelling{OpKind::gelu_tanh, "gelu"}};

const Spelling* spelling(OpKind kind) {
  for (const Spelling& s : k_spellings)
    if (s.kind == kind) return &s;
  return nullptr;
}

}  // namespace

std::string_view to_string(OpKind kind) {
  if (const Spelling* s = spelling(kind)) return s->written_as;
  return info(kind).name;
}

std::optional<OpKind> parse_op_kind(std::string_view text) {
  for (size_t i = 0; i < k_ops.size(); ++i) {
    auto kind = static_cast<OpKind>(i);
    if (k_ops[i].name == text && !spelling(kind)) return kind;
  }
  return std::nullopt;
}

std::optional<OpKind> approximate_kind(OpKind kind, std::string_view approximate) {
  if (kind != OpKind::gelu && kind != OpKind::gelu_tanh) return std::nullopt;
  if (approximate == "none") return OpKind::gelu;
  if (approximate == "tanh") return OpKind::gelu_tanh;
  return std::nullopt;
}

std::string_view approximate_of(OpKind kind) {
  return kind == OpKind::gelu_tanh ? "tanh" : "none";
}

OpCategory category(OpKind kind) { return info(kind).category; }
FusionClass fusion_class(OpKind kind) { return info(kind).fusion; }
ResultDType result_dtype(OpKind kind) { return info(kind).result; }
int min_operands(OpKind kind) { return info(kind).min_operands; }
int max_operands(OpKind kind) { return info(kind).max_operands; }

std::string op_names() {
  std::string names;
  size_t written = 0, count = k_ops.size() - 1 - k_spellings.size();  // every op but input
  for (size_t i = 0; i < k_ops.size(); ++i) {
    const OpInfo& op = k_ops[i];
    if (op.category == OpCategory::input || spelling(static_cast<OpKind>(i))) continue;
    if (written) names += ++written == count ? " or " : ", ";
    else ++written;
    names += op.name;
  }
  return names;
}

Attrs default_attrs(OpKind kind) {
  Attrs attrs;
#define KILN_DEFAULT(op, attribute, value) \
  if (kind == OpKind::op) attrs.attribute = value;
#include "ir/ops.def"
  return attrs;
}

std::string describe(const Symbol& symbol) {
  return symbol.name + " in " + std::to_string(symbol.lo) + ".." + std::to_string(symbol.hi);
}

Builder::Builder(std::string graph_name) : m_name(std::move(graph_name)) {}

Expected<int32_t> Builder::add_symbol(std::string name, int64_t lo, int64_t hi) {
  if (name.empty()) return make_error("a dim needs a name");
  if (find_symbol(name)) return make_error("dim '", name, "' is already declared");
  if (m_names.count(name))
    return make_error("'", name, "' names a value; a dim needs a name of its own");
  if (!m_inputs.empty())
    return make_error("dim '", name, "' comes after an input; declare dims before the inputs");
  if (lo < 1)
    return make_error("dim '", name, "' starts at ", std::to_string(lo),
                      "; a dimension is at least 1");
  if (hi > k_max_symbol_value)
    return make_error("dim '", name, "' ends at ", std::to_string(hi),
                      ", above kiln's limit of 2^31 - 1");
  if (lo > hi)
    return make_error("dim '", name, "' has the inverted range ", std::to_string(lo), "..",
                      std::to_string(hi), "; write LO..HI with LO <= HI");
  m_symbols.push_back({std::move(name), lo, hi});
  return static_cast<int32_t>(m_symbols.size() - 1);
}

std::optional<int32_t> Builder::find_symbol(std::string_view name) const {
  for (size_t i = 0; i < m_symbols.size(); ++i)
    if (m_symbols[i].name == name) return static_cast<int32_t>(i);
  return std::nullopt;
}

void Builder::set_symbol_location(int32_t index, int line, int column) {
  if (index < 0 || static_cast<size_t>(index) >= m_symbols.size()) return;
  m_symbols[static_cast<size_t>(index)].line = line;
  m_symbols[static_cast<size_t>(index)].column = column;
}

bool is_comparison(OpKind kind) {
  return kind == OpKind::eq || kind == OpKind::ne || kind == OpKind::lt || kind == OpKind::le ||
         kind == OpKind::gt || kind == OpKind::ge;
}

bool is_exact_op(OpKind kind, DType dtype) {
  return !is_float(dtype) || is_comparison(kind) || kind == OpKind::logical_and ||
         kind == OpKind::logical_or || kind == OpKind::logical_not;
}

namespace {

// Why `kind` cannot take operands of `dtype` (empty when it can).
std::string dtype_refusal(OpKind kind, DType dtype) {
  std::string op(to_string(kind)), d(to_string(dtype));
  bool logical = kind == OpKind::logical_and || kind == OpKind::logical_or ||
                 kind == OpKind::logical_not;
  if (logical) return dtype == DType::boolean ? "" : op + " takes bool operands, got " + d;
  if (is_comparison(kind)) return "";
  if (dtype == DType::boolean)
    return op + " does no arithmetic on bool; use logical_and, logical_or, logical_not or where";
  if (kind == OpKind::floor_divide || kind == OpKind::remainder) {
    if (is_integer(dtype)) return "";
    return op + " takes integer operands, got " + d + " (for floats, div)";
  }
  bool integer_ok = kind == OpKind::add || kind == OpKind::sub || kind == OpKind::mul ||
                    kind == OpKind::maximum || kind == OpKind::minimum || kind == OpKind::neg ||
                    kind == OpKind::abs;
  if (is_integer(dtype) && !integer_ok) {
    return op + " takes float operands, got " + d + " (integers take add, sub, mul, neg, abs, " +
           "maximum, minimum, floor_divide, remainder and comparisons; cast to f32 for the rest)";
  }
  return "";
}

// A value the ops that do float arithmetic (matmul, softmax, reductions, norms, attention) read.
Status require_float(std::string_view op, const char* role, const Node& n) {
  if (is_float(n.type.dtype)) return Status::success();
  return make_error(std::string(op), ": ", role, " must be a float tensor (f32, f16 or bf16), got ",
                    describe(n), "; cast it");
}

}  // namespace

Status check_literal(DType dtype, double literal) {
  if (std::isnan(literal)) return make_error("a literal operand must not be NaN");
  if (is_float(dtype)) return Status::success();
  if (dtype == DType::boolean) {
    if (literal == 0.0 || literal == 1.0) return Status::success();
    return make_error("a literal against a bool tensor is true or false");
  }
  double lo = dtype == DType::i32 ? -2147483648.0 : -9007199254740992.0;
  double hi = dtype == DType::i32 ? 2147483647.0 : 9007199254740992.0;
  if (literal != std::trunc(literal) || literal < lo || literal > hi) {
    return make_error("a literal against an ", std::string(to_string(dtype)),
                      " tensor is an integer within ", dtype == DType::i32 ? "i32" : "+-2^53");
  }
  return Status::success();
}

Status Builder::check_operand(NodeId id) const {
  if (id < 0 || static_cast<size_t>(id) >= m_nodes.size()) {
    return make_error("operand ", std::to_string(id), " does not name a value of this graph");
  }
  return Status::success();
}

Expected<NodeId> Builder::push(Node node) {
  // Each typed add_* infers the type; it must follow the table's result rule (a matmul's
  // out_dtype=f32 in place of its operands' dtype).
  assert(result_dtype(node.kind) != ResultDType::operand ||
         node.type.dtype == node.attrs.out_dtype.value_or(
                                m_nodes[static_cast<size_t>(node.operands.at(0))].type.dtype));
  assert(result_dtype(node.kind) != ResultDType::cast_to ||
         node.type.dtype == node.attrs.cast_to);
  assert(result_dtype(node.kind) != ResultDType::boolean || node.type.dtype == DType::boolean);
  std::string name = std::move(node.name);
  auto id = static_cast<NodeId>(m_nodes.size());
  m_nodes.push_back(std::move(node));
  if (!name.empty()) {
    if (Status named = set_name(id, std::move(name)); !named) {
      m_nodes.pop_back();
      return named.error();
    }
  }
  return id;
}

Expected<NodeId> Builder::add(OpKind kind, const std::vector<NodeId>& operands,
                              const Attrs& attrs, std::string name) {
  size_t count = operands.size();
  bool literal = (category(kind) == OpCategory::binary || category(kind) == OpCategory::select) &&
                 attrs.literal_side != LiteralSide::none;
  size_t literals = !literal ? 0 : attrs.literal_side == LiteralSide::both ? 2 : 1;
  if (category(kind) == OpCategory::binary && attrs.literal_side == LiteralSide::both)
    return make_error(std::string(to_string(kind)), " takes at most one literal operand");
  size_t lo = static_cast<size_t>(min_operands(kind)) - literals;
  size_t hi = static_cast<size_t>(max_operands(kind)) - literals +
              (kind == OpKind::attention ? 1 : 0);  // the mask
  if (kind != OpKind::input && (count < lo || count > hi)) {
    return make_error(std::string(to_string(kind)), " takes ", std::to_string(lo),
                      lo == hi ? "" : " to " + std::to_string(hi), " operand",
                      hi == 1 ? "" : "s", ", got ", std::to_string(count));
  }
  switch (category(kind)) {
    case OpCategory::input:
      return make_error("an input is declared with add_input, not add");
    case OpCategory::matmul:
      return add_matmul(operands[0], operands[1], attrs.transpose_a, attrs.transpose_b,
                        attrs.precision, std::move(name), attrs.out_dtype);
    case OpCategory::binary:
      if (literal)
        return add_binary_literal(kind, operands[0], attrs.literal, attrs.literal_side,
                                  std::move(name));
      return add_binary(kind, operands[0], operands[1], std::move(name));
    case OpCategory::unary:
      return add_unary(kind, operands[0], std::move(name));
    case OpCategory::cast:
      return add_cast(operands[0], attrs.cast_to, std::move(name));
    case OpCategory::softmax:
      return add_softmax(operands[0], attrs.axis, std::move(name));
    case OpCategory::reduce:
      return add_reduce(kind, operands[0], attrs.axis, attrs.keepdim, std::move(name));
    case OpCategory::scan:
      return add_scan(kind, operands[0], attrs.axis, std::move(name));
    case OpCategory::norm:
      if (kind == OpKind::rms_norm)
        return add_rms_norm(operands[0], operands[1], attrs.eps, std::move(name));
      return add_layer_norm(operands[0], operands[1], operands[2], attrs.eps, std::move(name));
    case OpCategory::layout:
      if (kind == OpKind::reshape)
        return add_reshape(operands[0], attrs.shape, attrs.shape_symbols, std::move(name));
      if (kind == OpKind::permute) return add_permute(operands[0], attrs.dims, std::move(name));
      if (kind == OpKind::expand)
        return add_expand(operands[0], attrs.shape, attrs.shape_symbols, std::move(name));
      if (kind == OpKind::slice)
        return add_slice(operands[0], attrs.axis, attrs.start, attrs.end, std::move(name));
      if (kind == OpKind::roll)
        return add_roll(operands[0], attrs.shift, attrs.axis, std::move(name));
      return add_concat(operands, attrs.axis, std::move(name));
    case OpCategory::arange: {
      // Its size is attrs.shape (one dim; attrs.shape_symbols names a symbolic one).
      if (attrs.shape.size() != 1)
        return make_error("arange takes its size as attrs.shape = {n}, got ",
                          std::to_string(attrs.shape.size()), " dims");
      std::vector<SymbolicDim> symbols = attrs.shape_symbols;
      std::vector<int64_t> dims = attrs.shape;
      if (!symbols.empty() && symbols[0].index >= 0) {
        if (static_cast<size_t>(symbols[0].index) >= m_symbols.size())
          return make_error("arange uses an undeclared dim");
        dims[0] = m_symbols[static_cast<size_t>(symbols[0].index)].hi;
      }
      auto shape = Shape::make(std::move(dims), std::move(symbols));
      if (!shape) return make_error("arange: ", shape.error().message);
      return add_arange(std::move(*shape), attrs.cast_to, std::move(name));
    }
    case OpCategory::gather:
      return add_embedding(operands[0], operands[1], std::move(name));
    case OpCategory::select: {
      std::optional<NodeId> a, b;
      size_t next = 1;
      if (attrs.literal_side == LiteralSide::none || attrs.literal_side == LiteralSide::rhs)
        a = operands[next++];
      if (attrs.literal_side == LiteralSide::none || attrs.literal_side == LiteralSide::lhs)
        b = operands[next++];
      double la = attrs.literal, lb = attrs.literal_side == LiteralSide::both ? attrs.literal2
                                                                               : attrs.literal;
      return add_where(operands[0], a, b, la, lb, std::move(name));
    }
    case OpCategory::attention: {
      std::optional<NodeId> mask;
      if (count == 4) mask = operands[3];
      return add_attention(operands[0], operands[1], operands[2], mask, attrs.scale, attrs.causal,
                           std::move(name));
    }
  }
  return make_error("unknown op kind ", std::to_string(static_cast<int>(kind)));
}

Status Builder::set_name(NodeId id, std::string name) {
  if (Status s = check_operand(id); !s) return s;
  if (name.empty()) return make_error("a value name must not be empty");
  if (m_names.count(name)) return make_error("'", name, "' is already defined");
  m_nodes[static_cast<size_t>(id)].name = name;
  m_names.emplace(std::move(name), id);
  return Status::success();
}

void Builder::set_location(NodeId id, int line, int column) {
  if (id < 0 || static_cast<size_t>(id) >= m_nodes.size()) return;
  m_nodes[static_cast<size_t>(id)].line = line;
  m_nodes[static_cast<size_t>(id)].column = column;
}

std::optional<NodeId> Builder::find(std::string_view name) const {
  auto it = m_names.find(std::string(name));
  if (it == m_names.end()) return std::nullopt;
  return it->second;
}

Expected<NodeId> Builder::add_input(std::string name, TensorType type) {
  if (name.empty()) return make_error("an input needs a name");
  for (int i = 0; i < type.shape.rank(); ++i) {
    int32_t sym = type.shape.symbol(i);
    if (sym < 0) continue;
    if (static_cast<size_t>(sym) >= m_symbols.size())
      return make_error("input '", name, "' uses an undeclared dim");
    const Symbol& symbol = m_symbols[static_cast<size_t>(sym)];
    const SymbolicDim& written = type.shape.symbols()[static_cast<size_t>(i)];
    if (type.shape.dim(i) != symbol.hi || written.name != symbol.name)
      return make_error("input '", name, "' dim ", std::to_string(i), " must be dim '",
                        symbol.name, "' at its upper bound ", std::to_string(symbol.hi));
  }
  Node node;
  node.kind = OpKind::input;
  node.type = std::move(type);
  node.name = std::move(name);
  auto id = push(std::move(node));
  if (id) m_inputs.push_back(*id);
  return id;
}

Expected<NodeId> Builder::add_matmul(NodeId a, NodeId b, bool transpose_a, bool transpose_b,
                                     std::optional<Precision> precision, std::string name,
                                     std::optional<DType> out_dtype) {
  if (Status s = check_operand(a); !s) return s.error();
  if (Status s = check_operand(b); !s) return s.error();
  const Node& na = node(a);
  const Node& nb = node(b);
  const Shape& sa = na.type.shape;
  const Shape& sb = nb.type.shape;
  if (sa.rank() < 2 || sb.rank() < 2) {
    return make_error("matmul takes 2-D to 6-D operands (the last two dims a matrix, the others "
                      "batch dims), got ", describe(na), " and ", describe(nb));
  }
  if (na.type.dtype != nb.type.dtype) {
    return make_error("matmul operands differ in dtype: ", describe(na), " and ", describe(nb),
                      "; cast one of them");
  }
  if (Status s = require_float("matmul", "an operand", na); !s) return s.error();
  if (precision == Precision::automatic) {
    return make_error("precision=auto is a graph-wide mode; a matmul takes highest, high, tf32x3 "
                      "or medium");
  }
  if (precision && na.type.dtype != DType::f32) {
    return make_error("precision= applies to f32 matmuls; this one is ",
                      std::string(to_string(na.type.dtype)));
  }
  if (out_dtype == na.type.dtype) out_dtype.reset();  // the default, written out
  if (out_dtype && (*out_dtype != DType::f32 ||
                    (na.type.dtype != DType::f16 && na.type.dtype != DType::bf16))) {
    return make_error("matmul out_dtype=", std::string(to_string(*out_dtype)), " of ",
                      std::string(to_string(na.type.dtype)),
                      " operands: a matmul gives its operands' dtype, or f32 from f16 or bf16 "
                      "operands (cast the result for any other)");
  }
  DimRef m = dim_ref(sa, sa.rank() - (transpose_a ? 1 : 2));
  DimRef ka = dim_ref(sa, sa.rank() - (transpose_a ? 2 : 1));
  DimRef kb = dim_ref(sb, sb.rank() - (transpose_b ? 1 : 2));
  DimRef n = dim_ref(sb, sb.rank() - (transpose_b ? 2 : 1));
  if (ka.value != kb.value || ka.symbol.index != kb.symbol.index) {
    return make_error("matmul inner dimensions differ: ", describe(na), " has k = ", show(ka),
                      ", ", describe(nb), " has k = ", show(kb));
  }
  // Batch dims broadcast like numpy's, aligned at the last batch dim.
  std::vector<DimRef> dims;
  (void)broadcast_batch(dims, sa);  // never clashes: dims starts empty
  if (auto clash = broadcast_batch(dims, sb)) {
    return make_error("matmul batch dimensions differ: ", describe(na), " and ", describe(nb),
                      " (", show(clash->have), " against ", show(clash->got), ")");
  }
  dims.push_back(m);
  dims.push_back(n);
  auto shape = make_shape(dims);
  if (!shape) return make_error("matmul result: ", shape.error().message);
  Node node;
  node.kind = OpKind::matmul;
  node.operands = {a, b};
  node.attrs.transpose_a = transpose_a;
  node.attrs.transpose_b = transpose_b;
  node.attrs.precision = precision;
  node.attrs.out_dtype = out_dtype;
  node.type = TensorType{out_dtype.value_or(na.type.dtype), std::move(*shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_binary(OpKind kind, NodeId a, NodeId b, std::string name) {
  if (category(kind) != OpCategory::binary) {
    return make_error("'", std::string(to_string(kind)), "' is not a binary op");
  }
  if (Status s = check_operand(a); !s) return s.error();
  if (Status s = check_operand(b); !s) return s.error();
  const Node& na = node(a);
  const Node& nb = node(b);
  if (na.type.dtype != nb.type.dtype) {
    return make_error(std::string(to_string(kind)), " operands differ in dtype: ", describe(na),
                      " and ", describe(nb), "; cast one of them");
  }
  if (std::string why = dtype_refusal(kind, na.type.dtype); !why.empty()) return make_error(why);
  auto shape = broadcast(na.type.shape, nb.type.shape);
  if (!shape) return make_error(std::string(to_string(kind)), ": ", shape.error().message);
  Node node;
  node.kind = kind;
  node.operands = {a, b};
  node.type = TensorType{is_comparison(kind) ? DType::boolean : na.type.dtype, std::move(*shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_binary_literal(OpKind kind, NodeId tensor, double literal,
                                             LiteralSide side, std::string name) {
  if (category(kind) != OpCategory::binary) {
    return make_error("'", std::string(to_string(kind)), "' is not a binary op");
  }
  if (side != LiteralSide::lhs && side != LiteralSide::rhs)
    return make_error("a binary op's literal operand is on its left or its right");
  if (Status s = check_operand(tensor); !s) return s.error();
  DType dtype = this->node(tensor).type.dtype;
  if (std::string why = dtype_refusal(kind, dtype); !why.empty()) return make_error(why);
  if (Status s = check_literal(dtype, literal); !s) return s.error();
  Node node;
  node.kind = kind;
  node.operands = {tensor};
  node.attrs.literal_side = side;
  node.attrs.literal = literal;
  node.type = this->node(tensor).type;
  if (is_comparison(kind)) node.type.dtype = DType::boolean;
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_unary(OpKind kind, NodeId x, std::string name) {
  if (category(kind) != OpCategory::unary) {
    return make_error("'", std::string(to_string(kind)), "' is not a unary op");
  }
  if (Status s = check_operand(x); !s) return s.error();
  if (std::string why = dtype_refusal(kind, this->node(x).type.dtype); !why.empty())
    return make_error(why);
  Node node;
  node.kind = kind;
  node.operands = {x};
  node.type = this->node(x).type;
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_embedding(NodeId table, NodeId ids, std::string name) {
  if (Status s = check_operand(table); !s) return s.error();
  if (Status s = check_operand(ids); !s) return s.error();
  const Node& nt = node(table);
  const Node& ni = node(ids);
  if (Status s = require_float("embedding", "the table", nt); !s) return s.error();
  if (nt.type.shape.rank() != 2) {
    return make_error("embedding: the table must be 2-D [V, D] (V rows of width D), got ",
                      describe(nt));
  }
  if (!is_integer(ni.type.dtype)) {
    return make_error("embedding: the ids must be i32 or i64, got ", describe(ni),
                      "; cast them (cast(ids, to=i64))");
  }
  const Shape& si = ni.type.shape;
  if (si.rank() >= k_max_rank) {
    return make_error("embedding: the ids have ", std::to_string(si.rank()), " dims; the result "
                      "adds one and holds at most ", std::to_string(k_max_rank));
  }
  std::vector<DimRef> dims;
  for (int i = 0; i < si.rank(); ++i) dims.push_back(dim_ref(si, i));
  dims.push_back(dim_ref(nt.type.shape, 1));
  auto shape = make_shape(dims);
  if (!shape) return make_error("embedding result: ", shape.error().message);
  Node n;
  n.kind = OpKind::embedding;
  n.operands = {table, ids};
  n.type = TensorType{nt.type.dtype, std::move(*shape)};
  n.name = std::move(name);
  return push(std::move(n));
}

Expected<NodeId> Builder::add_arange(Shape shape, DType dtype, std::string name) {
  if (shape.rank() != 1) return make_error("arange gives a 1-D tensor, not ", to_string(shape));
  if (dtype != DType::i32 && dtype != DType::i64 && dtype != DType::f32) {
    return make_error("arange: dtype is i32, i64 or f32, got ", std::string(to_string(dtype)));
  }
  int32_t sym = shape.symbol(0);
  if (sym >= 0 && (static_cast<size_t>(sym) >= m_symbols.size() ||
                   m_symbols[static_cast<size_t>(sym)].hi != shape.dim(0)))
    return make_error("arange: its size names no declared dim at its upper bound");
  if (dtype == DType::i32 && shape.dim(0) > k_max_symbol_value)
    return make_error("arange: ", to_string(shape), " does not fit i32");
  Node node;
  node.kind = OpKind::arange;
  node.attrs.cast_to = dtype;
  node.type = TensorType{dtype, std::move(shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_where(NodeId cond, std::optional<NodeId> a, std::optional<NodeId> b,
                                    double a_literal, double b_literal, std::string name) {
  if (Status s = check_operand(cond); !s) return s.error();
  const Node& nc = node(cond);
  if (nc.type.dtype != DType::boolean) {
    return make_error("where: the condition must be bool, got ", describe(nc),
                      "; compare it (ne(x, 0)) or cast it (cast(x, to=bool))");
  }
  for (const std::optional<NodeId>& v : {a, b})
    if (v)
      if (Status s = check_operand(*v); !s) return s.error();
  DType dtype = DType::f32;  // both literals
  if (a && b && node(*a).type.dtype != node(*b).type.dtype) {
    return make_error("where: its values differ in dtype: ", describe(node(*a)), " and ",
                      describe(node(*b)), "; cast one of them");
  }
  if (a) dtype = node(*a).type.dtype;
  else if (b) dtype = node(*b).type.dtype;
  if (!a)
    if (Status s = check_literal(dtype, a_literal); !s) return make_error("where: ", s.error().message);
  if (!b)
    if (Status s = check_literal(dtype, b_literal); !s) return make_error("where: ", s.error().message);
  Shape shape = nc.type.shape;
  for (const std::optional<NodeId>& v : {a, b}) {
    if (!v) continue;
    auto joined = broadcast(shape, node(*v).type.shape);
    if (!joined) return make_error("where: ", joined.error().message);
    shape = std::move(*joined);
  }
  Node n;
  n.kind = OpKind::where;
  n.operands = {cond};
  if (a) n.operands.push_back(*a);
  if (b) n.operands.push_back(*b);
  n.attrs.literal_side = a && b ? LiteralSide::none : a ? LiteralSide::rhs : b ? LiteralSide::lhs
                                                                             : LiteralSide::both;
  if (!a) n.attrs.literal = a_literal;
  if (!a && !b) n.attrs.literal2 = b_literal;
  if (a && !b) n.attrs.literal = b_literal;
  n.type = TensorType{dtype, std::move(shape)};
  n.name = std::move(name);
  return push(std::move(n));
}

Expected<NodeId> Builder::add_cast(NodeId x, DType to, std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  Node node;
  node.kind = OpKind::cast;
  node.operands = {x};
  node.attrs.cast_to = to;
  node.type = TensorType{to, this->node(x).type.shape};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_softmax(NodeId x, int axis, std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  if (Status s = require_float("softmax", "its operand", node(x)); !s) return s.error();
  const TensorType& type = node(x).type;
  int rank = type.shape.rank();
  if (axis < -rank || axis >= rank) {
    return make_error("softmax axis ", std::to_string(axis), " is out of range for ",
                      describe(node(x)), " (rank ", std::to_string(rank), ")");
  }
  Node node;
  node.kind = OpKind::softmax;
  node.operands = {x};
  node.attrs.axis = axis < 0 ? axis + rank : axis;
  node.type = type;
  node.name = std::move(name);
  return push(std::move(node));
}

namespace {

// Normalises an axis that may count from the end; nullopt when it is outside the rank.
std::optional<int> normal_axis(int axis, int rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

}  // namespace

Expected<NodeId> Builder::add_scan(OpKind kind, NodeId x, int axis, std::string name) {
  std::string op(to_string(kind));
  if (category(kind) != OpCategory::scan) return make_error("'", op, "' is not a scan");
  if (Status s = check_operand(x); !s) return s.error();
  const Node& nx = node(x);
  if (nx.type.dtype == DType::boolean) {
    return make_error(op, " adds numbers; ", describe(nx),
                      " is bool: cast it to i64 (or i32) first, as PyTorch's cumsum does");
  }
  int rank = nx.type.shape.rank();
  auto a = normal_axis(axis, rank);
  if (!a) {
    return make_error(op, " axis ", std::to_string(axis), " is out of range for ", describe(nx),
                      " (rank ", std::to_string(rank), ")");
  }
  Node node;
  node.kind = kind;
  node.operands = {x};
  node.attrs.axis = *a;
  node.type = nx.type;
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_reduce(OpKind kind, NodeId x, int axis, bool keepdim,
                                     std::string name) {
  if (category(kind) != OpCategory::reduce) {
    return make_error("'", std::string(to_string(kind)), "' is not a reduction");
  }
  if (Status s = check_operand(x); !s) return s.error();
  if (Status s = require_float(to_string(kind), "its operand", node(x)); !s) return s.error();
  const Node& nx = node(x);
  const Shape& shape = nx.type.shape;
  auto a = normal_axis(axis, shape.rank());
  if (!a) {
    return make_error(std::string(to_string(kind)), " axis ", std::to_string(axis),
                      " is out of range for ", describe(nx), " (rank ",
                      std::to_string(shape.rank()), ")");
  }
  std::vector<DimRef> dims;
  for (int i = 0; i < shape.rank(); ++i) {
    if (i != *a) dims.push_back(dim_ref(shape, i));
    else if (keepdim) dims.push_back(DimRef{});
  }
  auto result = make_shape(dims);
  if (!result) return make_error(std::string(to_string(kind)), ": ", result.error().message);
  Node node;
  node.kind = kind;
  node.operands = {x};
  node.attrs.axis = *a;
  node.attrs.keepdim = keepdim;
  node.type = TensorType{nx.type.dtype, std::move(*result)};
  node.name = std::move(name);
  return push(std::move(node));
}

namespace {

// Checks a norm's weight or bias against x: 1-D, x's last dim, x's dtype.
Status check_norm_param(const Node& x, const Node& param, const char* op, const char* role) {
  const Shape& sx = x.type.shape;
  const Shape& sp = param.type.shape;
  if (sx.rank() == 0) {
    return make_error(op, " normalises x's last dimension; ", describe(x), " has none (rank 0)");
  }
  DimRef last = dim_ref(sx, sx.rank() - 1);
  if (sp.rank() != 1 || sp.dim(0) != last.value || sp.symbol(0) != last.symbol.index) {
    return make_error(op, " ", role, " must be 1-D of x's last dimension ", show(last),
                      ": x is ", describe(x), ", ", role, " is ", describe(param));
  }
  if (param.type.dtype != x.type.dtype) {
    return make_error(op, " ", role, " differs from x in dtype: ", describe(param), " and ",
                      describe(x), "; cast one of them");
  }
  return Status::success();
}

Status check_eps(double eps, const char* op) {
  if (!std::isfinite(eps) || eps <= 0.0) {
    return make_error(op, " eps must be positive and finite, got ", std::to_string(eps));
  }
  return Status::success();
}

}  // namespace

Expected<NodeId> Builder::add_rms_norm(NodeId x, NodeId weight, double eps, std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  if (Status s = require_float("rms_norm", "x", node(x)); !s) return s.error();
  if (Status s = check_operand(weight); !s) return s.error();
  if (Status s = check_norm_param(node(x), node(weight), "rms_norm", "weight"); !s)
    return s.error();
  if (Status s = check_eps(eps, "rms_norm"); !s) return s.error();
  Node node;
  node.kind = OpKind::rms_norm;
  node.operands = {x, weight};
  node.attrs.eps = eps;
  node.attrs.axis = this->node(x).type.shape.rank() - 1;
  node.type = this->node(x).type;
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_layer_norm(NodeId x, NodeId weight, NodeId bias, double eps,
                                         std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  if (Status s = require_float("layer_norm", "x", node(x)); !s) return s.error();
  if (Status s = check_operand(weight); !s) return s.error();
  if (Status s = check_operand(bias); !s) return s.error();
  if (Status s = check_norm_param(node(x), node(weight), "layer_norm", "weight"); !s)
    return s.error();
  if (Status s = check_norm_param(node(x), node(bias), "layer_norm", "bias"); !s)
    return s.error();
  if (Status s = check_eps(eps, "layer_norm"); !s) return s.error();
  Node node;
  node.kind = OpKind::layer_norm;
  node.operands = {x, weight, bias};
  node.attrs.eps = eps;
  node.attrs.axis = this->node(x).type.shape.rank() - 1;
  node.type = this->node(x).type;
  node.name = std::move(name);
  return push(std::move(node));
}

namespace {

// A reshape's target shape as written: a symbolic dim by its name (its dims entry holds only the
// symbol's upper bound, which is not its size), -1 where a dim is to be inferred.
std::string written_shape(const std::vector<int64_t>& dims, const std::vector<SymbolicDim>& symbols,
                          const std::vector<Symbol>& declared) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    int32_t s = i < symbols.size() ? symbols[i].index : -1;
    out += s >= 0 && static_cast<size_t>(s) < declared.size()
               ? declared[static_cast<size_t>(s)].name
               : std::to_string(dims[i]);
  }
  return out + "]";
}

// "96", or "B * S * 96" when symbolic dims multiply the `fixed` elements.
std::string element_count(int64_t fixed, const std::vector<int32_t>& symbols,
                          const std::vector<Symbol>& declared) {
  std::string out;
  for (int32_t s : symbols) out += declared[static_cast<size_t>(s)].name + " * ";
  return out + std::to_string(fixed);
}

}  // namespace

Expected<NodeId> Builder::add_expand(NodeId x, std::vector<int64_t> dims,
                                     std::vector<SymbolicDim> symbols, std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  const Node& nx = node(x);
  const Shape& from = nx.type.shape;
  if (dims.size() < static_cast<size_t>(from.rank()) || dims.size() > static_cast<size_t>(k_max_rank)) {
    return make_error("expand of ", describe(nx), " needs ", std::to_string(from.rank()), " to ",
                      std::to_string(k_max_rank), " dims, got ", std::to_string(dims.size()));
  }
  if (!symbols.empty() && symbols.size() != dims.size())
    return make_error("expand: one symbol entry per dim");
  symbols.resize(dims.size());
  int offset = static_cast<int>(dims.size()) - from.rank();
  std::vector<DimRef> result;
  for (size_t i = 0; i < dims.size(); ++i) {
    int od = static_cast<int>(i) - offset;  // x's dim here, or < 0
    DimRef want{dims[i], symbols[i]};
    if (symbols[i].index >= 0) {
      if (static_cast<size_t>(symbols[i].index) >= m_symbols.size())
        return make_error("expand uses an undeclared dim");
      want.value = m_symbols[static_cast<size_t>(symbols[i].index)].hi;
    } else if (dims[i] == -1) {
      if (od < 0) {
        return make_error("expand: dim ", std::to_string(i), " is -1 where ", describe(nx),
                          " has no dim to keep");
      }
      want = dim_ref(from, od);
    } else if (dims[i] < 1) {
      return make_error("expand: dim ", std::to_string(i), " is ", std::to_string(dims[i]),
                        "; a dimension is at least 1 (or -1, kept)");
    }
    if (od >= 0) {
      DimRef have = dim_ref(from, od);
      bool same = have.value == want.value && have.symbol.index == want.symbol.index;
      bool one = have.symbol.index < 0 && have.value == 1;
      if (!same && !one) {
        return make_error("expand: ", describe(nx), " does not broadcast to ",
                          written_shape(dims, symbols, m_symbols), ": its dim ",
                          std::to_string(od), " is ", show(have), " against ", show(want),
                          "; a dim equals the target's or is 1");
      }
    }
    result.push_back(want);
  }
  auto shape = make_shape(result);
  if (!shape) return make_error("expand: ", shape.error().message);
  Node n;
  n.kind = OpKind::expand;
  n.operands = {x};
  n.type = TensorType{nx.type.dtype, std::move(*shape)};  // the result type says it all
  n.name = std::move(name);
  return push(std::move(n));
}

Expected<NodeId> Builder::add_reshape(NodeId x, std::vector<int64_t> dims,
                                      std::vector<SymbolicDim> symbols, std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  const Node& nx = node(x);
  const Shape& from = nx.type.shape;
  if (dims.size() > static_cast<size_t>(k_max_rank)) {
    return make_error("reshape needs 0 to ", std::to_string(k_max_rank), " dims, got ",
                      std::to_string(dims.size()));
  }
  if (!symbols.empty() && symbols.size() != dims.size())
    return make_error("reshape: one symbol entry per dim");
  symbols.resize(dims.size());
  // Symbols must be x's, each as often: the counts then agree for every value of them.
  std::vector<int32_t> from_symbols, to_symbols;
  int64_t from_count = 1, to_count = 1;
  for (int i = 0; i < from.rank(); ++i) {
    if (from.symbol(i) >= 0) from_symbols.push_back(from.symbol(i));
    else from_count *= from.dim(i);
  }
  int inferred = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (symbols[i].index >= 0) {
      if (static_cast<size_t>(symbols[i].index) >= m_symbols.size())
        return make_error("reshape uses an undeclared dim");
      dims[i] = m_symbols[static_cast<size_t>(symbols[i].index)].hi;
      to_symbols.push_back(symbols[i].index);
      continue;
    }
    if (dims[i] == -1) {
      if (inferred >= 0) return make_error("reshape may infer one dim (-1), not two");
      inferred = static_cast<int>(i);
      continue;
    }
    if (dims[i] < 1) {
      return make_error("reshape dim ", std::to_string(i), " is ", std::to_string(dims[i]),
                        "; a dimension is at least 1 (or -1, inferred)");
    }
    if (to_count > k_max_elements / dims[i]) {
      return make_error("reshape to ", written_shape(dims, symbols, m_symbols),
                        " holds more than 2^31 - 1 elements");
    }
    to_count *= dims[i];
  }
  std::sort(from_symbols.begin(), from_symbols.end());
  std::sort(to_symbols.begin(), to_symbols.end());
  if (from_symbols != to_symbols) {
    return make_error("reshape of ", describe(nx), " must keep its symbolic dims, each as a "
                      "dim of its own (the element count must agree for every size)");
  }
  if (inferred >= 0) {
    if (from_count % to_count != 0) {
      return make_error("reshape cannot infer dim ", std::to_string(inferred), ": ",
                        describe(nx), " has ", std::to_string(from_count),
                        " elements (symbolic dims aside), not a multiple of ",
                        std::to_string(to_count));
    }
    dims[static_cast<size_t>(inferred)] = from_count / to_count;
    to_count = from_count;
  }
  if (to_count != from_count) {
    return make_error("reshape of ", describe(nx), " to ", written_shape(dims, symbols, m_symbols),
                      " changes the element count (",
                      element_count(from_count, from_symbols, m_symbols), " to ",
                      element_count(to_count, to_symbols, m_symbols), ")");
  }
  for (SymbolicDim& s : symbols)
    if (s.index >= 0) s.name = m_symbols[static_cast<size_t>(s.index)].name;
  auto shape = Shape::make(std::move(dims), std::move(symbols));
  if (!shape) return make_error("reshape: ", shape.error().message);
  Node node;
  node.kind = OpKind::reshape;
  node.operands = {x};
  node.type = TensorType{nx.type.dtype, std::move(*shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_permute(NodeId x, std::vector<int> dims, std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  const Node& nx = node(x);
  const Shape& from = nx.type.shape;
  int rank = from.rank();
  if (static_cast<int>(dims.size()) != rank) {
    return make_error("permute of ", describe(nx), " needs ", std::to_string(rank),
                      " dims, got ", std::to_string(dims.size()));
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  std::vector<DimRef> out;
  for (int& d : dims) {
    auto a = normal_axis(d, rank);
    if (!a) {
      return make_error("permute dim ", std::to_string(d), " is out of range for ", describe(nx));
    }
    if (seen[static_cast<size_t>(*a)]) {
      return make_error("permute dims are not a permutation of 0..", std::to_string(rank - 1),
                        ": dim ", std::to_string(*a), " appears twice");
    }
    seen[static_cast<size_t>(*a)] = true;
    d = *a;
    out.push_back(dim_ref(from, *a));
  }
  auto shape = make_shape(out);
  if (!shape) return make_error("permute: ", shape.error().message);
  Node node;
  node.kind = OpKind::permute;
  node.operands = {x};
  node.attrs.dims = std::move(dims);
  node.type = TensorType{nx.type.dtype, std::move(*shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_roll(NodeId x, int64_t shift, int axis, std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  const Node& nx = node(x);
  auto a = normal_axis(axis, nx.type.shape.rank());
  if (!a) {
    return make_error("roll axis ", std::to_string(axis), " is out of range for ", describe(nx),
                      " (rank ", std::to_string(nx.type.shape.rank()), ")");
  }
  constexpr int64_t limit = (int64_t{1} << 31) - 1;
  if (shift < -limit || shift > limit) {
    return make_error("roll shift ", std::to_string(shift), " is past +-", std::to_string(limit));
  }
  Node node;
  node.kind = OpKind::roll;
  node.operands = {x};
  node.attrs.axis = *a;
  node.attrs.shift = shift;
  node.type = nx.type;
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_slice(NodeId x, int axis, int64_t start, int64_t end,
                                    std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  const Node& nx = node(x);
  const Shape& from = nx.type.shape;
  auto a = normal_axis(axis, from.rank());
  if (!a) {
    return make_error("slice axis ", std::to_string(axis), " is out of range for ", describe(nx),
                      " (rank ", std::to_string(from.rank()), ")");
  }
  // Along a symbolic dim only a constant window every size in its range holds: 0 <= start <
  // end <= the range's low end (BERT's pooler reads token 0 of a symbolic sequence).
  int64_t size = from.dim(*a);
  if (int32_t symbol = from.symbol(*a); symbol >= 0) {
    const Symbol& sym = m_symbols[static_cast<size_t>(symbol)];
    if (start < 0 || end < 0 || end > sym.lo) {
      return make_error("slice ", std::to_string(start), "..", std::to_string(end),
                        " along the symbolic dim ", sym.name, " of ", describe(nx),
                        ": along a symbolic dim kiln slices a constant window of indices, 0 <= "
                        "start < end <= ", std::to_string(sym.lo), " (", sym.name,
                        "'s smallest size)");
    }
    size = sym.lo;
  }
  int64_t s0 = start < 0 ? start + size : start;
  int64_t e0 = end < 0 ? end + size : end;
  if (s0 < 0 || e0 > size || s0 >= e0) {
    return make_error("slice ", std::to_string(start), "..", std::to_string(end), " of axis ",
                      std::to_string(*a), " is empty or out of range for ", describe(nx),
                      " (size ", std::to_string(size), ")");
  }
  std::vector<DimRef> dims;
  for (int i = 0; i < from.rank(); ++i) dims.push_back(dim_ref(from, i));
  dims[static_cast<size_t>(*a)] = DimRef{e0 - s0, {}};
  auto shape = make_shape(dims);
  if (!shape) return make_error("slice: ", shape.error().message);
  Node node;
  node.kind = OpKind::slice;
  node.operands = {x};
  node.attrs.axis = *a;
  node.attrs.start = s0;
  node.attrs.end = e0;
  node.type = TensorType{nx.type.dtype, std::move(*shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_concat(const std::vector<NodeId>& operands, int axis,
                                     std::string name) {
  if (operands.empty() || operands.size() > static_cast<size_t>(k_max_concat)) {
    return make_error("concat takes 1 to ", std::to_string(k_max_concat), " operands, got ",
                      std::to_string(operands.size()));
  }
  for (NodeId id : operands)
    if (Status s = check_operand(id); !s) return s.error();
  const Node& first = node(operands[0]);
  const Shape& s0 = first.type.shape;
  auto a = normal_axis(axis, s0.rank());
  if (!a) {
    return make_error("concat axis ", std::to_string(axis), " is out of range for ",
                      describe(first), " (rank ", std::to_string(s0.rank()), ")");
  }
  int64_t total = 0;
  for (NodeId id : operands) {
    const Node& n = node(id);
    const Shape& s = n.type.shape;
    if (n.type.dtype != first.type.dtype) {
      return make_error("concat operands differ in dtype: ", describe(first), " and ",
                        describe(n), "; cast one of them");
    }
    if (s.rank() != s0.rank()) {
      return make_error("concat operands differ in rank: ", describe(first), " and ",
                        describe(n));
    }
    if (s.symbol(*a) >= 0) {
      return make_error("concat along the symbolic dim ", s.symbols()[static_cast<size_t>(*a)].name,
                        " of ", describe(n), "; kiln joins along constant dims only");
    }
    for (int i = 0; i < s.rank(); ++i) {
      if (i == *a) continue;
      if (s.dim(i) != s0.dim(i) || s.symbol(i) != s0.symbol(i)) {
        return make_error("concat operands differ in dim ", std::to_string(i),
                          " (only the concat axis ", std::to_string(*a), " may differ): ",
                          describe(first), " and ", describe(n));
      }
    }
    total += s.dim(*a);
  }
  std::vector<DimRef> dims;
  for (int i = 0; i < s0.rank(); ++i) dims.push_back(dim_ref(s0, i));
  dims[static_cast<size_t>(*a)] = DimRef{total, {}};
  auto shape = make_shape(dims);
  if (!shape) return make_error("concat: ", shape.error().message);
  Node node;
  node.kind = OpKind::concat;
  node.operands = operands;
  node.attrs.axis = *a;
  node.type = TensorType{first.type.dtype, std::move(*shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

namespace {

// Checks an attention mask against the scores dims: no more dims than the scores, and each dim
// (aligned at the last) equal to the scores' or a constant 1. A float mask (any float dtype, read
// as fp32) is added to the scores; a bool one keeps the keys where it is true.
Status check_attention_mask(const Node& mask, const std::vector<DimRef>& scores) {
  if (!is_float(mask.type.dtype) && mask.type.dtype != DType::boolean) {
    return make_error("attention: the mask must be a float tensor (f32, f16 or bf16) or bool, "
                      "got ", describe(mask), "; compare it (ne(m, 0)) or cast it");
  }
  const Shape& sm = mask.type.shape;
  int offset = static_cast<int>(scores.size()) - sm.rank();
  std::string target = "[";
  for (size_t i = 0; i < scores.size(); ++i) target += (i ? ", " : "") + show(scores[i]);
  target += "]";
  if (offset < 0) {
    return make_error("attention: mask ", describe(mask), " has more dims than the scores ",
                      target);
  }
  for (int i = 0; i < sm.rank(); ++i) {
    DimRef m = dim_ref(sm, i);
    const DimRef& s = scores[static_cast<size_t>(offset + i)];
    bool one = m.symbol.index < 0 && m.value == 1;
    if (one || (m.value == s.value && m.symbol.index == s.symbol.index)) continue;
    return make_error("attention: mask ", describe(mask), " does not broadcast to the scores ",
                      target, ": its dim ", std::to_string(i), " is ", show(m), " against ",
                      show(s), "; a mask dim equals the scores' dim or is 1");
  }
  return Status::success();
}

}  // namespace

Expected<NodeId> Builder::add_attention(NodeId q, NodeId k, NodeId v, std::optional<NodeId> mask,
                                        double scale, bool causal, std::string name) {
  for (NodeId id : {q, k, v})
    if (Status s = check_operand(id); !s) return s.error();
  if (mask)
    if (Status s = check_operand(*mask); !s) return s.error();
  const Node& nq = node(q);
  const Node& nk = node(k);
  const Node& nv = node(v);
  const std::pair<const char*, const Node*> roles[] = {{"q", &nq}, {"k", &nk}, {"v", &nv}};
  if (Status s = require_float("attention", "q", nq); !s) return s.error();
  for (const auto& [role, n] : roles) {
    int rank = n->type.shape.rank();
    if (rank < 2) {
      return make_error("attention: ", role, " must be 2-D to 6-D (the last two dims a matrix, "
                        "the others batch dims), got ", describe(*n));
    }
    if (n->type.dtype != nq.type.dtype) {
      return make_error("attention: ", role, " differs from q in dtype: ", describe(*n), " and ",
                        describe(nq), "; cast one of them");
    }
  }
  const Shape& sq = nq.type.shape;
  const Shape& sk = nk.type.shape;
  const Shape& sv = nv.type.shape;
  DimRef head = dim_ref(sq, sq.rank() - 1);
  DimRef k_head = dim_ref(sk, sk.rank() - 1);
  if (k_head.value != head.value || k_head.symbol.index != head.symbol.index) {
    return make_error("attention: k's last dim ", show(k_head), " does not match q's head dim ",
                      show(head), " (q is ", describe(nq), ", k is ", describe(nk), ")");
  }
  DimRef keys = dim_ref(sk, sk.rank() - 2);
  DimRef v_keys = dim_ref(sv, sv.rank() - 2);
  if (v_keys.value != keys.value || v_keys.symbol.index != keys.symbol.index) {
    return make_error("attention: v's second-to-last dim ", show(v_keys),
                      " does not match k's key count ", show(keys), " (k is ", describe(nk),
                      ", v is ", describe(nv), ")");
  }
  std::vector<DimRef> batch;
  (void)broadcast_batch(batch, sq);  // never clashes: batch starts empty
  // Grouped-query attention: k and v may have fewer heads (axis -3) than q when q's are a
  // multiple; query head h reads kv head h / (H_q / H_kv). They broadcast as q's heads.
  auto kv_heads = [&](const char* role, const Node& n) -> Expected<Shape> {
    const Shape& s = n.type.shape;
    if (s.rank() < 3 || sq.rank() < 3) return s;
    DimRef hq = dim_ref(sq, sq.rank() - 3), hk = dim_ref(s, s.rank() - 3);
    if (broadcast_dim(hq, hk)) return s;
    if (hq.symbol.index >= 0 || hk.symbol.index >= 0 || hk.value > hq.value ||
        hq.value % hk.value != 0) {
      return make_error("attention: ", role, " has ", show(hk), " heads (axis -3) and q ",
                        show(hq), ": q's heads must equal them, be a constant multiple of them "
                        "(grouped-query attention) or be 1 (", role, " is ", describe(n),
                        ", q is ", describe(nq), ")");
    }
    std::vector<int64_t> dims = s.dims();
    std::vector<SymbolicDim> symbols = s.symbols();
    dims[static_cast<size_t>(s.rank() - 3)] = hq.value;
    return Shape::make(std::move(dims), std::move(symbols));
  };
  auto gk = kv_heads("k", nk);
  if (!gk) return gk.error();
  auto gv = kv_heads("v", nv);
  if (!gv) return gv.error();
  if (auto clash = broadcast_batch(batch, *gk)) {
    return make_error("attention: the batch dims of k and q do not broadcast: ", describe(nk),
                      " and ", describe(nq), " (", show(clash->got), " against ",
                      show(clash->have), ")");
  }
  if (auto clash = broadcast_batch(batch, *gv)) {
    return make_error("attention: the batch dims of v do not broadcast with q's and k's: ",
                      describe(nv), " against q ", describe(nq), " and k ", describe(nk), " (",
                      show(clash->got), " against ", show(clash->have), ")");
  }
  DimRef queries = dim_ref(sq, sq.rank() - 2);
  if (mask) {
    std::vector<DimRef> scores = batch;
    scores.push_back(queries);
    scores.push_back(keys);
    if (Status s = check_attention_mask(node(*mask), scores); !s) return s.error();
  }
  if (!std::isfinite(scale) || scale == 0.0) {
    return make_error("attention: scale must be finite and non-zero, got ", std::to_string(scale));
  }
  std::vector<DimRef> dims = std::move(batch);
  dims.push_back(queries);
  dims.push_back(dim_ref(sv, sv.rank() - 1));
  auto shape = make_shape(dims);
  if (!shape) return make_error("attention result: ", shape.error().message);
  Node node;
  node.kind = OpKind::attention;
  node.operands = {q, k, v};
  if (mask) node.operands.push_back(*mask);
  node.attrs.scale = scale;
  node.attrs.causal = causal;
  node.type = TensorType{nq.type.dtype, std::move(*shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

Status Builder::add_output(NodeId value) {
  if (Status s = check_operand(value); !s) return s;
  const Node& n = node(value);
  if (n.kind == OpKind::input) {
    return make_error("output '", n.name, "' is a graph input; an output must be computed");
  }
  if (std::find(m_outputs.begin(), m_outputs.end(), value) != m_outputs.end()) {
    return make_error(describe(n), " is already an output");
  }
  m_outputs.push_back(value);
  return Status::success();
}

Expected<Graph> Builder::finish() && {
  if (m_outputs.empty()) return make_error("graph '", m_name, "' has no output");
  if (Status s = renumber_symbols(); !s) return s.error();
  size_t count = m_nodes.size();
  std::vector<int> uses(count, 0);
  for (const Node& n : m_nodes) {
    for (NodeId op : n.operands) ++uses[static_cast<size_t>(op)];
  }
  for (NodeId out : m_outputs) ++uses[static_cast<size_t>(out)];
  for (size_t i = 0; i < count; ++i) {
    if (m_nodes[i].kind != OpKind::input && uses[i] == 0) {
      return make_error(describe(m_nodes[i]), " is never used: it is neither an output nor an "
                        "operand");
    }
  }

  // Decide which unnamed values stay nested. A nested value prints inside its single user, so
  // after parsing it must land exactly where it stands: the user's nested operands, last to first,
  // must fill the indices just below the user, and nesting stays below k_max_nesting.
  std::vector<bool> needs_name(count, false);
  std::vector<NodeId> start(count);  // first index of each node's nested subtree
  std::vector<int> depth(count, 0);
  for (size_t u = 0; u < count; ++u) {
    Node& n = m_nodes[u];
    if (n.name.empty() && uses[u] != 1) needs_name[u] = true;
    // An attention's mask is written by name (mask=NAME), never nested.
    if (n.kind == OpKind::attention && n.operands.size() == 4) {
      auto mask = static_cast<size_t>(n.operands[3]);
      if (m_nodes[mask].name.empty()) needs_name[mask] = true;
    }
    if (n.name.empty() && std::find(m_outputs.begin(), m_outputs.end(), NodeId(u)) !=
                              m_outputs.end()) {
      needs_name[u] = true;
    }
    auto cursor = static_cast<NodeId>(u);
    int deepest = 0;
    for (auto it = n.operands.rbegin(); it != n.operands.rend(); ++it) {
      auto a = static_cast<size_t>(*it);
      if (!m_nodes[a].name.empty() || needs_name[a]) continue;
      if (*it == cursor - 1 && depth[a] + 1 < k_max_nesting) {
        cursor = start[a];
        deepest = std::max(deepest, depth[a] + 1);
      } else {
        needs_name[a] = true;
      }
    }
    start[u] = cursor;
    depth[u] = deepest;
  }
  int next = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!needs_name[i]) continue;
    std::string name;
    do {
      name = std::to_string(next++);
      name.insert(0, 1, 't');
    } while (m_names.count(name));
    if (Status s = set_name(static_cast<NodeId>(i), name); !s) return s.error();
  }

  auto data = std::make_shared<Graph::Data>();
  data->name = std::move(m_name);
  data->file = std::move(m_file);
  data->nodes = std::move(m_nodes);
  data->inputs = std::move(m_inputs);
  data->outputs = std::move(m_outputs);
  data->use_counts = std::move(uses);
  data->symbols = std::move(m_symbols);
  return Graph(std::move(data));
}

Status Builder::renumber_symbols() {
  if (m_symbols.empty()) return Status::success();
  // First use: inputs in declaration order, dims left to right.
  std::vector<int32_t> renamed(m_symbols.size(), -1);
  int32_t next = 0;
  for (NodeId id : m_inputs) {
    const Shape& shape = m_nodes[static_cast<size_t>(id)].type.shape;
    for (int i = 0; i < shape.rank(); ++i) {
      int32_t sym = shape.symbol(i);
      if (sym >= 0 && renamed[static_cast<size_t>(sym)] < 0) renamed[static_cast<size_t>(sym)] = next++;
    }
  }
  for (size_t i = 0; i < m_symbols.size(); ++i) {
    if (renamed[i] < 0)
      return make_error("dim '", m_symbols[i].name, "' is never used: no input has it");
  }
  std::vector<Symbol> symbols(m_symbols.size());
  for (size_t i = 0; i < m_symbols.size(); ++i)
    symbols[static_cast<size_t>(renamed[i])] = std::move(m_symbols[i]);
  m_symbols = std::move(symbols);
  for (Node& node : m_nodes) {
    if (!node.type.shape.symbolic()) continue;
    std::vector<SymbolicDim> dims = node.type.shape.symbols();
    for (SymbolicDim& d : dims)
      if (d.index >= 0) d.index = renamed[static_cast<size_t>(d.index)];
    auto shape = Shape::make(node.type.shape.dims(), std::move(dims));
    if (!shape) return shape.error();
    node.type.shape = std::move(*shape);
  }
  return Status::success();
}

Expected<Graph> Graph::bind(const std::vector<int64_t>& values) const {
  const std::vector<Symbol>& syms = symbols();
  if (values.size() != syms.size())
    return make_error("graph '", name(), "' has ", std::to_string(syms.size()),
                      " symbolic dims, got ", std::to_string(values.size()), " values");
  for (size_t i = 0; i < syms.size(); ++i) {
    if (values[i] < syms[i].lo || values[i] > syms[i].hi)
      return make_error(syms[i].name, " = ", std::to_string(values[i]),
                        " is outside its range ", std::to_string(syms[i].lo), "..",
                        std::to_string(syms[i].hi));
  }
  if (syms.empty()) return *this;
  auto data = std::make_shared<Data>(*m_data);
  data->symbols.clear();
  for (Node& node : data->nodes) {
    if (!node.type.shape.symbolic()) continue;
    std::vector<int64_t> dims = node.type.shape.dims();
    for (int i = 0; i < node.type.shape.rank(); ++i) {
      int32_t sym = node.type.shape.symbol(i);
      if (sym >= 0) dims[static_cast<size_t>(i)] = values[static_cast<size_t>(sym)];
    }
    auto shape = Shape::make(std::move(dims));
    if (!shape) return shape.error();  // cannot happen: values are at most the upper bounds
    node.type.shape = std::move(*shape);
  }
  return Graph(std::move(data));
}

Expected<std::vector<int64_t>> Graph::symbol_values(
    const std::vector<std::vector<int64_t>>& input_shapes) const {
  const std::vector<Symbol>& syms = symbols();
  if (input_shapes.size() != inputs().size())
    return make_error("graph '", name(), "' takes ", std::to_string(inputs().size()),
                      " inputs, got ", std::to_string(input_shapes.size()));
  std::vector<int64_t> values(syms.size(), 0);
  // Where each symbol's value came from, as (input, dim); named only in an error.
  std::vector<std::pair<size_t, int>> given_by(syms.size());
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    const Node& input = node(inputs()[i]);
    const Shape& shape = input.type.shape;
    const std::vector<int64_t>& dims = input_shapes[i];
    if (dims.size() != static_cast<size_t>(shape.rank()))
      return make_error("input '", input.name, "' must be ", to_string(input.type), " (rank ",
                        std::to_string(shape.rank()), "), got ", to_string_unchecked(dims));
    auto where = [&](size_t in, int d) {
      return "input '" + node(inputs()[in]).name + "' dim " + std::to_string(d);
    };
    for (int d = 0; d < shape.rank(); ++d) {
      int64_t got = dims[static_cast<size_t>(d)];
      int32_t sym = shape.symbol(d);
      if (sym < 0) {
        if (got != shape.dim(d))
          return make_error(where(i, d), " must be ", std::to_string(shape.dim(d)), ", got ",
                            std::to_string(got), " (", to_string(input.type), ")");
        continue;
      }
      const Symbol& symbol = syms[static_cast<size_t>(sym)];
      if (got < symbol.lo || got > symbol.hi)
        return make_error(where(i, d), ": ", symbol.name, " = ", std::to_string(got),
                          " is outside its range ", std::to_string(symbol.lo), "..",
                          std::to_string(symbol.hi));
      auto& value = values[static_cast<size_t>(sym)];
      const auto& first = given_by[static_cast<size_t>(sym)];
      if (value != 0 && value != got)
        return make_error(where(i, d), " gives ", symbol.name, " = ", std::to_string(got), ", but ",
                          where(first.first, first.second), " gives ", symbol.name, " = ",
                          std::to_string(value));
      if (value == 0) given_by[static_cast<size_t>(sym)] = {i, d};
      value = got;
    }
  }
  return values;
}

std::vector<EmbeddingIds> embedding_ids(const Graph& graph) {
  std::vector<EmbeddingIds> found;
  const std::vector<NodeId>& order = graph.inputs();
  for (const Node& n : graph.nodes()) {
    if (n.kind != OpKind::embedding) continue;
    auto slot = std::find(order.begin(), order.end(), n.operands[1]);
    if (slot == order.end()) continue;
    found.push_back({static_cast<size_t>(slot - order.begin()), n.operands[0],
                     graph.node(n.operands[0]).type.shape.dim(0)});
  }
  return found;
}

std::string embedding_id_error(std::string_view input, int64_t id, int64_t at,
                               const std::vector<int64_t>& shape, std::string_view table,
                               int64_t rows) {
  std::string index;
  for (size_t d = shape.size(); d-- > 0;) {
    index = std::to_string(at % shape[d]) + (index.empty() ? "" : ", ") + index;
    at /= shape[d];
  }
  std::string named = table.empty() ? "" : " '" + std::string(table) + "'";
  return "input '" + std::string(input) + "' holds " + std::to_string(id) + " at [" + index +
         "], outside the embedding table" + named + " of " + std::to_string(rows) + " rows ([0, " +
         std::to_string(rows) + "))";
}

}  // namespace kiln::ir
