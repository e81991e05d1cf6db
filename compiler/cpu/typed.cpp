// The CPU target's typed layer: integer and bool values, comparisons, logical ops, integer
// arithmetic (LLVM's add, sub and mul wrap) and casts between every pair of dtypes.
#include "compiler/cpu/codegen_internal.h"

#include <cassert>

namespace kiln::compiler::cpu::detail {

llvm::Type* KernelBuilder::value_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32:
    case ir::DType::f16:
    case ir::DType::bf16:
      return f32();
    case ir::DType::i32:
      return m_b.getInt32Ty();
    case ir::DType::i64:
      return m_b.getInt64Ty();
    case ir::DType::boolean:
      return m_b.getInt1Ty();
  }
  return f32();
}

llvm::Value* KernelBuilder::load_value(ir::DType dtype, llvm::Value* base, llvm::Value* index) {
  if (ir::is_float(dtype)) return load_float(dtype, base, index);
  if (dtype == ir::DType::boolean) {
    llvm::Value* byte = m_b.CreateLoad(m_b.getInt8Ty(), m_b.CreateGEP(m_b.getInt8Ty(), base, index));
    return m_b.CreateICmpNE(byte, m_b.getInt8(0));  // any nonzero byte reads as true
  }
  llvm::Type* t = value_type(dtype);
  return m_b.CreateLoad(t, m_b.CreateGEP(t, base, index));
}

void KernelBuilder::store_value(ir::DType dtype, llvm::Value* base, llvm::Value* index,
                                llvm::Value* v) {
  if (ir::is_float(dtype)) {
    store_float(dtype, base, index, v);
    return;
  }
  if (dtype == ir::DType::boolean) {
    m_b.CreateStore(m_b.CreateZExt(v, m_b.getInt8Ty()), m_b.CreateGEP(m_b.getInt8Ty(), base, index));
    return;
  }
  m_b.CreateStore(v, m_b.CreateGEP(value_type(dtype), base, index));
}

llvm::Value* KernelBuilder::typed_literal(ir::DType dtype, double value) {
  if (ir::is_float(dtype)) return f32c(value);
  if (dtype == ir::DType::boolean) return m_b.getInt1(value != 0.0);
  return llvm::ConstantInt::get(value_type(dtype), static_cast<uint64_t>(static_cast<int64_t>(value)),
                                true);
}

llvm::Value* KernelBuilder::exact_binary(ir::OpKind kind, ir::DType dtype, llvm::Value* a,
                                         llvm::Value* c) {
  using P = llvm::CmpInst::Predicate;
  bool fl = ir::is_float(dtype), b1 = dtype == ir::DType::boolean;
  // Float comparisons are ordered (false with a NaN) but ne, which is true; bool compares
  // unsigned (true > false).
  auto cmp = [&](P f, P i, P u) { return fl ? m_b.CreateFCmp(f, a, c) : m_b.CreateICmp(b1 ? u : i, a, c); };
  if (kind == ir::OpKind::eq) return cmp(P::FCMP_OEQ, P::ICMP_EQ, P::ICMP_EQ);
  if (kind == ir::OpKind::ne) return cmp(P::FCMP_UNE, P::ICMP_NE, P::ICMP_NE);
  if (kind == ir::OpKind::lt) return cmp(P::FCMP_OLT, P::ICMP_SLT, P::ICMP_ULT);
  if (kind == ir::OpKind::le) return cmp(P::FCMP_OLE, P::ICMP_SLE, P::ICMP_ULE);
  if (kind == ir::OpKind::gt) return cmp(P::FCMP_OGT, P::ICMP_SGT, P::ICMP_UGT);
  if (kind == ir::OpKind::ge) return cmp(P::FCMP_OGE, P::ICMP_SGE, P::ICMP_UGE);
  if (kind == ir::OpKind::logical_and) return m_b.CreateAnd(a, c);
  if (kind == ir::OpKind::logical_or) return m_b.CreateOr(a, c);
  if (kind == ir::OpKind::add) return m_b.CreateAdd(a, c);
  if (kind == ir::OpKind::sub) return m_b.CreateSub(a, c);
  if (kind == ir::OpKind::mul) return m_b.CreateMul(a, c);
  if (kind == ir::OpKind::maximum) return m_b.CreateSelect(m_b.CreateICmpSGT(a, c), a, c);
  if (kind == ir::OpKind::floor_divide || kind == ir::OpKind::remainder) {
    // No division by 0 or of the smallest value by -1 (LLVM's sdiv and srem are undefined
    // there, and x86 traps): those divide by 1, then 0 for a zero divisor, the wrapped negation
    // and remainder 0 for -1; else the truncated quotient less one (the remainder plus c) where
    // the remainder is nonzero and of the other sign than c.
    llvm::Type* t = value_type(dtype);
    llvm::Value* zero = llvm::ConstantInt::get(t, 0);
    llvm::Value* by_zero = m_b.CreateICmpEQ(c, zero);
    llvm::Value* by_minus_one = m_b.CreateICmpEQ(c, llvm::ConstantInt::get(t, -1, true));
    llvm::Value* safe = m_b.CreateSelect(m_b.CreateOr(by_zero, by_minus_one),
                                         llvm::ConstantInt::get(t, 1), c);
    llvm::Value* r = m_b.CreateSRem(a, safe);
    llvm::Value* adjust = m_b.CreateAnd(
        m_b.CreateICmpNE(r, zero),
        m_b.CreateICmpNE(m_b.CreateICmpSLT(r, zero), m_b.CreateICmpSLT(c, zero)));
    llvm::Value* result;
    llvm::Value* special;
    if (kind == ir::OpKind::floor_divide) {
      llvm::Value* q = m_b.CreateSDiv(a, safe);
      result = m_b.CreateSub(q, m_b.CreateZExt(adjust, t));
      special = m_b.CreateSelect(by_zero, zero, m_b.CreateSub(zero, a));
    } else {
      result = m_b.CreateSelect(adjust, m_b.CreateAdd(r, c), r);
      special = zero;
    }
    return m_b.CreateSelect(m_b.CreateOr(by_zero, by_minus_one), special, result);
  }
  assert(kind == ir::OpKind::minimum);
  return m_b.CreateSelect(m_b.CreateICmpSLT(a, c), a, c);
}

llvm::Value* KernelBuilder::exact_unary(ir::OpKind kind, ir::DType dtype, llvm::Value* x) {
  if (kind == ir::OpKind::logical_not) return m_b.CreateNot(x);
  llvm::Value* negated = m_b.CreateSub(llvm::ConstantInt::get(value_type(dtype), 0), x);
  if (kind == ir::OpKind::neg) return negated;
  assert(kind == ir::OpKind::abs);
  return m_b.CreateSelect(m_b.CreateICmpSLT(x, llvm::ConstantInt::get(value_type(dtype), 0)),
                          negated, x);
}

llvm::Value* KernelBuilder::cast_value(ir::DType from, ir::DType to, llvm::Value* v) {
  if (to == ir::DType::boolean) {
    if (ir::is_float(from)) return m_b.CreateFCmpUNE(v, f32c(0.0));  // NaN: true
    if (from == ir::DType::boolean) return v;
    return m_b.CreateICmpNE(v, llvm::ConstantInt::get(value_type(from), 0));
  }
  if (ir::is_float(to)) {
    if (ir::is_float(from)) return v;  // round_to rounds it
    if (from == ir::DType::boolean) return m_b.CreateUIToFP(v, f32());
    return m_b.CreateSIToFP(v, f32());
  }
  llvm::Type* t = value_type(to);
  if (ir::is_float(from)) {
    // Toward zero, saturated, NaN -> 0.
    return m_b.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {t, f32()}, {v});
  }
  if (from == ir::DType::boolean) return m_b.CreateZExt(v, t);
  return m_b.CreateSExtOrTrunc(v, t);  // i32 -> i64 widens, i64 -> i32 keeps the low bits
}

}  // namespace kiln::compiler::cpu::detail
