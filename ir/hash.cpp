// Canonical graph bytes (names and layout excluded) and their XXH3-128 hash.
#include "ir/hash.h"

#include <xxhash.h>

#include <bit>
#include <cstdio>

namespace kiln::ir {

namespace {

class ByteWriter {
public:
  void u8(uint8_t v) { m_out.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  void bytes(std::string_view s) { m_out.append(s); }
  std::string take() { return std::move(m_out); }

private:
  std::string m_out;
};

}  // namespace

std::string canonical_bytes(const Graph& graph) {
  ByteWriter w;
  w.bytes("kiln-graph");
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
