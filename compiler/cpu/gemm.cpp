// CPU matmul kernels: a blocked GEMM. A work item is one MC x NC block of the result (of one
// batch); per KC slice of K it packs A and B into MR-row and NR-column panels (converting 16-bit
// operands and rounding them as the mode does on tensor cores), runs the MR x NR register-tiled
// micro-kernel (vector FMA) over the block, and applies the epilogue to the accumulators.
#include "compiler/cpu/codegen_internal.h"

#include <llvm/IR/Intrinsics.h>

namespace kiln::compiler::cpu::detail {

int mr_for(MatmulPath path, const CpuFacts& facts) {
  // tf32x3 holds the small halves of B too: fewer accumulator rows keep it in registers.
  return path.numerics == Numerics::tf32x3 ? std::max(2, facts.mr * 2 / 3) : facts.mr;
}

llvm::Function* micro_kernel(llvm::Module& module, MatmulPath path, const CpuFacts& facts) {
  bool x3 = path.numerics == Numerics::tf32x3;
  std::string name = std::string("kiln_micro_") + (x3 ? "x3" : "f32");
  if (llvm::Function* f = module.getFunction(name)) return f;
  llvm::LLVMContext& ctx = module.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* p = b.getPtrTy();
  llvm::Type* i64 = b.getInt64Ty();
  auto* type = llvm::FunctionType::get(
      b.getVoidTy(), {p, p, p, i64, i64, b.getInt1Ty(), p, p, i64, i64, i64}, false);
  auto* f = llvm::Function::Create(type, llvm::Function::InternalLinkage, name, module);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  f->addFnAttr(llvm::Attribute::NoInline);
  for (unsigned i : {0u, 1u, 2u, 6u, 7u}) f->addParamAttr(i, llvm::Attribute::NoAlias);
  auto arg = f->arg_begin();
  llvm::Value* a = &*arg++;
  llvm::Value* bp = &*arg++;
  llvm::Value* c = &*arg++;
  llvm::Value* ldc = &*arg++;
  llvm::Value* kc = &*arg++;
  llvm::Value* first = &*arg++;
  llvm::Value* a_small = &*arg++;
  llvm::Value* b_small = &*arg++;
  llvm::Value* a_row = &*arg++;
  llvm::Value* a_col = &*arg++;
  llvm::Value* a_rows = &*arg;

  const int mr = mr_for(path, facts);
  const int w = facts.vector_width;
  const int nv = facts.nr / w;
  llvm::Type* fl = b.getFloatTy();
  auto* vec = llvm::FixedVectorType::get(fl, static_cast<unsigned>(w));
  llvm::Align align(4);

  auto* entry = llvm::BasicBlock::Create(ctx, "entry", f);
  auto* header = llvm::BasicBlock::Create(ctx, "k", f);
  auto* body = llvm::BasicBlock::Create(ctx, "k.body", f);
  auto* exit = llvm::BasicBlock::Create(ctx, "k.end", f);
  b.SetInsertPoint(entry);
  std::vector<llvm::Value*> row_offset;  // of A's row i, the last valid one past a_rows
  for (int i = 0; i < mr; ++i) {
    llvm::Value* last = b.CreateSub(a_rows, b.getInt64(1));
    llvm::Value* row = b.CreateSelect(b.CreateICmpSLT(b.getInt64(i), a_rows), b.getInt64(i), last);
    row_offset.push_back(b.CreateMul(row, a_row));
  }
  std::vector<llvm::Value*> init;
  llvm::Value* zero = llvm::ConstantAggregateZero::get(vec);
  for (int i = 0; i < mr; ++i) {
    for (int v = 0; v < nv; ++v) {
      llvm::Value* at = b.CreateGEP(fl, c, b.CreateAdd(b.CreateMul(b.getInt64(i), ldc), b.getInt64(v * w)));
      init.push_back(b.CreateSelect(first, zero, b.CreateAlignedLoad(vec, at, align)));
    }
  }
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* k = b.CreatePHI(i64, 2, "k");
  k->addIncoming(b.getInt64(0), entry);
  std::vector<llvm::PHINode*> acc;
  for (llvm::Value* v : init) {
    acc.push_back(b.CreatePHI(vec, 2));
    acc.back()->addIncoming(v, entry);
  }
  b.CreateCondBr(b.CreateICmpSLT(k, kc), body, exit);
  b.SetInsertPoint(body);
  auto load_b = [&](llvm::Value* base) {
    std::vector<llvm::Value*> out;
    for (int v = 0; v < nv; ++v) {
      llvm::Value* at = b.CreateGEP(fl, base, b.CreateAdd(b.CreateMul(k, b.getInt64(facts.nr)), b.getInt64(v * w)));
      out.push_back(b.CreateAlignedLoad(vec, at, align));
    }
    return out;
  };
  auto splat_a = [&](llvm::Value* base, int i) {
    llvm::Value* at = b.CreateGEP(fl, base, b.CreateAdd(b.CreateMul(k, a_col), row_offset[static_cast<size_t>(i)]));
    return b.CreateVectorSplat(static_cast<unsigned>(w), b.CreateAlignedLoad(fl, at, align));
  };
  auto fma = [&](llvm::Value* x, llvm::Value* y, llvm::Value* z) {
    return b.CreateIntrinsic(llvm::Intrinsic::fma, {vec}, {x, y, z});
  };
  std::vector<llvm::Value*> bv = load_b(bp);
  std::vector<llvm::Value*> bs = x3 ? load_b(b_small) : std::vector<llvm::Value*>{};
  std::vector<llvm::Value*> next(acc.size());
  for (int i = 0; i < mr; ++i) {
    llvm::Value* ab = splat_a(a, i);
    llvm::Value* as = x3 ? splat_a(a_small, i) : nullptr;
    for (int v = 0; v < nv; ++v) {
      auto idx = static_cast<size_t>(i * nv + v);
      llvm::Value* s = acc[idx];
      if (x3) {
        s = fma(as, bv[static_cast<size_t>(v)], s);
        s = fma(ab, bs[static_cast<size_t>(v)], s);
      }
      next[idx] = fma(ab, bv[static_cast<size_t>(v)], s);
    }
  }
  llvm::Value* k_next = b.CreateAdd(k, b.getInt64(1));
  b.CreateBr(header);
  k->addIncoming(k_next, body);
  for (size_t i = 0; i < acc.size(); ++i) acc[i]->addIncoming(next[i], body);
  b.SetInsertPoint(exit);
  for (int i = 0; i < mr; ++i) {
    for (int v = 0; v < nv; ++v) {
      llvm::Value* at = b.CreateGEP(fl, c, b.CreateAdd(b.CreateMul(b.getInt64(i), ldc), b.getInt64(v * w)));
      b.CreateAlignedStore(acc[static_cast<size_t>(i * nv + v)], at, align);
    }
  }
  b.CreateRetVoid();
  return f;
}

namespace {

// What a block's GEMM depends on besides sizes and pointers: kernels alike in these share it.
struct GemmVariant {
  MatmulPath path;
  ir::DType a_dtype, b_dtype;
  bool a_k_contiguous, b_k_contiguous;
  // fp32 A with K contiguous needs no rounding: the micro-kernel reads its rows in place.
  bool direct_a() const {
    return path.numerics == Numerics::fp32 && a_dtype == ir::DType::f32 && a_k_contiguous;
  }
  // Any other A with K contiguous is converted and rounded into a copy of the block's rows in
  // the same layout (contiguous, so the loop vectorizes), which the micro-kernel reads as A.
  bool copied_a() const { return a_k_contiguous && !direct_a(); }
  std::string name() const {
    return std::string("kiln_gemm_") + std::string(to_string(path)) + "_" +
           std::string(ir::to_string(a_dtype)) + (a_k_contiguous ? "k" : "m") + "_" +
           std::string(ir::to_string(b_dtype)) + (b_k_contiguous ? "k" : "n");
  }
};

// float* gemm(const void* A, i64 a_off, i64 lda, const void* B, i64 b_off, i64 ldb, i64 m0,
//             i64 n0, i64 rows, i64 cols, i64 M, i64 N, i64 K, i64 mc, i64 nc, float* scratch):
// one block's sums, rows x cols at (m0, n0) of an mc x nc tile, left in scratch's C tile, which
// it returns. Scratch holds A panels (mc x KC), B panels (KC x nc), their small halves
// (tf32x3), then C (mc x nc). One function per variant in a module, called by every matmul
// kernel of that variant: each kernel compiles only its own epilogue.
llvm::Function* gemm_block(KernelBuilder& kb, const GemmVariant& v) {
  llvm::Module& module = kb.module();
  if (llvm::Function* f = module.getFunction(v.name())) return f;
  const CpuFacts& facts = kb.facts();
  const bool x3 = v.path.numerics == Numerics::tf32x3;
  const int64_t mr = mr_for(v.path, facts), nr = facts.nr;
  const int64_t kcap = facts.kc;
  const bool direct_a = v.direct_a();
  const bool copied_a = v.copied_a();
  llvm::Function* micro = micro_kernel(module, v.path, facts);
  llvm::IRBuilder<>& b = kb.b();
  llvm::Type* fl = kb.f32();
  llvm::Type* p = kb.ptr();
  llvm::Type* i64 = kb.i64();
  auto* type = llvm::FunctionType::get(
      p, {p, i64, i64, p, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, p}, false);
  auto* f = llvm::Function::Create(type, llvm::Function::InternalLinkage, v.name(), module);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  f->addFnAttr(llvm::Attribute::NoInline);  // shared: inlined, each kernel would compile it again
  f->addParamAttr(15, llvm::Attribute::NoAlias);
  std::vector<llvm::Value*> args;
  for (llvm::Argument& a : f->args()) args.push_back(&a);
  llvm::Value *A = args[0], *a_off = args[1], *lda = args[2], *B = args[3], *b_off = args[4],
              *ldb = args[5], *m0 = args[6], *n0 = args[7], *rows = args[8], *cols = args[9],
              *M = args[10], *N = args[11], *K = args[12], *mc = args[13], *nc = args[14],
              *scratch = args[15];
  kb.in_function(f, [&] {
    llvm::Value* zero = kb.i64c(0);
    auto min = [&](llvm::Value* x, llvm::Value* y) { return b.CreateSelect(b.CreateICmpSLT(x, y), x, y); };
    llvm::Value* ap = scratch;
    llvm::Value* kc_cap = kb.i64c(kcap);
    llvm::Value* bp = b.CreateGEP(fl, ap, b.CreateMul(mc, kc_cap));
    llvm::Value* ap2 = b.CreateGEP(fl, bp, b.CreateMul(nc, kc_cap));
    llvm::Value* bp2 = x3 ? b.CreateGEP(fl, ap2, b.CreateMul(mc, kc_cap)) : ap2;
    llvm::Value* cp = x3 ? b.CreateGEP(fl, bp2, b.CreateMul(nc, kc_cap)) : ap2;

    // One operand as the packing reads it: element (f, kk) of the free dim f and K at
    // base[offset + (k_contiguous ? f * ld + kk : kk * ld + f)], of dtype.
    struct Operand {
      llvm::Value* base;
      ir::DType dtype;
      llvm::Value* offset;
      llvm::Value* ld;
      bool k_contiguous;
    };
    auto index_of = [&](const Operand& o, llvm::Value* f, llvm::Value* kk) {
      llvm::Value* i = o.k_contiguous ? b.CreateAdd(b.CreateMul(f, o.ld), kk)
                                      : b.CreateAdd(b.CreateMul(kk, o.ld), f);
      return b.CreateAdd(o.offset, i);
    };
    // Stores v (lanes of the panel) rounded as the path does: both tf32x3 halves, or one value.
    auto store_rounded = [&](llvm::Value* dst, llvm::Value* dst_small, llvm::Value* slot,
                             llvm::Value* x, llvm::Value* inside) {
      llvm::Align align(4);
      auto put = [&](llvm::Value* to, llvm::Value* y) {
        if (inside) y = b.CreateSelect(inside, y, kb.f32c(0.0));
        b.CreateAlignedStore(y, b.CreateGEP(fl, to, slot), align);
      };
      auto [big, small] = kb.operand_parts(v.path.numerics, x);
      put(dst, big);
      if (small) put(dst_small, small);
    };
    // Packs one operand: panels of `width` along the free dim, element (f, kk) at
    // panel * kc * width + kk * width + f % width; past the free extent, zeros. A whole panel
    // whose free dim is contiguous moves as vectors; other whole panels a vector along K at a
    // time, its lanes stored down the panel; the last, partial panel with bounds checks, as
    // written.
    auto pack = [&](llvm::Value* dst, llvm::Value* dst_small, llvm::Value* count, int64_t width,
                    llvm::Value* free0, llvm::Value* free_bound, llvm::Value* k0, llvm::Value* kc,
                    const Operand& o) {
      const int64_t w = facts.vector_width;
      const int64_t lanes = width % w == 0 ? w : width;
      kb.loop(zero, count, width, [&](llvm::Value* f0) {
        llvm::Value* panel = b.CreateMul(f0, kc);
        llvm::Value* whole = b.CreateICmpSLE(b.CreateAdd(f0, kb.i64c(width)), count);
        kb.when(whole, [&] {
          if (!o.k_contiguous) {
            kb.plain_loop(zero, kc, 1, [&](llvm::Value* kk) {
              llvm::Value* row = b.CreateAdd(panel, b.CreateMul(kk, kb.i64c(width)));
              for (int64_t f = 0; f < width; f += lanes) {
                llvm::Value* at = index_of(o, b.CreateAdd(free0, b.CreateAdd(f0, kb.i64c(f))),
                                           b.CreateAdd(k0, kk));
                llvm::Value* x = kb.load_floats(o.dtype, o.base, at, static_cast<unsigned>(lanes));
                store_rounded(dst, dst_small, b.CreateAdd(row, kb.i64c(f)), x, nullptr);
              }
            });
          } else {
            // K contiguous: each row of the free dim read (and rounded) a vector along K at a
            // time, its lanes then stored down the panel; the K left over one by one.
            llvm::Value* whole_k = b.CreateMul(b.CreateUDiv(kc, kb.i64c(w)), kb.i64c(w));
            kb.plain_loop(zero, kb.i64c(width), 1, [&](llvm::Value* f) {
              llvm::Value* free = b.CreateAdd(free0, b.CreateAdd(f0, f));
              auto put = [&](llvm::Value* x, llvm::Value* kk) {  // x: lanes of kk, kk + 1, ...
                auto [big, small] = kb.operand_parts(v.path.numerics, x);
                llvm::Value* at = b.CreateAdd(b.CreateAdd(panel, b.CreateMul(kk, kb.i64c(width))), f);
                kb.store_strided(big, dst, at, width);
                if (small) kb.store_strided(small, dst_small, at, width);
              };
              kb.plain_loop(zero, whole_k, w, [&](llvm::Value* kk) {
                put(kb.load_floats(o.dtype, o.base, index_of(o, free, b.CreateAdd(k0, kk)), static_cast<unsigned>(w)), kk);
              });
              kb.plain_loop(whole_k, kc, 1, [&](llvm::Value* kk) {
                put(kb.load_float(o.dtype, o.base, index_of(o, free, b.CreateAdd(k0, kk))), kk);
              });
            });
          }
        });
        kb.when(b.CreateNot(whole), [&] {
          kb.plain_loop(zero, kc, 1, [&](llvm::Value* kk) {
            llvm::Value* row = b.CreateAdd(panel, b.CreateMul(kk, kb.i64c(width)));
            kb.plain_loop(zero, kb.i64c(width), 1, [&](llvm::Value* f) {
              llvm::Value* at = b.CreateAdd(free0, b.CreateAdd(f0, f));
              llvm::Value* inside = b.CreateICmpSLT(at, free_bound);
              llvm::Value* safe = b.CreateSelect(inside, at, b.CreateSub(free_bound, kb.i64c(1)));
              llvm::Value* x = kb.load_float(o.dtype, o.base, index_of(o, safe, b.CreateAdd(k0, kk)));
              store_rounded(dst, dst_small, b.CreateAdd(row, f), x, inside);
            });
          });
        });
      });
    };
    const Operand a_op{A, v.a_dtype, a_off, lda, v.a_k_contiguous};
    const Operand b_op{B, v.b_dtype, b_off, ldb, v.b_k_contiguous};

    kb.loop(zero, K, kcap, [&](llvm::Value* pc) {
      llvm::Value* kc = min(kb.i64c(kcap), b.CreateSub(K, pc));
      pack(bp, bp2, cols, nr, n0, N, pc, kc, b_op);
      if (copied_a) {
        // Rows [m0, m0 + rows) of A's K slice, row r at ap[r * kc].
        kb.loop(zero, rows, 1, [&](llvm::Value* r) {
          llvm::Value* from = b.CreateAdd(a_off, b.CreateAdd(b.CreateMul(b.CreateAdd(m0, r), lda), pc));
          llvm::Value* to = b.CreateMul(r, kc);
          kb.loop(zero, kc, 1, [&](llvm::Value* kk) {
            store_rounded(ap, ap2, b.CreateAdd(to, kk),
                          kb.load_float(v.a_dtype, A, b.CreateAdd(from, kk)), nullptr);
          });
        });
      } else if (!direct_a) {
        pack(ap, ap2, rows, mr, m0, M, pc, kc, a_op);
      }
      llvm::Value* first = b.CreateICmpEQ(pc, zero);
      kb.loop(zero, cols, nr, [&](llvm::Value* jr) {
        llvm::Value* bpanel = b.CreateGEP(fl, bp, b.CreateMul(jr, kc));
        llvm::Value* bpanel2 = b.CreateGEP(fl, bp2, b.CreateMul(jr, kc));
        kb.loop(zero, rows, mr, [&](llvm::Value* ir) {
          llvm::Value* apanel = b.CreateGEP(fl, ap, b.CreateMul(ir, kc));
          llvm::Value* apanel2 = b.CreateGEP(fl, ap2, b.CreateMul(ir, kc));
          llvm::Value* a_row = kb.i64c(1);
          llvm::Value* a_col = kb.i64c(mr);
          llvm::Value* a_rows = kb.i64c(mr);
          if (direct_a) {
            llvm::Value* row0 = b.CreateAdd(m0, ir);
            apanel = b.CreateGEP(fl, A, b.CreateAdd(a_off, b.CreateAdd(b.CreateMul(row0, lda), pc)));
            a_row = lda;
            a_col = kb.i64c(1);
            a_rows = b.CreateSub(rows, ir);
          } else if (copied_a) {
            apanel = b.CreateGEP(fl, ap, b.CreateMul(ir, kc));
            apanel2 = b.CreateGEP(fl, ap2, b.CreateMul(ir, kc));
            a_row = kc;
            a_col = kb.i64c(1);
            a_rows = b.CreateSub(rows, ir);
          }
          llvm::Value* c = b.CreateGEP(fl, cp, b.CreateAdd(b.CreateMul(ir, nc), jr));
          b.CreateCall(micro, {apanel, bpanel, c, nc, kc, first, apanel2, bpanel2, a_row,
                               a_col, a_rows});
        });
      });
    });

    b.CreateRet(cp);
  });
  return f;
}

}  // namespace

WorkShape build_matmul(KernelBuilder& kb) {
  const KernelPlan& k = kb.kernel();
  const MatmulShape& s = k.shape;
  const MatmulExtents& e = k.extents;
  const CpuFacts& facts = kb.facts();
  const ir::Node& mm = kb.graph().node(k.group.anchor);
  const GemmVariant variant{s.path, kb.graph().node(mm.operands[0]).type.dtype,
                            kb.graph().node(mm.operands[1]).type.dtype, s.a_k_contiguous,
                            s.b_k_contiguous};
  const bool x3 = s.path.numerics == Numerics::tf32x3;
  const int64_t mr = mr_for(s.path, facts), nr = facts.nr;
  // A work item's block: a short M in one block (so that B's panels are packed once per item),
  // else blocks of up to 2 MC rows; NC columns, narrowed (to 2 NR at least) until there are 4
  // items for threads to share. At the bucket's upper bounds for a symbolic graph.
  const int64_t blocks_m_hi = (e.m.hi + 2 * facts.mc - 1) / (2 * facts.mc);
  const int64_t mc = ((e.m.hi + blocks_m_hi - 1) / blocks_m_hi + mr - 1) / mr * mr;
  const int64_t kcap = facts.kc;
  int64_t nc = facts.nc / nr * nr;
  while (nc > 2 * nr && e.batch.hi * blocks_m_hi * ((e.n.hi + nc - 1) / nc) < 4) nc -= nr;
  llvm::Function* gemm = gemm_block(kb, variant);
  llvm::IRBuilder<>& b = kb.b();
  llvm::Type* fl = kb.f32();

  llvm::Value* M = kb.extent(e.m);
  llvm::Value* N = kb.extent(e.n);
  llvm::Value* K = kb.extent(e.k);
  llvm::Value* lda = kb.extent(e.lda);
  llvm::Value* ldb = kb.extent(e.ldb);
  llvm::Value* inner = kb.extent(e.inner_batch);
  llvm::Value* blocks_m = b.CreateUDiv(b.CreateAdd(M, kb.i64c(mc - 1)), kb.i64c(mc));
  llvm::Value* blocks_n = b.CreateUDiv(b.CreateAdd(N, kb.i64c(nc - 1)), kb.i64c(nc));
  int rank = mm.type.shape.rank();
  llvm::Value* zero = kb.i64c(0);
  auto min = [&](llvm::Value* x, llvm::Value* y) { return b.CreateSelect(b.CreateICmpSLT(x, y), x, y); };

  kb.loop(kb.begin(), kb.end(), 1, [&](llvm::Value* t) {
    llvm::Value* jb = b.CreateURem(t, blocks_n);
    llvm::Value* rest = b.CreateUDiv(t, blocks_n);
    llvm::Value* ib = b.CreateURem(rest, blocks_m);
    llvm::Value* bz = b.CreateUDiv(rest, blocks_m);
    llvm::Value* m0 = b.CreateMul(ib, kb.i64c(mc));
    llvm::Value* n0 = b.CreateMul(jb, kb.i64c(nc));
    llvm::Value* rows = min(kb.i64c(mc), b.CreateSub(M, m0));
    llvm::Value* cols = min(kb.i64c(nc), b.CreateSub(N, n0));
    // The batch's operands (a 4-D result's batch is (bz / inner, bz % inner)).
    llvm::Value* b_index = rank == 4 ? b.CreateURem(bz, inner) : bz;
    auto offset = [&](const Extent& outer, const Extent& in) {
      llvm::Value* o = zero;
      if (in.coef) o = b.CreateAdd(o, b.CreateMul(b_index, kb.extent(in)));
      if (outer.coef) o = b.CreateAdd(o, b.CreateMul(b.CreateUDiv(bz, inner), kb.extent(outer)));
      return o;
    };
    std::vector<llvm::Value*> batch;  // a 5-D or 6-D result's batch coordinates
    if (e.per_dim()) batch = coords_of(kb, e.batch_dims, bz);
    llvm::Value* a_off = e.per_dim() ? batch_offset(kb, batch, e.a_dim_strides)
                                     : offset(e.a_outer_stride, e.a_batch_stride);
    llvm::Value* b_off = e.per_dim() ? batch_offset(kb, batch, e.b_dim_strides)
                                     : offset(e.b_outer_stride, e.b_batch_stride);
    llvm::Value* cp = b.CreateCall(
        gemm, {kb.param_of(mm.operands[0]), a_off, lda, kb.param_of(mm.operands[1]), b_off, ldb,
               m0, n0, rows, cols, M, N, K, kb.i64c(mc), kb.i64c(nc), kb.scratch()});

    // The epilogue on the accumulators, element (bz, m, n) of the result.
    ir::NodeId root = k.group.root;
    kb.loop(zero, rows, 1, [&](llvm::Value* i) {
      kb.loop(zero, cols, 1, [&](llvm::Value* j) {
        llvm::Value* m = b.CreateAdd(m0, i);
        llvm::Value* n = b.CreateAdd(n0, j);
        llvm::Value* acc = b.CreateLoad(fl, b.CreateGEP(fl, cp, b.CreateAdd(b.CreateMul(i, kb.i64c(nc)), j)));
        Point point{root, {}, nullptr};
        llvm::Value* row = rank >= 3 ? b.CreateAdd(b.CreateMul(bz, M), m) : m;
        point.linear = b.CreateAdd(b.CreateMul(row, N), n);
        if (e.per_dim()) {
          point.coords = batch;
          point.coords.push_back(m);
          point.coords.push_back(n);
        }
        if (rank == 4) point.coords = {b.CreateUDiv(bz, inner), b.CreateURem(bz, inner), m, n};
        if (rank == 3) point.coords = {bz, m, n};
        if (rank == 2) point.coords = {m, n};
        llvm::Value* linear = point.linear;
        kb.store_outputs(group_value(kb, root, std::move(point), acc), linear);
      });
    });
  });
  return {{e.batch.term(), e.m.term(mc), e.n.term(nc)},
          static_cast<uint64_t>((mc * kcap + kcap * nc) * (x3 ? 2 : 1) + mc * nc)};
}

}  // namespace kiln::compiler::cpu::detail
