#!/usr/bin/env python3
"""Random PyTorch programs, run through kiln.torch (on the CPU target, or --target) against eager: a
differential check of the importer (export, lowering, partitioning, fallbacks, save and load,
the torch.compile backend) that the hand-written tests and the model tests do not reach.

Each program chains 3 to 10 steps drawn from what models do, over one to three float inputs
(f32 mostly, f16 and bf16), integer ids and bool masks of rank 1 to 4: pointwise ops (the
activations, rounding, powers, clamps, integer arithmetic with floor division and remainder),
comparisons, logic and where, reductions and arg-reductions, softmax, norms, linear, matmul,
bmm, addmm, einsum and attention with masks, layout ops (transpose, permute, slicing with steps,
select, flip, cat, stack, split, chunk, unbind, roll, repeat, pad), gather, scatter, index_select,
embeddings, topk, cumsum, casts between every dtype, writes into slices, and steps that read a
size at run time (positions from arange, causal masks, x[:, 1:], values scaled by S). Every third
seed puts NaN, +-inf and +-0 into the float inputs. A seed's shapes are static, or a batch dim is
dynamic, or a batch and a sequence dim; a dynamic program runs at several sizes. `--wide` draws
each float input's last dim from 8 to 64, f16 and bf16 as often as f32, and attention four times
as often: head dims the tensor-core attention kernels take (`--target emulate:sm_90a` runs
sm_90a's wgmma kernels).

A program runs in one of three ways (--mode): `torch.export` then `kiln.torch.compile_exported`
(export), the same through `Program.save` and `kiln.torch.load` (saveload: loaded through a
cache of its own, so compiled again from the saved folder), or
`torch.compile(backend="kiln")` (dynamo); `all` takes them in turn by seed. Fallbacks are
allowed: what kiln does not lower stays in PyTorch, and that is not a failure.

Each output is compared with eager's, at every size: the same count of outputs, shapes and
dtypes; integer and bool outputs exactly; float outputs NaN for NaN, infinities exactly, finite
values by allclose at a tolerance set by the lowest float precision on the way to the output
through float values (a bf16 value cast to f32 is checked at bf16's tolerance; a mask from a bf16
comparison passes nothing on) and, in `high` and `medium`, widened where a matmul or attention is
on the way (TF32 or bf16 products); after a remainder or fmod, which keeps its operand's absolute
error, the absolute tolerance grows by 128 units in the last place of its operand's largest
magnitude at the example sizes (CANCELLING_OPS). A difference in values is then refereed:

- `rounding`: in a mode other than `highest`, with a matmul or attention on the way, the same
  program gives eager's results in `highest`, and the difference is in finite values within 10x
  the tolerance, in integers (an argmax of near ties), or past a step that jumps on a value the
  products made (floor, trunc, remainder, sign, or an integer or bool made from it and used
  again: a product's rounding can move such a step by a whole unit). A bug only a rounding mode
  shows and that stays within 10x, or passes such a step, would be called this: run
  `--precision highest` to see past it.
- `eager_differs`: every element kiln gives is eager's or the program's run in float64 (its
  attention by PyTorch's math backend): eager's own rounding (a bf16 result it rounds on the
  way), or NaN that eager's flash attention leaves out.

These are counted and kept in the results, not failures, and the other outputs and sizes are
still compared. A program that eager (at the export size or at every run size) or torch.export
cannot run is counted too. A compile error, a run error, any other difference (`mismatch`), a
timeout or a crash of the worker is a failure, printed with the command that reproduces it as it
comes (results.jsonl is written as the records come, and in seed order at the end). Each record
says how many kiln graphs the program became and which ops stayed in PyTorch (for torch.compile:
in the graphs it compiled during the check). A seed makes the same program each time, its
parameters and inputs included.

The differences from eager that docs/python.md's op table states (topk's order among ties, for
one) are failures here too, to be read, not hidden.

    "$(scripts/python_env.sh)" scripts/torch_differential.py --count 300 --seed 1 --mode all \
        --precision high --out /tmp/torch-differential

Needs torch and the kiln package: the environment scripts/python_env.sh makes and prints."""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import dataclasses
import inspect
import json
import math
import multiprocessing
import os
import pathlib
import random
import signal
import sys
import tempfile
import time
import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int64, torch.int32)
MODES = ("export", "saveload", "dynamo")
PRECISIONS = ("highest", "high", "medium", "tf32x3")
# Float dtypes from the least precise: the tolerance a value is checked at is its lowest's.
PRECISION_ORDER = (torch.bfloat16, torch.float16, torch.float32)
TOLERANCE = {torch.float32: 2e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2}
# In these modes an f32 matmul's products are rounded (TF32 in high, bf16 in medium).
PRODUCT_TOLERANCE = {"high": 2e-2, "medium": 6e-2}
PRODUCT_OPS = {
    "linear",
    "matmul",
    "matmul_t",
    "gram",
    "matmul_tt",
    "bmm",
    "baddbmm",
    "addmm",
    "sdpa",
    "einsum",
    "flat_linear",
}
# Steps whose result jumps where the value crosses a boundary (besides those giving integers or
# bools): after a product, a rounding mode can move them by a whole unit.
JUMP_OPS = {
    "ceil",
    "floor",
    "trunc",
    "div_floor2",
    "div_trunc",
    "floordiv4",
    "fmod_s",
    "rem_s",
    "sign",
}
# Steps whose result keeps its operand's absolute error, not its relative one: a remainder of a
# large value is its operand's small difference from a multiple of the divisor (of 3000, 2.4e-4
# an f32 ulp). After one the absolute tolerance grows by CANCEL_ULPS units in the last place of
# its operand's largest magnitude at the example sizes: 16, times 8 for the run sizes' inputs,
# drawn apart from the example's (their magnitudes were up to 4.8x the example's in 1500 seeds).
CANCELLING_OPS = {"fmod_s", "rem_s"}
CANCEL_ULPS = 128
# The batch (and sequence) sizes a program is drawn at (each step must run at all of them; the
# first is torch.export's example), and those it is checked at.
EXAMPLE_SIZES = {0: [None], 1: [3, 4], 2: [(3, 4), (4, 5)]}
RUN_SIZES = {0: [None], 1: [1, 3, 6], 2: [(1, 2), (3, 4), (2, 7), (5, 3)]}


def lower_of(a, b):
    """The less precise of two float dtypes (None: no float on the way)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if PRECISION_ORDER.index(a) <= PRECISION_ORDER.index(b) else b


class Entry:
    """A value of the program being made, at each example size; the lowest float precision on
    the way to it, whether a matmul or attention is, and whether a step that jumps (JUMP_OPS, or
    one giving integers or bools) does after one; `cancel`, the absolute error a step on the way
    that cancels (CANCELLING_OPS) may leave in it (CANCEL_ULPS)."""

    def __init__(self, vals, src, low=None, products=False, jumps=False, cancel=0.0):
        self.vals = vals
        self.src = src
        self.low = low
        self.products = products
        self.jumps = jumps
        self.cancel = cancel

    @property
    def v(self):
        return self.vals[0]


def is_float(t):
    return isinstance(t, torch.Tensor) and t.dtype in FLOATS


def is_int(t):
    return isinstance(t, torch.Tensor) and t.dtype in INTS


def is_bool(t):
    return isinstance(t, torch.Tensor) and t.dtype == torch.bool


def takes_params(fn) -> bool:
    """Whether a step reads the program's parameters (a `**p` argument)."""
    return bool(fn.__code__.co_flags & inspect.CO_VARKEYWORDS)


class Gen:
    """A program being made: its values (the pool, inputs first), steps and parameters."""

    def __init__(self, seed, dynamic):
        self.r = random.Random(seed)
        self.t = torch.Generator().manual_seed(seed)  # parameters, indices and masks
        self.seed = seed
        self.dynamic = dynamic
        self.pool: list[Entry] = []
        self.steps = []  # (fn, argument indices, text)
        self.params = {}  # name -> tensor
        self.ops_used = []
        self.inputs = 0  # the pool's first values, the program's inputs

    def dyn_axes(self, e):
        """The dims of a value that differ between the example sizes."""
        if len(e.vals) < 2:
            return set()
        a, b = e.vals[0], e.vals[1]
        return {i for i in range(a.dim()) if a.shape[i] != b.shape[i]}

    def pick(self, pred):
        c = [i for i, e in enumerate(self.pool) if isinstance(e.v, torch.Tensor) and pred(e.v)]
        if not c:
            return None
        if self.r.random() < 0.6:  # recent values more often: longer chains
            return c[-1] if self.r.random() < 0.5 else self.r.choice(c[-3:])
        return self.r.choice(c)

    def param(self, t):
        name = f"p{len(self.params)}"
        self.params[name] = t
        return name

    def add(self, fn, idx, src, op):
        """Adds the step if eager runs it at every example size and its result is a tensor of at
        most 20,000 elements and rank 6."""
        try:
            outs = []
            for k in range(len(self.pool[0].vals)):
                args = [self.pool[i].vals[k] for i in idx]
                outs.append(fn(*args, **self.params) if takes_params(fn) else fn(*args))
        except Exception:  # noqa: BLE001 - eager refuses the step: draw another
            return False
        o = outs[0]
        if not isinstance(o, torch.Tensor) or o.numel() == 0 or o.dim() > 6 or o.numel() > 20000:
            return False
        if any(o2.dim() != o.dim() for o2 in outs[1:]):
            return False
        low = o.dtype if is_float(o) else None
        products = op in PRODUCT_OPS
        jumps = False
        cancel = 0.0
        for i in idx:
            if is_float(self.pool[i].v):  # a mask or ids made from floats are compared exactly
                low = lower_of(low, self.pool[i].low)
                cancel = max(cancel, self.pool[i].cancel)
                if op in CANCELLING_OPS:  # the steps take the remainder of 3 x
                    ulp = torch.finfo(self.pool[i].low or self.pool[i].v.dtype).eps
                    cancel = max([cancel] + [CANCEL_ULPS * ulp * 3 * _magnitude(v)
                                             for v in self.pool[i].vals])
            products = products or self.pool[i].products
            jumps = jumps or self.pool[i].jumps
            if op in JUMP_OPS or not is_float(o):
                jumps = jumps or self.pool[i].products
        self.pool.append(Entry(outs, src, low, products, jumps, cancel if is_float(o) else 0.0))
        self.steps.append((fn, idx, src))
        self.ops_used.append(op)
        return True


def draw(g, pred):
    """A value of the pool `pred` accepts: its index, entry, tensor (at the first example size),
    rank and dims that differ between the sizes; None where there is none."""
    i = g.pick(pred)
    if i is None:
        return None
    e = g.pool[i]
    return i, e, e.v, e.v.dim(), g.dyn_axes(e)


# ---------------------------------------------------------------------------------------------
# Step makers: each draws a step on values of the pool and returns whether it added one.


def g_unary(g):
    i = g.pick(is_float)
    if i is None:
        return False
    r = g.r
    lo, hi = sorted([round(r.uniform(-2, 2), 2), round(r.uniform(-2, 2), 2)])
    ops = [
        ("relu", lambda x: torch.relu(x)),
        ("silu", lambda x: F.silu(x)),
        ("sigmoid", lambda x: torch.sigmoid(x)),
        ("tanh", lambda x: torch.tanh(x)),
        ("exp", lambda x: torch.exp(x)),
        ("neg", lambda x: -x),
        ("abs", lambda x: x.abs()),
        ("sqrt", lambda x: torch.sqrt(x)),
        ("rsqrt", lambda x: torch.rsqrt(x.abs() + 1)),
        ("cos", lambda x: torch.cos(x)),
        ("sin", lambda x: torch.sin(x)),
        ("erf", lambda x: torch.erf(x)),
        ("log", lambda x: torch.log(x)),
        ("gelu", lambda x: F.gelu(x)),
        ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
        ("square", lambda x: torch.square(x)),
        ("reciprocal", lambda x: torch.reciprocal(x)),
        ("floor", lambda x: torch.floor(x * 3)),
        ("ceil", lambda x: torch.ceil(x * 3)),
        ("trunc", lambda x: torch.trunc(x * 3)),
        ("sign", lambda x: torch.sign(x)),
        ("leaky_relu", lambda x: F.leaky_relu(x, 0.1)),
        ("hardtanh", lambda x: F.hardtanh(x, -0.5, 0.7)),
        ("relu6", lambda x: F.relu6(x * 4)),
        ("hardsigmoid", lambda x: F.hardsigmoid(x)),
        ("hardswish", lambda x: F.hardswish(x)),
        ("elu", lambda x: F.elu(x)),
        ("selu", lambda x: F.selu(x)),
        ("celu", lambda x: F.celu(x, 0.5)),
        ("softplus", lambda x: F.softplus(x, beta=2.0, threshold=3.0)),
        ("mish", lambda x: F.mish(x)),
        ("logsigmoid", lambda x: F.logsigmoid(x)),
        ("log1p", lambda x: torch.log1p(x.abs())),
        ("expm1", lambda x: torch.expm1(x)),
        ("clamp", lambda x: x.clamp(lo, hi)),
        ("clamp_min", lambda x: x.clamp_min(lo)),
        ("clamp_max", lambda x: torch.clamp(x, max=hi)),
        ("pow2", lambda x: x.pow(2)),
        ("pow3", lambda x: x**3),
        ("pow_half", lambda x: x.abs() ** 0.5),
        ("mul_s", lambda x: x * 2.5),
        ("add_s", lambda x: x + 1.5),
        ("rsub", lambda x: 3 - x),
        ("div_s", lambda x: x / 3),
        ("div_floor2", lambda x: torch.div(x * 4, 2, rounding_mode="floor")),
        ("floordiv4", lambda x: (x * 8) // 4),
        ("div_trunc", lambda x: torch.div(x * 4, 4, rounding_mode="trunc")),
        ("sub_alpha", lambda x: torch.sub(x, 1.0, alpha=2)),
        ("rpow", lambda x: 2**x),
        ("nan_to_num", lambda x: torch.nan_to_num(x)),
        ("logit", lambda x: torch.logit(torch.sigmoid(x))),
        ("fmod_s", lambda x: torch.fmod(x * 3, 2.0)),
        ("rem_s", lambda x: torch.remainder(x * 3, 2.0)),
        ("atan", lambda x: torch.atan(x)),
        # Away from its poles: near one, tan turns an ulp of its operand (a sum in another
        # order) into any difference, in every mode.
        ("tan", lambda x: torch.tan(x.clamp(-1.25, 1.25))),
    ]
    name, fn = r.choice(ops)
    return g.add(fn, [i], f"{name}", name)


def bcast_partner(g, i, pred):
    """Another pool index whose value broadcasts with pool[i] (exactly, at every example)."""
    c = []
    for j, e in enumerate(g.pool):
        if not isinstance(e.v, torch.Tensor) or not pred(e.v):
            continue
        try:
            for k in range(len(e.vals)):
                torch.broadcast_shapes(g.pool[i].vals[k].shape, e.vals[k].shape)
            c.append(j)
        except Exception:
            pass
    return g.r.choice(c) if c else None


def g_binary(g):
    i = g.pick(is_float)
    if i is None:
        return False
    j = bcast_partner(g, i, is_float)
    if j is None:
        return False
    ops = [
        ("add", lambda a, b: a + b),
        ("sub", lambda a, b: a - b),
        ("mul", lambda a, b: a * b),
        ("div", lambda a, b: a / (b.abs() + 0.5)),
        ("div_raw", lambda a, b: a / b),
        ("maximum", torch.maximum),
        ("minimum", torch.minimum),
        ("add_alpha", lambda a, b: torch.add(a, b, alpha=0.5)),
        ("max_other", torch.max),
        ("pow_tt", lambda a, b: (a.abs() + 0.1) ** b.clamp(-2, 2)),
        ("clamp_t", lambda a, b: a.clamp(min=b)),
        ("atan2", torch.atan2),
        ("rsub_t", lambda a, b: torch.rsub(a, b, alpha=2)),
        ("hypot", torch.hypot),
    ]
    name, fn = g.r.choice(ops)
    if g.r.random() < 0.5:
        i, j = j, i
    return g.add(fn, [i, j], name, name)


def g_compare(g):
    i = g.pick(lambda t: is_float(t) or is_int(t))
    if i is None:
        return False
    r = g.r
    if r.random() < 0.5:
        j = bcast_partner(g, i, lambda t: is_float(t) or is_int(t))
        if j is None:
            return False
        ops = [
            ("gt", torch.gt),
            ("lt", torch.lt),
            ("ge", torch.ge),
            ("le", torch.le),
            ("eq", torch.eq),
            ("ne", torch.ne),
        ]
        name, fn = r.choice(ops)
        return g.add(fn, [i, j], name, name)
    s = r.choice([0, 0.5, -0.3, 1, 2, 3])
    ops = [
        ("gt_s", lambda a: a > s),
        ("lt_s", lambda a: a < s),
        ("ge_s", lambda a: a >= s),
        ("eq_s", lambda a: a == s),
        ("ne_s", lambda a: a != s),
        ("isnan", torch.isnan),
        ("isinf", torch.isinf),
        ("isfinite", torch.isfinite),
    ]
    name, fn = r.choice(ops)
    return g.add(fn, [i], name, name)


def g_logical(g):
    i = g.pick(is_bool)
    if i is None:
        return False
    if g.r.random() < 0.3:
        name, fn = g.r.choice([("not", lambda a: ~a), ("logical_not", torch.logical_not)])
        return g.add(fn, [i], name, name)
    j = bcast_partner(g, i, is_bool)
    if j is None:
        return False
    name, fn = g.r.choice(
        [
            ("and", lambda a, b: a & b),
            ("or", lambda a, b: a | b),
            ("xor", lambda a, b: a ^ b),
            ("logical_and", torch.logical_and),
            ("logical_or", torch.logical_or),
            ("logical_xor", torch.logical_xor),
        ]
    )
    return g.add(fn, [i, j], name, name)


def g_where(g):
    m = g.pick(is_bool)
    if m is None:
        return False
    a = bcast_partner(g, m, lambda t: is_float(t) or is_int(t))
    if a is None:
        return False
    r = g.r
    mode = r.random()
    if mode < 0.4:
        v = r.choice([0.0, -1e9, float("-inf"), 2.5, -3])
        if is_int(g.pool[a].v):
            v = r.choice([0, -7, 5])
        return g.add(lambda x, mm: x.masked_fill(mm, v), [a, m], f"masked_fill({v})", "masked_fill")
    if mode < 0.6:
        v = r.choice([0.0, 1.5, float("-inf")]) if is_float(g.pool[a].v) else 0
        return g.add(lambda mm, x: torch.where(mm, x, v), [m, a], f"where_s({v})", "where_s")
    b = bcast_partner(g, a, lambda t: t.dtype == g.pool[a].v.dtype)
    if b is None:
        return False
    return g.add(lambda mm, x, y: torch.where(mm, x, y), [m, a, b], "where", "where")


def rand_dims(g, t, n=None):
    d = t.dim()
    if d == 0:
        return None
    n = n or g.r.randint(1, d)
    return sorted(g.r.sample(range(d), min(n, d)))


def g_reduce(g):
    r = g.r
    i = g.pick(lambda t: t.dim() >= 1)
    if i is None:
        return False
    t = g.pool[i].v
    d = r.randrange(t.dim()) - (t.dim() if r.random() < 0.5 else 0)
    kd = r.random() < 0.5
    if is_bool(t):
        ops = [
            ("any", lambda x: x.any(d, keepdim=kd)),
            ("all", lambda x: x.all(d, keepdim=kd)),
            ("sum_bool", lambda x: x.sum(d, keepdim=kd)),
            ("any_all", lambda x: x.any()),
            ("max_bool", lambda x: x.max(d, keepdim=kd)[0]),
            ("min_bool_idx", lambda x: x.min(d, keepdim=kd)[1]),
            ("cumsum_bool", lambda x: x.cumsum(d)),
        ]
    elif is_int(t):
        ops = [
            ("sum_int", lambda x: x.sum(d, keepdim=kd)),
            ("sum_int_all", lambda x: x.sum()),
            ("argmax_int", lambda x: x.argmax(d, keepdim=kd)),
            ("argmin_int", lambda x: x.argmin(d)),
            ("max_int", lambda x: x.max(d, keepdim=kd)[0]),
            ("min_int_idx", lambda x: x.min(d)[1]),
            ("amax_int", lambda x: x.amax(d, keepdim=kd)),
            ("cumsum_int", lambda x: x.cumsum(d)),
            ("any_int", lambda x: x.any(d)),
        ]
    else:
        dims = rand_dims(g, t)
        ops = [
            ("sum", lambda x: x.sum(dims, keepdim=kd)),
            ("mean", lambda x: x.mean(dims, keepdim=kd)),
            ("amax", lambda x: x.amax(dims, keepdim=kd)),
            ("amin", lambda x: x.amin(dims, keepdim=kd)),
            ("sum_all", lambda x: x.sum()),
            ("mean_all", lambda x: x.mean()),
            ("sum_f32", lambda x: x.sum(d, dtype=torch.float32)),
            ("max_dim", lambda x: x.max(d, keepdim=kd)[0]),
            ("max_dim_idx", lambda x: x.max(d, keepdim=kd)[1]),
            ("min_dim", lambda x: x.min(d, keepdim=kd)[0]),
            ("min_dim_idx", lambda x: x.min(d)[1]),
            ("argmax", lambda x: x.argmax(d, keepdim=kd)),
            ("argmin", lambda x: x.argmin(d)),
            ("norm", lambda x: torch.linalg.vector_norm(x, dim=dims, keepdim=kd)),
            ("norm1", lambda x: torch.linalg.vector_norm(x, ord=1, dim=d)),
            ("norm_inf", lambda x: torch.linalg.vector_norm(x, ord=float("inf"), dim=d)),
            ("norm3", lambda x: torch.linalg.vector_norm(x, ord=3, dim=d)),
            ("cumsum", lambda x: x.cumsum(d)),
            ("var", lambda x: x.var(d, keepdim=kd)),
            ("logsumexp", lambda x: torch.logsumexp(x, d)),
            ("prod", lambda x: x.prod(d)),
            ("any_f", lambda x: x.any(d, keepdim=kd)),
            ("all_f", lambda x: x.all(d)),
        ]
    name, fn = r.choice(ops)
    return g.add(fn, [i], f"{name}(d={d},kd={kd})", name)


def g_softmax(g):
    i = g.pick(lambda t: is_float(t) and t.dim() >= 1)
    if i is None:
        return False
    t = g.pool[i].v
    d = g.r.randrange(t.dim()) - (t.dim() if g.r.random() < 0.5 else 0)
    ops = [
        ("softmax", lambda x: torch.softmax(x, d)),
        ("log_softmax", lambda x: F.log_softmax(x, d)),
        ("softmax_f32", lambda x: torch.softmax(x, d, dtype=torch.float32)),
        ("log_softmax_f32", lambda x: torch.log_softmax(x, d, dtype=torch.float32)),
    ]
    name, fn = g.r.choice(ops)
    return g.add(fn, [i], f"{name}({d})", name)


def g_matmul(g):
    r = g.r
    drawn = draw(g, lambda t: is_float(t) and t.dim() >= 1)
    if drawn is None:
        return False
    i, e, t, _, _ = drawn
    if (t.dim() - 1) in g.dyn_axes(e):
        return False
    K = t.shape[-1]
    N = r.choice([1, 2, 3, 5, 8])
    mode = r.random()
    dt = t.dtype
    if mode < 0.3:
        w = g.param(torch.randn(N, K, generator=g.t).to(dt) / math.sqrt(K))
        b = g.param(torch.randn(N, generator=g.t).to(dt)) if r.random() < 0.6 else None
        if b:
            return g.add(lambda x, **p: F.linear(x, p[w], p[b]), [i], f"linear({K}->{N})", "linear")
        return g.add(lambda x, **p: F.linear(x, p[w]), [i], f"linear({K}->{N},nobias)", "linear")
    if mode < 0.5:
        w = g.param(torch.randn(K, N, generator=g.t).to(dt))
        if r.random() < 0.5:
            return g.add(lambda x, **p: x @ p[w], [i], "matmul_w", "matmul")
        w2 = g.param(torch.randn(N, K, generator=g.t).to(dt))
        return g.add(lambda x, **p: torch.matmul(x, p[w2].t()), [i], "matmul_wt", "matmul_t")
    if mode < 0.7 and t.dim() >= 2:
        # x @ x^T style
        return g.add(lambda x: x @ x.transpose(-1, -2), [i], "gram", "gram")
    if mode < 0.85:
        # another pool tensor as the right operand
        c = [
            j
            for j, f in enumerate(g.pool)
            if is_float(f.v)
            and f.v.dtype == dt
            and f.v.dim() >= 2
            and f.v.shape[-2] == K
            and (f.v.dim() - 2) not in g.dyn_axes(f)
        ]
        if not c:
            return False
        j = r.choice(c)
        return g.add(lambda a, b: torch.matmul(a, b), [i, j], "matmul_tt", "matmul_tt")
    if t.dim() == 3:
        w = g.param(torch.randn(N, generator=g.t).to(dt))
        wm = g.param(torch.randn(K, N, generator=g.t).to(dt))
        if r.random() < 0.5:
            return g.add(
                lambda x, **p: torch.baddbmm(
                    p[w], x, p[wm].expand(x.shape[0], K, N), beta=0.5, alpha=2.0
                ),
                [i],
                "baddbmm",
                "baddbmm",
            )
        return g.add(lambda x, **p: torch.bmm(x, p[wm].expand(x.shape[0], K, N)), [i], "bmm", "bmm")
    if t.dim() == 2:
        b = g.param(torch.randn(N, generator=g.t).to(dt))
        wm = g.param(torch.randn(K, N, generator=g.t).to(dt))
        beta = r.choice([1.0, 0.5])
        return g.add(
            lambda x, **p: torch.addmm(p[b], x, p[wm], beta=beta),
            [i],
            f"addmm(beta={beta})",
            "addmm",
        )
    return False


def g_norm(g):
    r = g.r
    drawn = draw(g, lambda t: is_float(t) and t.dim() >= 1)
    if drawn is None:
        return False
    i, e, t, _, _ = drawn
    if (t.dim() - 1) in g.dyn_axes(e):
        return False
    D = t.shape[-1]
    dt = t.dtype
    mode = r.randrange(5)
    w = g.param((torch.rand(D, generator=g.t) + 0.5).to(dt))
    b = g.param(torch.randn(D, generator=g.t).to(dt))
    if mode == 0:
        return g.add(
            lambda x, **p: F.layer_norm(x, (D,), p[w], p[b], 1e-5), [i], "layer_norm", "layer_norm"
        )
    if mode == 1:
        return g.add(lambda x: F.layer_norm(x, (D,)), [i], "layer_norm_noaffine", "layer_norm")
    if mode == 2:

        def rms(x, **p):
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return p[w] * h.to(x.dtype)

        return g.add(rms, [i], "rms_pattern", "rms_pattern")
    if mode == 3 and hasattr(F, "rms_norm"):
        return g.add(lambda x, **p: F.rms_norm(x, (D,), p[w], 1e-6), [i], "rms_norm", "rms_norm")
    if t.dim() >= 2 and (t.dim() - 2) not in g.dyn_axes(e):
        D2 = t.shape[-2]
        return g.add(lambda x: F.layer_norm(x, (D2, D)), [i], "layer_norm2d", "layer_norm2d")
    return False


def g_shape(g):
    r = g.r
    drawn = draw(g, lambda t: t.dim() >= 1)
    if drawn is None:
        return False
    i, e, t, n, dyn = drawn
    mode = r.randrange(12)
    if mode == 0 and n >= 2:
        a, b = r.sample(range(n), 2)
        a -= n if r.random() < 0.3 else 0
        return g.add(lambda x: x.transpose(a, b), [i], f"transpose({a},{b})", "transpose")
    if mode == 1 and n >= 2:
        p = list(range(n))
        r.shuffle(p)
        return g.add(lambda x: x.permute(*p), [i], f"permute{p}", "permute")
    if mode == 2 and n < 5:
        d = r.randint(-n - 1, n)
        return g.add(lambda x: x.unsqueeze(d), [i], f"unsqueeze({d})", "unsqueeze")
    if mode == 3 and n >= 2:
        a = r.randrange(n - 1)
        b = r.randrange(a + 1, n)
        return g.add(lambda x: x.flatten(a, b), [i], f"flatten({a},{b})", "flatten")
    if mode == 4:
        ones = [k for k in range(n) if t.shape[k] == 1 and k not in dyn]
        if ones:
            k = r.choice(ones)
            if r.random() < 0.5:
                return g.add(lambda x: x.squeeze(k), [i], f"squeeze({k})", "squeeze")
            m = r.choice([2, 3])
            shape = [-1] * n
            shape[k] = m
            return g.add(lambda x: x.expand(*shape), [i], f"expand{shape}", "expand")
        return g.add(lambda x: x.unsqueeze(0).expand(2, *([-1] * n)), [i], "expand_new", "expand")
    if mode == 5 and n >= 2 and not ({n - 1, n - 2} & dyn):
        a, b = t.shape[-2], t.shape[-1]
        return g.add(lambda x: x.reshape(*x.shape[:-2], a * b), [i], "reshape_merge", "reshape")
    if mode == 6 and n >= 1 and (n - 1) not in dyn and t.shape[-1] % 2 == 0:
        h = t.shape[-1] // 2
        return g.add(lambda x: x.view(*x.shape[:-1], 2, h), [i], "view_split", "view")
    if mode == 7:  # slice with step on a fixed dim
        f = [k for k in range(n) if k not in dyn]
        if not f:
            return False
        k = r.choice(f)
        sz = t.shape[k]
        start = r.randint(-sz, sz - 1)
        stop = r.choice([None, r.randint(-sz, sz)])
        step = r.choice([1, 1, 2, 3])
        sl = [slice(None)] * k + [slice(start, stop, step)]
        return g.add(lambda x: x[tuple(sl)], [i], f"slice(d{k},{start}:{stop}:{step})", "slice")
    if mode == 8:  # select
        f = [k for k in range(n) if k not in dyn]
        if not f:
            return False
        k = r.choice(f)
        sz = t.shape[k]
        idx = r.randint(-sz, sz - 1)
        return g.add(lambda x: x.select(k, idx), [i], f"select({k},{idx})", "select")
    if mode == 9:
        return g.add(lambda x: x.flip(-1), [i], "flip", "flip")
    if mode == 10:
        return g.add(lambda x: x.mT.contiguous() if x.dim() >= 2 else x.clone(), [i], "mT", "mT")
    if mode == 11 and n >= 2:
        # slice along a dynamic dim (window every size holds) or last negative
        k = r.randrange(n)
        return g.add(lambda x: x.narrow(k, 0, 1), [i], f"narrow({k},0,1)", "narrow")
    return False


def g_join(g):
    r = g.r
    drawn = draw(g, lambda t: t.dim() >= 1)
    if drawn is None:
        return False
    i, e, t, n, dyn = drawn
    mode = r.randrange(6)
    if mode <= 1:
        # cat with a same-shape-but-one-dim partner of the same dtype (or itself)
        k = r.randrange(n)
        c = [
            j
            for j, f in enumerate(g.pool)
            if isinstance(f.v, torch.Tensor)
            and f.v.dim() == n
            and all(
                all(f.vals[q].shape[m] == g.pool[i].vals[q].shape[m] for m in range(n) if m != k)
                for q in range(len(f.vals))
            )
        ]
        j = r.choice(c)
        if mode == 0:
            kc = k - (n if r.random() < 0.5 else 0)
            return g.add(lambda a, b: torch.cat([a, b], kc), [i, j], f"cat({kc})", "cat")
        if g.pool[j].v.shape == t.shape:
            return g.add(lambda a, b: torch.stack([a, b, a], k), [i, j], f"stack({k})", "stack")
        return False
    f = [k for k in range(n) if k not in dyn]
    if not f:
        return False
    k = r.choice(f)
    sz = t.shape[k]
    if mode == 2 and sz >= 2:
        s = r.randint(1, sz - 1)
        piece = r.randrange(-(-sz // s))
        return g.add(
            lambda x: torch.split(x, s, k)[piece], [i], f"split({s},{k})[{piece}]", "split"
        )
    if mode == 3 and sz >= 2:
        c = r.randint(2, sz)
        npieces = len(torch.chunk(t, c, k))
        piece = r.randrange(npieces)
        return g.add(
            lambda x: x.chunk(c, k)[piece] * 1.0 if is_float(x) else x.chunk(c, k)[piece],
            [i],
            f"chunk({c},{k})[{piece}]",
            "chunk",
        )
    if mode == 4:
        piece = r.randrange(sz)
        return g.add(lambda x: x.unbind(k)[piece], [i], f"unbind({k})[{piece}]", "unbind")
    if mode == 5 and sz >= 2:
        a = r.randint(1, sz - 1)
        return g.add(
            lambda x: torch.cat(torch.split_with_sizes(x, [a, sz - a], k)[::-1], k),
            [i],
            f"split_with_sizes_swap({k})",
            "split_with_sizes",
        )
    return False


def g_misc(g):
    r = g.r
    drawn = draw(g, lambda t: t.dim() >= 1)
    if drawn is None:
        return False
    i, e, t, n, dyn = drawn
    f = [k for k in range(n) if k not in dyn]
    mode = r.randrange(14)
    if mode == 0:
        k = r.randrange(n)
        shift = r.randint(-4, 4)
        return g.add(lambda x: torch.roll(x, shift, k), [i], f"roll({shift},{k})", "roll")
    if mode == 1 and f:
        k = r.choice(f)
        sz = t.shape[k]
        idx = torch.tensor([r.randrange(sz) for _ in range(r.randint(1, 4))])
        if is_float(t):
            return g.add(
                lambda x: torch.index_select(x, k, idx),
                [i],
                f"index_select({k},{idx.tolist()})",
                "index_select",
            )
        return False
    if mode == 2 and f:
        k = r.choice(f)
        sz = t.shape[k]
        shape = list(t.shape)
        if dyn:
            return False
        kk = r.randint(1, 3)
        shape[k] = kk
        idx = torch.randint(0, sz, shape, generator=g.t)
        return g.add(lambda x: torch.gather(x, k, idx), [i], f"gather({k})", "gather")
    if mode == 3 and f:
        k = r.choice(f)
        sz = t.shape[k]
        idx = [r.randrange(-sz, sz) for _ in range(r.randint(1, 3))]
        sl = (slice(None),) * k + (idx,)
        return g.add(lambda x: x[sl], [i], f"index_const(d{k},{idx})", "index_const")
    if mode == 4 and n >= 2 and not ({n - 1, n - 2} & dyn):
        d = r.randint(-2, 2)
        if r.random() < 0.5:
            return g.add(lambda x: torch.tril(x, d), [i], f"tril({d})", "tril")
        return g.add(lambda x: torch.triu(x, d), [i], f"triu({d})", "triu")
    if mode == 5 and n >= 2 and not ({n - 1, n - 2} & dyn) and is_float(t):
        a, b = t.shape[-2], t.shape[-1]
        off = r.randint(-1, 1)
        v = r.choice([float("-inf"), -1e4, 0.0])
        return g.add(
            lambda x: x.masked_fill(torch.arange(a)[:, None] + off < torch.arange(b)[None, :], v),
            [i],
            f"causal_mask({off},{v})",
            "arange_mask",
        )
    if mode == 6:
        dt = r.choice(
            [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool]
        )
        if is_float(t) and dt in INTS:
            # A NaN or a value past the integer type is undefined in C++ (docs/python.md).
            return g.add(
                lambda x: x.nan_to_num(0.0).clamp(-1e6, 1e6).to(dt), [i], f"to({dt})", "cast"
            )
        return g.add(lambda x: x.to(dt), [i], f"to({dt})", "cast")
    if mode == 7 and f:
        k = r.choice(f)
        reps = [1] * n
        reps[k] = r.randint(2, 3)
        if r.random() < 0.5:
            return g.add(lambda x: x.repeat(*reps), [i], f"repeat{reps}", "repeat")
        return g.add(
            lambda x: x.repeat_interleave(reps[k], k),
            [i],
            f"repeat_interleave({reps[k]},{k})",
            "repeat_interleave",
        )
    if mode == 8 and is_float(t) and f:
        k = r.choice(f)
        kk = r.randint(1, t.shape[k])
        largest = r.random() < 0.7
        o = r.randrange(2)
        if i >= g.inputs:
            # Indices only of an input: a computed value can hold ties (relu's zeros), whose
            # order PyTorch leaves to its selection algorithm (docs/python.md, topk).
            o = 0
        return g.add(
            lambda x: torch.topk(x, kk, k, largest=largest)[o],
            [i],
            f"topk({kk},{k},{largest})[{o}]",
            "topk",
        )
    if mode == 9 and f and (n - 1) not in dyn:
        pads = [r.randint(-1, 2), r.randint(0, 2)]
        v = r.choice([0.0, 1.0, -2.0])
        if is_float(t) or is_int(t):
            return g.add(lambda x: F.pad(x, pads, value=v), [i], f"pad({pads},{v})", "pad")
        return False
    if mode == 10 and f:
        k = r.choice(f)
        if t.shape[k] < 2:
            return False
        return g.add(lambda x: torch.diff(x, dim=k), [i], f"diff({k})", "diff")
    if mode == 11 and is_float(t) and f:
        k = r.choice(f)
        sz = t.shape[k]
        kk = r.randint(1, 2)
        shape = list(t.shape)
        if dyn:
            return False
        shape[k] = kk
        idx = torch.randint(0, sz, shape, generator=g.t)
        if r.random() < 0.5:
            return g.add(lambda x: x.scatter(k, idx, 7.0), [i], f"scatter_value({k})", "scatter")
        return g.add(
            lambda x: x.scatter_add(k, idx, torch.ones(shape, dtype=x.dtype)),
            [i],
            f"scatter_add({k})",
            "scatter_add",
        )
    if mode == 12:
        # in-place write: select_scatter / slice_scatter
        if not f:
            return False
        k = r.choice(f)
        sz = t.shape[k]
        a = r.randrange(sz)

        def write(x):
            y = x.clone()
            sl = (slice(None),) * k + (slice(a, None),)
            y[sl] = 0
            return y

        def write2(x):
            y = x.clone()
            sl = (slice(None),) * k + (a,)
            y[sl] = 1
            return y

        if r.random() < 0.5:
            return g.add(write, [i], f"slice_write({k},{a}:)", "slice_scatter")
        return g.add(write2, [i], f"select_write({k},{a})", "select_scatter")
    if mode == 13 and is_float(t):
        # cumsum/ cumprod
        k = r.randrange(n)
        if r.random() < 0.7:
            return g.add(lambda x: torch.cumsum(x, k), [i], f"cumsum({k})", "cumsum")
        return g.add(lambda x: torch.cumprod(x, k), [i], f"cumprod({k})", "cumprod")
    return False


def g_int(g):
    r = g.r
    i = g.pick(is_int)
    if i is None:
        return False
    ops = [
        ("iadd", lambda x: x + 3),
        ("isub", lambda x: x - 5),
        ("imul", lambda x: x * 7),
        ("ifloordiv", lambda x: x // 3),
        ("ifloordiv_neg", lambda x: x // -4),
        ("irem", lambda x: x % 5),
        ("irem_neg", lambda x: x % -3),
        ("ifmod", lambda x: torch.fmod(x - 4, 3)),
        ("idiv_trunc", lambda x: torch.div(x - 5, 3, rounding_mode="trunc")),
        ("itruediv", lambda x: x / 4),
        ("ineg", lambda x: -x),
        ("iabs", lambda x: (x - 4).abs()),
        ("iclamp", lambda x: x.clamp(1, 6)),
        ("itof", lambda x: x.float() * 0.5),
        ("ipow", lambda x: x**2),
        ("ibitand", lambda x: x & 3),
        ("isign", lambda x: torch.sign(x - 3)),
        ("irsub", lambda x: 10 - x),
        ("imax", lambda x: torch.maximum(x, x.flip(-1))),
        ("iarange_mul", lambda x: x * torch.arange(x.shape[-1])),
    ]
    j = bcast_partner(g, i, is_int)
    if j is not None and r.random() < 0.3:
        ops2 = [
            ("iadd_t", lambda a, b: a + b),
            ("imul_t", lambda a, b: a * b),
            ("isub_t", lambda a, b: a - b),
            ("ifloordiv_t", lambda a, b: a // (b.abs() + 1)),
            ("irem_t", lambda a, b: a % (b.abs() + 1)),
            ("imin_t", torch.minimum),
        ]
        name, fn = r.choice(ops2)
        return g.add(fn, [i, j], name, name)
    name, fn = r.choice(ops)
    return g.add(fn, [i], name, name)


def g_embed(g):
    r = g.r
    i = g.pick(lambda t: is_int(t))
    if i is None:
        return False
    t = g.pool[i].v
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi > 40:
        return False
    V = hi + 1 + r.randint(0, 3)
    D = r.choice([2, 3, 4, 8])
    w = g.param(torch.randn(V, D, generator=g.t))
    mode = r.randrange(3)
    if mode == 0:
        return g.add(lambda x, **p: F.embedding(x, p[w]), [i], f"embedding({V},{D})", "embedding")
    if mode == 1:
        return g.add(lambda x, **p: p[w][x], [i], f"table_index({V},{D})", "table_index")
    if t.dim() == 1:
        return g.add(
            lambda x, **p: torch.index_select(p[w], 0, x),
            [i],
            "index_select_ids",
            "index_select_ids",
        )
    return g.add(
        lambda x, **p: p[w][x.flatten()].view(*x.shape, D), [i], "table_flat", "table_index"
    )


def g_sdpa(g):
    r = g.r
    drawn = draw(g, lambda t: is_float(t) and t.dim() == 4 or (is_float(t) and t.dim() == 3))
    if drawn is None:
        return False
    i, e, t, _, _ = drawn
    if (t.dim() - 1) in g.dyn_axes(e) or (t.dim() - 2) in g.dyn_axes(e):
        return False
    S, D = t.shape[-2], t.shape[-1]
    mode = r.randrange(5)
    scale = r.choice([None, 0.3])
    if mode == 0:
        return g.add(
            lambda q: F.scaled_dot_product_attention(q, q, q, scale=scale), [i], "sdpa_self", "sdpa"
        )
    if mode == 1:
        return g.add(
            lambda q: F.scaled_dot_product_attention(
                q, q * 0.5, q.flip(-1), is_causal=True, scale=scale
            ),
            [i],
            "sdpa_causal",
            "sdpa",
        )
    if mode == 2:
        m = torch.rand(S, S, generator=g.t) > 0.3
        m[:, 0] = True
        return g.add(
            lambda q: F.scaled_dot_product_attention(q, q, q, attn_mask=m),
            [i],
            "sdpa_boolmask",
            "sdpa",
        )
    if mode == 3:
        m = torch.randn(S, S, generator=g.t).to(t.dtype)
        return g.add(
            lambda q: F.scaled_dot_product_attention(q, q.tanh(), q, attn_mask=m),
            [i],
            "sdpa_floatmask",
            "sdpa",
        )
    # k/v from another tensor of the same rank and D
    c = [
        j
        for j, f in enumerate(g.pool)
        if is_float(f.v)
        and f.v.dtype == t.dtype
        and f.v.dim() == t.dim()
        and f.v.shape[-1] == D
        and f.v.shape[:-2] == t.shape[:-2]
        and (f.v.dim() - 2) not in g.dyn_axes(f)
    ]
    j = r.choice(c)
    return g.add(
        lambda q, kv: F.scaled_dot_product_attention(q, kv, kv, scale=scale),
        [i, j],
        "sdpa_cross",
        "sdpa",
    )


def g_einsum(g):
    r = g.r
    i = g.pick(lambda t: is_float(t) and t.dim() == 3)
    if i is None:
        return False
    e = g.pool[i]
    if {1, 2} & g.dyn_axes(e):
        return False
    eq = r.choice(["bij->bji", "bij,bkj->bik", "bij->bi"])
    if "," in eq:
        return g.add(lambda x: torch.einsum(eq, x, x), [i], f"einsum({eq})", "einsum")
    return g.add(lambda x: torch.einsum(eq, x), [i], f"einsum({eq})", "einsum")


def g_seq(g):
    """Transformer-ish ops that read sizes at run time (work under dynamic dims)."""
    r = g.r
    drawn = draw(g, lambda t: t.dim() >= 2)
    if drawn is None:
        return False
    i, e, t, _, _ = drawn
    n = t.dim()
    mode = r.randrange(16)
    if mode == 0 and is_float(t) and (n - 1) not in g.dyn_axes(e):
        D = t.shape[-1]
        N = r.choice([2, 4])
        w = g.param(torch.randn(N, D, generator=g.t).to(t.dtype))
        return g.add(
            lambda x, **p: F.linear(x.reshape(-1, D), p[w]).view(*x.shape[:-1], N),
            [i],
            "flat_linear",
            "flat_linear",
        )
    if mode == 1:
        return g.add(lambda x: x[:, 1:], [i], "x[:,1:]", "slice_dyn")
    if mode == 2:
        return g.add(lambda x: x[:, :-1], [i], "x[:,:-1]", "slice_dyn")
    if mode == 3:
        return g.add(lambda x: x[:, -1], [i], "x[:,-1]", "select_dyn")
    if mode == 4:
        return g.add(lambda x: x[:, 0], [i], "x[:,0]", "select_dyn")
    if mode == 5 and is_float(t):
        return g.add(
            lambda x: x + torch.arange(x.shape[1]).view(1, -1, *([1] * (x.dim() - 2))) * 0.1,
            [i],
            "add_arange_S",
            "arange_S",
        )
    if mode == 6 and is_float(t):

        def causal(x):
            S = x.shape[1]
            m = torch.arange(S)[:, None] >= torch.arange(S)[None, :]
            return (
                x[:, :, None]
                .expand(-1, -1, S, *x.shape[2:])
                .masked_fill(~m.view(1, S, S, *([1] * (x.dim() - 2))), 0.0)
                if x.dim() <= 4
                else x
            )

        return g.add(causal, [i], "causal_expand", "causal_mask_dyn")
    if mode == 7:
        k = 1
        if is_bool(t):
            return g.add(lambda x: x.long().cumsum(k) - 1, [i], "positions_from_mask", "cumsum_dyn")
        return g.add(lambda x: x.cumsum(k), [i], "cumsum(1)", "cumsum_dyn")
    if mode == 8 and is_int(t):
        return g.add(lambda x: x != 0, [i], "ids!=0", "mask_from_ids")
    if mode == 9 and is_float(t):
        return g.add(lambda x: x * x.shape[1], [i], "x*S", "size_value")
    if mode == 10 and is_float(t):
        return g.add(lambda x: x / (x.shape[0] * x.shape[1] + 1), [i], "x/(B*S+1)", "size_value")
    if mode == 11:
        return g.add(lambda x: x.flatten(0, 1), [i], "flatten(0,1)", "merge_BS")
    if mode == 12 and is_float(t):
        return g.add(lambda x: torch.softmax(x, 1), [i], "softmax(1)", "softmax_dyn")
    if mode == 13:
        return g.add(
            lambda x: x.transpose(0, 1).contiguous(), [i], "transpose(0,1)", "transpose_dyn"
        )
    if mode == 14 and is_float(t):
        return g.add(lambda x: x.sum(1) / x.shape[1], [i], "mean_by_S", "size_value")
    if mode == 15 and is_int(t):
        return g.add(lambda x: x - x.shape[1] // 2, [i], "ids - S//2", "size_value")
    return False


GENS = [
    (g_unary, 14),
    (g_binary, 12),
    (g_compare, 6),
    (g_logical, 3),
    (g_where, 6),
    (g_reduce, 10),
    (g_softmax, 5),
    (g_matmul, 7),
    (g_norm, 4),
    (g_shape, 12),
    (g_join, 6),
    (g_misc, 12),
    (g_int, 6),
    (g_embed, 3),
    (g_sdpa, 3),
    (g_einsum, 1),
    (g_seq, 8),
]


def make_inputs(r, dynamic, wide=None):
    """Input specs: (kind, shape, scale, dtype) each; a dynamic program's inputs share dim 0
    (and dim 1). `wide` (a random.Random, or None) draws each float input's last dim from 8 to
    64 and its dtype from f32, f16 and bf16 alike: head dims the tensor-core attention kernels
    take."""
    specs = []
    base_rank = r.randint(2, 4)
    for _ in range(r.randint(1, 3)):
        rank = base_rank if r.random() < 0.7 else r.randint(1, 4)
        if dynamic == 2:
            rank = max(rank, 2)
        shape = [r.choice([1, 2, 3, 4, 5]) if r.random() < 0.85 else 1 for _ in range(rank)]
        scale = r.choice([1.0, 1.0, 3.0])
        dt = r.choice([torch.float32] * 6 + [torch.float16, torch.bfloat16])
        if wide is not None:
            shape[-1] = wide.choice([8, 16, 24, 32, 64])
            dt = wide.choice(FLOATS)
        specs.append(("f", shape, scale, dt))
    if r.random() < 0.5:
        rank = r.randint(2 if dynamic == 2 else 1, 2)
        specs.append(("i", [r.choice([2, 3, 4]) for _ in range(rank)], 10, torch.int64))
    if r.random() < 0.3:
        rank = r.randint(2 if dynamic == 2 else 1, 3)
        specs.append(("b", [r.choice([1, 2, 3, 4]) for _ in range(rank)], 0, torch.bool))
    return specs


def realise(specs, sizes, seed, special):
    """Inputs of the specs with dim 0 (and 1) at `sizes`: floats normal, ids in [0, 10), masks
    half true; `special` puts one or two of NaN, +-inf, +-0 into each float input."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for kind, shape, scale, dt in specs:
        shape = list(shape)
        if isinstance(sizes, tuple):
            shape[0], shape[1] = sizes
        elif sizes is not None:
            shape[0] = sizes
        if kind == "f":
            t = torch.randn(shape, generator=gen) * scale
            if special and t.numel() > 1:
                flat = t.view(-1)
                for _ in range(int(torch.randint(1, 3, (1,), generator=gen))):
                    pos = int(torch.randint(0, t.numel(), (1,), generator=gen))
                    flat[pos] = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0][
                        int(torch.randint(0, 5, (1,), generator=gen))
                    ]
            out.append(t.to(dt))
        elif kind == "i":
            out.append(torch.randint(0, scale, shape, generator=gen))
        else:
            out.append(torch.rand(shape, generator=gen) > 0.5)
    return out


class Prog(torch.nn.Module):
    """The program: its steps in order over the inputs, returning the chosen values."""

    def __init__(self, ninputs, steps, params, outs):
        super().__init__()
        self.ninputs = ninputs
        self.steps = steps
        self.outs = outs
        for n, p in params.items():
            self.register_buffer(n, p)
        self.pnames = list(params)

    def forward(self, *xs):
        vals = list(xs)
        p = {n: getattr(self, n) for n in self.pnames}
        for fn, idx, _ in self.steps:
            args = [vals[i] for i in idx]
            vals.append(fn(*args, **p) if takes_params(fn) else fn(*args))
        return tuple(vals[i] for i in self.outs)


class Program:
    """A seed's program: input specs, the generator that made it, the chosen outputs."""

    def __init__(self, seed, specs, gen, outs, dynamic):
        self.seed = seed
        self.specs = specs
        self.gen = gen
        self.outs = outs
        self.dynamic = dynamic
        self.special = seed % 3 == 0

    def module(self):
        return Prog(len(self.specs), self.gen.steps, self.gen.params, self.outs)

    def inputs(self, sizes, seed):
        return realise(self.specs, sizes, seed, self.special)


def generate(seed, dynamic=None, wide=False):
    """The program of a seed (None where no step could be drawn); `dynamic` (0, 1 or 2 dynamic
    dims) is drawn too unless given."""
    r = random.Random(seed)
    drawn = r.choice([0, 0, 1, 2, 2])  # drawn whatever `dynamic` is: the rest follows alike
    dynamic = drawn if dynamic is None else dynamic
    specs = make_inputs(r, dynamic, random.Random(seed * 31 + 7) if wide else None)
    g = Gen(seed * 7919 + 1, dynamic)
    examples = [realise(specs, sizes, seed, seed % 3 == 0) for sizes in EXAMPLE_SIZES[dynamic]]
    for k, (_, _, _, dt) in enumerate(specs):
        g.pool.append(Entry([ex[k] for ex in examples], f"in{k}", dt if dt in FLOATS else None))
    g.inputs = len(specs)
    nsteps = r.randint(3, 10)
    # --wide is for the tensor-core attention kernels: attention drawn four times as often.
    weights = [w * (4 if wide and maker is g_sdpa else 1) for maker, w in GENS]
    tries = 0
    while len(g.steps) < nsteps and tries < 200:
        tries += 1
        maker = g.r.choices([x[0] for x in GENS], weights)[0]
        try:
            maker(g)
        except Exception:  # noqa: BLE001 - a draw the pool cannot serve: draw again
            pass
    made = list(range(len(specs), len(g.pool)))
    if not made:
        return None
    outs = [made[-1]]
    if len(made) > 1 and r.random() < 0.5:
        outs.append(r.choice(made[:-1]))
    return Program(seed, specs, g, outs, dynamic)


# ---------------------------------------------------------------------------------------------
# Running a program through kiln and comparing with eager.


@dataclasses.dataclass(frozen=True)
class Tol:
    """An allclose tolerance: relative, and absolute (at least the relative one)."""

    rel: float
    abs: float

    def __mul__(self, k):
        return Tol(self.rel * k, self.abs * k)

    def __str__(self):
        return f"{self.rel:g}" if self.abs == self.rel else f"{self.rel:g}, absolute {self.abs:.3g}"


def tolerance(entry, precision):
    """The allclose tolerance of a float output: relative and absolute, the absolute one wider
    after a step that cancels (Entry.cancel)."""
    t = TOLERANCE[entry.low or torch.float32]
    if entry.products:
        t = max(t, PRODUCT_TOLERANCE.get(precision, 0.0))
    return Tol(t, t + entry.cancel)


def _magnitude(t):
    """The largest finite magnitude in float tensor `t` (0 where none)."""
    finite = t.detach().double().abs()
    finite = finite[finite.isfinite()]
    return float(finite.max()) if finite.numel() else 0.0


def compare(got, want, tol):
    """None if `got` matches eager's `want`, else (kind, what differs): kind `structure` (not a
    tensor, another shape or dtype), `special` (where NaN or an infinity is) or `values`."""
    if not isinstance(got, torch.Tensor):
        return "structure", f"not a tensor: {type(got).__name__}"
    if got.shape != want.shape:
        return "structure", f"shape {tuple(got.shape)}, eager {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return "structure", f"dtype {got.dtype}, eager {want.dtype}"
    if not want.dtype.is_floating_point:
        if torch.equal(got, want):
            return None
        return "values", f"{int((got != want).sum())} of {want.numel()} elements differ"
    g, w = got.float(), want.float()
    if not torch.equal(g.isnan(), w.isnan()):
        return "special", f"NaN in {int(g.isnan().sum())} elements, eager in {int(w.isnan().sum())}"
    inf = w.isinf() | g.isinf()
    if not torch.equal(g[inf], w[inf]):
        return "special", "an infinity differs"
    fin = w.isfinite() & g.isfinite()
    if not torch.allclose(g[fin], w[fin], rtol=tol.rel, atol=tol.abs):
        d = (g[fin] - w[fin]).abs()
        return "values", f"max abs difference {float(d.max()):.4g} (tolerance {tol})"
    return None


class Timeout(BaseException):
    """A program past its time: not an Exception, so that no `except Exception` in the check
    takes it for a refusal or an error of the program."""


def _exported(prog, model, example):
    shapes = {}
    if prog.dynamic:
        dims = {0: torch.export.Dim("B", min=1, max=8)}
        if prog.dynamic == 2:
            dims[1] = torch.export.Dim("S", min=2, max=16)
        shapes = {"dynamic_shapes": {"xs": tuple(dims for _ in prog.specs)}}
    return torch.export.export(model, tuple(example), strict=False, **shapes)


@dataclasses.dataclass(frozen=True)
class Run:
    """How programs are run: the way they reach kiln (MODES), the precision mode, the target
    (cpu, cpu:NAME or emulate:sm_XX), the kiln cache and a folder for saved programs (a temporary
    one where None)."""

    mode: str = "export"
    precision: str = "high"
    target: str = "cpu"
    cache_dir: str | None = None
    saved_dir: str | None = None
    wide: bool = False  # generate(wide=True)


def _compiled(prog, model, ep, run):
    import kiln.torch

    options = {
        "target": run.target,
        "precision": run.precision,
        "cache_dir": run.cache_dir,
        "fallbacks": "allow",
    }
    if run.mode == "dynamo":
        torch._dynamo.reset()
        return torch.compile(model, backend="kiln", dynamic=bool(prog.dynamic), options=options)
    compiled = kiln.torch.compile_exported(ep, **options)
    if run.mode != "saveload":
        return compiled
    # Loaded through a cache of its own, which the compile did not fill: the saved graphs are
    # compiled again from the folder, as in another process.
    load_cache = f"{run.cache_dir}-load" if run.cache_dir else None
    with tempfile.TemporaryDirectory(dir=run.saved_dir) as folder:
        path = pathlib.Path(folder) / "program"
        compiled.save(path)
        return kiln.torch.load(path, cache_dir=load_cache, fallbacks="allow")


def _failed(rec, status, message):
    rec["status"] = status
    rec["message"] = message
    rec["traceback"] = traceback.format_exc()[-2000:]
    return rec


def check(seed, run=Run(), dynamic=None):
    """Runs a seed's program; a record: its status (ok, rounding, eager_differs:
    checked; empty, eager_fail, export_fail: not checked; compile_error, run_error, mismatch:
    failures), steps, kiln graphs and fallbacks and, for a difference, what and where."""
    prog = generate(seed, dynamic, run.wide)
    if prog is None:
        return {"seed": seed, "mode": run.mode, "status": "empty"}
    rec = {
        "seed": seed,
        "mode": run.mode,
        "precision": run.precision,
        "target": run.target,
        "dynamic": prog.dynamic,
        "steps": [s[2] for s in prog.gen.steps],
        "outputs": prog.outs,
        "inputs": [[list(shape), str(dt)] for _, shape, _, dt in prog.specs],
    }
    model = prog.module()
    example = prog.inputs(EXAMPLE_SIZES[prog.dynamic][0], seed)
    try:
        with torch.no_grad():
            model(*example)
    except Exception:  # noqa: BLE001 - eager cannot run it at the export size
        rec["status"] = "eager_fail"
        return rec
    ep = None
    if run.mode != "dynamo":
        try:
            ep = _exported(prog, model, example)
        except Exception as e:  # noqa: BLE001 - torch.export's refusal comes before kiln's part
            rec["status"] = "export_fail"
            rec["message"] = f"{type(e).__name__}: {str(e)[:300]}"
            return rec
    import kiln.torch

    before = len(kiln.torch.compiled)  # torch.compile's graphs: those it compiles from here on
    try:
        compiled = _compiled(prog, model, ep, run)
    except Exception as e:  # noqa: BLE001
        return _failed(rec, "compile_error", f"{type(e).__name__}: {str(e)[:600]}")
    if run.mode != "dynamo":
        rec["kiln_graphs"] = len(compiled.partitions)
        rec["fallbacks"] = [f.op for f in compiled.fallbacks]

    def ran():  # torch.compile compiles at the first call at each size, out of sight
        if run.mode == "dynamo":
            graphs = kiln.torch.compiled[before:]
            rec["kiln_graphs"] = sum(len(g.kiln_partitions) for g in graphs)
            rec["fallbacks"] = [f.op for g in graphs for f in g.kiln_fallbacks]

    return _compare(prog, model, compiled, rec, run, ran)


def _compare(prog, model, compiled, rec, run, ran):
    """Runs `compiled` and eager at each of the run sizes, calls `ran()`, then referees each
    difference (the referee compiles and runs the program again: after `ran`, so that what it
    compiles is not counted as this run's) and sets the record's status: the first failure, else
    the first difference the referee let pass, else ok (or eager_fail where eager runs none of
    the sizes)."""
    seed = prog.seed
    differences = []  # (sizes, inputs, output, got, want, difference, tolerance)
    compared = 0
    for sizes in RUN_SIZES[prog.dynamic]:
        salt = sizes[0] * 10 + sizes[1] if isinstance(sizes, tuple) else (sizes or 0)
        xs = prog.inputs(sizes, seed + 1000 + salt)
        try:
            with torch.no_grad():
                want = model(*[x.clone() for x in xs])
        except Exception:  # noqa: BLE001 - eager cannot run this size either
            continue
        compared += 1
        try:
            with torch.no_grad():
                got = compiled(*[x.clone() for x in xs])
        except Exception as e:  # noqa: BLE001
            ran()
            return _failed(rec, "run_error", f"sizes {sizes}: {type(e).__name__}: {str(e)[:600]}")
        if not isinstance(got, (tuple, list)):
            got = (got,)
        if len(got) != len(want):
            ran()
            rec["status"] = "mismatch"
            rec["message"] = f"sizes {sizes}: {len(got)} outputs, eager {len(want)}"
            return rec
        for k, (a, b) in enumerate(zip(got, want)):
            tol = tolerance(prog.gen.pool[prog.outs[k]], run.precision)
            difference = compare(a, b, tol)
            if difference:
                differences.append((sizes, xs, k, a, b, difference, tol))
    ran()
    if compared == 0:
        rec["status"] = "eager_fail"
        rec["message"] = "eager runs none of the run sizes"
        return rec
    verdict = "ok"  # or the first difference the referee let pass
    for sizes, xs, k, a, b, difference, tol in differences:
        status = "mismatch"
        if difference[0] != "structure":
            status = _referee(prog, model, xs, k, a, b, difference[0], tol, run)
        if status == "mismatch" or verdict == "ok":
            verdict = status
            rec["message"] = f"sizes {sizes}, output {k}: {difference[1]}"
        if status == "mismatch":
            break
    rec["status"] = verdict
    return rec


def _close(got, want, tol):
    """Element by element: `got` is `want` (within `tol`, NaN for NaN, an infinity exactly)."""
    if not want.dtype.is_floating_point:
        return got == want
    g, w = got.double(), want.double()
    return (g.isnan() & w.isnan()) | (g == w) | ((g - w).abs() <= tol.abs + tol.rel * w.abs())


def _referee(prog, model, xs, k, got, want, kind, tol, run):
    """What a difference (`kind` values or special) between kiln's output `k` and eager's is:
    `rounding`, `eager_differs` or `mismatch`, by the rules the module's docstring states."""
    entry = prog.gen.pool[prog.outs[k]]
    if entry.products and run.precision != "highest" and kind == "values":
        within = not want.dtype.is_floating_point or entry.jumps
        within = within or bool(_close(got, want, 10 * tol).all())
        if within and _passes_in_highest(prog, run):
            return "rounding"
    try:
        in_f64 = copy.deepcopy(model).double()
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            exact = in_f64(*[x.double() if is_float(x) else x.clone() for x in xs])[k]
    except Exception:  # noqa: BLE001 - the program does not run in float64
        return "mismatch"
    if exact.shape != got.shape:
        return "mismatch"
    if bool((_close(got, want, tol) | _close(got, exact, tol)).all()):
        return "eager_differs"
    return "mismatch"


def _passes_in_highest(prog, run):
    """Whether the same program gives eager's results in `highest`."""
    exact_products = dataclasses.replace(run, precision="highest")
    return check(prog.seed, exact_products, prog.dynamic)["status"] == "ok"


CHECKED = ("ok", "rounding", "eager_differs")
FAILURES = ("compile_error", "run_error", "mismatch", "timeout", "crash", "harness_error")


def _on_alarm(*_):
    raise Timeout()


def check_with_timeout(seed, run, timeout):
    """check(), or a `timeout` record past `timeout` seconds (SIGALRM: the main thread only; a
    wait inside native code ends when it returns), or a `harness_error` record."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout)
    try:
        return check(seed, run)
    except Timeout:
        return {"seed": seed, "mode": run.mode, "status": "timeout"}
    except Exception as e:  # noqa: BLE001
        return {
            "seed": seed,
            "mode": run.mode,
            "status": "harness_error",
            "message": repr(e)[:600],
            "traceback": traceback.format_exc()[-2000:],
        }
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _worker_init():
    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import warnings

    warnings.filterwarnings("ignore")


def _run_all(seeds, runs, jobs, timeout, on_record=lambda rec: None, check=None):
    """Each seed's record, in order; `on_record` is called with each as it comes. A worker that
    dies (a crash in native code) breaks the pool: the seeds it left without a record then run
    again one at a time, each in a pool of its own, so that a crash is the record of the seed
    that made it. `check` (seed, run, timeout) -> record runs in the workers (a module-level
    function; check_with_timeout unless given)."""
    check = check or check_with_timeout
    context = multiprocessing.get_context("spawn")
    records = {}
    with concurrent.futures.ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_worker_init
    ) as pool:
        futures = {pool.submit(check, s, runs[s], timeout): s for s in seeds}
        for future in concurrent.futures.as_completed(futures):
            try:
                records[futures[future]] = future.result()
            except concurrent.futures.process.BrokenProcessPool:
                continue
            on_record(records[futures[future]])
    for s in seeds:
        if s in records:
            continue
        with concurrent.futures.ProcessPoolExecutor(
            1, mp_context=context, initializer=_worker_init
        ) as pool:
            try:
                records[s] = pool.submit(check, s, runs[s], timeout).result()
            except concurrent.futures.process.BrokenProcessPool:
                records[s] = {
                    "seed": s,
                    "mode": runs[s].mode,
                    "status": "crash",
                    "message": "the worker died (a signal or an abort)",
                }
        on_record(records[s])
    return [records[s] for s in seeds]


def mode_of(seed, mode):
    return MODES[seed % len(MODES)] if mode == "all" else mode


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mode", choices=MODES + ("all",), default="all")
    parser.add_argument("--precision", choices=PRECISIONS, default="high")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="float inputs' last dims 8 to 64, f32, f16 and bf16 alike (tensor-core attention)",
    )
    parser.add_argument(
        "--target", default="cpu", help="cpu (the default), cpu:NAME or emulate:sm_XX"
    )
    parser.add_argument(
        "--out",
        default="torch-differential",
        help="folder for results.jsonl, the kiln cache and saved programs",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=300, help="seconds a program may take")
    args = parser.parse_args()
    if args.count < 1 or args.jobs < 1 or args.timeout < 1:
        parser.error("--count, --jobs and --timeout must be positive")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache_dir, saved_dir = out / "cache", out / "saved"
    saved_dir.mkdir(exist_ok=True)
    seeds = range(args.seed, args.seed + args.count)
    counts: dict[str, int] = {}
    started = time.time()
    runs = {
        mode: Run(mode, args.precision, args.target, str(cache_dir), str(saved_dir), args.wide)
        for mode in MODES
    }
    path = out / "results.jsonl"
    with open(path, "w") as results:

        def on_record(rec):  # written and reported as it comes, so that a stopped run keeps it
            results.write(json.dumps(rec) + "\n")
            results.flush()
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
            if rec["status"] in FAILURES:
                what = f"{rec['status']}: {rec.get('message', '')}"
                print(f"seed {rec['seed']} ({rec['mode']}): {what}", file=sys.stderr)
                print(f"  steps: {rec.get('steps')}", file=sys.stderr)
                print(
                    f"  reproduce: {sys.argv[0]} --seed {rec['seed']} --count 1 --mode "
                    f"{rec['mode']} --precision {args.precision} --target {args.target}"
                    + (" --wide" if args.wide else ""),
                    file=sys.stderr,
                )

        records = _run_all(
            seeds,
            {s: runs[mode_of(s, args.mode)] for s in seeds},
            args.jobs,
            args.timeout,
            on_record,
        )
    # The finished file in seed order.
    ordered = path.with_suffix(".jsonl.tmp")
    ordered.write_text("".join(json.dumps(rec) + "\n" for rec in records))
    ordered.replace(path)
    failed = sum(counts.get(s, 0) for s in FAILURES)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(
        f"torch_differential: {len(seeds)} programs in {time.time() - started:.0f} s: {summary}; "
        f"results in {out / 'results.jsonl'}"
    )
    if sum(counts.get(s, 0) for s in CHECKED) == 0:
        print("torch_differential: no program was checked", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
