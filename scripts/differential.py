#!/usr/bin/env python3
"""Random graphs, run by kiln against its fp64 reference: a differential check of the fusion
and code generation that the example graphs and the per-op tests do not reach.

Each graph composes 3 to 12 steps of a well-conditioned repertoire (pointwise ops with
broadcasting, pow with a tensor exponent, reductions, softmax, norms, matmul, attention with
masks, scales and grouped-query heads, layout ops, expand, casts between float types) over f32,
f16 or bf16 inputs of rank 1 to 6, a third of them with a symbolic dim S (its range starting at
1 or up to 16, windows sliced along it within that low end); two in five also make and use ids,
masks and positions (embedding, comparisons of inputs, where, cumsum of a mask, integer
arithmetic with floor_divide and remainder, logic, causal masks from arange, casts to float;
positions from arange, of S too, in integer arithmetic and compared with ids and lengths,
padding masks of attention among them; clamped or taken mod a table's rows as embedding ids; in
float, as rotary tables are; roll, with shifts past the dim's size, and cumsum of ids and masks,
some in i32). Integers stay far from wrapping: an operand that may pass 2^24 is taken mod 16
first. Every value nothing reads is an output, and some that others read. Every graph runs
through `kiln run --json` on each target asked for, in each precision mode; the run checks every
output against the fp64 reference within the mode's tolerance. A graph kiln refuses (exit 2) is
counted, not a failure: the generator does not model every rule. A float output past its
tolerance by less than 3x, or by at most 1e-6 absolute, is "loose": counted and shown, not a
failure (a sum with cancellation, the far tail of gelu: the tolerances are made for the example
graphs). --max-refused and --max-loose bound both (ctest: 0), and a run where no graph was
checked fails. Anything else that exits 1 (an output further off, an integer or bool output that
differs, a failed compile) or dies is a failure, and the graph is kept for a bug report.

`--large` starts each graph with a large step and draws more among its steps: a matmul of at
least 66 output tiles of 128 x 128 (so that sm_90a's model runs it on the wgmma kernel, its
persistent grid, TMA loads and mbarrier ring; rows and columns ending anywhere in their last
tile; A or B transposed; K mostly in whole 16-byte units), or an attention of 129 to 520
queries and keys (its K and V ring wraps; head dims 32 to 192). Its emulated device has 1, 3,
8, 33 or 132 multiprocessors (`kiln run --sm-count`), so that the persistent wgmma matmul's
blocks loop over several work tiles. It says how many graphs run a wgmma kernel on sm_90a in
`high` (`kiln emit`), and --min-wgmma bounds that from below.

    scripts/differential.py --count 200 --seed 1 --targets cpu,emulate:sm_80,emulate:sm_90a \
        --out /tmp/differential

Uses only the standard library and the kiln CLI (build/tools/kiln, or --kiln)."""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import pathlib
import random
import re
import subprocess
import sys

UNARY = ["relu", "gelu", "silu", "sigmoid", "tanh", "neg", "abs", "erf", "cos", "sin"]
# Ops kept in their well-conditioned ranges: x scaled or moved away from their poles.
GUARDED = {
    "exp": "exp(mul({x}, 0.25))",
    "log": "log(add(abs({x}), 1.0))",
    "sqrt": "sqrt(add(abs({x}), 0.5))",
    "rsqrt": "rsqrt(add(abs({x}), 0.5))",
    "pow": "pow(add(abs({x}), 0.5), 1.5)",
    "square": "mul({x}, {x})",
}
BINARY = ["add", "sub", "mul", "maximum", "minimum"]
# The steps on or making ids, masks and positions (Graph.typed_step).
TYPED = {"embed", "compare", "mask", "fill", "positions", "integer", "to_float", "logic", "causal",
         "arange", "arange_compare", "gather", "float_positions", "int_roll", "int_cumsum"}
# Bounds on the magnitude of i64 values: seeded integer inputs are in [0, 16); an operand past
# SMALL_BOUND is taken mod 16 first, so a product or a running sum stays far from 2^63 (and a
# running sum in i32 from 2^31): integer arithmetic wraps by the IR's rules, but a wrapped value
# tests little.
INTEGER_INPUT_BOUND = 15
SMALL_BOUND = 1 << 24
INTEGER_BOUND = 1 << 62


def combined(op: str, a: int, b: int) -> int:
    """A bound on `op` of values bounded by `a` and `b` (a zero divisor gives 0)."""
    bound = {"add": a + b, "sub": a + b, "mul": a * b, "floor_divide": a,
             "remainder": max(b - 1, 0), "maximum": max(a, b), "minimum": max(a, b)}[op]
    return max(bound, 1)


class Graph:
    """A graph being made: its values all of one float dtype, their shapes lists of sizes and,
    in a symbolic graph, the dim S (range 1..S_MAX)."""

    def __init__(self, rng: random.Random, name: str, dtype: str, symbolic: bool, mixed: bool,
                 large: bool = False):
        self.rng = rng
        self.large = large  # large matmuls and attentions among the steps (large_step)
        self.name = name
        self.dtype = dtype
        self.symbolic = symbolic
        self.mixed = mixed  # ids, masks and positions besides the float values
        self.inputs: list[tuple[str, list, str]] = []  # (name, shape, dtype)
        self.lines: list[str] = []
        self.values: list[tuple[str, list]] = []  # the float values: (name, shape)
        self.others: list[tuple[str, list, str]] = []  # i64 and bool values: (name, shape, dtype)
        self.bounds: dict[str, int] = {}  # each i64 value's largest magnitude
        self.s_low = 1  # the low end of S's range: a slice along S stays within it
        self.serial = 0

    def fresh(self, prefix: str = "v") -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def input(self, shape: list, dtype: str | None = None) -> str:
        name = self.fresh("x")
        dtype = dtype or self.dtype
        self.inputs.append((name, shape, dtype))
        if dtype == "i64":
            self.bounds[name] = INTEGER_INPUT_BOUND
        if dtype == self.dtype:
            self.values.append((name, shape))
        else:
            self.others.append((name, shape, dtype))
        return name

    def let(self, text: str, shape: list, dtype: str | None = None, bound: int = 0) -> str:
        """A value computed by `text`; an i64 one with `bound`, its largest magnitude."""
        name = self.fresh()
        self.lines.append(f"  {name} = {text}")
        if dtype == "i64":
            assert 0 < bound <= INTEGER_BOUND, (text, bound)
            self.bounds[name] = bound
        if dtype is None or dtype == self.dtype:
            self.values.append((name, shape))
        else:
            self.others.append((name, shape, dtype))
        return name

    def other(self, dtype: str) -> tuple[str, list]:
        """A value of `dtype` (i64 or bool), the newest more often; a new input where there is
        none."""
        choices = [(n, s) for n, s, d in self.others if d == dtype]
        if not choices or self.rng.random() < 0.15:
            shape = self.shape()
            return self.input(shape, dtype), shape
        return self.rng.choices(choices, [1 + i for i in range(len(choices))])[0]

    def small(self, name: str, shape: list, limit: int = SMALL_BOUND) -> tuple[str, int]:
        """`name` (i64), or its remainder mod 16 where it may be larger than `limit`: the
        operands of integer arithmetic stay small enough that no result wraps."""
        if self.bounds[name] <= limit:
            return name, self.bounds[name]
        return self.let(f"remainder({name}, 16)", list(shape), "i64", 15), 15

    def pick(self, rank_at_least: int = 1) -> tuple[str, list[int]]:
        choices = [v for v in self.values if len(v[1]) >= rank_at_least]
        if not choices:
            return self.input(self.shape(rank_at_least))
        # The newest values more often: chains, not only a fan of one input.
        weights = [1 + i for i in range(len(choices))]
        return self.rng.choices(choices, weights)[0]

    def size(self) -> int:
        return self.rng.choice([1, 2, 3, 5, 7, 8, 16, 17, 31, 32, 33, 48, 64, 65, 96, 130])

    def shape(self, rank: int | None = None) -> list:
        rank = rank or self.rng.choice([1, 2, 2, 3, 3, 4, 5, 6])
        batch = [1, 2, 3, 4] if rank <= 4 else [1, 1, 2, 3]  # rank 5 and 6: small batch dims
        shape = [self.rng.choice(batch) for _ in range(rank - 2)] + \
            [self.size() for _ in range(min(rank, 2))]
        if self.symbolic and self.rng.random() < 0.7:
            shape[self.rng.randrange(len(shape))] = "S"  # rows, columns or a batch dim
        return shape

    def extent(self, d) -> int:
        """The largest size dim `d` (a number or S) takes."""
        return S_MAX if d == "S" else d

    def shift(self, n) -> int:
        """A roll's shift along a dim of size `n`: small mostly, else past the dim's size (and
        reduced mod n where computed), up to +-(2^31 - 1)."""
        rng = self.rng
        if rng.random() < 0.75:
            return rng.randrange(-3, 4)
        n = self.extent(n)
        return rng.choice([n, -n, n + 1, -n - 1, 2 * n + 3, 1000003, 2**31 - 1, -(2**31 - 1)])

    def arange_along(self, shape: list, axis: int, dtype: str = "i64") -> str:
        """The positions along `axis` of `shape`, reshaped to broadcast against it: `arange(n)`
        (or of S) as [1, .., n, .., 1], the leading ones sometimes left to broadcasting."""
        n = shape[axis]
        text = f"arange({n})" if dtype == "i64" else f"arange({n}, dtype={dtype})"
        dims = [1] * len(shape)
        dims[axis] = n
        dims = dims[self.rng.randint(0, len(shape) + axis):]  # (axis counts from the end)
        if len(dims) > 1:
            text = f"reshape({text}, shape=[{', '.join(map(str, dims))}])"
        return text

    def fixed_axes(self, shape: list) -> list[int]:
        """The axes (from the end) whose size is a number."""
        return [a - len(shape) for a in range(len(shape)) if isinstance(shape[a], int)]

    def step(self) -> None:
        rng = self.rng
        kinds = {"unary": 6, "guarded": 3, "binary": 6, "literal": 2, "reduce": 3, "softmax": 2,
                 "norm": 2, "matmul": 3, "attention": 1, "permute": 2, "slice": 2, "concat": 2,
                 "reshape": 2, "cast": 2, "where": 2, "cumsum": 1, "roll": 1, "expand": 2,
                 "power": 1}
        if self.mixed:
            kinds.update({"embed": 3, "compare": 3, "mask": 1, "fill": 4, "positions": 3,
                          "integer": 5, "to_float": 3, "logic": 2, "causal": 1,
                          "arange": 3, "arange_compare": 2, "gather": 2, "float_positions": 1,
                          "int_roll": 2, "int_cumsum": 2})
        if self.large:
            kinds["large"] = 2
        kind = rng.choices(list(kinds), list(kinds.values()))[0]
        if kind == "large":
            self.large_step()
            return
        if kind in TYPED:
            self.typed_step(kind)
            return
        x, shape = self.pick()
        rank = len(shape)
        if kind == "unary":
            op = rng.choice(UNARY + ["gelu_tanh"])
            text = f'gelu({x}, approximate="tanh")' if op == "gelu_tanh" else f"{op}({x})"
            self.let(text, shape)
        elif kind == "guarded":
            self.let(GUARDED[rng.choice(sorted(GUARDED))].format(x=x), shape)
        elif kind == "binary":
            op = rng.choice(BINARY + ["div"])
            other = self.operand_like(shape)
            if op == "div":
                self.let(f"div({x}, add(abs({other}), 1.0))", shape)
            else:
                self.let(f"{op}({x}, {other})", shape)
        elif kind == "literal":
            op = rng.choice(["add", "mul", "sub", "maximum"])
            self.let(f"{op}({x}, {rng.choice(['0.5', '-1.25', '2.0', '0.0'])})", shape)
        elif kind == "reduce":
            op = rng.choice(["sum", "mean", "max"])
            axis = rng.randrange(-rank, 0)
            keep = rng.random() < 0.5 or rank == 1
            out = list(shape)
            if keep:
                out[axis] = 1
            else:
                del out[axis]
            text = f"{op}({x}, axis={axis}" + (", keepdim=true)" if keep else ")")
            self.let(text, out)
        elif kind == "softmax":
            self.let(f"softmax({x}, axis={rng.randrange(-rank, 0)})", shape)
        elif kind == "norm":
            w = self.input([shape[-1]])
            if rng.random() < 0.5:
                self.let(f"rms_norm({x}, {w})", shape)
            else:
                b = self.input([shape[-1]])
                self.let(f"layer_norm({x}, {w}, {b})", shape)
        elif kind == "matmul":
            if rank < 2:
                return
            n = self.size()
            batch = shape[:-2]
            # The right side: a weight [k, n], or a batched one [.., k, n] of the same batch.
            bshape = (list(batch) if batch and rng.random() < 0.5 else []) + [shape[-1], n]
            transpose = rng.random() < 0.3
            w = self.input(bshape[:-2] + [n, shape[-1]] if transpose else bshape)
            extra = ", transpose_b=true" if transpose else ""
            k = shape[-1] if isinstance(shape[-1], int) else S_MAX
            scaled = f"mul({x}, {1.0 / max(1, k) ** 0.5:.4f})"
            if self.dtype != "f32" and rng.random() < 0.4:
                # The fp32 sums, a bias added to them, rounded once (PyTorch's addmm).
                b = self.input([n])
                self.let(f"cast(add(matmul({scaled}, {w}{extra}, out_dtype=f32), "
                         f"cast({b}, to=f32)), to={self.dtype})", batch + [shape[-2], n])
                return
            self.let(f"matmul({scaled}, {w}{extra})", batch + [shape[-2], n])
        elif kind == "attention":
            if rank < 2 or not isinstance(shape[-1], int) or shape[-1] > 128:
                return
            keys, width = self.size(), rng.choice([8, 16, 32, shape[-1]])
            batch = list(shape[:-2])
            if len(batch) >= 1 and batch[-1] in (2, 4) and rng.random() < 0.4:
                batch[-1] //= 2  # grouped-query attention: half the heads in k and v
            k = self.input(batch + [keys, shape[-1]])
            v = self.input(batch + [keys, width])
            extra = ", causal=true" if rng.random() < 0.3 else ""
            if self.mixed and rng.random() < 0.25:
                # A padding mask from lengths, written in place: the keys before each query's
                # (or every query's) length, none where it is 0 (then a row of zeros).
                lengths = self.input([shape[-2], 1] if rng.random() < 0.5 else [1, 1], "i64")
                extra += f", mask=lt(reshape(arange({keys}), shape=[1, {keys}]), {lengths})"
            elif rng.random() < 0.4:  # a mask of the keys kept (bool) or added (float)
                kind_of = rng.choice(["bool", self.dtype])
                mask = self.input([shape[-2], keys] if rng.random() < 0.5 else [1, keys], kind_of)
                extra += f", mask={mask}"
            if rng.random() < 0.3:
                extra += f", scale={rng.choice(['0.125', '0.5', '1.0'])}"
            self.let(f"attention({x}, {k}, {v}{extra})", shape[:-1] + [width])
        elif kind == "permute":
            if rank < 2:
                return
            dims = list(range(rank))
            rng.shuffle(dims)
            self.let(f"permute({x}, dims=[{', '.join(map(str, dims))}])", [shape[d] for d in dims])
        elif kind == "slice":
            symbolic = [a - rank for a in range(rank) if shape[a] == "S"]
            if symbolic and (rng.random() < 0.4 or not self.fixed_axes(shape)):
                # A window along S every size of its range holds: 0 <= start < end <= low end.
                axis, n = symbolic[0], self.s_low
            elif self.fixed_axes(shape):
                axis = rng.choice(self.fixed_axes(shape))
                n = shape[axis]
            else:
                return
            start = rng.randrange(0, n)
            end = rng.randrange(start + 1, n + 1)
            out = list(shape)
            out[axis] = end - start
            if shape[axis] == "S" or rng.random() < 0.7:
                self.let(f"slice({x}, axis={axis}, start={start}, end={end})", out)
            else:  # counted from the end, as in Python (an end of 0 would be empty)
                self.let(f"slice({x}, axis={axis}, start={start - n}, "
                         f"end={end - n if end < n else end})", out)
        elif kind == "concat":
            if not self.fixed_axes(shape):
                return
            axis = rng.choice(self.fixed_axes(shape))
            out, operands = list(shape), [x]
            for _ in range(rng.choice([1, 1, 2, 3])):  # two to four operands
                other_shape = list(shape)
                other_shape[axis] = self.size()
                operands.append(self.operand_exact(other_shape))
                out[axis] += other_shape[axis]
            self.let(f"concat({', '.join(operands)}, axis={axis})", out)
        elif kind == "expand":
            ones = [a for a, d in enumerate(shape) if d == 1]
            if not ones:
                return
            out = list(shape)
            for a in ones:
                if rng.random() < 0.7:
                    out[a] = self.size()
            if rng.random() < 0.3 and rank < 6:
                out = [rng.choice([2, 3])] + out  # a new leading dim
            self.let(f"expand({x}, shape=[{', '.join(map(str, out))}])", out)
        elif kind == "power":
            y = self.operand_exact(list(shape))
            self.let(f"pow(add(abs({x}), 0.5), mul(tanh({y}), 2.0))", shape)
        elif kind == "reshape":
            last = shape[-1] if isinstance(shape[-1], int) else 0
            factors = [f for f in range(2, last) if last % f == 0]
            if rank < 6 and factors and rng.random() < 0.5:  # the last dim split in two
                f = rng.choice(factors)
                out = shape[:-1] + [f, last // f]
            elif rank >= 2 and all(isinstance(d, int) for d in shape[-2:]):  # the last two merged
                out = shape[:-2] + [shape[-2] * shape[-1]]
            else:
                return
            self.let(f"reshape({x}, shape=[{', '.join(map(str, out))}])", out)
        elif kind == "cast":
            other = rng.choice([t for t in ("f32", "f16", "bf16") if t != self.dtype])
            self.let(f"cast(cast({x}, to={other}), to={self.dtype})", shape)
        elif kind == "where":
            other = self.operand_like(shape)
            cmp = rng.choice(["gt", "lt", "ge", "le"])
            self.let(f"where({cmp}({x}, {other}), {x}, {other})", shape)
        elif kind == "cumsum":
            axis = rng.randrange(-rank, 0)
            if self.dtype == "f32":
                self.let(f"cumsum({x}, axis={axis})", shape)
            else:  # a running mean: a sum of n values rounded to 16 bits is off by n/256 of one,
                # which a softmax or exp after it takes past the tolerance
                n = self.extent(shape[axis])
                self.let(f"cumsum(mul({x}, {1 / n:.6g}), axis={axis})", shape)
        elif kind == "roll":
            axis = rng.randrange(-rank, 0)
            self.let(f"roll({x}, shift={self.shift(shape[axis])}, axis={axis})", shape)

    def large_step(self) -> None:
        """A large matmul or attention on new inputs (--large, in the module's text). 66 tiles
        are half of an H100's SMs, where sm_90a's model takes the wgmma kernel (wgmma_fills);
        every value stays within 2^20 elements (a draw past it is drawn again). An unaligned
        row stride or K (TMA's 16-byte rule) leaves the matmul to the mma.sync kernel."""
        rng = self.rng
        if rng.random() < 0.6:
            a_t, b_t = rng.random() < 0.3, rng.random() < 0.3
            # A row stride (m of a transposed A, n of B that is not) of whole 16-byte units
            # mostly: 8 elements suit every dtype.
            def end(stride: bool) -> int:
                ends = [8, 64, 120, 128] if stride and rng.random() < 0.9 else [1, 8, 64, 127, 128]
                return rng.choice(ends)
            k = rng.choice([8, 16, 24, 40, 64, 72, 136, 256] if rng.random() < 0.9 else [17, 60])
            for _ in range(100):
                batch = rng.choice([[], [], [2], [3], [4], [1, 2], [2, 2]])
                count = math.prod(batch)
                rows = rng.randint(2, 11)
                cols = max(2, -(-66 // (count * rows)))  # ceil: 66 tiles at least
                m = 128 * (rows - 1) + end(a_t)
                n = 128 * (cols - 1) + end(not b_t)
                if count * max(m, k) * n <= 1 << 20 and count * m * k <= 1 << 20:
                    break
            else:
                return
            x = self.input(batch + ([k, m] if a_t else [m, k]))
            bbatch = batch if batch and rng.random() < 0.5 else []
            w = self.input(bbatch + ([n, k] if b_t else [k, n]))
            extra = (", transpose_a=true" if a_t else "") + (", transpose_b=true" if b_t else "")
            scale = f"{1.0 / k ** 0.5:.4f}"
            if rng.random() < 0.5:  # the scale on A (a kernel before it) or in the epilogue
                x = self.let(f"mul({x}, {scale})", batch + ([k, m] if a_t else [m, k]))
                product = f"matmul({x}, {w}{extra})"
            else:
                product = f"mul(matmul({x}, {w}{extra}), {scale})"
            if self.dtype != "f32" and rng.random() < 0.4:
                b = self.input([n])
                product = product.replace(f"{extra})", f"{extra}, out_dtype=f32)", 1)
                product = f"cast(add({product}, cast({b}, to=f32)), to={self.dtype})"
            elif rng.random() < 0.4:
                product = f"add({product}, {self.input([n])})"
            if rng.random() < 0.4:
                product = f"{rng.choice(UNARY)}({product})"
            self.let(product, batch + [m, n])
            return
        heads = rng.choice([[1], [2], [1, 2], [2, 2], [4]])
        queries, keys = rng.choice([129, 200, 257, 384, 520]), rng.choice([129, 200, 257, 384, 520])
        d, dv = rng.choice([32, 64, 80, 128, 192]), rng.choice([32, 64, 128])
        kv = list(heads)
        if kv[-1] in (2, 4) and rng.random() < 0.4:
            kv[-1] //= 2  # grouped-query attention
        q = self.input(heads + [queries, d])
        k = self.input(kv + [keys, d])
        v = self.input(kv + [keys, dv])
        extra = ", causal=true" if rng.random() < 0.3 else ""
        if rng.random() < 0.3:
            kind_of = rng.choice(["bool", self.dtype])
            mask = self.input([queries, keys] if rng.random() < 0.5 else [1, keys], kind_of)
            extra += f", mask={mask}"
        if rng.random() < 0.3:
            extra += f", scale={rng.choice(['0.125', '0.5'])}"
        self.let(f"attention({q}, {k}, {v}{extra})", heads + [queries, dv])

    def typed_step(self, kind: str) -> None:
        """An op on or making ids, masks or positions (i64 and bool values)."""
        rng = self.rng
        if kind == "embed":
            ids_shape = self.shape(rng.choice([1, 2]))
            rows = rng.choice([3, 5, 17, 50])
            ids = self.other("i64") if rng.random() < 0.3 else None
            if ids is None or len(ids[1]) > 5:  # ids of rank 0 to 5
                ids = (self.input(ids_shape, "i64"), ids_shape)
            table = self.input([rows, self.size()])
            self.let(f"embedding({table}, {ids[0]})", list(ids[1]) + [self.values[-1][1][-1]])
        elif kind == "compare":
            # Of inputs only: a comparison of computed floats flips where kiln and the reference
            # round them apart (both within the mode's promise), which is no bug.
            x, shape = self.rng.choice([(n, s) for n, s, d in self.inputs if d == self.dtype] or
                                       [(self.input(self.shape()), self.inputs[-1][1])])
            op = rng.choice(["gt", "lt", "ge", "le", "eq", "ne"])
            same = [n for n, s, d in self.inputs if d == self.dtype and s == shape and n != x]
            other = rng.choice(same + ["0.25", "0.0"])
            self.let(f"{op}({x}, {other})", shape, "bool")
        elif kind == "mask":
            self.input(self.shape(), "bool")
        elif kind == "fill":
            m = self.other("bool")
            x = self.operand_exact(list(m[1]))
            fill = rng.choice(["0.0", "-1.5", "3.0"])
            args = (x, fill) if rng.random() < 0.5 else (fill, x)
            self.let(f"where({m[0]}, {args[0]}, {args[1]})", list(m[1]))
        elif kind == "positions":
            m = self.other("bool")
            axis = rng.randrange(-len(m[1]), 0)
            as_int = f"cast({m[0]}, to=i64)"
            self.let(f"sub(mul(cumsum({as_int}, axis={axis}), {as_int}), 1)", list(m[1]), "i64",
                     self.extent(m[1][axis]))
        elif kind == "integer":
            p = self.other("i64")
            op = rng.choice(["add", "sub", "mul", "floor_divide", "remainder", "maximum",
                             "minimum"])
            same = [n for n, s, d in self.others if d == "i64" and s == p[1]]
            by = rng.choice(["2", "3", "-2", "7", "0"] + same)
            if op in ("maximum", "minimum") and by.lstrip("-").isdigit():
                by = rng.choice(same)
            a, bound = self.small(p[0], p[1])
            if by.lstrip("-").isdigit():
                b = abs(int(by))
            else:
                by, b = self.small(by, p[1])
            self.let(f"{op}({a}, {by})", list(p[1]), "i64", combined(op, bound, b))
        elif kind == "to_float":
            # Small whole numbers (products of positions grow past what exp and cos of them keep
            # well-conditioned): exact in every float type.
            dtype = rng.choice(["i64", "bool"])
            p = self.other(dtype)
            value = f"remainder({p[0]}, 8)" if dtype == "i64" else p[0]
            self.let(f"cast({value}, to={self.dtype})", list(p[1]))
        elif kind == "logic":
            a = self.other("bool")
            same = [n for n, s, d in self.others if d == "bool" and s == a[1]]
            op = rng.choice(["logical_and", "logical_or", "logical_not"])
            if op == "logical_not":
                self.let(f"logical_not({a[0]})", list(a[1]), "bool")
            else:
                self.let(f"{op}({a[0]}, {rng.choice(same)})", list(a[1]), "bool")
        elif kind == "causal":
            n = self.size()
            self.let(f"lt(reshape(arange({n}), shape=[1, {n}]), reshape(arange({n}), "
                     f"shape=[{n}, 1]))", [n, n], "bool")
        elif kind == "arange":
            # Positions in integer arithmetic with ids: arange along one axis (of S too, some
            # made in i32), broadcast against an i64 value.
            p, shape = self.other("i64")
            axis = rng.randrange(-len(shape), 0)
            n = self.extent(shape[axis])
            pos = self.arange_along(shape, axis, rng.choice(["i64", "i64", "i32"]))
            if "dtype=i32" in pos:
                pos = f"cast({pos}, to=i64)"
            a, bound = self.small(p, shape)
            op = rng.choice(["add", "sub", "mul", "floor_divide", "remainder", "maximum",
                             "minimum"])
            if op in ("floor_divide", "remainder") and rng.random() < 0.5:
                # Divided by positions: position 0 is a zero divisor (0 for both), or from 1.
                by = pos if rng.random() < 0.5 else f"add({pos}, 1)"
                text, bound = f"{op}({a}, {by})", combined(op, bound, n + 1)
            elif rng.random() < 0.5:
                text, bound = f"{op}({pos}, {a})", combined(op, n, bound)
            else:
                text, bound = f"{op}({a}, {pos})", combined(op, bound, n)
            self.let(text, list(shape), "i64", bound)
        elif kind == "arange_compare":
            op = rng.choice(["lt", "le", "gt", "ge", "eq", "ne"])
            if rng.random() < 0.4:
                # A padding mask from lengths: the positions along an axis against a length
                # for each of the other dims' entries.
                shape = self.shape(rng.choice([2, 2, 3]))
                axis = rng.randrange(-len(shape), 0)
                lengths = list(shape)
                lengths[axis] = 1
                lengths = self.input(lengths, "i64")
                self.let(f"{op}({self.arange_along(shape, axis)}, {lengths})", shape, "bool")
                return
            # Positions against ids (of their own shape, or their remainder by the dim's size).
            p, shape = self.other("i64")
            axis = rng.randrange(-len(shape), 0)
            ids = p
            if rng.random() < 0.3:
                ids = f"remainder({p}, {self.extent(shape[axis])})"
            args = [self.arange_along(shape, axis), ids]
            rng.shuffle(args)
            self.let(f"{op}({args[0]}, {args[1]})", list(shape), "bool")
        elif kind == "gather":
            # An embedding whose ids are positions, clamped into the table or taken mod its
            # rows: of a sequence (a position embedding), or positions and ids combined.
            rows = rng.choice([3, 5, 17, 50, 128])
            p, shape = self.other("i64") if rng.random() < 0.6 else (None, [])
            if p is None or len(shape) > 5:
                n = "S" if self.symbolic and rng.random() < 0.5 else self.size()
                shape, ids = [n], f"arange({n})"
            else:
                axis = rng.randrange(-len(shape), 0)
                a, _ = self.small(p, shape)
                args = [self.arange_along(shape, axis), a]
                rng.shuffle(args)
                ids = f"{rng.choice(['add', 'sub', 'mul'])}({args[0]}, {args[1]})"
            if rng.random() < 0.5:
                ids = f"remainder({ids}, {rows})"
            else:
                ids = f"minimum(maximum({ids}, 0), {rows - 1})"
            if rng.random() < 0.5:  # a value of its own, or written in place
                ids = self.let(ids, list(shape), "i64", rows - 1)
            table = self.input([rows, self.size()])
            self.let(f"embedding({table}, {ids})", list(shape) + [self.values[-1][1][-1]])
        elif kind == "float_positions":
            # Float positions (arange in f32, or cast) scaled into [0, 1), as is or through
            # cos or sin (rotary tables), added to or multiplying a float value.
            x, shape = self.pick()
            axis = rng.randrange(-len(shape), 0)
            n = self.extent(shape[axis])
            if rng.random() < 0.5:
                pos = self.arange_along(shape, axis, "f32")
            else:
                pos = f"cast({self.arange_along(shape, axis)}, to=f32)"
            pos = f"mul({pos}, {1 / n:.6g})"
            if rng.random() < 0.5:
                pos = f"{rng.choice(['cos', 'sin'])}(mul({pos}, 3.0))"
            if self.dtype != "f32":
                pos = f"cast({pos}, to={self.dtype})"
            self.let(f"{rng.choice(['add', 'mul'])}({x}, {pos})", shape)
        elif kind == "int_roll":
            dtype = rng.choice(["i64", "i64", "bool"])
            p, shape = self.other(dtype)
            if dtype == "i64" and rng.random() < 0.3:
                # Transformers' packed-sequence check: each position less the one before, the
                # first less (its own value - 1).
                a, bound = self.small(p, shape)
                self.let(f"sub({a}, where(eq({self.arange_along(shape, -1)}, 0), "
                         f"sub(slice({a}, axis=-1, start=0, end=1), 1), "
                         f"roll({a}, shift=1, axis=-1)))", list(shape), "i64", 2 * bound + 1)
                return
            axis = rng.randrange(-len(shape), 0)
            self.let(f"roll({p}, shift={self.shift(shape[axis])}, axis={axis})", list(shape),
                     dtype, self.bounds.get(p, 1))
        elif kind == "int_cumsum":
            # A running sum of ids (positions, offsets), some in i32.
            p, shape = self.other("i64")
            axis = rng.randrange(-len(shape), 0)
            n = self.extent(shape[axis])
            a, bound = self.small(p, shape)
            if bound * n < 2**31 and rng.random() < 0.3:
                text = f"cast(cumsum(cast({a}, to=i32), axis={axis}), to=i64)"
            else:
                text = f"cumsum({a}, axis={axis})"
            self.let(text, list(shape), "i64", bound * n)

    def operand_like(self, shape: list[int]) -> str:
        """A value broadcasting against `shape`: one of that shape, of its last dim, a row of
        ones, or a new input of one of those."""
        rng = self.rng
        forms = [list(shape), [shape[-1]], [1] * (len(shape) - 1) + [shape[-1]],
                 list(shape[:-1]) + [1]]
        want = rng.choice(forms)
        return self.operand_exact(want)

    def operand_exact(self, shape: list[int]) -> str:
        same = [n for n, s in self.values if s == shape]
        if same and self.rng.random() < 0.6:
            return self.rng.choice(same)
        return self.input(shape)

    def used(self, name: str) -> bool:
        return any(re.search(rf"\b{name}\b", line.split(" = ", 1)[1]) for line in self.lines)

    def text(self, outputs: list[str]) -> str:
        body = [f"graph {self.name} {{"]
        if self.symbolic:
            body.append(f"  dim S: {self.s_low}..{S_MAX}")
        body += [f"  input {n}: {d}[{', '.join(map(str, s))}]" for n, s, d in self.inputs
                 if self.used(n)]
        body += self.lines
        body.append(f"  output {', '.join(outputs)}")
        body.append("}")
        return "\n".join(body) + "\n"


S_MAX = 96


def make(seed: int, large: bool = False) -> tuple[str, int | None] | None:
    """Graph `seed`'s text and the size S is run at (None for a static graph); None when the
    draw made nothing to output or a value too large. A large graph starts with a large step
    (Graph.large_step) and may take more."""
    rng = random.Random(seed)
    dtype = rng.choices(["f32", "f16", "bf16"], [6, 2, 2])[0]
    g = Graph(rng, f"d{seed}", dtype, symbolic=rng.random() < 0.35, mixed=rng.random() < 0.4,
              large=large)
    if g.symbolic:  # S from 1 mostly; a higher low end leaves wider windows along S
        g.s_low = rng.choice([1, 1, 2, 4, 8, 16])
    g.input(g.shape())
    if large:
        g.large_step()
    for _ in range(rng.randint(3, 12)):
        g.step()
    made = [n for n, _ in g.values if n.startswith("v")] + \
        [n for n, _, _ in g.others if n.startswith("v")]
    made.sort(key=lambda n: int(n[1:]))
    if not made:
        return None
    # Every value nothing reads is an output (kiln refuses a value never used), and one or two
    # that others read: a kernel writes a value another kernel reads too.
    leaves = [n for n in made if not g.used(n)]
    inner = [n for n in made if n not in leaves]
    outputs = leaves + rng.sample(inner, min(len(inner), rng.randint(0, 2)))
    # A value of more than 2^20 elements runs slowly under the emulator.
    shapes = [s for _, s in g.values] + [s for _, s, _ in g.others]
    if any(math.prod(S_MAX if d == "S" else d for d in s) > 1 << 20 for s in shapes):
        return None
    used_s = g.symbolic and any("S" in s for n, s, _ in g.inputs if g.used(n))
    if g.symbolic and not used_s:
        if any(re.search(r"\bS\b", line) for line in g.lines):
            return None  # arange(S) with no input of S: kiln refuses a dim no input has
        g.symbolic = False  # (kiln refuses a dim no input has)
    text = g.text(outputs)
    sizes = [s for s in (1, 2, 17, 37, 64, 95, S_MAX) if s >= g.s_low]
    sizes += [] if g.s_low in sizes else [g.s_low]  # the low end itself: the whole window
    return text, (rng.choice(sizes) if g.symbolic else None)


MODES = ["highest", "high", "tf32x3", "medium"]
LOOSE = 3
LOOSE_ABS = 1e-6


def header(path: pathlib.Path, key: str) -> str | None:
    """The value of the graph file's `# KEY: VALUE` line (`dims`, `sm_count`), or None."""
    found = re.search(rf"^# {key}: (\S+)$", path.read_text(), re.M)
    return found.group(1) if found else None


def run(kiln: str, path: pathlib.Path, target: str, mode: str, cache: str, timeout: int):
    args = [kiln, "run", str(path), "--precision", mode, "--json", "--cache-dir", cache]
    dims = header(path, "dims")
    if dims:
        args += ["--dims", dims]
    if target == "cpu":
        args += ["--target", "cpu"]
    elif target.startswith("emulate:"):
        args += ["--emulate", "--arch", target.split(":", 1)[1]]
        sms = header(path, "sm_count")
        if sms:
            args += ["--sm-count", sms]
    else:
        args += ["--arch", target]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "KILN_CPU_THREADS": "1", "KILN_REMOTE_CACHE": ""})
    except subprocess.TimeoutExpired:
        return "timeout", f"over {timeout} s"
    if done.returncode == 0:
        return "ok", ""
    if done.returncode == 2:
        return "refused", (done.stdout + done.stderr).strip().splitlines()[-1:]
    try:
        report = json.loads(done.stdout)
        worst = [o for o in report.get("outputs", []) if not o.get("ok", True)]
        detail = json.dumps(worst or report)[:400]
    except ValueError:
        return f"failed (exit {done.returncode})", (done.stdout + done.stderr)[-400:]
    # Float outputs past the mode's tolerance by less than 3x, or off by 1e-6 at most where
    # inputs and weights are about 1: a sum with cancellation (rms_norm over one element summed
    # to about 0), the far tail of gelu, or a chain of roundings the tolerance (made for the
    # example graphs) does not allow for. A wrong kernel is off by far more (a slice read one
    # element off: rel_l2 0.5 to 1.7, max_abs about 1). Loose runs are counted, and
    # --max-loose bounds them (ctest: 0).
    def number(o, key):  # null where the error is not finite (a NaN or an infinity)
        v = o.get(key)
        return v if isinstance(v, (int, float)) else math.inf
    if worst and all(number(o, "tolerance") < math.inf and number(o, "tolerance") > 0 and
                     (number(o, "rel_l2") <= LOOSE * number(o, "tolerance") or
                      number(o, "max_abs") <= LOOSE_ABS) for o in worst):
        return "loose", detail
    return f"failed (exit {done.returncode})", detail


def runs_wgmma(kiln: str, path: pathlib.Path) -> bool:
    """Whether sm_90a's model runs one of the graph's matmuls or attentions on a wgmma kernel
    (its name ends in _wgBMxBN) in high: the kernel text `kiln emit` prints."""
    args = [kiln, "emit", str(path), "--arch", "sm_90a", "--precision", "high"]
    dims = header(path, "dims")
    if dims:
        args += ["--dims", dims]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and re.search(r"\bkiln_k[0-9]+_\w*_wg[0-9]+x[0-9]+\(",
                                               done.stdout) is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--targets", default="cpu,emulate:sm_80")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out", default="differential")
    parser.add_argument("--kiln", default=str(pathlib.Path(__file__).resolve().parent.parent /
                                              "build" / "tools" / "kiln"))
    parser.add_argument("--large", action="store_true",
                        help="large matmuls and attentions, for sm_90a's wgmma kernels")
    parser.add_argument("--min-wgmma", type=int, default=-1,
                        help="fail when fewer graphs than this run a wgmma kernel on sm_90a "
                             "in high (default: no bound)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--max-refused", type=int, default=-1,
                        help="fail when more runs than this are refused (default: no bound)")
    parser.add_argument("--max-loose", type=int, default=-1,
                        help="fail when more runs than this are loose (default: no bound)")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    if (out / "graphs").is_dir():  # a run's graphs replace the last one's
        for old in (out / "graphs").glob("*.kg"):
            old.unlink()
    (out / "graphs").mkdir(parents=True, exist_ok=True)
    cache = str(out / "cache")
    graphs = []
    seed = args.seed
    while len(graphs) < args.count:
        made = make(seed, args.large)
        if made is not None:
            text, size = made
            path = out / "graphs" / f"d{seed}.kg"
            # A large graph's emulated device: a persistent kernel's blocks loop over 2 or more
            # work tiles where it has fewer multiprocessors than 66.
            # (a stream of its own: the graph's first draws pick its dtype)
            sms = random.Random(f"sm_count {seed}").choice([1, 3, 8, 33, 132]) \
                if args.large else None
            path.write_text((f"# dims: S={size}\n" if size else "") +
                            (f"# sm_count: {sms}\n" if sms else "") + text)
            graphs.append(path)
        seed += 1
    wgmma = None
    if args.large or args.min_wgmma >= 0:
        wgmma = sum(map(runs_wgmma, [args.kiln] * len(graphs), graphs))
        print(f"differential: {wgmma} of {len(graphs)} graphs run a wgmma kernel on sm_90a in high",
              flush=True)
    jobs = [(g, t, m) for g in graphs for t in args.targets.split(",") for m in args.modes.split(",")]
    counts: dict[str, int] = {}
    failures, notes = [], []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = pool.map(lambda j: (j, run(args.kiln, j[0], j[1], j[2], cache, args.timeout)), jobs)
        for (g, t, m), (status, detail) in results:
            key = status.split(" ")[0]
            sms = header(g, "sm_count")
            if sms and t.startswith("emulate:"):
                t += f" --sm-count {sms}"
            counts[key] = counts.get(key, 0) + 1
            if key in ("loose", "refused"):
                notes.append(f"{g} {t} {m}: {key}: {detail}")
                print(notes[-1], flush=True)
            elif key != "ok":
                failures.append(f"{g} {t} {m}: {status}: {detail}")
                print(failures[-1], flush=True)
    refused = counts.get("refused", 0)
    print(f"differential: {len(graphs)} graphs x {len(args.targets.split(','))} targets x "
          f"{len(args.modes.split(','))} modes: {counts.get('ok', 0)} ok, "
          f"{counts.get('loose', 0)} loose (within {LOOSE}x the tolerance or {LOOSE_ABS} "
          f"absolute), {refused} refused, "
          f"{len(failures)} failed")
    (out / "failures.txt").write_text("".join(f"{line}\n" for line in failures + notes))
    # A run that checks nothing passes nothing: kiln refusing every graph (a parser or planner
    # gone wrong, a flag no longer taken) is a failure, as is more of either than allowed.
    bounds = [("refused", refused, args.max_refused),
              ("loose", counts.get("loose", 0), args.max_loose)]
    over = [f"{n} {what} runs, more than the {bound} allowed" for what, n, bound in bounds
            if bound >= 0 and n > bound]
    if wgmma is not None and wgmma < args.min_wgmma:
        over.append(f"{wgmma} graphs run a wgmma kernel, fewer than the {args.min_wgmma} asked for")
    if counts.get("ok", 0) + counts.get("loose", 0) == 0:
        over.append("no run was checked")
    for line in over:
        print(f"differential: {line}")
    return 1 if failures or over else 0


if __name__ == "__main__":
    sys.exit(main())
