"""torch.compile(model, backend="kiln"): the entry point, inference graphs through AOTAutograd into
kiln graphs, and a serving loop over sequence lengths without a recompile per length."""
from __future__ import annotations

import pytest
import torch

import kiln.torch
from conftest import TOLERANCE, greedy, rel_l2

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_the_backend_is_registered_by_its_entry_point():
    assert "kiln" in torch._dynamo.list_backends()


@pytest.mark.parametrize("mode", ["highest", "high"])
def test_llama_through_torch_compile(llama, cache_dir, mode):
    torch._dynamo.reset()
    compiled_before = len(kiln.torch.compiled)
    model = torch.compile(llama, backend="kiln", dynamic=True,
                          options={"precision": mode, "target": "cpu", "cache_dir": str(cache_dir)})
    with torch.no_grad():
        for seq in (1, 7, 64, 100):
            g = torch.Generator().manual_seed(seq)
            ids = torch.randint(0, 1024, (2, seq), generator=g)
            mask = torch.ones(2, seq, dtype=torch.int64)
            out = model(input_ids=ids, attention_mask=mask).logits
            ref = llama.double()(input_ids=ids, attention_mask=mask).logits
            llama.float()
            assert rel_l2(out, ref) <= TOLERANCE[mode], (seq, mode)
    new = kiln.torch.compiled[compiled_before:]
    # Dynamo traces twice: once with symbolic sizes, once with the sequence specialised to 1
    # (its 0/1 specialisation); 7, 64 and 100 share the first graph, whose buckets kiln compiles.
    assert len(new) == 2
    assert all(run.kiln_fallbacks == [] and len(run.kiln_partitions) == 1 for run in new)
    assert any("dim s" in run.kiln_partitions[0] for run in new)


def test_sixteen_greedy_tokens_match_torch(llama, cache_dir):
    torch._dynamo.reset()
    compiled_before = len(kiln.torch.compiled)
    model = torch.compile(llama, backend="kiln", dynamic=True,
                          options={"precision": "highest", "target": "cpu",
                                   "cache_dir": str(cache_dir)})
    ids = torch.randint(0, 1024, (2, 8), generator=torch.Generator().manual_seed(9))
    assert torch.equal(greedy(model, ids), greedy(llama, ids))
    assert len(kiln.torch.compiled) - compiled_before == 1  # lengths 8..23: one Dynamo graph


def test_bert_through_torch_compile(bert, cache_dir):
    torch._dynamo.reset()
    compiled_before = len(kiln.torch.compiled)
    model = torch.compile(bert, backend="kiln",
                          options={"precision": "highest", "target": "cpu",
                                   "cache_dir": str(cache_dir), "fallbacks": "allow"})
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 1024, (2, 24), generator=g)
    mask = torch.ones(2, 24, dtype=torch.int64)
    mask[0, 20:] = 0
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
        ref = bert.double()(input_ids=ids, attention_mask=mask)
        bert.float()
    keep = mask.bool()
    assert rel_l2(out.last_hidden_state, ref.last_hidden_state, keep) <= TOLERANCE["highest"]
    assert rel_l2(out.pooler_output, ref.pooler_output) <= TOLERANCE["highest"]
    (run,) = kiln.torch.compiled[compiled_before:]
    # Dynamo's first graph has static sizes (the pooler's select and the slice of the position
    # buffer are kiln slices then), and it passes the buffers as inputs, so they are not
    # constants here (they are for compile_exported): the gather from the token-type buffer is
    # a gather of positions in kiln.
    assert run.kiln_fallbacks == []


def test_unknown_options_are_refused():
    torch._dynamo.reset()
    model = torch.compile(torch.nn.Linear(4, 4), backend="kiln", options={"precison": "high"})
    with torch.no_grad(), pytest.raises(Exception, match="unknown options"):
        model(torch.ones(2, 4))


def _views_of_the_input(x):
    b = x.shape[0]
    return (x.view(b, 2, 2)[:, 1], x.view(b, 2, 2).transpose(0, 1), x.unflatten(1, (2, 2))[..., 0],
            x[:, :, None].expand(b, 4, 3), x.t(), x * 2)


def _a_view_after_an_update_in_place(x):
    x.add_(1)
    return x.view(x.shape[0], 2, 2)[:, :, 1:], x * 3


@pytest.mark.parametrize("f", [_views_of_the_input, _a_view_after_an_update_in_place])
def test_outputs_that_are_views_of_an_input_hold_its_elements(f, cache_dir):
    """AOTAutograd makes such an output again from the input it aliases, and with symbolic sizes
    from the layout of what the backend returned (`as_strided`): a contiguous kiln output read
    other elements of the input ([[0, 1], [2, 3], [4, 5]] for [[2, 3], [6, 7], [10, 11]])."""
    torch._dynamo.reset()
    model = torch.compile(f, backend="kiln", dynamic=True,
                          options={"target": "cpu", "cache_dir": str(cache_dir)})
    with torch.no_grad():
        for rows, start in ((3, 0), (5, 0), (6, 0), (5, 3), (3, 7)):
            # From `start` on in its storage: a view's offset is the input's and the view's own.
            mine, eager = (torch.arange(start + rows * 4.0)[start:].view(rows, 4) for _ in "ab")
            got, want = model(mine), f(eager)
            assert torch.equal(mine, eager)
            for g, w in zip(got, want):
                assert g.shape == w.shape and torch.equal(g, w), (rows, start, g, w)


def _sizes_the_data_decides(x):
    y = x[x > 2]
    return x.nonzero(), y[1:], y[::2], x * 2


@pytest.mark.parametrize("dynamic", [True, False])
def test_outputs_whose_sizes_the_data_decides_keep_compiling(dynamic, cache_dir):
    """Their layouts are PyTorch's own (they come from steps left in PyTorch); reading their
    traced layout guarded on a size only the data decides, and the graph failed to compile."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        model = torch.compile(_sizes_the_data_decides, backend="kiln", dynamic=dynamic,
                              options={"target": "cpu", "cache_dir": str(cache_dir),
                                       "fallbacks": "allow"})
        with torch.no_grad():
            x = torch.tensor([[0.0, 3.0, 1.0], [4.0, 0.0, 5.0]])
            for got, want in zip(model(x), _sizes_the_data_decides(x)):
                assert torch.equal(got, want), (got, want)
