"""kiln.torch.Program: a plan of kiln graphs and PyTorch ops, run on torch tensors; saved as a
directory and loaded in a new process without tracing or compiling."""
from __future__ import annotations

import importlib
import json
import math
import operator
import os
import pathlib
import re
import sys
from typing import NamedTuple

import torch
import torch.utils._pytree as pytree
from torch.fx import Node

from .. import _runtime
from .._errors import Error, RuntimeError as KilnRuntimeError

_FORMAT = 1


class Fallback(NamedTuple):
    """An op that runs in PyTorch: how many nodes, and why kiln does not run it."""

    op: str
    count: int
    reason: str


def report_fallbacks(name: str, fallbacks: list, policy: str) -> None:
    """The fallbacks policy: 'refuse' raises with the list, 'warn' prints it, 'allow' is quiet."""
    if not fallbacks:
        return
    lines = "\n".join(f"  {f.op} x{f.count}: {f.reason}" for f in fallbacks)
    if policy == "refuse":
        raise Error(f"{name}: {sum(f.count for f in fallbacks)} ops cannot run in kiln "
                    f"(fallbacks='refuse'):\n{lines}")
    if policy == "warn":
        print(f"kiln: {name}: these ops run in PyTorch:\n{lines}", file=sys.stderr)


class Program:
    """Runs like the module it came from: `program(*args, **kwargs)`. Made by
    kiln.torch.compile_exported or kiln.torch.load."""

    def __init__(self, *, name, placeholders, values, steps, outputs, in_spec, out_spec,
                 fallbacks, runtime, target, precision, exported=None, write_back=(),
                 input_dims=None, dims=None):
        self.name = name
        # A user input's dims as exported ({name: [size | kiln dim name | None]}: None where a
        # dim is an expression) and each kiln dim's range ({name: [lo, hi, capped]}: capped
        # where max_dim cut an unbounded or larger range), checked before a call runs anything.
        self._input_dims = dict(input_dims or {})
        self._dims = dict(dims or {})
        # The dims some kiln graph declares: only their ranges bind a call (a size no kiln graph
        # reads runs in PyTorch alone, which takes it, as `ep.module()` takes 1 where torch's
        # range starts at 2).
        self._bound_dims = {m for s in steps if s[0] == "kiln"
                            for m in re.findall(r"(?m)^\s*dim ([A-Za-z_][A-Za-z0-9_]*):", s[6])}
        self._placeholders = placeholders  # [(name, kind, target)]: kind parameter|buffer|constant|user
        self._users = [p[0] for p in placeholders if p[1] == "user"]  # the call's inputs, in order
        self._values = values              # name -> tensor (parameters, buffers, constants)
        # ("kiln", graph name, executable, inputs, outputs, aliases, text, spans, views) |
        # ("torch", name, op, args, kwargs) | ("alias", {name: name}), values named as in the
        # graph. A merged dim (s0*s1) is its factors in kiln: spans maps an output to how many of
        # kiln's dims make each of PyTorch's, views an input to the factors of each of its dims
        # (None: its own size; an int; [placeholder, axis]: that input's size there).
        self._steps = steps
        self._outputs = outputs            # the user outputs' value names (or literals)
        self._in_spec = in_spec
        self._out_spec = out_spec
        self._runtime = runtime
        self.target = target
        self.precision = precision
        self._exported = exported
        # (kind, name, value): a buffer ("buffer") or a user input ("input") the program updates,
        # and the value (a plan name) it holds after a call.
        self._write_back = [tuple(w) for w in write_back]
        self.fallbacks: list[Fallback] = fallbacks

    @property
    def partitions(self) -> list[str]:
        """The `.kg` text of each kiln graph, in the order they run."""
        return [s[6] for s in self._steps if s[0] == "kiln"]

    @property
    def executables(self) -> list[_runtime.Executable]:
        return [s[2] for s in self._steps if s[0] == "kiln"]

    def __call__(self, *args, **kwargs):
        users = self._users
        if kwargs and not _keyword_names(self._in_spec):
            # Exported with positional arguments: keywords name them, as ep.module() allows.
            names = users[len(args):]
            unknown = sorted(set(kwargs) - set(names))
            if unknown or len(kwargs) != len(names):
                raise Error(f"{self.name} takes {users}; got {len(args)} positional and "
                            f"{sorted(kwargs)}")
            args, kwargs = tuple(args) + tuple(kwargs[n] for n in names), {}
        flat = _flatten_inputs(self._in_spec, args, kwargs)
        env = dict(self._values)
        if len(flat) != len(users):
            raise Error(f"{self.name} takes {len(users)} inputs, got {len(flat)}")
        for name, value in zip(users, flat):
            env[name] = value
        self._check_shapes(flat)
        run_steps(self._steps, env)
        for kind, name, value in self._write_back:
            if kind == "buffer":
                self._values[name] = env[value]
            else:
                env[name].copy_(env[value])
        outs = [env[o] if isinstance(o, str) and o in env else o for o in self._outputs]
        return pytree.tree_unflatten(outs, self._out_spec) if self._out_spec is not None else outs

    def _check_shapes(self, flat) -> None:
        """Raises kiln.RuntimeError naming the user's input where a tensor's rank, a fixed size
        or a symbolic one's range differs from the exported program's, or where two inputs give
        one dim two sizes: before anything runs (a kiln graph after a step in PyTorch would
        otherwise name its own input)."""
        seen, sums = {}, []
        for name, value in zip(self._users, flat):
            spec = self._input_dims.get(name)
            if spec is None:
                continue
            if not isinstance(value, torch.Tensor):
                # (a NumPy array would run through kiln's graphs and fail at the first step in
                # PyTorch, or at an update in place, after work was done)
                raise KilnRuntimeError(f"input '{name}' is a {type(value).__module__}."
                                       f"{type(value).__qualname__}: the program takes a "
                                       "torch.Tensor there, as the exported module does")
            want = "[" + ", ".join("?" if d is None else str(d) for d in spec) + "]"
            if value.dim() != len(spec):
                raise KilnRuntimeError(f"input '{name}' must have rank {len(spec)} "
                                       f"({want}), got {list(value.shape)}")
            for axis, (d, got) in enumerate(zip(spec, value.shape)):
                where = f"input '{name}' dim {axis}"
                if isinstance(d, int):
                    if got != d:
                        raise KilnRuntimeError(f"{where} must be {d}, got {got} ({want})")
                    continue
                if d is None:
                    continue
                if d not in self._dims:  # a sum of products of dims (`3*L + 1`)
                    sums.append((where, d, got, want))
                    continue
                lo, hi, capped = self._dims[d]
                if d in self._bound_dims and not lo <= got <= hi:
                    hint = (f" (max_dim={hi} capped it: compile with a larger max_dim)"
                            if capped and got > hi else "")
                    raise KilnRuntimeError(f"{where}: {d} = {got} is outside its range "
                                           f"{lo}..{hi}{hint}")
                if d in seen and seen[d][0] != got:
                    first, first_axis = seen[d][1], seen[d][2]
                    raise KilnRuntimeError(f"{where}: {d} = {got}, but input '{first}' dim "
                                           f"{first_axis} has {d} = {seen[d][0]}")
                seen.setdefault(d, (got, name, axis))
        # A sum is checked where each of its dims is some input's dim of its own.
        for where, text, got, want in sums:
            terms = parse_sum(text, seen)
            if terms is None:
                continue
            size = sum(coef * math.prod(seen[n][0] for n in names) for coef, names in terms)
            if got != size:
                given = ", ".join(f"{n} = {seen[n][0]}" for n in sorted({n for _, ns in terms
                                                                           for n in ns}))
                raise KilnRuntimeError(f"{where} must be {text} = {size} ({given}), got {got} "
                                       f"({want})")

    def save(self, path: str | os.PathLike) -> None:
        """Writes a directory: program.pt2 (the exported program, when there is one), kiln.json
        (the plan and the binding of inputs), graphs/*.kg and weights.pt."""
        path = pathlib.Path(path)
        (path / "graphs").mkdir(parents=True, exist_ok=True)
        steps = []
        for step in self._steps:
            if step[0] == "kiln":
                _, name, _, inputs, outputs, aliases, text, spans, views = step
                (path / "graphs" / f"{name}.kg").write_text(text)
                steps.append({"kind": "kiln", "graph": name, "inputs": inputs, "outputs": outputs,
                              "aliases": aliases, "spans": spans, "views": views})
            elif step[0] == "alias":
                steps.append({"kind": "alias", "aliases": step[1]})
            else:
                _, name, fn, args, kwargs = step
                steps.append({"kind": "torch", "name": name, "op": _op_id(fn),
                              "args": _encode(args), "kwargs": _encode(kwargs)})
        meta = {
            "format": _FORMAT,
            "name": self.name,
            "target": self.target,
            "precision": self.precision,
            "placeholders": [list(p) for p in self._placeholders],
            "steps": steps,
            "outputs": _encode(self._outputs),
            "in_spec": pytree.treespec_dumps(self._in_spec),
            "out_spec": pytree.treespec_dumps(self._out_spec) if self._out_spec is not None else None,
            "fallbacks": [list(f) for f in self.fallbacks],
            "write_back": [list(w) for w in self._write_back],
            "input_dims": self._input_dims,
            "dims": {n: list(r) for n, r in self._dims.items()},
        }
        (path / "kiln.json").write_text(json.dumps(meta, indent=1))
        torch.save({k: v for k, v in self._values.items() if isinstance(v, torch.Tensor)},
                   path / "weights.pt")
        if self._exported is not None:
            torch.export.save(self._exported, path / "program.pt2")

    def __repr__(self) -> str:
        return (f"<kiln.torch.Program {self.name}: {len(self.partitions)} kiln graphs, "
                f"{sum(f.count for f in self.fallbacks)} ops in PyTorch>")


def run_steps(steps, env: dict) -> None:
    """Runs a plan's steps on `env` (value name -> value), adding the values they compute."""
    for step in steps:
        if step[0] == "kiln":
            _, name, exe, inputs, outputs, aliases, _, spans, views = step
            try:
                args = [env[i] if i not in views else
                        env[i].reshape(_split(env[i].shape, views[i], env)) for i in inputs]
            except (IndexError, RuntimeError) as e:
                raise Error(f"graph {name}: an input cannot be viewed in kiln's shape (a saved "
                            f"plan's 'views' that does not match the program): {e}") from None
            result = exe(*args) if inputs else _call_without_inputs(exe)
            for o, r in zip(outputs, [result] if len(outputs) == 1 else result):
                if o in spans:
                    r = r.view(_merge(r.shape, spans[o]))  # sum(spans) == rank: checked
                env[o] = r
            for node, src in aliases.items():
                env[node] = env[src]
        elif step[0] == "alias":
            for node, src in step[1].items():
                env[node] = env[src]
        else:
            _, name, fn, args, kwargs = step
            env[name] = fn(*_bind(args, env), **_bind(kwargs, env))


def _merge(shape, spans) -> list:
    """kiln's shape with each run of `spans` dims multiplied into one ([s0, s1, 64], [2, 1] ->
    [s0*s1, 64])."""
    out, at = [], 0
    for n in spans:
        size = 1
        for d in shape[at:at + n]:
            size *= d
        out.append(size)
        at += n
    return out


def _split(shape, view, env) -> list:
    """PyTorch's shape in kiln's: each merged dim ([s0*s1, 64]) as its factors ([s0, s1, 64]),
    a factor's size read from the program input that carries it."""
    out = []
    for size, factors in zip(shape, view):
        if factors is None:
            out.append(size)
        else:
            out += [f if isinstance(f, int) else env[f[0]].shape[f[1]] for f in factors]
    return out


def _call_without_inputs(exe):
    """Runs a kiln graph that takes no tensors (positions, masks or biases made from arange and
    literals) into torch tensors on the target's device: called with nothing, kiln returns NumPy."""
    device = torch.device("cpu") if exe._on_host else torch.device("cuda", exe._x.device)
    outputs = [_runtime._empty("torch", device, s.dtype, s.shape, s.name)
               for s in exe._output_specs([])]
    exe.run([], outputs, stream=None if exe._on_host else torch.cuda.current_stream(device))
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


class _Ref(NamedTuple):
    name: str


def _bind(x, env):
    if isinstance(x, _Ref):
        return env[x.name]
    if isinstance(x, list):
        return [_bind(v, env) for v in x]
    if isinstance(x, tuple):
        return tuple(_bind(v, env) for v in x)
    if isinstance(x, dict):
        return {k: _bind(v, env) for k, v in x.items()}
    return x


def torch_step(node: Node, names: dict):
    """A plan step running `node` in PyTorch; `names` gives the plan's name of a placeholder."""
    def ref(n):
        return _Ref(names.get(n, n.name))
    args = torch.fx.node.map_arg(node.args, ref)
    kwargs = torch.fx.node.map_arg(node.kwargs, ref)
    return ("torch", node.name, node.target, _plain(args), _plain(kwargs))


def _plain(x):
    if isinstance(x, (list, tuple)) and not isinstance(x, _Ref):
        t = [_plain(v) for v in x]
        return tuple(t) if isinstance(x, tuple) else t
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _keyword_names(in_spec) -> list | None:
    """The keyword arguments an exported call takes, in its order; None where the spec is not
    torch.export's (args, kwargs) pair."""
    try:
        kw_spec = in_spec.child(1) if hasattr(in_spec, "child") else in_spec.children_specs[1]
        return list(kw_spec.context)
    except (AttributeError, IndexError, TypeError):
        return None


def _flatten_inputs(in_spec, args, kwargs):
    if in_spec is None:
        return list(args)
    keys = _keyword_names(in_spec)
    try:
        args_spec = in_spec.child(0) if hasattr(in_spec, "child") else in_spec.children_specs[0]
        positional = args_spec.num_children if in_spec.num_children == 2 else None
    except (AttributeError, IndexError, TypeError):
        positional = None
    if positional is not None and len(args) != positional:
        raise Error(f"this program takes {positional} positional argument"
                    f"{'' if positional == 1 else 's'}"
                    f"{f' and the keyword arguments {keys}' if keys else ''}; got {len(args)}")
    if keys is not None:
        missing = [k for k in keys if k not in kwargs]
        extra = [k for k in kwargs if k not in keys]
        if missing or extra:
            raise Error(f"this program takes the keyword arguments {keys}; "
                        f"missing {missing}, unexpected {extra}")
        kwargs = {k: kwargs[k] for k in keys}
    flat, spec = pytree.tree_flatten((args, kwargs))
    if spec != in_spec:
        def short(s):
            text = str(s)
            return text if len(text) <= 300 else text[:300] + " ..."
        raise Error(f"the inputs do not have the structure the program was exported with: "
                    f"expected {short(in_spec)}, got {short(spec)}")
    return flat


# -- serialising the PyTorch part of a plan ---------------------------------------------------------

# The operator module's functions an exported graph calls: indexing, arithmetic, comparisons and
# logic on values and SymInts. Not attrgetter, methodcaller or call: chained, those reach any
# attribute of any object, exec included, so a saved plan naming one would run what it liked.
_OPERATORS = frozenset({
    "getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs",
    "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "xor", "not_", "invert", "lshift",
    "rshift", "matmul", "truth", "index"})


def _op_id(fn) -> str:
    if isinstance(fn, torch._ops.OpOverload):
        return f"torch.ops.{fn._schema.name.replace('::', '.')}.{fn._overloadname or 'default'}"
    if (getattr(fn, "__module__", None) == "_operator" and fn.__name__ in _OPERATORS
            and getattr(operator, fn.__name__, None) is fn):
        return f"operator.{fn.__name__}"
    raise Error(f"cannot save a program whose PyTorch part calls {fn!r}")


def _is_view(view, meta) -> bool:
    """Whether a saved view is a list, per dim, of null or factors: whole numbers from 2, or
    [input name, axis] of one of the plan's user inputs."""
    names = {p[0] for p in meta.get("placeholders", [])
             if isinstance(p, list) and len(p) > 1 and p[1] == "user"}
    if not isinstance(view, list) or not 1 <= len(view) <= 6:
        return False
    for factors in view:
        if factors is None:
            continue
        if not isinstance(factors, list) or not 1 <= len(factors) <= 6:
            return False
        for f in factors:
            if type(f) is int and f >= 2:
                continue
            if not (isinstance(f, list) and len(f) == 2 and f[0] in names and type(f[1]) is int
                    and 0 <= f[1] < 6):
                return False
    return True


def _resolve_op(text: str):
    """An op a saved plan names: aten and prims ops and the operator functions of _OPERATORS."""
    parts = text.split(".")
    try:
        if len(parts) == 2 and parts[0] == "operator" and parts[1] in _OPERATORS:
            return getattr(operator, parts[1])
        if len(parts) == 5 and parts[:2] == ["torch", "ops"] and parts[2] in ("aten", "prims"):
            op = getattr(getattr(getattr(torch.ops, parts[2]), parts[3]), parts[4])
            if isinstance(op, torch._ops.OpOverload):
                return op
    except (AttributeError, RuntimeError):
        pass
    raise Error(f"kiln.json: '{text}' is not an op a kiln program runs")


def _encode(x):
    if isinstance(x, _Ref):
        return {"ref": x.name}
    if isinstance(x, (bool, int, str)) or x is None:
        return x
    if isinstance(x, float):
        return {"float": repr(x)}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if isinstance(x, tuple):
        return {"tuple": [_encode(v) for v in x]}
    if isinstance(x, dict):
        return {"dict": {k: _encode(v) for k, v in x.items()}}
    if isinstance(x, torch.dtype):
        return {"dtype": str(x).replace("torch.", "")}
    if isinstance(x, torch.device):
        return {"device": str(x)}
    if isinstance(x, torch.layout):
        return {"layout": str(x).replace("torch.", "")}
    if isinstance(x, torch.memory_format):
        return {"memory_format": str(x).replace("torch.", "")}
    raise Error(f"cannot save an argument of type {type(x).__name__}")


def _decode(x):
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    (kind, v), = x.items()
    if kind == "ref":
        return _Ref(v)
    if kind == "float":
        return float(v)
    if kind == "tuple":
        return tuple(_decode(e) for e in v)
    if kind == "dict":
        return {k: _decode(e) for k, e in v.items()}
    if kind in ("dtype", "layout", "memory_format"):
        # Only a value of that kind: never another attribute of torch (its builtins, a function).
        value = getattr(torch, v, None) if isinstance(v, str) else None
        wanted = {"dtype": torch.dtype, "layout": torch.layout,
                  "memory_format": torch.memory_format}[kind]
        if not isinstance(value, wanted):
            raise Error(f"kiln.json: {v!r} is not a torch {kind}")
        return value
    if kind == "device":
        return torch.device(v)
    raise Error(f"kiln.json: unknown value {x!r}")


def _import_spec_types(spec_text: str) -> None:
    """Imports the transformers modules of the output classes a saved spec names (transformers'
    ModelOutput subclasses register themselves with pytree when their module loads). A class of
    another package must be imported by the caller before loading: a saved file does not choose
    what this process imports."""
    def walk(node):
        if isinstance(node, dict):
            t = node.get("type")
            if isinstance(t, str) and t.startswith("transformers."):
                module = t.rsplit(".", 1)[0]
                if module not in sys.modules:
                    try:
                        importlib.import_module(module)
                    except ImportError:
                        pass
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    try:
        walk(json.loads(spec_text))
    except (ValueError, RecursionError):
        pass


def check_fallbacks(fallbacks) -> None:
    """compile_exported's and load's fallbacks=: "warn", "refuse" or "allow" (else ValueError)."""
    if fallbacks not in ("warn", "refuse", "allow"):
        raise ValueError(f"fallbacks={fallbacks!r}: expected 'warn', 'refuse' or 'allow'")


class _ArgumentError(Exception):
    """A caller's argument to load() that kiln refuses (raised as it is, not as kiln.json's)."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def load(path: str | os.PathLike, target: str | None = None, precision: str | None = None,
         cache_dir=None, remote=None, fallbacks: str = "warn", *,
         check_indices: bool = False) -> Program:
    """A saved program, in this process: its kiln graphs compiled through the cache (hits on a
    warm cache), nothing traced. target and precision default to those it was saved with."""
    check_fallbacks(fallbacks)
    for name, value in (("target", target), ("precision", precision)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name}={value!r}: expected a string or None")
        if value == "":
            raise ValueError(f"{name}='': expected a value (None for the saved one)")
    path = pathlib.Path(path)
    try:
        meta = json.loads((path / "kiln.json").read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise Error(f"{path}: not a saved kiln program: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise Error(f"{path}: kiln.json format {found!r}, this kiln reads {_FORMAT}")
    try:
        return _load(path, meta, target, precision, cache_dir, remote, fallbacks, check_indices)
    except _ArgumentError as e:
        raise e.error from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as e:
        raise Error(f"{path}/kiln.json: malformed ({type(e).__name__}: {e})") from None
    except OSError as e:
        raise Error(f"{path}: cannot read the saved program: {e}") from None


def _load(path, meta, target, precision, cache_dir, remote, fallbacks, check_indices) -> Program:
    given = target, precision
    target = target or meta["target"]
    precision = precision or meta["precision"]
    try:
        rt = _runtime.Runtime(target=target, precision=precision, cache_dir=cache_dir,
                              remote=remote, fallbacks=fallbacks, check_indices=check_indices)
    except (ValueError, TypeError):
        # The caller's arguments, where they are what is wrong, raise as they are; kiln.json's
        # target or precision, malformed.
        try:
            _runtime.Runtime(target=given[0] or "cpu", precision=given[1] or "high",
                             cache_dir=cache_dir, remote=remote, fallbacks=fallbacks,
                             check_indices=check_indices)
        except (ValueError, TypeError) as e:
            raise _ArgumentError(e) from None
        except Exception:  # noqa: BLE001 - another failure of the probe (no LLVM plugin, say)
            pass
        raise ValueError(f"its target {meta['target']!r} or precision "
                         f"{meta['precision']!r} is not one kiln knows") from None
    weights = path / "weights.pt"
    try:
        values = torch.load(weights, weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - torch's own errors, whatever the damage
        raise Error(f"{weights}: cannot read the weights: {type(e).__name__}: {e}") from None
    if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in values.items()):
        raise Error(f"{weights}: not a map of names to tensors")
    for p in meta["placeholders"]:
        if len(p) != 3:
            raise ValueError(f"placeholder {p!r} is not [name, kind, target]")
        if p[1] in ("parameter", "buffer", "constant") and p[0] not in values:
            named = f" (as '{p[0]}')" if p[0] != p[2] else ""
            raise Error(f"{weights}: no tensor for {p[1]} '{p[2]}'{named}")
    steps = []
    for s in meta["steps"]:
        if s["kind"] == "kiln":
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s["graph"]):
                raise Error(f"{path}/kiln.json: '{s['graph']}' is not a graph's name")
            graph_path = path / "graphs" / f"{s['graph']}.kg"
            text = graph_path.read_text()
            exe = rt.compile(_runtime.Graph.parse(text, str(graph_path)))
            if not isinstance(s["outputs"], list) or len(s["outputs"]) != len(exe.outputs):
                raise Error(f"{path}/kiln.json: graph {s['graph']} has {len(exe.outputs)} "
                            f"outputs, its step names {s['outputs']!r}")
            if not isinstance(s["inputs"], list) or len(s["inputs"]) != len(exe.inputs):
                raise Error(f"{path}/kiln.json: graph {s['graph']} has {len(exe.inputs)} "
                            f"inputs, its step names {s['inputs']!r}")
            spans = s.get("spans", {})
            ranks = {o: len(spec.shape) for o, spec in zip(s["outputs"], exe.outputs)}
            if not (isinstance(spans, dict) and all(
                    o in ranks and isinstance(v, list) and v and all(
                        type(n) is int and 1 <= n <= 6 for n in v) and sum(v) == ranks[o]
                    for o, v in spans.items())):
                raise Error(f"{path}/kiln.json: graph {s['graph']}: 'spans' is not a map of its "
                            "outputs to lists of dim counts")
            views = s.get("views", {})
            if not (isinstance(views, dict) and all(
                    i in s["inputs"] and _is_view(v, meta) for i, v in views.items())):
                raise Error(f"{path}/kiln.json: graph {s['graph']}: 'views' is not a map of its "
                            "inputs to the factors of their dims")
            steps.append(("kiln", s["graph"], exe, s["inputs"], s["outputs"], s["aliases"], text,
                          spans, views))
        elif s["kind"] == "alias":
            steps.append(("alias", s["aliases"]))
        elif s["kind"] == "torch":
            steps.append(("torch", s["name"], _resolve_op(s["op"]), _decode(s["args"]),
                          _decode(s["kwargs"])))
        else:
            raise Error(f"{path}/kiln.json: a step of unknown kind {s['kind']!r}")
    fallback_list = [Fallback(*f) for f in meta["fallbacks"]]
    report_fallbacks(meta["name"], fallback_list, fallbacks)
    _import_spec_types(meta["out_spec"] or "")
    try:
        out_spec = pytree.treespec_loads(meta["out_spec"]) if meta["out_spec"] else None
    except (KeyError, NotImplementedError) as e:
        raise Error(f"{path}: the program's outputs have a type this process does not know "
                    f"({e}); import the module that defines it before loading") from None
    try:
        in_spec = pytree.treespec_loads(meta["in_spec"]) if meta["in_spec"] else None
    except (KeyError, NotImplementedError, json.JSONDecodeError) as e:
        raise ValueError(f"'in_spec' is not a saved input structure ({e})") from None
    outputs = _decode(meta["outputs"])
    write_back = meta.get("write_back", [])
    _check_flow(meta["placeholders"], steps, outputs, write_back)
    users = sum(1 for p in meta["placeholders"] if p[1] == "user")
    for what, spec, count in (("in_spec", in_spec, users), ("out_spec", out_spec, len(outputs))):
        if spec is not None and spec.num_leaves != count:
            raise ValueError(f"'{what}' holds {spec.num_leaves} values, the program has {count}")
    return Program(name=meta["name"], placeholders=[tuple(p) for p in meta["placeholders"]],
                   values=values, steps=steps, outputs=outputs, in_spec=in_spec,
                   out_spec=out_spec, fallbacks=fallback_list,
                   write_back=[tuple(w) for w in write_back],
                   runtime=rt, target=target, precision=precision,
                   **_checked_shapes(meta))


def _check_flow(placeholders, steps, outputs, write_back) -> None:
    """Raises ValueError where a saved plan's step reads a value that no input, weight or
    earlier step makes, or updates what is not a buffer or a user input: an edited kiln.json
    fails at load, not with a KeyError in the middle of a call."""
    kinds = {p[0]: p[1] for p in placeholders}
    made = set(kinds)

    def need(name, where):
        if not isinstance(name, str) or name not in made:
            raise ValueError(f"{where} reads {name!r}, which no input or earlier step makes")

    def make(name, where):
        if not isinstance(name, str):
            raise ValueError(f"{where} makes {name!r}, which is not a name")
        made.add(name)

    def aliases(table, where):
        if not isinstance(table, dict):
            raise ValueError(f"{where}: 'aliases' is not a map of names to names")
        for node, src in table.items():
            need(src, where)
            make(node, where)

    def refs(x):
        if isinstance(x, _Ref):
            yield x.name
        elif isinstance(x, (list, tuple)):
            for v in x:
                yield from refs(v)
        elif isinstance(x, dict):
            for v in x.values():
                yield from refs(v)

    for step in steps:
        if step[0] == "kiln":
            _, name, _, inputs, outs, table, *_ = step
            where = f"graph {name}"
            for i in inputs:
                need(i, where)
            for o in outs:
                make(o, where)
            aliases(table, where)
        elif step[0] == "alias":
            aliases(step[1], "an alias step")
        else:
            _, name, _, args, kwargs = step
            for r in refs((args, kwargs)):
                need(r, f"step {name!r}")
            make(name, f"step {name!r}")
    if not isinstance(outputs, list):
        raise ValueError("'outputs' is not a list")
    # (a str output no step makes is the program's literal output, returned as it is)
    if not isinstance(write_back, list):
        raise ValueError("'write_back' is not a list")
    for w in write_back:
        if not (isinstance(w, list) and len(w) == 3 and w[0] in ("buffer", "input")):
            raise ValueError(f"write_back {w!r} is not [\"buffer\" or \"input\", name, value]")
        kind, name, value = w
        if kinds.get(name) != ("buffer" if kind == "buffer" else "user"):
            raise ValueError(f"write_back {w!r}: '{name}' is not a {kind} of the program")
        need(value, f"write_back {w!r}")


def sum_text(terms) -> str:
    """[(3, ["L"]), (1, [])] as `3*L + 1`: a sum of products of whole numbers and dims."""
    text = ""
    for coef, names in terms:
        sign = "-" if coef < 0 else "+"
        factors = ([str(abs(coef))] if abs(coef) != 1 or not names else []) + list(names)
        term = "*".join(factors)
        text += (f" {sign} {term}" if text else ("-" if coef < 0 else "") + term)
    return text


_SUM_TERM = re.compile(r"(?:(?P<sign>^-|^|\s[-+]\s))(?P<term>(?:[0-9]+|[A-Za-z_][A-Za-z0-9_]*)"
                       r"(?:\*(?:[0-9]+|[A-Za-z_][A-Za-z0-9_]*))*)")


def parse_sum(text, names) -> list | None:
    """sum_text's terms back from `text`, each dim one of `names`; None where `text` is not
    such a sum (at most 256 characters, 16 terms, whole numbers below 2^31)."""
    if not isinstance(text, str) or not text or len(text) > 256:
        return None
    terms, at = [], 0
    while at < len(text):
        m = _SUM_TERM.match(text, at)
        if not m or (at and not m.group("sign")) or len(terms) == 16:
            return None
        coef, dims = -1 if m.group("sign").strip() == "-" else 1, []
        for factor in m.group("term").split("*"):
            if factor.isdigit():
                if len(factor) > 10 or int(factor) >= 2**31:
                    return None
                coef *= int(factor)
            elif factor in names:
                dims.append(factor)
            else:
                return None
        terms.append((coef, dims))
        at = m.end()
    return terms


def _checked_shapes(meta) -> dict:
    """kiln.json's input dims and dim ranges, checked (ValueError: malformed); none where a
    program saved before they were kept has neither."""
    input_dims, dims = meta.get("input_dims", {}), meta.get("dims", {})
    if not isinstance(input_dims, dict) or not isinstance(dims, dict):
        raise ValueError("'input_dims' and 'dims' must be maps")
    for name, r in dims.items():
        if not (isinstance(name, str) and isinstance(r, list) and len(r) == 3 and
                all(type(v) is int for v in r[:2]) and type(r[2]) is bool and
                1 <= r[0] <= r[1] <= 2**31 - 1):
            raise ValueError(f"dim {name!r}: not [lo, hi, capped] with 1 <= lo <= hi < 2^31")
    for name, spec in input_dims.items():
        if not (isinstance(spec, list) and len(spec) <= 64 and all(
                d is None or (type(d) is int and 0 <= d < 2**63) or
                (isinstance(d, str) and (d in dims or parse_sum(d, dims) is not None))
                for d in spec)):
            raise ValueError(f"input {name!r}: its dims are not sizes, known dim names, sums of "
                             "products of them or null")
    return {"input_dims": input_dims, "dims": {n: tuple(r) for n, r in dims.items()}}
