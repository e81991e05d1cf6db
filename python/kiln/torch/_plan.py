"""An ATen FX graph (torch.export's or AOTAutograd's) into a plan of kiln graphs and PyTorch ops:

1. decide per node whether kiln can run it (_lower.unsupported_reason, from the op table);
2. group the supported nodes with torch.fx's capability-based partitioner (a group of views
   alone stays in PyTorch);
3. lower each group into `.kg` text; a statement kiln's parser refuses makes its node
   unsupported, and the grouping is redone;
4. order the groups and the PyTorch nodes (Kahn's order, ties by position), keeping only what
   the graph's outputs need.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from . import _table
from ._lower import KilnStep, PartitionError, TorchStep, emit_graph, Partition, Probe, unsupported_reason
from ._table import Unsupported

_GETITEM = operator.getitem


class _Support(OperatorSupportBase):
    def __init__(self, supported: set):
        super().__init__()
        self.supported = supported

    def is_node_supported(self, submodules, node: Node) -> bool:
        return node in self.supported


def _from_scalar_inputs(node: Node) -> bool:
    """A 0-dim value computed from scalar graph inputs alone (Dynamo passes Python floats as
    float64 tensors, converted to the model's dtype): scalar plumbing, not tensor work."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and val.dim() != 0:
        return False
    if node.op == "placeholder":
        return True
    return node.op == "call_function" and bool(node.all_input_nodes) and \
        all(_from_scalar_inputs(src) for src in node.all_input_nodes)


def op_name(node: Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t._schema.name.replace('::', '.')}.{t._overloadname}" if t._overloadname else t._schema.name.replace("::", ".")
    return getattr(t, "__name__", str(t))



def build_plan(gm: GraphModule, symbols: dict, dims: dict, input_names: dict, graph_name: str,
               check, constants: dict | None = None) -> tuple[list, dict, list]:
    """The plan (steps in order), the fallbacks ({op: (count, reason)}) and the graph's output
    nodes. `symbols` maps each symbol to its kiln dim name, `dims` each dim name to (lo, hi);
    `input_names` the placeholders to kiln input names; `check(text)` parses a graph's text and
    returns (line, message) or its outputs' shapes."""
    probe = Probe(symbols, constants, dims)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    refused: dict = {}
    for _ in range(len(nodes) + 1):
        supported, reasons, reads = set(), {}, {}
        for node in nodes:
            reads[node] = set()
            reason = refused.get(node) or unsupported_reason(probe, node, reads[node])
            if reason is None:
                supported.add(node)
            else:
                reasons[node] = reason
        probe.unread = _unread(nodes, supported, reasons, reads, refused)
        # Constants are literals in kiln and cheap in PyTorch: never a group of their own.
        groups = []
        if supported:
            partitioner = CapabilityBasedPartitioner(gm, _Support(supported | set(probe.unread)),
                                                     allows_single_node_partition=True)
            groups = [set(p.nodes) for p in partitioner.propose_partitions()]
            groups = [g for g in groups if any(n in supported and _table.does_work(probe, n)
                                               for n in g)]
        try:
            steps = _lower_groups(gm, probe, groups, input_names, graph_name, symbols, dims, check,
                                  output_node)
        except PartitionError as e:
            if e.node in refused:
                raise RuntimeError(f"kiln.torch: node '{e.node.name}' refused twice: {e}") from None
            refused[e.node] = str(e)
            continue
        fallbacks: dict = {}
        said_of: dict = {}
        for step in steps:
            if isinstance(step, TorchStep):
                node = step.node
                if node.target in _table.NOT_TENSOR_WORK or node.target is _GETITEM:
                    continue
                if isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, int, float)):
                    continue  # arithmetic on sizes (`s0 * s1`), not on tensors
                if node.target in _table.TABLE and node in supported:
                    continue  # a view or constant kept in PyTorch, where it is cheaper
                if _from_scalar_inputs(node):
                    continue  # a Python scalar Dynamo passes as a float64 tensor, converted
                reason = probe.named(reasons.get(node, "kept in PyTorch"))
                name = op_name(node)
                count, said = fallbacks.get(name, (0, ""))
                met = said_of.setdefault(name, [])
                if reason not in met:  # each distinct reason once, as first met
                    met.append(reason)
                fallbacks[name] = (count + 1, "; ".join(met))
        return steps, fallbacks, list(output_node.args[0]) if isinstance(output_node.args[0], (list, tuple)) else [output_node.args[0]]
    raise RuntimeError("kiln.torch: the graph could not be split into kiln graphs")


def _unread(nodes, supported: set, reasons: dict, reads: dict, refused: dict) -> dict:
    """The nodes kiln cannot run whose every user kiln runs without reading them (BART's window
    of S - 1 ids, which the slice_scatter it feeds places by rolling the ids), each with why
    kiln cannot run it; a node only such nodes use is one too, kiln's or not (GPT-OSS's
    max.dim of the logits and sinks, read through a getitem by a subtraction the sink softmax's
    slice skips). Left in PyTorch, such a node would sit between two parts of one kiln graph and
    split it."""
    unread: dict = {}
    grew = True
    while grew:
        grew = False
        # What kiln's lowerings read, their FX operands or not (the sink softmax's slice reads
        # the operands of the concatenation it looks through), skipped ones aside.
        read = set().union(*(reads[u] for u in supported if u not in unread))
        for node in reversed(nodes):
            if node in unread or node in refused or not node.users or node in read:
                continue
            if node in supported:
                if all(u in unread for u in node.users):
                    unread[node] = "read only by nodes kiln skips"
                    grew = True
                continue
            if all(u in unread or (u in supported and node not in reads[u])
                   for u in node.users):
                unread[node] = reasons[node]
                grew = True
    return unread


def _lower_groups(gm, probe, groups, input_names, graph_name, symbols, dims, check, output_node):
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    member_of = {}
    for gi, group in enumerate(groups):
        for n in group:
            member_of[n] = gi
    # Lower each group with all its nodes; which outputs it gives is decided below.
    parts = []
    for gi, group in enumerate(groups):
        part = Partition(probe, group, input_names)
        try:
            part.lower(sorted(group, key=order.__getitem__))
        except Unsupported as e:  # a lowering that depends on the grouping
            bad = next(n for n in sorted(group, key=order.__getitem__)
                       if n not in part.values and n not in probe.unread)
            raise PartitionError(bad, str(e)) from None
        parts.append(part)

    # Units: each group, each other call_function node. Edges from FX uses and kiln references.
    units = list(range(len(groups)))
    torch_nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n not in member_of]
    unit_of = dict(member_of)
    for n in torch_nodes:
        unit_of[n] = len(units)
        units.append(n)
    deps = {u: set() for u in range(len(units))}
    for n, u in unit_of.items():
        for src in n.all_input_nodes:
            if src in unit_of and unit_of[src] != u:
                deps[u].add(unit_of[src])
    for gi, part in enumerate(parts):
        for src in part.external:
            if src in unit_of and unit_of[src] != gi:
                deps[gi].add(unit_of[src])
    # Kahn's order, ties broken by the earliest node, so the plan is deterministic.
    first = {u: min(order[n] for n in groups[u]) if u < len(groups) else order[units[u]]
             for u in range(len(units))}
    users = {u: set() for u in deps}
    for u, ds in deps.items():
        for d in ds:
            users[d].add(u)
    indegree = {u: len(ds) for u, ds in deps.items()}
    ready = sorted((u for u in deps if indegree[u] == 0), key=first.__getitem__)
    schedule = []
    while ready:
        u = ready.pop(0)
        schedule.append(u)
        for v in users[u]:
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
        ready.sort(key=first.__getitem__)
    if len(schedule) != len(units):
        raise RuntimeError("kiln.torch: the groups of the graph depend on each other in a cycle")

    # What is needed, from the graph's outputs backwards.
    outs = output_node.args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    needed = set()
    for o in outs:
        torch.fx.node.map_arg(o, lambda n: needed.add(n))
    steps_rev = []
    for u in reversed(schedule):
        if u >= len(groups):
            node = units[u]
            if node in needed:
                steps_rev.append(TorchStep(node))
                for src in node.all_input_nodes:
                    needed.add(src)
            continue
        part = parts[u]
        wanted = [n for n in sorted(groups[u], key=order.__getitem__) if n in needed]
        if not wanted:
            continue
        step = emit_graph(part, wanted, graph_name, len(steps_rev), symbols, dims, check)
        steps_rev.append(step)
        for src in step.inputs:
            needed.add(src)
        for src in step.aliases.values():
            needed.add(src)
    steps = list(reversed(steps_rev))
    # Name the kiln graphs in plan order.
    index = 0
    for step in steps:
        if isinstance(step, KilnStep) and step.text:
            old = step.name
            step.name = f"{graph_name}_{index}"
            step.text = step.text.replace(f"graph {old} {{", f"graph {step.name} {{", 1)
            index += 1
    return steps


