// Canonical graph bytes (names and layout excluded) and their XXH3-128 hash.
#include "ir/hash.h"

#include "support/byte_writer.h"
#include "support/sticky_reader.h"

#include <xxhash.h>

#include <bit>
#include <cstdio>
#include <optional>
#include <vector>

namespace kiln::ir {

namespace {
constexpr std::string_view k_canonical_magic = "kiln-graph";

// A shape's dims as written: a constant as itself, symbol i as -(i + 1).
int64_t encoded_dim(const Shape& shape, int i) {
  return shape.symbol(i) >= 0 ? -(int64_t{shape.symbol(i)} + 1) : shape.dim(i);
}

std::vector<int64_t> encoded_dims(const Shape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.rank(); ++i) dims.push_back(encoded_dim(shape, i));
  return dims;
}
}  // namespace

std::string canonical_bytes(const Graph& graph) {
  ByteWriter w;
  w.reserve(64 + graph.nodes().size() * 48);
  w.raw(k_canonical_magic);
  // Static graphs keep version 1 (their hashes never change); symbolic ones add their ranges.
  w.u32(graph.symbolic() ? k_canonical_symbolic_version : k_canonical_format_version);
  if (graph.symbolic()) {
    w.u32(static_cast<uint32_t>(graph.symbols().size()));
    for (const Symbol& symbol : graph.symbols()) {
      w.i64(symbol.lo);
      w.i64(symbol.hi);
    }
  }
  w.u32(static_cast<uint32_t>(graph.nodes().size()));
  for (const Node& node : graph.nodes()) {
    w.u8(static_cast<uint8_t>(node.kind));
    w.u8(static_cast<uint8_t>(node.type.dtype));
    w.u8(static_cast<uint8_t>(node.type.shape.rank()));
    const Shape& shape = node.type.shape;
    for (int i = 0; i < shape.rank(); ++i) w.i64(encoded_dim(shape, i));
    w.u8(static_cast<uint8_t>(node.operands.size()));
    for (NodeId op : node.operands) w.u32(static_cast<uint32_t>(op));
    const Attrs& a = node.attrs;
    switch (category(node.kind)) {
      case OpCategory::matmul:
        w.u8(a.transpose_a);
        w.u8(a.transpose_b);
        w.u8(a.precision ? static_cast<uint8_t>(*a.precision) : uint8_t{0xff});
        break;
      case OpCategory::binary:
        w.u8(static_cast<uint8_t>(a.literal_side));
        if (a.literal_side != LiteralSide::none) w.f64(a.literal);
        break;
      case OpCategory::cast:
        w.u8(static_cast<uint8_t>(a.cast_to));
        break;
      case OpCategory::softmax:
      case OpCategory::scan:
        w.u32(static_cast<uint32_t>(a.axis));
        break;
      case OpCategory::reduce:
        w.u32(static_cast<uint32_t>(a.axis));
        w.u8(a.keepdim);
        break;
      case OpCategory::norm:
        w.f64(a.eps);
        break;
      case OpCategory::layout:
        // reshape: the result type says it all.
        if (node.kind == OpKind::permute) {
          w.u8(static_cast<uint8_t>(a.dims.size()));
          for (int d : a.dims) w.u8(static_cast<uint8_t>(d));
        } else if (node.kind == OpKind::slice) {
          w.u32(static_cast<uint32_t>(a.axis));
          w.i64(a.start);
          w.i64(a.end);
        } else if (node.kind == OpKind::concat) {
          w.u32(static_cast<uint32_t>(a.axis));
        } else if (node.kind == OpKind::roll) {
          w.u32(static_cast<uint32_t>(a.axis));
          w.i64(a.shift);
        }
        break;
      case OpCategory::attention:
        // The operand count (3 or 4) says whether there is a mask.
        w.f64(a.scale);
        w.u8(a.causal);
        break;
      case OpCategory::select:
        // where: which of its values are literals, then those literals (a's first).
        w.u8(static_cast<uint8_t>(a.literal_side));
        if (a.literal_side != LiteralSide::none) w.f64(a.literal);
        if (a.literal_side == LiteralSide::both) w.f64(a.literal2);
        break;
      case OpCategory::input:
      case OpCategory::unary:
      case OpCategory::arange:  // its size and dtype are the result's type
      case OpCategory::gather:
        break;
    }
  }
  w.u32(static_cast<uint32_t>(graph.inputs().size()));
  for (NodeId id : graph.inputs()) w.u32(static_cast<uint32_t>(id));
  w.u32(static_cast<uint32_t>(graph.outputs().size()));
  for (NodeId id : graph.outputs()) w.u32(static_cast<uint32_t>(id));
  return w.take();
}

namespace {

constexpr uint8_t k_op_kinds = k_op_kind_count;

}  // namespace

Expected<Graph> graph_from_canonical(std::string_view bytes, std::string name) {
  auto bad = [](const std::string& why) { return make_error("canonical graph: ", why); };
  StickyReader r(bytes);
  if (r.raw(k_canonical_magic.size()) != k_canonical_magic) return bad("not a canonical graph");
  uint32_t version = r.u32();
  if (version != k_canonical_format_version && version != k_canonical_symbolic_version)
    return bad("another format version");
  Builder b(std::move(name));
  std::vector<Symbol> symbols;
  if (version == k_canonical_symbolic_version) {
    uint64_t symbol_count = r.u32();
    if (!r.ok() || symbol_count == 0 || symbol_count > r.left() / 16)
      return bad("symbol count is wrong");
    for (uint64_t i = 0; i < symbol_count; ++i) {
      auto lo = static_cast<int64_t>(r.u64());
      auto hi = static_cast<int64_t>(r.u64());
      auto added = b.add_symbol("D" + std::to_string(i), lo, hi);
      if (!r.ok() || !added) return bad("symbol " + std::to_string(i) + " is malformed");
    }
  }
  uint64_t count = r.u32();
  // A node takes at least 5 bytes: never more nodes than the bytes could hold.
  if (!r.ok() || count > r.left() / 5) return bad("node count is wrong");
  std::vector<NodeId> ids;  // canonical index -> builder id
  int inputs = 0;
  std::vector<uint64_t> input_nodes;  // canonical indices of the inputs, in node order
  for (uint64_t i = 0; i < count; ++i) {
    uint8_t kind = r.u8();
    uint8_t dtype = r.u8();
    uint8_t rank = r.u8();
    if (!r.ok() || kind >= k_op_kinds || dtype > static_cast<uint8_t>(DType::boolean) ||
        rank > k_max_rank)
      return bad("node " + std::to_string(i) + " is malformed");
    std::vector<int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(static_cast<int64_t>(r.u64()));
    uint8_t arity = r.u8();
    std::vector<NodeId> operands;
    for (int k = 0; k < arity; ++k) {
      uint64_t op = r.u32();
      if (!r.ok() || op >= ids.size()) return bad("node " + std::to_string(i) + " uses a later node");
      operands.push_back(ids[op]);
    }
    auto op_kind = static_cast<OpKind>(kind);
    std::optional<Expected<NodeId>> added;  // unset: the node's operands or fields are wrong
    switch (category(op_kind)) {
      case OpCategory::input:
      case OpCategory::arange: {
        std::vector<int64_t> values = dims;
        std::vector<SymbolicDim> dim_symbols(dims.size());
        for (size_t d = 0; d < dims.size(); ++d) {
          if (dims[d] >= 0) continue;
          uint64_t index = static_cast<uint64_t>(-(dims[d] + 1));
          if (index >= b.symbols().size()) return bad("an input names no symbol");
          const Symbol& symbol = b.symbols()[index];
          values[d] = symbol.hi;
          dim_symbols[d] = {static_cast<int32_t>(index), symbol.name};
        }
        auto shape = Shape::make(values, dim_symbols);
        if (!shape) return bad(shape.error().message);
        if (arity == 0 && op_kind == OpKind::arange) {
          added = b.add_arange(*shape, static_cast<DType>(dtype));
        } else if (arity == 0) {
          added = b.add_input("x" + std::to_string(inputs++),
                              TensorType{static_cast<DType>(dtype), *shape});
          input_nodes.push_back(i);
        }
        break;
      }
      case OpCategory::matmul: {
        auto ta = r.u8(), tb = r.u8(), precision = r.u8();
        std::optional<Precision> p;
        if (precision != 0xff) {
          if (precision >= static_cast<uint64_t>(Precision::automatic)) return bad("bad precision");
          p = static_cast<Precision>(precision);
        }
        // The node's dtype is the result's: the operands' own, or f32 from f16 or bf16.
        if (r.ok() && arity == 2 && ta <= 1 && tb <= 1)
          added = b.add_matmul(operands[0], operands[1], ta == 1, tb == 1, p, {},
                               static_cast<DType>(dtype));
        break;
      }
      case OpCategory::binary: {
        auto side = r.u8();
        if (side == static_cast<uint64_t>(LiteralSide::none) && arity == 2) {
          added = b.add_binary(op_kind, operands[0], operands[1]);
        } else if (side <= static_cast<uint64_t>(LiteralSide::rhs) && arity == 1) {
          double literal = std::bit_cast<double>(r.u64());
          if (r.ok())
            added = b.add_binary_literal(op_kind, operands[0], literal,
                                         static_cast<LiteralSide>(side));
        }
        break;
      }
      case OpCategory::unary:
        if (arity == 1) added = b.add_unary(op_kind, operands[0]);
        break;
      case OpCategory::cast: {
        auto to = r.u8();
        if (arity == 1 && to <= static_cast<uint64_t>(DType::boolean))
          added = b.add_cast(operands[0], static_cast<DType>(to));
        break;
      }
      case OpCategory::softmax: {
        auto axis = r.u32();
        if (arity == 1 && axis < static_cast<uint64_t>(k_max_rank))
          added = b.add_softmax(operands[0], static_cast<int>(axis));
        break;
      }
      case OpCategory::scan: {
        auto axis = r.u32();
        if (arity == 1 && axis < static_cast<uint64_t>(k_max_rank))
          added = b.add_scan(op_kind, operands[0], static_cast<int>(axis));
        break;
      }
      case OpCategory::reduce: {
        auto axis = r.u32();
        auto keepdim = r.u8();
        if (arity == 1 && axis < static_cast<uint64_t>(k_max_rank) && keepdim <= 1)
          added = b.add_reduce(op_kind, operands[0], static_cast<int>(axis), keepdim == 1);
        break;
      }
      case OpCategory::norm: {
        double eps = std::bit_cast<double>(r.u64());
        if (r.ok() && op_kind == OpKind::rms_norm && arity == 2)
          added = b.add_rms_norm(operands[0], operands[1], eps);
        if (r.ok() && op_kind == OpKind::layer_norm && arity == 3)
          added = b.add_layer_norm(operands[0], operands[1], operands[2], eps);
        break;
      }
      case OpCategory::layout:
        if ((op_kind == OpKind::reshape || op_kind == OpKind::expand) && arity == 1) {
          std::vector<int64_t> values = dims;
          std::vector<SymbolicDim> dim_symbols(dims.size());
          for (size_t d = 0; d < dims.size(); ++d) {
            if (dims[d] >= 0) continue;
            auto index = static_cast<uint64_t>(-(dims[d] + 1));
            if (index >= b.symbols().size()) return bad("a reshape names no symbol");
            values[d] = b.symbols()[index].hi;
            dim_symbols[d] = {static_cast<int32_t>(index), b.symbols()[index].name};
          }
          added = op_kind == OpKind::reshape ? b.add_reshape(operands[0], values, dim_symbols)
                                             : b.add_expand(operands[0], values, dim_symbols);
        } else if (op_kind == OpKind::permute) {
          uint64_t n = r.u8();
          std::vector<int> perm;
          for (uint64_t d = 0; d < n && d < static_cast<uint64_t>(k_max_rank) + 1; ++d)
            perm.push_back(r.u8());
          if (r.ok() && arity == 1 && n <= static_cast<uint64_t>(k_max_rank))
            added = b.add_permute(operands[0], perm);
        } else if (op_kind == OpKind::slice) {
          auto axis = r.u32();
          auto start = static_cast<int64_t>(r.u64());
          auto end = static_cast<int64_t>(r.u64());
          if (r.ok() && arity == 1 && axis < static_cast<uint64_t>(k_max_rank) && start >= 0 &&
              end >= 0)
            added = b.add_slice(operands[0], static_cast<int>(axis), start, end);
        } else if (op_kind == OpKind::roll) {
          auto axis = r.u32();
          auto shift = static_cast<int64_t>(r.u64());
          if (r.ok() && arity == 1 && axis < static_cast<uint64_t>(k_max_rank))
            added = b.add_roll(operands[0], shift, static_cast<int>(axis));
        } else if (op_kind == OpKind::concat) {
          auto axis = r.u32();
          if (r.ok() && arity >= 1 && axis < static_cast<uint64_t>(k_max_rank))
            added = b.add_concat(operands, static_cast<int>(axis));
        }
        break;
      case OpCategory::gather:
        if (arity == 2) added = b.add_embedding(operands[0], operands[1]);
        break;
      case OpCategory::select: {
        auto side = r.u8();
        double la = 0.0, lb = 0.0;
        if (side != static_cast<uint64_t>(LiteralSide::none)) la = std::bit_cast<double>(r.u64());
        if (side == static_cast<uint64_t>(LiteralSide::both)) lb = std::bit_cast<double>(r.u64());
        if (!r.ok() || side > static_cast<uint64_t>(LiteralSide::both)) break;
        auto literal_side = static_cast<LiteralSide>(side);
        size_t literals = literal_side == LiteralSide::none ? 0 : literal_side == LiteralSide::both ? 2 : 1;
        if (arity + literals != 3) break;
        std::optional<NodeId> va, vb;
        if (literal_side == LiteralSide::none) {
          va = operands[1];
          vb = operands[2];
        } else if (literal_side == LiteralSide::rhs) {
          va = operands[1];
          lb = la;
        } else if (literal_side == LiteralSide::lhs) {
          vb = operands[1];
        }
        added = b.add_where(operands[0], va, vb, la, lb);
        break;
      }
      case OpCategory::attention: {
        double scale = std::bit_cast<double>(r.u64());
        auto causal = r.u8();
        std::optional<NodeId> mask;
        if (arity == 4) mask = operands[3];
        if (r.ok() && (arity == 3 || arity == 4) && causal <= 1)
          added = b.add_attention(operands[0], operands[1], operands[2], mask, scale, causal == 1);
        break;
      }
    }
    if (!r.ok()) return bad("truncated");
    if (!added) return bad("node " + std::to_string(i) + " has the wrong operands");
    if (!*added) return bad("node " + std::to_string(i) + ": " + added->error().message);
    // The type written for a computed value must be the one its op gives.
    const TensorType& type = b.node(**added).type;
    if (type.dtype != static_cast<DType>(dtype) || encoded_dims(type.shape) != dims)
      return bad("node " + std::to_string(i) + "'s type is not what its op gives");
    ids.push_back(**added);
  }
  // Inputs are declared in node order (the calling convention): the list must say just that.
  uint64_t input_count = r.u32();
  if (!r.ok() || input_count != input_nodes.size()) return bad("input count is wrong");
  for (uint64_t expected : input_nodes)
    if (r.u32() != expected) return bad("inputs are not listed in node order");
  uint64_t output_count = r.u32();
  if (!r.ok() || output_count > r.left() / 4) return bad("output count is wrong");
  for (uint64_t i = 0; i < output_count; ++i) {
    uint64_t id = r.u32();
    if (!r.ok() || id >= ids.size()) return bad("an output names no node");
    if (Status s = b.add_output(ids[id]); !s) return bad(s.error().message);
  }
  if (!r.ok() || !r.done()) return bad("trailing bytes");
  auto graph = std::move(b).finish();
  if (!graph) return bad(graph.error().message);
  // Symbols are written in first-use order: reading them back must not renumber them.
  if (canonical_bytes(*graph) != bytes) return bad("symbols are not numbered by first use");
  return graph;
}

std::string Hash128::hex() const {
  char buffer[33];
  std::snprintf(buffer, sizeof buffer, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return buffer;
}

Hash128 hash_bytes(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  return Hash128{h.high64, h.low64};
}

Hash128 graph_hash(const Graph& graph) {
  std::string bytes = canonical_bytes(graph);
  return hash_bytes(bytes.data(), bytes.size());
}

}  // namespace kiln::ir
