// Canonical graph bytes (names and layout excluded) and their XXH3-128 hash.
#include "ir/hash.h"

#include "support/byte_writer.h"

#include <xxhash.h>

#include <cstdio>

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
