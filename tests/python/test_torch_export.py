"""torch.export programs of transformers models through kiln.torch.compile_exported: numerics in
every mode against fp64, greedy decoding against torch, the exact set of ops left to PyTorch, one
program for every sequence length, and a saved program loaded in a new process."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import kiln
import kiln.torch
from conftest import TOLERANCE, cache_entries, greedy, rel_l2

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def batch(seq, seed=1, pad_left=None, pad_right=None):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 1024, (2, seq), generator=g)
    mask = torch.ones(2, seq, dtype=torch.int64)
    if pad_left:
        mask[1, :pad_left] = 0
    if pad_right:
        mask[1, seq - pad_right:] = 0
    return ids, mask


def fp64(model, ids, mask):
    with torch.no_grad():
        out = model.double()(input_ids=ids, attention_mask=mask)
    model.float()
    return out


def test_llama_runs_whole_in_kiln_in_every_mode(llama, llama_ep, cache_dir):
    ids, mask = batch(64, pad_left=5)
    ref = fp64(llama, ids, mask).logits
    keep = mask.bool()  # padded queries attend to nothing: their rows are undefined
    with torch.no_grad():
        hidden = llama(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for before, after in zip(hidden[:-1], hidden[1:]):  # the layers are far from identity
        assert float((after - before).norm() / before.norm()) > 0.5
    for mode, tolerance in TOLERANCE.items():
        program = kiln.torch.compile_exported(llama_ep, target="cpu", precision=mode,
                                              cache_dir=cache_dir)
        assert program.fallbacks == []
        assert len(program.partitions) == 1
        with torch.no_grad():
            out = program(input_ids=ids, attention_mask=mask)
        assert type(out).__name__ == "CausalLMOutputWithPast"
        error = rel_l2(out.logits, ref, keep)
        assert error <= tolerance, (mode, error)
    text = program.partitions[0]
    # The RMSNorm pattern, grouped-query attention on the unrepeated keys and values, the
    # embedding and the rotary tables from arange: each one kiln op.
    assert text.count("rms_norm(") == 5 and text.count("attention(") == 2
    assert "input model.layers.0.self_attn.k_proj.weight: f32[128, 256]" in text
    assert "arange(" in text and "embedding(" in text


def test_a_decomposed_llama_is_one_kiln_graph(llama, llama_ep, cache_dir):
    """After run_decompositions(): linear as view -> mm -> view, attention as bmm and softmax,
    the mask builder's any() and its arange(0, S) gather: still one kiln graph."""
    program = kiln.torch.compile_exported(llama_ep.run_decompositions(), target="cpu",
                                          precision="highest", cache_dir=cache_dir)
    assert program.fallbacks == [] and len(program.partitions) == 1, program.fallbacks
    ids, mask = batch(9, pad_left=3)
    keep = mask.bool()
    with torch.no_grad():
        want = llama(input_ids=ids, attention_mask=mask).logits
        got = program(input_ids=ids, attention_mask=mask).logits
    assert rel_l2(got, want, keep) <= TOLERANCE["highest"]


def test_bert_runs_whole_in_kiln_in_every_mode(bert, bert_ep, cache_dir):
    ids, mask = batch(33, seed=2, pad_right=7)
    ref = fp64(bert, ids, mask)
    keep = mask.bool()
    with torch.no_grad():
        hidden = bert(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for before, after in zip(hidden[1:-1], hidden[2:]):
        assert float((after - before).norm() / before.norm()) > 0.5
    for mode, tolerance in TOLERANCE.items():
        program = kiln.torch.compile_exported(bert_ep, target="cpu", precision=mode,
                                              cache_dir=cache_dir)
        # The position ids (a buffer of positions sliced to S) fold into arange(S), the token
        # types (a buffer of zeros gathered) into zeros, the pooler's first token is a slice
        # along the symbolic S: nothing runs in PyTorch. Fail if anything does.
        assert program.fallbacks == [] and len(program.partitions) == 1
        with torch.no_grad():
            out = program(input_ids=ids, attention_mask=mask)
        assert rel_l2(out.last_hidden_state, ref.last_hidden_state, keep) <= tolerance, mode
        assert rel_l2(out.pooler_output, ref.pooler_output) <= tolerance, mode


class _Cumulative(torch.nn.Module):
    """A model with one op kiln has no op for (cumprod) between two it has."""

    def forward(self, x):
        return torch.relu(torch.cumprod(x * 2.0, dim=-1)) + 1.0


@pytest.fixture(scope="module")
def cumulative_ep():
    from torch.export import Dim
    return torch.export.export(_Cumulative(), (torch.randn(3, 8),),
                               dynamic_shapes=({0: Dim("B", min=1, max=64)},), strict=False)


def test_an_op_kiln_lacks_runs_in_pytorch_between_kiln_graphs(cumulative_ep, cache_dir):
    program = kiln.torch.compile_exported(cumulative_ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.count) for f in program.fallbacks] == [("aten.cumprod.default", 1)]
    assert len(program.partitions) == 2
    x = torch.randn(5, 8)
    assert torch.allclose(program(x), _Cumulative()(x), rtol=1e-6, atol=1e-6)


def test_refuse_raises_with_the_whole_list(cumulative_ep, cache_dir):
    with pytest.raises(kiln.Error, match=r"aten\.cumprod\.default x1: no kiln op for it"):
        kiln.torch.compile_exported(cumulative_ep, target="cpu", precision="highest",
                                    cache_dir=cache_dir, fallbacks="refuse")


def test_warn_prints_the_list_once(cumulative_ep, cache_dir, capfd):
    program = kiln.torch.compile_exported(cumulative_ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir)
    with torch.no_grad():
        program(torch.randn(2, 8))
        program(torch.randn(4, 8))
    err = capfd.readouterr().err
    assert err.count("these ops run in PyTorch") == 1 and "aten.cumprod.default x1" in err


def test_sixteen_greedy_tokens_match_torch(llama, llama_ep, cache_dir):
    program = kiln.torch.compile_exported(llama_ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir)
    ids, _ = batch(8, seed=3)
    assert torch.equal(greedy(program, ids), greedy(llama, ids))


def test_one_program_serves_every_length_one_entry_per_bucket(llama, llama_ep, tmp_path):
    program = kiln.torch.compile_exported(llama_ep, target="cpu", precision="highest",
                                          cache_dir=tmp_path)
    graph_line = program.partitions[0].splitlines()
    assert graph_line[1].startswith("  dim B: 1..")  # the export's Dim name
    for seq in (1, 7, 64, 100, 6):  # 6 shares 7's bucket [5, 8]
        ids, mask = batch(seq, seed=seq)
        with torch.no_grad():
            out = program(input_ids=ids, attention_mask=mask).logits
            ref = llama(input_ids=ids, attention_mask=mask).logits
        assert out.shape == (2, seq, 1024)
        assert float((out - ref).abs().max()) < 1e-4, seq
    buckets = sorted(e["dims"] for e in cache_entries(tmp_path))
    assert buckets == ["dim0 in [2, 2], dim1 in [1, 1]", "dim0 in [2, 2], dim1 in [33, 64]",
                       "dim0 in [2, 2], dim1 in [5, 8]", "dim0 in [2, 2], dim1 in [65, 128]"]


SAVED_RUN = r"""
import sys, time, torch
start = time.perf_counter()
import kiln.torch
program = kiln.torch.load(sys.argv[1], cache_dir=sys.argv[2])
ids, mask = torch.load(sys.argv[3])
with torch.no_grad():
    logits = program(input_ids=ids, attention_mask=mask).logits
torch.save(logits, sys.argv[4])
print("torch.export" in sys.modules and "torch._dynamo" in sys.modules, file=sys.stderr)
"""


def test_a_saved_program_runs_in_a_new_process_from_the_cache(llama_ep, tmp_path):
    cache = tmp_path / "cache"
    program = kiln.torch.compile_exported(llama_ep, target="cpu", precision="high", cache_dir=cache)
    ids, mask = batch(21, seed=4, pad_left=3)
    with torch.no_grad():
        expected = program(input_ids=ids, attention_mask=mask).logits
    saved = tmp_path / "llama"
    program.save(saved)
    assert sorted(p.name for p in saved.iterdir()) == ["graphs", "kiln.json", "program.pt2",
                                                        "weights.pt"]
    assert (saved / "graphs" / "LlamaForCausalLM_0.kg").read_text() == program.partitions[0]
    torch.save((ids, mask), tmp_path / "inputs.pt")
    entries = cache_entries(cache)
    script = tmp_path / "run.py"
    script.write_text(SAVED_RUN)
    subprocess.run([sys.executable, str(script), str(saved), str(cache), str(tmp_path / "inputs.pt"),
                    str(tmp_path / "out.pt")], check=True)
    assert torch.equal(torch.load(tmp_path / "out.pt"), expected)
    after = cache_entries(cache)
    assert len(after) == len(entries)  # compiled nothing: the bucket was a hit
    assert sum(e["hits"] for e in after) == sum(e["hits"] for e in entries) + 1
    loaded = kiln.torch.load(saved, cache_dir=cache)
    assert loaded.precision == "high" and loaded.partitions == program.partitions


def test_a_missing_keyword_is_an_error(llama_ep, cache_dir):
    program = kiln.torch.compile_exported(llama_ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir)
    ids, _ = batch(4)
    with pytest.raises(kiln.Error, match="attention_mask"):
        program(input_ids=ids)


def test_load_refuses_a_folder_that_is_not_a_program(tmp_path):
    with pytest.raises(kiln.Error, match="not a saved kiln program"):
        kiln.torch.load(tmp_path)


def test_load_refuses_a_plan_that_names_other_code(llama_ep, tmp_path):
    import json
    program = kiln.torch.compile_exported(llama_ep, target="cpu", precision="highest",
                                          cache_dir=tmp_path / "cache")
    saved = tmp_path / "saved"
    program.save(saved)
    meta = json.loads((saved / "kiln.json").read_text())
    meta["steps"].insert(0, {"kind": "torch", "name": "x", "op": "builtins.eval",
                             "args": ["print('ran')"], "kwargs": {"dict": {}}})
    (saved / "kiln.json").write_text(json.dumps(meta))
    with pytest.raises(kiln.Error, match="'builtins.eval' is not an op a kiln program runs"):
        kiln.torch.load(saved, cache_dir=tmp_path / "cache")
    # operator's attrgetter, methodcaller and call reach any attribute (exec among them).
    for op in ("operator.attrgetter", "operator.methodcaller", "operator.call"):
        meta["steps"][0]["op"] = op
        (saved / "kiln.json").write_text(json.dumps(meta))
        with pytest.raises(kiln.Error, match=f"'{op}' is not an op a kiln program runs"):
            kiln.torch.load(saved, cache_dir=tmp_path / "cache")
    del meta["steps"][0]
    del meta["outputs"]
    (saved / "kiln.json").write_text(json.dumps(meta))
    with pytest.raises(kiln.Error, match="malformed"):
        kiln.torch.load(saved, cache_dir=tmp_path / "cache")
    (saved / "kiln.json").write_text("{")
    with pytest.raises(kiln.Error, match="not a saved kiln program"):
        kiln.torch.load(saved, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("mode", ["highest", "high", "tf32x3"])
def test_the_cuda_kernels_run_both_models_under_emulation(llama, llama_ep, bert, bert_ep, cache_dir,
                                                          mode):
    """The same programs on target emulate:sm_90: the CUDA kernels kiln generates for an H100,
    run by kiln's emulation of CUDA on host tensors, against fp64."""
    ids, mask = batch(12, seed=6, pad_left=3)
    keep = mask.bool()
    for model, ep, logits in ((llama, llama_ep, lambda o: o.logits),
                              (bert, bert_ep, lambda o: o.last_hidden_state)):
        ref = logits(fp64(model, ids, mask))
        program = kiln.torch.compile_exported(ep, target="emulate:sm_90", precision=mode,
                                              cache_dir=cache_dir)
        assert program.fallbacks == [] and program.executables[0].arch == "emulate:sm_90"
        with torch.no_grad():
            out = logits(program(input_ids=ids, attention_mask=mask))
        assert rel_l2(out, ref, keep) <= TOLERANCE[mode], (type(model).__name__, mode)
