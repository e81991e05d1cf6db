"""The FX graph as the lowering expects it: assertions dropped, decomposed linear layers
(`view -> mm/addmm -> view`) folded back into `linear`/`matmul`, so that no shape merges a batch
and a sequence dim (kiln cannot reshape across symbolic dims), empty tensors dropped from
concatenations, and a copy of a value into a tensor of its shape and dtype read as the value."""
from __future__ import annotations

import torch
from torch.fx import Graph, GraphModule, Node

from . import _table

aten = torch.ops.aten


def canonicalize(gm: GraphModule) -> None:
    """Drops assertion nodes and the empty operands of concatenations, reads a copy of a value
    of the destination's shape and dtype as the value, and folds decomposed linear layers back
    (in place)."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in _table.ASSERTIONS and not node.users:
            graph.erase_node(node)
        elif node.op == "call_function" and node.target in (aten.cat.default, aten.concat.default):
            _drop_empty_operands(node)
        elif node.op == "call_function" and node.target is aten.copy.default:
            _fold_copy(node)
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in (aten.view.default, aten._unsafe_view.default,
                                                          aten.reshape.default):
            _fold_flattened_matmul(graph, node)
    graph.eliminate_dead_code()
    gm.recompile()


def _empty(arg) -> bool:
    val = arg.meta.get("val") if isinstance(arg, Node) else None
    return isinstance(val, torch.Tensor) and any(isinstance(d, int) and d == 0 for d in val.shape)


def _drop_empty_operands(cat: Node) -> None:
    """cat([x, empty], dim) -> cat([x], dim): a tensor with no elements adds none (Phi-3's
    `q_pass`, the part past a full rotary dim). Left where it would reach the graph otherwise,
    the empty slice sits between two kiln ops and splits their graph. The cat's dtype, from its
    metadata, still counts the empty operands, as PyTorch's promotion does."""
    tensors = cat.args[0]
    if not isinstance(tensors, (list, tuple)):
        return
    kept = [t for t in tensors if not _empty(t)]
    if kept and len(kept) < len(tensors):
        cat.args = (kept,) + tuple(cat.args[1:])


def _size(d):
    return d.node.expr if isinstance(d, torch.SymInt) else int(d)


def _fold_copy(copy: Node) -> None:
    """copy(dst, src) -> src where src has dst's shape, dtype and device: the functional form of
    `dst.copy_(src)` is then src's value (BART's `shifted[:, 1:] = ids[:, :-1].clone()`). The
    slice of dst it wrote, of a size kiln cannot name (S - 1), is then read by nothing."""
    dst, src = copy.args[0], copy.args[1]
    if not (isinstance(dst, Node) and isinstance(src, Node)):
        return
    dv, sv = dst.meta.get("val"), src.meta.get("val")
    if not (isinstance(dv, torch.Tensor) and isinstance(sv, torch.Tensor)):
        return
    if dv.dtype != sv.dtype or dv.device != sv.device or dv.dim() != sv.dim() or \
            any(_size(a) != _size(b) for a, b in zip(dv.shape, sv.shape)):
        return
    copy.replace_all_uses_with(src)


def _fold_flattened_matmul(graph: Graph, view: Node) -> None:
    """view(mm(view(x, [prod, K]), w), [*lead, N]) -> linear(x, W) or matmul(x, w); with a bias
    (addmm) linear(x, W, bias), W = t(w) where w is not already a transpose, marked `kiln_addmm`:
    eager added the bias to the fp32 sums and rounded once, whatever x's strides."""
    mm = view.args[0]
    if not isinstance(mm, Node) or mm.op != "call_function" or len(mm.users) != 1:
        return
    if mm.target is aten.mm.default:
        bias, flat, w = None, mm.args[0], mm.args[1]
    elif mm.target is aten.addmm.default and not mm.kwargs and len(mm.args) == 3:
        bias, flat, w = mm.args
    else:
        return
    if not (isinstance(flat, Node) and flat.op == "call_function" and
            flat.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default)):
        return
    x = flat.args[0]
    xv, outv = x.meta.get("val"), view.meta.get("val")
    if xv is None or outv is None or xv.dim() < 3 or list(xv.shape[:-1]) != list(outv.shape[:-1]):
        return
    bv = bias.meta.get("val") if isinstance(bias, Node) else None
    if bias is not None and not (isinstance(bv, torch.Tensor) and _table._row_bias(bv.shape)):
        return  # a bias per flattened row ([B*S, N]) does not broadcast against [B, S, N]
    weight = None
    if isinstance(w, Node) and w.op == "call_function" and w.target is aten.t.default:
        weight = w.args[0]
    wv = w.meta.get("val") if isinstance(w, Node) else None
    with graph.inserting_before(view):
        if weight is None and bias is not None and isinstance(wv, torch.Tensor) and wv.dim() == 2:
            weight = graph.call_function(aten.t.default, (w,))
            weight.meta = {"val": wv.t()}
        if weight is not None:
            args = (x, weight) if bias is None else (x, weight, bias)
            new = graph.call_function(aten.linear.default, args)
            new.meta = dict(view.meta)
            if bias is not None:
                new.meta["kiln_addmm"] = True
        else:
            new = graph.call_function(aten.matmul.default, (x, w))
            new.meta = dict(view.meta)
            if bias is not None:
                summed = graph.call_function(aten.add.Tensor, (new, bias))
                summed.meta = dict(view.meta)
                new = summed
    view.replace_all_uses_with(new)


