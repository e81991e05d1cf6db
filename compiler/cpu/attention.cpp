// CPU attention kernels: one work item per query row of one batch. The row's scores go to
// scratch, then its softmax (max and sum in fp32), then P V; operands are rounded as the mode's
// tensor-core kernel rounds them (Q, K and V by the path, P to the path's operand format).
#include "compiler/cpu/codegen_internal.h"

namespace kiln::compiler::cpu::detail {

WorkShape build_attention(KernelBuilder& kb) {
  const KernelPlan& k = kb.kernel();
  const AttentionMatch& m = k.group.attention;
  const AttentionExtents& a = k.attention_extents;
  const MatmulExtents& e = k.extents;
  const ir::Graph& g = kb.graph();
  llvm::IRBuilder<>& b = kb.b();
  llvm::Type* fl = kb.f32();
  ir::DType dtype = g.node(m.q).type.dtype;
  int rank = g.node(m.root).type.shape.rank();
  MatmulPath path = m.path;
  bool x3 = path.numerics == Numerics::tf32x3;
  llvm::Value* zero = kb.i64c(0);
  llvm::Value* sq = kb.extent(a.sq);
  llvm::Value* sk = kb.extent(a.sk);
  llvm::Value* d = kb.i64c(a.d);
  llvm::Value* dv = kb.i64c(a.dv);
  llvm::Value* inner = kb.extent(e.inner_batch);
  // Scratch: the row's scores (S_k at its upper bound), then D_v accumulators.
  llvm::Value* scores = kb.scratch();
  llvm::Value* acc = b.CreateConstGEP1_64(fl, scores, static_cast<uint64_t>(a.sk.hi));

  auto round_p = [&](llvm::Value* v) {
    if (path.numerics == Numerics::f16) return kb.round_to(ir::DType::f16, v);
    if (path.numerics == Numerics::bf16) return kb.round_to(ir::DType::bf16, v);
    return kb.round_operand(path.numerics, v);
  };
  // x * y + s with the path's operand rounding (tf32x3: the small-half products first).
  auto product = [&](llvm::Value* x, llvm::Value* y, llvm::Value* s) {
    if (!x3) {
      return kb.fma(kb.round_operand(path.numerics, x), kb.round_operand(path.numerics, y), s);
    }
    auto [xb, xs] = kb.split_tf32x3(x);
    auto [yb, ys] = kb.split_tf32x3(y);
    s = kb.fma(xs, yb, s);
    s = kb.fma(xb, ys, s);
    return kb.fma(xb, yb, s);
  };

  kb.loop(kb.begin(), kb.end(), 1, [&](llvm::Value* t) {
    llvm::Value* qi = b.CreateURem(t, sq);
    llvm::Value* bz = b.CreateUDiv(t, sq);
    llvm::Value* b_index = rank == 4 ? b.CreateURem(bz, inner) : bz;
    auto offset = [&](const std::array<Extent, 2>& strides, int64_t group = 1) {
      llvm::Value* o = zero;
      llvm::Value* head = group > 1 ? b.CreateUDiv(b_index, kb.i64c(group)) : b_index;  // grouped
      if (strides[1].coef) o = b.CreateAdd(o, b.CreateMul(head, kb.extent(strides[1])));
      if (strides[0].coef)
        o = b.CreateAdd(o, b.CreateMul(b.CreateUDiv(bz, inner), kb.extent(strides[0])));
      return o;
    };
    std::vector<llvm::Value*> batch;  // a 5-D or 6-D result's batch coordinates
    if (e.per_dim()) batch = coords_of(kb, e.batch_dims, bz);
    llvm::Value* q_row = b.CreateAdd(e.per_dim() ? batch_offset(kb, batch, a.q_dims) : offset(a.q),
                                     b.CreateMul(qi, d));
    llvm::Value* k_base = e.per_dim() ? batch_offset(kb, batch, a.k_dims, a.k_group)
                                      : offset(a.k, a.k_group);
    llvm::Value* v_base = e.per_dim() ? batch_offset(kb, batch, a.v_dims, a.v_group)
                                      : offset(a.v, a.v_group);
    llvm::Value* mask_base = m.mask >= 0 && e.per_dim() ? batch_offset(kb, batch, a.mask_dims) : nullptr;
    llvm::Value* Q = kb.param_of(m.q);
    llvm::Value* K = kb.param_of(m.k);
    llvm::Value* V = kb.param_of(m.v);

    llvm::Value* minus_inf = llvm::ConstantFP::getInfinity(fl, true);
    llvm::Value* mx = kb.loop(zero, sk, 1, {minus_inf}, [&](llvm::Value* j, const std::vector<llvm::Value*>& c) {
      llvm::Value* k_row = b.CreateAdd(k_base, b.CreateMul(j, d));
      llvm::Value* dot = kb.loop(zero, d, 1, {kb.f32c(0.0)}, [&](llvm::Value* x, const std::vector<llvm::Value*>& s) {
        llvm::Value* qv = kb.load_float(dtype, Q, b.CreateAdd(q_row, x));
        llvm::Value* kv = kb.load_float(dtype, K, b.CreateAdd(k_row, x));
        return std::vector<llvm::Value*>{product(qv, kv, s[0])};
      })[0];
      llvm::Value* score = b.CreateFMul(dot, kb.f32c(m.scale));
      if (m.mask >= 0) {
        llvm::Value* at = b.CreateAdd(mask_base ? mask_base : offset(a.mask), b.CreateAdd(b.CreateMul(qi, kb.extent(a.mask_row)),
                                                                  b.CreateMul(j, kb.extent(a.mask_col))));
        ir::DType mask_dtype = g.node(m.mask).type.dtype;
        llvm::Value* mv = kb.load_value(mask_dtype, kb.param_of(m.mask), at);
        // A bool mask keeps the keys where it is true; a float one is added.
        score = mask_dtype == ir::DType::boolean ? b.CreateSelect(mv, score, minus_inf)
                                                 : b.CreateFAdd(score, mv);
      }
      if (m.causal) score = b.CreateSelect(b.CreateICmpSGT(j, qi), minus_inf, score);
      b.CreateStore(score, b.CreateGEP(fl, scores, j));
      return std::vector<llvm::Value*>{kb.max(c[0], score)};
    })[0];
    // With a mask a row of the attention op may have no key left (its max -inf): it keeps exp()
    // finite and its output 0 (the explicit chain keeps softmax's NaN).
    bool zero_rows = zero_masked_rows(g, m);
    llvm::Value* base = zero_rows ? b.CreateSelect(b.CreateFCmpOEQ(mx, minus_inf), kb.f32c(0.0), mx) : mx;
    llvm::Value* sum = kb.loop(zero, sk, 1, {kb.f32c(0.0)}, [&](llvm::Value* j, const std::vector<llvm::Value*>& c) {
      llvm::Value* at = b.CreateGEP(fl, scores, j);
      llvm::Value* p = kb.exp(b.CreateFSub(b.CreateLoad(fl, at), base));
      b.CreateStore(p, at);
      return std::vector<llvm::Value*>{b.CreateFAdd(c[0], p)};
    })[0];
    kb.loop(zero, dv, 1, [&](llvm::Value* c) { b.CreateStore(kb.f32c(0.0), b.CreateGEP(fl, acc, c)); });
    kb.loop(zero, sk, 1, [&](llvm::Value* j) {
      llvm::Value* p = b.CreateLoad(fl, b.CreateGEP(fl, scores, j));
      llvm::Value* v_row = b.CreateAdd(v_base, b.CreateMul(j, dv));
      kb.loop(zero, dv, 1, [&](llvm::Value* c) {
        llvm::Value* at = b.CreateGEP(fl, acc, c);
        llvm::Value* v = kb.load_float(dtype, V, b.CreateAdd(v_row, c));
        llvm::Value* s = b.CreateLoad(fl, at);
        b.CreateStore(
            x3 ? product(p, v, s) : kb.fma(round_p(p), kb.round_operand(path.numerics, v), s), at);
      });
    });
    llvm::Value* inv = b.CreateFDiv(kb.f32c(1.0), sum);
    if (zero_rows) inv = b.CreateSelect(b.CreateFCmpOGT(sum, kb.f32c(0.0)), inv, kb.f32c(0.0));
    llvm::Value* out_row = b.CreateMul(b.CreateAdd(b.CreateMul(bz, sq), qi), dv);
    kb.loop(zero, dv, 1, [&](llvm::Value* c) {
      llvm::Value* o = b.CreateFMul(b.CreateLoad(fl, b.CreateGEP(fl, acc, c)), inv);
      kb.store_outputs(kb.round_to(g.node(m.root).type.dtype, o), b.CreateAdd(out_row, c));
    });
  });
  return {{e.batch.term(), a.sq.term()}, static_cast<uint64_t>(a.sk.hi + a.dv)};
}

}  // namespace kiln::compiler::cpu::detail
