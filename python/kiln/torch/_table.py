"""The ATen -> kiln op table, the Python twin of ir/ops.def: one lowering per ATen op.

A lowering takes the lowering context and an FX node and returns the node's kiln value: an
expression (`Expr`), a value it shares with an operand (`Alias`), or a scalar constant (`Const`,
written as a literal where it is used). It raises `Unsupported(reason)` for a use kiln cannot
express; that node then runs in PyTorch. The context (kiln/torch/_lower.py) renders operands
(`cx.ref`), shapes (`cx.shape`) and dtypes (`cx.dtype`) and raises Unsupported itself for what
kiln cannot hold (a float64 tensor, a dim `s0*s1`).
"""
from __future__ import annotations

import itertools
import math
import re
import operator
import struct
from dataclasses import dataclass
from typing import Any, Callable

import sympy
import torch
from torch.fx import Node
from torch.utils._sympy.value_ranges import bound_sympy

aten = torch.ops.aten


class Unsupported(Exception):
    """A node kiln cannot run as asked: the reason is listed in Program.fallbacks."""


@dataclass(frozen=True)
class Expr:
    text: str  # a kiln expression: `matmul(a, b, transpose_b=true)`


@dataclass(frozen=True)
class Alias:
    node: Any  # the FX node (or argument) whose value this node's value is


@dataclass(frozen=True)
class Const:
    value: float | int | bool
    dtype: str  # kiln dtype name


@dataclass(frozen=True)
class Tuple0:
    """A tuple-valued op of which only element 0 is used: the expression is element 0."""

    text: str


@dataclass(frozen=True)
class Pieces:
    """A split, chunk or unbind: a list, not a tensor. No kiln value of its own: each getitem of
    it is a slice of the split tensor."""

    node: Any


TABLE: dict[Any, Callable] = {}
# kiln's float dtypes, and its half ones
_FLOAT = ("f32", "f16", "bf16")
_HALF = ("f16", "bf16")
# Lowerings whose work is per element (made by _binary, _unary, _logical; listed by name below).
_ROW_WISE: set = set()

def lowering(*ops):
    def register(fn):
        for op in ops:
            TABLE[op] = fn
        return fn
    return register


def _arg(node: Node, i: int, name: str, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _lit(x) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            raise Unsupported("a NaN literal")
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return repr(x)
    raise Unsupported(f"a literal of type {type(x).__name__}")


def skip_identity(cx, arg):
    """The node an identity chain (same-dtype casts, clones, aliases) starts from."""
    while isinstance(arg, Node) and arg.op == "call_function":
        low = TABLE.get(arg.target)
        if low not in (_identity, _to_dtype):
            return arg
        src = arg.args[0]
        if not isinstance(src, Node) or cx.dtype_of(src) != cx.dtype_of(arg):
            return arg
        arg = src
    return arg


# -- elementwise ---------------------------------------------------------------------------------

def _binary(kiln_op: str, compare: bool = False):
    def lower(cx, node):
        a, b = node.args[0], node.args[1]
        if compare:
            work = cx.promoted(a, b)
        else:
            work = cx.dtype_of(node)
        ta, tb = cx.ref(a, work), cx.ref(b, work)
        return Expr(f"{kiln_op}({_left_operand(ta, tb, work)}, {tb})")
    _ROW_WISE.add(lower)
    return lower


for _op, _k in [(aten.add, "add"), (aten.sub, "sub"), (aten.mul, "mul"), (aten.div, "div"),
                (aten.maximum, "maximum"), (aten.minimum, "minimum")]:
    for _ov in ("Tensor", "Scalar", "default"):
        if hasattr(_op, _ov):
            TABLE[getattr(_op, _ov)] = _binary(_k)
TABLE[aten.max.other] = _binary("maximum")  # torch.max(a, b): maximum, NaN included
TABLE[aten.min.other] = _binary("minimum")
for _op, _k in [(aten.eq, "eq"), (aten.ne, "ne"), (aten.lt, "lt"), (aten.le, "le"),
                (aten.gt, "gt"), (aten.ge, "ge")]:
    TABLE[_op.Tensor] = _binary(_k, compare=True)
    TABLE[_op.Scalar] = _binary(_k, compare=True)


def is_size(val) -> bool:
    """Whether a node's value is an integer size (a SymInt, or an int torch specialised)."""
    return isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool)


def _arith(cx, node, kiln_op: str, a, b, alpha=None) -> Expr:
    """kiln_op(a, b) in the node's dtype. A half tensor's op is computed as PyTorch's CPU kernels
    compute it: with a size or an `alpha`, in f32 and rounded once (`h / (B * S)` past 65504 is
    no inf in f16); `mul` and `div` take a size as it is, `add` and `sub` take a number or a size
    rounded to the half type first (2049 is 2048 in f16), times `alpha` (rounded to the half
    type too) in f32. `alpha` is the node's keyword where not given."""
    work = cx.dtype_of(node)
    alpha = node.kwargs.get("alpha", 1) if alpha is None else alpha
    half = work in _HALF and kiln_op != "pow"
    wide = half and (alpha != 1 or any(
        isinstance(x, Node) and is_size(x.meta.get("val")) for x in (a, b)))
    if half and alpha != 1:  # PyTorch's kernel takes alpha in the tensor's type
        alpha = float(torch.tensor(float(alpha), dtype=_TORCH_DTYPES[work]))

    def number(x):  # a Python number an add or sub of a half tensor takes: in its type
        if half and kiln_op in ("add", "sub") and isinstance(x, (int, float)) and \
                not isinstance(x, bool):
            return float(torch.tensor(float(x), dtype=_TORCH_DTYPES[work]))
        return None

    def operand(x):
        if number(x) is not None:
            return _lit(number(x))
        if not wide:
            return cx.ref(x, work)
        if kiln_op in ("add", "sub") and isinstance(x, Node) and is_size(x.meta.get("val")):
            return f"cast({cx.ref(x, work)}, to=f32)"
        return cx.ref(x, "f32")
    if alpha == 1:
        right = operand(b)
    elif number(b) is not None:  # alpha times the number, in f32 as PyTorch's kernel: one literal
        right = _lit(float(torch.tensor(number(b)) * torch.tensor(float(alpha))))
    else:
        right = f"mul({operand(b)}, {_lit(alpha)})"
    left = _left_operand(operand(a), right, "f32" if wide else work)
    text = f"{kiln_op}({left}, {right})"
    return Expr(f"cast({text}, to={work})" if wide else text)


_TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


@lowering(aten.add.Tensor, aten.sub.Tensor, aten.add.Scalar, aten.sub.Scalar,
          aten.subtract.Tensor, aten.subtract.Scalar)
def _add_sub(cx, node):
    kiln_op = "add" if node.target in (aten.add.Tensor, aten.add.Scalar) else "sub"
    return _arith(cx, node, kiln_op, node.args[0], node.args[1])


@lowering(aten.mul.Tensor, aten.multiply.Tensor)
def _mul(cx, node):
    norm = _rms_norm(cx, node)
    if norm is not None:
        return norm
    return _arith(cx, node, "mul", node.args[0], node.args[1])


@lowering(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode,
          aten.true_divide.Tensor, aten.true_divide.Scalar, aten.divide.Tensor,
          aten.divide.Scalar, aten.divide.Tensor_mode, aten.divide.Scalar_mode)
def _div(cx, node):
    mode = node.kwargs.get("rounding_mode")
    if mode is not None:
        return Expr(_rounded_quotient(cx, node, mode))
    return _arith(cx, node, "div", node.args[0], node.args[1])


@lowering(aten.sign.default)
def _sign(cx, node):
    """sign(x): 1 where x > 0, -1 where x < 0, else 0 (a NaN's and a -0.0's sign is +0, as
    PyTorch's); a bool is itself (SEW-D's relative positions)."""
    x, dtype = node.args[0], cx.dtype_of(node)
    if dtype == "bool":
        return Alias(x)
    zero = "0" if dtype in ("i32", "i64") else "0.0"
    xs = cx.let(cx.ref(x))
    return Expr(f"sub(cast(gt({xs}, {zero}), to={dtype}), cast(lt({xs}, {zero}), to={dtype}))")


@lowering(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(cx, node):
    """rsub(x, other, alpha): other - alpha * x (CANINE's `1 - mask`); rsub.Scalar takes
    alpha positionally too."""
    alpha = node.args[2] if len(node.args) > 2 else None
    return _arith(cx, node, "sub", node.args[1], node.args[0], alpha)


@lowering(aten.floor_divide.default, aten.floor_divide.Scalar)
def _floor_divide(cx, node):
    return Expr(_rounded_quotient(cx, node, "floor"))


@lowering(aten.remainder.Scalar, aten.remainder.Tensor, aten.remainder.Scalar_Tensor,
          aten.fmod.Scalar, aten.fmod.Tensor)
def _remainder(cx, node):
    """remainder of integers (the divisor's sign, as Python's %) is kiln's remainder; fmod (the
    dividend's sign) is a less b times the truncated quotient (_integer_quotient)."""
    a, b = node.args[0], node.args[1]
    dtype = cx.dtype_of(node)
    floor = node.target in (aten.remainder.Scalar, aten.remainder.Tensor,
                            aten.remainder.Scalar_Tensor)
    if dtype not in ("i32", "i64"):
        raise Unsupported(f"a {'remainder' if floor else 'fmod'} of {dtype} (kiln takes integer "
                          "ones)")
    if floor:
        left, right = _integer_operands(cx, node, a, b)
        return Expr(f"remainder({left}, {right})")
    quotient = _integer_quotient(cx, node, a, b, "trunc")
    return Expr(f"sub({cx.ref(a, dtype)}, mul({quotient}, {cx.ref(b, dtype)}))")


def _integer_operands(cx, node, a, b):
    """The kiln texts of integer division's operands in the node's dtype (a literal `a` made a
    tensor where `b` is one too). PyTorch raises on a zero divisor, where kiln's gives 0: a
    divisor that may be 0 (not a nonzero literal, nor bounded away from 0 by _int_range) is
    Unsupported."""
    dtype = cx.dtype_of(node)
    bounds = None if isinstance(b, bool) else _int_range(cx, b)
    lo, hi = _INT_RANGE[dtype]
    # The divisor as the node's dtype: an i64 one past i32's range would wrap, maybe to 0.
    if bounds is None or bounds[0] <= 0 <= bounds[1] or not lo <= bounds[0] <= bounds[1] <= hi:
        raise Unsupported("an integer division by a divisor that may be 0 (PyTorch raises)")
    right = cx.ref(b, dtype)
    return _left_operand(cx.ref(a, dtype), right, dtype), right


def _integer_quotient(cx, node, a, b, mode: str) -> str:
    """floor or trunc of a / b for integers, exact at any values (Llama 4's chunk of each
    position, `positions // 8192`; CANINE's hash buckets): kiln's floor_divide, plus one for
    the truncation where the division is inexact and a and b differ in sign."""
    left, right = _integer_operands(cx, node, a, b)
    if mode == "floor":
        return f"floor_divide({left}, {right})"
    dtype = cx.dtype_of(node)
    left, right = (x if _LITERAL.fullmatch(x) else cx.let(x) for x in (left, right))

    def negative(x: str) -> str:
        return ("true" if int(x) < 0 else "false") if _LITERAL.fullmatch(x) else f"lt({x}, 0)"

    differ = f"ne({negative(left)}, {negative(right)})"
    inexact = f"ne(remainder({left}, {right}), 0)"
    return (f"add(floor_divide({left}, {right}), "
            f"cast(logical_and({inexact}, {differ}), to={dtype}))")


def _rounded_quotient(cx, node, mode: str) -> str:
    """div(a, b, rounding_mode) of a float tensor by a number that is a power of two, positive
    or negative (DETR's sine positions, `torch.div(dim_t, 2, rounding_mode="floor")`): the
    quotient is exact (a subnormal `a` divided by more than 1 aside, which only the sign of a
    zero quotient tells), so its floor or trunc is PyTorch's, a zero result signed as `a / b`
    is. Of integers, _integer_quotient's."""
    a, b = node.args[0], node.args[1]
    dtype = cx.dtype_of(node)
    if mode not in ("floor", "trunc"):
        raise Unsupported(f"div with rounding_mode={mode!r}")
    if dtype in ("i32", "i64"):
        return _integer_quotient(cx, node, a, b, mode)
    if dtype not in _FLOAT:
        raise Unsupported(f"a {mode} division into {dtype}")
    if isinstance(b, bool) or not isinstance(b, (int, float)) or b == 0 or \
            not math.isfinite(b) or math.frexp(abs(b))[0] != 0.5 or \
            not 2.0**-149 <= abs(b) <= 2.0**127:
        raise Unsupported(f"a {mode} division by other than a power of two f32 holds")
    a = cx.let(_as_tensor(cx.ref(a, 'f32'), 'f32'))
    quotient = cx.let(f"div({a}, {_lit(float(b))})")
    text = _whole(cx, quotient, mode)
    if mode == "floor":
        # PyTorch floors (a - fmod(a, b)) / b: an infinite `a` is NaN (inf - inf here), and an
        # `a` of the other sign than b whose quotient rounded to zero (a subnormal) is -1.
        other_sign = f"{'lt' if b > 0 else 'gt'}({a}, 0.0)"
        text = (f"where(eq(abs({a}), inf), sub({quotient}, {quotient}), "
                f"where(logical_and({other_sign}, eq({quotient}, 0.0)), -1.0, {text}))")
    return text if dtype == "f32" else f"cast({text}, to={dtype})"


def _whole(cx, x: str, mode: str) -> str:
    """floor, ceil or trunc of an f32 value `x` (a name), exactly: a cast to i64 and back
    truncates toward zero, floor takes one less where that went up; past 2^23 every f32 is a
    whole number, and it, an infinity or a NaN is itself; a zero result takes `x`'s sign."""
    if mode == "ceil":
        return f"neg({_whole(cx, cx.let(f'neg({x})'), 'floor')})"
    whole = cx.let(f"cast(cast({x}, to=i64), to=f32)")
    if mode == "floor":
        whole = cx.let(f"where(gt({whole}, {x}), sub({whole}, 1.0), {whole})")
    signed = f"where(eq({whole}, 0.0), mul({x}, 0.0), {whole})"
    return f"where(logical_or(ge(abs({x}), 8388608.0), ne({x}, {x})), {x}, {signed})"


def _rounding(mode: str):
    def lower(cx, node):
        dtype = cx.dtype_of(node)
        if dtype not in _FLOAT:
            raise Unsupported(f"{mode} of {dtype} (kiln rounds floats)")
        text = _whole(cx, cx.let(_as_tensor(cx.ref(node.args[0], "f32"), "f32")), mode)
        return Expr(text if dtype == "f32" else f"cast({text}, to={dtype})")
    _ROW_WISE.add(lower)
    return lower


for _op, _k in [(aten.floor, "floor"), (aten.ceil, "ceil"), (aten.trunc, "trunc")]:
    TABLE[_op.default] = _rounding(_k)


@lowering(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(cx, node):
    """x ** e as PyTorch's CPU kernel computes it for a number e: in f32 and bf16, e of 0.5, -0.5
    and -1 are `sqrt`, `rsqrt` and a reciprocal (so -inf ** 0.5 is NaN and -0.0 ** -0.5 is -inf);
    then in bf16 and f16 e is rounded to the tensor's type (1.7 is 1.703125 in bf16); then in f32
    and bf16 an e of 2, 3 or -2 (2.995 rounded to bf16 is 3) is products, each rounded."""
    x, e = node.args[0], node.args[1]
    work = cx.dtype_of(node)
    if node.target != aten.pow.Tensor_Scalar or not isinstance(e, (int, float)) or \
            isinstance(e, bool) or work not in _FLOAT:
        return _arith(cx, node, "pow", x, e)
    if work in ("f32", "bf16") and float(e) in _POW_ROOTS:  # the exponent as given
        return Expr(_POW_ROOTS[float(e)].format(v=cx.ref(x, work)))
    if work in _HALF:
        e = float(torch.tensor(float(e), dtype=_TORCH_DTYPES[work]))
    if work in ("f32", "bf16") and float(e) in _POW_PRODUCTS:  # the exponent rounded
        return Expr(_POW_PRODUCTS[float(e)].format(v=cx.ref(x, work)))
    return _arith(cx, node, "pow", x, e)


_POW_ROOTS = {0.5: "sqrt({v})", -0.5: "rsqrt({v})", -1.0: "div(1.0, {v})"}
_POW_PRODUCTS = {2.0: "mul({v}, {v})", 3.0: "mul(mul({v}, {v}), {v})",
                 -2.0: "div(1.0, mul({v}, {v}))"}


def _unary(kiln_op: str):
    def lower(cx, node):
        x = cx.ref(node.args[0], cx.dtype_of(node))
        return Expr(f"{kiln_op}({_as_tensor(x, cx.dtype_of(node))})")
    _ROW_WISE.add(lower)
    return lower


for _op, _k in [(aten.relu, "relu"), (aten.silu, "silu"), (aten.sigmoid, "sigmoid"),
                (aten.tanh, "tanh"), (aten.exp, "exp"), (aten.neg, "neg"), (aten.sqrt, "sqrt"),
                (aten.rsqrt, "rsqrt"), (aten.abs, "abs"), (aten.cos, "cos"), (aten.sin, "sin"),
                (aten.erf, "erf"), (aten.log, "log")]:
    TABLE[_op.default] = _unary(_k)


@lowering(aten.square.default)
def _square(cx, node):
    x = cx.ref(node.args[0], cx.dtype_of(node))
    return Expr(f"mul({x}, {x})")


@lowering(aten.reciprocal.default)
def _reciprocal(cx, node):
    return Expr(f"div(1.0, {cx.ref(node.args[0], cx.dtype_of(node))})")


@lowering(aten.gelu.default)
def _gelu(cx, node):
    approximate = node.kwargs.get("approximate", _arg(node, 1, "approximate", "none"))
    x = cx.ref(node.args[0], cx.dtype_of(node))
    if approximate == "tanh":
        return Expr(f'gelu({x}, approximate="tanh")')
    if approximate != "none":
        raise Unsupported(f"gelu approximate={approximate!r}")
    return Expr(f"gelu({x})")


@lowering(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default,
          aten.clamp.Tensor, aten.clamp_min.Tensor, aten.clamp_max.Tensor)
def _clamp(cx, node):
    """clamp, clamp_min and clamp_max, the bounds numbers or tensors (PhiMoE's router clamps
    |scores| to their row's max)."""
    work = cx.dtype_of(node)
    if node.target in (aten.clamp_min.default, aten.clamp_min.Tensor):
        lo, hi = node.args[1], None
    elif node.target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        lo, hi = None, node.args[1]
    else:
        lo, hi = _arg(node, 1, "min"), _arg(node, 2, "max")
    return Expr(_clamped(cx.ref(node.args[0], work), None if lo is None else cx.ref(lo, work),
                         None if hi is None else cx.ref(hi, work)))


def _clamped(x: str, lo: str | None, hi: str | None) -> str:
    """x clamped to [lo, hi] as PyTorch's clamp: NaN stays NaN, and x is kept where it equals a
    bound (-0.0 at a bound of 0 stays -0.0): by where for a literal bound; by maximum and
    minimum for a tensor one (a NaN bound wins, as in PyTorch), x where it equals the bound."""
    if lo is not None:
        x = f"where(lt({x}, {lo}), {lo}, {x})" if _is_literal(lo) else \
            f"where(eq({x}, {lo}), {x}, maximum({x}, {lo}))"
    if hi is not None:
        x = f"where(gt({x}, {hi}), {hi}, {x})" if _is_literal(hi) else \
            f"where(eq({x}, {hi}), {x}, minimum({x}, {hi}))"
    return x


def _f32_of(cx, node, what: str, of=None):
    """(the node's float dtype, or `of`'s, and its operand 0 in f32): a half type's activation
    is computed in f32 and rounded once, as PyTorch's CPU kernels compute it."""
    out = cx.dtype_of(node if of is None else of)
    if out not in _FLOAT:
        raise Unsupported(f"{what} of {out}")
    return out, _as_tensor(cx.ref(node.args[0], "f32"), "f32")


def _rounded(text: str, out: str) -> Expr:
    return Expr(text if out == "f32" else f"cast({text}, to={out})")


def _scalar_arg(node, i: int, name: str, default) -> float:
    """A scalar argument as the f32 PyTorch's kernels take it in; Unsupported for a tensor."""
    v = _arg(node, i, name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Unsupported(f"{node.target} with {name} that is not a number")
    return float(torch.tensor(float(v), dtype=torch.float32))


def _log1p_of(e: str) -> str:
    """log(1 + e) within a few ulps for small e too (Goldberg's: log(u) * (e / (u - 1)) with u
    = 1 + e rounded; e itself where u is 1, u where it is inf), as PyTorch's log1p."""
    u = f"add({e}, 1.0)"
    return f"where(eq({u}, 1.0), {e}, where(eq({u}, inf), {u}, " \
           f"mul(log({u}), div({e}, sub({u}, 1.0)))))"


def _expm1_of(x: str) -> str:
    """exp(x) - 1 within a few ulps near 0 too (Kahan's: (u - 1) * (x / log(u)) with u = exp(x);
    x where u is 1, -1 where u - 1 is, u where it is inf), as PyTorch's expm1."""
    u = f"exp({x})"
    return f"where(eq({u}, 1.0), {x}, where(eq(sub({u}, 1.0), -1.0), -1.0, " \
           f"where(eq({u}, inf), {u}, mul(sub({u}, 1.0), div({x}, log({u}))))))"


@lowering(aten.log1p.default, aten.expm1.default)
def _log1p_expm1(cx, node):
    out, x = _f32_of(cx, node, str(node.target))
    return _rounded((_log1p_of if node.target is aten.log1p.default else _expm1_of)(x), out)


@lowering(aten.leaky_relu.default)
def _leaky_relu(cx, node):
    """x > 0 ? x : x * slope, as PyTorch's kernel (NaN and -0.0 kept)."""
    out, x = _f32_of(cx, node, "leaky_relu")
    slope = _scalar_arg(node, 1, "negative_slope", 0.01)
    return _rounded(f"where(gt({x}, 0.0), {x}, mul({x}, {_lit(slope)}))", out)


@lowering(aten.hardtanh.default, aten.relu6.default)
def _hardtanh(cx, node):
    """hardtanh (relu6: MobileNetV2's) is PyTorch's clamp (NaN kept, and -0.0 at a bound of 0)."""
    out = cx.dtype_of(node)
    if out not in _FLOAT:
        raise Unsupported(f"hardtanh of {out}")
    lo, hi = (0.0, 6.0) if node.target is aten.relu6.default else \
        (_scalar_arg(node, 1, "min_val", -1.0), _scalar_arg(node, 2, "max_val", 1.0))
    return Expr(_clamped(_as_tensor(cx.ref(node.args[0], out), out), _lit(lo), _lit(hi)))


@lowering(aten.hardsigmoid.default, aten.hardswish.default)
def _hard_sigmoid_swish(cx, node):
    """hardsigmoid min(max(x + 3, 0), 6) / 6 and hardswish x * that / 6, in PyTorch's order
    (MobileNetV3's)."""
    out, x = _f32_of(cx, node, str(node.target))
    gate = f"minimum(maximum(add({x}, 3.0), 0.0), 6.0)"
    text = f"div({gate}, 6.0)" if node.target is aten.hardsigmoid.default else \
        f"div(mul({x}, {gate}), 6.0)"
    return _rounded(text, out)


@lowering(aten.elu.default, aten.selu.default, aten.celu.default)
def _elu(cx, node):
    """elu (selu and celu are elus, as PyTorch defines them): x > 0 ? x * scale :
    expm1(x * input_scale) * alpha * scale."""
    out, x = _f32_of(cx, node, str(node.target))
    if node.target is aten.selu.default:  # PyTorch's constants
        alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
        inner = 1.0
    elif node.target is aten.celu.default:
        alpha = _scalar_arg(node, 1, "alpha", 1.0)
        if alpha == 0:
            raise Unsupported("celu with alpha 0 (PyTorch raises)")
        scale, inner = 1.0, 1.0 / float(_arg(node, 1, "alpha", 1.0))
    else:
        alpha, scale, inner = (_scalar_arg(node, i, k, 1.0) for i, k in
                               ((1, "alpha"), (2, "scale"), (3, "input_scale")))
    f32 = lambda v: float(torch.tensor(float(v), dtype=torch.float32))  # noqa: E731
    negative = f32(f32(alpha) * f32(scale))
    below = _expm1_of(f"mul({x}, {_lit(f32(inner))})")
    return _rounded(f"where(gt({x}, 0.0), mul({x}, {_lit(f32(scale))}), "
                    f"mul({below}, {_lit(negative)}))", out)


@lowering(aten.softplus.default)
def _softplus(cx, node):
    """x * beta > threshold ? x : log1p(exp(x * beta)) / beta, as PyTorch's kernel."""
    out, x = _f32_of(cx, node, "softplus")
    beta, threshold = _scalar_arg(node, 1, "beta", 1.0), _scalar_arg(node, 2, "threshold", 20.0)
    scaled = f"mul({x}, {_lit(beta)})"
    return _rounded(f"where(gt({scaled}, {_lit(threshold)}), {x}, "
                    f"div({_log1p_of(f'exp({scaled})')}, {_lit(beta)}))", out)


@lowering(aten.mish.default)
def _mish(cx, node):
    """x * tanh(log1p(exp(x))), as PyTorch's kernel."""
    out, x = _f32_of(cx, node, "mish")
    return _rounded(f"mul({x}, tanh({_log1p_of(f'exp({x})')}))", out)


@lowering(aten.log_sigmoid.default, aten.log_sigmoid_forward.default)
def _log_sigmoid(cx, node):
    """min(x, 0) - log1p(exp(-|x|)), as PyTorch's kernel (of log_sigmoid_forward's outputs, the
    value)."""
    forward = node.target is aten.log_sigmoid_forward.default
    if forward:
        cx.only_first_output(node)
    out, x = _f32_of(cx, node, "log_sigmoid", node.args[0] if forward else None)
    text = f"sub(minimum({x}, 0.0), {_log1p_of(f'exp(neg(abs({x})))')})"
    if forward:
        return Tuple0(text if out == "f32" else f"cast({text}, to={out})")
    return _rounded(text, out)


@lowering(aten.prelu.default, aten._prelu_kernel.default)
def _prelu(cx, node):
    """x > 0 ? x : weight * x, the weight (one value, or one a channel: dim 1, or dim 0 of a 1-D
    x) broadcast, as PyTorch's."""
    out, x = _f32_of(cx, node, "prelu")
    weight = node.args[1]
    rank, wshape = len(cx.meta(node.args[0]).shape), cx.meta(weight).shape
    if len(wshape) > 1 or any(cx.is_symbolic(d) for d in wshape):
        raise Unsupported("a prelu weight of that shape")
    w = cx.ref(weight, "f32")
    if node.target is aten.prelu.default and rank >= 2 and len(wshape) == 1 and \
            int(wshape[0]) != 1:
        w = f"reshape({w}, shape=[{int(wshape[0])}{', 1' * (rank - 2)}])"
    return _rounded(f"where(gt({x}, 0.0), {x}, mul({w}, {x}))", out)


@lowering(aten.glu.default)
def _glu(cx, node):
    """The first half along `dim` times the sigmoid of the second, as PyTorch's."""
    out, x = _f32_of(cx, node, "glu")
    shape = cx.meta(node.args[0]).shape
    dim = _arg(node, 1, "dim", -1)
    axis = dim - len(shape) if dim >= 0 else dim
    if cx.is_symbolic(shape[axis]) or int(shape[axis]) % 2:
        raise Unsupported("a glu along a symbolic dim or one of odd size (PyTorch raises)")
    half = int(shape[axis]) // 2
    a = f"slice({x}, axis={axis}, start=0, end={half})"
    b = f"slice({x}, axis={axis}, start={half}, end={2 * half})"
    return _rounded(f"mul({a}, sigmoid({b}))", out)


_ROW_WISE |= {_log1p_expm1, _leaky_relu, _hardtanh, _hard_sigmoid_swish, _elu, _softplus, _mish,
              _log_sigmoid}


def _logical(kiln_op: str):
    def lower(cx, node):
        if any(isinstance(a, Node) and cx.dtype_of(a) != "bool" for a in node.args):
            raise Unsupported(f"{node.target} on integers (kiln's logical ops take bool)")
        return Expr(f"{kiln_op}({', '.join(cx.ref(a, 'bool') for a in node.args)})")
    _ROW_WISE.add(lower)
    return lower


for _op, _k in [(aten.logical_and.default, "logical_and"), (aten.logical_or.default, "logical_or"),
                (aten.logical_not.default, "logical_not"),
                (aten.bitwise_and.Tensor, "logical_and"), (aten.bitwise_or.Tensor, "logical_or"),
                (aten.bitwise_not.default, "logical_not"),
                (aten.__and__.Tensor, "logical_and"), (aten.__or__.Tensor, "logical_or")]:
    TABLE[_op] = _logical(_k)


@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(cx, node):
    cond, a, b = node.args
    work = cx.dtype_of(node)
    c, ra, rb = cx.ref(cond, 'bool'), cx.ref(a, work), cx.ref(b, work)
    if work != "f32" and _is_literal(ra) and _is_literal(rb):
        # kiln gives a where of two literals f32: torch.where(c, 1, 0) is i64.
        if work in ("i32", "i64"):
            # b + c * (a - b) in the dtype, wrapping as it does: exact for every literal.
            try:
                va, vb = (int({"true": 1, "false": 0}.get(r, r)) for r in (ra, rb))
            except ValueError:
                raise Unsupported("a where of literals kiln cannot write as integers") from None
            bits = 32 if work == "i32" else 64
            diff = (va - vb + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1)
            return Expr(f"add(mul(cast({c}, to={work}), {diff}), {vb})")
        if work == "bool":
            raise Unsupported("a where of two bool literals")
        return Expr(f"cast(where({c}, {ra}, {rb}), to={work})")
    return Expr(f"where({c}, {ra}, {rb})")


def _is_literal(ref: str) -> bool:
    """Whether a kiln operand is a literal (what _lit writes) rather than a value."""
    return _LITERAL.fullmatch(ref) is not None


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(cx, node):
    x, mask, value = node.args
    work = cx.dtype_of(node)
    return Expr(f"where({cx.ref(mask, 'bool')}, {cx.ref(value, work)}, {cx.ref(x, work)})")


# -- casts, copies and constants -------------------------------------------------------------------

def _identity(cx, node):
    return Alias(node.args[0])


for _op in (aten.clone.default, aten.contiguous.default, aten.alias.default, aten.detach.default,
            aten.lift_fresh_copy.default, aten.lift_fresh.default):
    TABLE[_op] = _identity


@lowering(aten.dropout.default, aten.native_dropout.default, aten.feature_dropout.default)
def _dropout(cx, node):
    if _arg(node, 2, "train", False):
        raise Unsupported("dropout in training mode")
    return Alias(node.args[0])


def _to_dtype(cx, node):
    to = cx.dtype_of(node)
    src = node.args[0]
    if not isinstance(src, Node):
        raise Unsupported("a cast of a non-tensor")
    if cx.dtype_of(src) == to:
        return Alias(src)
    return Expr(f"cast({cx.ref(src)}, to={to})")


for _op in (aten.to.dtype, aten.to.device, aten.to.dtype_layout, aten._to_copy.default,
            aten.type_as.default, torch.ops.prims.convert_element_type.default):
    TABLE[_op] = _to_dtype


def _constant(value_of):
    """A tensor of one value: a literal where its shape is [], else that value in a 1-element
    tensor expanded to the shape (OPT's ones(B, S) mask, T5's full_like bucket bound)."""
    def lower(cx, node):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise Unsupported("a constant whose shape is not known")
        value = value_of(node)
        if isinstance(value, Node) and is_size(value.meta.get("val")):
            # torch.full(shape, S): the size as the graph computes it, or a fixed one's number
            size = value.meta["val"]
            expr = cx.expr(size) if isinstance(size, torch.SymInt) else sympy.Integer(size)
            if not expr.is_Integer:
                text = cx.ref(value, cx.dtype_of(node))
                return Expr(text if tuple(val.shape) == () else
                            f"expand({text}, shape={cx.shape(node)})")
            value = int(expr)
        dtype = cx.dtype_of(node)
        value = _number(value, dtype)
        if dtype in _TORCH_DTYPES and abs(value) < _ROUNDS_TO_INF[dtype]:
            # The tensor holds the value rounded to its type as torch rounds it (0.1 is
            # 0.0999755859375 in f16); past the type's range _filled refuses it, as PyTorch.
            value = float(torch.tensor(value, dtype=_TORCH_DTYPES[dtype]))
        if tuple(val.shape) == ():
            return Const(value, dtype)
        return Expr(_filled(value, dtype, cx.shape(node)))
    _CONSTANTS.add(lower)
    _CONSTANT_OF[lower] = value_of
    return lower


def _number(value, dtype: str):
    """A constant's value as a Python number of `dtype`'s kind."""
    if not isinstance(value, (bool, int, float)):
        raise Unsupported(f"a constant tensor of {type(value).__name__}")
    return bool(value) if dtype == "bool" else int(value) if dtype in ("i32", "i64") else \
        float(value)


# A literal's text as _lit writes it.
_LITERAL = re.compile(r"true|false|-?inf|-?[0-9][0-9.eE+-]*")


def _as_tensor(text: str, dtype: str) -> str:
    """An operand's kiln text, a literal (a constant of shape []) made a tensor of shape []
    holding it: an op of one operand, or of two literals, takes no literal alone."""
    if not _LITERAL.fullmatch(text):
        return text
    if dtype == "bool":
        value = text == "true" or (text != "false" and float(text) != 0)
    elif dtype in ("i32", "i64"):
        value = int(text)
    else:
        value = float(text)
    return f"reshape({_filled(value, dtype, '[1]')}, shape=[])"


def _left_operand(left: str, right: str, dtype: str) -> str:
    """A binary op's left operand text: where both are literals (two constants of shape []),
    the left one made a tensor of `dtype`, since a kiln op takes at most one literal."""
    if _LITERAL.fullmatch(left) and _LITERAL.fullmatch(right):
        return _as_tensor(left, dtype)
    return left


def _from_end(ids: str, rows) -> str:
    """Integer ids where a negative one counts from the end of `rows`, as PyTorch's indexing."""
    return f"where(lt({ids}, 0), add({ids}, {rows}), {ids})"


def _filled(value, dtype: str, shape: str) -> str:
    """A tensor of `shape` (kiln text) holding `value` (of the dtype's kind): the value in a
    1-element tensor, expanded."""
    if dtype == "bool":
        seed = f"{'eq' if value else 'ne'}(arange(1), 0)"
    elif dtype in ("i32", "i64"):
        seed = f"add(arange(1, dtype={dtype}), {_lit(value)})"
    elif not math.isinf(value) and abs(value) >= _ROUNDS_TO_INF[dtype]:
        # PyTorch refuses a value its dtype cannot hold ("cannot be converted ... without
        # overflow"); kiln would write inf.
        raise Unsupported(f"a {dtype} constant {value!r} past the type's range")
    else:
        # where() of two literals is an f32 tensor holding the value, -0.0 and inf included;
        # a half type takes it through one rounding only where f32 holds it exactly.
        seed = f"where(eq(arange(1), 0), {_lit(value)}, {_lit(value)})"
        if dtype != "f32":
            if not math.isinf(value) and not _f32_holds(value):
                raise Unsupported(f"a {dtype} constant {value!r} that f32 does not hold")
            seed = f"cast({seed}, to={dtype})"
    return f"expand({seed}, shape={shape})"


# The smallest magnitude each float type rounds to infinity: its largest value plus half a unit
# in the last place (a tie rounds to the even infinity).
_ROUNDS_TO_INF = {"f32": 2.0**128 - 2.0**103, "f16": 2.0**16 - 2.0**4, "bf16": 2.0**128 - 2.0**119}


def _f32_holds(value: float) -> bool:
    try:
        return struct.unpack("f", struct.pack("f", value))[0] == value
    except OverflowError:
        return False


_CONSTANTS: set = set()
_CONSTANT_OF: dict = {}  # each constant's lowering -> how it reads the value from its node
TABLE[aten.scalar_tensor.default] = _constant(lambda n: n.args[0])
TABLE[aten.new_ones.default] = _constant(lambda n: 1)
TABLE[aten.new_zeros.default] = _constant(lambda n: 0)
TABLE[aten.ones.default] = _constant(lambda n: 1)
TABLE[aten.zeros.default] = _constant(lambda n: 0)
TABLE[aten.full.default] = _constant(lambda n: n.args[1])
TABLE[aten.new_full.default] = _constant(lambda n: n.args[2])
TABLE[aten.ones_like.default] = _constant(lambda n: 1)
TABLE[aten.zeros_like.default] = _constant(lambda n: 0)
# An empty tensor's elements are whatever memory held: zeros are one such (DeepSeek-V3's keys,
# new_empty then copies into each half).
TABLE[aten.new_empty.default] = _constant(lambda n: 0)
TABLE[aten.empty_like.default] = _constant(lambda n: 0)
TABLE[aten.empty.memory_format] = _constant(lambda n: 0)
TABLE[aten.full_like.default] = _constant(lambda n: n.args[1])
TABLE[aten.fill.Scalar] = _constant(lambda n: n.args[1])  # x's shape and dtype, all value


@lowering(aten.fill.Tensor)
def _fill_tensor(cx, node):
    """x's shape and dtype, all the value of a 0-d tensor (MBart's `ids[:, 0] = start` at a
    batch of 1, where the start token is a squeezed gather)."""
    value = node.args[1]
    if not isinstance(value, Node) or cx.meta(value).dim() != 0:
        raise Unsupported("a fill by a tensor that is not 0-d")
    dtype = cx.dtype_of(node)
    text = cx.ref(value, dtype)
    if _is_literal(text):  # a constant's value
        number = {"true": True, "false": False}.get(text)
        if number is None:
            number = int(text) if dtype in ("i32", "i64") else float(text)
        if tuple(cx.meta(node).shape) == ():
            return Const(_number(number, dtype), dtype)
        return Expr(_filled(_number(number, dtype), dtype, cx.shape(node)))
    if tuple(cx.meta(node).shape) == ():
        return Expr(text) if cx.dtype_of(value) != dtype else Alias(value)
    return Expr(f"expand({text}, shape={cx.shape(node)})")


@lowering(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(cx, node):
    if node.target is aten.arange.default:
        start, end, step = 0, node.args[0], 1
    else:
        start, end = node.args[0], node.args[1]
        step = node.args[2] if len(node.args) > 2 else node.kwargs.get("step", 1)
    dtype = cx.dtype_of(node)
    if dtype not in ("i64", "i32", "f32"):
        raise Unsupported(f"arange of {dtype}")
    if dtype == "f32" and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                              for v in (start, end, step)) and \
            not all(isinstance(v, int) for v in (start, end, step)):
        return Expr(_fractional_arange(start, end, step))
    if start == 0 and step == 1:
        n = cx.size(end)
        return Expr(f"arange({n}, dtype={dtype})" if dtype != "i64" else f"arange({n})")
    # start + i * step (BLOOM's ALiBi powers): whole numbers, so each value is exact where
    # PyTorch's is; kiln's arange counts 0..n-1.
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step)):
        raise Unsupported("arange with a start or step that is not a whole number, or a "
                          "symbolic end (kiln's arange counts 0..n-1)")
    n = len(range(start, end, step))
    if n < 1:
        raise Unsupported("an empty arange")
    if dtype == "f32" and max(abs(start), abs(start + (n - 1) * step)) > 2**24:
        raise Unsupported("an f32 arange past 2^24")
    text = f"arange({n}, dtype={dtype})" if dtype != "i64" else f"arange({n})"
    if step != 1:
        text = f"mul({text}, {_lit(float(step) if dtype == 'f32' else step)})"
    if start != 0:
        text = f"add({text}, {_lit(float(start) if dtype == 'f32' else start)})"
    return Expr(text)


def _fractional_arange(start, end, step) -> str:
    """An f32 arange from `start` by `step` (numbers, one not whole: DINOv3's patch centres
    arange(0.5, H)) as arange(n) * step + start, where every value and every partial result is
    a multiple of one power of two within 2^24 of them: exact in f32, as PyTorch's values
    (computed in double, then rounded) are. Its count is PyTorch's, ceil((end - start) / step)."""
    def dyadic(v):  # k with v * 2^k whole, k <= 40
        v = float(v)
        if not math.isfinite(v):
            return None
        return next((k for k in range(41) if (v * 2**k).is_integer()), None)

    ks = [dyadic(v) for v in (start, step)]
    if None in ks or step == 0 or not math.isfinite(float(end)) or \
            not (_f32_holds(float(start)) and _f32_holds(float(step))):
        raise Unsupported(f"an f32 arange({start}, {end}, {step}) whose values f32 may round")
    n = math.ceil((float(end) - float(start)) / float(step))
    if n < 1:
        raise Unsupported("an empty arange")
    unit = 2.0**max(ks)
    if (abs(float(start)) + (n - 1) * abs(float(step))) * unit > 2**24:
        raise Unsupported(f"an f32 arange({start}, {end}, {step}) whose values f32 may round")
    text = f"arange({n}, dtype=f32)"
    if step != 1:
        text = f"mul({text}, {_lit(float(step))})"
    # The start added even where it is 0: 0 times a negative step is -0.0, PyTorch's first
    # value +0.0.
    return f"add({text}, {_lit(float(start))})"


# -- matmul ----------------------------------------------------------------------------------------

def _transposed(cx, arg):
    """The tensor `arg` is the last-two-dims transpose of, else None."""
    arg = skip_identity(cx, arg)
    if not isinstance(arg, Node) or arg.op != "call_function":
        return None
    rank = len(cx.meta(arg).shape)
    if arg.target is aten.t.default and rank == 2:
        return arg.args[0]
    if arg.target is aten.transpose.int:
        dims = sorted(d % rank for d in arg.args[1:3])
        if dims == [rank - 2, rank - 1]:
            return arg.args[0]
    if arg.target is aten.permute.default:
        perm = [d % rank for d in arg.args[1]]
        if perm == list(range(rank - 2)) + [rank - 1, rank - 2]:
            return arg.args[0]
    return None


def _matmul_text(cx, a, b, dtype, wide: bool = False, b_rows_n: bool = False) -> str:
    """`a @ b`, both of `dtype`, in that dtype; `wide`: in f32 where it is f16 or bf16 (the fp32
    sums, not rounded: out_dtype=f32); `b_rows_n`: `a @ b^T`, b's rows the result's columns
    (linear's [N, K] weight)."""
    for x in (a, b):
        if cx.dtype_of(x) != dtype or dtype not in _FLOAT:
            raise Unsupported(f"a matmul of {cx.dtype_of(x)} into {dtype}")
    flags = ", out_dtype=f32" if wide and dtype in _HALF else ""
    ta, tb = _transposed(cx, a), _transposed(cx, b)
    if tb is not None and len(cx.meta(b).shape) >= 2:  # a transposed view, read as it is
        b, b_rows_n = tb, not b_rows_n
    if b_rows_n:
        flags += ", transpose_b=true"
    if ta is not None and len(cx.meta(a).shape) >= 2:
        a, flags = ta, ", transpose_a=true" + flags
    if len(cx.meta(a).shape) < 2 or len(cx.meta(b).shape) < 2:
        raise Unsupported("a matmul with a 1-D operand")
    b_text = cx.ref(b)
    rows = cx.merged(cx.meta(a).shape[-2]) if ta is None else None
    if rows and len(cx.meta(b).shape) > 2:
        # Rows of `a` that are a product of dims (Llama 4's experts, [E, B*S, D] @ [E, D, F])
        # are kiln's [E, B, S, D]: `b` gains a batch dim of 1 for each extra factor, so its own
        # batch dims stay aligned with `a`'s.
        dims = _kiln_dims(cx, cx.meta(b).shape)
        dims[-2:-2] = ["1"] * (len(rows) - 1)
        b_text = f"reshape({b_text}, shape=[{', '.join(dims)}])"
    return f"matmul({cx.ref(a)}, {b_text}{flags})"


def _wide_result(cx, node, operand) -> bool:
    """Whether `node`, a product of `operand`'s dtype, gives f32 from f16 or bf16 operands
    (mm.dtype and its kin, out_dtype=torch.float32); any other dtype but the operands' is
    Unsupported."""
    have, out = cx.dtype_of(operand), cx.dtype_of(node)
    if out != have and not (out == "f32" and have in _HALF):
        raise Unsupported(f"a matmul of {have} into {out}")
    return out != have


@lowering(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.mm.dtype, aten.bmm.dtype)
def _mm(cx, node):
    a, b = node.args[0], node.args[1]
    return Expr(_matmul_text(cx, a, b, cx.dtype_of(a), _wide_result(cx, node, a)))


@lowering(aten.einsum.default)
def _einsum(cx, node):
    """einsum of one operand (a permute, sums over the labels it drops) or two (SAM's
    `bhwc,hkc->bhwk`, attention's `bnqd,bnkd->bnqk`): each operand's labels only it has and
    the output does not are summed first; then one matmul, `a` as [batch.., row, K] and `b` as
    [batch.., col, K] (`transpose_b`), where K is the labels both have and the output does not
    (several of fixed sizes merged, none a K of 1), row and col are the labels only `a` or
    only `b` has that come last in the output (or a dim of 1), and the batch dims are every
    other output label in the output's order, each a dim of 1 in the operand that lacks it;
    the result permuted to the output's order."""
    equation, operands = node.args[0], list(node.args[1])
    if not isinstance(equation, str) or not 1 <= len(operands) <= 2 or \
            not all(isinstance(x, Node) for x in operands):
        raise Unsupported("an einsum of other than one or two tensors")
    dtype = cx.dtype_of(node)
    for x in operands:
        if cx.dtype_of(x) != dtype or dtype not in _FLOAT:
            raise Unsupported("an einsum of integers or of mixed dtypes")
        if cx.has_merged(x):
            raise Unsupported("an einsum of a tensor with merged dims")
        if not cx.meta(x).shape:
            raise Unsupported("an einsum of a 0-d tensor")
    ins, out = _einsum_labels(equation, [len(cx.meta(x).shape) for x in operands])
    # Each operand's dim of each of its labels; a label's size in the output is one that is
    # not 1 (an operand's 1 broadcasts).
    dims = [dict(zip(labels, cx.meta(x).shape)) for x, labels in zip(operands, ins)]
    sizes = {}
    for own in dims:
        for label, d in own.items():
            if label not in sizes or _size_expr(cx, sizes[label]) == 1:
                sizes[label] = d
            elif _size_expr(cx, d) not in (1, _size_expr(cx, sizes[label])):
                raise Unsupported(f"an einsum whose label {label!r} has two sizes")
    texts, kept = [], []
    for x, labels in zip(operands, ins):
        # Labels only this operand has, not in the output: summed away first.
        others = [l for other in ins if other is not labels for l in other]
        text, labels = cx.ref(x), list(labels)
        for label in [l for l in labels if l not in out and l not in others][::-1]:
            text = f"sum({text}, axis={labels.index(label) - len(labels)})"
            labels.remove(label)
        if not labels:
            raise Unsupported("an einsum that sums an operand to a scalar")
        texts.append(text)
        kept.append(labels)
    if len(operands) == 1:
        perm = [kept[0].index(l) for l in out]
        return Expr(texts[0] if perm == list(range(len(perm))) else
                    f"permute({texts[0]}, dims={perm})")
    (a, b), (la, lb) = texts, kept
    contract = [l for l in la if l in lb and l not in out]
    if any(_size_expr(cx, dims[0][l]) != _size_expr(cx, dims[1][l]) for l in contract):
        raise Unsupported("an einsum that broadcasts a label it sums over")
    if len(contract) > 1 and any(cx.is_symbolic(sizes[l]) for l in contract):
        raise Unsupported("an einsum summing over several labels, one of a symbolic size")
    only_a = [l for l in out if l in la and l not in lb]
    only_b = [l for l in out if l in lb and l not in la]
    row = only_a[-1] if only_a else None
    col = only_b[-1] if only_b else None
    batch = [l for l in out if l not in (row, col)]
    if len(batch) > 4:
        raise Unsupported("an einsum of more than 4 batch dims")

    def arranged(text, labels, own, mid) -> str:
        """`text` (of `labels`, sized `own`) as [batch.., mid, K]: permuted, a dim of 1 for
        each batch label it lacks (and for a missing mid), K merged."""
        order = [l for l in batch if l in labels] + ([mid] if mid else []) + contract
        perm = [labels.index(l) for l in order]
        if perm != list(range(len(perm))):
            text = f"permute({text}, dims={perm})"
        k = [cx.size(own[l]) for l in contract]
        k = [str(math.prod(int(v) for v in k))] if len(k) > 1 else (k or ["1"])
        shape = [cx.size(own[l]) if l in labels else "1" for l in batch] + \
            [cx.size(own[mid]) if mid else "1"] + k
        return f"reshape({text}, shape=[{', '.join(shape)}])"

    product = (f"matmul({arranged(a, la, dims[0], row)}, {arranged(b, lb, dims[1], col)}, "
               f"transpose_b=true)")
    have = batch + [l for l in (row, col) if l]
    result = f"reshape({product}, shape=[{', '.join(cx.size(sizes[l]) for l in have)}])"
    perm = [have.index(l) for l in out]
    return Expr(result if perm == list(range(len(perm))) else f"permute({result}, dims={perm})")


def _einsum_labels(equation: str, ranks: list) -> tuple[list, list]:
    """An einsum equation's labels: one list per operand, and the output's (implicit: any
    ellipsis, then the labels used once, sorted as PyTorch sorts them). An ellipsis is its
    operand's leading dims, labelled from the right so that they broadcast."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Unsupported(f"an einsum equation {equation!r} for {len(ranks)} tensors")
    fresh = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    longest = 0
    ins = []
    for term, rank in zip(terms, ranks):
        named = term.replace("...", "")
        if not all(c.isalpha() for c in named) or term.count("...") > 1:
            raise Unsupported(f"an einsum equation {equation!r}")
        spread = rank - len(named)
        if spread < 0 or ("..." not in term and spread):
            raise Unsupported(f"an einsum equation {equation!r} for ranks {ranks}")
        longest = max(longest, spread)
        head, _, tail = term.partition("...")
        ins.append(list(head) + fresh[len(fresh) - spread:] + list(tail) if "..." in term
                   else list(term))
    dots = fresh[len(fresh) - longest:]
    if arrow:
        if not all(c.isalpha() for c in rhs.replace("...", "")):
            raise Unsupported(f"an einsum equation {equation!r}")
        head, _, tail = rhs.partition("...")
        out = list(head) + (dots if "..." in rhs else []) + list(tail)
    else:
        used = [c for t in ins for c in t if c not in dots]
        out = dots + sorted(c for c in set(used) if used.count(c) == 1)
    for labels in ins + [out]:
        if len(set(labels)) != len(labels):
            raise Unsupported(f"an einsum with a repeated label ({equation!r})")
    if any(l not in [c for t in ins for c in t] for l in out):
        raise Unsupported(f"an einsum equation {equation!r}")
    return ins, out


@lowering(aten.addmm.default, aten.baddbmm.default, aten.addmm.dtype, aten.baddbmm.dtype)
def _addmm(cx, node):
    """beta * input + alpha * (a @ b); with beta 0 the input is not read (NaN included), as in
    PyTorch. In f16 and bf16, as eager: the product's fp32 sums, scaled and added to in f32,
    rounded once (not at all with out_dtype=torch.float32)."""
    addmm = node.target in (aten.addmm.default, aten.addmm.dtype)
    first = ("mat1", "mat2") if addmm else ("batch1", "batch2")
    bias, a, b = _arg(node, 0, "self"), _arg(node, 1, first[0]), _arg(node, 2, first[1])
    if node.target in (aten.addmm.dtype, aten.baddbmm.dtype):  # beta and alpha keyword-only
        beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
    else:
        beta, alpha = _arg(node, 3, "beta", 1), _arg(node, 4, "alpha", 1)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (beta, alpha)):
        raise Unsupported(f"{node.target} with a beta or alpha that is not a number")
    have, out = cx.dtype_of(a), cx.dtype_of(node)
    wide = _wide_result(cx, node, a) or (out in _HALF and (alpha != 1 or beta != 0))
    text = _matmul_text(cx, a, b, have, wide)
    if alpha == 0 and addmm:
        raise Unsupported("addmm with alpha 0 (PyTorch does not read the product: an inf in it "
                          "gives no NaN)")
    if alpha != 1:
        text = f"mul({text}, {_lit(float(alpha))})"
    if beta != 0:
        bias = cx.ref(bias, "f32" if wide else out)
        if beta != 1:
            bias = f"mul({bias}, {_lit(float(beta))})"
        text = f"add({text}, {bias})"
    return Expr(f"cast({text}, to={out})" if wide and out != "f32" else text)


@lowering(aten.linear.default)
def _linear(cx, node):
    x, w = node.args[0], node.args[1]
    bias = _arg(node, 2, "bias")
    out = cx.dtype_of(node)
    if len(cx.meta(w).shape) != 2 or len(cx.meta(x).shape) < 2:
        raise Unsupported("linear with a weight that is not 2-D or a 1-D input")
    if cx.dtype_of(x) != out or cx.dtype_of(w) != out:
        raise Unsupported("linear of mixed dtypes")
    # Eager adds a bias to the fp32 sums and rounds once (addmm), but for an input of 3 or more
    # dims that is not contiguous, or whose bias is not [N], [1] or [1, N]: that one it
    # multiplies, rounds, then adds. A linear folded from an addmm (_canonical) rounds once.
    wide = out in _HALF and bias is not None and (
        node.meta.get("kiln_addmm", False) or len(cx.meta(x).shape) <= 2 or
        (_contiguous(cx.meta(x)) and _row_bias(cx.meta(bias).shape)))
    text = _matmul_text(cx, x, w, out, wide, b_rows_n=True)
    if bias is not None:
        text = f"add({text}, {cx.ref(bias, 'f32' if wide else out)})"
    return Expr(f"cast({text}, to={out})" if wide else text)


def _row_bias(shape) -> bool:
    """Whether a bias of `shape` is one row ([N], [1] or [1, N]): what addmm adds to each row."""
    return len(shape) == 1 or (len(shape) == 2 and not isinstance(shape[0], torch.SymInt) and
                               int(shape[0]) == 1)


def _contiguous(val) -> bool:
    """Whether eager holds the fake tensor `val` contiguous (true where its strides are not
    known)."""
    try:
        return bool(val.is_contiguous())
    except Exception:  # noqa: BLE001 - symbolic strides without a hint
        return True


@lowering(aten.constant_pad_nd.default, aten.pad.default)
def _constant_pad(cx, node):
    """F.pad with a constant: along each padded dim (of fixed size) the value before and after x,
    joined by concat; a negative pad crops, as PyTorch's."""
    x, pad = node.args[0], list(_arg(node, 1, "pad"))
    if node.target is aten.pad.default:
        mode = _arg(node, 2, "mode", "constant")
        if mode in ("reflect", "replicate", "circular"):
            return _edge_pad(cx, x, pad, mode)
        if mode != "constant":
            raise Unsupported(f"a pad in mode '{mode}'")
        value = _arg(node, 3, "value", None)
        value = 0 if value is None else value
    else:
        value = _arg(node, 2, "value", 0)
    shape = cx.meta(x).shape
    if len(pad) % 2 or len(pad) // 2 > len(shape) or \
            not all(isinstance(p, int) for p in pad) or not isinstance(value, (int, float)):
        raise Unsupported("a pad by symbolic or malformed amounts")
    out = cx.dtype_of(node)
    if any(p > 0 for p in pad):  # the value is read only where something is added
        if out in ("i32", "i64") and not math.isfinite(value):
            raise Unsupported(f"a pad of an integer tensor by {value}")
        value = float(value) if out in _FLOAT else \
            bool(value) if out == "bool" else int(value)
    if not any(pad):
        return Alias(x)
    text = cx.ref(x)
    dims = [cx.size(d) for d in shape]
    for k in range(len(pad) // 2):
        axis, (before, after) = len(shape) - 1 - k, pad[2 * k:2 * k + 2]
        if before == 0 and after == 0:
            continue
        if cx.is_symbolic(shape[axis]):
            raise Unsupported("a pad along a symbolic dim")
        size = int(shape[axis])
        start, end = max(0, -before), size - max(0, -after)
        if end <= start:
            raise Unsupported("a pad that crops everything")
        if start or end != size:
            text = f"slice({text}, axis={axis}, start={start}, end={end})"
        dims[axis] = str(end - start)
        text = _padded(text, dims, axis, max(0, before), max(0, after), value, out)
    return Expr(text)


def _edge_pad(cx, x, pad: list, mode: str) -> Expr:
    """F.pad in mode reflect (the elements next to the edge, mirrored, the edge not repeated),
    replicate (the edge element repeated: a slice of one, expanded) or circular (the other end's
    elements): along each padded dim of fixed size, pieces of x joined to it by concat, copies
    exact in any dtype. Amounts PyTorch refuses (reflect: as large as the dim; circular: larger
    than it) and negative ones are Unsupported."""
    shape = cx.meta(x).shape
    if len(pad) % 2 or len(pad) // 2 > len(shape) or \
            not all(isinstance(p, int) and p >= 0 for p in pad):
        raise Unsupported(f"a {mode} pad by symbolic, negative or malformed amounts")
    text, dims = cx.ref(x), [cx.size(d) for d in shape]
    for k in range(len(pad) // 2):
        axis, (before, after) = len(shape) - 1 - k, pad[2 * k:2 * k + 2]
        if before == 0 and after == 0:
            continue
        if cx.is_symbolic(shape[axis]):
            raise Unsupported(f"a {mode} pad along a symbolic dim")
        n = int(shape[axis])
        if (mode == "reflect" and max(before, after) >= n) or \
                (mode == "circular" and max(before, after) > n):
            raise Unsupported(f"a {mode} pad of {max(before, after)} along a dim of {n} "
                              "(PyTorch raises)")

        def piece(start, end):
            return f"slice({text}, axis={axis}, start={start}, end={end})"

        def repeated(at, count):
            wide = ", ".join(dims[:axis] + [str(count)] + dims[axis + 1:])
            return f"expand({piece(at, at + 1)}, shape=[{wide}])"
        if mode == "reflect":
            left = [piece(i, i + 1) for i in range(before, 0, -1)]
            right = [piece(i, i + 1) for i in range(n - 2, n - 2 - after, -1)]
        elif mode == "replicate":
            left = [repeated(0, before)] if before else []
            right = [repeated(n - 1, after)] if after else []
        else:
            left = [piece(n - before, n)] if before else []
            right = [piece(0, after)] if after else []
        text = _joined(left + [text] + right, axis)
        dims[axis] = str(n + before + after)
    return Expr(text)


def _padded(text: str, dims: list, axis: int, before: int, after: int, value, dtype: str) -> str:
    """`text` (kiln shape `dims`) with `before` and `after` elements of `value` joined along
    `axis`; dims[axis] becomes the padded size."""
    parts = [text]
    for count, first in ((before, True), (after, False)):
        if count:
            shape = "[" + ", ".join(dims[:axis] + [str(count)] + dims[axis + 1:]) + "]"
            parts.insert(0 if first else len(parts), _filled(value, dtype, shape))
    dims[axis] = str(int(dims[axis]) + before + after)
    return text if len(parts) == 1 else f"concat({', '.join(parts)}, axis={axis})"


def _per_dim(v, spatial: int) -> list:
    """A convolution's or pool's kernel, stride, padding or dilation as one value a spatial dim
    (a number, or a list of one, is every dim's)."""
    v = [v] if isinstance(v, int) else list(v)
    return v * spatial if len(v) == 1 else v


def _chained(op: str, texts: list) -> str:
    """`op` (add, maximum) of `texts` in order, left-nested as a loop's: op(op(a, b), c)."""
    text = texts[0]
    for t in texts[1:]:
        text = f"{op}({text}, {t})"
    return text


def _joined(pieces: list, axis: int) -> str:
    """`pieces` (kiln texts) joined along `axis`: a concat of at most 64 operands, of concats of
    64 where there are more."""
    while len(pieces) > 64:
        pieces = [pieces[i:i + 64] for i in range(0, len(pieces), 64)]
        pieces = [p[0] if len(p) == 1 else f"concat({', '.join(p)}, axis={axis})" for p in pieces]
    return pieces[0] if len(pieces) == 1 else f"concat({', '.join(pieces)}, axis={axis})"


def _windows(text: str, lead: list, sizes: list, kernel: list, stride: list, dilation: list,
             before: list, after: list, outs: list, value, dtype: str):
    """Each kernel offset's window of `text` (kiln shape `lead` then `sizes`, the spatial dims):
    (kiln text, its shape's dims), of `outs` positions a spatial dim, the input padded with
    `value` (`before` and `after` each dim) and read every `stride` from the offset times the
    `dilation`."""
    dims, at = list(lead) + [str(n) for n in sizes], len(lead)
    for i, (n, p, d, k, st, o) in enumerate(zip(sizes, before, dilation, kernel, stride, outs)):
        # The padding before and after, and after it enough that every offset's window of o
        # whole steps fits (what lies past its last element is never read).
        tail = max(after[i], d * (k - 1) + o * st - n - p)
        text = _padded(text, dims, at + i, p, tail, value, dtype)
    for offsets in itertools.product(*[range(k) for k in kernel]):
        w, wdims = text, list(dims)
        for i, (j, d, st, o) in enumerate(zip(offsets, dilation, stride, outs)):
            axis = at + i
            w = f"slice({w}, axis={axis}, start={j * d}, end={j * d + o * st})"
            if st > 1:
                grouped = wdims[:axis] + [str(o), str(st)] + wdims[axis + 1:]
                w = f"slice(reshape({w}, shape=[{', '.join(grouped)}]), axis={axis + 1}, " \
                    f"start=0, end=1)"
            wdims[axis] = str(o)
            if st > 1:
                w = f"reshape({w}, shape=[{', '.join(wdims)}])"
        yield w, wdims


@lowering(aten.upsample_nearest1d.vec, aten.upsample_nearest2d.vec, aten.upsample_nearest3d.vec,
          aten.upsample_linear1d.vec, aten.upsample_bilinear2d.vec, aten.upsample_trilinear3d.vec,
          aten.upsample_bicubic2d.vec)
def _upsample(cx, node):
    """F.interpolate (nn.Upsample) along each spatial dim of fixed size. 'nearest' by a whole
    factor (an output size that is a multiple of the input's, or a whole scale factor) repeats
    each element (reshape, expand, reshape); to any other size it gathers PyTorch's source
    positions (_nearest_index) by slices. 'linear', 'bilinear', 'trilinear' and 'bicubic' (not
    antialiased) to any size, up or down, align_corners or not: each output position weighs its
    two source elements (four for bicubic, clamped at the edges) by PyTorch's f32 taps
    (_linear_taps, _cubic_taps), the sources gathered by slices (runs of consecutive or repeated
    positions) joined by concat, the terms summed in order; along W, then H, then D, as
    PyTorch's generic kernel nests its sum. Every term is kept where its weight is 0, so an inf next to a
    position gives NaN there as in PyTorch. A half input is taken in f32 (f32 weights) and
    rounded once."""
    cubic = node.target is aten.upsample_bicubic2d.vec
    linear = cubic or node.target in (aten.upsample_linear1d.vec, aten.upsample_bilinear2d.vec,
                                      aten.upsample_trilinear3d.vec)
    x, size = node.args[0], node.args[1]
    align = linear and bool(node.args[2])
    scales = node.args[3] if linear else node.args[2]
    shape = cx.meta(x).shape
    spatial = 1 if node.target in (aten.upsample_nearest1d.vec, aten.upsample_linear1d.vec) else \
        3 if node.target in (aten.upsample_nearest3d.vec, aten.upsample_trilinear3d.vec) else 2
    out = cx.dtype_of(x)
    if len(shape) != spatial + 2 or any(cx.is_symbolic(d) for d in shape[2:]) or \
            cx.merged(shape[0]) or (linear and out not in _FLOAT):
        raise Unsupported("an upsample of a symbolic spatial dim, a batch of merged dims, or "
                          "an integer linear one")
    sizes = [int(d) for d in shape[2:]]
    if size is not None:
        outs = [int(v) if isinstance(v, int) else None for v in size]
        scales = [None] * spatial
    else:
        scales = list(scales or ())
        outs = [int(math.floor(n * float(f))) if isinstance(f, (int, float)) else None
                for n, f in zip(sizes, scales)]
    if len(outs) != spatial or any(o is None or o < 1 for o in outs):
        raise Unsupported(f"an upsample from {sizes} to {size or scales}")
    dims = [cx.size(d) for d in shape]
    if linear:
        text = cx.ref(x, "f32")
        for i in reversed(range(spatial)):  # W first, as PyTorch's nested sum
            axis = 2 + i
            taps = (_cubic_taps if cubic else _linear_taps)(sizes[i], outs[i], align, scales[i])
            runs = max(len(list(itertools.groupby(w))) for _, w in taps)
            if runs > 1024:  # each run of equal weights is a piece of the graph's text
                raise Unsupported(f"an interpolation to {outs[i]} positions of {runs} runs of "
                                  "weights (kiln takes up to 1024)")
            text = cx.let(text)  # each gather reads it once a run
            terms = [(_gathered(text, dims, axis, idx), w) for idx, w in taps]
            dims[axis] = str(outs[i])
            text = None
            for g, w in terms:  # ((t0 + t1) + t2) + t3, as PyTorch's loop adds them
                term = f"mul({g}, {_along(w, axis, len(dims))})"
                text = term if text is None else f"add({text}, {term})"
        return _rounded(text, out)
    # A scale factor given is PyTorch's step (1 / scale) even where floor(n * scale) is a
    # multiple of n (3.1 on 4 positions reads 0, 0, 0, 0, 1, ..., not each 3 times).
    factors = [o // n if o % n == 0 and (scale is None or float(scale).is_integer()) else None
               for o, n, scale in zip(outs, sizes, scales)]
    text = cx.ref(x)
    for i in reversed(range(spatial)):
        axis, n, s = 2 + i, sizes[i], factors[i]
        if s is None:  # PyTorch's positions, gathered
            index = _nearest_index(n, outs[i], scales[i], spatial == 2)
            text = _gathered(cx.let(text), dims, axis, index)
            dims[axis] = str(outs[i])
            continue
        if s == 1:
            continue
        grouped = dims[:axis] + [str(n), str(s)] + dims[axis + 1:]
        one = dims[:axis] + [str(n), "1"] + dims[axis + 1:]
        wide = f"expand(reshape({text}, shape=[{', '.join(one)}]), " \
               f"shape=[{', '.join(grouped)}])"
        dims[axis] = str(n * s)
        text = f"reshape({wide}, shape=[{', '.join(dims)}])"
    return Expr(text)


def _nearest_index(n: int, m: int, scale, two_d: bool) -> list:
    """PyTorch's 'nearest' source positions from n positions to m (HelperInterpNearest, in
    f32): floor(j * step), at most n - 1, the step 1 / scale where a scale factor is given,
    else n / m. Its 2-D kernels take m = n as a copy and m = 2n as j // 2 whatever the scale
    factor (1.1 on 4 positions reads 0, 1, 2, 3, where the step would read 0, 0, 1, 2)."""
    if two_d and m == n:
        return list(range(m))
    if two_d and m == 2 * n:
        return [j // 2 for j in range(m)]
    step = _interp_step(n, m, False, scale)
    src = torch.floor(torch.arange(m, dtype=torch.float32) * step).to(torch.int64)
    return torch.clamp(src, max=n - 1).tolist()


def _linear_taps(n: int, m: int, align: bool, scale) -> list:
    """PyTorch's linear interpolation from n positions to m (compute_source_index_and_lambda:
    area_pixel_compute_scale, area_pixel_compute_source_index and guard_index_and_lambda, in
    f32): each output position's source positions and weights, [(i0, w0), (i1, w1)], lists.
    `scale` is the scale factor given (its inverse is the step), else None (n / m). To the same
    size each position is its own two sources, weighed 1 and 0. The source index
    `step * (j + 0.5) - 0.5` is rounded twice, as the C++ writes it and PyTorch's generic kernel
    and linear1d compute it; its bilinear kernel for small outputs on an AVX2 CPU rounds it once
    (a fused multiply-add), so a weight there can be 1.5e-8 where it is 0 here."""
    if n == m:
        return [(list(range(m)), [1.0] * m), (list(range(m)), [0.0] * m)]
    f32 = torch.float32
    i0, lam = _source_index(n, m, align, scale, cubic=False)
    i1 = i0 + (i0 < n - 1).to(torch.int64)
    w0 = torch.tensor(1.0, dtype=f32) - lam
    return [(i0.tolist(), w0.tolist()), (i1.tolist(), lam.tolist())]


def _interp_step(n: int, m: int, align: bool, scale):
    """PyTorch's step between source positions from n positions to m, an f32 scalar
    (area_pixel_compute_scale): (n - 1) / (m - 1) with align_corners, else 1 / scale where a
    scale factor is given, else n / m."""
    f32 = torch.float32
    if align:
        return torch.tensor(float(n - 1), dtype=f32) / float(m - 1) if m > 1 else \
            torch.tensor(0.0, dtype=f32)
    if scale is not None and float(scale) > 0:
        return torch.tensor(1.0 / float(scale), dtype=f32)
    return torch.tensor(float(n), dtype=f32) / float(m)


def _source_index(n: int, m: int, align: bool, scale, cubic: bool) -> tuple:
    """Each of m output positions' first source position (int64) and its distance past it (f32,
    in [0, 1]), from n positions: PyTorch's area_pixel_compute_scale,
    area_pixel_compute_source_index and guard_index_and_lambda in f32. For linear interpolation
    a source index before 0 is 0; for cubic it is kept (the first position is then -1)."""
    f32 = torch.float32
    step = _interp_step(n, m, align, scale)
    j = torch.arange(m, dtype=f32)
    if align:
        src = step * j
    else:
        src = step * (j + 0.5) - 0.5
        if not cubic:
            src = torch.where(src < 0, torch.zeros((), dtype=f32), src)
    i0 = torch.clamp(torch.floor(src).to(torch.int64), max=n - 1)
    return i0, torch.clamp(src - i0.to(f32), 0.0, 1.0)


def _cubic_taps(n: int, m: int, align: bool, scale) -> list:
    """PyTorch's bicubic interpolation from n positions to m along one dim (its generic CPU
    kernel's HelperInterpCubic, in f32): four (positions, weights) lists, the positions i - 1 to
    i + 2 around each output's source index i, clamped to the dim, and the weights Keys' cubic
    convolution (A = -0.75) at its distance t past i, as get_cubic_upsample_coefficients
    computes them: f(t + 1), g(t), g(1 - t), f(2 - t) with g(x) = ((A + 2) x - (A + 3)) x x + 1
    and f(x) = ((A x - 5A) x + 8A) x - 4A. PyTorch's x86-64 builds fuse some multiply-adds
    of these (one rounding fewer): a weight a few ulps apart at times."""
    f32 = torch.float32
    i, t = _source_index(n, m, align, scale, cubic=True)
    a = torch.tensor(-0.75, dtype=f32)
    one = torch.tensor(1.0, dtype=f32)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = (far(t + one), near(t), near(one - t), far((one - t) + one))
    return [(torch.clamp(i - 1 + k, 0, n - 1).tolist(), w.tolist())
            for k, w in enumerate(weights)]


def _gathered(text: str, dims: list, axis: int, index: list) -> str:
    """`text` (kiln shape `dims`) at positions `index` along `axis`: a slice for each run of
    consecutive positions, a slice of one expanded for each run of one repeated, joined."""
    pieces, j = [], 0
    while j < len(index):
        k = j + 1
        if k < len(index) and index[k] == index[j]:
            while k < len(index) and index[k] == index[j]:
                k += 1
            one = f"slice({text}, axis={axis}, start={index[j]}, end={index[j] + 1})"
            wide = dims[:axis] + [str(k - j)] + dims[axis + 1:]
            pieces.append(f"expand({one}, shape=[{', '.join(wide)}])")
        else:
            while k < len(index) and index[k] == index[k - 1] + 1:
                k += 1
            pieces.append(f"slice({text}, axis={axis}, start={index[j]}, end={index[k - 1] + 1})")
        j = k
    if len(pieces) > 64 * 64:
        raise Unsupported(f"an interpolation to {len(index)} positions of {len(pieces)} runs "
                          "(kiln joins up to 4096)")
    return _joined(pieces, axis)


def _pooled_input(cx, x, spatial: int, what: str):
    """The kiln dims before a pool's `spatial` pooled dims and the pooled dims' sizes, or
    Unsupported: a float tensor with something before its pooled dims, none of them merged, the
    pooled ones of fixed size."""
    shape = cx.meta(x).shape
    lead = len(shape) - spatial
    if cx.dtype_of(x) not in _FLOAT or lead < 1 or \
            any(cx.is_symbolic(d) for d in shape[lead:]):
        raise Unsupported(f"{what} of a symbolic spatial dim, or of integers")
    if any(cx.merged(d) for d in shape[:lead]):
        raise Unsupported(f"{what} of a tensor with merged dims")
    return [cx.size(d) for d in shape[:lead]], [int(d) for d in shape[lead:]]


def _pool_window(node, spatial: int, what: str, at: dict):
    """A max or average pool's kernel, stride, padding and dilation (one each spatial dim) and
    ceil mode, read from the node's arguments at the positions `at` names; Unsupported unless
    they are whole numbers, the padding at most half the kernel (PyTorch raises past it)."""
    kernel = _per_dim(_arg(node, 1, "kernel_size"), spatial)
    stride = _per_dim(_arg(node, 2, "stride", None) or kernel, spatial)
    padding = _per_dim(_arg(node, 3, "padding", 0), spatial)
    dilation = _per_dim(_arg(node, at["dilation"], "dilation", 1) if "dilation" in at else 1,
                        spatial)
    ceil = bool(_arg(node, at["ceil_mode"], "ceil_mode", False))
    if not all(isinstance(v, int) for v in kernel + stride + padding + dilation) or \
            len({len(kernel), len(stride), len(padding), len(dilation), spatial}) != 1 or \
            min(kernel + stride + dilation) < 1 or min(padding) < 0:
        raise Unsupported(f"{what} of a malformed kernel, stride, padding or dilation")
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise Unsupported(f"{what} padded by more than half its kernel (PyTorch raises)")
    return kernel, stride, padding, dilation, ceil


def _pooled_sizes(sizes, kernel, stride, padding, dilation, ceil: bool) -> list:
    """A pool's output size along each spatial dim, as PyTorch's: in ceil mode a last partial
    window counts where it starts inside the input or its padding before."""
    outs = []
    for n, k, st, p, d in zip(sizes, kernel, stride, padding, dilation):
        o = (n + 2 * p - d * (k - 1) - 1 + (st - 1 if ceil else 0)) // st + 1
        if ceil and (o - 1) * st >= n + p:
            o -= 1
        outs.append(o)
    return outs


@lowering(aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default,
          aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def _max_pool(cx, node):
    """max_pool1d, max_pool2d (ResNet's stem) and max_pool3d: the maximum of the kernel
    offsets' windows of the input padded with -inf (NaN wins, as in PyTorch); in ceil mode, past
    the padding too (SqueezeNet's and GoogLeNet's pools). Of the indices' forms only the
    values."""
    indices = node.target in (aten.max_pool2d_with_indices.default,
                              aten.max_pool3d_with_indices.default)
    if indices:
        cx.only_first_output(node)
    x = node.args[0]
    spatial = 1 if node.target is aten.max_pool1d.default else \
        3 if node.target in (aten.max_pool3d.default, aten.max_pool3d_with_indices.default) else 2
    lead, sizes = _pooled_input(cx, x, spatial, "a max pool")
    kernel, stride, padding, dilation, ceil = _pool_window(
        node, spatial, "a max pool", {"dilation": 4, "ceil_mode": 5})
    if math.prod(kernel) > 64:
        raise Unsupported(f"a max pool of {math.prod(kernel)} kernel offsets (kiln takes up to 64)")
    outs = _pooled_sizes(sizes, kernel, stride, padding, dilation, ceil)
    if any(o < 1 for o in outs):
        raise Unsupported("a max pool whose output is empty (PyTorch raises)")
    windows = [w for w, _ in _windows(cx.ref(x), lead, sizes, kernel, stride, dilation, padding,
                                      padding, outs, -math.inf, cx.dtype_of(x))]
    text = _chained("maximum", windows)
    return Tuple0(text) if indices else Expr(text)


def _float_vector(values: list) -> str:
    """A 1-D f32 tensor holding `values` (each one f32 holds exactly): each run of equal values a
    filled tensor, the runs joined."""
    runs = [(v, len(list(group))) for v, group in itertools.groupby(values)]
    return _joined([_filled(float(v), "f32", f"[{n}]") for v, n in runs], 0)


def _along(values: list, axis: int, rank: int) -> str:
    """_float_vector(values) shaped to broadcast along `axis` of a rank-`rank` value."""
    shape = ", ".join(str(len(values)) if k == axis else "1" for k in range(rank))
    return f"reshape({_float_vector(values)}, shape=[{shape}])"


def _divided(text: str, counts: list, spatial_at: int, rank: int) -> str:
    """`text` divided by each spatial dim's window sizes `counts` (a list of ints each, one a
    position), one dim after another (a literal where a dim's windows are all alike)."""
    for i, c in enumerate(counts):
        if c == [1] * len(c):
            continue
        if len(set(c)) == 1:
            text = f"div({text}, {_lit(float(c[0]))})"
        else:
            text = f"div({text}, {_along(c, spatial_at + i, rank)})"
    return text


@lowering(aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool(cx, node):
    """avg_pool1d, avg_pool2d and avg_pool3d, every option: the sum of the kernel offsets'
    windows of the input padded with zeros (in PyTorch's order, in f32 for a half input),
    divided by the window's size, its padding counted (count_include_pad) or not, or by
    divisor_override; in ceil mode a last partial window's size is what it covers of the input
    and its padding (PoolFormer's token mixer, DenseNet's transitions, EfficientNet's pooler: a
    kernel past a single window's input is that input)."""
    x = node.args[0]
    spatial = {aten.avg_pool1d.default: 1, aten.avg_pool2d.default: 2}.get(node.target, 3)
    lead, sizes = _pooled_input(cx, x, spatial, "an average pool")
    kernel, stride, padding, _, ceil = _pool_window(node, spatial, "an average pool",
                                                    {"ceil_mode": 4})
    include_pad = bool(_arg(node, 5, "count_include_pad", True))
    override = _arg(node, 6, "divisor_override", None) if spatial > 1 else None
    if override is not None and (not isinstance(override, int) or override == 0):
        raise Unsupported(f"an average pool divided by {override!r} (PyTorch raises at 0)")
    outs = _pooled_sizes(sizes, kernel, stride, padding, [1] * spatial, ceil)
    if any(o < 1 for o in outs):
        raise Unsupported("an average pool whose output is empty (PyTorch raises)")
    counts = []  # each dim's window sizes, a position each, as PyTorch counts them
    for i, (n, k, st, p, o) in enumerate(zip(sizes, kernel, stride, padding, outs)):
        starts = [j * st - p for j in range(o)]
        ends = [min(a + k, n + p) for a in starts]
        counts.append([b - a if include_pad else min(b, n) - max(a, 0)
                       for a, b in zip(starts, ends)])
        if o == 1 and p == 0 and k > n:
            kernel[i] = n  # the one window is the whole dim: the same elements and count
    out, rank = cx.dtype_of(x), len(lead) + spatial
    if math.prod(kernel) > 64 and \
            all(o == 1 and p == 0 and k == n for o, p, k, n in zip(outs, padding, kernel, sizes)):
        # One window of more than 64 elements, the whole input (EfficientNet's pooler on a large
        # map): summed along each dim, the last first (within rounding of PyTorch's sum).
        text = cx.ref(x, "f32")
        for axis in reversed(range(len(lead), rank)):
            text = f"sum({text}, axis={axis}, keepdim=true)"
    elif math.prod(kernel) > 64:
        raise Unsupported(f"an average pool of {math.prod(kernel)} kernel offsets (kiln takes "
                          "up to 64)")
    else:
        windows = [w for w, _ in _windows(cx.ref(x, "f32"), lead, sizes, kernel, stride,
                                          [1] * spatial, padding, padding, outs, 0.0, "f32")]
        text = _chained("add", windows)
    if override is not None:
        text = f"div({text}, {_lit(float(override))})"
    elif all(len(set(c)) == 1 for c in counts):
        text = f"div({text}, {_lit(float(math.prod(c[0] for c in counts)))})"
    else:  # PyTorch divides by the product of the dims' sizes, which f32 holds exactly
        factors = [_lit(float(c[0])) if len(set(c)) == 1 else
                   _along(c, len(lead) + i, rank) for i, c in enumerate(counts)]
        size = factors[0]
        for factor in factors[1:]:
            size = f"mul({size}, {factor})"
        text = f"div({text}, {size})"
    return Expr(text if out == "f32" else f"cast({text}, to={out})")


def _adaptive_bins(n: int, m: int) -> list:
    """PyTorch's adaptive pool windows of `n` elements into `m`: [floor(o n / m),
    ceil((o + 1) n / m)) for each output o."""
    return [(o * n // m, -(-(o + 1) * n // m)) for o in range(m)]


@lowering(aten.adaptive_max_pool1d.default, aten.adaptive_max_pool2d.default)
def _adaptive_max(cx, node):
    """adaptive_max_pool1d and adaptive_max_pool2d (of the values and indices only the values):
    as _adaptive (NaN wins, as in PyTorch)."""
    cx.only_first_output(node)
    return Tuple0(_adaptive(cx, node, "max"))


def _adaptive(cx, node, kind: str) -> str:
    """An adaptive pool (`kind` max or avg) to any size: where each pooled dim's size is a
    multiple of its output's, a pool whose kernel and stride are the quotient (the windows
    summed in PyTorch's order, then divided by each dim's window size, as PyTorch's); otherwise,
    along each dim (the last first), each output's window of the input reduced (sum or max, kept)
    and the results joined, the sums then divided as PyTorch's (PSP's pools to 2, 3 and 6: sums
    within rounding of eager's)."""
    x, size = node.args[0], list(node.args[1])
    what = f"an adaptive {'maximum' if kind == 'max' else 'average'} pool"
    lead, sizes = _pooled_input(cx, x, len(size), what)
    size = [n if m is None else m for n, m in zip(sizes, size)]
    if not all(isinstance(m, int) and m >= 1 for m in size):
        raise Unsupported(f"{what} to {size}")
    out = cx.dtype_of(x)
    wide = kind == "avg" and out != "f32"
    text = cx.ref(x, "f32" if wide else None)
    rank = len(lead) + len(size)
    counts = [[b - a for a, b in _adaptive_bins(n, m)] for n, m in zip(sizes, size)]
    kernel = [n // m for n, m in zip(sizes, size)]
    if all(n % m == 0 for n, m in zip(sizes, size)) and math.prod(kernel) <= 64:
        windows = [w for w, _ in _windows(text, lead, sizes, kernel, kernel, [1] * len(size),
                                          [0] * len(size), [0] * len(size), size, 0.0,
                                          "f32" if wide else out)]
        text = _chained("maximum" if kind == "max" else "add", windows)
    else:
        if max(size) > 256:
            raise Unsupported(f"{what} to {size} (kiln takes up to 256 windows a dim)")
        reduce = "max" if kind == "max" else "sum"
        for i in reversed(range(len(size))):
            axis = len(lead) + i
            if sizes[i] == size[i]:
                continue
            pieces = [f"{reduce}(slice({text}, axis={axis}, start={a}, end={b}), axis={axis}, "
                      f"keepdim=true)" for a, b in _adaptive_bins(sizes[i], size[i])]
            text = _joined(pieces, axis)
    if kind == "avg":
        text = _divided(text, counts, len(lead), rank)
        if wide:
            text = f"cast({text}, to={out})"
    return text


def _grouped_matmul(rows: str, batch: list, count: int, depth: int, groups: int, weight: str,
                    outs: int, transpose_b: bool) -> str:
    """`rows` (read as [.., count, depth]) times `weight`: [.., count, outs], each group's
    depth/groups columns by its own outs/groups outputs, a matmul batched over the groups
    ([.., groups, count, depth/groups] by the weight's groups). The weight is read as
    [groups, outs/groups, depth/groups] with transpose_b (a convolution's [O, C/groups k...]),
    else as [groups, depth/groups, outs/groups] (a transposed one's [C_in, C_out/groups k...])."""
    lead, g = len(batch), groups
    flag = ", transpose_b=true" if transpose_b else ""
    if g == 1:
        rows = f"reshape({rows}, shape=[{', '.join(batch + [str(count), str(depth)])}])"
        shape = [outs, depth] if transpose_b else [depth, outs]
        return f"matmul({rows}, reshape({weight}, shape={shape}){flag})"
    swap = list(range(lead)) + [lead + 1, lead, lead + 2]
    split = ", ".join(batch + [str(count), str(g), str(depth // g)])
    rows = f"permute(reshape({rows}, shape=[{split}]), dims={swap})"
    shape = [g, outs // g, depth // g] if transpose_b else [g, depth // g, outs // g]
    text = f"matmul({rows}, reshape({weight}, shape={shape}){flag})"
    joined = ", ".join(batch + [str(count), str(outs)])
    return f"reshape(permute({text}, dims={swap}), shape=[{joined}])"


def _patches(text: str, batch: list, chans: int, outs: list, kernel: list) -> str:
    """`text` ([.., C, o k, ...], each spatial dim `outs[i]` whole patches of `kernel[i]`) with
    its elements in the order [.., o..., C, k...]: each patch a row. One reshape and permute for
    1 or 2 spatial dims; for 3 (rank 8 at once, past kiln's 6) two: the last two dims' patches
    first, within each C o1 k1, then C, o1 and k1 around them."""
    lead, spatial = len(batch), len(outs)
    if spatial == 3:
        (o1, o2, o3), (k1, k2, k3) = outs, kernel
        split = batch + [str(chans * o1 * k1), str(o2), str(k2), str(o3), str(k3)]
        order = list(range(lead)) + [lead + i for i in (0, 1, 3, 2, 4)]
        text = f"permute(reshape({text}, shape=[{', '.join(split)}]), dims={order})"
        split = batch + [str(v) for v in (chans, o1, k1, o2 * o3, k2 * k3)]
        order = list(range(lead)) + [lead + i for i in (1, 3, 0, 2, 4)]
        return f"permute(reshape({text}, shape=[{', '.join(split)}]), dims={order})"
    split = batch + [str(chans)] + [str(v) for o, k in zip(outs, kernel) for v in (o, k)]
    order = list(range(lead)) + [lead + 1 + 2 * i for i in range(spatial)] + [lead] + \
        [lead + 2 + 2 * i for i in range(spatial)]
    return f"permute(reshape({text}, shape=[{', '.join(split)}]), dims={order})"


def _conv_operands(cx, node, what: str):
    """(the output's float dtype, 1 where the input has a batch dim else 0) of a convolution,
    transposed or not, or Unsupported: input and weight of that dtype, fixed channel and spatial
    dims, at most one batch dim, not merged."""
    x, weight = node.args[0], node.args[1]
    wshape, xshape = cx.meta(weight).shape, cx.meta(x).shape
    out = cx.dtype_of(node)
    if out not in _FLOAT or cx.dtype_of(x) != out or cx.dtype_of(weight) != out:
        raise Unsupported(f"{what} of {cx.dtype_of(x)} by {cx.dtype_of(weight)}")
    lead = len(xshape) - (len(wshape) - 2) - 1  # a batch dim, or none
    if lead not in (0, 1) or any(cx.is_symbolic(d) for d in list(xshape[lead:]) + list(wshape)):
        raise Unsupported(f"{what} with a symbolic channel or spatial dim, or more than one "
                          "batch dim")
    if lead and cx.merged(xshape[0]):
        raise Unsupported(f"{what} of a batch of merged dims")
    return out, lead


@lowering(aten.conv1d.default, aten.conv2d.default, aten.conv3d.default, aten.conv1d.padding,
          aten.conv2d.padding, aten.conv3d.padding, aten.convolution.default)
def _conv(cx, node):
    """conv1d, conv2d and conv3d as one matmul of the input's patches by the weight as [O, C k...] (bias
    added); of several groups, a matmul batched over the groups (a depthwise convolution's of
    [C/groups k...] = [k...]). Where the stride is the kernel and nothing is padded (a vision
    transformer's patch embedding) the patches are the input's own elements, split and
    permuted; otherwise each of the kernel's offsets is a strided window of the input,
    zero-padded, and the windows are stacked (up to 4096 offsets: wav2vec2's positional
    convolution has 128)."""
    x, weight = node.args[0], node.args[1]
    bias = _arg(node, 2, "bias")
    if node.target is aten.convolution.default:
        stride, padding, dilation, transposed, output_padding, groups = node.args[3:9]
        if transposed:
            return _transposed_conv(cx, node, stride, padding, output_padding, dilation, groups)
    else:
        stride, padding = _arg(node, 3, "stride", 1), _arg(node, 4, "padding", 0)
        dilation, groups = _arg(node, 5, "dilation", 1), _arg(node, 6, "groups", 1)
    wshape, xshape = cx.meta(weight).shape, cx.meta(x).shape
    spatial = len(wshape) - 2
    if spatial not in (1, 2, 3):
        raise Unsupported(f"a convolution over {spatial} dims (kiln lowers conv1d, conv2d and "
                          "conv3d)")
    if any(cx.is_symbolic(d) for d in wshape):
        raise Unsupported("a convolution whose weight has a symbolic size")
    if not isinstance(groups, int) or groups < 1 or int(wshape[0]) % groups or \
            cx.is_symbolic(xshape[-spatial - 1]) or \
            int(xshape[-spatial - 1]) != groups * int(wshape[1]):
        raise Unsupported(f"a convolution of {groups} groups of those channels")
    kernel = [int(k) for k in wshape[2:]]
    stride, dilation = _per_dim(stride, spatial), _per_dim(dilation, spatial)
    if padding == "valid":
        padding = 0
    if padding == "same":  # stride 1 (PyTorch's rule): the odd one of a total after, as PyTorch
        total = [d * (k - 1) for d, k in zip(dilation, kernel)]
        before, after = [t // 2 for t in total], [t - t // 2 for t in total]
    elif isinstance(padding, str):
        raise Unsupported(f"a convolution with padding='{padding}'")
    else:
        before = after = _per_dim(padding, spatial)
    if not all(isinstance(v, int) for v in stride + before + after + dilation):
        raise Unsupported("a convolution with a symbolic stride, padding or dilation")
    along = _symbolic_length_conv(cx, node, spatial, kernel, stride, dilation, before, after,
                                  groups)
    if along is not None:
        return Expr(along)
    out, lead = _conv_operands(cx, node, "a convolution")
    chans = int(xshape[lead])
    sizes = [int(d) for d in xshape[lead + 1:]]
    outs = [(n + b + a - d * (k - 1) - 1) // st + 1
            for n, b, a, d, k, st in zip(sizes, before, after, dilation, kernel, stride)]
    if any(o < 1 for o in outs):
        raise Unsupported("a convolution whose output is empty (PyTorch raises)")
    batch = [cx.size(xshape[0])] if lead else []
    rows, depth = math.prod(outs), chans * math.prod(kernel)
    text = cx.ref(x)
    if stride == kernel and not any(before + after) and all(d == 1 for d in dilation):
        for i, (o, k) in enumerate(zip(outs, kernel)):
            if o * k != sizes[i]:  # PyTorch drops what no whole patch covers
                text = f"slice({text}, axis={lead + 1 + i}, start=0, end={o * k})"
        text = _patches(text, batch, chans, outs, kernel)
    else:
        if math.prod(kernel) > 64 * 64:
            raise Unsupported(f"a convolution of {math.prod(kernel)} kernel offsets (kiln "
                              "stacks up to 4096)")
        windows = []
        for w, wdims in _windows(text, batch + [str(chans)], sizes, kernel, stride, dilation,
                                 before, after, outs, 0.0, out):
            stacked = wdims[:lead + 1] + ["1"] + wdims[lead + 1:]
            windows.append(f"reshape({w}, shape=[{', '.join(stacked)}])")
        text = _joined(windows, lead + 1)
        # [.., C, K, o...] with the spatial dims first, then C and K.
        order = list(range(lead)) + [lead + 2 + i for i in range(spatial)] + [lead, lead + 1]
        text = f"permute({text}, dims={order})"
    text = _grouped_matmul(text, batch, rows, depth, groups, cx.ref(weight), int(wshape[0]), True)
    if bias is not None:
        text = f"add({text}, {cx.ref(bias, out)})"
    grid = batch + [str(o) for o in outs] + [str(int(wshape[0]))]
    back = list(range(lead)) + [lead + spatial] + [lead + i for i in range(spatial)]
    return Expr(f"permute(reshape({text}, shape=[{', '.join(grid)}]), dims={back})")


def _symbolic_length_conv(cx, node, spatial, kernel, stride, dilation, before, after,
                          groups) -> str | None:
    """A convolution along one symbolic spatial dim (a sequence: ConvBERT's separable conv1d,
    Nystromformer's depthwise conv2d of kernel (k, 1) over the values) whose output keeps the
    input's length: stride 1 there, padding before and after adding up to the kernel's reach,
    every other spatial dim of fixed size with a kernel of 1, stride 1 and no padding; of one
    group or depthwise (one group a channel, as many outputs as channels). None where the
    input's spatial dims are all fixed (the patches path). Each kernel offset's window is the
    input rolled along the sequence, zeros where it reads past either end (a position less its
    shift outside the sequence: the positions less their own roll differ from the shift), the
    channels last: depthwise, the windows times their weights added in f32 (rounded once for
    a half type); of one group, the windows joined along the channels and one matmul by the
    weight as [O, k C]. Then the bias, and the channels put back. Up to 256 offsets
    (Nystromformer's 65), the depthwise products added pairwise."""
    x, weight, bias = node.args[0], node.args[1], _arg(node, 2, "bias")
    xshape, wshape = cx.meta(x).shape, cx.meta(weight).shape
    lead = len(xshape) - spatial - 1
    symbolic = [i for i in range(spatial) if cx.is_symbolic(xshape[lead + 1 + i])]
    if len(symbolic) != 1 or lead not in (0, 1) or cx.has_merged(x):
        return None
    axis = symbolic[0]
    out = cx.dtype_of(node)
    if out not in _FLOAT or cx.dtype_of(x) != out or cx.dtype_of(weight) != out:
        raise Unsupported(f"a convolution of {cx.dtype_of(x)} by {cx.dtype_of(weight)}")
    if cx.is_symbolic(xshape[lead]) or any(cx.is_symbolic(d) for d in wshape):
        raise Unsupported("a convolution with a symbolic channel dim")
    others = [i for i in range(spatial) if i != axis]
    if stride[axis] != 1 or before[axis] + after[axis] != dilation[axis] * (kernel[axis] - 1) or \
            any(kernel[i] != 1 or stride[i] != 1 or before[i] or after[i] for i in others):
        raise Unsupported("a convolution along a symbolic dim whose output is not as long as its "
                          "input, or with a kernel past 1 along another dim")
    chans, outs, k = int(xshape[lead]), int(wshape[0]), kernel[axis]
    depthwise = groups == chans == outs and groups > 1
    if groups != 1 and not depthwise:
        raise Unsupported(f"a convolution along a symbolic dim of {groups} groups")
    if k > 256:
        raise Unsupported(f"a convolution along a symbolic dim of {k} kernel offsets (kiln "
                          "takes up to 256)")
    rank = lead + 1 + spatial
    last = list(range(lead)) + list(range(lead + 1, rank)) + [lead]  # channels last
    xl = cx.let(f"permute({cx.ref(x)}, dims={last})")
    n = cx.size(xshape[lead + 1 + axis])
    trailing = spatial - axis  # dims after the sequence, the channels among them
    at = -trailing - 1  # the sequence from the end, channels last
    positions = f"reshape(arange({n}), shape=[{', '.join([n] + ['1'] * trailing)}])"
    ps = cx.let(positions)
    # Window j's position p reads p - shift.
    windows = [_read_shifted(xl, ps, before[axis] - j * dilation[axis], at) for j in range(k)]
    # The weight's offsets along the sequence: [O, C/groups, k] once the kernel's 1s are gone.
    w = f"reshape({cx.ref(weight)}, shape=[{outs}, {int(wshape[1])}, {k}])"
    if depthwise:
        terms = []
        for j, window in enumerate(windows):
            wj = f"reshape(slice({w}, axis=2, start={j}, end={j + 1}), shape=[{chans}])"
            terms.append(f"mul({_as_f32(window, out)}, {_as_f32(wj, out)})")
        while len(terms) > 1:  # pairwise: nested 8 deep for 256 offsets, not 256
            terms = [f"add({a}, {b})" for a, b in zip(terms[::2], terms[1::2])] + \
                ([terms[-1]] if len(terms) % 2 else [])
        text = terms[0]
        if bias is not None:
            text = f"add({text}, {_as_f32(cx.ref(bias, out), out)})"
        if out != "f32":
            text = f"cast({text}, to={out})"
    else:
        stacked = _joined(windows, -1)  # [.., k C]: offset-major, as the weight below
        flat = f"reshape(permute({w}, dims=[0, 2, 1]), shape=[{outs}, {k * chans}])"
        text = f"matmul({stacked}, {flat}, transpose_b=true)"
        if bias is not None:
            text = f"add({text}, {cx.ref(bias, out)})"
    back = list(range(lead)) + [rank - 1] + list(range(lead, rank - 1))
    return f"permute({text}, dims={back})"


@lowering(aten.im2col.default)
def _im2col(cx, node):
    """im2col (F.unfold) of [N, C, S, 1] along a symbolic S with a kernel [k, 1], stride 1 and
    padding keeping the length (ConvBERT's span convolution): [N, C k, S], each offset's window
    the input rolled along S, zeros where it reads past either end (as _symbolic_length_conv
    makes them), joined offset-minor after each channel as PyTorch orders the columns."""
    x, kernel, dilation, padding, stride = node.args[:5]
    shape = cx.meta(x).shape
    lead = len(shape) - 3
    if lead not in (0, 1) or cx.has_merged(x) or cx.dtype_of(x) not in _FLOAT:
        raise Unsupported("an im2col of that tensor")
    kernel, dilation, padding, stride = (_per_dim(v, 2) for v in (kernel, dilation, padding,
                                                                  stride))
    if not cx.is_symbolic(shape[-2]) or cx.is_symbolic(shape[-1]) or int(shape[-1]) != 1 or \
            cx.is_symbolic(shape[lead]) or kernel[1] != 1 or padding[1] or stride != [1, 1] or \
            2 * padding[0] != dilation[0] * (kernel[0] - 1) or not 1 <= kernel[0] <= 256:
        raise Unsupported("an im2col other than of [N, C, S, 1] along a symbolic S, the length "
                          "kept")
    n, k, chans = cx.size(shape[-2]), kernel[0], int(shape[lead])
    xs = cx.let(cx.ref(x))
    ps = cx.let(f"reshape(arange({n}), shape=[{n}, 1])")
    lead_dims = [cx.size(shape[0])] if lead else []
    shape = "[" + ", ".join(lead_dims + [str(chans), "1", n]) + "]"
    windows = [f"reshape({_read_shifted(xs, ps, padding[0] - j * dilation[0], -2)}, "
               f"shape={shape})" for j in range(k)]
    joined = ", ".join(lead_dims + [str(chans * k), n])
    return Expr(f"reshape({_joined(windows, lead + 1)}, shape=[{joined}])")


def _read_shifted(text: str, positions: str, shift: int, axis: int) -> str:
    """`text` rolled by `shift` along `axis` (from the end), so position p reads p - shift,
    zeros where p - shift is outside the dim: where the positions (`positions`, that dim's
    arange shaped to meet `text` there) less their own roll differ from the shift. No size
    value is needed, and a shift past the dim's size reads zeros throughout."""
    if shift == 0:
        return text
    reads = f"eq(sub({positions}, roll({positions}, shift={shift}, axis={axis})), {shift})"
    return f"where({reads}, roll({text}, shift={shift}, axis={axis}), 0.0)"


def _as_f32(text: str, dtype: str) -> str:
    return text if dtype == "f32" else f"cast({text}, to=f32)"


@lowering(aten.conv_transpose1d.default, aten.conv_transpose2d.input)
def _conv_transpose(cx, node):
    return _transposed_conv(cx, node, _arg(node, 3, "stride", 1), _arg(node, 4, "padding", 0),
                            _arg(node, 5, "output_padding", 0), _arg(node, 7, "dilation", 1),
                            _arg(node, 6, "groups", 1))


def _transposed_conv(cx, node, stride, padding, output_padding, dilation, groups):
    """conv_transpose1d and conv_transpose2d (and convolution with transposed=True): one matmul
    of the input's positions [.., positions, C_in] by the weight as [C_in, C_out k...] (batched
    over the groups), each position's outputs for each kernel offset. Where the stride is the
    kernel with no padding, output padding or dilation (a U-Net's or SAM's upsampling) those are
    the output's own patches, permuted into place; otherwise each offset's outputs are spread
    `stride` apart (zeros between), shifted to where the offset lands and summed, the offsets in
    PyTorch's order (in f32 for a half type), at most 64 of them."""
    x, weight, bias = node.args[0], node.args[1], _arg(node, 2, "bias")
    wshape, xshape = cx.meta(weight).shape, cx.meta(x).shape  # weight [C_in, C_out/groups, k...]
    spatial = len(wshape) - 2
    if spatial not in (1, 2):
        raise Unsupported(f"a transposed convolution over {spatial} dims (kiln lowers 1 and 2)")
    out, lead = _conv_operands(cx, node, "a transposed convolution")
    c_in = int(wshape[0])
    if not isinstance(groups, int) or groups < 1 or c_in % groups or int(xshape[lead]) != c_in:
        raise Unsupported(f"a transposed convolution of {groups} groups of those channels")
    kernel = [int(k) for k in wshape[2:]]
    stride, padding, extra, dilation = (_per_dim(v, spatial) for v in
                                        (stride, padding, output_padding, dilation))
    if not all(isinstance(v, int) for v in stride + padding + extra + dilation) or \
            len({len(stride), len(padding), len(extra), len(dilation), spatial}) != 1 or \
            min(stride + dilation) < 1 or min(padding + extra) < 0:
        raise Unsupported("a transposed convolution with a symbolic or malformed stride, "
                          "padding or dilation")
    if any(e >= st and e >= d for e, st, d in zip(extra, stride, dilation)):
        raise Unsupported("a transposed convolution whose output padding is not smaller than "
                          "its stride or dilation (PyTorch raises)")
    sizes = [int(d) for d in xshape[lead + 1:]]
    outs = [(n - 1) * st - 2 * p + d * (k - 1) + e + 1
            for n, st, p, d, k, e in zip(sizes, stride, padding, dilation, kernel, extra)]
    if any(o < 1 for o in outs):
        raise Unsupported("a transposed convolution whose output is empty (PyTorch raises)")
    batch = [cx.size(xshape[0])] if lead else []
    g, c_out, taps, positions = groups, int(wshape[1]) * groups, math.prod(kernel), \
        math.prod(sizes)
    # [.., positions, C_in] by [C_in, C_out k...]: each position's outputs at every offset.
    order = list(range(lead)) + [lead + 1 + i for i in range(spatial)] + [lead]
    rows = f"permute({cx.ref(x)}, dims={order})"
    y = _grouped_matmul(rows, batch, positions, c_in, g, cx.ref(weight), c_out * taps, False)
    grid = batch + [str(n) for n in sizes] + [str(c_out)] + [str(k) for k in kernel]
    y = f"reshape({y}, shape=[{', '.join(grid)}])"
    if stride == kernel and not any(padding + extra) and all(d == 1 for d in dilation):
        # [.., C_out, n, k, ...]: each position's outputs are its own patch of the output.
        order = list(range(lead)) + [lead + spatial] + \
            [a for i in range(spatial) for a in (lead + i, lead + spatial + 1 + i)]
        shape = batch + [str(c_out)] + [str(o) for o in outs]
        text = f"reshape(permute({y}, dims={order}), shape=[{', '.join(shape)}])"
    else:
        if taps > 64:
            raise Unsupported(f"a transposed convolution of {taps} kernel offsets (kiln takes up "
                              "to 64)")
        # [.., C_out, n..., k...], in f32 for a half type.
        order = list(range(lead)) + [lead + spatial] + [lead + i for i in range(spatial)] + \
            [lead + spatial + 1 + i for i in range(spatial)]
        y = f"permute({y}, dims={order})"
        if out != "f32":
            y = f"cast({y}, to=f32)"
        spread = []
        for offsets in itertools.product(*[range(k) for k in kernel]):
            w, dims = y, batch + [str(c_out)] + [str(n) for n in sizes]
            for i, j in enumerate(offsets):
                w = f"slice({w}, axis={lead + 1 + spatial + i}, start={j}, end={j + 1})"
            w = f"reshape({w}, shape=[{', '.join(dims)}])"
            for i, (n, st, p, d, o, j) in enumerate(zip(sizes, stride, padding, dilation, outs,
                                                        offsets)):
                axis = lead + 1 + i
                if st > 1:  # input position q at q * st, zeros between
                    dims[axis:axis + 1] = [str(n), "1"]
                    w = _padded(f"reshape({w}, shape=[{', '.join(dims)}])", dims, axis + 1, 0,
                                st - 1, 0.0, "f32")
                    dims[axis:axis + 2] = [str(n * st)]
                    w = f"reshape({w}, shape=[{', '.join(dims)}])"
                # then at q * st + j * d - p: shifted, and cut to the output's size
                shift, length = j * d - p, int(dims[axis])
                before, crop = max(0, shift), max(0, -shift)
                w = _padded(w, dims, axis, before, max(0, crop + o - before - length), 0.0, "f32")
                if crop or int(dims[axis]) != o:
                    w = f"slice({w}, axis={axis}, start={crop}, end={crop + o})"
                    dims[axis] = str(o)
            spread.append(w)
        text = _chained("add", spread)
        if out != "f32":
            text = f"cast({text}, to={out})"
    if bias is not None:
        text = f"add({text}, reshape({cx.ref(bias, out)}, shape=[{c_out}{', 1' * spatial}]))"
    return Expr(text)


# -- rows: softmax, reductions, norms --------------------------------------------------------------

def _axis(cx, node, dim) -> int:
    rank = len(cx.meta(node.args[0]).shape)
    if isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            raise Unsupported(f"a reduction over {len(dim)} dims (kiln reduces one axis)")
        dim = dim[0]
    if not isinstance(dim, int):
        raise Unsupported("a reduction over all dims")
    return dim - rank if dim >= 0 else dim


@lowering(aten._log_softmax.default, aten.log_softmax.int)
def _log_softmax(cx, node):
    """x - max - log(sum(exp(x - max))) along the dim, as PyTorch's kernel: in f32 for a half
    type (a dtype= or half_to_float casts the input first, as PyTorch does)."""
    x, out = node.args[0], cx.dtype_of(node)
    if out not in _FLOAT:
        raise Unsupported(f"log_softmax into {out}")
    axis = _axis(cx, node, node.args[1])
    # The input in the output's dtype first (a dtype= rounds it there, as in PyTorch), in f32.
    wide = cx.ref(x, out) if out == "f32" else f"cast({cx.ref(x, out)}, to=f32)"
    t = f"sub({wide}, max({wide}, axis={axis}, keepdim=true))"
    return _rounded(f"sub({t}, log(sum(exp({t}), axis={axis}, keepdim=true)))", out)


@lowering(aten._softmax.default, aten.softmax.int, aten._safe_softmax.default
          if hasattr(aten, "_safe_softmax") else aten._softmax.default)
def _softmax(cx, node):
    # softmax(x, dtype=f32) (or half_to_float) is the softmax of x cast first, as PyTorch does.
    x, out = node.args[0], cx.dtype_of(node)
    if out not in _FLOAT:
        raise Unsupported(f"softmax into {out}")
    return Expr(f"softmax({cx.ref(x, out)}, axis={_axis(cx, node, node.args[1])})")


def _reduction(kiln_op: str):
    def lower(cx, node):
        x = node.args[0]
        dim = _arg(node, 1, "dim")
        keepdim = bool(_arg(node, 2, "keepdim", False))
        out = cx.dtype_of(node)
        if kiln_op == "sum" and out in ("i32", "i64"):
            return Expr(_integer_sum(cx, node, x, dim, keepdim, out))
        if cx.dtype_of(x) != out and (out not in _FLOAT or
                                      node.kwargs.get("dtype") is None):
            raise Unsupported(f"{kiln_op} into another dtype")
        # sum(x, dtype=f32) is the sum of x cast first, as PyTorch does.
        return Expr(_reduced(cx, node, kiln_op, cx.ref(x, out),
                             _kiln_axes(cx, x, _axes(cx, x, dim)), keepdim))
    return lower


def _kiln_axes(cx, x, axes: list) -> list:
    """A reduction's negative `axes` of `x` as kiln's, from kiln's last dim: a dim before a
    merged one (Llama 4's sum over the experts of [E, B*S, D], kiln's [E, B, S, D]) lies its
    extra factors further from the end. Unsupported for a merged dim itself."""
    shape = list(cx.meta(x).shape)
    if not any(cx.merged(d) for d in shape):
        return axes
    total = len(_kiln_dims(cx, shape))
    if any(cx.merged(shape[a]) for a in axes):
        raise Unsupported("a reduction over a merged dim (a product of dims)")
    return [_kiln_axis(cx, shape, a + len(shape)) - total for a in axes]


def _axes(cx, x, dim) -> list:
    """A reduction's dims of `x` (an int, a list, or None or [] for all of them) as distinct
    negative axes, from the last."""
    rank = len(cx.meta(x).shape)
    if rank == 0:
        raise Unsupported("a reduction of a tensor of shape []")
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        dim = list(range(rank))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    if not all(isinstance(d, int) and -rank <= d < rank for d in dims):
        raise Unsupported(f"a reduction over dims {list(dims)} of a tensor of rank {rank}")
    return sorted({d % rank - rank for d in dims})


def _reduced(cx, node, kiln_op: str, text: str, axes: list, keepdim: bool) -> str:
    """kiln_op (mean, sum or max) of `text` over `axes`: one axis after another, each kept, then
    the node's shape where the dims are not kept (a mean of means over a block is its mean). A
    half type's sum or mean is taken in f32 and rounded once, as PyTorch's is."""
    if len(axes) == 1:
        return f"{kiln_op}({text}, axis={axes[0]}{', keepdim=true' if keepdim else ''})"
    out = cx.dtype_of(node)
    wide = kiln_op != "max" and out in _HALF
    if wide:
        text = f"cast({text}, to=f32)"
    for axis in axes:
        text = f"{kiln_op}({text}, axis={axis}, keepdim=true)"
    if wide:
        text = f"cast({text}, to={out})"
    return text if keepdim else f"reshape({text}, shape={cx.shape(node)})"


def _last_along(text: str, axis: int) -> str:
    """The last element along `axis` of `text` (the dim kept, of size 1): rolled by one, it is
    first."""
    return f"slice(roll({text}, shift=1, axis={axis}), axis={axis}, start=0, end=1)"


def _integer_sum(cx, node, x, dim, keepdim: bool, out: str) -> str:
    """A sum into an integer dtype (PyTorch sums bool and integers into i64): along each dim the
    last of the running sum, exact and wrapping as PyTorch's (kiln's sum adds floats)."""
    rank = len(cx.meta(x).shape)
    dims = list(range(rank)) if rank == 0 or dim is None or \
        (isinstance(dim, (list, tuple)) and not dim) else \
        [d % rank for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    text = cx.ref(x, out)
    for axis in _kiln_axes(cx, x, sorted({d - rank for d in dims})):
        text = _last_along(f"cumsum({text}, axis={axis})", axis)
    if not keepdim:
        text = f"reshape({text}, shape={cx.shape(node)})"
    return text


@lowering(aten.sum.default, aten.mean.default)
def _sum_all(cx, node):
    out, x = cx.dtype_of(node), node.args[0]
    kiln_op = "sum" if node.target is aten.sum.default else "mean"
    if kiln_op == "sum" and out in ("i32", "i64"):
        return Expr(_integer_sum(cx, node, x, None, False, out))
    if out not in _FLOAT or (cx.dtype_of(x) != out and
                                             node.kwargs.get("dtype") is None):
        raise Unsupported(f"{kiln_op} into another dtype")
    return Expr(_reduced(cx, node, kiln_op, cx.ref(x, out), _axes(cx, x, None), False))


@lowering(aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default,
          aten._adaptive_avg_pool2d.default)
def _global_pool(cx, node):
    """An adaptive average pool to size 1 along each pooled dim (a global pool): their mean,
    kept. To any other size, _adaptive."""
    x, size = node.args[0], list(node.args[1])
    shape = cx.meta(x).shape
    if cx.dtype_of(x) not in _FLOAT or len(shape) < len(size) + 1:
        raise Unsupported("an adaptive average pool of that tensor")
    pooled = list(range(-len(size), 0))
    if any(n != 1 for n in size):
        return Expr(_adaptive(cx, node, "avg"))
    return Expr(_reduced(cx, node, "mean", cx.ref(x), pooled, True))


_reduction_mean, _reduction_sum, _reduction_max = (_reduction(k) for k in ("mean", "sum", "max"))
TABLE[aten.mean.dim] = _reduction_mean
TABLE[aten.sum.dim_IntList] = _reduction_sum
TABLE[aten.amax.default] = _reduction_max


@lowering(aten.linalg_vector_norm.default)
def _vector_norm(cx, node):
    """linalg.vector_norm (torch.norm's; ConvNeXt V2's global response norm) over `dim` (every
    dim when none): ord 2 the square root of the sum of squares, 1 the sum of |x|, inf the max
    of |x|, another positive ord p the p-th root of the sum of |x|^p. One dim after another (the
    sums' order differs from PyTorch's within rounding), in f32 for a half type, rounded once."""
    x = node.args[0]
    p = _arg(node, 1, "ord", 2)
    dim, keepdim = _arg(node, 2, "dim", None), bool(_arg(node, 3, "keepdim", False))
    out = cx.dtype_of(node)
    if out not in _FLOAT or cx.dtype_of(x) != out:
        raise Unsupported(f"a vector norm of {cx.dtype_of(x)} into {out}")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not p > 0:
        raise Unsupported(f"a vector norm of ord {p!r} (kiln takes a positive ord)")
    axes = _axes(cx, x, dim)
    xf = cx.ref(x, "f32")
    if p == 2:
        text, kind = f"mul({xf}, {xf})", "sum"
    elif p == 1 or math.isinf(p):
        text, kind = f"abs({xf})", "max" if math.isinf(p) else "sum"
    else:
        text, kind = f"pow(abs({xf}), {_lit(float(p))})", "sum"
    for axis in axes:
        text = f"{kind}({text}, axis={axis}, keepdim=true)"
    if p == 2:
        text = f"sqrt({text})"
    elif p != 1 and not math.isinf(p):
        text = f"pow({text}, {_lit(1.0 / float(p))})"
    if not keepdim:
        text = f"reshape({text}, shape={cx.shape(node)})"
    return _rounded(text, out)


def _truth(kind: str):
    """any(x, dim) and all(x, dim): whether some (every) element along the dim is nonzero (NaN
    counts, as in PyTorch), as the max of 0/1 floats: all(x) is not any(not x)."""
    def lower(cx, node):
        x, dim = node.args[0], _arg(node, 1, "dim")
        keepdim = bool(_arg(node, 2, "keepdim", False))
        if dim is None or not cx.meta(x).shape:
            raise Unsupported(f"{kind} over every dim")
        axis = _axis(cx, node, dim)
        truth = cx.ref(x) if cx.dtype_of(x) == "bool" else f"ne({cx.ref(x)}, 0)"
        if kind == "all":
            truth = f"logical_not({truth})"
        keep = ", keepdim=true" if keepdim else ""
        some = f"gt(max(cast({truth}, to=f32), axis={axis}{keep}), 0.0)"
        return Expr(some if kind == "any" else f"logical_not({some})")
    return lower


TABLE[aten.any.dim] = _truth("any")
TABLE[aten.all.dim] = _truth("all")


@lowering(aten.cumsum.default)
def _cumsum(cx, node):
    # PyTorch sums bool and integers as i64 unless dtype= says otherwise, and casts the input to
    # dtype= first: kiln casts the input to the result's dtype, then sums in it.
    x = node.args[0]
    if not cx.meta(x).shape:
        raise Unsupported("cumsum of a tensor of rank 0")
    out = cx.dtype_of(node)
    return Expr(f"cumsum({cx.ref(x, out)}, axis={_axis(cx, node, node.args[1])})")


@lowering(aten.roll.default)
def _roll(cx, node):
    x = node.args[0]
    shifts, dims = _arg(node, 1, "shifts"), _arg(node, 2, "dims", [])
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    rank = len(cx.meta(x).shape)
    if not dims or not rank:
        raise Unsupported("a roll of the flattened tensor (kiln rolls along dims)")
    if len(shifts) != len(dims):
        raise Unsupported("a roll with as many shifts as dims")
    if any(not isinstance(s, int) or isinstance(s, bool) or abs(s) > 2**31 - 1 for s in shifts):
        raise Unsupported("a roll by a symbolic shift or one past +-(2^31 - 1)")
    text = cx.ref(x)
    for shift, dim in zip(shifts, dims):
        text = f"roll({text}, shift={shift}, axis={dim % rank})"
    return Expr(text)


@lowering(aten.diff.default)
def _diff(cx, node):
    """diff(x, n=1, dim, prepend, append): x joined to prepend and append, less itself one
    element earlier (bool: where they differ, as PyTorch's xor). Along a symbolic dim, only with
    a prepend of one element (transformers' packed-sequence check): x less x rolled by one, the
    prepend where the roll wrapped."""
    x = node.args[0]
    n, dim = _arg(node, 1, "n", 1), _arg(node, 2, "dim", -1)
    prepend, append = _arg(node, 3, "prepend"), _arg(node, 4, "append")
    if n != 1:
        raise Unsupported(f"diff with n={n}")
    shape = cx.meta(x).shape
    if not shape:
        raise Unsupported("diff of a tensor of rank 0")
    axis = dim % len(shape)
    parts = [p for p in (prepend, x, append) if p is not None]
    if any(not isinstance(p, Node) or len(cx.meta(p).shape) != len(shape) for p in parts):
        raise Unsupported("diff with a prepend or append that is not a tensor of x's rank")
    sizes = [cx.meta(p).shape[axis] for p in parts]
    out = cx.dtype_of(node)
    op = "ne" if out == "bool" else "sub"
    if any(cx.is_symbolic(s) for s in sizes):
        if prepend is None or append is not None or cx.is_symbolic(sizes[0]) or sizes[0] != 1:
            raise Unsupported("a diff along a symbolic dim without a prepend of one element")
        dims = ", ".join(cx.size(d) if i == axis else "1" for i, d in enumerate(shape))
        first = f"eq(reshape(arange({cx.size(shape[axis])}), shape=[{dims}]), 0)"
        x_ = cx.ref(x, out)
        earlier = f"where({first}, {cx.ref(prepend, out)}, roll({x_}, shift=1, axis={axis}))"
        return Expr(f"{op}({x_}, {earlier})")
    total = sum(int(s) for s in sizes)
    if total < 2:
        raise Unsupported("an empty diff")
    joined = (f"concat({', '.join(cx.ref(p, out) for p in parts)}, axis={axis})"
              if len(parts) > 1 else cx.ref(x, out))
    later = f"slice({joined}, axis={axis}, start=1, end={total})"
    earlier = f"slice({joined}, axis={axis}, start=0, end={total - 1})"
    return Expr(f"{op}({later}, {earlier})")


def _layer_norm_text(cx, node, x, shape, weight, bias, eps) -> str:
    if list(shape) != [cx.meta(x).shape[-1]] or not isinstance(shape[0], int):
        raise Unsupported("layer_norm over more than the last dim")
    out = cx.dtype_of(node if not isinstance(cx.meta(node), (list, tuple)) else x)
    # A layer_norm without a weight (bias) is one with ones (zeros): OLMo's, MPT's.
    last = f"[{cx.size(cx.meta(x).shape[-1])}]"
    w = _filled(1.0, out, last) if weight is None else cx.ref(weight, out)
    b = _filled(0.0, out, last) if bias is None else cx.ref(bias, out)
    return f"layer_norm({cx.ref(x, out)}, {w}, {b}, eps={_lit(float(eps))})"


@lowering(aten.layer_norm.default)
def _layer_norm(cx, node):
    x, shape = node.args[0], node.args[1]
    weight, bias = _arg(node, 2, "weight"), _arg(node, 3, "bias")
    eps = _arg(node, 4, "eps", 1e-5)
    return Expr(_layer_norm_text(cx, node, x, shape, weight, bias, eps))


@lowering(aten.native_layer_norm.default)
def _native_layer_norm(cx, node):
    cx.only_first_output(node)
    x, shape, weight, bias, eps = node.args[:5]
    return Tuple0(_layer_norm_text(cx, node, x, shape, weight, bias, eps))


@lowering(aten._native_batch_norm_legit_no_training.default, aten.batch_norm.default)
def _batch_norm(cx, node):
    """An eval batch norm, as PyTorch's CPU kernel computes it: per channel (dim 1) alpha =
    weight / sqrt(var + eps) and beta = bias - mean * alpha, then x * alpha + beta, the channel
    values shaped [C, 1, ...] against x's dims after it. A half x (with half or f32 statistics)
    is taken in f32 and rounded once."""
    legit = node.target is not aten.batch_norm.default
    if legit:
        cx.only_first_output(node)
    elif _arg(node, 5, "training", False):
        raise Unsupported("a batch norm in training (of the batch's statistics)")
    x, weight, bias, mean, var = node.args[:5]
    eps = _arg(node, 6 if legit else 7, "eps")
    if mean is None or var is None:
        raise Unsupported("a batch norm without running statistics")
    shape, out = cx.meta(x).shape, cx.dtype_of(x)
    stats = cx.dtype_of(mean)
    if len(shape) < 2 or not isinstance(eps, (int, float)) or \
            any(cx.dtype_of(v) != stats for v in (weight, bias, var) if v is not None) or \
            not (out == stats or (out in _HALF and stats == "f32")) or \
            stats not in _FLOAT:
        raise Unsupported("a batch norm of those dtypes or shapes")
    alpha = f"div(1.0, sqrt(add({cx.ref(var, 'f32')}, {_lit(float(eps))})))"
    if weight is not None:
        alpha = f"mul({alpha}, {cx.ref(weight, 'f32')})"
    beta = f"mul({cx.ref(mean, 'f32')}, {alpha})"
    beta = f"sub({cx.ref(bias, 'f32')}, {beta})" if bias is not None else f"neg({beta})"
    channel = "[" + ", ".join([cx.size(shape[1])] + ["1"] * (len(shape) - 2)) + "]"
    text = cx.ref(x, "f32")
    text = f"add(mul({text}, reshape({alpha}, shape={channel})), reshape({beta}, shape={channel}))"
    text = text if out == "f32" else f"cast({text}, to={out})"
    return Tuple0(text) if legit else Expr(text)


@lowering(aten.group_norm.default, aten.native_group_norm.default)
def _group_norm(cx, node):
    """group_norm(x [N, C, ...], G, weight, bias, eps): each of x[n]'s G groups of C/G channels,
    with all their positions, normalised by its mean and biased variance (a layer_norm of x viewed
    [N, G, C/G * ...] with no weight), then scaled and shifted per channel. A half x is taken in
    f32 and rounded once, as PyTorch's CPU kernel does."""
    native = node.target is aten.native_group_norm.default
    x = node.args[0]
    if native:  # (x, weight, bias, N, C, HxW, group, eps) -> (y, mean, rstd)
        cx.only_first_output(node)
        weight, bias, groups, eps = node.args[1], node.args[2], node.args[6], node.args[7]
    else:
        groups, weight, bias = node.args[1], _arg(node, 2, "weight"), _arg(node, 3, "bias")
        eps = _arg(node, 4, "eps", 1e-5)
    shape, out = cx.meta(x).shape, cx.dtype_of(x)
    if out not in _FLOAT or len(shape) < 2 or \
            any(v is not None and cx.dtype_of(v) not in (out, "f32") for v in (weight, bias)):
        raise Unsupported(f"a group norm of {out}")
    if any(cx.is_symbolic(d) for d in shape[1:]) or cx.merged(shape[0]):
        raise Unsupported("a group norm with a symbolic channel or spatial dim, or a batch of "
                          "merged dims")
    chans = int(shape[1])
    if not isinstance(groups, int) or groups < 1 or chans % groups or \
            not isinstance(eps, (int, float)):
        raise Unsupported(f"a group norm of {groups} groups of {chans} channels (PyTorch raises)")
    rows = chans // groups * math.prod(int(d) for d in shape[2:])
    if rows == 0:
        raise Unsupported("a group norm of an empty tensor")
    grouped = f"[{cx.size(shape[0])}, {groups}, {rows}]"
    text = f"reshape({cx.ref(x, 'f32')}, shape={grouped})"
    text = f"layer_norm({text}, {_filled(1.0, 'f32', f'[{rows}]')}, " \
           f"{_filled(0.0, 'f32', f'[{rows}]')}, eps={_lit(float(eps))})"
    text = f"reshape({text}, shape={cx.shape(x)})"
    channel = "[" + ", ".join([str(chans)] + ["1"] * (len(shape) - 2)) + "]"
    if weight is not None:
        text = f"mul({text}, reshape({cx.ref(weight, 'f32')}, shape={channel}))"
    if bias is not None:
        text = f"add({text}, reshape({cx.ref(bias, 'f32')}, shape={channel}))"
    text = text if out == "f32" else f"cast({text}, to={out})"
    return Tuple0(text) if native else Expr(text)


@lowering(aten._weight_norm.default)
def _weight_norm(cx, node):
    """_weight_norm(v, g, dim): v * (g / norm), the norm the 2-norm of v over every dim but
    `dim` (kept; over all of them where dim is -1), as torch.nn.utils' weight_norm makes a
    weight (wav2vec2's positional convolution). A half v is taken in f32 and rounded once."""
    v, g, dim = node.args[0], node.args[1], _arg(node, 2, "dim", 0)
    shape, out = cx.meta(v).shape, cx.dtype_of(node)
    if any(cx.dtype_of(t) not in _FLOAT for t in (v, g, node)) or not shape:
        raise Unsupported(f"a weight norm of {cx.dtype_of(v)} by {cx.dtype_of(g)}")
    rank = len(shape)
    if not isinstance(dim, int) or not -1 <= dim < rank:
        raise Unsupported(f"a weight norm along dim {dim} of a tensor of rank {rank}")
    vf = cx.ref(v, "f32")
    squares = f"mul({vf}, {vf})"
    for axis in range(rank):
        if axis != dim:
            squares = f"sum({squares}, axis={axis}, keepdim=true)"
    text = f"mul({vf}, div({cx.ref(g, 'f32')}, sqrt({squares})))"
    return Expr(text if out == "f32" else f"cast({text}, to={out})")


@lowering(aten.rms_norm.default)
def _rms_norm_op(cx, node):
    """rms_norm over the last dim. With no weight (DiffLlama's head norm, no affine), a weight
    of ones; with no eps, f32's epsilon (2^-23), as PyTorch takes for f32 and the half types."""
    x, shape = node.args[0], node.args[1]
    weight, eps = _arg(node, 2, "weight"), _arg(node, 3, "eps")
    if list(shape) != [cx.meta(x).shape[-1]]:
        raise Unsupported("rms_norm over more than the last dim")
    dtype = cx.dtype_of(x)
    if dtype not in _FLOAT:
        raise Unsupported(f"rms_norm of {dtype}")
    if weight is None:
        weight_text = _filled(1.0, dtype, f"[{cx.size(cx.meta(x).shape[-1])}]")
    else:
        weight_text = cx.ref(weight)
    eps = 2.0**-23 if eps is None else float(eps)
    return Expr(f"rms_norm({cx.ref(x)}, {weight_text}, eps={_lit(eps)})")


def _rms_norm(cx, node):
    """The RMSNorm pattern `w * (x * rsqrt(mean(x^2, -1, keepdim) + eps))` (LLaMA's), with the
    casts around it, as one rms_norm; None if `node` is not its last mul."""
    def is_op(n, *targets):
        return isinstance(n, Node) and n.op == "call_function" and n.target in targets

    for w, scaled in (node.args, node.args[::-1]):
        if not isinstance(w, Node) or len(cx.meta(w).shape) != 1:
            continue
        scaled = skip_identity(cx, scaled)
        if not is_op(scaled, aten.mul.Tensor):
            continue
        for x, r in (scaled.args, scaled.args[::-1]):
            r = skip_identity(cx, r)
            if not is_op(r, aten.rsqrt.default):
                continue
            add = r.args[0]
            if not is_op(add, aten.add.Tensor, aten.add.Scalar) or not isinstance(add.args[1], float):
                continue
            if len(add.args) > 2 or add.kwargs.get("alpha", 1) != 1:
                continue  # mean + alpha * eps: not the pattern (its eps is not add's literal)
            mean = add.args[0]
            if not is_op(mean, aten.mean.dim) or list(mean.args[1]) not in ([-1], [len(cx.meta(mean).shape) - 1]):
                continue
            if len(mean.args) < 3 or not mean.args[2]:
                continue
            square = mean.args[0]
            if not is_op(square, aten.pow.Tensor_Scalar) or square.args[1] != 2:
                continue
            if skip_identity(cx, square.args[0]) is not skip_identity(cx, x):
                continue
            xs = skip_identity(cx, x)
            if cx.merged(cx.meta(xs).shape[-1]):
                continue  # kiln would normalise over the merged dim's last factor alone
            dtype = cx.dtype_of(node)
            if cx.dtype_of(xs) != dtype or cx.dtype_of(w) != dtype:
                continue
            if cx.meta(w).shape[0] != cx.meta(xs).shape[-1]:
                continue
            return Expr(f"rms_norm({cx.ref(xs)}, {cx.ref(w)}, eps={_lit(float(add.args[1]))})")
    return None


# -- layout ------------------------------------------------------------------------------------

@lowering(aten.view.default, aten.reshape.default, aten._unsafe_view.default,
          aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
          aten.flatten.using_ints, aten.unflatten.int, aten.reshape_as.default,
          aten.view_as.default)
def _reshape(cx, node):
    x = node.args[0]
    if list(cx.meta(x).shape) == list(cx.meta(node).shape):
        return Alias(x)
    return Expr(f"reshape({cx.ref(x)}, shape={cx.shape(node)})")


@lowering(aten.permute.default, aten.transpose.int, aten.t.default, aten.swapaxes.default)
def _permute(cx, node):
    x = node.args[0]
    rank = len(cx.meta(x).shape)
    if node.target is aten.permute.default:
        perm = [d % rank for d in node.args[1]]
    elif rank < 2:
        perm = list(range(rank))  # t() of a vector or scalar, transpose(0, 0): the tensor itself
    else:
        a, b = (0, 1) if node.target is aten.t.default else (node.args[1] % rank, node.args[2] % rank)
        perm = list(range(rank))
        perm[a], perm[b] = perm[b], perm[a]
    if perm == list(range(rank)):
        return Alias(x)
    shape = list(cx.meta(x).shape)
    if any(cx.merged(d) for d in shape):
        # A merged dim (batch * heads) moves as its factors, in their order: the same elements
        # in the same order along it (Llama 4's router scores, [B*S, E] to [E, B*S]).
        first = [_kiln_axis(cx, shape, i) for i in range(len(shape))]
        perm = [first[p] + j for p in perm for j in range(len(cx.merged(shape[p]) or [0]))]
    return Expr(f"permute({cx.ref(x)}, dims={perm})")


@lowering(aten.expand.default, aten.expand_as.default)
def _expand(cx, node):
    x = node.args[0]
    if list(cx.meta(x).shape) == list(cx.meta(node).shape):
        return Alias(x)
    return Expr(f"expand({cx.ref(x)}, shape={cx.shape(node)})")


@lowering(aten.repeat.default)
def _repeat(cx, node):
    """x.repeat(r0, ..., rk): x (ones prepended to k + 1 dims) with a new dim of r_i before each
    dim, expanded and merged: reshape, expand, reshape. A count may be a symbolic size (BLOOM's
    alibi.repeat(batch, 1, 1)), and a dim a merged one, written as its factors."""
    return _repeated(cx, node, node.args[0], list(node.args[1]))


@lowering(aten.tile.default)
def _tile(cx, node):
    """x.tile(dims): a repeat, the counts with ones prepended to x's rank (DINOv3's rotary
    angles)."""
    x, dims = node.args[0], list(node.args[1])
    return _repeated(cx, node, x, [1] * (len(cx.meta(x).shape) - len(dims)) + dims)


def _repeated(cx, node, x, given: list):
    counts = []
    for r in given:
        r = r.meta.get("val") if isinstance(r, Node) else r
        if isinstance(r, bool) or not isinstance(r, (int, torch.SymInt)) or \
                (isinstance(r, int) and r < 1):
            raise Unsupported(f"repeat {given}")
        counts.append(r)
    shape = list(cx.meta(x).shape)
    if len(counts) < len(shape):
        raise Unsupported(f"repeat {given}")
    shape = [1] * (len(counts) - len(shape)) + shape

    def one(r):
        return not cx.is_symbolic(r) and int(r) == 1

    if all(one(r) for r in counts):
        return Alias(x) if len(shape) == len(cx.meta(x).shape) else \
            Expr(f"reshape({cx.ref(x)}, shape={cx.shape(node)})")
    split, wide = [], []
    for r, d in zip(counts, shape):
        dims = cx.merged(d) or [cx.size(d)]
        split += dims if one(r) else ["1"] + dims
        wide += dims if one(r) else [cx.size(r)] + dims
    return Expr(f"reshape(expand(reshape({cx.ref(x)}, shape=[{', '.join(split)}]), "
                f"shape=[{', '.join(wide)}]), shape={cx.shape(node)})")


def _positions(cx, node):
    """n when `node` is a constant (a buffer) holding 0..n-1 along one axis, else None."""
    value = cx.constant(node)
    if value is None or value.dtype not in (torch.int32, torch.int64) or value.dim() == 0:
        return None
    if sum(1 for d in value.shape if d != 1) > 1:
        return None
    flat = value.reshape(-1)
    if not torch.equal(flat, torch.arange(flat.numel(), dtype=flat.dtype)):
        return None
    return flat.numel()


def _dims_text(cx, shape, axis=None, replace=()) -> str:
    """A shape as kiln text, its dim `axis` replaced by the sizes `replace`; a merged dim (a
    product of kiln dims) is written as its factors."""
    dims = []
    for i, d in enumerate(shape):
        dims += [str(r) for r in replace] if i == axis else (cx.merged(d) or [cx.size(d)])
    return "[" + ", ".join(dims) + "]"


def _kiln_axis(cx, shape, axis: int) -> int:
    """PyTorch's dim `axis` of `shape` as kiln's: each merged dim before it is its factors."""
    return axis + sum(len(cx.merged(d) or [d]) - 1 for d in list(shape)[:axis])


def _within(start: int, end, size: int) -> tuple[int, int]:
    """A slice's fixed bounds (`end` None for the dim's end) as PyTorch takes them along a dim of
    `size`: a negative one counted from the end, both clamped to 0..size."""
    start = max(0, min(size, start + size if start < 0 else start))
    end = size if end is None else max(0, min(size, end + size if end < 0 else end))
    return start, end


def _strided_slice(cx, node, x, axis, start, end, step) -> str:
    """x[..., start:end:step, ...] along a dim of fixed size: the window of `count` whole steps
    as [count, step], its first column (GPT-J's x[..., ::2] and x[..., 1::2])."""
    shape = cx.meta(x).shape
    size = shape[axis]
    if cx.is_symbolic(size) or not isinstance(step, int) or step < 1 or \
            not isinstance(start, int) or not (end is None or isinstance(end, int)):
        raise Unsupported("a slice with a step along a symbolic dim or with symbolic bounds")
    size = int(size)
    start, end = _within(start, end, size)
    count = -(-(end - start) // step)
    if count < 1:
        raise Unsupported("an empty slice")
    text, k = cx.ref(x), _kiln_axis(cx, shape, axis)
    whole = min(size - start, count * step)  # the last step may be cut short by the dim's end
    if whole < count * step:
        count_whole = whole // step
        if count_whole < 1:
            return f"slice({text}, axis={k}, start={start}, end={start + 1})"
        head = _strided_text(cx, shape, axis, text, start, count_whole, step)
        last = start + count_whole * step
        tail = f"slice({text}, axis={k}, start={last}, end={last + 1})"
        return f"concat({head}, {tail}, axis={k})"
    return _strided_text(cx, shape, axis, text, start, count, step)


def _strided_text(cx, shape, axis, text, start, count, step) -> str:
    window, k = text, _kiln_axis(cx, shape, axis)
    if start != 0 or count * step != int(shape[axis]):
        window = f"slice({text}, axis={k}, start={start}, end={start + count * step})"
    grouped = f"reshape({window}, shape={_dims_text(cx, shape, axis, (count, step))})"
    first = f"slice({grouped}, axis={k + 1}, start=0, end=1)"
    return f"reshape({first}, shape={_dims_text(cx, shape, axis, (count,))})"


@lowering(aten.stack.default)
def _stack(cx, node):
    """stack(tensors, dim): each tensor with a dim of 1 at `dim`, joined along it."""
    tensors, dim = node.args[0], _arg(node, 1, "dim", 0)
    out = cx.meta(node).shape
    axis = dim % len(out)
    if len(tensors) > 64 * 64:
        raise Unsupported("a stack of more than 4096 tensors")
    if any(not isinstance(t, Node) for t in tensors):
        raise Unsupported("a stack of values that are not tensors")
    one = _dims_text(cx, out, axis, (1,))
    dtype = cx.dtype_of(node)
    return Expr(_joined([f"reshape({cx.ref(t, dtype)}, shape={one})" for t in tensors], axis))


@lowering(aten.repeat_interleave.self_int)
def _repeat_interleave(cx, node):
    """repeat_interleave(x, r, dim) along a dim of fixed size d: [.., d, 1, ..] expanded to
    [.., d, r, ..], read as [.., d * r, ..] (GPT-J's sin and cos); along a merged dim alike,
    its factors in place of d."""
    x, repeats = node.args[0], node.args[1]
    dim = _arg(node, 2, "dim")
    shape = cx.meta(x).shape
    if dim is None or not shape:
        raise Unsupported("a repeat_interleave of the flattened tensor")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise Unsupported("a repeat_interleave by a symbolic or tensor count")
    axis = dim % len(shape)
    if any(cx.merged(d) for i, d in enumerate(shape) if i != axis):
        raise Unsupported("a repeat_interleave of a tensor with merged dims")
    factors = cx.merged(shape[axis])
    if factors:
        # Along a merged dim (a mixture of experts' tokens, [B*S, H], each repeated for its k
        # experts): [B, S, 1, H] expanded to [B, S, r, H], which kiln holds as [B*S*r, H].
        pre = [cx.size(d) for d in shape[:axis]]
        post = [cx.size(d) for d in shape[axis + 1:]]
        one = "[" + ", ".join(pre + factors + ["1"] + post) + "]"
        wide = "[" + ", ".join(pre + factors + [str(repeats)] + post) + "]"
        return Expr(f"reshape(expand(reshape({cx.ref(x)}, shape={one}), shape={wide}), "
                    f"shape={cx.shape(node)})")
    if cx.is_symbolic(shape[axis]):
        raise Unsupported("a repeat_interleave along a symbolic dim")
    d = int(shape[axis])
    split = f"reshape({cx.ref(x)}, shape={_dims_text(cx, shape, axis, (d, 1))})"
    wide = f"expand({split}, shape={_dims_text(cx, shape, axis, (d, repeats))})"
    return Expr(f"reshape({wide}, shape={_dims_text(cx, shape, axis, (d * repeats,))})")


@lowering(aten.slice.Tensor)
def _slice(cx, node):
    x = node.args[0]
    sink = _sink_softmax(cx, node)
    if sink is not None:
        return Expr(sink)
    merged = cx.has_merged(x)
    if not merged and _positions(cx, x) is not None and _arg(node, 2, "start", 0) in (0, None) and \
            _arg(node, 4, "step", 1) == 1:
        # BERT's position_ids[:, :S]: a buffer of positions sliced to the sequence is arange(S).
        dtype = cx.dtype_of(node)
        shape = cx.meta(node).shape
        axis = _arg(node, 1, "dim", 0) % len(shape)
        n = cx.size(shape[axis])
        arange = f"arange({n})" if dtype == "i64" else f"arange({n}, dtype={dtype})"
        return Expr(arange if len(shape) == 1 else f"reshape({arange}, shape={cx.shape(node)})")
    shape = cx.meta(x).shape
    axis = _arg(node, 1, "dim", 0) % len(shape)
    start, end = _bound(cx, _arg(node, 2, "start", None)), _bound(cx, _arg(node, 3, "end", None))
    step = _arg(node, 4, "step", 1)
    start = 0 if start is None else start
    if step != 1:
        return Expr(_strided_slice(cx, node, x, axis, start, end, step))
    size = shape[axis]
    if start == 0 and (end is None or (isinstance(end, int) and end >= 2**62)):
        return Alias(x)
    if start == 0 and isinstance(end, sympy.Expr) and not end.is_Integer:
        # x[..., :S] of a dim of size S, or of a size the end is never below (Doge's mask
        # sliced to the keys' length): x itself.
        over = end - _size_expr(cx, size)
        ranges = cx.ranges(over)
        if over == 0 or (ranges is not None and bound_sympy(over, ranges).lower >= 0):
            return Alias(x)
    if merged and not (isinstance(start, int) and isinstance(end, (int, type(None)))):
        raise Unsupported("a slice with a symbolic start or end of a tensor with a merged dim")
    k = _kiln_axis(cx, shape, axis)
    if not isinstance(start, int) or not (end is None or isinstance(end, int)):
        band = _band_window(cx, node)
        return Expr(band if band is not None else _window(cx, node, x, axis, start))
    if cx.is_symbolic(size):
        # kiln slices a symbolic dim only in a window every size of its range holds.
        lo = cx.smallest(size)
        if start < 0 or end < 0 or end > lo or start >= end:
            raise Unsupported(f"a slice {start}..{end} along a symbolic dim whose sizes start at {lo}")
        return Expr(f"slice({cx.ref(x)}, axis={k}, start={start}, end={end})")
    size = int(size)
    start, end = _within(start, end, size)
    if start == 0 and end == size:
        return Alias(x)
    if end <= start:
        raise Unsupported("an empty slice")
    return Expr(f"slice({cx.ref(x)}, axis={k}, start={start}, end={end})")


# _safe_softmax is not one: a row of -inf logits (the sink too) is zeros there, NaN here.
_SOFTMAXES = (aten._softmax.default, aten.softmax.int)


def _sink_softmax(cx, node) -> str | None:
    """softmax(cat([x, s], -1), -1)[..., :-1], s of one column (GPT-OSS's attention sinks: a
    logit of each head's own that takes a share of the weights and is dropped), its logits less
    their maximum or not: the weights of x's columns, computed from x and s with no tensor one
    column wider than x (kiln's dims are symbols or constants, and S + 1 is neither). None where
    `node` is no such slice."""
    if _arg(node, 2, "start", 0) not in (0, None) or _arg(node, 4, "step", 1) != 1:
        return None
    src = node.args[0]
    if not (isinstance(src, Node) and src.op == "call_function" and src.target in _SOFTMAXES):
        return None
    rank = len(cx.meta(src).shape)
    if rank == 0 or _arg(node, 1, "dim", 0) % rank != rank - 1 or src.args[1] % rank != rank - 1:
        return None
    logits = src.args[0]
    if isinstance(logits, Node) and logits.op == "call_function" and \
            logits.target is aten.sub.Tensor and isinstance(logits.args[1], Node):
        # Less the row's maximum (max.dim's values, or amax), kept: the same softmax.
        m = logits.args[1]
        if m.op == "call_function" and m.target is operator.getitem and m.args[1] == 0:
            m = m.args[0]
        dims = _arg(m, 1, "dim", None) if m.op == "call_function" else None
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        if m.target in (aten.max.dim, aten.amax.default) and m.args[0] is logits.args[0] and \
                len(dims) == 1 and isinstance(dims[0], int) and \
                dims[0] % rank == rank - 1 and bool(_arg(m, 2, "keepdim", False)) and \
                len(logits.args) == 2 and "alpha" not in logits.kwargs:
            logits = logits.args[0]
    if not (isinstance(logits, Node) and logits.op == "call_function" and
            logits.target in (aten.cat.default, aten.concat.default) and
            len(logits.args[0]) == 2 and _arg(logits, 1, "dim", 0) % rank == rank - 1):
        return None
    x, s = logits.args[0]
    xs, ss = cx.meta(x).shape, cx.meta(s).shape
    end = _bound(cx, _arg(node, 3, "end", None))
    if (cx.has_merged(x) or cx.has_merged(s)) and (
            cx.merged(xs[-1]) or any(str(a) != str(b) for a, b in zip(xs[:-1], ss[:-1]))):
        return None  # kiln's dims of x and s would not meet where PyTorch's do
    if len(xs) != rank or len(ss) != rank or cx.is_symbolic(ss[-1]) or int(ss[-1]) != 1 or \
            not (end == -1 or (end is not None and not isinstance(end, int) and
                               cx.is_symbolic(xs[-1]) and end == cx.expr(xs[-1])) or
                 (isinstance(end, int) and not cx.is_symbolic(xs[-1]) and end == int(xs[-1]))):
        return None
    out = cx.dtype_of(src)
    if out not in _FLOAT:
        raise Unsupported(f"softmax into {out}")
    # In f32 (as PyTorch's softmax of a half type is), rounded once.
    xv = cx.let(cx.ref(x, out) if out == "f32" else f"cast({cx.ref(x, out)}, to=f32)")
    sv = cx.let(cx.ref(s, out) if out == "f32" else f"cast({cx.ref(s, out)}, to=f32)")
    m = cx.let(f"maximum(max({xv}, axis=-1, keepdim=true), {sv})")
    e = cx.let(f"exp(sub({xv}, {m}))")
    weights = f"div({e}, add(sum({e}, axis=-1, keepdim=true), exp(sub({sv}, {m}))))"
    return weights if out == "f32" else f"cast({weights}, to={out})"


def _dim_value(name: str, dtype: str) -> str:
    """The size of kiln dim `name` as a [1] tensor of `dtype`: one past the last position of
    arange(name)."""
    arange = f"arange({name})" if dtype == "i64" else f"arange({name}, dtype={dtype})"
    return f"add({_last_along(arange, 0)}, 1)"


# PyTorch's sizes divided by a whole number (`S // 2`, `S % 3`), as its symbolic shapes write
# them, and kiln's integer ops of the same rounding (Python's, which sizes, never negative, and
# a positive divisor leave alike).
_SIZE_DIVISIONS = {"FloorDiv": "floor_divide", "CleanDiv": "floor_divide", "Mod": "remainder",
                   "PythonMod": "remainder"}


def size_text(cx, expr, parts=None, whole=None) -> str:
    """A size `expr` that is a polynomial with integer coefficients of kiln dims and of sizes
    divided by a positive whole number (`S - 1`, `2 * B * S`, `S // 2 + 1`, `S % 3`) as a
    rank-0 i64 tensor: each dim's value from _dim_value, each division kiln's floor_divide or
    remainder of its size's value, multiplied and summed. Else Unsupported, naming the size
    `whole` (default `expr`). `parts` maps the symbols that stand for divisions already written
    to their text."""
    parts = dict(parts or {})
    whole = expr if whole is None else whole
    for e in sympy.preorder_traversal(expr):  # the outermost division first
        op = _SIZE_DIVISIONS.get(type(e).__name__)
        if op is None or len(e.args) != 2:
            continue
        a, b = e.args
        if not (b.is_Integer and int(b) > 0):
            raise Unsupported(f"a size {whole} as a value (kiln divides sizes by a positive "
                              "whole number)")
        stands = sympy.Dummy()
        parts[stands] = f"{op}({size_text(cx, a, parts, whole)}, {int(b)})"
        return size_text(cx, expr.xreplace({e: stands}), parts, whole)
    syms = sorted(expr.free_symbols, key=str)
    names = [None if sym in parts else cx.symbols.get(str(sym)) for sym in syms]
    if any(sym not in parts and (name is None or name not in cx.dims)
           for sym, name in zip(syms, names)):
        raise Unsupported(f"a size {whole} as a value: a symbol that is no kiln dim")
    try:
        poly = sympy.Poly(sympy.expand(expr), *syms)
    except sympy.PolynomialError:
        poly = None
    if poly is None or not all(c.is_Integer for c in poly.coeffs()):
        raise Unsupported(f"a size {whole} as a value (kiln takes sums of products of dims)")
    terms, constant = [], 0
    for powers, coeff in poly.terms():
        factors = [parts[sym] if sym in parts else _dim_value(name, "i64")
                   for sym, name, k in zip(syms, names, powers) for _ in range(k)]
        if not factors:
            constant = int(coeff)
            continue
        term = factors[0]
        for f in factors[1:]:
            term = f"mul({term}, {f})"
        terms.append(term if coeff == 1 else f"mul({term}, {int(coeff)})")
    text = terms[0]
    for term in terms[1:]:
        text = f"add({text}, {term})"
    if constant:
        text = f"add({text}, {constant})"
    return f"reshape({text}, shape=[])"


def _bound(cx, v):
    """A slice's start or end: None, an int, or a symbolic one's sympy expression (an int where
    the dims' ranges decide it, as MPT's Max(0, 1 - S) is 0)."""
    if isinstance(v, Node):
        v = v.meta.get("val")
    if isinstance(v, torch.SymInt):
        expr = cx.expr(v)
        return int(expr) if expr.is_number else expr
    return v


def _window(cx, node, x, axis, start) -> str:
    """x[..., start:start + n, ...] along a dim of fixed size M where the start or the size n is
    symbolic (MPT's alibi[..., M - S:], the last S of M): the rows arange(n) + start of an
    embedding whose table is x with that axis first. For a float x, or an integer or bool one
    whose values f32 holds exactly (within +-2^24: a constant's, or as _int_range bounds them;
    BigBird's token_type_ids buffer[:, :S]), taken in f32 and cast back; `start` of the form
    a + b * s (s one kiln dim, a and b integers), the window inside the dim at every size of
    the ranges."""
    shape = cx.meta(x).shape
    dtype = cx.dtype_of(x)
    if cx.is_symbolic(shape[axis]):
        raise Unsupported("a slice with a symbolic start or end along a symbolic dim")
    table = None
    if dtype not in _FLOAT:
        value = cx.constant(x)
        bounds = (int(value.min()), int(value.max())) if value is not None and \
            value.numel() else _int_range(cx, x)
        if bounds is None or not -2**24 <= bounds[0] <= bounds[1] <= 2**24:
            article = "an" if dtype.startswith("i") else "a"
            raise Unsupported(f"a slice with a symbolic start or end of {article} {dtype} "
                              "tensor whose values f32 may not hold (kiln gathers floats)")
        table = f"cast({cx.ref(x)}, to=f32)"
    n = cx.meta(node).shape[axis]
    ids, n_text = _window_rows(cx, int(shape[axis]), n, start)
    if table is None:
        both = _window_of_window(cx, x, axis, ids, n_text)
        if both is not None:
            return both
    rows = _rows_along(cx, x, axis, ids, n_text, "a slice with a symbolic start or end", table)
    return rows if table is None else f"cast({rows}, to={dtype})"


def _window_rows(cx, size: int, n, start) -> tuple[str, str]:
    """The positions of a window of `n` (a size) from `start` (an int, None for 0, or sympy)
    along a dim of fixed `size`, as kiln text of shape [n], and n's text. A negative start counts
    from the end, as PyTorch's; Unsupported unless the start has the form _inside takes and the
    window lies inside the dim at every size of the ranges."""
    offset = sympy.Integer(start or 0) if isinstance(start, (int, type(None))) else start
    count = _size_expr(cx, n)
    ranges = cx.ranges(sympy.Tuple(offset, count))
    if ranges is None:
        raise Unsupported(f"a slice from {offset} of {count}: a size that is no kiln dim")
    if bool(bound_sympy(offset, ranges).upper < 0):
        offset = offset + size
    _inside(offset, count, size, ranges)
    n_text = cx.size(n)
    return _shifted(cx, f"arange({n_text})", offset), n_text


def _window_of_window(cx, x, axis: int, ids: str, n_text: str) -> str | None:
    """A window along `axis` (its rows `ids`, kiln text of shape [n_text]) of `x`, itself a
    window with a symbolic start or end along another dim of a float constant whose dims are all
    fixed (MiniMax's diagonal_decay[:, :, :S, :S]): one embedding whose table is the constant
    with both dims first and merged into rows, at ids `i * M + j` for the rows i of x's window and
    j of this one ([n0, n1]). None where x is no such window, or one this cannot take (a start
    of no form _inside takes: x's window is then left to its own lowering, a kiln embedding or
    PyTorch, and this window is of its result, as _rows_along takes it)."""
    if not (isinstance(x, Node) and x.op == "call_function" and x.target is aten.slice.Tensor and
            _arg(x, 4, "step", 1) == 1):
        return None
    c = x.args[0]
    shape = cx.meta(c).shape
    if cx.constant(c) is None or cx.dtype_of(c) not in _FLOAT or \
            cx.has_merged(c) or any(cx.is_symbolic(d) for d in shape):
        return None
    first = _arg(x, 1, "dim", 0) % len(shape)
    start, end = _bound(cx, _arg(x, 2, "start", None)), _bound(cx, _arg(x, 3, "end", None))
    fixed = (int, type(None))
    if first == axis or (isinstance(start, fixed) and isinstance(end, fixed)):
        return None  # a window of fixed bounds along the first dim: a kiln slice, the table
    size = int(shape[first])
    try:
        rows, first_text = _window_rows(cx, size, cx.meta(x).shape[first], start)
    except Unsupported:
        return None
    width = int(shape[axis])
    pairs = f"add(mul(reshape({rows}, shape=[{first_text}, 1]), {width}), " \
            f"reshape({ids}, shape=[1, {n_text}]))"
    others = [i for i in range(len(shape)) if i not in (first, axis)]
    order = [first, axis] + others
    rest = 1
    for i in others:
        rest *= int(shape[i])
    table = cx.ref(c)
    if order != list(range(len(shape))):
        table = f"permute({table}, dims={order})"
    table = f"reshape({table}, shape=[{size * width}, {rest}])"
    out = f"embedding({table}, {pairs})"
    moved = [first_text, n_text] + [str(int(shape[i])) for i in others]
    out = f"reshape({out}, shape=[{', '.join(moved)}])"
    if order != list(range(len(shape))):
        out = f"permute({out}, dims={[order.index(i) for i in range(len(shape))]})"
    return out


def _rows_along(cx, x, axis: int, ids: str, n_text: str, what: str,
                table: str | None = None) -> str:
    """The slices of float `x` along `axis` at positions `ids` (kiln text: an integer tensor of
    shape [n], `n_text` its size), in their order: an embedding whose table is x (or `table`,
    kiln text of x's shape) with that axis first. Unsupported, naming `what`, where x's other
    dims are merged or hold a symbolic dim beside others."""
    shape = cx.meta(x).shape
    others = [i for i in range(len(shape)) if i != axis]
    if cx.merged(shape[axis]) or any(cx.merged(shape[i]) for i in others):
        raise Unsupported(f"{what} of a tensor with merged dims")
    symbolic = [i for i in others if cx.is_symbolic(shape[i])]
    fixed = 1
    for i in others:
        fixed *= 1 if i in symbolic else int(shape[i])
    if len(symbolic) > 1 or (symbolic and fixed != 1):
        raise Unsupported(f"{what} of a tensor whose other dims hold a symbolic one and others")
    width = cx.size(shape[symbolic[0]]) if symbolic else str(fixed)
    order = [axis] + others
    table = cx.ref(x) if table is None else table
    if axis != 0:
        table = f"permute({table}, dims={order})"
    if len(shape) != 2:
        table = f"reshape({table}, shape=[{cx.size(shape[axis])}, {width}])"
    rows = f"embedding({table}, {ids})"
    moved = "[" + ", ".join([n_text] + [cx.size(shape[i]) for i in others]) + "]"
    if len(shape) != 2:
        rows = f"reshape({rows}, shape={moved})"
    if axis != 0:
        rows = f"permute({rows}, dims={[order.index(i) for i in range(len(shape))]})"
    return rows


def _inside(offset, count, size: int, ranges) -> None:
    """Raises Unsupported unless `offset` (sympy) has the form a + b * s, s one kiln dim, and
    [offset, offset + count) lies inside [0, size) at every size of the ranges."""
    syms = list(offset.free_symbols)
    a = offset.subs({sym: 0 for sym in syms})
    b = offset.diff(syms[0]) if syms else sympy.Integer(0)
    if len(syms) > 1 or not (a.is_Integer and b.is_Integer) or \
            sympy.expand(offset - a - b * (syms[0] if syms else 0)) != 0:
        raise Unsupported(f"a slice from {offset} (kiln takes a + b * S)")
    if bound_sympy(offset, ranges).lower < 0 or \
            bound_sympy(offset + count, ranges).upper > size:
        raise Unsupported(f"a slice from {offset} of {count} that may leave the dim of {size}")


def _shifted(cx, text: str, offset) -> str:
    """An i64 tensor `text` plus `offset` (sympy: a number, or a size as size_text writes it)."""
    if offset == 0:
        return text
    return f"add({text}, {int(offset) if offset.is_Integer else size_text(cx, offset)})"


def _band(value: torch.Tensor):
    """(lo, hi) when a bool constant of shape [1, ..., 1, R, C] holds at [i, j] whether
    lo <= i - j <= hi (a causal buffer, `tril`, is lo = 0; GPT-Neo's local one, `tril` less
    `tril(-w)`, is 0..w-1), else None."""
    if value.dtype != torch.bool or value.dim() < 2 or any(d != 1 for d in value.shape[:-2]) or \
            not value.any():
        return None
    m = value.reshape(value.shape[-2:])
    d = torch.arange(m.shape[0])[:, None] - torch.arange(m.shape[1])[None, :]
    lo, hi = int(d[m].min()), int(d[m].max())
    return (lo, hi) if torch.equal(m, (d >= lo) & (d <= hi)) else None


def _band_window(cx, node):
    """A window (slices of step 1) of a bool band constant (see _band) as its compare of
    positions, rows arange(n) + r0 against columns arange(m) + c0: GPT-Neo's causal buffer
    `bias[:, :, :S, :S]`, with no copy of the buffer. None where `node` is no such window."""
    chain, base = [], node
    while isinstance(base, Node) and base.op == "call_function" and \
            base.target is aten.slice.Tensor and _arg(base, 4, "step", 1) == 1:
        chain.append(base)
        base = base.args[0]
    value = _lifted_constant(cx, base)
    if value is None:
        return None
    if ("band", base) not in cx.memo:  # a model's buffer: 2048 x 2048 is 0.1 s to read
        cx.memo[("band", base)] = _band(value)
    band = cx.memo[("band", base)]
    if band is None:
        return None
    rank = value.dim()
    offsets = [sympy.Integer(0)] * rank
    for piece in reversed(chain):
        axis = _arg(piece, 1, "dim", 0) % rank
        start = _bound(cx, _arg(piece, 2, "start", None))
        start = sympy.Integer(0) if start is None else sympy.sympify(start)
        size = cx.meta(piece.args[0]).shape[axis]
        ranges = cx.ranges(sympy.Tuple(start))
        if ranges is None:
            raise Unsupported(f"a slice from {start}: a size that is no kiln dim")
        if bool(bound_sympy(start, ranges).upper < 0):
            if cx.is_symbolic(size):
                raise Unsupported("a slice from a negative start along a symbolic dim")
            start = start + int(size)
        offsets[axis] += start
    shape = cx.meta(node).shape
    counts = [_size_expr(cx, d) for d in shape]
    for axis in range(rank):
        ranges = cx.ranges(sympy.Tuple(offsets[axis], counts[axis]))
        if ranges is None:
            raise Unsupported(f"a slice from {offsets[axis]}: a size that is no kiln dim")
        _inside(offsets[axis], counts[axis], int(value.shape[axis]), ranges)
    n, m = cx.size(shape[-2]), cx.size(shape[-1])
    rows = _shifted(cx, f"reshape(arange({n}), shape=[{n}, 1])", offsets[-2])
    cols = _shifted(cx, f"reshape(arange({m}), shape=[1, {m}])", offsets[-1])
    lo, hi = band
    apart = f"sub({rows}, {cols})"
    tests = ([f"ge({apart}, {lo})"] if lo > 1 - value.shape[-1] else []) + \
            ([f"le({apart}, {hi})"] if hi < value.shape[-2] - 1 else [])
    text = tests[0] if len(tests) == 1 else f"logical_and({tests[0]}, {tests[1]})" if tests \
        else f"eq({apart}, {apart})"
    return text if rank == 2 else f"reshape({text}, shape={cx.shape(node)})"


@lowering(aten.select.int)
def _select(cx, node):
    x, dim, index = node.args
    if not isinstance(index, int):  # t[:, buf] with buf a 0-d tensor: its item(), a value
        raise Unsupported("a select at a position computed in the program")
    shape = cx.meta(x).shape
    axis = dim % len(shape)
    if cx.is_symbolic(shape[axis]):
        if not -cx.smallest(shape[axis]) <= index < cx.smallest(shape[axis]):
            raise Unsupported(f"a select of {index} along a symbolic dim whose sizes start at "
                              f"{cx.smallest(shape[axis])}")
        if index < 0:  # x[:, -k]: rolled by k, the element is first
            return Expr(f"reshape(slice(roll({cx.ref(x)}, shift={-index}, axis={axis}), "
                        f"axis={axis}, start=0, end=1), shape={cx.shape(node)})")
    else:
        size = int(shape[axis])
        index = index + size if index < 0 else index
    return Expr(f"reshape(slice({cx.ref(x)}, axis={axis}, start={index}, end={index + 1}), "
                f"shape={cx.shape(node)})")


def _positions_along(cx, shape, axis: int) -> str:
    """The positions 0..n-1 of dim `axis` of `shape`, shaped to broadcast against it (size 1
    along every other dim)."""
    n = cx.size(shape[axis])
    if len(shape) == 1:
        return f"arange({n})"
    dims = ", ".join(n if i == axis else "1" for i in range(len(shape)))
    return f"reshape(arange({n}), shape=[{dims}])"


def _size_expr(cx, d):
    """A dim's size as sympy: a kiln dim's expression, or the whole number."""
    return cx.expr(d) if isinstance(d, torch.SymInt) else sympy.Integer(int(d))


def _from_start(cx, d, start):
    """A slice's start along a dim of size `d` (None, an int, or a sympy expression) as the
    position PyTorch starts at (sympy): a negative one counts from the end, clamped at 0 and at
    the size. Along a symbolic dim, Unsupported where the clamp depends on the size."""
    start = sympy.Integer(0) if start is None else sympy.sympify(start)
    if not start.is_Integer:
        return start
    size = _size_expr(cx, d)
    if size.is_Integer:
        return sympy.Integer(max(0, min(int(size), int(start) + int(size) if start < 0
                                        else int(start))))
    name = cx.size(d)
    lo, hi = cx.dims[name] if name in cx.dims else (1, 2**31 - 1)
    if 0 <= start <= lo:
        return start
    if start < 0 and -start <= lo:
        return start + size
    if start < 0 and -start >= hi:
        return sympy.Integer(0)
    raise Unsupported(f"a slice from {start} along a symbolic dim of sizes {lo}..{hi}, clamped "
                      "at some sizes only")


def _position_text(cx, expr) -> str:
    """A position along a dim (sympy: a number, or a polynomial of kiln dims such as S - 2) as a
    literal or a rank-0 i64 tensor."""
    return str(int(expr)) if expr.is_Integer else size_text(cx, expr)


@lowering(aten.select_scatter.default)
def _select_scatter(cx, node):
    """base with src written at `index` along `dim` (the functional form of `x[:, 0] = v`): a
    where of the positions along the dim equal to index (size + index for a negative one)."""
    base, src, dim, index = node.args
    shape = cx.meta(base).shape
    axis = dim % len(shape)
    size = _size_expr(cx, shape[axis])
    if not size.is_Integer and not -cx.smallest(shape[axis]) <= index < cx.smallest(shape[axis]):
        raise Unsupported(f"a select_scatter at {index} along a symbolic dim whose sizes start "
                          f"at {cx.smallest(shape[axis])}")
    at = sympy.Integer(index) + (size if index < 0 else 0)
    work = cx.dtype_of(node)
    value = cx.ref(src, work)
    if not _is_literal(value):
        value = f"reshape({value}, shape={_dims_text(cx, shape, axis, [1])})"
    return Expr(f"where(eq({_positions_along(cx, shape, axis)}, {_position_text(cx, at)}), "
                f"{value}, {cx.ref(base, work)})")


@lowering(aten.slice_scatter.default)
def _slice_scatter(cx, node):
    """base with src written at start..end along `dim` (the functional form of `x[:, 1:] = y`),
    for a step of 1. Along a dim of fixed size, from a fixed start: the concat of base's slices
    before and after and src. Otherwise a where of the positions start..end along the dim, of
    src's one value where src is a constant (`x[:, -2:] = 0`), or of x rolled by start - a where
    src is a window x[.., a:b, ..] of a tensor x of base's shape (BART's shift_tokens_right,
    `shifted[:, 1:] = ids[:, :-1]`): that window, of a size kiln cannot name (S - 1), is never
    made. Any other src, at fixed positions along a symbolic dim (`y[:, 1:3] = v`), is written
    position by position (_written_one_by_one)."""
    base, src = node.args[0], node.args[1]
    dim = _arg(node, 2, "dim", 0)
    start = _bound(cx, _arg(node, 3, "start", None))
    if _arg(node, 5, "step", 1) != 1:
        raise Unsupported("a slice_scatter with a step")
    shape = cx.meta(base).shape
    axis = dim % len(shape)
    size = _size_expr(cx, shape[axis])
    start = _from_start(cx, shape[axis], start)
    stop = sympy.expand(start + _size_expr(cx, cx.meta(src).shape[axis]))  # src is end - start
    work = cx.dtype_of(node)
    if start == stop:
        return Alias(base)
    if size.is_Integer and start.is_Integer and stop.is_Integer:
        b = cx.ref(base, work)
        parts = ([f"slice({b}, axis={axis}, start=0, end={start})"] if start > 0 else []) + \
            [cx.ref(src, work)] + \
            ([f"slice({b}, axis={axis}, start={stop}, end={size})"] if stop < size else [])
        return Expr(parts[0] if len(parts) == 1 else f"concat({', '.join(parts)}, axis={axis})")
    try:
        value, whole = _scattered(cx, src, base, axis, start, work)
    except Unsupported:
        if not (start.is_Integer and stop.is_Integer):
            raise
        return Expr(_written_one_by_one(cx, src, base, axis, int(start), int(stop), work))
    positions = _positions_along(cx, shape, axis)
    tests = ([f"ge({positions}, {_position_text(cx, start)})"] if start != 0 else []) + \
        ([f"lt({positions}, {_position_text(cx, stop)})"] if stop != size else [])
    if not tests:
        return Alias(whole) if whole is not None else Expr(value)
    where = tests[0] if len(tests) == 1 else f"logical_and({tests[0]}, {tests[1]})"
    return Expr(f"where({where}, {value}, {cx.ref(base, work)})")


def _written_one_by_one(cx, src, base, axis: int, start: int, stop: int, work: str) -> str:
    """base with src written at the fixed positions start..stop along a symbolic dim: a where
    per position, each reading src's slice of 1 there (up to 64 positions, within the dim's
    smallest size, base without merged dims)."""
    shape = cx.meta(base).shape
    if any(cx.merged(d) for d in shape):
        raise Unsupported("a slice_scatter of a tensor into a tensor with merged dims")
    if stop - start > 64 or stop > cx.smallest(shape[axis]):
        raise Unsupported(f"a slice_scatter of a tensor into positions {start}..{stop} along a "
                          f"symbolic dim whose sizes start at {cx.smallest(shape[axis])} (kiln "
                          "writes up to 64 positions one by one, within the smallest size)")
    positions = cx.let(_positions_along(cx, shape, axis))
    value = cx.let(cx.ref(src, work))
    out = cx.ref(base, work)
    for j in range(stop - start):
        one = f"slice({value}, axis={axis}, start={j}, end={j + 1})"
        out = f"where(eq({positions}, {start + j}), {one}, {out})"
    return out


def _scattered(cx, src, base, axis: int, start, work: str):
    """What a slice_scatter along a symbolic dim or from a symbolic start reads at each position
    it writes: src's value where src is a constant, or a window's tensor rolled into place; and
    the window's tensor where it is read as it is (no roll), else None."""
    shape = cx.meta(base).shape
    low = TABLE.get(src.target) if isinstance(src, Node) and src.op == "call_function" else None
    if low in _CONSTANT_OF and cx.dtype_of(src) == work:
        value = _CONSTANT_OF[low](src)
        if not isinstance(value, Node):
            return _filled(_number(value, work), work, cx.shape(base)), None
    window = skip_identity(cx, src)
    if not (isinstance(window, Node) and window.op == "call_function" and
            window.target is aten.slice.Tensor and _arg(window, 4, "step", 1) == 1 and
            _arg(window, 1, "dim", 0) % len(shape) == axis):
        raise Unsupported("a slice_scatter along a symbolic dim or from a symbolic start of a "
                          "tensor that is neither a constant nor a window of one of the same "
                          "shape")
    x = window.args[0]
    xshape = cx.meta(x).shape
    if len(xshape) != len(shape) or cx.dtype_of(x) != work or \
            any(_size_expr(cx, p) != _size_expr(cx, q) for p, q in zip(xshape, shape)):
        raise Unsupported("a slice_scatter of a window of a tensor of another shape or dtype")
    a = _from_start(cx, shape[axis], _bound(cx, _arg(window, 2, "start", None)))
    shift = sympy.expand(start - a)
    if not shift.is_Integer or abs(int(shift)) > 2**31 - 1:
        raise Unsupported(f"a slice_scatter at {start} of a window from {a} (kiln rolls by a "
                          "fixed shift)")
    value = cx.ref(x)
    return (value, x) if shift == 0 else (f"roll({value}, shift={int(shift)}, axis={axis})", None)


def _nonempty(cx, tensors) -> list:
    """A cat's operands less its empty ones (a dim of 0), which add nothing."""
    return [t for t in tensors if not (isinstance(t, Node) and 0 in tuple(cx.meta(t).shape))]


@lowering(aten.cat.default, aten.concat.default)
def _cat(cx, node):
    tensors = _nonempty(cx, node.args[0])
    dim = _arg(node, 1, "dim", 0)
    rank = len(cx.meta(node).shape)
    axis = dim % rank
    out = cx.dtype_of(node)
    if len(tensors) == 1:
        # The tensor itself (MiniMax's blocks of lightning attention, one where the sequence
        # fits a block), cast where an empty operand of another dtype promoted it.
        t = tensors[0]
        return Alias(t) if cx.dtype_of(t) == out else Expr(cx.ref(t, out))
    if cx.is_symbolic(cx.meta(node).shape[axis]):
        raise Unsupported("a concat along a symbolic dim")
    if len(tensors) > 64 * 64:
        raise Unsupported("a concat of more than 4096 tensors")
    return Expr(_joined([cx.ref(t, out) for t in tensors],
                        _kiln_axis(cx, cx.meta(node).shape, axis)))


@lowering(aten.gather.default)
def _gather(cx, node):
    """A gather from a constant whose elements are all one value (BERT's token_type_ids buffer,
    zeros) is that value in the index's shape; a gather of positions is _gathered_positions's."""
    x, _, index = node.args[:3]
    source = x
    # Through expands and conversions (RoBERTa's buffer reaches the gather through
    # to(device, dtype)); an integer constant's value is the same integer in every integer dtype.
    while isinstance(source, Node) and source.target in (
            aten.expand.default, aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout):
        source = source.args[0]
    value = cx.constant(source)
    if value is not None and value.is_floating_point() and source is not x and \
            cx.dtype_of(x) != cx.dtype_of(source):
        value = None  # a float constant converted: left to PyTorch
    if _arg(node, 3, "sparse_grad", False):
        raise Unsupported("a gather with sparse_grad")
    if value is None:
        return Expr(_gathered_positions(cx, node, x, node.args[1], index))
    if value.numel() == 0:
        raise Unsupported("a gather from an empty constant")
    first = value.reshape(-1)[0]
    if not torch.equal(value, torch.full_like(value, first.item())):
        raise Unsupported("no kiln op for it (a gather from a constant of several values)")
    dtype = cx.dtype_of(node)
    if dtype not in ("i32", "i64") or cx.dtype_of(index) != dtype:
        raise Unsupported("a gather of a float constant")
    return Expr(f"add(mul({cx.ref(index)}, 0), {int(first.item())})")


def _gathered_positions(cx, node, x, dim: int, index) -> str:
    """gather(x, dim, index) where index holds k positions along dim (a fixed k) and x's other
    sizes (MBart's `ids.gather(1, last)`, each row's last token; DeepSeek-V3's router weights
    at its topk's positions): each position's element, the max along the dim of where the
    positions match (-inf elsewhere: a signed zero and a NaN kept) for floats, the last of the
    running sum of where they match (0 elsewhere: exact) for integers, over the pairs
    [.., k, n, ..]. A position outside the dim gives -inf or 0, where PyTorch raises."""
    axis, pairs, at = _position_pairs(
        cx, x, dim, index, "a gather of a tensor", "no kiln op for it (kiln gathers a fixed "
        "number of positions along the dim, the index of the tensor's other sizes)")
    rank = len(cx.meta(x).shape)
    n = cx.size(cx.meta(x).shape[axis])
    dtype = cx.dtype_of(node)
    # x with a dim of 1 for the positions: [.., 1, n, ..]
    wide = f"reshape({cx.ref(x, 'i32' if dtype == 'bool' else None)}, shape={pairs(1, n)})"
    if dtype in _FLOAT:
        return f"max(where({at}, {wide}, -inf), axis={axis - rank})"
    picked = _last_along(f"cumsum(where({at}, {wide}, 0), axis={axis - rank})", axis - rank)
    picked = f"reshape({picked}, shape={cx.shape(node)})"
    return f"ne({picked}, 0)" if dtype == "bool" else picked


def _position_pairs(cx, x, dim, index, what: str, refusal: str):
    """(axis, pairs, at) for k positions `index` along dim `dim` of x (n long): `pairs(a, b)`
    is the kiln shape of x with [a, b] in place of the dim (merged dims as their factors), and
    `at` the bool [.., k, n, ..] of where each position is each of the n. Unsupported
    (`refusal`) unless the index holds a fixed number of positions and x's other sizes, or
    (`what`, the op of x) past kiln's dims or elements."""
    shape, ishape = cx.meta(x).shape, cx.meta(index).shape
    rank = len(shape)
    if rank == 0 or not isinstance(dim, int) or len(ishape) != rank or \
            cx.is_symbolic(ishape[dim % rank]) or any(
                i != dim % rank and _size_expr(cx, p) != _size_expr(cx, q)
                for i, (p, q) in enumerate(zip(shape, ishape))):
        raise Unsupported(refusal)
    if len(_kiln_dims(cx, shape)) > 5:
        raise Unsupported(f"{what} of more than 5 dims in kiln")
    axis = dim % rank
    n = cx.size(shape[axis])
    k = int(ishape[axis])

    def pairs(a, b) -> str:
        dims = []
        for i, d in enumerate(shape):
            dims += [str(a), str(b)] if i == axis else (cx.merged(d) or [cx.size(d)])
        return "[" + ", ".join(dims) + "]"

    cx.check_shape(list(ishape[:axis + 1]) + [shape[axis]] + list(ishape[axis + 1:]))  # pairs
    ones = ", 1" * (len(shape) - 1 - axis)
    positions = f"reshape(arange({n}), shape=[{n}{ones}])"
    ids = f"reshape({cx.ref(index, 'i64')}, shape={pairs(k, 1)})"
    return axis, pairs, f"eq({positions}, {ids})"


@lowering(aten.scatter.value)
def _scatter_value(cx, node):
    """scatter(x, dim, index, value) where index holds k positions along dim (a fixed k) and
    x's other sizes (DeepSeek-V3's group mask, `zeros.scatter_(1, group_idx, 1)`): the value
    where any of the k positions is the element's, x elsewhere. A position outside the dim
    writes nothing, where PyTorch raises."""
    x, dim, index, value = node.args[:4]
    if _arg(node, 4, "reduce", None) is not None:
        raise Unsupported("a scatter with a reduce")
    axis, _, at = _position_pairs(
        cx, x, dim, index, "a scatter into a tensor", "a scatter other than of a fixed number "
        "of positions along the dim, the index of the tensor's other sizes")
    rank = len(cx.meta(x).shape)
    hit = f"gt(max(cast({at}, to=f32), axis={axis - rank - 1}), 0.0)"  # any of the k
    dtype = cx.dtype_of(node)
    if isinstance(value, (bool, int, float)):
        value = _scattered_value(value, dtype)
    return Expr(f"where({hit}, {cx.ref(value, dtype)}, {cx.ref(x, dtype)})")


@lowering(aten.scatter.src)
def _scatter_src(cx, node):
    """scatter(x, dim, index, src) where index holds k positions along dim (a fixed k) and x's
    other sizes, src the index's shape and x's dtype (Llama 4's router scores,
    `full_like(logits, -inf).scatter_(1, top_index, top_value)`): where one of the k positions
    is the element's, src's value there, x elsewhere; where several are, the last one's, as
    PyTorch's CPU kernel writes them in order (PyTorch leaves which one wins unspecified). A
    position outside the dim writes nothing, where PyTorch raises. Floats are picked by a max
    over the k positions, integers and bool (as i32) by the last of a running sum in which the
    one position picked is the only term that is not 0: exact either way."""
    x, dim, index, src = node.args[:4]
    if _arg(node, 4, "reduce", None) is not None:
        raise Unsupported("a scatter with a reduce")
    dtype = cx.dtype_of(node)
    if not isinstance(src, Node) or cx.dtype_of(src) != dtype:
        raise Unsupported(f"a scatter of a tensor into {dtype} (kiln scatters a tensor of the "
                          "same dtype)")
    floats = dtype in _FLOAT
    as_type = "i32" if dtype == "bool" else None
    axis, pairs, at = _src_positions(cx, x, dim, index, src, "a scatter")
    shape = cx.meta(x).shape
    rank, k = len(shape), int(cx.meta(index).shape[axis])
    along = axis - rank - 1  # the k positions' dim of the pairs, from the end
    at = cx.let(at)
    # Each position's number j along [.., k, 1, ..]; the last j matching an element, -1 where
    # none does.
    ones = ["1"] * _kiln_axis(cx, shape, axis)
    numbers = (f"reshape(arange({k}, dtype=f32), "
               f"shape=[{', '.join(ones + [str(k), '1'] + ['1'] * (rank - 1 - axis))}])")
    last = cx.let(f"max(where({at}, {numbers}, -1.0), axis={along}, keepdim=true)")
    values = f"reshape({cx.ref(src, as_type)}, shape={pairs(k, 1)})"
    chosen = f"logical_and({at}, eq({numbers}, {last}))"
    if floats:
        picked = f"max(where({chosen}, {values}, -inf), axis={along})"
    else:
        summed = _last_along(f"cumsum(where({chosen}, {values}, 0), axis={along})", along)
        picked = f"reshape({summed}, shape={cx.shape(node)})"
    hit = f"reshape(ge({last}, 0.0), shape={cx.shape(node)})"
    out = f"where({hit}, {picked}, {cx.ref(x, as_type)})"
    return Expr(f"ne({out}, 0)" if dtype == "bool" else out)


def _src_positions(cx, x, dim, index, src, what: str):
    """_position_pairs of a scatter (`what`: "a scatter", "a scatter_add") of a tensor `src`,
    which must have the index's shape."""
    if [_size_expr(cx, d) for d in cx.meta(src).shape] != \
            [_size_expr(cx, d) for d in cx.meta(index).shape]:
        raise Unsupported(f"{what} of a tensor of another shape than its index")
    return _position_pairs(
        cx, x, dim, index, f"{what} into a tensor", f"{what} other than of a fixed number of "
        "positions along the dim, the index of the tensor's other sizes")


@lowering(aten.scatter_add.default, aten.scatter_reduce.two, aten.scatter.reduce)
def _scatter_add(cx, node):
    """x.scatter_add(dim, index, src) of f32 (scatter_reduce's "sum" with include_self, scatter's
    reduce="add") where index holds k positions along dim (a fixed k) and x's other sizes, src
    the index's shape: x, then src's value at each of the k positions that is the element's
    added in order, one at a time, as PyTorch's CPU kernel adds them: the last of the running
    sum (`cumsum`) of x followed by where(position matches, src, -0.0), -0.0 leaving every sum
    as it was; x itself where no position matches. kiln's running sum starts from +0.0, so a
    sum of -0.0s alone (x and every value added to it) comes out +0.0 where PyTorch keeps -0.0.
    A position outside the dim adds nothing, where PyTorch raises."""
    x, dim, index, src = node.args[:4]
    if node.target is aten.scatter_reduce.two:
        reduce = _arg(node, 4, "reduce")
        if reduce != "sum":
            raise Unsupported(f"a scatter_reduce of {reduce!r} (kiln adds: 'sum')")
        if _arg(node, 5, "include_self", True) is not True:
            raise Unsupported("a scatter_reduce without include_self")
    elif node.target is aten.scatter.reduce:
        reduce = _arg(node, 4, "reduce")
        if reduce != "add":
            raise Unsupported(f"a scatter with reduce={reduce!r} (kiln adds: 'add')")
    dtype = cx.dtype_of(node)
    if dtype != "f32" or not isinstance(src, Node) or cx.dtype_of(src) != dtype:
        raise Unsupported(f"a scatter_add into {dtype} (kiln adds f32 into f32, in order)")
    axis, pairs, at = _src_positions(cx, x, dim, index, src, "a scatter_add")
    shape = cx.meta(x).shape
    rank, k, n = len(shape), int(cx.meta(index).shape[axis]), cx.size(shape[axis])
    along = axis - rank - 1  # the k positions' dim of the pairs, from the end
    at = cx.let(at)
    added = f"where({at}, reshape({cx.ref(src)}, shape={pairs(k, 1)}), -0.0)"
    first = f"reshape({cx.ref(x)}, shape={pairs(1, n)})"
    running = f"cumsum(concat({first}, {added}, axis={along}), axis={along})"
    hit = f"gt(max(cast({at}, to=f32), axis={along}, keepdim=true), 0.0)"  # any of the k
    total = f"where({hit}, {_last_along(running, along)}, {first})"
    return Expr(f"reshape({total}, shape={cx.shape(node)})")


_INT_RANGE = {"i32": (-2**31, 2**31 - 1), "i64": (-2**63, 2**63 - 1)}


def _scattered_value(value, dtype: str):
    """A number scattered into a `dtype` tensor, as PyTorch converts it (any number into bool
    is its truth); one the dtype cannot hold, which PyTorch refuses, is Unsupported."""
    if dtype == "bool":
        return bool(value)
    if dtype in _INT_RANGE:
        lo, hi = _INT_RANGE[dtype]
        if isinstance(value, float) or not lo <= int(value) <= hi:
            raise Unsupported(f"a scatter of {value!r} into a {dtype} tensor")
        return int(value)
    value = float(value)
    # PyTorch's checked conversion refuses a finite value past the type's largest.
    largest = torch.finfo({"f32": torch.float32, **_TORCH_DTYPES}[dtype]).max
    if not math.isinf(value) and not math.isnan(value) and abs(value) > largest:
        raise Unsupported(f"a scatter of {value!r} into a {dtype} tensor (past its range)")
    return value


_MESHGRIDS = (aten.meshgrid.default, aten.meshgrid.indexing)


@lowering(*_MESHGRIDS)
def _meshgrid(cx, node):
    """meshgrid(tensors, indexing): a list, each getitem of it made by _meshgrid_piece."""
    _meshgrid_plan(cx, node)
    return Pieces(node)


def _meshgrid_plan(cx, node) -> tuple[list, str]:
    tensors = list(node.args[0])
    indexing = _arg(node, 1, "indexing", "ij")
    if indexing not in ("ij", "xy"):
        raise Unsupported(f"a meshgrid with indexing {indexing!r}")
    for t in tensors:
        if not isinstance(t, Node) or len(cx.meta(t).shape) != 1 or cx.has_merged(t):
            raise Unsupported("a meshgrid of other than 1-D tensors (of unmerged dims)")
    return tensors, indexing


def _meshgrid_piece(cx, src, index, node) -> str:
    """Output `index` of a meshgrid (BEiT's relative position index, from the window's
    positions): input `index` along its own dim of the grid ('xy' swaps the first two),
    expanded over the others."""
    tensors, indexing = _meshgrid_plan(cx, src)
    if not isinstance(index, int) or not 0 <= index < len(tensors):
        raise Unsupported(f"element {index!r} of a meshgrid")
    along = index
    if indexing == "xy" and len(tensors) >= 2 and index < 2:
        along = 1 - index
    n = cx.size(cx.meta(tensors[index]).shape[0])
    dims = ", ".join(n if i == along else "1" for i in range(len(tensors)))
    return f"expand(reshape({cx.ref(tensors[index])}, shape=[{dims}]), shape={cx.shape(node)})"


# A topk ranks each element against every other of its row: [.., n, n] comparisons.
_TOPK_LIMIT = 1024


@lowering(aten.topk.default)
def _topk(cx, node):
    """topk(x, k, dim, largest, sorted): its values and indices, each made by the getitem that
    reads it (_topk_piece)."""
    _topk_plan(cx, node)
    return Pieces(node)


def _topk_plan(cx, node):
    """(x, k, n, largest, axis) of a topk kiln runs: of a float x along a dim of fixed size n up
    to _TOPK_LIMIT, kiln's axis `axis` (each merged dim before it counted as its factors)."""
    x, k = node.args[0], _arg(node, 1, "k")
    dim, largest = _arg(node, 2, "dim", -1), _arg(node, 3, "largest", True)
    shape = list(cx.meta(x).shape)
    dtype = cx.dtype_of(x)
    if dtype not in _FLOAT:
        raise Unsupported(f"a topk of {dtype} (kiln ranks float tensors)")
    if not shape:
        raise Unsupported("a topk of a tensor of rank 0")
    if not isinstance(dim, int) or isinstance(dim, bool) or not -len(shape) <= dim < len(shape):
        raise Unsupported(f"a topk along dim {dim!r} of a tensor of rank {len(shape)}")
    dim %= len(shape)
    if cx.is_symbolic(shape[dim]):
        raise Unsupported("a topk along a symbolic dim")
    n = int(shape[dim])
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= n:
        raise Unsupported(f"a topk of {k!r} of {n} elements")
    if n > _TOPK_LIMIT:
        raise Unsupported(f"a topk of {n} elements (kiln ranks up to {_TOPK_LIMIT})")
    if len(_kiln_dims(cx, shape)) > 5:
        raise Unsupported("a topk of a tensor of more than 5 dims in kiln")
    cx.check_shape(shape + [n])  # the comparisons
    return x, k, n, bool(largest), _kiln_axis(cx, shape, dim)


def _topk_piece(cx, node, index: int) -> str:
    """Element `index` of topk `node`: its values (0) or their positions (1), i64.

    Each element's rank is the count of its row's elements before it: larger (smaller where
    largest=False), NaN above every number as PyTorch orders it, or equal (NaN equal to NaN)
    and at a lower position. The ranks are a permutation of 0..n-1; the element of rank r is
    the r-th of the result, its value read from x (a signed zero kept). Equal values are
    taken lowest position first, where PyTorch's order among them follows its selection
    algorithm (the values are the same). Along another dim than the last, x is permuted to put
    that dim last, and the result back."""
    x, k, n, largest, axis = _topk_plan(cx, node)
    dims = _kiln_dims(cx, cx.meta(x).shape)
    last = len(dims) - 1
    lead = dims[:axis] + dims[axis + 1:]
    shaped = lambda *sizes: "[" + ", ".join(lead + [str(d) for d in sizes]) + "]"
    xs = cx.ref(x)
    if axis != last:
        xs = cx.let(f"permute({xs}, dims={[i for i in range(last + 1) if i != axis] + [axis]})")
    xi = cx.let(f"reshape({xs}, shape={shaped(n, 1)})")  # element i along dim -2
    xj = cx.let(f"reshape({xs}, shape={shaped(1, n)})")  # element j along dim -1
    nan_i, nan_j = f"ne({xi}, {xi})", f"ne({xj}, {xj})"
    if largest:
        beyond = f"logical_or(gt({xj}, {xi}), logical_and({nan_j}, logical_not({nan_i})))"
    else:
        beyond = f"logical_or(lt({xj}, {xi}), logical_and({nan_i}, logical_not({nan_j})))"
    equal = f"logical_or(eq({xj}, {xi}), logical_and({nan_j}, {nan_i}))"
    earlier = f"lt(reshape(arange({n}), shape=[1, {n}]), reshape(arange({n}), shape=[{n}, 1]))"
    before = f"logical_or({beyond}, logical_and({equal}, {earlier}))"
    rank = f"reshape(sum(cast({before}, to=f32), axis=-1), shape={shaped(1, n)})"
    slot = cx.let(f"eq({rank}, reshape(arange({k}, dtype=f32), shape=[{k}, 1]))")  # [.., k, n]
    if index == 0:
        piece = f"max(where({slot}, {xj}, -inf), axis=-1)"
    else:
        piece = f"cast(sum(where({slot}, arange({n}, dtype=f32), 0.0), axis=-1), to=i64)"
    if axis == last:
        return piece
    return f"permute({piece}, dims={list(range(axis)) + [last] + list(range(axis, last))})"


@lowering(aten.embedding.default)
def _embedding(cx, node):
    weight, ids = node.args[0], node.args[1]
    if cx.dtype_of(ids) not in ("i32", "i64"):
        raise Unsupported("embedding ids that are not integers")
    return Expr(f"embedding({cx.ref(weight)}, {cx.ref(ids)})")


@lowering(aten.index_select.default)
def _index_select(cx, node):
    """x.index_select(dim, index): the slices of a float x at the positions `index` (of rank 0
    or 1), an embedding of x with that dim first (XGLM's sinusoidal positions). An index outside
    the dim gives zeros where PyTorch raises."""
    x, dim, index = node.args[0], node.args[1], node.args[2]
    dtype, shape = cx.dtype_of(x), cx.meta(x).shape
    if cx.dtype_of(index) not in ("i32", "i64"):
        raise Unsupported("an index_select by indices that are not integers")
    if dtype not in _FLOAT:
        article = "an" if dtype.startswith("i") else "a"
        raise Unsupported(f"an index_select of {article} {dtype} tensor (kiln gathers float "
                          "tensors)")
    if not shape:
        raise Unsupported("an index_select of a tensor of shape []")
    axis = dim % len(shape)
    ids = cx.ref(index)
    if not cx.meta(index).shape:
        ids = f"reshape({ids}, shape=[1])"
    if len(shape) == 2 and axis == 0:
        # Rows of a table: its ids' dim may be merged (XGLM's position_ids.view(-1), [B*S] held
        # as [B, S]), the rows then [B, S, D] as kiln holds [B*S, D].
        return Expr(f"embedding({cx.ref(x)}, {ids})")
    n = cx.meta(node).shape[axis]
    if cx.merged(n):
        raise Unsupported("an index_select by indices with merged dims of a tensor other than "
                          "a 2-D table's rows")
    return Expr(_rows_along(cx, x, axis, ids, cx.size(n), "an index_select"))


def _arange_axis(cx, arg):
    """(n, axis) when `arg` holds arange(n) along one axis (broadcast over the others): through
    unsqueezes, reshapes, `+ 0`, whole slices and same-dtype casts. Else None."""
    shape = list(cx.meta(arg).shape)
    node = arg
    while isinstance(node, Node) and node.op == "call_function":
        t = node.target
        # arange(n), or arange(0, n) and arange(0, n, 1) as a decomposed program writes it.
        if t is aten.arange.default or (t in (aten.arange.start, aten.arange.start_step) and
                                        node.args[0] == 0 and _arg(node, 2, "step", 1) == 1):
            n = cx.meta(node).shape[0]
            long = [i for i, d in enumerate(shape) if not (isinstance(d, int) and d == 1)]
            if len(long) == 1 and shape[long[0]] is n or (len(long) == 1 and shape[long[0]] == n):
                return n, long[0]
            if not long and (isinstance(n, int) and n == 1):
                return 1, None
            return None
        if t in (aten.unsqueeze.default, aten.view.default, aten.reshape.default,
                 aten._unsafe_view.default, aten.clone.default, aten.alias.default):
            node = node.args[0]
        elif t in (aten.add.Tensor,) and node.args[1] == 0:
            node = node.args[0]
        elif t is aten.slice.Tensor and _arg(node, 2, "start", 0) in (0, None) and \
                (_arg(node, 3, "end", None) is None or (isinstance(node.args[3], int) and node.args[3] >= 2**62)):
            node = node.args[0]
        elif t in (aten._to_copy.default, aten.to.dtype) and cx.dtype_of(node) == cx.dtype_of(node.args[0]):
            node = node.args[0]
        else:
            return None
    return None


def _lifted_constant(cx, arg):
    """The value of a constant `arg` reads (through lift_fresh_copy, clone, alias), else None."""
    while isinstance(arg, Node) and arg.op == "call_function" and arg.target in (
            aten.lift_fresh_copy.default, aten.clone.default, aten.alias.default):
        arg = arg.args[0]
    return cx.constant(arg)


def _take(cx, node, x, axis, picks, ids=None) -> str:
    """x[..., picks, ...] along `axis` for constant positions `picks` (a list of ints): slices of
    the runs of consecutive positions, joined. Past 64 runs, where `ids` (the node holding the
    positions) is given and x is float along a fixed dim: the rows of x at `ids`, an embedding
    (Swin's relative position bias table by its index)."""
    size = cx.meta(x).shape[axis]
    picks_given = picks
    if cx.is_symbolic(size):
        if any(p < 0 or p >= cx.smallest(size) for p in picks):
            raise Unsupported("an index along a symbolic dim past its smallest size")
    else:
        if any(p < -int(size) or p >= int(size) for p in picks):
            raise Unsupported("an index outside the dim (PyTorch raises)")
        picks = [p % int(size) for p in picks]
    runs = []
    for p in picks:
        if runs and runs[-1][1] == p:
            runs[-1][1] = p + 1
        else:
            runs.append([p, p + 1])
    if len(runs) > 64:
        if ids is None or cx.is_symbolic(size) or cx.dtype_of(x) not in _FLOAT:
            raise Unsupported("an index of more than 64 runs of positions")
        text = cx.ref(ids, "i64")  # more than 64 runs
        if len(cx.meta(ids).shape) != 1:  # positions of any shape, taken in order
            text = f"reshape({text}, shape=[{len(picks)}])"
        if min(picks_given) < 0:  # counting from the end, as PyTorch's
            text = _from_end(text, int(size))
        return _rows_along(cx, x, axis, text, str(len(picks)), "an index")
    pieces = [f"slice({cx.ref(x)}, axis={axis}, start={a}, end={b})" for a, b in runs]
    return pieces[0] if len(pieces) == 1 else f"concat({', '.join(pieces)}, axis={axis})"


# Nodes whose integer values are their first operand's (conversions, views, moves).
_SAME_VALUES = (aten.to.dtype, aten.to.device, aten.to.dtype_layout, aten._to_copy.default,
                torch.ops.prims.convert_element_type.default, aten.clone.default,
                aten.alias.default, aten.view.default, aten.reshape.default,
                aten._unsafe_view.default, aten.unsqueeze.default, aten.squeeze.dim,
                aten.expand.default, aten.permute.default, aten.slice.Tensor, aten.select.int)


def _int_range(cx, arg, depth: int = 0):
    """(lo, hi) holding every value of an integer or bool tensor, from the ops that made it (a
    mask, arange, a constant, conversions, views and picks of those, add, sub, mul and clamps of
    them, integer quotients and remainders), else None; None too where a value it bounds may
    have wrapped (a range past its tensor's dtype: `(arange(5) + 1) * 2**30` in i32)."""
    bounds = _int_range_of(cx, arg, depth)
    if bounds is not None and isinstance(arg, Node):
        limits = _INT_RANGE.get(cx.dtype_of(arg))
        if limits is not None and not limits[0] <= bounds[0] <= bounds[1] <= limits[1]:
            return None
    return bounds


def _int_range_of(cx, arg, depth: int):
    """_int_range's bounds, the dtype's range not yet checked."""
    if isinstance(arg, bool):
        return int(arg), int(arg)
    if isinstance(arg, int):
        return arg, arg
    if not isinstance(arg, Node) or depth > 32:
        return None
    if is_size(arg.meta.get("val")):
        val = arg.meta["val"]
        expr = cx.expr(val) if isinstance(val, torch.SymInt) else sympy.Integer(int(val))
        if expr.is_Integer:
            return int(expr), int(expr)
        ranges = cx.ranges(expr)
        if ranges is None:
            return None
        bounds = bound_sympy(expr, ranges)
        finite = bounds.lower.is_finite and bounds.upper.is_finite
        return (int(bounds.lower), int(bounds.upper)) if finite else None
    dtype = cx.dtype_of(arg)
    if dtype == "bool":
        return 0, 1  # a mask, computed or given
    if dtype not in ("i32", "i64"):
        return None
    value = cx.constant(arg)
    if value is not None:
        return (int(value.min()), int(value.max())) if value.numel() else None
    if arg.op != "call_function":
        return None
    t = arg.target
    low = TABLE.get(t)
    if low in _CONSTANT_OF:
        v = _CONSTANT_OF[low](arg)
        return (int(v), int(v)) if isinstance(v, (bool, int)) else None
    if t is aten.index.Tensor:  # elements of the indexed tensor
        return _int_range(cx, arg.args[0], depth + 1)
    if t is aten.neg.default:
        inner = _int_range(cx, arg.args[0], depth + 1)
        return None if inner is None else (-inner[1], -inner[0])
    if t in (aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default):
        given = [_arg(arg, 1, "min"), _arg(arg, 2, "max")] if t is aten.clamp.default else \
            [arg.args[1], None] if t is aten.clamp_min.default else [None, arg.args[1]]
        if any(v is not None and (isinstance(v, bool) or not isinstance(v, int))
               for v in given):
            return None
        # Unbounded, x's values span its dtype (ids from the caller clamped to at least 1).
        inner = _int_range(cx, arg.args[0], depth + 1) or _INT_RANGE[dtype]
        if given[0] is not None and given[1] is not None and given[0] > given[1]:
            return given[1], given[1]  # PyTorch gives max everywhere
        lo = inner[0] if given[0] is None else max(inner[0], given[0])
        hi = inner[1] if given[1] is None else min(inner[1], given[1])
        if lo > hi:  # x's values all past one bound: that bound everywhere
            v = given[0] if given[0] is not None and inner[1] < given[0] else given[1]
            return v, v
        return lo, hi
    if t in (aten.floor_divide.default, aten.floor_divide.Scalar, aten.div.Tensor_mode,
             aten.remainder.Scalar,
             aten.remainder.Tensor) or (t is aten.div.Scalar_mode and
                                        isinstance(arg.args[1], int)):
        a, b = (_int_range(cx, x, depth + 1) for x in arg.args[:2])
        if b is None or b[0] <= 0 <= b[1]:
            return None
        if t in (aten.remainder.Scalar, aten.remainder.Tensor):  # the divisor's sign, any a
            top = max(abs(b[0]), abs(b[1])) - 1
            return (0, top) if b[0] > 0 else (-top, 0)
        if a is None:
            return None
        floor = t in (aten.floor_divide.default, aten.floor_divide.Scalar)
        mode = arg.kwargs.get("rounding_mode", "floor" if floor else None)
        if mode not in ("floor", "trunc"):
            return None
        corners = [x // y if mode == "floor" or (x < 0) == (y < 0) else -(-x // y)
                   for x in a for y in b]  # monotone in each, b of one sign
        return min(corners), max(corners)
    if t is aten.arange.default:
        n = arg.args[0]
        n = n.meta.get("val") if isinstance(n, Node) else n
        top = cx.dims[cx.size(n)][1] if cx.is_symbolic(n) else int(n)
        return 0, top - 1
    if t in _SAME_VALUES:
        source = arg.args[0]
        if isinstance(source, Node) and cx.dtype_of(source) not in ("bool", "i32", "i64"):
            return None  # from a float: any value
        return _int_range(cx, source, depth + 1)
    if t in (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor) and _arg(arg, 2, "alpha", 1) == 1:
        a, b = (_int_range(cx, x, depth + 1) for x in arg.args[:2])
        if a is None or b is None:
            return None
        if t is aten.add.Tensor:
            return a[0] + b[0], a[1] + b[1]
        if t is aten.sub.Tensor:
            return a[0] - b[1], a[1] - b[0]
        corners = [x * y for x in a for y in b]
        return min(corners), max(corners)
    return None


@lowering(aten.argmax.default, aten.argmin.default)
def _argmax(cx, node):
    """argmax and argmin along one dim: the first position of the max or min
    (_first_extreme)."""
    x = node.args[0]
    dim, keepdim = _arg(node, 1, "dim"), _arg(node, 2, "keepdim", False)
    lowest = node.target is aten.argmin.default
    what = "an argmin" if lowest else "an argmax"
    if dim is None:
        raise Unsupported(f"{what} over all dims")
    shape = cx.meta(x).shape
    if not shape:
        raise Unsupported(f"{what} of a tensor of rank 0")
    axis = dim % len(shape)
    _check_positions(cx, shape[axis], what)
    if cx.dtype_of(x) == "bool":
        raise Unsupported(f"{what} of bool (PyTorch refuses it)")
    return Expr(_first_extreme(cx, x, axis, bool(keepdim), lowest))


def _first_extreme(cx, x, axis: int, keepdim: bool, lowest: bool) -> str:
    """The first position along `axis` of x's max (its min where `lowest`), i64: a max of the
    negated positions where x equals its max or is NaN (the first NaN, as PyTorch). A min is
    the max of -x for floats, of -1 - x for integers (which never wraps). A float is compared
    in its dtype. Integers are compared exactly, in rounds of f32 compares: a round keeps the
    positions whose value rounds to the largest (rounding never reorders), and the next compares
    what those positions hold less that largest, until the values left lie within +-2^24 (i32:
    two rounds, i64: three; one where the ops making x keep it within +-2^24). A bool is
    compared as 0 and 1 (of `not x` for a min)."""
    shape = cx.meta(x).shape
    k = axis - len(shape)
    dtype = cx.dtype_of(x)
    xs = cx.ref(x)
    if dtype == "bool":
        xv = cx.let(f"cast({f'logical_not({xs})' if lowest else xs}, to=f32)")
        top = f"max({xv}, axis={k}, keepdim=true)"
        return _first_hit(cx, f"eq({xv}, {top})", shape, axis, keepdim)
    if dtype in _FLOAT:
        xv = cx.let(f"neg({xs})" if lowest else xs)
        top = f"max({xv}, axis={k}, keepdim=true)"
        return _first_hit(cx, f"logical_or(eq({xv}, {top}), ne({xv}, {xv}))", shape, axis,
                          keepdim)
    bounds = _int_range(cx, x)
    if lowest:
        xs = cx.let(f"sub(-1, {xs})")
        bounds = None if bounds is None else (-1 - bounds[1], -1 - bounds[0])
    xf = f"cast({xs}, to=f32)"
    top = f"max({xf}, axis={k}, keepdim=true)"
    hit = f"eq({xf}, {top})"
    # The largest magnitude a round's values may have: the dtype's, then half a float's spacing
    # at that magnitude (24 significant bits), plus one where the rounded largest is 2^31 or
    # 2^63 and its cast back saturates one below.
    reach = 2**63 if dtype == "i64" else 2**31
    if bounds is not None:
        reach = max(abs(bounds[0]), abs(bounds[1]))
    rest = xs
    while reach >= 2**24:
        reach = 2 ** max(reach.bit_length() - 25, 0) + 1
        rest = f"sub({rest}, cast({top}, to={dtype}))"
        kept = f"where({hit}, cast({rest}, to=f32), -inf)"
        top = f"max({kept}, axis={k}, keepdim=true)"
        hit = f"logical_and({hit}, eq({kept}, {top}))"
    return _first_hit(cx, hit, shape, axis, keepdim)


def _check_positions(cx, n, what: str) -> None:
    """Refuses `what` along a dim of size `n` (its largest, where symbolic) of 2^24 or more:
    _first_hit compares positions in f32, exact below 2^24."""
    if (cx.dims[cx.size(n)][1] if cx.is_symbolic(n) else int(n)) >= 2**24:
        raise Unsupported(f"{what} along a dim of 2^24 or more (positions compared in f32)")


def _first_hit(cx, hit: str, shape, axis: int, keepdim: bool) -> str:
    """The smallest position along `axis` (of PyTorch's `shape`, every dim after it and the
    axis itself of kiln's own size, not merged) where the bool `hit` is true, as i64: the max of
    the negated positions there. The axis is named from the end, so merged dims before it (held
    as their factors) are read alike."""
    rank = len(shape)
    n = cx.size(shape[axis])
    along = ", ".join([n] + ["1"] * (rank - 1 - axis))
    positions = f"reshape(arange({n}, dtype=f32), shape=[{along}])"
    first = f"max(where({hit}, neg({positions}), -3.0e38), axis={axis - rank}, " \
            f"keepdim={'true' if keepdim else 'false'})"
    return f"cast(neg({first}), to=i64)"


@lowering(aten.max.dim, aten.min.dim)
def _max_dim(cx, node):
    """max(x, dim) and min(x, dim): their values and indices, each made by the getitem that
    reads it (_max_dim_piece)."""
    _max_dim_plan(cx, node)
    return Pieces(node)


def _max_dim_plan(cx, node):
    """(x, axis, keepdim) of a max.dim or min.dim kiln runs: of a float, integer or bool x,
    along a dim of fewer than 2^24 (positions compared in f32)."""
    x, dim = node.args[0], _arg(node, 1, "dim")
    keepdim = bool(_arg(node, 2, "keepdim", False))
    shape = cx.meta(x).shape
    if not shape or not isinstance(dim, int):
        raise Unsupported("a max or min along a dim of a tensor of rank 0")
    cx.check_shape(shape)
    axis = dim % len(shape)
    _check_positions(cx, shape[axis], "a max or min")
    return x, axis, keepdim


def _max_dim_piece(cx, node, index: int) -> str:
    """Element `index` of max.dim or min.dim `node`: the values (0), NaN where the row holds
    one, as PyTorch's; or their first positions (1), i64, a NaN's where the row holds one
    (_first_extreme). A float min is the max of -x negated; where a row's extreme is a zero held
    with both signs, its value may have the other sign than PyTorch's (the first one's). An
    integer row's value is the element at its first position: the last of the running sum of x
    where the position is that one, 0 elsewhere (exact). A bool row's max is whether any element
    is true, its min whether none is false."""
    x, axis, keepdim = _max_dim_plan(cx, node)
    shape = cx.meta(x).shape
    k = axis - len(shape)
    low = node.target is aten.min.dim
    kept = [d for i, d in enumerate(shape) if i != axis]
    if index == 1:
        if cx.dtype_of(x) in ("f32", "f16", "bf16", "bool"):
            return _first_extreme(cx, x, axis, keepdim, low)
        # An integer row's value reads these positions too: one let for both, so that the
        # rounds of compares run once (reshaped, kept dim or not: a bare name only renames).
        first = cx.let(_first_extreme(cx, x, axis, True, low))
        out = [1 if i == axis else d for i, d in enumerate(shape)] if keepdim else kept
        return f"reshape({first}, shape=[{', '.join(_kiln_dims(cx, out))}])"
    xs = cx.ref(x)
    if cx.dtype_of(x) in _FLOAT:
        top = f"max({f'neg({xs})' if low else xs}, axis={k}" \
              f"{', keepdim=true' if keepdim else ''})"
        return f"neg({top})" if low else top
    if cx.dtype_of(x) == "bool":
        any_of = f"ne(max(cast({f'logical_not({xs})' if low else xs}, to=f32), axis={k}" \
                 f"{', keepdim=true' if keepdim else ''}), 0.0)"
        return f"logical_not({any_of})" if low else any_of
    n = cx.size(shape[axis])
    along = ", ".join([n] + ["1"] * (len(shape) - 1 - axis))
    first = cx.let(_first_extreme(cx, x, axis, True, low))
    at = f"eq(reshape(arange({n}), shape=[{along}]), {first})"
    picked = _last_along(f"cumsum(where({at}, {xs}, 0), axis={k})", k)
    if keepdim:
        return picked
    return f"reshape({picked}, shape=[{', '.join(_kiln_dims(cx, kept))}])"


@lowering(aten.tril.default, aten.triu.default)
def _triangle(cx, node):
    """tril(x, k) and triu(x, k): x where its column less its row (the last two dims) is at
    most k (tril) or at least k (triu), zero (false) elsewhere whatever x holds there (Mamba-2's
    and Qwen3-Next's chunked scans)."""
    x, k = node.args[0], _arg(node, 1, "diagonal", 0)
    shape = cx.meta(x).shape
    if len(shape) < 2:
        raise Unsupported("a tril or triu of a tensor of fewer than 2 dims")
    if not isinstance(k, int) or isinstance(k, bool) or abs(k) >= 2**31:
        raise Unsupported(f"a tril or triu at diagonal {k!r}")
    r, c = cx.size(shape[-2]), cx.size(shape[-1])
    offset = f"sub(reshape(arange({c}), shape=[1, {c}]), reshape(arange({r}), shape=[{r}, 1]))"
    keep = f"{'le' if node.target is aten.tril.default else 'ge'}({offset}, {k})"
    dtype = cx.dtype_of(node)
    if dtype == "bool":
        return Expr(f"logical_and({cx.ref(x)}, {keep})")
    return Expr(f"where({keep}, {cx.ref(x)}, {'0' if dtype in ('i32', 'i64') else '0.0'})")


@lowering(aten.eye.default, aten.eye.m)
def _eye(cx, node):
    """eye(n) and eye(n, m): ones where the row is the column, zeros elsewhere (Qwen3-Next's
    chunked delta rule adds one to its triangular solve)."""
    shape = cx.meta(node).shape
    n, m = cx.size(shape[0]), cx.size(shape[1])
    dtype = cx.dtype_of(node)
    diagonal = f"eq(reshape(arange({n}), shape=[{n}, 1]), reshape(arange({m}), shape=[1, {m}]))"
    return Expr(diagonal if dtype == "bool" else f"cast({diagonal}, to={dtype})")


def _pick(cx, x, ids) -> str:
    """x[arange(B), ids]: row ids[b] of each x[b], as the max along dim 1 of x where the
    position is ids[b] and -inf elsewhere: the value itself, a signed zero or a NaN too (a
    negative id counts from the end; an id outside the dim gives -inf, where PyTorch raises)."""
    xshape = cx.meta(x).shape
    n = cx.size(xshape[1])
    ones = ", ".join(["1"] * (len(xshape) - 2))
    tail = f", {ones}" if ones else ""
    dtype = cx.dtype_of(ids)
    arange = f"arange({n})" if dtype == "i64" else f"arange({n}, dtype={dtype})"
    size = _dim_value(n, dtype) if cx.is_symbolic(xshape[1]) else n
    wrapped = _from_end(cx.ref(ids), size)
    at = f"eq(reshape({arange}, shape=[1, {n}{tail}]), " \
         f"reshape({wrapped}, shape=[{cx.size(xshape[0])}, 1{tail}]))"
    return f"max(where({at}, {cx.ref(x)}, -inf), axis=1)"


def _table_rows(cx, node) -> bool:
    """Whether `node` is table[ids]: x[ids] of a float x of fixed dims (2 or more) by integer
    ids computed in the graph, of any shape."""
    x, indices = node.args
    if len(indices) != 1 or not isinstance(indices[0], Node) or \
            _lifted_constant(cx, indices[0]) is not None:
        return False
    xshape = cx.meta(x).shape
    fixed = not any(cx.is_symbolic(d) for d in (xshape[:1] if len(xshape) == 2 else xshape))
    return len(xshape) >= 2 and fixed and \
        cx.dtype_of(x) in _FLOAT and cx.dtype_of(indices[0]) in ("i32", "i64")


def _kiln_dims(cx, shape) -> list:
    """A shape's kiln dims as text, a merged dim written as its factors."""
    return [f for d in shape for f in (cx.merged(d) or [cx.size(d)])]


_INDEX_FORMS = ("advanced indexing other than kiln's four forms (x[arange, arange, ...]; constant "
                "positions along one dim; table[ids]; x[arange(B), ids] with ids of shape [B])")


@lowering(aten.index.Tensor)
def _index(cx, node):
    """x[arange(n0)[:, None, ...], ..., arange(nk)[..., None]]: every dim of x indexed by its own
    positions, spread over the result's axes in order (transformers' padding-mask gather) is a
    reshape of x. x[:, :, [i, j, ...]] by constant positions along one dim (Falcon's multi-query
    split, `fused_qkv[..., [-2], :]`) is slices of x, joined; positions of several dims are
    taken in order and the result reshaped."""
    x, indices = node.args
    xshape = list(cx.meta(x).shape)
    out = list(cx.meta(node).shape)
    given = [k for k, i in enumerate(indices) if i is not None]
    if len(given) == 1 and given[0] == len(indices) - 1:
        axis = given[0]
        value = _lifted_constant(cx, indices[axis])
        if value is not None and value.numel() > 0 and \
                value.dtype in (torch.int64, torch.int32):
            # Positions of any shape (LeViT's attention_biases[:, attention_bias_idxs]) are
            # taken in order and the result reshaped.
            text = _take(cx, node, x, axis, [int(v) for v in value.reshape(-1)], indices[axis])
            return Expr(text if value.dim() == 1 else f"reshape({text}, shape={cx.shape(node)})")
        if _table_rows(cx, node):
            # table[ids] (GPT-J's embed_positions[position_ids]) is an embedding, a negative id
            # counting from the end as PyTorch's does. A table of more dims (a mixture of
            # experts' weights [E, O, I] at each token's expert ids) is one of rows [E, O * I],
            # the rows then reshaped.
            ids = _from_end(cx.ref(indices[0]), int(xshape[0]))
            if len(xshape) == 2:
                return Expr(f"embedding({cx.ref(x)}, {ids})")
            if len(_kiln_dims(cx, out)) > 6:
                raise Unsupported("a table's rows at ids of more than kiln's 6 dims in all")
            rows = math.prod(int(d) for d in xshape[1:])
            table = f"reshape({cx.ref(x)}, shape=[{int(xshape[0])}, {rows}])"
            return Expr(f"reshape(embedding({table}, {ids}), shape={cx.shape(node)})")
    if len(indices) == 2 and len(xshape) >= 2 and all(isinstance(i, Node) for i in indices) and \
            all(len(cx.meta(i).shape) == 1 for i in indices):
        # x[arange(B), ids], ids [B]: a classifier's last token, CLIP's pooled EOS token.
        found, rows = _arange_axis(cx, indices[0]), cx.meta(indices[1]).shape[0]
        same = lambda d: d is xshape[0] or d == xshape[0]
        if found is not None and found[1] == 0 and same(found[0]) and same(rows) and \
                cx.dtype_of(indices[1]) in ("i32", "i64") and not cx.merged(xshape[0]):
            if cx.dtype_of(x) not in _FLOAT:
                raise Unsupported(f"x[arange(B), ids] of {cx.dtype_of(x)} (kiln picks a row per "
                                  "batch entry from a float tensor)")
            return Expr(_pick(cx, x, indices[1]))
    if len(indices) != len(xshape) or any(i is None for i in indices):
        raise Unsupported(_INDEX_FORMS)
    last = -1
    for k, idx in enumerate(indices):
        found = _arange_axis(cx, idx)
        if found is None:
            raise Unsupported(_INDEX_FORMS)
        n, axis = found
        if not (n is xshape[k] or n == xshape[k]):
            raise Unsupported("advanced indexing by positions that do not cover the dim")
        if axis is not None:
            if axis <= last:
                raise Unsupported("advanced indexing that reorders dims")
            last = axis
    if int(math.prod(1 if cx.is_symbolic(d) else int(d) for d in out)) == 0:
        raise Unsupported("an empty index")
    return Expr(f"reshape({cx.ref(x)}, shape={cx.shape(node)})")


# -- attention ----------------------------------------------------------------------------------

def _repeat_kv_source(cx, arg):
    """x when `arg` is transformers' repeat_kv of x (unsqueeze(x, 2) -> expand -> reshape to
    [B, H_kv * n, S, D]): kiln's attention reads grouped heads in that order, with no copy."""
    node = arg
    if not (isinstance(node, Node) and node.op == "call_function" and
            node.target in (aten.reshape.default, aten._unsafe_view.default, aten.view.default)):
        return arg
    inner = skip_identity(cx, node.args[0])
    if not (isinstance(inner, Node) and inner.target is aten.expand.default):
        return arg
    unsq = inner.args[0]
    if not (isinstance(unsq, Node) and unsq.target is aten.unsqueeze.default and unsq.args[1] == 2):
        return arg
    src = unsq.args[0]
    s = list(cx.meta(src).shape)
    e = list(cx.meta(inner).shape)
    out = list(cx.meta(node).shape)
    if len(s) != 4 or len(e) != 5 or cx.is_symbolic(e[2]) or cx.is_symbolic(e[1]):
        return arg
    # [B, H_kv, n, S, D] -> [B, H_kv * n, S, D]: each kv head repeated n times in place, the
    # order grouped-query attention reads; any other merge is not repeat_kv.
    same = [a is b or a == b for a, b in zip(out, [e[0], int(e[1]) * int(e[2]), e[3], e[4]])]
    if len(out) != 4 or not all(same) or not all(a is b or a == b for a, b in zip(s, [e[0], e[1], e[3], e[4]])):
        return arg
    return src


def _attention(cx, node, q, k, v, mask, is_causal, scale, gqa, dropout):
    if dropout not in (0, 0.0, None):
        raise Unsupported("attention with dropout")
    out = cx.dtype_of(q)
    if out not in _FLOAT or cx.dtype_of(k) != out or cx.dtype_of(v) != out:
        raise Unsupported("attention of mixed or integer dtypes")
    k, v = _repeat_kv_source(cx, k), _repeat_kv_source(cx, v)
    qs, ks = list(cx.meta(q).shape), list(cx.meta(k).shape)
    if len(qs) < 3 or len(ks) < 3:
        raise Unsupported("attention without a heads axis")
    hq, hk = qs[-3], ks[-3]
    if cx.is_symbolic(hq) or cx.is_symbolic(hk) or int(hq) % int(hk) != 0:
        raise Unsupported("attention whose query heads are not a multiple of its key heads")
    if cx.is_symbolic(qs[-1]) or int(qs[-1]) > 256:
        raise Unsupported("attention with a head dim over 256 or symbolic")
    parts = [cx.ref(q), cx.ref(k), cx.ref(v)]
    if mask is not None:
        md = cx.dtype_of(mask)
        if md == "bool" or md == out:
            parts.append(f"mask={cx.ref(mask)}")
        else:
            parts.append(f"mask={cx.ref(mask, out)}")
    if scale is not None:
        parts.append(f"scale={_lit(float(scale))}")
    if is_causal:
        parts.append("causal=true")
    return f"attention({', '.join(parts)})"


@lowering(aten.scaled_dot_product_attention.default)
def _sdpa(cx, node):
    q, k, v = node.args[:3]
    return Expr(_attention(cx, node, q, k, v, _arg(node, 3, "attn_mask"),
                           _arg(node, 5, "is_causal", False), node.kwargs.get("scale"),
                           node.kwargs.get("enable_gqa", False), _arg(node, 4, "dropout_p", 0.0)))


def _sdpa_tuple(cx, node):
    cx.only_first_output(node)
    q, k, v = node.args[:3]
    kw = node.kwargs
    if node.target is _FLASH_CPU:
        causal, mask, scale = _arg(node, 4, "is_causal", False), kw.get("attn_mask"), kw.get("scale")
        dropout = _arg(node, 3, "dropout_p", 0.0)
    elif node.target is _EFFICIENT:
        mask, causal = _arg(node, 3, "attn_bias"), _arg(node, 6, "is_causal", False)
        dropout, scale = _arg(node, 5, "dropout_p", 0.0), kw.get("scale")
    else:
        mask, causal, dropout = kw.get("attn_mask"), _arg(node, 4, "is_causal", False), _arg(node, 3, "dropout_p", 0.0)
        scale = kw.get("scale")
    return Tuple0(_attention(cx, node, q, k, v, mask, causal, scale, True, dropout))


_FLASH_CPU = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu").default
_EFFICIENT = aten._scaled_dot_product_efficient_attention.default
TABLE[_FLASH_CPU] = _sdpa_tuple
TABLE[_EFFICIENT] = _sdpa_tuple
TABLE[aten._scaled_dot_product_flash_attention.default] = _sdpa_tuple
TABLE[aten._scaled_dot_product_cudnn_attention.default] = _sdpa_tuple


def _piece_bounds(cx, node) -> tuple[int, list]:
    """(axis, [(start, end), ...]) of a split, split_with_sizes, chunk, unbind or tensor_split's
    pieces (tensor_split's indices clamped to the dim as PyTorch's: a piece may be empty)."""
    x = node.args[0]
    shape = cx.meta(x).shape
    if not shape:
        raise Unsupported(f"{node.target} of a scalar")
    if node.target is aten.unbind.int:
        axis = _arg(node, 1, "dim", 0) % len(shape)
    else:
        axis = _arg(node, 2, "dim", 0) % len(shape)
    if cx.is_symbolic(shape[axis]):
        raise Unsupported(f"{node.target} along a symbolic dim")
    size = int(shape[axis])
    if node.target is aten.unbind.int:
        sizes = [1] * size
    elif node.target is aten.split_with_sizes.default:
        sizes = list(node.args[1])
    elif node.target is aten.tensor_split.indices:
        cuts = list(node.args[1])
        if not all(isinstance(c, int) for c in cuts):
            raise Unsupported(f"{node.target} at symbolic indices")
        # Python's slices x[a:b] between the cuts: empty where b <= a (cuts going down).
        cuts = [0] + [min(max(c + size if c < 0 else c, 0), size) for c in cuts] + [size]
        return axis, [(a, max(a, b)) for a, b in zip(cuts, cuts[1:])]
    elif node.target is aten.tensor_split.sections:
        n = node.args[1]
        if not isinstance(n, int) or n < 1:
            raise Unsupported(f"{node.target} into {n!r} sections")
        sizes = [size // n + (1 if i < size % n else 0) for i in range(n)]
    else:
        n = node.args[1]
        if not isinstance(n, int) or n < 1:
            raise Unsupported(f"{node.target} by {n!r}")
        each = -(-size // n) if node.target is aten.chunk.default else n
        sizes = [min(each, size - i) for i in range(0, size, each)]
    if not all(isinstance(n, int) for n in sizes) or sum(sizes) != size:
        raise Unsupported(f"{node.target} with sizes {sizes} along a dim of {size}")
    bounds, start = [], 0
    for n in sizes:
        bounds.append((start, start + n))
        start += n
    return axis, bounds


_SPLITS = (aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default, aten.unbind.int,
           aten.tensor_split.indices, aten.tensor_split.sections)


@lowering(*_SPLITS)
def _split(cx, node):
    _piece_bounds(cx, node)
    return Pieces(node)


@lowering(operator.getitem)
def _getitem(cx, node):
    src, index = node.args
    if isinstance(src, Node) and src.op == "call_function" and src.target in _SPLITS:
        # A piece of a split reads the split tensor itself, whatever group the split is in.
        axis, bounds = _piece_bounds(cx, src)
        if not isinstance(index, int) or not -len(bounds) <= index < len(bounds):
            raise Unsupported(f"piece {index!r} of {src.target}")
        start, end = bounds[index]
        if start == end:
            raise Unsupported(f"an empty piece of {src.target} (kiln holds no empty tensor)")
        x = src.args[0]
        rank = len(cx.meta(x).shape)
        if (start, end) == (0, int(cx.meta(x).shape[axis])) and src.target is not aten.unbind.int:
            return Alias(x)
        # Counted from the end, kiln's axis is PyTorch's with merged dims before it.
        piece = f"slice({cx.ref(x)}, axis={axis - rank}, start={start}, end={end})"
        if src.target is aten.unbind.int:
            piece = f"reshape({piece}, shape={cx.shape(node)})"
        return Expr(piece)
    if isinstance(src, Node) and src.op == "call_function" and src.target in _MESHGRIDS:
        return Expr(_meshgrid_piece(cx, src, index, node))
    if isinstance(src, Node) and src.op == "call_function" and \
            src.target in (aten.max.dim, aten.min.dim):
        if index not in (0, 1):
            raise Unsupported(f"element {index!r} of a max or min along a dim")
        return Expr(_max_dim_piece(cx, src, index))
    if isinstance(src, Node) and src.op == "call_function" and src.target is aten.topk.default:
        if index not in (0, 1):
            raise Unsupported(f"element {index!r} of a topk")
        return Expr(_topk_piece(cx, src, index))
    if not isinstance(src, Node) or index != 0 or not isinstance(cx.meta(src), (list, tuple)):
        raise Unsupported("an element of a tuple other than the first")
    return Alias(src)


# -- complex values -------------------------------------------------------------------------
# A complex64 tensor is held in kiln as the f32 tensor view_as_real gives: its own shape and a last
# dim of 2, the real part first (Llama 4's rotary: polar angles, view_as_complex of the queries and
# keys, their products, view_as_real). Only COMPLEX's lowerings read or make one; a complex tensor
# never enters or leaves a kiln graph (emit_graph leaves the node that would pass it to PyTorch).

COMPLEX: dict[Any, Callable] = {}
COMPLEX_TRIVIAL: set = set()  # complex lowerings that only move or relabel pairs


def complex_lowering(*ops, trivial: bool = False):
    def register(fn):
        for op in ops:
            COMPLEX[op] = fn
        if trivial:
            COMPLEX_TRIVIAL.add(fn)
        return fn
    return register


def is_complex(node) -> bool:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return isinstance(val, torch.Tensor) and val.is_complex()


def touches_complex(node) -> bool:
    """Whether `node` reads or makes a complex tensor: COMPLEX lowers it, never TABLE."""
    return is_complex(node) or any(is_complex(a) for a in node.all_input_nodes)


def lowering_for(node):
    """The lowering of `node`'s op (COMPLEX's where it touches a complex tensor), else None."""
    return (COMPLEX if touches_complex(node) else TABLE).get(node.target)


def complex_reason(node) -> str:
    """Why kiln cannot run a node touching a complex tensor whose op COMPLEX does not lower."""
    return (f"{str(node.target)} of a complex tensor (kiln lowers complex64 through polar, "
            "view_as_complex, view_as_real, mul, add, sub, views, slices and concats)")


def _complex_operands(cx, node) -> None:
    """Unsupported unless each tensor `node` reads or makes is complex64 or of a dtype kiln
    names, none with merged dims, each complex one within kiln's limits as pairs."""
    for n in [node] + list(node.all_input_nodes):
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        if val.is_complex():
            if val.dtype != torch.complex64:
                raise Unsupported(f"a {str(val.dtype).replace('torch.', '')} tensor (kiln holds "
                                  "complex64 as pairs of f32)")
            cx.check_shape(list(val.shape) + [2])
        else:
            cx.dtype_of(n)
        if cx.has_merged(n):
            raise Unsupported("a complex tensor with merged dims (a product of dims)")


def _pairs_shape(cx, node, extra: int = 2) -> str:
    """A tensor's kiln shape with a last dim of `extra` added: a complex one's pairs, or a
    part's [.., 1]."""
    shape = cx.shape(node)
    return f"[{extra}]" if shape == "[]" else f"{shape[:-1]}, {extra}]"


def _parts(cx, z: str):
    """The real and imaginary parts of pairs `z` (a name), each [.., 1]."""
    return (cx.let(f"slice({z}, axis=-1, start=0, end=1)"),
            cx.let(f"slice({z}, axis=-1, start=1, end=2)"))


def _as_part(cx, x) -> str:
    """A real operand of complex arithmetic as f32 shaped [.., 1] against pairs: PyTorch
    promotes it to complex64 with a zero imaginary part."""
    if not isinstance(x, Node):
        if isinstance(x, complex):
            raise Unsupported("a Python complex number in complex arithmetic")
        return _lit(float(x))
    if not cx.meta(x).shape:
        return cx.ref(x, "f32")
    return f"reshape({cx.ref(x, 'f32')}, shape={_pairs_shape(cx, x, 1)})"


@complex_lowering(aten.view_as_complex.default, aten.view_as_real.default, aten.clone.default,
                  aten.contiguous.default, aten.alias.default, aten.detach.default,
                  aten.lift_fresh_copy.default, aten._to_copy.default, aten.to.dtype,
                  trivial=True)
def _complex_same(cx, node):
    """view_as_complex of f32 [.., 2], view_as_real of a complex tensor, and copies of one:
    the same pairs."""
    _complex_operands(cx, node)
    x = node.args[0]
    if node.target is aten.view_as_complex.default and cx.dtype_of(x) != "f32":
        raise Unsupported(f"a view_as_complex of {cx.dtype_of(x)} (kiln's complex is complex64)")
    if not is_complex(x) and node.target is not aten.view_as_complex.default or \
            not is_complex(node) and node.target is not aten.view_as_real.default:
        raise Unsupported(f"{node.target} between a complex tensor and a real one")
    if node.kwargs.get("memory_format") not in (None, torch.preserve_format,
                                                torch.contiguous_format):
        raise Unsupported("a copy of a complex tensor in another memory format")
    cx.pairs_ref(x)
    return Alias(x)


@complex_lowering(aten.polar.default)
def _polar(cx, node):
    """polar(abs, angle) of f32: abs cos(angle) and abs sin(angle) (Llama 4's rotary angles as
    unit complex numbers; cos and sin as kiln computes them)."""
    _complex_operands(cx, node)
    r, t = node.args[:2]
    if not all(isinstance(x, Node) and cx.dtype_of(x) == "f32" for x in (r, t)):
        raise Unsupported("a polar of other than two f32 tensors")
    r, t, one = cx.let(cx.ref(r)), cx.let(cx.ref(t)), _pairs_shape(cx, node, 1)
    return Expr(f"concat(reshape(mul({r}, cos({t})), shape={one}), "
                f"reshape(mul({r}, sin({t})), shape={one}), axis=-1)")


@complex_lowering(aten.mul.Tensor, aten.mul.Scalar)
def _complex_mul(cx, node):
    """A product of complex tensors, (a + bi)(c + di) = (ac - bd) + (ad + bc)i, each product
    rounded and then summed, as PyTorch's; of a complex tensor and a real one or a number, each
    part times it."""
    _complex_operands(cx, node)
    a, b = node.args[:2]
    if is_complex(a) and is_complex(b):
        (ar, ai), (br, bi) = _parts(cx, cx.pairs_ref(a)), _parts(cx, cx.pairs_ref(b))
        return Expr(f"concat(sub(mul({ar}, {br}), mul({ai}, {bi})), "
                    f"add(mul({ar}, {bi}), mul({ai}, {br})), axis=-1)")
    z, r = (a, b) if is_complex(a) else (b, a)
    return Expr(f"mul({cx.pairs_ref(z)}, {_as_part(cx, r)})")


@complex_lowering(aten.add.Tensor, aten.sub.Tensor, aten.rsub.Scalar, aten.rsub.Tensor)
def _complex_add(cx, node):
    """A sum or difference of complex tensors, part by part; with a real tensor or a number,
    its real part. rsub(x, other) is other - x."""
    _complex_operands(cx, node)
    a, b = node.args[:2]
    if _arg(node, 2, "alpha", 1) != 1:
        raise Unsupported("a complex add or sub with an alpha")
    op = "add" if node.target is aten.add.Tensor else "sub"
    if node.target in (aten.rsub.Scalar, aten.rsub.Tensor):
        a, b = b, a
    if is_complex(a) and is_complex(b):
        return Expr(f"{op}({cx.pairs_ref(a)}, {cx.pairs_ref(b)})")
    z = a if is_complex(a) else b
    zr, zi = _parts(cx, cx.pairs_ref(z))
    r = _as_part(cx, b if z is a else a)
    real = f"{op}({zr}, {r})" if z is a else f"{op}({r}, {zr})"
    imag = f"neg({zi})" if op == "sub" and z is b else zi
    # The imaginary part broadcast as the real one is against the other operand.
    return Expr(f"concat({real}, expand({imag}, shape={_pairs_shape(cx, node, 1)}), axis=-1)")


@complex_lowering(aten.view.default, aten.reshape.default, aten._unsafe_view.default,
                  aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
                  aten.squeeze.default, aten.flatten.using_ints, aten.unflatten.int,
                  aten.expand.default, aten.permute.default, aten.transpose.int,
                  trivial=True)
def _complex_layout(cx, node):
    """Views of a complex tensor: the pairs reshaped, expanded or permuted, the pair dim kept
    last."""
    _complex_operands(cx, node)
    z = node.args[0]
    if list(cx.meta(z).shape) == list(cx.meta(node).shape) and \
            node.target not in (aten.permute.default, aten.transpose.int):
        cx.pairs_ref(z)
        return Alias(z)
    if node.target is aten.expand.default:
        return Expr(f"expand({cx.pairs_ref(z)}, shape={_pairs_shape(cx, node)})")
    if node.target in (aten.permute.default, aten.transpose.int):
        rank = len(cx.meta(z).shape)
        perm = list(range(rank))
        if node.target is aten.permute.default:
            perm = [d % rank for d in node.args[1]]
        elif rank:  # transpose(0, 0) of a 0-d tensor is itself
            i, j = node.args[1] % rank, node.args[2] % rank
            perm[i], perm[j] = perm[j], perm[i]
        if perm == list(range(rank)):
            cx.pairs_ref(z)
            return Alias(z)
        return Expr(f"permute({cx.pairs_ref(z)}, dims={perm + [rank]})")
    return Expr(f"reshape({cx.pairs_ref(z)}, shape={_pairs_shape(cx, node)})")


@complex_lowering(aten.slice.Tensor, aten.select.int, trivial=True)
def _complex_slice(cx, node):
    """A slice (step 1) or select of a complex tensor along a dim of fixed size, bounds fixed:
    the pairs'."""
    _complex_operands(cx, node)
    z, dim = node.args[0], _arg(node, 1, "dim", 0)
    shape = cx.meta(z).shape
    rank = len(shape)
    if not rank or not isinstance(dim, int) or cx.is_symbolic(shape[dim % rank]):
        raise Unsupported("a slice of a complex tensor along a symbolic dim")
    axis, size = dim % rank, int(shape[dim % rank])
    if node.target is aten.select.int:
        i = node.args[2]
        if not isinstance(i, int) or not -size <= i < size:
            raise Unsupported("a select of a complex tensor at other than a fixed position")
        start, end = i % size, i % size + 1
    else:
        start, end = _arg(node, 2, "start", None), _arg(node, 3, "end", None)
        if _arg(node, 4, "step", 1) != 1 or not all(v is None or isinstance(v, int)
                                                  for v in (start, end)):
            raise Unsupported("a slice of a complex tensor with a step or symbolic bounds")
        start, end = _within(0 if start is None else start, end, size)
        if end <= start:
            raise Unsupported("an empty slice")
    text = f"slice({cx.pairs_ref(z)}, axis={axis - rank - 1}, start={start}, end={end})"
    if node.target is aten.select.int:
        text = f"reshape({text}, shape={_pairs_shape(cx, node)})"
    return Expr(text)


@complex_lowering(aten.cat.default, aten.concat.default)
def _complex_cat(cx, node):
    """A concat of complex tensors along a dim of fixed size: the pairs'."""
    _complex_operands(cx, node)
    tensors, dim = list(node.args[0]), _arg(node, 1, "dim", 0)
    rank = len(cx.meta(node).shape)
    if not all(isinstance(t, Node) and is_complex(t) for t in tensors) or \
            not 1 <= len(tensors) <= 64 or cx.is_symbolic(cx.meta(node).shape[dim % rank]):
        raise Unsupported("a concat of complex tensors with real ones, of more than 64, or "
                          "along a symbolic dim")
    if len(tensors) == 1:
        cx.pairs_ref(tensors[0])
        return Alias(tensors[0])
    return Expr(_joined([cx.pairs_ref(t) for t in tensors], dim % rank - rank - 1))


def does_work(cx, node) -> bool:
    """Whether kiln's lowering of `node` does arithmetic: its op's lowering is not one of
    TRIVIAL's (COMPLEX_TRIVIAL's), or it is the slice of a sink softmax (_sink_softmax)."""
    if touches_complex(node):
        return lowering_for(node) not in COMPLEX_TRIVIAL
    low = TABLE[node.target]
    if low is _slice:
        try:
            return _sink_softmax(cx, node) is not None
        except Unsupported:
            return False
    return low not in TRIVIAL


# Lowerings that move or relabel values without arithmetic: a group of only these is left to
# PyTorch (a kiln graph for a view costs more than the view), and not listed as a fallback.
TRIVIAL = {_reshape, _permute, _expand, _slice, _select, _identity, _dropout, _to_dtype, _getitem,
           _arange, _cat, _gather, _split, _repeat, _tile, _meshgrid} | _CONSTANTS

_ROW_WISE |= {_add_sub, _mul, _div, _rsub, _sign, _floor_divide, _remainder, _pow, _square,
              _reciprocal, _gelu, _clamp, _where, _masked_fill, _identity, _dropout, _to_dtype,
              _reshape, _expand} | _CONSTANTS


def merged_dims_reason(cx, node) -> str | None:
    """None unless `node` reads or makes a tensor with a merged dim (a size s0*s1, which kiln
    holds as its factors in its place) and its work would see the factors, else why. Only
    elementwise work aligned as PyTorch aligns it, reshapes, repeats, matmuls and linears whose
    merged dims are rows or batch dims, attention whose merged dims are batch dims, permutes
    (a merged dim's factors move together), batch norms whose channels follow the merged dim,
    norms, softmax and running sums over dims after the merged ones, and reductions over other
    dims than the merged ones read [s0, s1, 64] as PyTorch reads [s0*s1, 64]."""
    operands = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    merged = [n for n in operands + [node] if cx.has_merged(n)]
    if not merged:
        return None
    low = TABLE[node.target]
    shape = cx.meta(merged[0]).shape
    why = (f"a size {next(d for d in shape if cx.merged(d))} (kiln holds a product of dims as "
           f"the dims only for row-wise work)")

    def tail_free(n, count):  # the last `count` dims of n are not merged, nor is any after
        if not isinstance(n, Node):
            return True
        dims = list(cx.meta(n).shape)
        return count <= len(dims) and not any(cx.merged(d) for d in dims[len(dims) - count:])

    def free(n):
        return not isinstance(n, Node) or not cx.has_merged(n)

    def aligned(operand, result, drop=0):
        """Whether kiln, aligning `operand`'s dims with `result`'s from the last as numpy
        does (less the last `drop`), meets each where PyTorch does. Where the operand
        broadcasts a merged dim (size 1, or no dim there), its dims before it are shifted by
        the merged dim's extra factors: they must all be 1."""
        if not isinstance(operand, Node):
            return True
        op = list(cx.meta(operand).shape)[:len(cx.meta(operand).shape) - drop]
        out = list(cx.meta(result).shape)[:len(cx.meta(result).shape) - drop]
        one = [not cx.is_symbolic(d) and int(d) == 1 for d in op]
        for i in range(1, len(out) + 1):
            if cx.merged(out[-i]) and (i > len(op) or one[-i]):
                if not all(one[:max(len(op) - i + 1, 0)]):
                    return False
        return True

    if low in _ROW_WISE:
        if low in (_reshape,) or low in _CONSTANTS:
            return None
        ok = all(aligned(a, node) for a in operands)
        return None if ok else why
    if low is _linear:
        ok = tail_free(node.args[0], 1) and all(free(a) for a in node.args[1:])
    elif low in (_mm, _addmm):
        a, b = node.args[0:2] if low is _mm else node.args[1:3]
        # Merged dims must be batch dims or rows of `a` (a transposed `a` is read from its
        # source), batch dims of `b`. Merged rows of `a` are batch dims and rows to kiln: `b`
        # must then have no batch dims, or none merged, given a dim of 1 for each extra factor
        # (_matmul_text), or kiln would broadcast them against the factors.
        rows = cx.meta(a).shape[-2] if len(cx.meta(a).shape) >= 2 else None
        ok = (tail_free(a, 2 if _transposed(cx, a) is not None else 1) and tail_free(b, 2)
              and aligned(a, node, 2) and aligned(b, node, 2)
              and not (cx.merged(rows) and len(cx.meta(b).shape) > 2 and
                       (not free(b) or low is not _mm or _transposed(cx, a) is not None))
              and (low is _mm or aligned(node.args[0], node)))
    elif low in (_softmax, _log_softmax, _reduction_sum, _reduction_mean, _reduction_max, _cumsum,
                 _sum_all, _global_pool):
        if low in (_softmax, _log_softmax, _cumsum, _global_pool):
            axis = -len(node.args[1]) if low is _global_pool else _axis(cx, node, node.args[1])
            ok = tail_free(node.args[0], -axis)
        else:
            # Over dims that are not merged, before them or after (_kiln_axes).
            shape = list(cx.meta(node.args[0]).shape)
            ok = bool(shape) and not any(
                cx.merged(shape[a]) for a in _axes(cx, node.args[0], _arg(node, 1, "dim")))
    elif low in (_permute, _repeat, _tile):
        ok = True  # a permute moves a merged dim's factors together; a repeat reshapes
    elif low is _getitem:
        # Element 0 of native_layer_norm is its value, a topk's elements are made along a dim
        # of fixed size (not a merged one), and a piece of a split is a slice along a dim after
        # the merged ones.
        src = node.args[0]
        ok = True
        if isinstance(src, Node) and src.target in _SPLITS:
            axis = _piece_bounds(cx, src)[0]
            ok = tail_free(src.args[0], len(cx.meta(src.args[0]).shape) - axis)
    elif low is _topk:
        ok = tail_free(node.args[0], 1)
    elif low in (_max_dim, _argmax):
        x, dim = node.args[0], _arg(node, 1, "dim")
        rank = len(cx.meta(x).shape)
        ok = rank > 0 and isinstance(dim, int) and tail_free(x, rank - dim % rank)
    elif low is _triangle:
        ok = tail_free(node.args[0], 2)
    elif low is _cat:
        # Along a dim after the merged ones (PhiMoE's two experts' multipliers of [B*S, 1]);
        # along any dim where one tensor is left, the empty ones dropped (the tensor itself).
        rank = len(cx.meta(node).shape)
        axis = _arg(node, 1, "dim", 0) % rank
        ok = len(_nonempty(cx, node.args[0])) == 1 or \
            all(tail_free(t, rank - axis) for t in node.args[0])
    elif low is _slice:
        # Along a dim after the merged ones (GPT-OSS's gate_up[..., ::2] of [B*S*k, 2I]).
        x = node.args[0]
        rank = len(cx.meta(x).shape)
        ok = rank > 0 and tail_free(x, rank - _arg(node, 1, "dim", 0) % rank)
    elif low in (_gather, _scatter_value, _scatter_src, _scatter_add):
        # Positions along a dim after the merged ones, the index of the tensor's other sizes.
        x, dim = node.args[0], node.args[1]
        rank = len(cx.meta(x).shape)
        ok = isinstance(dim, int) and rank > 0 and \
            all(tail_free(t, rank - dim % rank) for t in (x,) + tuple(node.args[2:4])
                if isinstance(t, Node))
    elif low is _repeat_interleave:
        ok = True  # it refuses merged dims other than the one repeated
    elif low is _index:
        # table[ids] with ids of any shape: kiln's rows [B, S, ..] are PyTorch's [B*S, ..].
        ok = _table_rows(cx, node) and free(node.args[0])
    elif low in (_layer_norm, _native_layer_norm, _rms_norm_op):
        ok = tail_free(node.args[0], 1) and all(free(a) for a in node.args[2:4])
    elif low in (_sdpa, _sdpa_tuple):
        # Merged dims among the batch dims (Swin's windows times the batch): kiln's attention
        # broadcasts its batch dims as matmul does, each operand aligned with the output's (the
        # query's where the node is a tuple).
        out = node if isinstance(cx.meta(node), torch.Tensor) else node.args[0]
        ok = all(tail_free(a, 3) for a in node.args[:3]) and \
            all(tail_free(a, 2) and aligned(a, out) for a in operands)
    elif low is _batch_norm:
        # Channels in dim 1, their values shaped [C, 1, ...] against the dims after it: a merged
        # dim 0 (LeViT's norms of [B * N, C]) is read alike.
        x = node.args[0]
        ok = tail_free(x, len(cx.meta(x).shape) - 1) and all(free(a) for a in node.args[1:5])
    elif low in (_embedding, _index_select):
        # A 2-D table's rows at ids of any shape: [B, S, D] in kiln is [B*S, D] in PyTorch.
        table = node.args[0]
        ok = free(table) and len(cx.meta(table).shape) == 2 and \
            (low is _embedding or node.args[1] % 2 == 0)
    else:
        ok = False
    return None if ok else why


# Ops with no kiln lowering whose fallback reason says more than "no kiln op for it".
NO_OP_HINTS = {
    name: "no kiln op for it (a matmul over row groups whose sizes are data: transformers' "
          "grouped_mm experts; with experts_implementation=\"batched_mm\" a mixture of experts "
          "runs in kiln)"
    for name in ("transformers.grouped_mm_fallback.default", "aten._grouped_mm.default",
                 "aten.grouped_mm.default")}

# Nodes that are shape arithmetic or bookkeeping, not tensor work: never listed as fallbacks.
NOT_TENSOR_WORK = {aten.sym_size.int, aten.sym_numel.default, aten.sym_stride.int,
                   aten.sym_storage_offset.default}
# Checks whose only effect is to assert what the lowering already guarantees: dropped.
ASSERTIONS = {aten._assert_tensor_metadata.default, aten._assert_scalar.default,
              aten.sym_constrain_range_for_size.default, aten.sym_constrain_range.default,
              aten._assert_async.msg, aten._assert_async.default}
