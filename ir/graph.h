// The immutable tensor graph: nodes in topological order, built by validating constructors.
#pragma once

#include "ir/types.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::ir {

// The most operands one concat takes.
inline constexpr int k_max_concat = 64;

// Every op kind, numbered by its position in ir/ops.def (append-only: the number is hashed).
enum class OpKind : uint8_t {
#define KILN_OP(name, min_operands, max_operands, category, fusion, result) name,
#include "ir/ops.def"
};

// How many kinds ops.def lists.
inline constexpr int k_op_kind_count = 0
#define KILN_OP(name, min_operands, max_operands, category, fusion, result) +1
#include "ir/ops.def"
    ;

// How an op is parsed, printed, hashed and verified (ops.def's category column).
enum class OpCategory : uint8_t {
  input, matmul, binary, unary, cast, softmax, reduce, norm, layout, attention, select, arange,
  gather, scan
};

// How the fuser treats an op (ops.def's fusion column).
enum class FusionClass : uint8_t { source, anchor, pointwise, layout, reshape };

// Where an op's result dtype comes from (ops.def's result column).
enum class ResultDType : uint8_t { declared, operand, cast_to, boolean, selected };

// The op's name as the text writes it (gelu_tanh is written gelu, with approximate="tanh").
std::string_view to_string(OpKind kind);
// The kind the text's op name gives, nullopt for an unknown name (or a kind only written as
// another op with an attribute).
std::optional<OpKind> parse_op_kind(std::string_view text);
// gelu's `approximate` argument: "none" gives gelu, "tanh" gelu_tanh; nullopt for another value
// or another kind.
std::optional<OpKind> approximate_kind(OpKind kind, std::string_view approximate);
// "tanh" for gelu_tanh, "none" for every other kind.
std::string_view approximate_of(OpKind kind);
OpCategory category(OpKind kind);
FusionClass fusion_class(OpKind kind);
ResultDType result_dtype(OpKind kind);
// How many tensors the text writes positionally (a binary op's literal counts; attention's mask,
// written mask=NAME, does not).
int min_operands(OpKind kind);
int max_operands(OpKind kind);
// eq, ne, lt, le, gt, ge: binary ops whose result is bool.
bool is_comparison(OpKind kind);
// True when unary or binary op `kind` on operands of `dtype` is computed exactly, by each
// backend's typed layer (comparisons, logical ops, integer arithmetic), rather than by
// ir/scalar.h's float formulas.
bool is_exact_op(OpKind kind, DType dtype);
// "matmul, add, ... or attention": every op the text can write, in table order.
std::string op_names();

// Values written nested deeper than this are given names when a graph is printed, and the parser
// reports deeper nesting as an error, so no walk over user input recurses further.
inline constexpr int k_max_nesting = 256;

// Index of a node in Graph::nodes(); operands always point to earlier nodes.
using NodeId = int32_t;

// Which side of a binary op is a literal, if any; for where, which of its two value operands
// (both: `literal` the first, `literal2` the second).
enum class LiteralSide : uint8_t { none, lhs, rhs, both };

// Attributes; each op kind reads only its own.
struct Attrs {
  bool transpose_a = false;                 // matmul
  bool transpose_b = false;                 // matmul
  std::optional<Precision> precision;       // matmul: overrides the graph mode (never automatic)
  // matmul: the result's dtype where it is not the operands' (only f32 from f16 or bf16
  // operands: the fp32 accumulators, not rounded); unset for the operands' dtype.
  std::optional<DType> out_dtype;
  LiteralSide literal_side = LiteralSide::none;  // binary
  double literal = 0.0;   // binary and where, when literal_side != none: the value, in the
                          // dtype of the tensor it meets (an integer, 0 or 1 for bool, +-inf)
  double literal2 = 0.0;                    // where, when literal_side == both: b
  DType cast_to = DType::f32;               // cast; arange: the result's dtype
  int axis = 0;  // softmax, reduce, slice, concat: normalised to 0..rank-1 of the operand
  bool keepdim = false;                     // reduce
  double eps = 0.0;                         // norm
  int64_t start = 0, end = 0;               // slice: normalised, 0 <= start < end <= dim
  int64_t shift = 0;  // roll: as written, |shift| < 2^31 (taken mod the dim where it runs)
  std::vector<int> dims;                    // permute: result dim i is operand dim dims[i]
  double scale = 0.0;                       // attention: finite and non-zero
  bool causal = false;                      // attention: key j > query i is masked out
  std::vector<int64_t> shape;               // reshape: the shape asked for (one -1 inferred)
  std::vector<SymbolicDim> shape_symbols;   // reshape: shape[i]'s symbol, when it names one
  bool operator==(const Attrs&) const = default;
};

// An op's attributes as the text takes them when none is given (ops.def's KILN_DEFAULT rows, an
// axis of -1 meaning the last; every other field as Attrs{} has it). Builder::add takes its
// attributes as given, so a caller starts from these.
Attrs default_attrs(OpKind kind);

// One value of the graph. `name` is for people only: it never enters the hash.
// An empty name marks a value written nested inside another expression.
struct Node {
  OpKind kind = OpKind::input;
  std::vector<NodeId> operands;
  Attrs attrs;
  TensorType type;
  std::string name;
  // Where the op is written in its source file (set by the parser; 0 when unknown). For error
  // messages only: it never enters the hash or the printed form.
  int line = 0;
  int column = 0;
};

// A symbolic dimension, `dim NAME: LO..HI`: one name for a size known only at run time, inside
// an inclusive range. A graph's symbols are numbered by first use (inputs in declaration order,
// dims left to right), so their names and declaration order never enter the hash.
struct Symbol {
  std::string name;
  int64_t lo = 1;
  int64_t hi = 1;
  int line = 0;  // where it is declared (0 when unknown); for messages only
  int column = 0;
};

// The largest value a symbol may take: kernels index with 32-bit integers.
inline constexpr int64_t k_max_symbol_value = (int64_t{1} << 31) - 1;

// "B in 1..4096".
std::string describe(const Symbol& symbol);

class Graph;

// A literal operand's fit in `dtype`, the rules of Builder::add_binary_literal and add_where: a
// float (finite or +-inf) for a float tensor, an integer within the type and +-2^53 for an
// integer one, 0 or 1 for bool; never NaN.
Status check_literal(DType dtype, double literal);

// Builds a Graph one node at a time; every add_* validates its operands and infers the result
// type, returning an error (without location) that the parser decorates with file:line:col.
class Builder {
public:
  explicit Builder(std::string graph_name);

  // Declares a symbolic dimension with the inclusive range lo..hi (1 <= lo <= hi <= 2^31 - 1);
  // returns its index for SymbolicDim. Symbols are declared before the inputs that use them.
  Expected<int32_t> add_symbol(std::string name, int64_t lo, int64_t hi);
  std::optional<int32_t> find_symbol(std::string_view name) const;
  const std::vector<Symbol>& symbols() const { return m_symbols; }
  void set_symbol_location(int32_t index, int line, int column);

  // `type` may have symbolic dims naming declared symbols.
  Expected<NodeId> add_input(std::string name, TensorType type);
  // The result has the operands' dtype, or `out_dtype` where given: the operands' own, or f32
  // from f16 or bf16 operands (the accumulators, not rounded to the operands' dtype).
  Expected<NodeId> add_matmul(NodeId a, NodeId b, bool transpose_a = false,
                              bool transpose_b = false,
                              std::optional<Precision> precision = std::nullopt,
                              std::string name = {},
                              std::optional<DType> out_dtype = std::nullopt);
  // A binary op (OpCategory::binary) of two tensors of one dtype, numpy broadcasting. Arithmetic
  // (add, sub, mul, maximum, minimum) takes float and integer tensors, div and pow float ones,
  // comparisons any dtype (the result is bool), logical_and/or bool ones.
  Expected<NodeId> add_binary(OpKind kind, NodeId a, NodeId b, std::string name = {});
  // A binary op with one literal operand on `side` (lhs or rhs), in the tensor's dtype: a float
  // (finite or +-inf) for a float tensor, an integer within the type and +-2^53 for an integer
  // one, 0 or 1 for bool.
  Expected<NodeId> add_binary_literal(OpKind kind, NodeId tensor, double literal, LiteralSide side,
                                      std::string name = {});
  // A unary op (OpCategory::unary): neg and abs take float and integer tensors, logical_not
  // bool ones, every other one float ones.
  Expected<NodeId> add_unary(OpKind kind, NodeId x, std::string name = {});
  // embedding(table, ids): table [V, D] of a float dtype, ids i32 or i64 of rank 0 to 5; the
  // result, table's dtype, is ids.shape + [D], row r of the table where ids holds r (zeros for an
  // id outside [0, V)).
  Expected<NodeId> add_embedding(NodeId table, NodeId ids, std::string name = {});
  // arange(n): [0, 1, ..., n-1] as `dtype` (i32, i64 or f32), `shape` 1-D: [n], n a constant or a
  // declared symbol (at its upper bound, as an input's dims).
  Expected<NodeId> add_arange(Shape shape, DType dtype = DType::i64, std::string name = {});
  // where(cond, a, b): cond bool; a and b tensors of one dtype, or literals (`a_literal`,
  // `b_literal` when set, in the other's dtype, f32 when both are); the three broadcast.
  Expected<NodeId> add_where(NodeId cond, std::optional<NodeId> a, std::optional<NodeId> b,
                             double a_literal = 0.0, double b_literal = 0.0,
                             std::string name = {});
  Expected<NodeId> add_cast(NodeId x, DType to, std::string name = {});
  // axis may be negative (counted from the end).
  Expected<NodeId> add_softmax(NodeId x, int axis = -1, std::string name = {});
  // cumsum(x, axis): x of any dtype but bool (a running count of a mask casts it first), the
  // result x's type; axis may be negative.
  Expected<NodeId> add_scan(OpKind kind, NodeId x, int axis = -1, std::string name = {});
  // kind must be sum/mean/max; axis may be negative. keepdim keeps the axis with size 1.
  Expected<NodeId> add_reduce(OpKind kind, NodeId x, int axis = -1, bool keepdim = false,
                              std::string name = {});
  // rms_norm(x, weight) or layer_norm(x, weight, bias) over x's last axis; weight and bias are
  // 1-D of that axis's size and x's dtype; eps is positive and finite.
  Expected<NodeId> add_rms_norm(NodeId x, NodeId weight,
                               double eps = default_attrs(OpKind::rms_norm).eps,
                               std::string name = {});
  Expected<NodeId> add_layer_norm(NodeId x, NodeId weight, NodeId bias,
                                  double eps = default_attrs(OpKind::layer_norm).eps,
                                  std::string name = {});
  // The same elements in `shape` (row-major). At most one dim is -1, inferred from the count; a
  // symbolic dim (symbols[i].index >= 0, dims[i] its upper bound) must be one of x's.
  Expected<NodeId> add_reshape(NodeId x, std::vector<int64_t> dims,
                               std::vector<SymbolicDim> symbols = {}, std::string name = {});
  // x broadcast to `dims` as numpy broadcasts (aligned at the last dim): each of x's dims equals
  // the result's or is 1; -1 keeps x's dim there; a symbolic dim (symbols[i].index >= 0) is
  // declared. Kernels read x in place (a broadcast read), never a copy.
  Expected<NodeId> add_expand(NodeId x, std::vector<int64_t> dims,
                              std::vector<SymbolicDim> symbols = {}, std::string name = {});
  // dims is a permutation of 0..rank-1 (negative entries count from the end).
  Expected<NodeId> add_permute(NodeId x, std::vector<int> dims, std::string name = {});
  // roll(x, shift, axis): y[.., i, ..] = x[.., (i - shift) mod n, ..], n x's dim `axis`
  // (symbolic or not); the shift is kept as written (|shift| < 2^31) and reduced mod n where the
  // value is computed.
  Expected<NodeId> add_roll(NodeId x, int64_t shift, int axis = -1, std::string name = {});
  // Elements start..end-1 along axis; negative start/end count from the end (as Python's).
  Expected<NodeId> add_slice(NodeId x, int axis, int64_t start, int64_t end,
                             std::string name = {});
  // The operands (1 to k_max_concat, same dtype and rank, equal dims but along axis) joined.
  Expected<NodeId> add_concat(const std::vector<NodeId>& operands, int axis,
                              std::string name = {});
  // softmax(q k^T * scale + mask, causal) v with q [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv]
  // (2-D to 6-D, one dtype; the batch dims broadcast as matmul's), giving q's dtype and
  // [batch..., Sq, Dv]. The mask, when given, has q's dtype and broadcasts to the scores
  // [batch..., Sq, Sk] without enlarging them; causal masks key j > query i (top-left aligned).
  // Fails, naming the operand and dim, on any mismatch, or on a scale that is zero or not finite.
  // The graph keeps the mask as operand 3 and always gives it a name (the text writes mask=NAME).
  Expected<NodeId> add_attention(NodeId q, NodeId k, NodeId v, std::optional<NodeId> mask,
                                 double scale, bool causal, std::string name = {});
  // Any computed op from its kind, operands and attributes, through the typed add_* above (the
  // same checks and errors): a binary op with attrs.literal_side set takes one operand, where
  // takes 3 less its literals (attrs.literal_side: lhs a, rhs b, both), arange none (its size is
  // attrs.shape with attrs.shape_symbols, its dtype attrs.cast_to), attention
  // takes 3 or 4 (the 4th is the mask), reshape reads attrs.shape and attrs.shape_symbols. Fails
  // for OpKind::input (add_input declares inputs) and on a wrong operand count.
  Expected<NodeId> add(OpKind kind, const std::vector<NodeId>& operands, const Attrs& attrs,
                       std::string name = {});
  Status add_output(NodeId value);

  // Gives a value its name after the fact (the parser names a value once its statement ends).
  Status set_name(NodeId id, std::string name);
  // Records where a value is written, and the file the graph comes from (for messages only).
  void set_location(NodeId id, int line, int column);
  void set_source_file(std::string file) { m_file = std::move(file); }
  // Finds a named value.
  std::optional<NodeId> find(std::string_view name) const;
  const Node& node(NodeId id) const { return m_nodes[static_cast<size_t>(id)]; }
  size_t size() const { return m_nodes.size(); }
  const std::vector<NodeId>& outputs() const { return m_outputs; }
  const std::vector<NodeId>& inputs() const { return m_inputs; }

  // Checks the whole graph (at least one output, every computed value used, every symbol used)
  // and freezes it; symbols are renumbered by first use.
  // Unnamed values that could not be printed nested where they stand (used twice, an output,
  // out of order, nested too deep) get names t0, t1, ... so printing and parsing keep node order.
  Expected<Graph> finish() &&;

private:
  Expected<NodeId> push(Node node);
  Status check_operand(NodeId id) const;
  Status renumber_symbols();

  std::string m_name;
  std::string m_file;
  std::vector<Node> m_nodes;
  std::unordered_map<std::string, NodeId> m_names;  // lookup only, never iterated
  std::vector<NodeId> m_inputs;
  std::vector<NodeId> m_outputs;
  std::vector<Symbol> m_symbols;
};

// A verified graph. Immutable; cheap to copy (shares its nodes).
class Graph {
public:
  const std::string& name() const { return m_data->name; }
  // The file the graph was parsed from ("" when built otherwise); for messages only.
  const std::string& source_file() const { return m_data->file; }
  const std::vector<Node>& nodes() const { return m_data->nodes; }
  const Node& node(NodeId id) const { return m_data->nodes[static_cast<size_t>(id)]; }
  // Inputs in declaration order: the calling convention.
  const std::vector<NodeId>& inputs() const { return m_data->inputs; }
  // Outputs in declaration order.
  const std::vector<NodeId>& outputs() const { return m_data->outputs; }
  // How many nodes use each node as an operand (outputs count as a use too).
  const std::vector<int>& use_counts() const { return m_data->use_counts; }
  // The symbolic dimensions, numbered by first use; empty for a static graph.
  const std::vector<Symbol>& symbols() const { return m_data->symbols; }
  bool symbolic() const { return !m_data->symbols.empty(); }

  // The static graph with symbol i replaced by values[i] everywhere (same nodes, ids, names and
  // calling convention). Fails when the count is wrong or a value is outside its range.
  Expected<Graph> bind(const std::vector<int64_t>& values) const;
  // Each symbol's value as the input shapes give it (calling-convention order). Fails, naming the
  // input and dim, on a wrong count or rank, a constant dim that differs, a symbol given two
  // values, or a value outside its range ("B = 5000 is outside its range 1..4096").
  Expected<std::vector<int64_t>> symbol_values(
      const std::vector<std::vector<int64_t>>& input_shapes) const;

private:
  friend class Builder;
  struct Data {
    std::string name;
    std::string file;
    std::vector<Node> nodes;
    std::vector<NodeId> inputs;
    std::vector<NodeId> outputs;
    std::vector<int> use_counts;
    std::vector<Symbol> symbols;
  };
  explicit Graph(std::shared_ptr<const Data> data) : m_data(std::move(data)) {}
  std::shared_ptr<const Data> m_data;
};

// An embedding whose ids are a graph input (ids computed in the graph are not listed: their rows
// out of range are zeros, unchecked): the input's slot in Graph::inputs(), and its table.
struct EmbeddingIds {
  size_t input = 0;
  NodeId table = -1;
  int64_t rows = 0;  // V
};
std::vector<EmbeddingIds> embedding_ids(const Graph& graph);

// The error for an id outside its table, `at` its row-major index in `shape`: "input 'ids' holds
// 40 at [1, 3], outside the embedding table 'emb' of 32 rows ([0, 32))" (an unnamed table unnamed).
std::string embedding_id_error(std::string_view input, int64_t id, int64_t at,
                               const std::vector<int64_t>& shape, std::string_view table,
                               int64_t rows);

}  // namespace kiln::ir
