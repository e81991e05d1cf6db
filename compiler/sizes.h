// Sizes of a symbolic graph's kernels: buckets of each symbol's range, and the extents a kernel
// computes with (a constant, or a product of symbols passed as kernel parameters).
#pragma once

#include "compiler/artifact.h"
#include "compiler/options.h"
#include "ir/graph.h"
#include "support/expected.h"

#include <cstdint>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

namespace kiln::compiler {

// The bucket holding `value`: [1,1] [2,2] [3,4] [5,8] ... [2^(k-1)+1, 2^k], clipped to the
// symbol's range. `value` must lie in the range.
DimRange bucket_of(int64_t value, const ir::Symbol& symbol);
// Every bucket of the symbol's range, smallest first.
std::vector<DimRange> buckets(const ir::Symbol& symbol);
// "[33, 64]".
std::string to_string(const DimRange& range);
// Checks a compile's bucket against `graph`: none for a static graph; for a symbolic one, one
// range per symbol, each a bucket of its symbol. A missing bucket's error lists the symbols and
// their ranges.
Status check_bucket(const ir::Graph& graph, const std::vector<DimRange>& bucket);

// A --dims argument ("B=37,S=100", "B=all,S=100"): per symbol of `graph`, its value, or nullopt
// for every bucket ("all"). Every symbol must be given once, inside its range.
Expected<std::vector<std::optional<int64_t>>> parse_dims(std::string_view text,
                                                         const ir::Graph& graph);
// The buckets holding `values` (each nullopt: every bucket of that symbol), all combinations.
std::vector<std::vector<DimRange>> buckets_for(const ir::Graph& graph,
                                               const std::vector<std::optional<int64_t>>& values);

// The prefix of the kernel parameter that carries symbol i's value: "kiln_dim" + i.
inline constexpr const char* k_dim_param = "kiln_dim";

// A size as a kernel sees it: coef times the product of `symbols` (each a symbol whose bucket
// holds more than one value; a symbol fixed by its bucket is folded into coef).
struct Extent {
  int64_t coef = 1;
  std::vector<uint32_t> symbols;  // sorted, with repetition
  int64_t lo = 1, hi = 1;         // its least and greatest value over the bucket

  static Extent constant(int64_t value) { return {value, {}, value, value}; }
  bool fixed() const { return symbols.empty(); }
  // True when every value over the bucket is a multiple of v.
  bool multiple_of(int64_t v) const { return coef % v == 0; }
  // "768", "kiln_dim0" or "(kiln_dim0 * kiln_dim1 * 768)".
  std::string expr() const;
  Extent operator*(const Extent& other) const;
  // ceil(this / divisor) as a SizeTerm for the artifact.
  SizeTerm term(int64_t divisor = 1) const;
};

// MatmulShape's sizes as extents (the kernel's view of them).
// batch is every batch dim's product (the grid's z, or folded with the row tiles past 65535:
// KernelPlan::folded_rows); a 4-D result's batch index bz is
// (bz / inner_batch, bz % inner_batch), whose element strides in A and B are the outer and
// (inner) batch strides, 0 where the operand broadcasts.
// A 5-D or 6-D result (3 or 4 batch dims) indexes its batch per dim instead: batch_dims holds
// them, coordinate d of bz is (bz / (the product of the dims after d)) % batch_dims[d], and an
// operand's offset sums each coordinate times its *_dim_strides entry (0 where it broadcasts).
struct MatmulExtents {
  Extent batch, m, n, k, lda, ldb;
  Extent inner_batch = Extent::constant(1);
  Extent outer_batch = Extent::constant(1);  // a 4-D result's dim 0 (batch / inner_batch)
  Extent a_batch_stride = Extent::constant(0), b_batch_stride = Extent::constant(0);
  Extent a_outer_stride = Extent::constant(0), b_outer_stride = Extent::constant(0);
  std::vector<Extent> batch_dims;                 // rank 5 and 6 only
  std::vector<Extent> a_dim_strides, b_dim_strides;  // rank 5 and 6 only, one per batch dim
  // Whether the batch is indexed per dim (more than two batch dims).
  bool per_dim() const { return !batch_dims.empty(); }
};

// The product of batch dims [d + 1, end) of `e`: what coordinate d of bz is divided by.
Extent batch_dims_after(const MatmulExtents& e, int d);

// One batch dim of a matmul's result that operand A or B does not broadcast over (its element
// stride along it is not 0): the result's batch dim `dim` (an index into its batch dims, 0
// outermost), its size and the operand's element stride.
struct OperandBatchDim {
  int dim = 0;
  Extent size, stride;
};
// Operand A's (`b` false) or B's batch dims over a result of rank `rank`, innermost first: the
// dims a tensor map of the operand holds after its matrix's two (sm_90a's wgmma kernel).
std::vector<OperandBatchDim> operand_batch_dims(const MatmulExtents& e, int rank, bool b);

// The extents of a graph's values for one bucket (one range per symbol, checked by the caller);
// for a static graph (no bucket) every extent is a constant.
class Sizes {
public:
  explicit Sizes(ir::Graph graph, std::vector<DimRange> bucket = {});

  bool symbolic() const { return !m_bucket.empty(); }
  size_t symbol_count() const { return m_bucket.size(); }
  const std::vector<DimRange>& bucket() const { return m_bucket; }
  // The extent of `id`'s dim `axis`, or of all its elements.
  Extent dim(ir::NodeId id, int axis) const;
  Extent elements(ir::NodeId id) const;
  // The product of `id`'s dims [from, to).
  Extent product(ir::NodeId id, int from, int to) const;

private:
  ir::Graph m_graph;
  std::vector<DimRange> m_bucket;
};

}  // namespace kiln::compiler
