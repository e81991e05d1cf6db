"""PyTorch models into kiln: torch.export programs ahead of time (compile_exported, save, load) and
a torch.compile backend (`backend="kiln"`). One ATen -> kiln op table (_table.py); what kiln
cannot run stays in PyTorch, listed in `program.fallbacks`."""
from __future__ import annotations

import operator
import re

try:
    import torch
except ImportError as e:  # kiln itself needs only NumPy
    raise ImportError("kiln.torch needs PyTorch 2.5 or later: pip install torch") from e
import sympy  # PyTorch's own dependency
from torch.fx import Graph, GraphModule

from .. import _runtime
from .._errors import Error, GraphError
from . import _canonical, _lower, _plan, _program, _table
from ._program import Fallback, Program, load, report_fallbacks, torch_step

__all__ = ["Fallback", "Program", "compile_exported", "dynamo_backend", "load"]

_MAX_DIM = 4096


def _check_text(text: str):
    """(line, message) where kiln refuses a graph's text, else the shape kiln infers for each
    output, as tokens (`['s0', 's1', '64']`)."""
    try:
        graph = _runtime.Graph.parse(text, "<partition>")
    except GraphError as e:
        message = str(e)
        return (e.line or 0, message.split(": error: ", 1)[-1])
    return [[d if d is not None else str(n) for n, d in zip(o.shape, o.dims)]
            for o in graph.outputs]


def _dim_names(gm) -> dict:
    """{symbol: the name of its torch.export.Dim} for the placeholders' symbolic sizes, where the
    shape environment keeps it: a program exported in this process (torch.export.load's and
    Dynamo's name none). Read from torch's private ShapeEnv; where that changes, the symbols
    keep their own names."""
    names = {}
    for node in gm.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        if not isinstance(val, torch.Tensor):
            continue
        for d in val.shape:
            if not (isinstance(d, torch.SymInt) and d.node.expr.is_Symbol):
                continue
            key = str(d.node.expr)
            try:
                env = d.node.shape_env
                debug = env.source_name_to_debug_name
                for source in env.var_to_sources.get(d.node.expr, ()):
                    text = source.name if isinstance(source.name, str) else source.name()
                    if isinstance(debug.get(text), str):
                        names.setdefault(key, debug[text])
            except Exception:  # noqa: BLE001 - a private API: the symbol's name serves
                continue
    return names


def _symbols_of(gm, ranges: dict, max_dim: int, taken=()):
    """kiln dims for the symbols of the placeholders' shapes: {symbol: name}, {name: (lo, hi)}.
    A dim takes its torch.export.Dim's name where the export kept it (_dim_names) and the name
    is a plain kiln name no input (`taken`), symbol or other dim has; else the symbol's (s27).
    A symbol bounded at `max_dim` or below keeps its range. An unbounded one, or one bounded
    above `max_dim`, ends at `max_dim`, and the largest of those is halved while some tensor of
    the graph could exceed kiln's 2^31 - 1 elements."""
    symbols, dims, open_ended = {}, {}, set()
    given = _dim_names(gm)
    # A name kiln could confuse is not taken: an input's, a symbol's, a reserved word, or one
    # starting with `_` (a value of a graph) or holding a dot (a parameter's).
    avoid = set(taken)
    for node in gm.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        if isinstance(val, torch.Tensor):
            avoid.update(str(s) for d in val.shape if isinstance(d, torch.SymInt)
                         for s in d.node.expr.free_symbols)
    chosen = {}
    for key, name in given.items():
        if (re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) and name not in _lower._RESERVED
                and name not in avoid and name not in chosen.values()):
            chosen[key] = name
    for node in gm.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        if not isinstance(val, torch.Tensor):
            continue
        for d in val.shape:
            if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol:
                key = str(d.node.expr)
                if key in symbols:
                    continue
                lo, hi = ranges.get(key, (1, None))
                lo = max(1, int(lo)) if _finite(lo) else 1
                name = chosen.get(key) or _lower.kiln_name(key)
                symbols[key] = name
                if hi is None or not _finite(hi) or int(hi) > max_dim:
                    hi = max_dim
                    open_ended.add(name)
                dims[name] = [lo, max(lo, int(hi))]
    shapes = []
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            shapes.append(val.shape)
    def worst():
        for shape in shapes:
            total, names = 1, []
            for d in shape:
                if isinstance(d, torch.SymInt) and not d.node.expr.is_number:
                    free = [symbols.get(str(s)) for s in d.node.expr.free_symbols]
                    if None in free:
                        break
                    total *= int(d.node.expr.subs({s: dims[symbols[str(s)]][1]
                                                   for s in d.node.expr.free_symbols}))
                    names += [f for f in free if f in open_ended]
                else:
                    total *= int(d)
            else:
                if total > 2**31 - 1 and names:
                    return names
        return None
    while (names := worst()) is not None:
        name = max(names, key=lambda n: (dims[n][1], n))
        if dims[name][1] <= dims[name][0]:
            break
        dims[name][1] = max(dims[name][0], dims[name][1] // 2)
    return symbols, {n: tuple(r) for n, r in dims.items()}


def _finite(x) -> bool:
    """Whether a range bound (an int, or sympy's int_oo/oo) is a finite integer."""
    if isinstance(x, int):
        return abs(x) < 2**62
    try:
        return bool(x.is_finite) and x.is_integer and abs(int(x)) < 2**62
    except (AttributeError, TypeError, ValueError, OverflowError):
        return False


def _views(spec, input_names) -> list:
    """A KilnStep's view of an input, with each placeholder as its name in the plan."""
    return [None if f is None else
            [x if isinstance(x, int) else [input_names.get(x[0], x[0].name), x[1]] for x in f]
            for f in spec]


def _build(gm: GraphModule, input_names: dict, symbols, dims, name: str, rt, fallbacks: str,
          constants: dict | None = None):
    steps, fb, outputs = _plan.build_plan(gm, symbols, dims, input_names, name, _check_text,
                                           constants)
    fallback_list = [Fallback(op, n, why) for op, (n, why) in sorted(fb.items())]
    report_fallbacks(name, fallback_list, fallbacks)
    plan = []
    for step in steps:
        if isinstance(step, _lower.KilnStep) and not step.outputs:
            plan.append(("alias", {a.name: input_names.get(s, s.name) for a, s in step.aliases.items()}))
        elif isinstance(step, _lower.KilnStep):
            exe = rt.compile(_runtime.Graph.parse(step.text, f"{step.name}.kg"))
            plan.append(("kiln", step.name, exe, [input_names.get(n, n.name) for n in step.inputs],
                         [n.name for n in step.outputs],
                         {a.name: input_names.get(s, s.name) for a, s in step.aliases.items()},
                         step.text, {n.name: spans for n, spans in step.spans.items()},
                         {input_names.get(n, n.name): _views(spec, input_names)
                          for n, spec in step.views.items()}))
        else:
            plan.append(torch_step(step.node, input_names))
    out_names = []
    for o in outputs:
        out_names.append(input_names.get(o, o.name) if isinstance(o, torch.fx.Node) else o)
    return plan, fallback_list, out_names


def _copy_graph(gm: GraphModule) -> GraphModule:
    graph = Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return GraphModule(gm, graph)


def compile_exported(ep: "torch.export.ExportedProgram", target: str | None = None,
                     precision: str = "high", fallbacks: str = "warn", *, cache_dir=None,
                     remote=None, max_dim: int = _MAX_DIM, check_indices: bool = False) -> Program:
    """A kiln program from a torch.export program: its supported ops as kiln graphs (parameters
    stay graph inputs, symbolic sizes become `dim NAME: LO..HI` from `range_constraints`, an
    unbounded one capped at `max_dim`), the rest run in PyTorch. target: None for "cpu", or where
    the program's tensors live ("cuda"); fallbacks: "warn" (print the list of ops kept in
    PyTorch once), "refuse" (raise kiln.Error with it) or "allow"."""
    if not isinstance(ep, torch.export.ExportedProgram):
        raise TypeError(f"compile_exported takes a torch.export.ExportedProgram "
                        f"(torch.export.export(model, args)), not {type(ep).__name__}")
    _program.check_fallbacks(fallbacks)
    max_dim = _checked_max_dim(max_dim)
    if _mutates(ep.graph):
        # torch.export keeps in-place ops (`y.add_(1)`, `y[:, 0] = 5`): functionalise them first
        # (no op is decomposed), so that every value is written once and read as written; a
        # mutated buffer or input becomes an output, written back after each call.
        ep = ep.run_decompositions({})
        if _mutates(ep.graph):
            raise Error("the exported program still has in-place ops after functionalisation")
    gm = _copy_graph(ep.graph_module)
    _canonical.canonicalize(gm)
    for node in gm.graph.nodes:
        # An exported program lifts its tensors to inputs: what it still reads as an attribute is
        # a subgraph of a higher-order op (torch.cond's branches, torch.map's body).
        if node.op == "get_attr":
            users = ", ".join(sorted(str(u.target) for u in node.users))
            control = any(w in users for w in ("cond", "map", "while_loop", "scan"))
            raise Error(f"node '{node.name}' is the subgraph '{node.target}' of {users}: "
                        + ("control flow (torch.cond, torch.map, while_loop) is not supported"
                           if control else "a higher-order op kiln.torch does not run (a "
                           "no_grad or autocast block inside forward is one: move it out)"))
    sig = ep.graph_signature
    # A buffer the program writes (`self.pos.add_(1)`) holds another value at every call: it is an
    # input, never folded into the graph as the constant it held at export.
    mutated = {spec.target for spec in sig.output_specs
               if spec.kind.name.lower() == "buffer_mutation"}
    kinds = {}
    for spec in sig.input_specs:
        kind = spec.kind.name.lower()
        kinds[spec.arg.name] = ("parameter" if kind == "parameter" else "buffer" if kind == "buffer"
                                else "constant" if kind == "constant_tensor" else
                                "user" if kind == "user_input" else kind, spec.target)
    placeholders, values, input_names, constants = [], {}, {}, {}
    devices = set()
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        kind, fqn = kinds.get(node.name, ("user", None))
        if kind in ("parameter", "buffer", "constant"):
            tensor = ep.state_dict.get(fqn) if fqn in ep.state_dict else ep.constants.get(fqn)
            if tensor is None:
                raise Error(f"the exported program has no value for {kind} '{fqn}'")
            name = _lower.kiln_name(fqn)
            values[name] = tensor.detach() if isinstance(tensor, torch.Tensor) else tensor
            if kind != "parameter" and isinstance(tensor, torch.Tensor) and fqn not in mutated:
                constants[node] = tensor.detach()
            devices.add(getattr(tensor, "device", torch.device("cpu")).type)
        elif kind == "user":
            name = _lower.kiln_name(node.name)
        else:
            raise Error(f"input '{node.name}' of kind {kind} is not supported")
        input_names[node] = name
        placeholders.append((name, kind, fqn))
    if target is None:
        target = "cuda" if "cuda" in devices else "cpu"
    ranges = {str(s): (r.lower, r.upper) for s, r in ep.range_constraints.items()}
    symbols, dims = _symbols_of(gm, ranges, max_dim, input_names.values())
    rt = _runtime.Runtime(target=target, precision=precision, cache_dir=cache_dir, remote=remote,
                          fallbacks=fallbacks, check_indices=check_indices)
    name = _lower.kiln_name(_model_name(ep))
    plan, fallback_list, outputs = _build(gm, input_names, symbols, dims, name, rt, fallbacks,
                                         constants)
    user_outputs, write_back = [], []
    for o, spec in zip(outputs, sig.output_specs):
        kind = spec.kind.name.lower()
        if kind == "user_output":
            user_outputs.append(o)
        elif kind == "buffer_mutation":
            write_back.append(("buffer", _lower.kiln_name(spec.target), o))
        elif kind == "user_input_mutation":
            write_back.append(("input", _lower.kiln_name(spec.target), o))
        else:
            raise Error(f"an output of kind {kind} is not supported")
    input_dims = {}
    for node, input_name in input_names.items():
        val = node.meta.get("val")
        if kinds.get(node.name, ("user",))[0] == "user" and isinstance(val, torch.Tensor):
            input_dims[input_name] = [_dim_spec(d, symbols) for d in val.shape]
    kiln_dims = {}
    for sym, dim in symbols.items():
        lo, hi = dims[dim]
        given = ranges.get(sym, (1, None))[1]
        kiln_dims[dim] = (lo, hi, not (_finite(given) and int(given) <= hi))
    return Program(name=name, placeholders=placeholders, values=values, steps=plan,
                   outputs=user_outputs, in_spec=ep.call_spec.in_spec, out_spec=ep.call_spec.out_spec,
                   fallbacks=fallback_list, runtime=rt, target=target, precision=precision,
                   exported=ep, write_back=write_back, input_dims=input_dims, dims=kiln_dims)


def _dim_spec(d, symbols: dict):
    """A placeholder's dim as the program checks it: its size, its kiln dim's name, a sum of
    products of whole numbers and kiln dims as text (`3*L + 1`: a torch.export derived dim), or
    None (any other expression, left to the graphs)."""
    if not isinstance(d, torch.SymInt):
        return int(d)
    expr = d.node.expr
    if expr.is_number:
        return int(expr)
    if expr.is_Symbol:
        return symbols.get(str(expr))
    terms = []
    for monomial, coef in sorted(expr.expand().as_coefficients_dict().items(), key=str):
        if not coef.is_Integer:
            return None
        names = []
        for factor, power in monomial.as_powers_dict().items():
            if factor.is_Number and factor == 1:
                continue
            if (not factor.is_Symbol or str(factor) not in symbols or not power.is_Integer
                    or not 1 <= int(power) <= 8):
                return None
            names += [symbols[str(factor)]] * int(power)
        terms.append((int(coef), sorted(names)))
    terms.sort(key=lambda t: (not t[1], t[1]))  # the whole number last
    text = _program.sum_text(terms)
    return text if _program.parse_sum(text, set(symbols.values())) == terms else None


def _checked_max_dim(max_dim) -> int:
    """max_dim as given: a whole number from 1 to 2^31 - 1 (kiln's largest dim)."""
    try:
        value = operator.index(max_dim) if not isinstance(max_dim, bool) else None
    except TypeError:
        value = None
    if value is None or not 1 <= value < 2**31:
        raise ValueError(f"max_dim={max_dim!r}: expected a whole number from 1 to 2^31 - 1")
    return value


def _mutates(graph) -> bool:
    """Whether a graph holds an op that writes into one of its arguments."""
    for node in graph.nodes:
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and \
                target._schema.is_mutable and target not in _table.ASSERTIONS:
            return True
    return False


def _model_name(ep) -> str:
    """The exported module's class name (the root of the nodes' module stacks), else "program"."""
    for node in ep.graph.nodes:
        for path, cls in (node.meta.get("nn_module_stack") or {}).values():
            if path == "":
                return (cls if isinstance(cls, str) else cls.__name__).split(".")[-1]
    return "program"


# -- torch.compile(model, backend="kiln", options={...}) -------------------------------------------

def dynamo_backend(gm: GraphModule, example_inputs, **kwargs):
    """The torch.compile backend (entry point `torch_dynamo_backends: kiln`), for inference:
    forward graphs through AOTAutograd, the same op table and grouping as compile_exported.
    options: target ("cpu"), precision ("high"), fallbacks ("warn"), cache_dir, remote, max_dim."""
    options = dict(kwargs.get("options") or {})
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def forward(fx: GraphModule, inputs):
        return make_boxed_func(_compile_forward(fx, inputs, options))

    def backward(fx: GraphModule, inputs):
        raise Error("kiln's torch.compile backend is for inference: run the model under "
                    "torch.no_grad() or torch.inference_mode()")

    return aot_autograd(fw_compiler=forward, bw_compiler=backward)(gm, example_inputs)


_counter = [0]


def _compile_forward(fx: GraphModule, inputs, options: dict):
    unknown = set(options) - {"target", "precision", "fallbacks", "cache_dir", "remote", "max_dim",
                              "check_indices"}
    if unknown:
        raise Error(f"kiln backend: unknown options {sorted(unknown)}")
    target = options.get("target", "cpu")
    precision = options.get("precision", "high")
    fallbacks = options.get("fallbacks", "warn")
    max_dim = _checked_max_dim(options.get("max_dim", _MAX_DIM))
    gm = _copy_graph(fx)
    _canonical.canonicalize(gm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    input_names = {n: _lower.kiln_name(n.name) for n in placeholders}
    # Tensors the graph holds as attributes (a module's constant tensor): inputs bound once.
    constants = {}
    fake = torch._guards.detect_fake_mode(inputs)
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if not isinstance(value, torch.Tensor):
                raise Error(f"kiln backend: attribute '{node.target}' is not a tensor")
            name = _lower.kiln_name("const." + node.target)
            input_names[node] = name
            with torch._subclasses.fake_tensor.unset_fake_temporarily():
                constants[name] = value.detach()
            if not isinstance(node.meta.get("val"), torch.Tensor) and fake is not None:
                node.meta["val"] = fake.from_tensor(constants[name])
    ranges = {}
    shape_env = getattr(fake, "shape_env", None)
    if shape_env is not None:
        for sym, r in shape_env.var_to_range.items():
            ranges[str(sym)] = (r.lower, r.upper)
    symbols, dims = _symbols_of(gm, ranges, max_dim, input_names.values())
    rt = _runtime.Runtime(target=target, precision=precision, cache_dir=options.get("cache_dir"),
                          remote=options.get("remote"), fallbacks=fallbacks,
                          check_indices=bool(options.get("check_indices", False)))
    _counter[0] += 1
    name = f"dynamo_{_counter[0]}"
    plan, fallback_list, outputs = _build(gm, input_names, symbols, dims, name, rt, fallbacks)
    names = [input_names[n] for n in placeholders]
    layouts = _OutputLayouts(gm, placeholders)
    from ._program import run_steps

    def run(*args):
        env = dict(constants)
        env.update(zip(names, args))
        run_steps(plan, env)
        return layouts.apply([env[o] if isinstance(o, str) and o in env else o for o in outputs],
                             args)

    run.kiln_partitions = [s[6] for s in plan if s[0] == "kiln"]
    run.kiln_fallbacks = fallback_list
    compiled.append(run)
    return run


class _OutputLayouts:
    """The traced strides and storage offsets of a forward graph's outputs. AOTAutograd makes an
    output that aliases an input (or an intermediate) again from that base, and where it cannot
    replay the views (views of symbolic sizes) it takes `base.as_strided(out.size(), out.stride(),
    out.storage_offset())` of the tensor the backend returned: a kiln output, contiguous, would
    read the wrong elements of the base (`x.view(B, 2, 2)[:, 1]`). Each output whose traced layout
    is not contiguous is returned with that layout, its sizes, strides and offset evaluated at the
    call's sizes: a view of the input it aliases (no copy), or a copy in a buffer of its own."""

    def __init__(self, gm: GraphModule, placeholders: list):
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
        from torch.multiprocessing.reductions import StorageWeakRef
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        outs = out_node.args[0]
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        # Where each symbol of the trace is found at a call: (argument, what, dim), what one of
        # "int" (a SymInt argument), "size", "stride" or "offset" of a tensor argument; and
        # which argument each traced storage is.
        self.sources: dict = {}
        storages: dict = {}

        def source(x, i, what, d=0):
            if isinstance(x, torch.SymInt) and _is_symbol(x):
                self.sources.setdefault(x.node.expr, (i, what, d))

        for i, p in enumerate(placeholders):
            val = p.meta.get("val")
            if isinstance(val, torch.SymInt):
                source(val, i, "int")
            elif isinstance(val, torch.Tensor) and val.layout == torch.strided:
                storages.setdefault(StorageWeakRef(val.untyped_storage()), (i, val))
                for d, size in enumerate(val.shape):
                    source(size, i, "size", d)
                for d, stride in enumerate(val.stride()):
                    source(stride, i, "stride", d)
                source(val.storage_offset(), i, "offset")
        # Per output: None, or its traced (sizes, strides, offset) as sympy expressions and the
        # argument whose storage it views (None for a value of its own); a view's offset is from
        # the argument's own (a call may pass another offset than the trace's).
        self.layouts: list = []
        for o in outs:
            val = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
            # A size that only the data decides (nonzero, a mask) comes from a PyTorch step,
            # which made the layout already.
            if not isinstance(val, torch.Tensor) or val.layout != torch.strided or \
                    free_unbacked_symbols(val):
                self.layouts.append(None)
                continue
            traced = (tuple(_expr(x) for x in val.shape), tuple(_expr(x) for x in val.stride()),
                      _expr(val.storage_offset()))
            if traced[2] == 0 and _contiguous_strides(traced[0], traced[1]):
                self.layouts.append(None)  # what kiln returns
                continue
            base = storages.get(StorageWeakRef(val.untyped_storage()))
            if base is not None:
                traced = (traced[0], traced[1], traced[2] - _expr(base[1].storage_offset()))
            self.layouts.append((traced, None if base is None else base[0]))
        self.any = any(self.layouts)
        self.cache: dict = {}

    def apply(self, values: list, args) -> list:
        if not self.any:
            return values
        layouts = self._at(args)
        out = list(values)
        for i, (layout, base) in enumerate(layouts):
            if layout is None or not isinstance(out[i], torch.Tensor) or \
                    tuple(out[i].shape) != layout[0]:
                continue
            if base is not None and isinstance(args[base], torch.Tensor):
                # The view itself, as eager's.
                sizes, strides, offset = layout
                out[i] = args[base].as_strided(sizes, strides,
                                               args[base].storage_offset() + offset)
            else:
                out[i] = _with_layout(out[i], *layout)
        return out

    def _at(self, args) -> list:
        """Each output's (sizes, strides, offset) as ints at this call (None where it keeps
        kiln's layout, or a symbol of it is not among the arguments), and its base."""
        values = {}
        for sym, (i, what, d) in self.sources.items():
            arg = args[i]
            values[sym] = int(arg if what == "int" else arg.shape[d] if what == "size" else
                              arg.stride(d) if what == "stride" else arg.storage_offset())
        key = tuple(values.values())
        if key in self.cache:
            return self.cache[key]
        subs = {sym: sympy.Integer(v) for sym, v in values.items()}

        def evaluate(expr):
            expr = expr.xreplace(subs)
            if not expr.is_number:
                raise LookupError(str(expr))
            return int(expr)

        layouts = []
        for entry in self.layouts:
            if entry is None:
                layouts.append((None, None))
                continue
            (sizes, strides, offset), base = entry
            try:
                layouts.append(((tuple(evaluate(x) for x in sizes),
                                 tuple(evaluate(x) for x in strides), evaluate(offset)), base))
            except LookupError:
                layouts.append((None, None))
        if len(self.cache) < 64:
            self.cache[key] = layouts
        return layouts


def _expr(x):
    """An int or SymInt as a sympy expression (no guard is added on the symbol)."""
    return x.node.expr if isinstance(x, torch.SymInt) else sympy.Integer(int(x))


def _is_symbol(x) -> bool:
    return bool(getattr(x.node.expr, "is_Symbol", False))


def _contiguous_strides(sizes, strides) -> bool:
    """Whether sympy `strides` are the contiguous ones of `sizes`, as written (a size that may be
    1 at a call is taken as it is written: such a layout is given again, unchanged)."""
    expected = sympy.Integer(1)
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected = expected * size
    return True


def _with_layout(value: torch.Tensor, sizes, strides, offset) -> torch.Tensor:
    """`value`'s elements in a tensor of these strides and storage offset (not a view: no `_base`);
    `value` itself when it has them, or when its sizes are others."""
    if tuple(value.shape) != sizes or \
            (value.stride() == strides and value.storage_offset() == offset):
        return value
    if any(s == 0 for s in sizes):
        extent = offset
    else:
        extent = offset + 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    storage = torch.empty(extent, dtype=value.dtype, device=value.device).untyped_storage()
    out = torch.empty((0,), dtype=value.dtype, device=value.device).set_(storage, offset, sizes,
                                                                        strides)
    # A dim of stride 0 (an `expand`) holds one element in memory: one position of it is copied.
    dst, src = out, value
    for d, st in enumerate(strides):
        if st == 0 and sizes[d] > 1:
            dst, src = dst.narrow(d, 0, 1), src.narrow(d, 0, 1)
    try:
        dst.copy_(src)
    except RuntimeError:  # other overlapping strides (an unfold): kept contiguous
        return value
    return out


# Every forward graph the backend compiled in this process, newest last (for inspection).
compiled: list = []
