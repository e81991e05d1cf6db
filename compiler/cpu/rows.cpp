// CPU elementwise kernels (one item per output element) and row kernels (softmax, reductions,
// norms: one item per row, its passes run in order over the row, its sums and maxima taken in
// vectors of partial results; cumsum: one item per row, its running sum carried in order).
#include "compiler/cpu/codegen_internal.h"
#include "ir/scalar.h"

#include <algorithm>

namespace kiln::compiler::cpu::detail {

WorkShape build_elementwise(KernelBuilder& kb) {
  ir::NodeId root = kb.kernel().group.root;
  kb.loop(kb.begin(), kb.end(), 1, [&](llvm::Value* e) {
    llvm::Value* v = group_value(kb, root, Point{root, {}, e}, nullptr);
    kb.store_outputs(v, e);
  });
  return {{kb.sizes().elements(root).term()}, 0};
}

WorkShape build_gather(KernelBuilder& kb) {
  // embedding(table, ids): element e is column e % D of the table's row ids[e / D], or 0 where
  // that id is outside [0, V); then the group's epilogue.
  const ir::Graph& g = kb.graph();
  const ir::Node& anchor = g.node(kb.kernel().group.anchor);
  ir::NodeId table = anchor.operands[0], ids = anchor.operands[1], root = kb.kernel().group.root;
  llvm::IRBuilder<>& b = kb.b();
  llvm::Value* width = kb.extent(kb.sizes().dim(table, 1));
  llvm::Value* rows = kb.extent(kb.sizes().dim(table, 0));
  kb.loop(kb.begin(), kb.end(), 1, [&](llvm::Value* e) {
    ir::DType id_dtype = g.node(ids).type.dtype;
    llvm::Value* id = kb.load_value(id_dtype, kb.param_of(ids), b.CreateUDiv(e, width));
    id = b.CreateSExt(id, kb.i64());
    llvm::Value* inside = b.CreateAnd(b.CreateICmpSGE(id, kb.i64c(0)), b.CreateICmpSLT(id, rows));
    llvm::Value* row = b.CreateSelect(inside, id, kb.i64c(0));  // a valid address either way
    llvm::Value* at = b.CreateAdd(b.CreateMul(row, width), b.CreateURem(e, width));
    llvm::Value* v = kb.load_float(g.node(table).type.dtype, kb.param_of(table), at);
    v = b.CreateSelect(inside, v, kb.f32c(0.0));
    kb.store_outputs(group_value(kb, root, Point{root, {}, e}, v), e);
  });
  return {{kb.sizes().elements(root).term()}, 0};
}

namespace {

// One row of a row op's input: `len` elements `inner` apart from `base`, read through the
// group's prologue when the anchor's first operand is a fused member.
class Row {
 public:
  Row(KernelBuilder& kb, llvm::Value* row) : m_kb(kb) {
    const ir::Graph& g = kb.graph();
    const ir::Node& anchor = g.node(kb.kernel().group.anchor);
    m_in = anchor.operands[0];
    const auto& nodes = kb.kernel().group.nodes;
    m_fused = std::binary_search(nodes.begin(), nodes.end(), m_in);
    int axis = anchor.attrs.axis;
    int rank = g.node(m_in).type.shape.rank();
    Extent len = kb.sizes().dim(m_in, axis);
    Extent inner = kb.sizes().product(m_in, axis + 1, rank);
    m_len = kb.extent(len);
    m_inner = kb.extent(inner);
    llvm::IRBuilder<>& b = kb.b();
    if (inner.fixed() && inner.coef == 1) {
      m_base = b.CreateMul(row, m_len);
    } else {
      m_base = b.CreateAdd(b.CreateMul(b.CreateUDiv(row, m_inner), kb.extent(len * inner)),
                           b.CreateURem(row, m_inner));
    }
  }

  llvm::Value* len() const { return m_len; }
  llvm::Value* offset(llvm::Value* j) {
    return m_kb.b().CreateAdd(m_base, m_kb.b().CreateMul(j, m_inner));
  }
  // Row element j as float: a load, or the prologue's value.
  llvm::Value* element(llvm::Value* j) {
    if (!m_fused) {
      return m_kb.load_float(m_kb.graph().node(m_in).type.dtype, m_kb.param_of(m_in), offset(j));
    }
    return group_value(m_kb, m_in, Point{m_in, {}, offset(j)}, nullptr);
  }

 private:
  KernelBuilder& m_kb;
  ir::NodeId m_in = -1;
  bool m_fused = false;
  llvm::Value* m_len = nullptr;
  llvm::Value* m_inner = nullptr;
  llvm::Value* m_base = nullptr;
};

// Stores the epilogue of the row op's value at row element j (softmax, norms).
void store_at(KernelBuilder& kb, Row& row, llvm::Value* j, llvm::Value* value) {
  ir::NodeId root = kb.kernel().group.root;
  llvm::Value* e = row.offset(j);
  kb.store_outputs(group_value(kb, root, Point{root, {}, e}, value), e);
}

using Carried = std::vector<llvm::Value*>;

}  // namespace

WorkShape build_rows(KernelBuilder& kb) {
  const ir::Graph& g = kb.graph();
  const ir::Node& anchor = g.node(kb.kernel().group.anchor);
  ir::NodeId in = anchor.operands[0];
  int axis = anchor.attrs.axis;
  int rank = g.node(in).type.shape.rank();
  Extent rows = kb.sizes().product(in, 0, axis) * kb.sizes().product(in, axis + 1, rank);
  Extent len = kb.sizes().dim(in, axis);
  Extent inner = kb.sizes().product(in, axis + 1, rank);
  const auto& nodes = kb.kernel().group.nodes;
  // A row computed by a fused prologue (an embedding's gathers, a residual add) or read with a
  // stride is staged in scratch once, and every pass reads it there.
  const bool staged = std::binary_search(nodes.begin(), nodes.end(), in) ||
                      !(inner.fixed() && inner.coef == 1);
  const ir::DType src_dtype = staged ? ir::DType::f32 : g.node(in).type.dtype;
  const int64_t w = kb.facts().vector_width;
  llvm::IRBuilder<>& b = kb.b();
  LlvmMath m{kb, b};  // the row formulas of ir/scalar.h as IR
  llvm::Value* zero = kb.i64c(0);
  llvm::Value* minus_inf = llvm::ConstantFP::getInfinity(kb.f32(), true);
  auto splat = [&](llvm::Value* v) { return b.CreateVectorSplat(static_cast<unsigned>(w), v); };
  kb.loop(kb.begin(), kb.end(), 1, [&](llvm::Value* r) {
    Row row(kb, r);
    llvm::Value* src = staged ? kb.scratch() : kb.param_of(in);
    llvm::Value* src_base = staged ? zero : row.offset(zero);
    if (staged) {
      kb.loop(zero, row.len(), 1, [&](llvm::Value* j) {
        b.CreateStore(row.element(j), b.CreateGEP(kb.f32(), kb.scratch(), j));
      });
    }
    // Row element j, and elements [j, j + W) as a vector.
    auto one = [&](llvm::Value* j) { return kb.load_float(src_dtype, src, b.CreateAdd(src_base, j)); };
    auto lanes = [&](llvm::Value* j) {
      return kb.load_floats(src_dtype, src, b.CreateAdd(src_base, j), static_cast<unsigned>(w));
    };
    llvm::Value* whole = b.CreateMul(b.CreateUDiv(row.len(), kb.i64c(w)), kb.i64c(w));
    // combine(..., f(x)) over the row: W partial results (element j in lane j % W) over the whole
    // vectors, folded lane 0 first, then the elements left one by one. The same order whatever
    // the threads.
    auto fold = [&](llvm::Value* init, const std::function<llvm::Value*(llvm::Value*, llvm::Value*)>& combine,
                    const std::function<llvm::Value*(llvm::Value*, bool)>& f) {
      llvm::Value* acc = kb.plain_loop(zero, whole, w, {splat(init)}, [&](llvm::Value* j, const Carried& c) {
        return Carried{combine(c[0], f(lanes(j), true))};
      })[0];
      llvm::Value* total = b.CreateExtractElement(acc, uint64_t{0});
      for (int64_t l = 1; l < w; ++l) total = combine(total, b.CreateExtractElement(acc, static_cast<uint64_t>(l)));
      return kb.plain_loop(whole, row.len(), 1, {total}, [&](llvm::Value* j, const Carried& c) {
        return Carried{combine(c[0], f(one(j), false))};
      })[0];
    };
    auto add = [&](llvm::Value* x, llvm::Value* y) { return b.CreateFAdd(x, y); };
    auto max = [&](llvm::Value* x, llvm::Value* y) { return kb.max(x, y); };
    // The max reduction keeps a NaN, as PyTorch's amax (a softmax's NaN reaches every output
    // through exp with the plain max).
    auto max_nan = [&](llvm::Value* x, llvm::Value* y) { return kb.max_nan(x, y); };
    auto same = [](llvm::Value* x, bool) { return x; };
    llvm::Value* len_f = b.CreateSIToFP(row.len(), kb.f32());
    switch (ir::category(anchor.kind)) {
      case ir::OpCategory::reduce: {
        bool is_max = anchor.kind == ir::OpKind::max;
        llvm::Value* acc = is_max ? fold(minus_inf, max_nan, same) : fold(kb.f32c(0.0), add, same);
        if (anchor.kind == ir::OpKind::mean) acc = ir::row_mean(m, acc, len_f);
        ir::NodeId root = kb.kernel().group.root;
        kb.store_outputs(group_value(kb, root, Point{root, {}, r}, acc), r);
        return;
      }
      case ir::OpCategory::softmax: {
        llvm::Value* mx = fold(minus_inf, max, same);
        llvm::Value* sum = fold(kb.f32c(0.0), add, [&](llvm::Value* x, bool vector) {
          return ir::softmax_exp(m, x, vector ? splat(mx) : mx);
        });
        llvm::Value* inv = ir::reciprocal(m, sum);
        kb.loop(zero, row.len(), 1, [&](llvm::Value* j) {
          store_at(kb, row, j, m.mul(ir::softmax_exp(m, one(j), mx), inv));
        });
        return;
      }
      case ir::OpCategory::norm:
        break;  // below
      case ir::OpCategory::input:
      case ir::OpCategory::matmul:
      case ir::OpCategory::binary:
      case ir::OpCategory::unary:
      case ir::OpCategory::cast:
      case ir::OpCategory::layout:
      case ir::OpCategory::attention:
      case ir::OpCategory::select:
      case ir::OpCategory::arange:
      case ir::OpCategory::gather:
      case ir::OpCategory::scan:  // build_scan
        assert(false && "build_rows: not a row op");
        return;
    }
    // rms_norm and layer_norm over the last axis, statistics in fp32 over two passes: the mean
    // (layer_norm), then the mean squared deviation from it (rms_norm: from 0). layer_norm works
    // on the row less its first element x0: the mean of x - x0 (`mean` below), then the
    // deviations (x - x0) - mean. x - x0 is exact for a row far from 0 next to its spread (1e4
    // and noise of 0.01), and the deviations nearly so: a mean of the row itself loses them, in
    // its fp32 sum (whose ulp is the spread's size: 4% off fp64 at 37 elements) and in its own
    // rounding.
    bool layer = anchor.kind == ir::OpKind::layer_norm;
    llvm::Value* mean = kb.f32c(0.0);
    llvm::Value* x0 = layer ? one(zero) : nullptr;
    auto less_x0 = [&](llvm::Value* x, bool vector) {
      return layer ? b.CreateFSub(x, vector ? splat(x0) : x0) : x;
    };
    if (layer) mean = ir::row_mean(m, fold(kb.f32c(0.0), add, less_x0), len_f);
    llvm::Value* squares = fold(kb.f32c(0.0), add, [&](llvm::Value* x, bool vector) {
      llvm::Value* d = b.CreateFSub(less_x0(x, vector), vector ? splat(mean) : mean);
      return b.CreateFMul(d, d);
    });
    llvm::Value* scale = ir::norm_scale(m, squares, len_f, kb.f32c(anchor.attrs.eps));
    ir::DType pdtype = g.node(anchor.operands[1]).type.dtype;
    kb.loop(zero, row.len(), 1, [&](llvm::Value* j) {
      llvm::Value* y = ir::norm_output(
          m, less_x0(one(j), false), mean, scale,
          [&] { return kb.load_float(pdtype, kb.param_of(anchor.operands[1]), j); },
          [&] { return kb.load_float(pdtype, kb.param_of(anchor.operands[2]), j); }, layer);
      store_at(kb, row, j, y);
    });
  });
  return {{rows.term()}, staged ? static_cast<uint64_t>(len.hi) : 0};
}

WorkShape build_scan(KernelBuilder& kb) {
  const ir::Graph& g = kb.graph();
  const ir::Node& anchor = g.node(kb.kernel().group.anchor);
  ir::NodeId in = anchor.operands[0], root = kb.kernel().group.root;
  int axis = anchor.attrs.axis;
  int rank = g.node(in).type.shape.rank();
  Extent rows = kb.sizes().product(in, 0, axis) * kb.sizes().product(in, axis + 1, rank);
  const auto& nodes = kb.kernel().group.nodes;
  const bool fused = std::binary_search(nodes.begin(), nodes.end(), in);
  const ir::DType dtype = g.node(in).type.dtype;
  const bool integer = ir::is_integer(dtype);
  llvm::IRBuilder<>& b = kb.b();
  kb.loop(kb.begin(), kb.end(), 1, [&](llvm::Value* r) {
    Row row(kb, r);
    // Integers add wrapping (no nsw), floats in fp32; the epilogue rounds each result to its
    // dtype, the running sum stays unrounded.
    llvm::Value* zero = integer ? kb.typed_literal(dtype, 0.0) : kb.f32c(0.0);
    kb.plain_loop(kb.i64c(0), row.len(), 1, {zero}, [&](llvm::Value* j, const Carried& c) {
      llvm::Value* at = row.offset(j);
      llvm::Value* x = fused ? group_value(kb, in, Point{in, {}, at}, nullptr)
                             : kb.load_value(dtype, kb.param_of(in), at);
      llvm::Value* sum = integer ? b.CreateAdd(c[0], x) : b.CreateFAdd(c[0], x);
      kb.store_outputs(group_value(kb, root, Point{root, {}, at}, sum), at);
      return Carried{sum};
    });
  });
  return {{rows.term()}, 0};
}

}  // namespace kiln::compiler::cpu::detail
