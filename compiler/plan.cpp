// Kernel planning: buffers, parameter order, matmul geometry and tiles, launch shapes.
#include "compiler/plan.h"

#include "compiler/tensor_map.h"

#include <algorithm>
#include <array>
#include <cassert>

namespace kiln::compiler {

std::vector<ir::NodeId> kernel_reads(const ir::Graph& graph, const KernelGroup& group) {
  std::vector<ir::NodeId> reads;
  if (group.kind == GroupKind::attention) {
    const AttentionMatch& m = group.attention;
    reads = {m.q, m.k, m.v};
    if (m.mask >= 0) reads.push_back(m.mask);
  } else if (group.anchor >= 0) {
    // A row op's first operand may be a fused member (its prologue), read through its leaves.
    for (ir::NodeId op : graph.node(group.anchor).operands) {
      if (!std::binary_search(group.nodes.begin(), group.nodes.end(), op)) reads.push_back(op);
    }
  }
  reads.insert(reads.end(), group.leaves.begin(), group.leaves.end());
  return reads;
}

int KernelPlan::param_of(const std::vector<BufferRef>& location, ir::NodeId id) const {
  const BufferRef& ref = location[static_cast<size_t>(id)];
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].kind == ParamKind::pointer && params[i].buffer == ref) return static_cast<int>(i);
  }
  return -1;
}

namespace {

constexpr int k_elementwise_threads = 256;
constexpr int k_softmax_rows_per_block = 4;

// `e`'s sizes at the bucket's upper bounds (the sizes of `graph`).
MatmulShape matmul_shape(const ir::Graph& graph, ir::NodeId id, MatmulPath path,
                         const MatmulExtents& e) {
  const ir::Node& node = graph.node(id);
  const ir::Shape& sa = graph.node(node.operands[0]).type.shape;
  const ir::Shape& sb = graph.node(node.operands[1]).type.shape;
  const ir::Shape& sc = node.type.shape;
  MatmulShape s;
  s.path = path;
  s.elem_bytes = static_cast<int>(ir::byte_size(graph.node(node.operands[0]).type.dtype));
  s.batch = 1;
  for (int d = 0; d < sc.rank() - 2; ++d) s.batch *= sc.dim(d);
  s.m = sc.dim(sc.rank() - 2);
  s.n = sc.dim(sc.rank() - 1);
  bool ta = node.attrs.transpose_a, tb = node.attrs.transpose_b;
  s.k = sa.dim(sa.rank() - (ta ? 2 : 1));
  s.a_k_contiguous = !ta;
  s.lda = sa.dim(sa.rank() - 1);
  s.b_k_contiguous = tb;
  s.ldb = sb.dim(sb.rank() - 1);
  s.a_batch_stride = e.a_batch_stride.hi;
  s.b_batch_stride = e.b_batch_stride.hi;
  int vec = 16 / s.elem_bytes;
  s.a_vector = e.lda.multiple_of(vec) && (ta ? e.m : e.k).multiple_of(vec);
  s.b_vector = e.ldb.multiple_of(vec) && (tb ? e.k : e.n).multiple_of(vec);
  return s;
}

// The element strides of an operand for the result's batch dims (outer, inner), as extents: its
// last two batch dims only (a result with more indexes them per dim, dim_stride_extents).
std::array<Extent, 2> batch_stride_extents(const ir::Graph& graph, const Sizes& sizes,
                                           ir::NodeId operand, int result_batch,
                                           const Extent& matrix) {
  std::array<Extent, 2> strides{Extent::constant(0), Extent::constant(0)};
  const ir::Shape& shape = graph.node(operand).type.shape;
  int operand_batch = shape.rank() - 2;
  Extent stride = matrix;
  int first = std::max(0, result_batch - 2);
  for (int d = result_batch - 1, od = operand_batch - 1; d >= first && od >= 0; --d, --od) {
    if (shape.dim(od) != 1) strides[static_cast<size_t>(d + 2 - result_batch)] = stride;
    stride = stride * sizes.dim(operand, od);
  }
  return strides;
}

// The element strides of an operand for each of the result's batch dims, 0 where it broadcasts
// (a dim of 1 or none), for results with more than two batch dims.
std::vector<Extent> dim_stride_extents(const ir::Graph& graph, const Sizes& sizes,
                                       ir::NodeId operand, int result_batch, const Extent& matrix) {
  std::vector<Extent> strides(static_cast<size_t>(result_batch), Extent::constant(0));
  const ir::Shape& shape = graph.node(operand).type.shape;
  Extent stride = matrix;
  for (int d = result_batch - 1, od = shape.rank() - 3; d >= 0 && od >= 0; --d, --od) {
    if (shape.dim(od) != 1) strides[static_cast<size_t>(d)] = stride;
    stride = stride * sizes.dim(operand, od);
  }
  return strides;
}

// The result's batch dims, for results with more than two (empty otherwise).
std::vector<Extent> per_dim_batch(const Sizes& sizes, ir::NodeId result, int rank) {
  std::vector<Extent> dims;
  if (rank > 4)
    for (int d = 0; d < rank - 2; ++d) dims.push_back(sizes.dim(result, d));
  return dims;
}

MatmulExtents matmul_extents(const ir::Graph& graph, const Sizes& sizes, ir::NodeId id) {
  const ir::Node& node = graph.node(id);
  ir::NodeId a = node.operands[0], b = node.operands[1];
  int ra = graph.node(a).type.shape.rank(), rb = graph.node(b).type.shape.rank();
  int rc = node.type.shape.rank();
  MatmulExtents e;
  e.batch = sizes.product(id, 0, rc - 2);
  e.inner_batch = rc == 4 ? sizes.dim(id, 1) : Extent::constant(1);
  e.outer_batch = rc == 4 ? sizes.dim(id, 0) : Extent::constant(1);
  e.m = sizes.dim(id, rc - 2);
  e.n = sizes.dim(id, rc - 1);
  e.k = sizes.dim(a, ra - (node.attrs.transpose_a ? 2 : 1));
  e.lda = sizes.dim(a, ra - 1);
  e.ldb = sizes.dim(b, rb - 1);
  auto sa = batch_stride_extents(graph, sizes, a, rc - 2, e.m * e.k);
  auto sb = batch_stride_extents(graph, sizes, b, rc - 2, e.k * e.n);
  e.a_outer_stride = sa[0];
  e.a_batch_stride = sa[1];
  e.b_outer_stride = sb[0];
  e.b_batch_stride = sb[1];
  e.batch_dims = per_dim_batch(sizes, id, rc);
  if (e.per_dim()) {
    e.a_dim_strides = dim_stride_extents(graph, sizes, a, rc - 2, e.m * e.k);
    e.b_dim_strides = dim_stride_extents(graph, sizes, b, rc - 2, e.k * e.n);
  }
  return e;
}

// The sizes and strides an attention kernel computes with (AttentionExtents), and in
// `e` the batch and the result's rows (S_q) and columns (D_v).
AttentionExtents attention_extents(const ir::Graph& graph, const Sizes& sizes,
                                   const AttentionMatch& m, MatmulExtents& e) {
  const ir::Node& out = graph.node(m.root);
  int rc = out.type.shape.rank();
  int rq = graph.node(m.q).type.shape.rank(), rk = graph.node(m.k).type.shape.rank();
  int rv = graph.node(m.v).type.shape.rank();
  AttentionExtents a;
  a.sq = sizes.dim(m.q, rq - 2);
  a.sk = sizes.dim(m.k, rk - 2);
  a.d = graph.node(m.q).type.shape.dim(rq - 1);
  a.dv = graph.node(m.v).type.shape.dim(rv - 1);
  e.batch = sizes.product(m.root, 0, rc - 2);
  e.inner_batch = rc == 4 ? sizes.dim(m.root, 1) : Extent::constant(1);
  e.m = a.sq;
  e.n = Extent::constant(a.dv);
  Extent d = Extent::constant(a.d), dv = Extent::constant(a.dv);
  a.q = batch_stride_extents(graph, sizes, m.q, rc - 2, a.sq * d);
  a.k = batch_stride_extents(graph, sizes, m.k, rc - 2, a.sk * d);
  a.v = batch_stride_extents(graph, sizes, m.v, rc - 2, a.sk * dv);
  // Grouped heads (constant dims only, as the builder checks): H_q / H_kv.
  auto group = [&](ir::NodeId operand) -> int64_t {
    const ir::Shape& os = graph.node(operand).type.shape;
    if (rc < 3 || os.rank() < 3) return 1;
    int64_t heads = out.type.shape.dim(rc - 3), kv = os.dim(os.rank() - 3);
    return kv == 1 || kv == heads ? 1 : heads / kv;
  };
  a.k_group = group(m.k);
  a.v_group = group(m.v);
  a.mask = {Extent::constant(0), Extent::constant(0)};
  if (m.mask >= 0) {
    const ir::Shape& ms = graph.node(m.mask).type.shape;
    int r = ms.rank();
    // Right-aligned against the scores [..., S_q, S_k]: a dim of 1 (or none) broadcasts, a
    // rank-0 mask over every score.
    if (r >= 1 && ms.dim(r - 1) != 1) a.mask_col = Extent::constant(1);
    if (r >= 2 && ms.dim(r - 2) != 1) a.mask_row = sizes.dim(m.mask, r - 1);
    if (r > 2) {
      a.mask = batch_stride_extents(graph, sizes, m.mask, rc - 2, sizes.product(m.mask, r - 2, r));
    }
  }
  e.batch_dims = per_dim_batch(sizes, m.root, rc);
  if (e.per_dim()) {
    a.q_dims = dim_stride_extents(graph, sizes, m.q, rc - 2, a.sq * d);
    a.k_dims = dim_stride_extents(graph, sizes, m.k, rc - 2, a.sk * d);
    a.v_dims = dim_stride_extents(graph, sizes, m.v, rc - 2, a.sk * dv);
    if (m.mask >= 0) {
      const ir::Shape& ms = graph.node(m.mask).type.shape;
      a.mask_dims = ms.rank() > 2 ? dim_stride_extents(graph, sizes, m.mask, rc - 2,
                                                       sizes.product(m.mask, ms.rank() - 2, ms.rank()))
                                  : std::vector<Extent>(static_cast<size_t>(rc - 2), Extent::constant(0));
    }
  }
  return a;
}

uint32_t ceil_div(int64_t a, int64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

// The workspace holding `temporaries`, each 256-byte aligned.
uint64_t workspace_bytes_of(const std::vector<uint64_t>& temporaries) {
  uint64_t bytes = 0;
  for (uint64_t t : temporaries) bytes += (t + 255) / 256 * 256;
  return bytes;
}

}  // namespace

Expected<ProgramPlan> plan_kernels(const ir::Graph& graph, const std::vector<KernelGroup>& groups,
                                   const PrecisionPlan& precision, const Sizes& sizes) {
  ProgramPlan plan;
  bool symbolic = sizes.symbolic();
  auto bytes_term = [&](ir::NodeId id) {
    return (sizes.elements(id) * Extent::constant(ir::byte_size(graph.node(id).type.dtype))).term();
  };
  const auto& nodes = graph.nodes();
  plan.location.assign(nodes.size(), BufferRef{});
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    ir::NodeId id = graph.inputs()[i];
    plan.location[static_cast<size_t>(id)] = {BufferRole::input, static_cast<uint32_t>(i)};
    plan.input_bytes.push_back(static_cast<uint64_t>(graph.node(id).type.bytes()));
    if (symbolic) plan.input_sizes.push_back(bytes_term(id));
  }
  for (ir::NodeId id : graph.outputs()) {
    plan.output_bytes.push_back(static_cast<uint64_t>(graph.node(id).type.bytes()));
    if (symbolic) plan.output_sizes.push_back(bytes_term(id));
  }
  auto bytes_of = [&](ir::NodeId id) { return static_cast<uint64_t>(graph.node(id).type.bytes()); };

  ir::NodeId next_view = 0;  // views before this id have their location
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const KernelGroup& group = groups[gi];
    KernelPlan k;
    k.group = group;
    // Stores: every output position of the root, else one new temporary.
    for (size_t j = 0; j < graph.outputs().size(); ++j) {
      if (graph.outputs()[j] == group.root) {
        k.params.push_back(
            {{BufferRole::output, static_cast<uint32_t>(j)}, bytes_of(group.root), true});
      }
    }
    if (k.params.empty()) {
      auto t = static_cast<uint32_t>(plan.temporary_bytes.size());
      plan.temporary_bytes.push_back(bytes_of(group.root));
      if (symbolic) plan.temporary_sizes.push_back(bytes_term(group.root));
      k.params.push_back({{BufferRole::temporary, t}, bytes_of(group.root), true});
    }
    if (graph.node(group.root).kind != ir::OpKind::input) {
      plan.location[static_cast<size_t>(group.root)] = k.params[0].buffer;
    }
    // Views between the groups so far and this one share their operand's buffer.
    for (ir::NodeId v = next_view; v < group.root; ++v) {
      if (is_view(graph, v)) {
        auto operand = static_cast<size_t>(graph.node(v).operands[0]);
        plan.location[static_cast<size_t>(v)] = plan.location[operand];
      }
    }
    next_view = group.root;
    for (ir::NodeId id : kernel_reads(graph, group)) {
      if (k.param_of(plan.location, id) < 0) {
        k.params.push_back({plan.location[static_cast<size_t>(id)], bytes_of(id), false});
      }
    }
    // A symbolic graph's kernels take every symbol's value after the buffers.
    for (size_t s = 0; symbolic && s < sizes.symbol_count(); ++s)
      k.params.push_back(dim_param(static_cast<uint32_t>(s)));

    std::string index = "k" + std::to_string(gi);
    const ir::Node& root = graph.node(group.root);
    if (group.kind == GroupKind::matmul) {
      MatmulPath path = precision.paths[static_cast<size_t>(group.anchor)];
      k.extents = matmul_extents(graph, sizes, group.anchor);
      k.shape = matmul_shape(graph, group.anchor, path, k.extents);
      k.name = index + "_matmul_" + std::string(to_string(path));
    } else if (group.kind == GroupKind::attention) {
      const AttentionMatch& m = group.attention;
      k.attention_extents = attention_extents(graph, sizes, m, k.extents);
      const AttentionExtents& a = k.attention_extents;
      AttentionShape& shape = k.attention_shape;
      shape.sq = a.sq.hi;
      shape.sk = a.sk.hi;
      shape.d = a.d;
      shape.dv = a.dv;
      shape.batch = root.type.shape.elements() / std::max<int64_t>(1, shape.sq * shape.dv);
      shape.k_group = a.k_group;
      shape.v_group = a.v_group;
      shape.elem_bytes = static_cast<int>(ir::byte_size(graph.node(m.q).type.dtype));
      shape.path = m.path;
      shape.causal = m.causal;
      shape.mask = m.mask >= 0;
      k.name = index + "_attention_" + std::string(to_string(m.path)) + (m.causal ? "_causal" : "");
    } else if (group.kind != GroupKind::elementwise) {
      k.name = index + "_" + std::string(ir::to_string(graph.node(group.anchor).kind));
    } else {
      bool layout = ir::category(root.kind) == ir::OpCategory::layout;
      k.name = index + (root.kind == ir::OpKind::input ? "_copy"
                        : layout ? "_" + std::string(ir::to_string(root.kind))
                                 : "_elementwise");
    }
    plan.kernels.push_back(std::move(k));
  }
  plan.workspace_bytes = workspace_bytes_of(plan.temporary_bytes);
  return plan;
}

namespace {

// Each split-K matmul kernel (tile.split_k > 1) becomes two: the partials kernel, which stores
// only its fp32 partial products (to a new temporary) and reads only A and B, then the sum
// kernel, which reads the partials besides the group's own parameters and stores the group's
// value (one thread per element, as elementwise kernels run).
void split_matmuls(const ir::Graph& graph, ProgramPlan& plan) {
  std::vector<KernelPlan> kernels;
  for (KernelPlan& k : plan.kernels) {
    if (k.group.kind != GroupKind::matmul || k.tile.split_k < 2) {
      kernels.push_back(std::move(k));
      continue;
    }
    const MatmulShape& s = k.shape;
    auto t = static_cast<uint32_t>(plan.temporary_bytes.size());
    uint64_t bytes = static_cast<uint64_t>(k.tile.split_k * s.batch * s.m * s.n) * 4;
    plan.temporary_bytes.push_back(bytes);
    KernelParam partial{{BufferRole::temporary, t}, bytes, true};
    KernelPlan sum = k;
    // The partials kernel: the partials, then the parameters A and B come through.
    KernelPlan& partials = k;
    partials.split = SplitRole::partials;
    std::vector<KernelParam> params{partial};
    const ir::Node& mm = graph.node(k.group.anchor);
    for (ir::NodeId operand : {mm.operands[0], mm.operands[1]}) {
      int p = k.param_of(plan.location, operand);
      if (p < 0) continue;
      bool seen = false;
      for (const KernelParam& q : params)
        seen = seen || q.buffer == k.params[static_cast<size_t>(p)].buffer;
      if (!seen) params.push_back(k.params[static_cast<size_t>(p)]);
    }
    partials.params = std::move(params);
    partials.partial_param = 0;
    // The sum kernel: the group's stores, the partials, the group's reads.
    sum.split = SplitRole::sum;
    sum.name = k.name + "_sum";
    partial.written = false;
    auto reads = std::find_if(sum.params.begin(), sum.params.end(),
                              [](const KernelParam& p) { return !p.written; });
    sum.partial_param = static_cast<int>(reads - sum.params.begin());
    sum.params.insert(reads, partial);
    int64_t elements = s.batch * s.m * s.n;
    sum.launch = LaunchShape{};
    sum.folded_rows = 0;
    sum.launch.grid = {ceil_div(elements, k_elementwise_threads), 1, 1};
    sum.launch.block = {k_elementwise_threads, 1, 1};
    kernels.push_back(std::move(partials));
    kernels.push_back(std::move(sum));
  }
  plan.kernels = std::move(kernels);
  plan.workspace_bytes = workspace_bytes_of(plan.temporary_bytes);
}

// Appends a tensor-map parameter over `operand`'s buffer (the kernel's pointer parameter to it
// stays): `spec` with 128-byte swizzle and 256-byte L2 promotion, and for a symbolic graph
// `terms`, its dims and strides as size terms (KernelParam::map_terms). Returns its index.
int append_map_param(const ProgramPlan& plan, KernelPlan& k, ir::NodeId operand, TensorMapSpec spec,
                     std::vector<SizeTerm> terms = {}) {
  spec.swizzle = TensorMapSwizzle::b128;
  spec.l2 = TensorMapL2::b256;
  KernelParam param = k.params[static_cast<size_t>(k.param_of(plan.location, operand))];
  param.written = false;
  param.kind = ParamKind::tensor_map;
  param.map = to_string(spec);
  param.map_terms = std::move(terms);
  k.params.push_back(param);
  return static_cast<int>(k.params.size()) - 1;
}

// The wgmma kernel's launch (a persistent grid of one block per work tile at most, 384
// threads, its shared memory) and its two tensor-map parameters, appended to the group's: A as
// {K, M} (K-major) or {M, K} (M-major, transpose_a), B as {K, N} (K-major) or {N, K} (N-major),
// then the batch dims the operand does not broadcast over, innermost first (operand_batch_dims:
// rank 2 to 5); boxes of 128 bytes x the tile's rows (M-major A and N-major B: x bk rows of K)
// and 1 along each batch dim, with 128-byte swizzle (fp32 operands of the tf32 path as f32: the
// kernel rounds them).
void plan_wgmma(const ir::Graph& graph, const ProgramPlan& plan, KernelPlan& k, bool symbolic) {
  const MatmulShape& s = k.shape;
  const MatmulExtents& x = k.extents;
  const MatmulTile& t = k.tile;
  int rank = graph.node(k.group.root).type.shape.rank();
  int64_t tiles = grid_blocks(t, s);
  k.launch.grid = {static_cast<uint32_t>(std::min<int64_t>(tiles, 0x7fffffff)), 1, 1};
  k.launch.block = {static_cast<uint32_t>(t.threads()), 1, 1};
  k.launch.dynamic_smem_bytes = static_cast<uint32_t>(wgmma_smem_bytes(t, s));
  k.launch.persistent = true;
  // A symbolic graph's blocks: as many as its tiles at the bucket's upper bounds (any count
  // computes every tile; blocks past a run's tiles find none and end).
  if (symbolic) k.grid = {Extent::constant(k.launch.grid[0]).term(), Extent::constant(1).term(),
                          Extent::constant(1).term()};
  const ir::Node& mm = graph.node(k.group.anchor);
  auto map_param = [&](ir::NodeId operand, bool b, const Extent& inner, const Extent& outer,
                       const Extent& ld, uint32_t box_outer) {
    TensorMapSpec spec;
    spec.type = s.path == MatmulPath::bf16  ? TensorMapType::bf16
                : s.path == MatmulPath::f16 ? TensorMapType::f16
                                            : TensorMapType::f32;  // tf32: rounded in the kernel
    Extent bytes = Extent::constant(s.elem_bytes);
    std::vector<OperandBatchDim> batch = operand_batch_dims(x, rank, b);
    std::vector<Extent> dims = {inner, outer}, strides = {ld * bytes};
    for (const OperandBatchDim& d : batch) {
      dims.push_back(d.size);
      strides.push_back(d.stride * bytes);
    }
    spec.rank = static_cast<uint32_t>(dims.size());
    spec.dims = {1, 1, 1, 1, 1};
    spec.box = {static_cast<uint32_t>(128 / s.elem_bytes), box_outer, 1, 1, 1};
    std::vector<SizeTerm> terms;
    for (size_t i = 0; i < dims.size(); ++i) {
      spec.dims[i] = static_cast<uint64_t>(dims[i].hi);
      if (symbolic) terms.push_back(dims[i].term());
    }
    for (size_t i = 0; i < strides.size(); ++i) {
      spec.strides[i] = static_cast<uint64_t>(strides[i].hi);
      if (symbolic) terms.push_back(strides[i].term());
    }
    return append_map_param(plan, k, operand, spec, std::move(terms));
  };
  k.a_map_param = s.a_k_contiguous
                      ? map_param(mm.operands[0], false, x.k, x.m, x.lda, static_cast<uint32_t>(t.bm))
                      : map_param(mm.operands[0], false, x.m, x.k, x.lda, static_cast<uint32_t>(t.bk));
  k.b_map_param = s.b_k_contiguous
                      ? map_param(mm.operands[1], true, x.k, x.n, x.ldb, static_cast<uint32_t>(t.bn))
                      : map_param(mm.operands[1], true, x.n, x.k, x.ldb, static_cast<uint32_t>(t.bk));
}

// The wgmma attention kernel's three tensor-map parameters, appended to the group's: Q, K and V
// as rank-4 maps {head dim, rows, inner batch, outer batch} (a broadcast batch dim a dim of 1;
// k's and v's inner batch their H_kv heads), boxes of 64 columns x 128 rows with 128-byte
// swizzle; for a symbolic graph with their dims and strides as size terms. None where the kernel
// takes fp32 operands (wgmma_attention_loads): it reads them through their pointers.
void plan_wgmma_attention(const ir::Graph& graph, const ProgramPlan& plan, KernelPlan& k,
                          bool symbolic) {
  const AttentionMatch& m = k.group.attention;
  const AttentionExtents& a = k.attention_extents;
  const AttentionTile& t = k.attention_tile;
  int rank = graph.node(m.root).type.shape.rank();
  // `x` over `d`, which divides its constant factor (wgmma_attention_plans makes sure).
  auto over = [](Extent x, int64_t d) {
    x.coef /= d;
    x.lo /= d;
    x.hi /= d;
    return x;
  };
  // The inner batch (a rank-4 result's heads: fixed, wgmma_attention_plans) and the outer batch
  // (a rank-4 result's only).
  int64_t inner = rank == 4 ? k.extents.inner_batch.hi : k.extents.batch.hi;
  Extent outer = rank == 4 ? over(k.extents.batch, inner) : Extent::constant(1);
  Extent inner_all = rank == 4 ? Extent::constant(inner) : k.extents.batch;
  auto map_param = [&](ir::NodeId operand, const Extent& rows, int64_t cols,
                       const std::array<Extent, 2>& strides, int64_t group, uint32_t box_rows) {
    TensorMapSpec spec;
    spec.type = m.path == MatmulPath::bf16 ? TensorMapType::bf16 : TensorMapType::f16;
    spec.rank = 4;
    Extent two = Extent::constant(2);
    Extent row_bytes = Extent::constant(cols * 2);
    // Any stride serves a dim of 1: a head's bytes at the upper bounds.
    Extent head_bytes = Extent::constant(cols * 2 * rows.hi);
    bool has_inner = strides[1].hi != 0, has_outer = strides[0].hi != 0;
    Extent heads = has_inner ? over(inner_all, group) : Extent::constant(1);
    std::array<Extent, 7> x = {Extent::constant(cols), rows, heads,
                               has_outer ? outer : Extent::constant(1), row_bytes,
                               has_inner ? strides[1] * two : head_bytes,
                               has_outer ? strides[0] * two : head_bytes};
    spec.dims = {static_cast<uint64_t>(x[0].hi), static_cast<uint64_t>(x[1].hi),
                 static_cast<uint64_t>(x[2].hi), static_cast<uint64_t>(x[3].hi), 1};
    spec.strides = {static_cast<uint64_t>(x[4].hi), static_cast<uint64_t>(x[5].hi),
                    static_cast<uint64_t>(x[6].hi), 0};
    spec.box = {64, box_rows, 1, 1, 1};
    std::vector<SizeTerm> terms;
    if (symbolic)
      for (const Extent& v : x) terms.push_back(v.term());
    return append_map_param(plan, k, operand, spec, std::move(terms));
  };
  // fp32 q, k and v (`medium`, `high`): the producer loads, converts or rounds them itself
  if (wgmma_attention_loads(k.attention_shape)) return;
  k.q_map_param = map_param(m.q, a.sq, a.d, a.q, 1, static_cast<uint32_t>(t.br));
  k.k_map_param = map_param(m.k, a.sk, a.d, a.k, a.k_group, static_cast<uint32_t>(t.bc));
  k.v_map_param = map_param(m.v, a.sk, a.dv, a.v, a.v_group, static_cast<uint32_t>(t.bc));
}

}  // namespace

bool wgmma_attention_plans(const ir::Graph& graph, const KernelPlan& k, const Target& target,
                           bool symbolic) {
  if (k.group.kind != GroupKind::attention || !target.has(Feature::wgmma)) return false;
  const AttentionExtents& a = k.attention_extents;
  const MatmulExtents& e = k.extents;
  int rank = graph.node(k.group.attention.root).type.shape.rank();
  if (rank > 4 || e.per_dim()) return false;
  // Strides of whole 8-element units at every size (TMA's 16-byte rule; for fp32 operands the
  // converting producer's aligned 16-byte loads); for a symbolic graph, fixed heads
  // that divide the batch and k's and v's head groups that divide the heads at every size (the
  // maps' dims as size terms, plan_wgmma_attention).
  auto aligned = [](const std::array<Extent, 2>& strides) {
    return strides[0].multiple_of(8) && strides[1].multiple_of(8);
  };
  if (symbolic) {
    const Extent& heads = rank == 4 ? e.inner_batch : e.batch;
    if (!e.inner_batch.fixed() || e.batch.coef % e.inner_batch.hi != 0 ||
        heads.coef % a.k_group != 0 || heads.coef % a.v_group != 0)
      return false;
  }
  return wgmma_attention_computes(k.attention_shape) && aligned(a.q) && aligned(a.k) &&
         aligned(a.v);
}

bool wgmma_plans(const ir::Graph& graph, const KernelPlan& k, const Target& target) {
  if (k.group.kind != GroupKind::matmul || !target.has(Feature::wgmma)) return false;
  int rank = graph.node(k.group.root).type.shape.rank();
  const MatmulExtents& e = k.extents;
  // Strides of whole 16-byte units (TMA's rule): a symbolic graph's at every size of its bucket,
  // not just at the upper bounds (MatmulShape's); a static graph's extents are its sizes. An
  // operand's tensor map holds its matrix and the batch dims it does not broadcast over: three
  // at most (TMA's five dims).
  int64_t unit = 16 / k.shape.elem_bytes;
  bool aligned = e.lda.multiple_of(unit) && e.ldb.multiple_of(unit);
  for (bool b : {false, true}) {
    std::vector<OperandBatchDim> dims = operand_batch_dims(e, rank, b);
    if (dims.size() > k_tensor_map_max_rank - 2) return false;
    for (const OperandBatchDim& d : dims) aligned = aligned && d.stride.multiple_of(unit);
  }
  return wgmma_computes(k.shape) && aligned;
}

namespace {

// Matmul kernel `k`'s launch (not wgmma; and, `symbolic`, grid terms) for its tile: x the column
// tiles, y the row tiles and z batch x splits, or past `limit` (ScheduleProvider::grid_limit) of
// either the two folded over y and z together (KernelPlan::folded_rows), y as small as z allows.
// False where z would pass CUDA's limit even so.
bool plan_matmul_grid(KernelPlan& k, int64_t limit, bool symbolic) {
  const MatmulTile& t = k.tile;
  int64_t gy = (k.shape.m + t.bm - 1) / t.bm, gz = k.shape.batch * t.split_k;
  uint32_t gx = ceil_div(k.shape.n, t.bn);
  k.folded_rows = 0;
  if (gy <= limit && gz <= limit) {
    k.launch.grid = {gx, static_cast<uint32_t>(gy), static_cast<uint32_t>(gz)};
    if (symbolic) k.grid = {k.extents.n.term(t.bn), k.extents.m.term(t.bm), k.extents.batch.term()};
    return true;
  }
  // the fewest y whose z stays within the limit (a test's limit, below CUDA's, holds y only)
  int64_t blocks = gy * gz, y = std::min((blocks + limit - 1) / limit, limit);
  int64_t z = (blocks + y - 1) / y;
  if (z > k_max_grid_yz) return false;
  k.folded_rows = gy;
  k.launch.grid = {gx, static_cast<uint32_t>(y), static_cast<uint32_t>(z)};
  if (symbolic) {
    k.grid = {k.extents.n.term(t.bn), Extent::constant(y).term(), Extent::constant(z).term()};
  }
  return true;
}

// Attention kernel `k`'s launch (and, `symbolic`, grid terms) for its tile, its batch folded
// `fold` times (KernelPlan::batch_fold).
void plan_attention_grid(KernelPlan& k, int64_t fold, bool symbolic) {
  const AttentionTile& t = k.attention_tile;
  k.batch_fold = fold;
  k.launch.grid = {ceil_div(k.attention_extents.sq.hi, t.br),
                   static_cast<uint32_t>(t.dv_slabs * fold),
                   ceil_div(k.attention_shape.batch, fold)};
  k.launch.block = {static_cast<uint32_t>(32 * t.warps), 1, 1};
  k.launch.dynamic_smem_bytes = static_cast<uint32_t>(
      t.wgmma ? wgmma_attention_smem_bytes(t, k.attention_shape) : t.smem_bytes());
  if (symbolic) {
    k.grid = {k.attention_extents.sq.term(t.br), Extent::constant(t.dv_slabs * fold).term(),
              k.extents.batch.term(fold)};
  }
}

}  // namespace

Status schedule_cuda(const ir::Graph& graph, ProgramPlan& plan, const Target& target,
                     const Sizes& sizes, const ScheduleProvider& schedule) {
  bool symbolic = sizes.symbolic();
  const int sm = target.sm;  // the tile choices read the arch table by number
  for (KernelPlan& k : plan.kernels) {
    const KernelGroup& group = k.group;
    k.target = target;
    const ir::Node& root = graph.node(group.root);
    int64_t total = root.type.shape.elements();
    if (group.kind == GroupKind::matmul) {
      MatmulPath path = k.shape.path;
      k.tile = schedule.matmul_tile(k.shape, sm);
      k.tile_source = schedule.source_for(k.shape, sm);
      // The partials' temporary is sized at plan time: a symbolic graph's run unsplit.
      if (symbolic) k.tile.split_k = 1;
      // sm_90a: the model runs a problem the wgmma kernel computes (a static graph's: tensor
      // maps are encoded for fixed sizes) on it where its tiles fill the GPU (wgmma_fills). A
      // provider's own choice (a tuning record, a fixed tile) stands, but a wgmma tile for a
      // problem the kernel does not compute (a record of a problem with the same signature and
      // another rank, a fixed tile for every matmul of a graph) gives way to the model's tile.
      bool wgmma = wgmma_plans(graph, k, target);
      if (wgmma && k.tile_source == "model" && wgmma_fills(k.shape))
        k.tile = choose_wgmma_tile(k.shape);
      if (k.tile.wgmma && !wgmma) {
        k.tile = heuristic_schedule().matmul_tile(k.shape, sm);
        k.tile_source = heuristic_schedule().source();
        if (symbolic) k.tile.split_k = 1;
      }
      if (k.tile.wgmma) {
        if (Status legal = check_wgmma_tile(k.tile, k.shape); !legal)
          return make_error(describe_node(graph, group.anchor), ": schedule: ",
                            legal.error().message);
      } else if (Status legal = check_tile(k.tile, k.shape, sm); !legal) {
        return make_error(describe_node(graph, group.anchor), ": schedule: ",
                          legal.error().message);
      }
      // The CUDA tile names the kernel here; the CPU target blocks it its own way.
      k.name = cuda_kernel_name(k.name, k.tile);
      int64_t limit = std::clamp<int64_t>(schedule.grid_limit(), 1, k_max_grid_yz);
      bool fits = launch_fits(k.tile, k.shape);
      if (!fits || (!k.tile.wgmma && !plan_matmul_grid(k, limit, symbolic))) {
        // The wgmma kernel's persistent grid walks its work tiles along x: no y or z limit.
        if (k.tile.wgmma) {
          return make_error(describe_node(graph, group.anchor),
                            ": too many work tiles for one launch (",
                            std::to_string(grid_blocks(k.tile, k.shape)), ", limit ",
                            std::to_string(k_max_wgmma_work_tiles), ")");
        }
        // (a provider's grid limit below CUDA's folds into a z that CUDA's limit binds)
        int64_t most = fits ? limit * k_max_grid_yz : k_max_folded_blocks;
        return make_error(describe_node(graph, group.anchor), ": too many blocks for one launch (",
                          std::to_string(ceil_div(k.shape.m, k.tile.bm)), " row tiles x ",
                          std::to_string(k.shape.batch * k.tile.split_k),
                          " batches x splits, limit ", std::to_string(most), " blocks)");
      }
      k.launch.block = {static_cast<uint32_t>(uses_mma(path) ? k.tile.threads() : 256), 1, 1};
      k.launch.dynamic_smem_bytes =
          static_cast<uint32_t>(k.tile.stages * smem_layout(k.tile, k.shape).stage_bytes());
      if (k.tile.wgmma) plan_wgmma(graph, plan, k, symbolic);
    } else if (group.kind == GroupKind::attention) {
      k.attention_tile = schedule.attention_tile(k.attention_shape, sm);
      k.tile_source = schedule.source_for(k.attention_shape, sm);
      // sm_90a: the model runs a problem the wgmma attention kernel computes on it, except fp32
      // attention (wgmma_attention_by_model); a provider's choice stands, but its wgmma tile for
      // a problem the kernel does not compute gives way to the model's tile (as for matmuls).
      bool wgmma = wgmma_attention_plans(graph, k, target, symbolic);
      if (wgmma && k.tile_source == "model" && wgmma_attention_by_model(k.attention_shape))
        k.attention_tile = choose_wgmma_attention_tile(k.attention_shape);
      if (k.attention_tile.wgmma && !wgmma) {
        k.attention_tile = heuristic_schedule().attention_tile(k.attention_shape, sm);
        k.tile_source = heuristic_schedule().source();
      }
      if (k.attention_tile.wgmma) {
        if (Status legal = check_wgmma_attention_tile(k.attention_tile, k.attention_shape); !legal)
          return make_error(describe_node(graph, group.anchor), ": schedule: ",
                            legal.error().message);
        k.name = cuda_kernel_name(k.name, k.attention_tile);
      } else if (Status legal = check_attention_tile(k.attention_tile, k.attention_shape, sm);
                 !legal) {
        return make_error(describe_node(graph, group.anchor), ": schedule: ",
                          legal.error().message);
      }
      const AttentionTile& t = k.attention_tile;
      // Past 65535 batches (grid z's limit) the batch folds over y too. (A tensor's 2^31 - 1
      // elements keep the fold far below y's limit; the check stays for safety.)
      int64_t batch = k.attention_shape.batch;
      int64_t z = std::clamp<int64_t>(schedule.grid_limit(), 1, k_max_grid_yz);
      int64_t fold = (batch + z - 1) / z;
      if (fold * t.dv_slabs > 65535) {
        return make_error(describe_node(graph, group.anchor), ": too many batches for one launch (",
                          std::to_string(batch), ", limit ",
                          std::to_string(65535 / t.dv_slabs * 65535), ")");
      }
      plan_attention_grid(k, fold, symbolic);
      if (t.wgmma) plan_wgmma_attention(graph, plan, k, symbolic);
    } else if (group.kind != GroupKind::elementwise && group.kind != GroupKind::gather) {
      // Row ops: one warp per row along the axis of the anchor's (first) operand.
      const ir::Node& row_node = graph.node(group.anchor);
      ir::NodeId in = row_node.operands[0];
      const ir::Shape& in_shape = graph.node(in).type.shape;
      int axis = row_node.attrs.axis, rank = in_shape.rank();
      int64_t row = in_shape.dim(axis);
      k.launch.grid = {ceil_div(in_shape.elements() / row, k_softmax_rows_per_block), 1, 1};
      k.launch.block = {32 * k_softmax_rows_per_block, 1, 1};
      if (symbolic) {
        Extent rows = sizes.product(in, 0, axis) * sizes.product(in, axis + 1, rank);
        k.grid = {rows.term(k_softmax_rows_per_block), Extent::constant(1).term(),
                  Extent::constant(1).term()};
      }
    } else {
      // Elementwise and gather kernels: one thread per element of the root.
      k.launch.grid = {ceil_div(total, k_elementwise_threads), 1, 1};
      k.launch.block = {k_elementwise_threads, 1, 1};
      if (symbolic) {
        k.grid = {sizes.elements(group.root).term(k_elementwise_threads),
                  Extent::constant(1).term(), Extent::constant(1).term()};
      }
    }
    if (uint64_t bytes = param_space_bytes(k.params); bytes > k_max_param_bytes) {
      size_t buffers = static_cast<size_t>(std::count_if(
          k.params.begin(), k.params.end(),
          [](const KernelParam& p) { return p.kind != ParamKind::dim; }));
      return make_error("kernel '", k.name, "' computing ", describe_node(graph, group.root),
                        " takes ", std::to_string(buffers), " buffers: ",
                        std::to_string(bytes), " bytes of parameters, over CUDA's limit of ",
                        std::to_string(k_max_param_bytes), " bytes (",
                        std::to_string(k_max_param_bytes / param_size(ParamKind::pointer)),
                        " buffers) per kernel; split the graph so that no kernel reads that many");
    }
  }
  split_matmuls(graph, plan);
  return Status::success();
}

}  // namespace kiln::compiler
