"""FX nodes into kiln text: names, whether kiln can run a node (and why not), and a group of
nodes lowered into one `.kg` graph (one statement per node, dead ones pruned). _plan.py groups
the nodes and orders the groups; _table.py holds each op's lowering."""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field

import sympy
import torch
from torch.fx import Node
from torch.utils._sympy import functions as _sym
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from . import _table
from ._table import Alias, Const, Expr, Pieces, Tuple0, Unsupported

aten = torch.ops.aten

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32",
           torch.int64: "i64", torch.bool: "bool"}
# Words a kiln name may not be: ops (ir/ops.def), dtypes, literals, keywords.
_RESERVED = set("""input matmul add sub mul div relu gelu silu sigmoid tanh exp neg cast softmax sqrt
rsqrt abs pow maximum minimum sum mean max rms_norm layer_norm reshape permute slice concat
attention cos sin erf log gelu_tanh eq ne lt le gt ge logical_and logical_or logical_not where
arange embedding expand cumsum roll floor_divide remainder test_extra f32 f16 bf16 i32 i64 bool true
false inf graph dim output""".split())
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


def kiln_name(text: str) -> str:
    """`text` as a kiln name: invalid characters become `_`, a reserved word gains a `_`."""
    parts = [re.sub(r"[^A-Za-z0-9_]", "_", p) or "_" for p in text.split(".")]
    if not re.match(r"[A-Za-z_]", parts[0]):
        parts[0] = "_" + parts[0]
    name = ".".join(parts)
    if name in _RESERVED or not _NAME.match(name):
        name += "_"
    return name


# -- 2. what kiln can run ------------------------------------------------------------------------

class Probe:
    """The lowering context with no partition: answers whether and why a node is unsupported."""

    def __init__(self, symbols: dict, constants: dict | None = None, dims: dict | None = None):
        self.symbols = symbols
        self.constants = constants or {}
        self.dims = dims or {}
        self._decided = {}
        self.memo = {}  # what a lowering found once of a node (a constant's band), by node
        # Nodes kiln cannot run that no kiln lowering reads (a window of size S - 1 that a
        # slice_scatter places by rolling its tensor): node -> why kiln cannot run it. They join
        # kiln's groups, so as not to split them, and are never lowered.
        self.unread: dict = {}
        self.reads: set | None = None  # while probing a lowering: the nodes it reads

    def smallest(self, d) -> int:
        """The smallest size a symbolic size takes (its kiln dim's low end)."""
        name = self.size(d)
        return self.dims[name][0] if name in self.dims else 1

    def constant(self, node):
        """The value of a buffer or constant the graph reads (never a parameter's), else None."""
        return self.constants.get(node) if isinstance(node, Node) else None

    # Context API used by the table.
    def meta(self, node):
        """A node's fake tensor (or list of them); a size used as a value (`ids - S`) reads as a
        rank-0 i64 tensor, as `ref` writes it. Any other value raises Unsupported."""
        if isinstance(node, Node):
            val = node.meta.get("val")
            if val is None:
                raise Unsupported(f"no shape is known for '{node.name}'")
            if _is_size(val):
                return torch.empty((), dtype=torch.int64)
            if not isinstance(val, (torch.Tensor, list, tuple)):
                raise Unsupported(f"a value that is not a tensor ({type(val).__name__})")
            return val
        return torch.empty(())

    def dtype_of(self, node) -> str:
        if not isinstance(node, Node):
            if isinstance(node, bool):
                return "bool"
            return "i64" if isinstance(node, int) else "f32"
        val = self.meta(node)
        if not isinstance(val, torch.Tensor):
            raise Unsupported("a value that is not a tensor")
        if val.dtype not in _DTYPES:
            name = str(val.dtype).replace("torch.", "")
            raise Unsupported(f"{'an' if name[0] in 'aeio' else 'a'} {name} tensor")
        return _DTYPES[val.dtype]

    def promoted(self, a, b) -> str:
        def probe(x):
            if isinstance(x, Node):
                v = self.meta(x)
                return torch.empty((1,) * max(v.dim(), 1) if v.dim() else (), dtype=v.dtype)
            return x
        return _DTYPES.get(torch.result_type(probe(a), probe(b)), "f64")

    def expr(self, d):
        """A SymInt's sympy expression, each Max and Min in it decided where the kiln dims'
        ranges decide it: MPT slices its alibi from Max(0, 64 - S), which is 64 - S wherever S
        is at most 64."""
        expr = d.node.expr
        if expr.is_number or expr.is_Symbol or not expr.has(*_MAX, *_MIN):
            return expr
        if expr not in self._decided:
            ranges = self.ranges(expr)
            self._decided[expr] = expr if ranges is None else _decide(expr, ranges)
        return self._decided[expr]

    def ranges(self, expr) -> dict | None:
        """{symbol: its kiln dim's range} for the symbols of `expr`, None if one has no kiln dim."""
        ranges = {}
        for sym in expr.free_symbols:
            name = self.symbols.get(str(sym))
            if name is None or name not in self.dims:
                return None
            ranges[sym] = ValueRanges(*self.dims[name])
        return ranges

    def is_symbolic(self, d) -> bool:
        return isinstance(d, torch.SymInt) and not self.expr(d).is_number

    def size(self, d) -> str:
        if isinstance(d, Node):
            d = d.meta.get("val")
        if isinstance(d, torch.SymInt):
            expr = self.expr(d)
            if expr.is_number:
                d = int(expr)
            elif expr.is_Symbol and str(expr) in self.symbols:
                return self.symbols[str(expr)]
            else:
                raise Unsupported(f"a size {expr} (kiln dims are symbols or constants)")
        if isinstance(d, int):
            if d < 1:
                raise Unsupported("a tensor with a dim of size 0 (kiln's dims are positive)")
            return str(d)
        raise Unsupported(f"a size of type {type(d).__name__}")

    def merged(self, d) -> list | None:
        """The kiln dims of a size that is a product of symbolic dims (`s0*s1`: a dynamic batch
        and sequence flattened, as OPT's MLP and GPT-2's Conv1D do), else None. kiln holds such a
        dim as its factors in its place: [s0*s1, 64] is [s0, s1, 64], the same elements in the
        same order, which row-wise work (elementwise ops, matmuls over the last dim, norms and
        reductions after it) reads alike; _table.merged_dims_reason says which nodes may."""
        if isinstance(d, torch.SymInt):
            expr = self.expr(d)
            if not expr.is_Mul:
                return None
            names, count = [], 1
            for f in expr.args:
                if f.is_Symbol and str(f) in self.symbols:
                    names.append(self.symbols[str(f)])
                elif f.is_Integer and int(f) > 1:
                    count *= int(f)  # a constant factor (batch * heads): after the dims
                else:
                    return None
            return names + ([str(count)] if count > 1 else [])
        return None

    def check_shape(self, shape) -> None:
        """Raises Unsupported for a tensor kiln cannot hold: a dim of size 0, or more than
        2^31 - 1 elements (a symbolic dim counted at its high end)."""
        elements = 1
        for d in shape:
            for name in self.merged(d) or [self.size(d)]:
                elements *= self.dims[name][1] if name in self.dims else int(name)
        if elements > 2**31 - 1:
            raise Unsupported(f"a tensor of {elements} elements (kiln's limit is 2^31 - 1)")

    def shape(self, node) -> str:
        """A tensor's kiln shape: a merged dim written as its factors."""
        return "[" + ", ".join(", ".join(self.merged(d) or [self.size(d)])
                               for d in self.meta(node).shape) + "]"

    def fx_shape(self, node) -> str:
        """The shape as PyTorch writes it (`[B*S, 64]`), for messages."""
        return self.named("[" + ", ".join(str(d) for d in self.meta(node).shape) + "]")

    def named(self, text: str) -> str:
        """`text` with each of torch's symbols (`s27`) written as its kiln dim's name."""
        return re.sub(r"\b[a-z]+[0-9]+\b", lambda m: self.symbols.get(m.group(0), m.group(0)),
                      text)

    def let(self, text: str) -> str:
        """A name for `text`, which a lowering reads more than once (Partition.let writes it as
        a statement of its own); probing asks only whether the lowering works."""
        return "_let"

    def has_merged(self, node) -> bool:
        val = node.meta.get("val") if isinstance(node, Node) else None
        return isinstance(val, torch.Tensor) and any(self.merged(d) for d in val.shape)

    def only_first_output(self, node):
        for user in node.users:
            if not (user.op == "call_function" and user.target is _GETITEM and user.args[1] == 0):
                raise Unsupported(f"{node.target} whose other outputs are used")

    def size_value(self, node: Node, dtype: str | None) -> str:
        """A size used as a value (`ids - S`, `x * x.shape[1]`): a literal, or a rank-0 tensor
        computed from its kiln dims (_table.size_text), cast to `dtype` where one is given."""
        val = node.meta["val"]
        expr = self.expr(val) if isinstance(val, torch.SymInt) else sympy.Integer(int(val))
        if expr.is_Integer:
            return self.ref(int(expr), dtype)
        text = _table.size_text(self, expr)
        return text if dtype in (None, "i64") else f"cast({text}, to={dtype})"

    def pairs_ref(self, node: Node) -> str:
        """A complex tensor's kiln name: its pairs (_table's complex values)."""
        if self.reads is not None:
            self.reads.add(node)
        return node.name

    def ref(self, arg, dtype: str | None = None) -> str:
        if isinstance(arg, Node) and _is_size(arg.meta.get("val")):
            return self.size_value(arg, dtype)
        if isinstance(arg, Node):
            if self.reads is not None:
                self.reads.add(arg)
            self.dtype_of(arg)
            self.check_shape(self.meta(arg).shape)
            if dtype is not None and self.dtype_of(arg) != dtype:
                return f"cast({arg.name}, to={dtype})"
            return arg.name
        if isinstance(arg, (bool, int, float)):
            if dtype in ("i32", "i64") and isinstance(arg, float):
                raise Unsupported("a float literal against an integer tensor")
            return _table._lit(arg)
        raise Unsupported(f"an operand of type {type(arg).__name__}")


_GETITEM = operator.getitem

_is_size = _table.is_size


_MAX, _MIN = (sympy.Max, _sym.Max), (sympy.Min, _sym.Min)  # torch's and sympy's own


def _decide(expr, ranges: dict):
    """`expr` with each Max (Min) rid of the arguments another is at least (at most) as large
    as over `ranges`."""
    if expr.is_Atom:
        return expr
    expr = expr.func(*[_decide(a, ranges) for a in expr.args])
    if isinstance(expr, _MAX + _MIN):
        keep = list(expr.args)
        for a in list(keep):
            for b in keep:
                if b is not a and bool(bound_sympy(b - a if isinstance(expr, _MAX) else a - b,
                                                   ranges).lower >= 0):
                    keep.remove(a)  # b always decides where a would
                    break
        expr = keep[0] if len(keep) == 1 else expr.func(*keep)
    return expr


def unsupported_reason(probe: Probe, node: Node, reads: set | None = None) -> str | None:
    """None when kiln can run `node`, else why not. `reads`, where given, gains the nodes its
    lowering reads."""
    if node.op != "call_function":
        return "not an op"
    complex_ = _table.touches_complex(node)
    low = _table.lowering_for(node)
    if low is None:
        return _table.complex_reason(node) if complex_ and node.target in _table.TABLE else \
            _table.NO_OP_HINTS.get(str(node.target), "no kiln op for it")
    try:
        val = node.meta.get("val")
        if complex_:
            pass  # the complex lowerings check their tensors (_table._complex_operands)
        elif isinstance(val, torch.Tensor):
            probe.dtype_of(node)
            probe.check_shape(val.shape)
        elif node.target is not _GETITEM and not isinstance(val, (list, tuple)):
            return "not a tensor op"
        reason = None if complex_ else _table.merged_dims_reason(probe, node)
        if reason is not None:
            return reason
        probe.reads = reads
        value = low(probe, node)
        if reads is not None and isinstance(value, (Alias, Pieces)) and \
                isinstance(value.node, Node):
            reads.add(value.node)  # its value is that node's
    except Unsupported as e:
        return str(e)
    finally:
        probe.reads = None
    return None


# -- 3 and 4. groups and their text ---------------------------------------------------------------

@dataclass
class KilnStep:
    name: str                 # the graph's name
    text: str                 # its .kg text
    inputs: list              # FX nodes, in the graph's input order
    outputs: list             # FX nodes, in the graph's output order
    aliases: dict = field(default_factory=dict)  # FX node -> the FX node whose value it is
    # FX node -> how many of kiln's dims make each of its dims, for an output with a merged dim
    # (kiln gives [s0, s1, 64] where PyTorch's [s0*s1, 64] is wanted: [2, 1]).
    spans: dict = field(default_factory=dict)
    # FX node -> for an input with a merged dim, how the caller's tensor is viewed in kiln's
    # shape: per dim None (its own size) or the factors, each a constant or (placeholder, axis).
    views: dict = field(default_factory=dict)


@dataclass
class TorchStep:
    node: Node


class Partition:
    """Lowers one group of nodes into kiln text."""

    def __init__(self, probe: Probe, members: set, names: dict):
        self.probe = probe
        self.members = members
        self.names = names            # FX node -> kiln input name (graph inputs)
        self.values: dict = {}        # FX node -> Expr/Alias/Const/Tuple0 result
        self.statements: list = []    # (kiln name, text, node)
        self.lets: dict = {}          # the text of each let -> its name
        self.external: list = []      # FX nodes read from outside, in first-use order
        self.first_reader: dict = {}  # each of those -> the node whose lowering read it first
        self.lowering = None          # the node being lowered

    # The context API (as Probe's), resolving operands to kiln names.
    def __getattr__(self, attr):
        return getattr(self.probe, attr)

    def resolve(self, node: Node):
        """(kind, value): ('name', kiln name) | ('const', Const) for an FX node's value here."""
        while True:
            if node in self.members:
                if node in self.probe.unread:  # read after all: kiln cannot run it
                    raise PartitionError(node, self.probe.unread[node])
                value = self.values.get(node)
                assert value is not None, f"{node.name} used before it is lowered"
                if isinstance(value, Alias):
                    if not isinstance(value.node, Node):
                        return "const", Const(value.node, self.probe.dtype_of(value.node))
                    node = value.node
                    continue
                if isinstance(value, Const):
                    return "const", value
                return "name", self.local_name(node)
            if node not in self.external:
                self.external.append(node)
                self.first_reader[node] = self.lowering
            return "name", self.input_name(node)

    def local_name(self, node: Node) -> str:
        return "_" + re.sub(r"[^A-Za-z0-9_]", "_", node.name)

    def input_name(self, node: Node) -> str:
        name = self.names.get(node)
        return name if name is not None else self.local_name(node)

    def pairs_ref(self, node: Node) -> str:
        kind, value = self.resolve(node)
        if kind == "const":
            raise Unsupported("a constant as complex pairs")
        return value

    def ref(self, arg, dtype: str | None = None) -> str:
        if isinstance(arg, Node) and _is_size(arg.meta.get("val")):
            return self.probe.size_value(arg, dtype)  # from the graph's dims, never an input
        if isinstance(arg, Node):
            kind, value = self.resolve(arg)
            have = self.probe.dtype_of(arg)
            if kind == "const":
                if dtype is not None and dtype != value.dtype:
                    v = value.value
                    if dtype in ("f32", "f16", "bf16"):
                        return _table._lit(float(v))
                    return _table._lit(bool(v) if dtype == "bool" else int(v))
                return _table._lit(value.value)
            if dtype is not None and have != dtype:
                return f"cast({value}, to={dtype})"
            return value
        return self.probe.ref(arg, dtype)

    def let(self, text: str) -> str:
        """A name for `text`, which the node being lowered reads more than once: a statement of
        its own before the node's, so the node's text names it rather than repeating it (a
        repeat of a repeat grows as a power). A name is itself; a text another lowering here
        named already is that name (a topk's values and indices rank its rows once)."""
        if _NAME.match(text):
            return text
        if text in self.lets:
            return self.lets[text]
        # Every node's name (an input read later takes its node's) and the inputs' given names.
        taken = {self.local_name(n) for n in self.lowering.graph.nodes} | \
            set(self.names.values()) | {n for n, _, _ in self.statements}
        k = 0
        while (name := f"{self.local_name(self.lowering)}_let{k}") in taken:
            k += 1
        self.statements.append((name, text, self.lowering))
        self.lets[text] = name
        return name

    def renamed(self, node: Node, value):
        """`value`, or an Alias of the operand it only names: a lowering that comes to the
        identity (an upsample to the input's own size) writes that operand's kiln name, and kiln
        refuses a value that only renames another."""
        if not isinstance(value, Expr) or not _NAME.match(value.text):
            return value
        for arg in node.all_input_nodes:
            if arg in self.members or arg in self.external:  # read: resolve adds nothing
                if self.resolve(arg) == ("name", value.text):
                    return Alias(arg)
        return value

    def lower(self, order: list) -> None:
        for node in order:
            if node in self.probe.unread:
                continue
            self.lowering = node
            value = self.renamed(node, _table.lowering_for(node)(self, node))
            self.values[node] = value
            if isinstance(value, (Expr, Tuple0)):
                self.statements.append((self.local_name(node), value.text, node))


class PartitionError(Exception):
    def __init__(self, node: Node, message: str):
        super().__init__(message)
        self.node = node


def emit_graph(part: Partition, wanted: list, graph_name: str, serial: int, symbols, dims, check) -> KilnStep:
    """The kiln graph of `part` that computes `wanted` (its statements pruned to what they
    need); a statement kiln refuses raises PartitionError for its node."""
    outputs, aliases = [], {}
    seen_names = {}
    for node in wanted:
        if _table.is_complex(node):
            raise PartitionError(node, "a complex tensor read by PyTorch (kiln holds it as pairs "
                                 "of floats inside a graph)")
        if node not in part.values:
            # A node kiln skips (its kiln users read nothing of it: a size in a reshape's
            # shape) that PyTorch reads after all, where a group of views alone was left to it.
            raise PartitionError(node, part.probe.unread.get(node, "read by PyTorch where kiln "
                                                              "skips it"))
        value = part.values[node]
        if isinstance(value, Tuple0):
            continue  # its getitem(0) is the value used
        if isinstance(value, Pieces):
            raise PartitionError(node, "its pieces are used outside a kiln graph")
        kind, resolved = part.resolve(node)
        if kind == "const":
            raise PartitionError(node, "a constant as a graph output")
        # The FX node whose value this is: a statement here, or an input from outside.
        source = _source_node(part, node)
        if source not in part.members:
            aliases[node] = source
            continue
        if resolved in seen_names:
            aliases[node] = seen_names[resolved]
            continue
        seen_names[resolved] = node
        outputs.append((node, resolved))
    if not outputs:
        return KilnStep("", "", [], [], aliases)  # every value it gives is another's
    # Prune statements nothing needs.
    live = {name for _, name in outputs}
    kept = []
    for name, text, node in reversed(part.statements):
        if name in live:
            kept.append((name, text, node))
            live.update(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", text))
    kept.reverse()
    used_inputs = [n for n in part.external if part.input_name(n) in live]
    for n in used_inputs:
        if _table.is_complex(n):
            raise PartitionError(_reader(part, n), "a complex tensor from PyTorch (kiln holds "
                                 "one as pairs of floats made inside its graph)")
    carriers = _carriers(part)
    views = {}
    for n in used_inputs:
        if part.probe.has_merged(n):
            # The caller's tensor has the merged shape: viewed in kiln's from the sizes of the
            # program's inputs, or where none carries a factor, the nodes here that read it stay
            # in PyTorch.
            views[n] = _view_of(part, n, carriers)
            if views[n] is None:
                raise PartitionError(_reader(part, n),
                                     f"a tensor of shape {part.probe.fx_shape(n)} entering a kiln "
                                     "graph, a factor of which no input of the program carries")
    # A dim the statements use (arange(S), a shape) that no input here carries: the program
    # input that does comes in too, read for its size alone (transformers' cache_position).
    words = {w for _, text, _ in kept for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)}
    carried = {w for n in used_inputs for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*",
                                                          part.probe.shape(n))}
    for name in sorted((words & set(dims)) - carried):
        if name in carriers and carriers[name][0] not in used_inputs:
            if part.probe.has_merged(carriers[name][0]):
                continue  # kiln would need it viewed; the graph is refused as it stands
            used_inputs.append(carriers[name][0])
    lines = [f"graph g{serial} {{"]
    used_dims = set()
    body = []
    for n in used_inputs:
        shape = part.probe.shape(n)
        used_dims.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", shape))
        body.append((f"  input {part.input_name(n)}: {part.probe.dtype_of(n)}{shape}", n))
    for name, text, node in kept:
        body.append((f"  {name} = {text}", node))
    for node, name in outputs:
        body.append((f"  output {name}", node))
    for name, (lo, hi) in dims.items():
        if name in used_dims:
            lines.append(f"  dim {name}: {lo}..{hi}")
    header = len(lines)
    lines += [line for line, _ in body]
    lines.append("}")
    text = "\n".join(lines) + "\n"
    problem = check(text)
    if isinstance(problem, list):
        # Where kiln's shape inference and PyTorch's part (a lowering that broadcast or
        # contracted dims other than PyTorch's), the value would be wrong: it stays in PyTorch.
        for (node, _), inferred in zip(outputs, problem):
            want = re.findall(r"[A-Za-z0-9_]+", part.probe.shape(node))
            if inferred != want:
                raise PartitionError(_source_node(part, node),
                                     f"kiln infers the shape [{', '.join(inferred)}] where "
                                     f"PyTorch's is {part.probe.fx_shape(node)}")
        problem = None
    if problem is not None:
        line, message = problem
        at = line - 1 - header
        if not 0 <= at < len(body) or "narrow their ranges" in message:
            raise RuntimeError(f"kiln.torch: kiln refuses the graph:\n{text}\nline {line}: {message}")
        node = body[at][1]
        if node not in part.members:
            # An input kiln cannot declare (merged dims past kiln's 6 as factors): the node here
            # that reads it stays in PyTorch, the node that made it being there already.
            node = _reader(part, node)
        raise PartitionError(node, f"kiln refuses it: {message}")
    spans = {n: [len(part.probe.merged(d) or [d]) for d in part.probe.meta(n).shape]
             for n, _ in outputs if part.probe.has_merged(n)}
    return KilnStep(f"g{serial}", text, used_inputs, [n for n, _ in outputs], aliases, spans,
                    views)


def _carriers(part: Partition) -> dict:
    """kiln dim name -> (placeholder node, axis): the first input of the program whose size
    there is that dim."""
    carriers = {}
    for ph in part.names:
        val = ph.meta.get("val") if isinstance(ph, Node) else None
        if isinstance(val, torch.Tensor) and val.dtype in _DTYPES:
            for axis, d in enumerate(val.shape):
                if part.probe.is_symbolic(d) and d.node.expr.is_Symbol:
                    name = part.probe.symbols.get(str(d.node.expr))
                    carriers.setdefault(name, (ph, axis))
    return carriers


def _view_of(part: Partition, node: Node, carriers: dict) -> list | None:
    """How `node`'s tensor ([s0*s1, 64]) is viewed in kiln's shape ([s0, s1, 64]): per dim None
    or its factors, each an int or (placeholder node, axis) whose size is that dim's; None where
    no placeholder of the graph carries a factor as a dim of its own (`carriers`, as
    _carriers gives them)."""
    spec = []
    for d in part.probe.meta(node).shape:
        factors = part.probe.merged(d)
        if factors is None:
            spec.append(None)
            continue
        spec.append([int(f) if f.isdigit() else carriers.get(f) for f in factors])
        if None in spec[-1]:
            return None
    return spec


def _reader(part: Partition, node: Node) -> Node:
    """The node of `part` that reads `node` (an input of its graph): the one whose lowering
    read it first, else any member using it."""
    return part.first_reader.get(node) or next(u for u in node.users if u in part.members)


def _source_node(part: Partition, node: Node) -> Node:
    while node in part.members:
        value = part.values[node]
        if isinstance(value, Alias) and isinstance(value.node, Node):
            node = value.node
            continue
        return node
    return node
