// CPU attention kernels. A work item is one batch (and head) and up to 4 blocks of NR query rows.
// Per block the scores are computed transposed, S^T = K Q^T: the GEMM's micro-kernel with K as
// its A operand (read in place, or from a rounded copy) and the block's Q^T as its packed B panel.
// A key's scores for the block's NR queries are then one vector, and the softmax runs down the
// keys on vectors of NR queries (no horizontal reductions, and each query's max and sum taken
// over the keys in order). Then O^T = V^T P^T, the micro-kernel again, with V as A and P^T,
// already a packed panel, as B. Keys go in chunks of at most 512: with more than one chunk the
// softmax is online (each query's running max and sum, and its O^T, rescaled by e^(m_old -
// m_new)); with one chunk it is the plain two-pass one. Operands are rounded as the mode's
// tensor-core kernel rounds them (Q, K and V by the path, P to the path's operand format).
#include "compiler/cpu/codegen_internal.h"

#include <algorithm>

namespace kiln::compiler::cpu::detail {

WorkShape build_attention(KernelBuilder& kb) {
  const KernelPlan& k = kb.kernel();
  const AttentionMatch& m = k.group.attention;
  const AttentionExtents& a = k.attention_extents;
  const MatmulExtents& e = k.extents;
  const CpuFacts& facts = kb.facts();
  const ir::Graph& g = kb.graph();
  llvm::IRBuilder<>& b = kb.b();
  llvm::Type* fl = kb.f32();
  ir::DType dtype = g.node(m.q).type.dtype;
  int rank = g.node(m.root).type.shape.rank();
  const MatmulPath path = m.path;
  const bool x3 = path.numerics == Numerics::tf32x3;
  // K and V are read in place when nothing rounds or converts them.
  const bool direct = path.numerics == Numerics::fp32 && dtype == ir::DType::f32;
  const int64_t nr = facts.nr, mr = mr_for(path, facts);
  const int64_t blocks = std::clamp<int64_t>((a.sq.hi + nr - 1) / nr, 1, 4);
  const int64_t qi = blocks * nr;  // query rows per item
  auto round_up = [](int64_t x, int64_t to) { return (x + to - 1) / to * to; };
  const int64_t chunk = std::min<int64_t>(a.sk.hi, 512 / mr * mr);  // keys per chunk
  const int64_t chunk_rows = round_up(chunk, mr);  // the micro-kernel writes whole MR-row tiles
  const int64_t dv_rows = round_up(a.dv, mr);
  const int64_t parts = x3 ? 2 : 1;  // tf32x3's big and small halves

  // Scratch, in floats: Q^T panels (blocks x D x NR), the chunk's rounded K and V (unless read in
  // place), its S^T then P^T (keys x NR), each block's O^T (D_v x NR), and each block's running
  // max and sum (NR each); each of the first four twice for tf32x3 (the small halves after).
  const int64_t qt_size = blocks * a.d * nr, kc_size = direct ? 0 : chunk_rows * a.d,
                vc_size = direct ? 0 : chunk_rows * a.dv, st_size = chunk_rows * nr;
  const int64_t qt_at = 0, kc_at = qt_at + qt_size * parts, vc_at = kc_at + kc_size * parts,
                st_at = vc_at + vc_size * parts, ot_at = st_at + st_size * parts,
                ml_at = ot_at + blocks * dv_rows * nr, scratch_floats = ml_at + blocks * 2 * nr;
  auto at = [&](int64_t offset) { return b.CreateConstGEP1_64(fl, kb.scratch(), static_cast<uint64_t>(offset)); };
  llvm::Value* qt = at(qt_at);
  llvm::Value* kc = at(kc_at);
  llvm::Value* vc = at(vc_at);
  llvm::Value* st = at(st_at);
  llvm::Value* ot = at(ot_at);
  llvm::Value* ml = at(ml_at);
  auto small_of = [&](llvm::Value* p, int64_t size) { return x3 ? b.CreateConstGEP1_64(fl, p, static_cast<uint64_t>(size)) : p; };
  llvm::Value* qt_small = small_of(qt, qt_size);
  llvm::Value* kc_small = small_of(kc, kc_size);
  llvm::Value* vc_small = small_of(vc, vc_size);
  llvm::Value* st_small = small_of(st, st_size);

  llvm::Function* micro = micro_kernel(kb.module(), path, facts);
  auto* vt = llvm::FixedVectorType::get(fl, static_cast<unsigned>(nr));
  llvm::Align align(4);
  auto splat = [&](llvm::Value* v) { return b.CreateVectorSplat(static_cast<unsigned>(nr), v); };
  std::vector<llvm::Constant*> lane_ids;
  for (int64_t l = 0; l < nr; ++l) lane_ids.push_back(b.getInt64(static_cast<uint64_t>(l)));
  llvm::Value* lanes = llvm::ConstantVector::get(lane_ids);
  llvm::Value* minus_inf = llvm::ConstantFP::getInfinity(fl, true);
  llvm::Value* vzero = llvm::ConstantAggregateZero::get(vt);
  llvm::Value* vminus_inf = splat(minus_inf);
  auto min = [&](llvm::Value* x, llvm::Value* y) { return b.CreateSelect(b.CreateICmpSLT(x, y), x, y); };
  auto vload = [&](llvm::Value* p, llvm::Value* index) { return b.CreateAlignedLoad(vt, b.CreateGEP(fl, p, index), align); };
  auto vstore = [&](llvm::Value* v, llvm::Value* p, llvm::Value* index) {
    b.CreateAlignedStore(v, b.CreateGEP(fl, p, index), align);
  };
  // v (a float or a vector) stored rounded as the path's operands are: both tf32x3 halves, or one.
  auto store_operand = [&](llvm::Value* v, llvm::Value* p, llvm::Value* p_small, llvm::Value* index) {
    auto [big, small] = kb.operand_parts(path.numerics, v);
    b.CreateAlignedStore(big, b.CreateGEP(fl, p, index), align);
    if (small) b.CreateAlignedStore(small, b.CreateGEP(fl, p_small, index), align);
  };
  // P's rounding: to the 16-bit format of an f16 or bf16 path, else as the operands.
  auto store_p = [&](llvm::Value* v, llvm::Value* index) {
    if (path.numerics == Numerics::f16) v = kb.round_to(ir::DType::f16, v);
    if (path.numerics == Numerics::bf16) v = kb.round_to(ir::DType::bf16, v);
    store_operand(v, st, st_small, index);
  };

  llvm::Value* zero = kb.i64c(0);
  llvm::Value* sq = kb.extent(a.sq);
  llvm::Value* sk = kb.extent(a.sk);
  llvm::Value* d = kb.i64c(a.d);
  llvm::Value* dv = kb.i64c(a.dv);
  llvm::Value* inner = kb.extent(e.inner_batch);
  llvm::Value* items_q = b.CreateUDiv(b.CreateAdd(sq, kb.i64c(qi - 1)), kb.i64c(qi));
  llvm::Value* Q = kb.param_of(m.q);
  llvm::Value* K = kb.param_of(m.k);
  llvm::Value* V = kb.param_of(m.v);
  const bool zero_rows = zero_masked_rows(g, m);

  kb.plain_loop(kb.begin(), kb.end(), 1, [&](llvm::Value* t) {
    llvm::Value* q_first = b.CreateMul(b.CreateURem(t, items_q), kb.i64c(qi));
    llvm::Value* bz = b.CreateUDiv(t, items_q);
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
    llvm::Value* q_base = e.per_dim() ? batch_offset(kb, batch, a.q_dims) : offset(a.q);
    llvm::Value* k_base = e.per_dim() ? batch_offset(kb, batch, a.k_dims, a.k_group)
                                      : offset(a.k, a.k_group);
    llvm::Value* v_base = e.per_dim() ? batch_offset(kb, batch, a.v_dims, a.v_group)
                                      : offset(a.v, a.v_group);
    llvm::Value* mask_base = nullptr;
    if (m.mask >= 0) mask_base = e.per_dim() ? batch_offset(kb, batch, a.mask_dims) : offset(a.mask);
    // The keys any query of the item reads (causal: those up to its last query).
    llvm::Value* q_end = min(sq, b.CreateAdd(q_first, kb.i64c(qi)));
    llvm::Value* item_keys = m.causal ? min(sk, q_end) : sk;

    // Q^T panels, rounded: panel[x][lane] is Q's row q0 + lane, 0 past the last query. A row
    // is read (and rounded) a vector at a time, then stored down its lane.
    const int64_t w = facts.vector_width;
    const int64_t whole_d = a.d / w * w;
    kb.plain_loop(zero, kb.i64c(blocks), 1, [&](llvm::Value* blk) {
      llvm::Value* q0 = b.CreateAdd(q_first, b.CreateMul(blk, kb.i64c(nr)));
      llvm::Value* panel = b.CreateMul(blk, kb.i64c(a.d * nr));
      llvm::Value* rows = b.CreateSelect(b.CreateICmpSLT(q0, sq), min(kb.i64c(nr), b.CreateSub(sq, q0)), zero);
      auto put = [&](llvm::Value* v, llvm::Value* x, llvm::Value* lane) {  // v: lanes of x, x + 1, ...
        auto [big, small] = kb.operand_parts(path.numerics, v);
        llvm::Value* at = b.CreateAdd(panel, b.CreateAdd(b.CreateMul(x, kb.i64c(nr)), lane));
        kb.store_strided(big, qt, at, nr);
        if (small) kb.store_strided(small, qt_small, at, nr);
      };
      kb.plain_loop(zero, rows, 1, [&](llvm::Value* lane) {
        llvm::Value* row = b.CreateAdd(q_base, b.CreateMul(b.CreateAdd(q0, lane), d));
        kb.plain_loop(zero, kb.i64c(whole_d), w, [&](llvm::Value* x) {
          put(kb.load_floats(dtype, Q, b.CreateAdd(row, x), static_cast<unsigned>(w)), x, lane);
        });
        kb.plain_loop(kb.i64c(whole_d), d, 1, [&](llvm::Value* x) {
          put(kb.load_float(dtype, Q, b.CreateAdd(row, x)), x, lane);
        });
      });
      kb.plain_loop(rows, kb.i64c(nr), 1, [&](llvm::Value* lane) {  // past the last query
        kb.plain_loop(zero, d, 1, [&](llvm::Value* x) { put(kb.f32c(0.0), x, lane); });
      });
      llvm::Value* state = b.CreateMul(blk, kb.i64c(2 * nr));
      vstore(vminus_inf, ml, state);
      vstore(vzero, ml, b.CreateAdd(state, kb.i64c(nr)));
    });

    kb.plain_loop(zero, item_keys, chunk, [&](llvm::Value* c0) {
      llvm::Value* first = b.CreateICmpEQ(c0, zero);
      llvm::Value* chunk_keys = min(kb.i64c(chunk), b.CreateSub(item_keys, c0));
      if (!direct) {
        // The chunk's K and V rows, converted and rounded once for all the item's queries: whole
        // vectors, then the elements left one by one.
        auto copy = [&](llvm::Value* from, llvm::Value* to, llvm::Value* to_small, llvm::Value* count) {
          const int64_t w = facts.vector_width;
          llvm::Value* whole = b.CreateMul(b.CreateUDiv(count, kb.i64c(w)), kb.i64c(w));
          kb.plain_loop(zero, whole, w, [&](llvm::Value* n) {
            store_operand(kb.load_floats(dtype, from, n, static_cast<unsigned>(w)), to, to_small, n);
          });
          kb.plain_loop(whole, count, 1, [&](llvm::Value* n) {
            store_operand(kb.load_float(dtype, from, n), to, to_small, n);
          });
        };
        auto row_of = [&](llvm::Value* base, llvm::Value* p, llvm::Value* width) {
          llvm::Value* element = b.CreateAdd(base, b.CreateMul(c0, width));
          return b.CreateGEP(b.getInt8Ty(), p, b.CreateMul(element, kb.i64c(ir::byte_size(dtype))));
        };
        copy(row_of(k_base, K, d), kc, kc_small, b.CreateMul(chunk_keys, d));
        copy(row_of(v_base, V, dv), vc, vc_small, b.CreateMul(chunk_keys, dv));
      }
      kb.plain_loop(zero, kb.i64c(blocks), 1, [&](llvm::Value* blk) {
        llvm::Value* q0 = b.CreateAdd(q_first, b.CreateMul(blk, kb.i64c(nr)));
        // The block's keys: causal, those up to its last query (within the item's, copied above).
        llvm::Value* block_keys = m.causal ? min(item_keys, b.CreateAdd(q0, kb.i64c(nr))) : sk;
        llvm::Value* count = min(kb.i64c(chunk), b.CreateSub(block_keys, c0));  // may be <= 0
        kb.when(b.CreateAnd(b.CreateICmpSLT(q0, sq), b.CreateICmpSGT(count, zero)), [&] {
          llvm::Value* panel = b.CreateGEP(fl, qt, b.CreateMul(blk, kb.i64c(a.d * nr)));
          llvm::Value* panel_small = b.CreateGEP(fl, qt_small, b.CreateMul(blk, kb.i64c(a.d * nr)));
          // S^T, MR keys at a time.
          kb.plain_loop(zero, count, mr, [&](llvm::Value* j) {
            llvm::Value* keys = direct ? b.CreateGEP(fl, K, b.CreateAdd(k_base, b.CreateMul(b.CreateAdd(c0, j), d)))
                                       : b.CreateGEP(fl, kc, b.CreateMul(j, d));
            llvm::Value* keys_small = b.CreateGEP(fl, kc_small, b.CreateMul(j, d));
            b.CreateCall(micro, {keys, panel, b.CreateGEP(fl, st, b.CreateMul(j, kb.i64c(nr))),
                                 kb.i64c(nr), d, b.getTrue(), keys_small, panel_small, d,
                                 kb.i64c(1), b.CreateSub(count, j)});
          });
          // The softmax down the keys, NR queries a vector.
          llvm::Value* state = b.CreateMul(blk, kb.i64c(2 * nr));
          llvm::Value* m_old = vload(ml, state);
          llvm::Value* l_old = vload(ml, b.CreateAdd(state, kb.i64c(nr)));
          llvm::Value* q_lanes = b.CreateAdd(splat(q0), lanes);
          llvm::Value* mx = kb.plain_loop(zero, count, 1, {m_old}, [&](llvm::Value* j, const std::vector<llvm::Value*>& c) {
            llvm::Value* key = b.CreateAdd(c0, j);
            llvm::Value* row = b.CreateMul(j, kb.i64c(nr));
            llvm::Value* s = b.CreateFMul(vload(st, row), splat(kb.f32c(m.scale)));
            if (m.mask >= 0) {
              ir::DType mask_dtype = g.node(m.mask).type.dtype;
              llvm::Value* M = kb.param_of(m.mask);
              llvm::Value* col = b.CreateAdd(mask_base, b.CreateMul(key, kb.extent(a.mask_col)));
              llvm::Value* mv = nullptr;
              if (a.mask_row.coef == 0) {
                mv = splat(kb.load_float(mask_dtype, M, col));  // one mask row for every query
              } else {
                mv = llvm::UndefValue::get(vt);
                llvm::Value* last = b.CreateSub(sq, kb.i64c(1));
                for (int64_t l = 0; l < nr; ++l) {
                  llvm::Value* q = min(b.CreateAdd(q0, kb.i64c(l)), last);
                  llvm::Value* index = b.CreateAdd(col, b.CreateMul(q, kb.extent(a.mask_row)));
                  mv = b.CreateInsertElement(mv, kb.load_float(mask_dtype, M, index), static_cast<uint64_t>(l));
                }
              }
              // A bool mask keeps the keys where it is true and adds -inf to the others (a +inf
              // or NaN score there stays NaN, as PyTorch's); a float one is added.
              s = mask_dtype == ir::DType::boolean
                      ? b.CreateSelect(b.CreateFCmpONE(mv, vzero), s, b.CreateFAdd(s, vminus_inf))
                      : b.CreateFAdd(s, mv);
            }
            if (m.causal) s = b.CreateSelect(b.CreateICmpSGT(splat(key), q_lanes), vminus_inf, s);
            vstore(s, st, row);
            return std::vector<llvm::Value*>{kb.max(c[0], s)};
          })[0];
          // exp() relative to the max, or to 0 while a query has no key (its exps then 0, not
          // NaN; a row left with no key at all is 0 or NaN at the end, below).
          llvm::Value* base = b.CreateSelect(b.CreateFCmpOEQ(mx, vminus_inf), vzero, mx);
          llvm::Value* sum = kb.plain_loop(zero, count, 1, {vzero}, [&](llvm::Value* j, const std::vector<llvm::Value*>& c) {
            llvm::Value* row = b.CreateMul(j, kb.i64c(nr));
            llvm::Value* p = kb.exp(b.CreateFSub(vload(st, row), base));
            store_p(p, row);
            return std::vector<llvm::Value*>{b.CreateFAdd(c[0], p)};
          })[0];
          // A later chunk rescales what the earlier ones summed: by e^(m_old - m_new), or 0 while
          // a query had no key.
          llvm::Value* alpha = b.CreateSelect(b.CreateFCmpOEQ(m_old, vminus_inf), vzero,
                                              kb.exp(b.CreateFSub(m_old, base)));
          llvm::Value* l = b.CreateSelect(first, sum, b.CreateFAdd(b.CreateFMul(l_old, alpha), sum));
          vstore(mx, ml, state);
          vstore(l, ml, b.CreateAdd(state, kb.i64c(nr)));
          llvm::Value* o_block = b.CreateGEP(fl, ot, b.CreateMul(blk, kb.i64c(dv_rows * nr)));
          kb.when(b.CreateNot(first), [&] {
            kb.plain_loop(zero, dv, 1, [&](llvm::Value* c) {
              llvm::Value* row = b.CreateMul(c, kb.i64c(nr));
              vstore(b.CreateFMul(vload(o_block, row), alpha), o_block, row);
            });
          });
          // O^T += V^T P^T, MR columns of V at a time.
          kb.plain_loop(zero, dv, mr, [&](llvm::Value* c) {
            llvm::Value* values = direct ? b.CreateGEP(fl, V, b.CreateAdd(v_base, b.CreateAdd(b.CreateMul(c0, dv), c)))
                                         : b.CreateGEP(fl, vc, c);
            b.CreateCall(micro, {values, st, b.CreateGEP(fl, o_block, b.CreateMul(c, kb.i64c(nr))),
                                 kb.i64c(nr), count, first, b.CreateGEP(fl, vc_small, c), st_small,
                                 kb.i64c(1), dv, b.CreateSub(dv, c)});
          });
        });
      });
    });

    // out[q][c] = O^T[c][q] / sum[q]; a query whose every score is -inf is 0 (the attention op)
    // or 0 / 0 = NaN (the explicit chain keeps softmax's NaN).
    kb.plain_loop(zero, kb.i64c(blocks), 1, [&](llvm::Value* blk) {
      llvm::Value* q0 = b.CreateAdd(q_first, b.CreateMul(blk, kb.i64c(nr)));
      kb.when(b.CreateICmpSLT(q0, sq), [&] {
        llvm::Value* state = b.CreateMul(blk, kb.i64c(2 * nr));
        llvm::Value* l = vload(ml, b.CreateAdd(state, kb.i64c(nr)));
        llvm::Value* inv = b.CreateFDiv(splat(kb.f32c(1.0)), l);
        vstore(inv, ml, state);
        llvm::Value* o_block = b.CreateGEP(fl, ot, b.CreateMul(blk, kb.i64c(dv_rows * nr)));
        kb.plain_loop(zero, min(kb.i64c(nr), b.CreateSub(sq, q0)), 1, [&](llvm::Value* lane) {
          llvm::Value* scale = b.CreateLoad(fl, b.CreateGEP(fl, ml, b.CreateAdd(state, lane)));
          // l is 0 exactly where every key is masked out: that row is 0 (not o * inf, nor 0 * a
          // NaN a masked key's v put in o); NaN where a score is, and the row is NaN.
          llvm::Value* masked_out = nullptr;
          if (zero_rows) {
            llvm::Value* at = b.CreateAdd(state, b.CreateAdd(lane, kb.i64c(nr)));
            llvm::Value* lane_l = b.CreateLoad(fl, b.CreateGEP(fl, ml, at));
            masked_out = b.CreateFCmpOEQ(lane_l, kb.f32c(0.0));
          }
          llvm::Value* out_row = b.CreateMul(b.CreateAdd(b.CreateMul(bz, sq), b.CreateAdd(q0, lane)), dv);
          kb.plain_loop(zero, dv, 1, [&](llvm::Value* c) {
            llvm::Value* o = b.CreateLoad(fl, b.CreateGEP(fl, o_block, b.CreateAdd(b.CreateMul(c, kb.i64c(nr)), lane)));
            llvm::Value* value = b.CreateFMul(o, scale);
            if (masked_out) value = b.CreateSelect(masked_out, kb.f32c(0.0), value);
            kb.store_outputs(kb.round_to(g.node(m.root).type.dtype, value),
                             b.CreateAdd(out_row, c));
          });
        });
      });
    });
  });
  return {{e.batch.term(), a.sq.term(qi)}, static_cast<uint64_t>(scratch_floats)};
}

}  // namespace kiln::compiler::cpu::detail
