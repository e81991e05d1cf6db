#!/usr/bin/env python3
"""Random graphs, run by kiln against its fp64 reference: a differential check of the fusion
and code generation that the example graphs and the per-op tests do not reach.

Each graph composes 3 to 12 ops of a well-conditioned float repertoire (pointwise ops with
broadcasting, reductions, softmax, norms, matmul, attention, layout ops, casts to half
precision and back, masks from comparisons, cumsum, roll) over f32 inputs, with one to three
outputs, some taken from the middle of the graph so that fused kernels write values others read.
Every graph runs through `kiln run --json` on each target asked for, in each precision mode; the
run checks every output against the fp64 reference within the mode's tolerance. A graph kiln
refuses (exit 2) is counted, not a failure: the generator does not model every rule. A run that
exits 1 (an output past its tolerance, a failed compile) or dies is a failure, and the graph is
kept for a bug report.

    scripts/differential.py --count 200 --seed 1 --targets cpu,emulate:sm_80,emulate:sm_90 \
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


class Graph:
    """A graph being made: its values all of one float dtype, their shapes lists of sizes and,
    in a symbolic graph, the dim S (range 1..S_MAX)."""

    def __init__(self, rng: random.Random, name: str, dtype: str, symbolic: bool):
        self.rng = rng
        self.name = name
        self.dtype = dtype
        self.symbolic = symbolic
        self.inputs: list[tuple[str, list]] = []
        self.lines: list[str] = []
        self.values: list[tuple[str, list]] = []  # (name, shape)
        self.serial = 0

    def fresh(self, prefix: str = "v") -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def input(self, shape: list[int]) -> str:
        name = self.fresh("x")
        self.inputs.append((name, shape))
        self.values.append((name, shape))
        return name

    def let(self, text: str, shape: list[int]) -> str:
        name = self.fresh()
        self.lines.append(f"  {name} = {text}")
        self.values.append((name, shape))
        return name

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
        rank = rank or self.rng.choice([1, 2, 2, 3, 3, 4])
        shape = [self.rng.choice([1, 2, 3, 4]) for _ in range(rank - 2)] + \
            [self.size() for _ in range(min(rank, 2))]
        if self.symbolic and self.rng.random() < 0.7:
            shape[self.rng.randrange(len(shape))] = "S"  # rows, columns or a batch dim
        return shape

    def fixed_axes(self, shape: list) -> list[int]:
        """The axes (from the end) whose size is a number."""
        return [a - len(shape) for a in range(len(shape)) if isinstance(shape[a], int)]

    def step(self) -> None:
        rng = self.rng
        kind = rng.choices(
            ["unary", "guarded", "binary", "literal", "reduce", "softmax", "norm", "matmul",
             "attention", "permute", "slice", "concat", "reshape", "cast", "where", "cumsum",
             "roll"],
            [6, 3, 6, 2, 3, 2, 2, 3, 1, 2, 2, 2, 2, 2, 2, 1, 1])[0]
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
            self.let(f"matmul({scaled}, {w}{extra})", batch + [shape[-2], n])
        elif kind == "attention":
            if rank < 2 or not isinstance(shape[-1], int) or shape[-1] > 128:
                return
            keys, width = self.size(), rng.choice([8, 16, 32, shape[-1]])
            k = self.input(shape[:-2] + [keys, shape[-1]])
            v = self.input(shape[:-2] + [keys, width])
            causal = ", causal=true" if rng.random() < 0.3 else ""
            self.let(f"attention({x}, {k}, {v}{causal})", shape[:-1] + [width])
        elif kind == "permute":
            if rank < 2:
                return
            dims = list(range(rank))
            rng.shuffle(dims)
            self.let(f"permute({x}, dims=[{', '.join(map(str, dims))}])", [shape[d] for d in dims])
        elif kind == "slice":
            if not self.fixed_axes(shape):
                return
            axis = rng.choice(self.fixed_axes(shape))
            n = shape[axis]
            start = rng.randrange(0, n)
            end = rng.randrange(start + 1, n + 1)
            out = list(shape)
            out[axis] = end - start
            self.let(f"slice({x}, axis={axis}, start={start}, end={end})", out)
        elif kind == "concat":
            if not self.fixed_axes(shape):
                return
            axis = rng.choice(self.fixed_axes(shape))
            other_shape = list(shape)
            other_shape[axis] = self.size()
            other = self.operand_exact(other_shape)
            out = list(shape)
            out[axis] += other_shape[axis]
            self.let(f"concat({x}, {other}, axis={axis})", out)
        elif kind == "reshape":
            if rank < 2 or not all(isinstance(d, int) for d in shape[-2:]):
                return
            out = shape[:-2] + [shape[-2] * shape[-1]]
            self.let(f"reshape({x}, shape=[{', '.join(map(str, out))}])", out)
        elif kind == "cast":
            other = rng.choice([t for t in ("f32", "f16", "bf16") if t != self.dtype])
            self.let(f"cast(cast({x}, to={other}), to={self.dtype})", shape)
        elif kind == "where":
            other = self.operand_like(shape)
            cmp = rng.choice(["gt", "lt", "ge", "le"])
            self.let(f"where({cmp}({x}, {other}), {x}, {other})", shape)
        elif kind == "cumsum":
            self.let(f"cumsum({x}, axis={rng.randrange(-rank, 0)})", shape)
        elif kind == "roll":
            axis = rng.randrange(-rank, 0)
            self.let(f"roll({x}, shift={rng.randrange(-3, 4)}, axis={axis})", shape)

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
            body.append(f"  dim S: 1..{S_MAX}")
        body += [f"  input {n}: {self.dtype}[{', '.join(map(str, s))}]" for n, s in self.inputs
                 if self.used(n)]
        body += self.lines
        body.append(f"  output {', '.join(outputs)}")
        body.append("}")
        return "\n".join(body) + "\n"


S_MAX = 96


def make(seed: int) -> tuple[str, int | None] | None:
    """Graph `seed`'s text and the size S is run at (None for a static graph); None when the
    draw made nothing to output or a value too large."""
    rng = random.Random(seed)
    dtype = rng.choices(["f32", "f16", "bf16"], [6, 2, 2])[0]
    g = Graph(rng, f"d{seed}", dtype, symbolic=rng.random() < 0.35)
    g.input(g.shape())
    for _ in range(rng.randint(3, 12)):
        g.step()
    made = [n for n, _ in g.values if n.startswith("v")]
    if not made:
        return None
    # Every value nothing reads is an output (kiln refuses a value never used), and one or two
    # that others read: a kernel writes a value another kernel reads too.
    leaves = [n for n in made if not g.used(n)]
    inner = [n for n in made if n not in leaves]
    outputs = leaves + rng.sample(inner, min(len(inner), rng.randint(0, 2)))
    # A value of more than 2^20 elements runs slowly under the emulator.
    if any(math.prod(S_MAX if d == "S" else d for d in s) > 1 << 20 for _, s in g.values):
        return None
    used_s = g.symbolic and any("S" in s for n, s in g.inputs if g.used(n))
    if g.symbolic and not used_s:
        g.symbolic = False  # (kiln refuses a dim no input has)
    text = g.text(outputs)
    return text, (rng.choice([1, 2, 17, 37, 64, 95, S_MAX]) if g.symbolic else None)


MODES = ["highest", "high", "tf32x3", "medium"]


def run(kiln: str, path: pathlib.Path, target: str, mode: str, cache: str, timeout: int):
    args = [kiln, "run", str(path), "--precision", mode, "--json", "--cache-dir", cache]
    dims = re.search(r"^# dims: (S=[0-9]+)$", path.read_text(), re.M)
    if dims:
        args += ["--dims", dims.group(1)]
    if target == "cpu":
        args += ["--target", "cpu"]
    elif target.startswith("emulate:"):
        args += ["--emulate", "--arch", target.split(":", 1)[1]]
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
        detail = (done.stdout + done.stderr)[-400:]
    return f"failed (exit {done.returncode})", detail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--targets", default="cpu,emulate:sm_80")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out", default="differential")
    parser.add_argument("--kiln", default=str(pathlib.Path(__file__).resolve().parent.parent /
                                              "build" / "tools" / "kiln"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=300)
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
        made = make(seed)
        if made is not None:
            text, size = made
            path = out / "graphs" / f"d{seed}.kg"
            path.write_text((f"# dims: S={size}\n" if size else "") + text)
            graphs.append(path)
        seed += 1
    jobs = [(g, t, m) for g in graphs for t in args.targets.split(",") for m in args.modes.split(",")]
    counts: dict[str, int] = {}
    failures = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = pool.map(lambda j: (j, run(args.kiln, j[0], j[1], j[2], cache, args.timeout)), jobs)
        for (g, t, m), (status, detail) in results:
            key = status.split(" ")[0]
            counts[key] = counts.get(key, 0) + 1
            if key not in ("ok", "refused"):
                failures.append(f"{g} {t} {m}: {status}: {detail}")
                print(failures[-1], flush=True)
    refused = counts.get("refused", 0)
    print(f"differential: {len(graphs)} graphs x {len(args.targets.split(','))} targets x "
          f"{len(args.modes.split(','))} modes: {counts.get('ok', 0)} ok, {refused} refused, "
          f"{len(failures)} failed")
    (out / "failures.txt").write_text("\n".join(failures) + ("\n" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
