// Canonical graph bytes (names and layout excluded) and their XXH3-128 hash.
#include "ir/hash.h"

#include "support/byte_writer.h"

#include <xxhash.h>

#include <bit>
#include <cstdio>
#include <optional>
#include <vector>

namespace kiln::ir {

std::string canonical_bytes(const Graph& graph) {
  ByteWriter w;
  w.raw("kiln-graph");
  w.u32(k_canonical_format_version);
  w.u32(static_cast<uint32_t>(graph.nodes().size()));
  for (const Node& node : graph.nodes()) {
    w.u8(static_cast<uint8_t>(node.kind));
    w.u8(static_cast<uint8_t>(node.type.dtype));
    w.u8(static_cast<uint8_t>(node.type.shape.rank()));
    for (int64_t d : node.type.shape.dims()) w.i64(d);
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
        w.u32(static_cast<uint32_t>(a.axis));
        break;
      case OpCategory::input:
      case OpCategory::unary:
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

// Little-endian reads matching ByteWriter, each checked against the bytes left.
class CanonicalReader {
public:
  explicit CanonicalReader(std::string_view bytes) : m_bytes(bytes) {}
  bool ok() const { return m_ok; }
  bool done() const { return m_pos == m_bytes.size(); }
  size_t left() const { return m_bytes.size() - m_pos; }
  uint64_t uint(size_t n) {
    if (!m_ok || left() < n) {
      m_ok = false;
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(m_bytes[m_pos + i])) << (8 * i);
    m_pos += n;
    return v;
  }
  bool expect(std::string_view magic) {
    if (!m_ok || m_bytes.substr(m_pos, magic.size()) != magic) return m_ok = false;
    m_pos += magic.size();
    return true;
  }

private:
  std::string_view m_bytes;
  size_t m_pos = 0;
  bool m_ok = true;
};

constexpr uint8_t k_op_kinds = 0
#define KILN_OP(name, arity, category) +1
#include "ir/ops.def"
#undef KILN_OP
    ;

}  // namespace

Expected<Graph> graph_from_canonical(std::string_view bytes, std::string name) {
  auto bad = [](const std::string& why) { return make_error("canonical graph: ", why); };
  CanonicalReader r(bytes);
  if (!r.expect("kiln-graph")) return bad("not a canonical graph");
  if (r.uint(4) != k_canonical_format_version) return bad("another format version");
  uint64_t count = r.uint(4);
  // A node takes at least 5 bytes: never more nodes than the bytes could hold.
  if (!r.ok() || count > r.left() / 5) return bad("node count is wrong");
  Builder b(std::move(name));
  std::vector<NodeId> ids;  // canonical index -> builder id
  int inputs = 0;
  std::vector<uint64_t> input_nodes;  // canonical indices of the inputs, in node order
  for (uint64_t i = 0; i < count; ++i) {
    auto kind = static_cast<uint8_t>(r.uint(1));
    auto dtype = static_cast<uint8_t>(r.uint(1));
    auto rank = static_cast<uint8_t>(r.uint(1));
    if (!r.ok() || kind >= k_op_kinds || dtype > static_cast<uint8_t>(DType::bf16) ||
        rank > k_max_rank)
      return bad("node " + std::to_string(i) + " is malformed");
    std::vector<int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(static_cast<int64_t>(r.uint(8)));
    auto arity = static_cast<uint8_t>(r.uint(1));
    std::vector<NodeId> operands;
    for (int k = 0; k < arity; ++k) {
      uint64_t op = r.uint(4);
      if (!r.ok() || op >= ids.size()) return bad("node " + std::to_string(i) + " uses a later node");
      operands.push_back(ids[op]);
    }
    auto op_kind = static_cast<OpKind>(kind);
    Expected<NodeId> added = make_error("canonical graph: node ", std::to_string(i),
                                        " has the wrong operands");
    switch (category(op_kind)) {
      case OpCategory::input: {
        auto shape = Shape::make(dims);
        if (!shape) return bad(shape.error().message);
        if (arity == 0) {
          added = b.add_input("x" + std::to_string(inputs++),
                              TensorType{static_cast<DType>(dtype), *shape});
          input_nodes.push_back(i);
        }
        break;
      }
      case OpCategory::matmul: {
        auto ta = r.uint(1), tb = r.uint(1), precision = r.uint(1);
        std::optional<Precision> p;
        if (precision != 0xff) {
          if (precision >= static_cast<uint64_t>(Precision::automatic)) return bad("bad precision");
          p = static_cast<Precision>(precision);
        }
        if (r.ok() && arity == 2 && ta <= 1 && tb <= 1)
          added = b.add_matmul(operands[0], operands[1], ta == 1, tb == 1, p);
        break;
      }
      case OpCategory::binary: {
        auto side = r.uint(1);
        if (side == static_cast<uint64_t>(LiteralSide::none) && arity == 2) {
          added = b.add_binary(op_kind, operands[0], operands[1]);
        } else if (side <= static_cast<uint64_t>(LiteralSide::rhs) && arity == 1) {
          double literal = std::bit_cast<double>(r.uint(8));
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
        auto to = r.uint(1);
        if (arity == 1 && to <= static_cast<uint64_t>(DType::bf16))
          added = b.add_cast(operands[0], static_cast<DType>(to));
        break;
      }
      case OpCategory::softmax: {
        auto axis = r.uint(4);
        if (arity == 1 && axis < static_cast<uint64_t>(k_max_rank))
          added = b.add_softmax(operands[0], static_cast<int>(axis));
        break;
      }
    }
    if (!r.ok()) return bad("truncated");
    if (!added) return bad("node " + std::to_string(i) + ": " + added.error().message);
    // The type written for a computed value must be the one its op gives.
    const TensorType& type = b.node(*added).type;
    if (type.dtype != static_cast<DType>(dtype) || type.shape.dims() != dims)
      return bad("node " + std::to_string(i) + "'s type is not what its op gives");
    ids.push_back(*added);
  }
  // Inputs are declared in node order (the calling convention): the list must say just that.
  uint64_t input_count = r.uint(4);
  if (!r.ok() || input_count != input_nodes.size()) return bad("input count is wrong");
  for (uint64_t expected : input_nodes)
    if (r.uint(4) != expected) return bad("inputs are not listed in node order");
  uint64_t output_count = r.uint(4);
  if (!r.ok() || output_count > r.left() / 4) return bad("output count is wrong");
  for (uint64_t i = 0; i < output_count; ++i) {
    uint64_t id = r.uint(4);
    if (!r.ok() || id >= ids.size()) return bad("an output names no node");
    if (Status s = b.add_output(ids[id]); !s) return bad(s.error().message);
  }
  if (!r.ok() || !r.done()) return bad("trailing bytes");
  return std::move(b).finish();
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
