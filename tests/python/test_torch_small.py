"""Small modules through kiln.torch, each built to trip one thing the lowering must get right:
in-place ops and mutated buffers and inputs, repeats that only look like grouped-query attention,
tensor constants under torch.compile."""
from __future__ import annotations

import copy
import json
import pathlib
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln.torch
from conftest import one_kiln_graph

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def compiled(module, args, cache_dir):
    ep = torch.export.export(module, args, strict=False)
    return ep, kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                           cache_dir=cache_dir, fallbacks="allow")


class Masked(torch.nn.Module):
    def forward(self, x, mask):
        return x.masked_fill(mask, 0.0)


def test_a_program_is_named_after_its_model_not_its_last_input(cache_dir):
    x, mask = torch.randn(2, 3), torch.rand(2, 3) > 0.5
    _, program = compiled(Masked(), (x, mask), cache_dir)
    assert program.name == "Masked" and repr(program).startswith("<kiln.torch.Program Masked:")
    with pytest.raises(kiln.Error, match="^Masked takes"):
        program(x, msk=mask)


class InPlace(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        y.add_(1)
        y.mul_(2)
        y[:, 0] = 5.0
        z = torch.relu(x) * 3
        w = z.clone()
        w.floor_divide_(3)  # in PyTorch (kiln floor-divides by powers of two): must not touch z
        return y, z, w


def test_in_place_ops_are_functionalised_not_dropped_or_aliased(cache_dir):
    x = torch.randn(3, 4)
    _, program = compiled(InPlace(), (x,), cache_dir)
    for got, want in zip(program(x), InPlace()(x)):
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.zeros(4))

    def forward(self, x):
        self.n.add_(x.sum(0))
        x.mul_(2)
        return x + self.n


def test_mutated_buffers_and_inputs_are_written_back(cache_dir):
    ep, program = compiled(Counter(), (torch.ones(3, 4),), cache_dir)
    eager = Counter()
    for _ in range(3):
        ours, theirs = torch.ones(3, 4), torch.ones(3, 4)
        assert torch.equal(program(ours), eager(theirs))
        assert torch.equal(ours, theirs)  # the input doubled in place, as in eager
    assert torch.equal(ep.state_dict["n"], torch.zeros(4))  # the export's own buffer untouched
    # A NumPy array ran kiln's graphs, then failed at the update in place (AttributeError: copy_).
    with pytest.raises(kiln.RuntimeError, match="input 'x' is a numpy.ndarray: the program takes "
                                                "a torch.Tensor"):
        program(np.ones((3, 4), np.float32))


def test_an_edited_plan_that_reads_what_nothing_makes_fails_at_load(cache_dir, tmp_path):
    """aliases, write_back, outputs, in_spec and out_spec edited in kiln.json failed in the
    middle of a call with a KeyError or pytree's ValueError; they are checked at load."""
    _, program = compiled(Counter(), (torch.ones(3, 4),), cache_dir)
    saved = tmp_path / "saved"
    program.save(saved)
    good = json.loads((saved / "kiln.json").read_text())
    assert good["write_back"] and any(s["kind"] == "kiln" for s in good["steps"])

    def edited(edit):
        meta = json.loads(json.dumps(good))
        edit(meta)
        return meta

    kiln_step = lambda m: next(s for s in m["steps"] if s["kind"] == "kiln")
    cases = [
        (lambda m: kiln_step(m)["aliases"].update({"z": "nowhere"}), "reads 'nowhere'"),
        (lambda m: kiln_step(m).update(aliases=[1]), "'aliases' is not a map"),
        (lambda m: kiln_step(m)["inputs"].__setitem__(0, "nowhere"), "reads 'nowhere'"),
        (lambda m: m["write_back"][0].__setitem__(2, "nowhere"), "reads 'nowhere'"),
        (lambda m: m["write_back"][0].__setitem__(0, "param"), "is not \\[\"buffer\""),
        (lambda m: m["write_back"].append(["buffer", "x", m["write_back"][0][2]]),
         "'x' is not a buffer"),
        (lambda m: m.update(write_back={}), "'write_back' is not a list"),
        (lambda m: m.update(outputs=m["outputs"] * 2), "'out_spec' holds 1 values, the program "
                                                       "has 2"),
        (lambda m: m.update(in_spec="{"), "'in_spec' is not a saved input structure"),
    ]
    for edit, message in cases:
        (saved / "kiln.json").write_text(json.dumps(edited(edit)))
        with pytest.raises(kiln.Error, match=message):
            kiln.torch.load(saved, cache_dir=cache_dir)
    (saved / "kiln.json").write_text(json.dumps(good))
    loaded, eager = kiln.torch.load(saved, cache_dir=cache_dir), Counter()
    ours, theirs = torch.ones(3, 4), torch.ones(3, 4)
    assert torch.equal(loaded(ours), eager(theirs)) and torch.equal(ours, theirs)


class RepeatAlongSequence(torch.nn.Module):
    """unsqueeze -> expand -> reshape that repeats keys along the sequence, not the heads."""

    def forward(self, q, k, v):
        b, h, s, d = k.shape
        k2 = k.unsqueeze(2).expand(b, h, 2, s, d).reshape(b, h, 2 * s, d)
        v2 = v.unsqueeze(2).expand(b, h, 2, s, d).reshape(b, h, 2 * s, d)
        return F.scaled_dot_product_attention(q, k2, v2, is_causal=True)


class RepeatHeads(torch.nn.Module):
    """transformers' repeat_kv: read by kiln's grouped-query attention without the copy."""

    def forward(self, q, k, v):
        b, h, s, d = k.shape
        k2 = k.unsqueeze(2).expand(b, h, 2, s, d).reshape(b, h * 2, s, d)
        v2 = v.unsqueeze(2).expand(b, h, 2, s, d).reshape(b, h * 2, s, d)
        return F.scaled_dot_product_attention(q, k2, v2)


def test_only_a_repeat_of_heads_is_read_as_grouped_query_attention(cache_dir):
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(s, generator=g) for s in ((1, 2, 6, 8), (1, 2, 3, 8), (1, 2, 3, 8)))
    _, program = compiled(RepeatAlongSequence(), (q, k, v), cache_dir)
    assert torch.allclose(program(q, k, v), RepeatAlongSequence()(q, k, v), atol=1e-6)
    q = torch.randn(2, 4, 5, 8, generator=g)
    k, v = torch.randn(2, 2, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    _, program = compiled(RepeatHeads(), (q, k, v), cache_dir)
    assert torch.allclose(program(q, k, v), RepeatHeads()(q, k, v), atol=1e-6)
    text = program.partitions[0]
    assert "input k: f32[2, 2, 5, 8]" in text and "expand(" not in text


class WithConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.tensor([1.0, 2.0, 3.0, 4.0])

    def forward(self, x):
        return x * self.c + torch.tensor(3.0)


def test_torch_compile_binds_the_graphs_tensor_constants(cache_dir):
    torch._dynamo.reset()
    model = torch.compile(WithConstant(), backend="kiln",
                          options={"precision": "highest", "target": "cpu",
                                   "cache_dir": str(cache_dir)})
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert torch.allclose(model(x), x * torch.tensor([1.0, 2.0, 3.0, 4.0]) + 3.0)


class TwoInputs(torch.nn.Module):
    def forward(self, x, mask):
        return torch.where(mask, x, 0.0)


def test_a_positional_program_takes_keywords_as_the_exported_module_does(cache_dir):
    x, mask = torch.randn(2, 3), torch.rand(2, 3) > 0.5
    ep, program = compiled(TwoInputs(), (x, mask), cache_dir)
    want = ep.module()(x, mask)
    assert torch.equal(program(x=x, mask=mask), want)
    assert torch.equal(program(x, mask=mask), want)
    with pytest.raises(kiln.Error, match="takes"):
        program(x, masks=mask)


class Alpha(torch.nn.Module):
    def forward(self, x, y):
        return torch.add(x, y, alpha=3) - torch.sub(x, 2.0, alpha=0.5)


def test_alpha_scales_the_second_operand(cache_dir):
    x, y = torch.randn(2, 5), torch.randn(2, 5)
    _, program = compiled(Alpha(), (x, y), cache_dir)
    assert torch.allclose(program(x, y), Alpha()(x, y), atol=1e-6)


class Positions(torch.nn.Module):
    """A positions buffer the model advances: not the constant it held at export."""
    def __init__(self):
        super().__init__()
        self.register_buffer("pos", torch.arange(8))

    def forward(self, x):
        y = x + self.pos[: x.shape[0]]
        self.pos.add_(1)
        return y


def test_a_buffer_the_model_writes_is_read_as_it_is_now_not_as_exported(cache_dir):
    x = torch.zeros(4, dtype=torch.int64)
    _, program = compiled(Positions(), (x,), cache_dir)
    eager = Positions()
    for _ in range(3):
        assert torch.equal(program(x), eager(x))


class RmsAlpha(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(8))

    def forward(self, x):
        return self.w * (x * torch.rsqrt(torch.add(x.pow(2).mean(-1, keepdim=True), 0.1, alpha=3)))


def test_an_rms_norm_whose_eps_is_scaled_is_not_read_as_that_eps(cache_dir):
    x = torch.randn(2, 8) * 0.1
    _, program = compiled(RmsAlpha(), (x,), cache_dir)
    assert torch.allclose(program(x), RmsAlpha()(x), rtol=1e-5, atol=1e-6)


class Shapes(torch.nn.Module):
    def forward(self, v, cond):
        return (v.t() * 2, torch.where(cond > 0, 1, 0), torch.where(cond > 0, 2**40, -7),
                torch.where(cond > 0, True, 5))


def test_vector_transposes_and_wheres_of_integer_literals_keep_torchs_values_and_dtypes(cache_dir):
    v, cond = torch.randn(5), torch.randn(3, 4)
    _, program = compiled(Shapes(), (v, cond), cache_dir)
    for got, want in zip(program(v, cond), Shapes()(v, cond)):
        assert got.dtype == want.dtype
        assert torch.equal(got, want)


class Empty(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + 1, y + 1


def test_a_tensor_kiln_cannot_hold_runs_in_pytorch(cache_dir):
    x, y = torch.randn(0, 4), torch.randn(3, 4)
    _, program = compiled(Empty(), (x, y), cache_dir)
    assert any("size 0" in f.reason for f in program.fallbacks), program.fallbacks
    for got, want in zip(program(x, y), Empty()(x, y)):
        assert torch.equal(got, want)


class Branches(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, (x,))


def test_control_flow_is_refused_when_compiled(cache_dir):
    ep = torch.export.export(Branches(), (torch.randn(3),), strict=False)
    with pytest.raises(kiln.Error, match="control flow .* is not supported"):
        kiln.torch.compile_exported(ep, target="cpu", cache_dir=cache_dir)


def test_max_dim_is_a_whole_number_from_1(cache_dir):
    ep = torch.export.export(Alpha(), (torch.randn(2, 5), torch.randn(2, 5)), strict=False)
    for bad in (0, -5, 2**31, 2.5, "abc", True):
        with pytest.raises(ValueError, match="max_dim"):
            kiln.torch.compile_exported(ep, target="cpu", cache_dir=cache_dir, max_dim=bad)


def test_check_indices_makes_an_id_outside_the_table_an_error_as_in_eager(cache_dir):
    module = torch.nn.Embedding(10, 4)
    ids = torch.tensor([1, 3])
    ep = torch.export.export(module, (ids,), strict=False)
    quiet = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                        cache_dir=cache_dir)
    checked = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, check_indices=True)
    assert torch.equal(checked(ids), module(ids).detach())
    outside = torch.tensor([1, 10])
    assert torch.equal(quiet(outside)[1], torch.zeros(4))
    with pytest.raises(kiln.RuntimeError, match="10"):
        checked(outside)


class NanOps(torch.nn.Module):
    def forward(self, x):
        zeros = torch.zeros_like(x)
        return (torch.relu(x), x.clamp(0, 1), torch.maximum(x, zeros), torch.minimum(x, zeros),
                x.reshape(2, 2).amax(-1))


def test_a_nan_reaches_the_outputs_as_in_eager(cache_dir):
    x = torch.tensor([float("nan"), -1.0, 2.0, 3.0])
    _, program = compiled(NanOps(), (x,), cache_dir)
    for got, want in zip(program(x), NanOps()(x)):
        assert torch.equal(got.isnan(), want.isnan()), (got, want)
        assert torch.equal(got.nan_to_num(), want.nan_to_num())


class Relu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def test_relu_keeps_a_negative_zero_as_eager_does(cache_dir):
    x = torch.tensor([-0.0, 0.0, -1.0, 2.0, float("nan")])
    _, program = compiled(Relu(), (x,), cache_dir)
    got, want = program(x), Relu()(x)
    assert torch.equal(got.signbit(), want.signbit()), (got, want)
    assert torch.equal(got.nan_to_num(), want.nan_to_num())


def test_a_wrong_argument_count_is_named_not_dumped(cache_dir):
    x, y = torch.randn(2, 5), torch.randn(2, 5)
    _, program = compiled(Alpha(), (x, y), cache_dir)
    for args in ((), (x,), (x, y, y)):
        with pytest.raises(kiln.Error, match=f"takes 2 positional arguments; got {len(args)}$"):
            program(*args)


class PositionBias(torch.nn.Module):
    """A bias made from positions alone (as T5's relative position bias is): the kiln graph before
    the floor division (by 3: in PyTorch) takes no tensors."""
    def forward(self, x):
        bias = torch.arange(6, dtype=torch.float32).reshape(2, 3) * 3 + 1
        return x + bias.floor_divide(3), bias


def test_a_kiln_graph_that_takes_no_tensors_returns_torch_tensors(cache_dir):
    x = torch.randn(2, 3)
    _, program = compiled(PositionBias(), (x,), cache_dir)
    assert any("floor_divide" in f.op for f in program.fallbacks), program.fallbacks
    assert any("  input " not in text for text in program.partitions), program.partitions
    for got, want in zip(program(x), PositionBias()(x)):
        assert isinstance(got, torch.Tensor)
        assert torch.equal(got, want)


class TrueDivide(torch.nn.Module):
    def forward(self, x, n):
        return torch.true_divide(x, n), torch.true_divide(n, 4)


def test_true_divide_is_kilns_div_and_makes_integers_float(cache_dir):
    x, n = torch.randn(3, 4), torch.tensor([1, 2, 3, 4])
    ep, program = compiled(TrueDivide(), (x, n), cache_dir)
    assert not program.fallbacks, program.fallbacks
    for got, want in zip(program(x, n), TrueDivide()(x, n)):
        assert got.dtype == want.dtype
        assert torch.allclose(got, want, rtol=1e-6, atol=0)


class Splits(torch.nn.Module):
    """GPT-2's c_attn(x).split(n, dim=2), a gated MLP's chunk(2, dim=-1), a packed qkv's
    unbind(0), and uneven pieces."""
    def forward(self, x, qkv):
        q, k, v = (x * 2).split(4, dim=2)
        a, gate = torch.relu(x).chunk(2, dim=-1)
        first, rest = x.split_with_sizes([3, 9], dim=-1)
        odd = (x + 1).chunk(5, dim=-1)
        p, r, s = (qkv * 3).unbind(0)
        return q + k * v, a * gate, first.sum(-1), rest * 2, odd[-1] * 3, p - r * s


def test_split_chunk_and_unbind_are_slices_inside_one_kiln_graph(cache_dir):
    x, qkv = torch.randn(2, 3, 12), torch.randn(3, 2, 5)
    _, program = compiled(Splits(), (x, qkv), cache_dir)
    assert not program.fallbacks, program.fallbacks
    assert len(program.partitions) == 1, program.partitions
    assert "slice(" in program.partitions[0]
    for got, want in zip(program(x, qkv), Splits()(x, qkv)):
        assert got.shape == want.shape
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


class PieceInPyTorch(torch.nn.Module):
    def forward(self, x):
        a, b = (x * 2).split(2, dim=-1)
        return a.floor_divide(3) + b, torch.exp(b)


def test_a_piece_pytorch_reads_comes_from_the_split_as_in_eager(cache_dir):
    x = torch.randn(3, 4) * 10
    _, program = compiled(PieceInPyTorch(), (x,), cache_dir)
    assert [f.op for f in program.fallbacks] == ["aten.floor_divide.default"], program.fallbacks
    for got, want in zip(program(x), PieceInPyTorch()(x)):
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


class MaxMinOther(torch.nn.Module):
    """torch.max(a, b) and torch.min(a, b) (aten's .other: T5's bucket clamp) on floats and ints."""
    def forward(self, x, y, n):
        return torch.max(x, y), torch.min(x, y), torch.min(n, torch.full_like(n, 3))


def test_max_and_min_of_two_tensors_are_maximum_and_minimum_nan_included(cache_dir):
    x, y = torch.tensor([1.0, float("nan"), -2.0, 5.0]), torch.tensor([0.0, 1.0, float("nan"), 6.0])
    n = torch.tensor([1, 5, 3, -7])
    _, program = compiled(MaxMinOther(), (x, y, n), cache_dir)
    assert not any(f.op.startswith(("aten.max", "aten.min")) for f in program.fallbacks), \
        program.fallbacks
    for got, want in zip(program(x, y, n), MaxMinOther()(x, y, n)):
        assert got.dtype == want.dtype
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num())


class Alibi(torch.nn.Module):
    """BLOOM's pieces: powers from arange with a start and a step, baddbmm with beta and alpha,
    repeat; addmm with alpha and beta, and beta 0 (the input is not read, NaN included)."""
    def forward(self, bias, q, k, m, a, b):
        powers = torch.arange(1, 9, 2, dtype=torch.int32)
        down = torch.arange(5, 0, -2, dtype=torch.float32)
        slopes = torch.pow(0.5, powers)
        scores = bias.baddbmm(q, k, beta=0.5, alpha=0.25)
        ignored = torch.baddbmm(torch.full_like(bias, float("nan")), q, k, beta=0, alpha=2.0)
        return (slopes, down + 1, scores, ignored, bias.repeat(2, 1, 3), powers.repeat(2),
                torch.addmm(m, a, b, beta=2, alpha=-1))


def test_arange_with_a_start_and_step_baddbmm_addmm_and_repeat_run_in_kiln(cache_dir):
    args = (torch.randn(2, 3, 4), torch.randn(2, 3, 5), torch.randn(2, 5, 4), torch.randn(3, 2),
            torch.randn(3, 4), torch.randn(4, 2))
    _, program = compiled(Alibi(), args, cache_dir)
    assert not program.fallbacks, program.fallbacks
    for got, want in zip(program(*args), Alibi()(*args)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (got, want)


class HalfBiased(torch.nn.Module):
    """Products with a bias in f16 or bf16: addmm (with alpha and beta, and beta 0), baddbmm,
    linear of a 2-D, a contiguous 3-D and a non-contiguous 3-D input, of a 3-D input with a
    bias [16, N] (eager rounds twice) and [1, N] (once), GPT-2's Conv1D (addmm over flattened
    rows, its weight [K, N]), a flattened linear (addmm with w.t()), and an addmm over flattened
    rows with a bias per row (not a linear: it does not broadcast against [4, 16, N])."""
    def forward(self, a, b, bias, x3, w, wkn, bb1, bb2, binp, b16, brows):
        n = w.shape[0]
        return (torch.addmm(bias, a, b), torch.addmm(bias, a, b, beta=0.75, alpha=0.5),
                torch.addmm(bias, a, b, beta=0, alpha=2.0),
                torch.baddbmm(binp, bb1, bb2), torch.baddbmm(binp, bb1, bb2, beta=0.5, alpha=2.0),
                F.linear(a, w[:, :96], bias), F.linear(x3, w, bias),
                F.linear(x3.transpose(0, 1), w, bias),
                torch.addmm(bias, x3.reshape(-1, x3.shape[-1]), wkn).view(*x3.shape[:-1], n),
                torch.addmm(bias, x3.reshape(-1, x3.shape[-1]), w.t()).view(*x3.shape[:-1], n),
                F.linear(x3, w, b16), F.linear(x3, w, bias.view(1, -1)),
                torch.addmm(brows, x3.reshape(-1, x3.shape[-1]), wkn).view(*x3.shape[:-1], n))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_product_and_its_bias_round_once_where_eager_rounds_once(cache_dir, dtype):
    """Eager adds the bias to the fp32 sums and rounds once (but for linear's non-contiguous 3-D
    input, or its bias of more than one row: product, round, add, round); kiln's matmul with
    out_dtype=f32 does the same. Rounded
    twice, a quarter of the elements would be an ulp apart; summed in another order, a rare one
    is."""
    g = torch.Generator().manual_seed(7)
    r = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    args = (r(64, 96), r(96, 80), r(80), r(4, 16, 128), r(80, 128), r(128, 80), r(3, 32, 96),
            r(3, 96, 80), r(3, 32, 80), r(16, 80), r(64, 80))
    _, program = compiled(HalfBiased(), args, cache_dir)
    assert not program.fallbacks, program.fallbacks
    text = "\n".join(program.partitions)
    # all but the linears of a non-contiguous input and of a bias [16, N]
    assert text.count("out_dtype=f32") == 11, text
    for i, (got, want) in enumerate(zip(program(*args), HalfBiased()(*args))):
        assert got.dtype == want.dtype and got.shape == want.shape, i
        apart = (got != want).float().mean().item()
        assert apart <= 0.01, (i, apart)
        assert torch.allclose(got.float(), want.float(), rtol=2**-6, atol=2**-6), i


class OutDtype(torch.nn.Module):
    """mm, bmm and addmm with out_dtype=torch.float32 (aten's .dtype forms, which eager runs on
    CUDA only; baddbmm's fails to export on the CPU, in PyTorch's own decomposition)."""
    def forward(self, a, b, bias, b1, b2):
        return (torch.mm(a, b, out_dtype=torch.float32),
                torch.bmm(b1, b2, out_dtype=torch.float32),
                torch.addmm(bias, a, b, out_dtype=torch.float32),
                torch.addmm(bias, a, b, out_dtype=torch.float32, beta=0.5, alpha=2.0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_out_dtype_float32_gives_the_fp32_sums_of_half_operands(cache_dir, dtype):
    """The products of f16 and bf16 values are exact in f32, so the result is the fp32 sum of
    the operands' products, not rounded to their dtype: within fp32's summation error of the
    same sums in f32 (most of them are not values of the half type)."""
    g = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    args = (r(24, 200), r(200, 40), r(40), r(3, 24, 200), r(3, 200, 40))
    _, program = compiled(OutDtype(), args, cache_dir)
    assert not program.fallbacks, program.fallbacks
    assert "\n".join(program.partitions).count("out_dtype=f32") == 4
    a, b, bias, b1, b2 = (x.float() for x in args)
    wants = (a @ b, b1 @ b2, bias + a @ b, 0.5 * bias + 2.0 * (a @ b))
    for i, (got, want) in enumerate(zip(program(*args), wants)):
        assert got.dtype == torch.float32 and got.shape == want.shape, i
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (i, (got - want).abs().max())
        assert (got.to(dtype).float() != got).float().mean() > 0.9, i


class Filled(torch.nn.Module):
    """Tensors of one value with a shape: ones(B, S) (OPT's mask), full_like (T5's bucket bound),
    -0.0 and inf, bool and integer fills, a bf16 fill f32 holds and one it does not (held
    rounded to bf16, as torch writes it)."""
    def forward(self, x, n):
        b, s = x.shape
        return (torch.ones(b, s) + x, torch.full_like(n, 7) + n, torch.full((2, 3), -0.0),
                torch.full((3,), float("-inf")) + x[0, :3], torch.zeros_like(n, dtype=torch.bool),
                torch.ones(2, 2, dtype=torch.bool), x.new_full((4,), 2.5, dtype=torch.bfloat16) * 2,
                torch.full((4,), 0.1, dtype=torch.bfloat16) * 2, torch.zeros(4) * x[0])


def test_a_filled_tensor_of_a_shape_is_kilns_and_keeps_the_value_torch_writes(cache_dir):
    x, n = torch.randn(4, 4), torch.tensor([1, -5, 2**40, 3])
    _, program = compiled(Filled(), (x, n), cache_dir)
    assert not program.fallbacks, program.fallbacks
    for got, want in zip(program(x, n), Filled()(x, n)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want), (got, want)
        assert torch.equal(got.signbit(), want.signbit())


class Flattened(torch.nn.Module):
    """A dynamic batch and sequence flattened into one dim (OPT's MLP, GPT-2's Conv1D) and batch
    times heads (BLOOM's bmm), with work kiln may run on the factors (a permute moving the
    merged dim, its factors together, and a reshape of that) and work it may not: a sum over
    the merged dim, a matmul contracting it, and an add that broadcasts [B, 1, 8] against
    [B, B*S, 8] (aligned from the last dim, kiln's [B, B, S, 8] would meet the batch with the
    merged dim's first factor), whose result enters kiln again as a view."""
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        b, s, h = x.shape
        flat = x.reshape(-1, h)                                       # [B*S, 8]
        y = self.norm(torch.relu(self.fc(flat)) + flat).softmax(-1)
        rows = y.sum(-1, keepdim=True) * y
        heads = (x * 2).view(b, s, 2, 4).transpose(1, 2).reshape(b * 2, s, 4)  # [B*2, S, 4]
        scores = torch.bmm(heads, heads.transpose(1, 2)).softmax(-1)
        mixed = torch.bmm(scores, heads).transpose(1, 2)              # [B*2, 4, S]
        # Both orders: kiln writes B*S's factors in one order, so one of these aligns.
        shifted = flat.expand(b, -1, -1) + x[:, :1, :] * 3
        shifted_s = flat.expand(s, -1, -1) + x.transpose(0, 1)[:, :1, :] * 3
        return (rows.view(b, s, h), mixed.reshape(b, 2, 4, s), flat.sum(0),
                flat.t() @ flat, flat.t().reshape(h, b, s), shifted.relu(), shifted_s)


def test_a_flattened_dynamic_dim_runs_in_kiln_only_where_its_factors_read_alike(cache_dir,
                                                                                  tmp_path):
    x = torch.randn(2, 5, 8)
    dims = {"x": {0: torch.export.Dim("B", max=16), 1: torch.export.Dim("S", max=64)}}
    ep = torch.export.export(Flattened(), (x,), dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    text = "\n".join(program.partitions)
    assert "layer_norm(" in text and "softmax(" in text and text.count("matmul(") >= 3, text
    moved = {f.op for f in program.fallbacks}
    # The sum over the merged dim, the matmul contracting it and the misaligned adds.
    assert moved == {"aten.sum.dim_IntList", "aten.matmul.default", "aten.add.Tensor"}, \
        program.fallbacks
    module = Flattened()
    module.load_state_dict(ep.module().state_dict())
    program.save(tmp_path / "flat")
    loaded = kiln.torch.load(tmp_path / "flat", cache_dir=cache_dir)
    for shape in [(2, 5, 8), (3, 7, 8), (1, 1, 8), (16, 3, 8)]:
        x = torch.randn(shape)
        want = module(x)
        for run in (program, loaded):
            for got, w in zip(run(x), want):
                assert got.shape == w.shape
                assert torch.allclose(got, w, rtol=1e-5, atol=1e-5), (shape, got, w)


def saved_flattened(cache_dir, path):
    """Flattened exported with a dynamic batch and sequence, saved to `path`: its kiln.json."""
    x = torch.randn(2, 5, 8)
    dims = {"x": {0: torch.export.Dim("B", max=16), 1: torch.export.Dim("S", max=64)}}
    ep = torch.export.export(Flattened(), (x,), dynamic_shapes=dims, strict=False)
    kiln.torch.compile_exported(ep, target="cpu", precision="highest", cache_dir=cache_dir,
                                fallbacks="allow").save(path)
    return json.loads((path / "kiln.json").read_text())


def test_a_saved_view_of_a_merged_dim_must_name_a_placeholder(cache_dir, tmp_path):
    meta = saved_flattened(cache_dir, tmp_path / "flat")
    step = next(s for s in meta["steps"] if s["kind"] == "kiln" and s["views"])
    view = next(iter(step["views"].values()))
    factor = next(f for f in view if f is not None)
    for bad in (["secret", 0], ["x", 9], "x", 1, [1.5, 0]):
        factor[0] = bad
        (tmp_path / "flat" / "kiln.json").write_text(json.dumps(meta))
        with pytest.raises(kiln.Error, match="'views' is not a map"):
            kiln.torch.load(tmp_path / "flat", cache_dir=cache_dir)


class MergedEdges(torch.nn.Module):
    """Merged rows times a weight with a batch dim of 1 (given a dim of 1 for the merged dim's
    extra factor, so kiln does not broadcast it against the first), a dim needed by an arange
    that only a merged-dim input carries, and addmm with alpha 0 over an inf (PyTorch does not
    read the product)."""
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1, 8, 6))

    def forward(self, x, y, c, a, b):
        rows = torch.matmul(x.reshape(-1, 8), self.w) * 1.5
        positions = torch.arange(y.shape[0]) * 3 + 1
        return rows, positions, torch.addmm(c, a, b, alpha=0)


class SevenMergedDims(torch.nn.Module):
    """A reshape to [B*W, T*2, 1, N, D]: seven dims as kiln holds merged ones (their factors)."""
    def forward(self, x):
        b, w, t, n, d = x.shape
        q = (x * 2).unsqueeze(3).expand(b, w, t, 2, n, d).reshape(b * w, t * 2, 1, n, d)
        return torch.nn.functional.scaled_dot_product_attention(q, q + 1, q - 1).sum(
            dim=(2, 3, 4))


def test_a_tensor_of_more_merged_dims_than_kiln_holds_stays_in_pytorch(cache_dir):
    dims = ({0: torch.export.Dim("B", min=2, max=8), 2: torch.export.Dim("T", min=2, max=8)},)
    x = torch.randn(2, 4, 3, 5, 8)
    ep = torch.export.export(SevenMergedDims(), (x,), dynamic_shapes=dims, strict=False)
    # Before: "node 'reshape' refused twice" (the reshape in PyTorch, its output entering a kiln
    # graph as an input of 7 dims); now the nodes reading it stay in PyTorch too.
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    moved = {f.op: f.reason for f in program.fallbacks}
    assert "6 dim" in moved["aten.reshape.default"], moved
    assert "aten.scaled_dot_product_attention.default" in moved, moved
    for shape in ((2, 4, 3, 5, 8), (3, 4, 5, 5, 8)):
        x = torch.randn(shape)
        torch.testing.assert_close(program(x), SevenMergedDims()(x), rtol=1e-5, atol=1e-5)


def test_merged_rows_against_a_batched_weight_and_a_merged_size_carrier_match_eager(cache_dir):
    n = torch.export.Dim("R", max=16)
    dims = {"x": {0: torch.export.Dim("B", max=16), 1: torch.export.Dim("S", max=64)},
            "y": {0: n, 1: 4 * n}, "c": None, "a": None, "b": None}
    a = torch.randn(4, 5)
    a[0, 0] = float("inf")
    args = (torch.randn(2, 5, 8), torch.randn(3, 12), torch.randn(4, 6), a, torch.randn(5, 6))
    module = MergedEdges()
    ep = torch.export.export(module, args, dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    moved = {f.op: f.reason for f in program.fallbacks}
    assert "aten.matmul.default" not in moved and "aten.addmm.default" in moved, moved
    assert "reshape(w, shape=[1, 1, 8, 6])" in "\n".join(program.partitions), \
        program.partitions
    for x_shape, n in (((2, 5, 8), 3), ((3, 7, 8), 5)):
        call = (torch.randn(x_shape), torch.randn(n, 4 * n)) + args[2:]
        for got, want in zip(program(*call), module(*call)):
            assert got.shape == want.shape
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (got, want)


class Overflowing(torch.nn.Module):
    def forward(self, x):
        return x + torch.full((3,), 1e39), torch.full((2,), 65520.0, dtype=torch.float16)


def test_a_fill_its_dtype_cannot_hold_is_refused_as_pytorch_refuses_it(cache_dir):
    x = torch.randn(3)
    ep = torch.export.export(Overflowing(), (x,), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert sum("past the type's range" in f.reason for f in program.fallbacks) == 1, \
        program.fallbacks
    with pytest.raises(RuntimeError, match="overflow"):
        program(x)


def test_saved_spans_must_add_up_to_kilns_rank(cache_dir, tmp_path):
    meta = saved_flattened(cache_dir, tmp_path / "flat")
    step = next(s for s in meta["steps"] if s["kind"] == "kiln" and s["spans"])
    spans = next(iter(step["spans"].values()))
    spans.append(1)
    (tmp_path / "flat" / "kiln.json").write_text(json.dumps(meta))
    with pytest.raises(kiln.Error, match="'spans' is not a map"):
        kiln.torch.load(tmp_path / "flat", cache_dir=cache_dir)


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu()


def test_load_names_a_bad_argument_or_damaged_weights_and_checks_a_steps_outputs(cache_dir,
                                                                                 tmp_path):
    """A wrong argument raises as compile_exported's do, not as kiln.json's fault; weights.pt
    cut short, of another kind or without a parameter is a kiln.Error naming it when loading (a
    call used to fail with torch's error, or a KeyError); so is a step naming more outputs than
    its graph has (the last name bound to nothing)."""
    _, program = compiled(Linear(), (torch.randn(2, 4),), cache_dir)
    with pytest.raises(TypeError, match="^compile_exported takes a torch.export"):
        kiln.torch.compile_exported(Linear())
    saved = tmp_path / "saved"
    program.save(saved)
    load = lambda **kw: kiln.torch.load(saved, cache_dir=cache_dir, **kw)
    with pytest.raises(ValueError, match="^precision='junk'"):
        load(precision="junk")
    with pytest.raises(ValueError, match="^fallbacks='junk'"):
        load(fallbacks="junk")
    with pytest.raises(TypeError, match="^target=5"):
        load(target=5)
    with pytest.raises(ValueError, match="^target='': expected a value"):
        load(target="")
    weights = saved / "weights.pt"
    data = weights.read_bytes()
    for damage, message in [(lambda: weights.write_bytes(data[:100]), "cannot read the weights"),
                            (lambda: torch.save([1], weights), "not a map of names to tensors"),
                            (lambda: torch.save({}, weights),
                             "no tensor for parameter 'lin.weight'")]:
        damage()
        with pytest.raises(kiln.Error, match=f"weights.pt: {message}"):
            load()
    weights.write_bytes(data)
    meta = json.loads((saved / "kiln.json").read_text())
    step = next(s for s in meta["steps"] if s["kind"] == "kiln")
    step["outputs"].append("extra")
    (saved / "kiln.json").write_text(json.dumps(meta))
    with pytest.raises(kiln.Error, match="has 1 outputs, its step names"):
        load()
    step["outputs"].pop()
    (saved / "kiln.json").write_text(json.dumps(meta))
    x = torch.randn(2, 4)
    assert torch.equal(load()(x), program(x))


class Repeats(torch.nn.Module):
    """BLOOM's alibi.repeat(batch, 1, 1): a count that is a symbolic size makes a merged dim
    (4*B); a constant count along a symbolic dim (2*B) and along a merged one."""
    def forward(self, x, slopes):
        b, s, h = x.shape
        alibi = slopes[:, None, None] * torch.arange(s, dtype=torch.float32)[None, None, :]
        rows = alibi.repeat(b, 1, 1)                                 # [4*B, 1, S]
        twice = x.repeat(2, 1, 1)                                    # [2*B, S, 8]
        flat = x.reshape(-1, h).repeat(3, 2)                         # [3*B*S, 16]
        return rows + 1, twice * 2, flat.sum(-1)


def test_a_repeat_by_a_symbolic_count_or_of_a_merged_dim_runs_in_kiln(cache_dir):
    x, slopes = torch.randn(2, 5, 8), torch.randn(4)
    dims = {"x": {0: torch.export.Dim("B", max=16), 1: torch.export.Dim("S", max=64)},
            "slopes": None}
    ep = torch.export.export(Repeats(), (x, slopes), dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert "aten.repeat.default" not in {f.op for f in program.fallbacks}, program.fallbacks
    for shape in [(2, 5, 8), (3, 7, 8), (1, 1, 8)]:
        x = torch.randn(shape)
        for got, want in zip(program(x, slopes), Repeats()(x, slopes)):
            assert got.shape == want.shape
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (shape, got, want)


class IntoF32(torch.nn.Module):
    """Eager attention's softmax(scores, dtype=float32) on bf16 scores (BLOOM, Gemma 2), sum and
    mean with dtype=, and a sum of i32 (i64 in PyTorch, as in kiln)."""
    def forward(self, x, n):
        scores = x @ x.transpose(-1, -2)
        p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
        return (p @ x, x.sum(-1, dtype=torch.float32), x.mean(-1, dtype=torch.float32),
                n.sum(-1))


def test_softmax_and_reductions_into_f32_cast_first_as_pytorch_does(cache_dir):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 16, generator=g).to(torch.bfloat16)
    n = torch.randint(-5, 5, (3, 4), generator=g, dtype=torch.int32)
    _, program = compiled(IntoF32(), (x, n), cache_dir)
    assert program.fallbacks == [], program.fallbacks
    wants = list(IntoF32()(x, n))
    # kiln fuses the scores' chain into its attention kernel, whose scores stay fp32; eager rounds
    # them to bf16 first (by up to 1/32 at 16), which moves p by up to 3%, several bf16 ulps of
    # the output. So the output is checked against eager's steps with fp32 scores.
    f = x.float()
    wants[0] = (torch.softmax(f @ f.transpose(-1, -2), -1).to(x.dtype).float() @ f).to(x.dtype)
    for got, want in zip(program(x, n), wants):
        assert got.dtype == want.dtype
        assert torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2), (got, want)


class Running(torch.nn.Module):
    """Running sums, rolls and diffs as the mask builders write them: cumsum of a bool mask and
    of i32 ids (i64 in PyTorch), of bf16 (fp32 sums, each rounded), with dtype=; a roll over two
    dims by negative and long shifts; diffs with a prepend and an append, of bool (xor), and
    along the dynamic sequence with a one-element prepend (transformers' packed-sequence check),
    and one kiln cannot hold (along the sequence without a prepend: S - 1 long)."""
    def forward(self, mask, ids, pos, x, h):
        counts = (mask != 0).cumsum(-1)
        positions = ids.cumsum(1) * ids - 1
        running, as_f32 = h.cumsum(-1), h.cumsum(0, dtype=torch.float32)
        rolled = torch.roll(x, shifts=(-1, 10), dims=(0, 2))
        d = torch.diff(x, dim=1, prepend=x[:, :2], append=x[:, -1:])
        flips = torch.diff(x > 0, dim=-1)
        packed = (torch.diff(pos, prepend=pos[:, :1] - 1, dim=-1) != 1).cumsum(-1)
        rolled_s = torch.roll(pos, 1, 1)
        steps = torch.diff(mask, dim=-1)
        return counts, positions, running, as_f32, rolled, d, flips, packed, rolled_s, steps


def test_cumsum_roll_and_diff_run_in_kiln_as_in_eager(cache_dir):
    def inputs(b, s):
        pos = torch.cat([torch.arange(s // 2), torch.arange(s - s // 2)]).repeat(b, 1)
        return (torch.randint(0, 2, (b, s)), torch.randint(-3, 9, (b, s), dtype=torch.int32), pos,
                torch.randn(3, 5, 7), torch.randn(4, 33, dtype=torch.bfloat16))
    batch, seq = torch.export.Dim("B", max=8), torch.export.Dim("S", min=3, max=64)
    dims = ({0: batch, 1: seq}, {0: batch, 1: seq}, {0: batch, 1: seq}, None, None)
    ep = torch.export.export(Running(), inputs(2, 12), dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.count) for f in program.fallbacks] == [("aten.diff.default", 1)]
    assert "- 1 (kiln dims are symbols or constants)" in program.fallbacks[0].reason
    text = "\n".join(program.partitions)
    assert text.count("cumsum(") == 5 and "roll(" in text, text
    for b, s in [(2, 12), (3, 7), (1, 3), (8, 64)]:
        args = inputs(b, s)
        for got, want in zip(program(*args), Running()(*args)):
            assert got.dtype == want.dtype and got.shape == want.shape
            if want.is_floating_point():
                assert torch.allclose(got.float(), want.float(), rtol=1e-5, atol=1e-5)
            else:
                assert torch.equal(got, want), (got, want)


class EveryTwo(torch.nn.Module):
    """GPT-J's rotary pieces and Falcon's multi-query split: strided slices (a last step cut
    short by the dim's end, a negative start), stack along the last and the first dim of mixed
    dtypes, repeat_interleave, an index by constant positions (a run, scattered ones, one
    negative, a 0-d one) and a table indexed by ids (a negative id counts from the end)."""
    def forward(self, x, ids, n):
        evens, odds = x[..., ::2], x[..., 1::2]
        rotated = torch.stack((-odds, evens), dim=-1).flatten(-2)
        cut, tail = x[..., 1:7:3], x[..., -3::2]
        pair = torch.stack((n, x[0, 0, 0, :4].to(torch.int32)), dim=0)
        wide = torch.repeat_interleave(x[..., :3], 2, dim=3)
        picked = x[:, :, [-2]]
        scattered = x[:, [0, 2, 3]]
        single = x[:, :, 1]
        table = x[0, 0, 0, :5].reshape(5, 1) * torch.ones(1, 3)
        rows = table[ids]
        return rotated, cut, tail, pair, wide, picked, scattered, single, rows


def test_strided_slices_stack_repeat_interleave_and_constant_indices_run_in_kiln(cache_dir):
    x = torch.randn(2, 4, 3, 8)
    ids = torch.tensor([[0, 4, -1], [2, -5, 3]])
    n = torch.tensor([1, -2, 3, 4], dtype=torch.int32)
    _, program = compiled(EveryTwo(), (x, ids, n), cache_dir)
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    for got, want in zip(program(x, ids, n), EveryTwo()(x, ids, n)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want), (got, want)


class Truth(torch.nn.Module):
    """any and all along one dim, of floats (a NaN counts as true), integers and bool."""
    def forward(self, x, n, b):
        return (x.any(-1), x.all(0, keepdim=True), n.any(1), n.all(1), b.any(0), b.all(-1))


def test_any_and_all_along_a_dim_run_in_kiln_as_in_eager(cache_dir):
    x = torch.tensor([[0.0, float("nan"), 0.0], [0.0, 0.0, 0.0], [1.0, -2.0, 0.5]])
    n = torch.tensor([[0, 0, 3], [0, 0, 0], [-1, 2, 5]])
    b = torch.tensor([[True, False], [True, True], [False, False]])
    _, program = compiled(Truth(), (x, n, b), cache_dir)
    assert not program.fallbacks, program.fallbacks
    for got, want in zip(program(x, n, b), Truth()(x, n, b)):
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


class Affineless(torch.nn.Module):
    """OLMo's layer norm without a weight or a bias (f32 and bf16), Persimmon's square, MPT's
    reciprocal, and a gather from a zero buffer reached through a conversion (RoBERTa's
    token-type ids)."""
    def __init__(self):
        super().__init__()
        self.register_buffer("types", torch.zeros(1, 16, dtype=torch.int32))

    def forward(self, x, h, idx):
        types = torch.gather(self.types.to(torch.int64).expand(idx.shape[0], -1), 1, idx)
        return (F.layer_norm(x, (8,)), F.layer_norm(h, (8,)), torch.square(x),
                torch.reciprocal(x), types + idx)


def test_layer_norm_without_affine_square_reciprocal_and_a_converted_buffer_run_in_kiln(
        cache_dir):
    x, h = torch.randn(3, 5, 8), torch.randn(2, 8, dtype=torch.bfloat16)
    idx = torch.randint(0, 16, (3, 4))
    _, program = compiled(Affineless(), (x, h, idx), cache_dir)
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    for got, want in zip(program(x, h, idx), Affineless()(x, h, idx)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.allclose(got.float(), want.float(), rtol=1e-5, atol=1e-5), (got, want)


class EmptyPart(torch.nn.Module):
    """Phi-3's partial rotary at a full rotary dim: the part past it is empty, and cat joins it
    back. The empty slice adds nothing and must not split the kiln graph around it."""
    def forward(self, x, w):
        h = x @ w
        rot, rest = h[..., :8], h[..., 8:]
        return torch.relu(torch.cat([torch.sin(rot), rest], dim=-1)) @ w.t()


def test_an_empty_operand_of_a_cat_does_not_split_the_kiln_graph(cache_dir):
    x, w = torch.randn(2, 3, 8), torch.randn(8, 8)
    dims = {"x": {1: torch.export.Dim("S", max=64)}, "w": None}
    ep = torch.export.export(EmptyPart(), (x, w), dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.partitions
    for s in (3, 1, 17):
        x = torch.randn(2, s, 8)
        assert torch.allclose(program(x, w), EmptyPart()(x, w), rtol=1e-5, atol=1e-5)


class OneBlock(torch.nn.Module):
    """MiniMax's lightning attention joins its blocks along the sequence: at most one block,
    the cat of one tensor along a symbolic dim (and along a merged one); and a cat whose empty
    operand promotes the other's dtype (i64 to f32, as PyTorch's cat does)."""
    def forward(self, x, ids):
        blocks = [torch.relu(x) * 2]
        y = torch.cat(blocks, dim=-2)
        z = torch.cat([torch.empty(0), ids[1]])
        rows = torch.cat([x.reshape(-1, 8) * 2], 0)  # along the merged dim B*S
        return y + 1, z * 0.5, rows + 1


def test_a_cat_of_one_tensor_is_the_tensor_along_any_dim(cache_dir):
    x, ids = torch.randn(2, 5, 8), torch.arange(10).reshape(2, 5)
    S = torch.export.Dim("S", max=64)
    ep = torch.export.export(OneBlock(), (x, ids), dynamic_shapes={"x": {1: S}, "ids": {1: S}},
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.partitions
    assert "concat" not in program.partitions[0]
    for s in (5, 1, 33):
        x, ids = torch.randn(2, s, 8), torch.arange(2 * s).reshape(2, s) - 7
        for got, want in zip(program(x, ids), OneBlock()(x, ids)):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got, want), (got, want)


class Rsubs(torch.nn.Module):
    """rsub with an alpha: rsub.Scalar takes it positionally (`torch.rsub(x, 2, alpha=3)` is
    exported as `rsub.Scalar(x, 2, 3)`), rsub.Tensor as a keyword; of floats and integers."""
    def forward(self, x, ids):
        return (torch.rsub(x, 2, alpha=3), torch.rsub(x, x * 2, alpha=0.5),
                torch.rsub(ids, 7, alpha=2), torch.rsub(ids, ids * ids, alpha=-3))


class HalfRsubs(torch.nn.Module):
    """A half tensor's sub and rsub with a fractional alpha: PyTorch's CPU kernel rounds alpha
    to the tensor's type, then computes in f32 and rounds once."""
    def forward(self, h, y):
        return (torch.rsub(h, 0.1, alpha=0.3), torch.rsub(h, 2, alpha=0.7),
                torch.sub(y, h, alpha=0.3), torch.rsub(h, y, alpha=0.3))


def test_an_rsub_with_an_alpha_runs_in_kiln(cache_dir):
    x, ids = torch.randn(2, 5), torch.arange(10).reshape(2, 5) - 4
    ep, program = compiled(Rsubs(), (x, ids), cache_dir)
    assert not program.fallbacks and len(program.executables) == 1, program.partitions
    for got, want in zip(program(x, ids), Rsubs()(x, ids)):
        assert got.dtype == want.dtype
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6) if got.is_floating_point() else \
            torch.equal(got, want), (got, want)
    # Exactly as eager at [4, 64] (a whole number of PyTorch's vector loop: its scalar tail
    # rounds twice).
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float16, torch.bfloat16):
        h = (torch.randn(4, 64, generator=g) * 300).to(dtype)
        y = torch.randn(4, 64, generator=g).to(dtype)
        _, program = compiled(HalfRsubs(), (h, y), cache_dir)
        assert not program.fallbacks, program.fallbacks
        for got, want in zip(program(h, y), HalfRsubs()(h, y)):
            assert got.dtype == want.dtype and torch.equal(got, want), (dtype, got, want)


class Windows(torch.nn.Module):
    """Slices of a fixed dim by a symbolic start or end: MPT's alibi[..., Max(0, 64 - S):] (its
    last S), a float buffer's first S rows, a computed row's window from 3 and from S, windows
    from a negative start (counted from the end, as PyTorch does), and of bool buffers: a
    causal one's first S (GPT-Neo's `bias[:, :, :S, :S]`, as 2-D and 4-D), a local band's
    window from S - 2 and from 2, the first S of a buffer that is no band, and of integer
    buffers (BigBird's token_type_ids; one holding values f32 does not, left to PyTorch: kiln
    gathers floats)."""
    def __init__(self):
        super().__init__()
        self.register_buffer("slopes", torch.tensor([0.5, 0.25, 0.125, 0.0625]).reshape(4, 1, 1))
        self.register_buffer("table", torch.randn(48, 5))
        causal = torch.tril(torch.ones(48, 48, dtype=torch.bool))
        self.register_buffer("causal", causal)
        self.register_buffer("local", (causal ^ torch.tril(causal, -4)).view(1, 1, 48, 48))
        seeded = torch.Generator().manual_seed(2)
        self.register_buffer("scattered", torch.rand(48, 3, generator=seeded) > 0.5)
        self.register_buffer("types", torch.randint(-2**24, 2**24, (1, 48), generator=seeded))
        self.register_buffer("wide", torch.arange(48).reshape(1, 48) + 2**40)

    def forward(self, x, w):
        s = x.shape[1]
        alibi = self.slopes * torch.arange(-63, 1).reshape(1, 1, 64)
        tail = alibi[:, torch.sym_max(0, 1 - s):, torch.sym_max(0, 64 - s):]
        h = torch.tanh(x.mean(1) @ w)
        return (tail, self.table[:s] * 2, h[:, 3:3 + s], h[:, s:2 * s],
                self.causal[:s, :s] & (x[..., 0, None] > 0), self.table[-s:], h[:, -5 - s:-5],
                self.local[:, :, :s, :s], self.local[:, :, s - 2:s, 2:s + 2],
                self.scattered[:s] | (x[0, :, :3] > 0), self.types[:, :s] + 1,
                self.wide[:, :s] - 1)


def test_a_window_from_a_symbolic_start_or_to_a_symbolic_end_runs_in_kiln(cache_dir):
    x, w = torch.randn(2, 12, 8), torch.randn(8, 80)
    dims = ({0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", min=2, max=40)}, None)
    module = Windows()
    ep = torch.export.export(module, (x, w), dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.count) for f in program.fallbacks] == [("aten.slice.Tensor", 1)]
    assert "of an i64 tensor whose values f32 may not hold" in program.fallbacks[0].reason, \
        program.fallbacks[0].reason
    assert len(program.executables) == 1 and "embedding(" in program.partitions[0]
    assert "causal" not in program.partitions[0] and "local" not in program.partitions[0]
    for b, s in [(2, 12), (1, 2), (3, 40), (2, 17)]:
        x = torch.randn(b, s, 8)
        got, want = program(x, w), module(x, w)
        for g, v in zip(got, want):
            assert g.dtype == v.dtype and g.shape == v.shape
            assert torch.allclose(g.double(), v.double(), rtol=1e-5, atol=1e-5), (g, v)
        for g, v in zip(got[-3:], want[-3:]):  # bool and integers: exactly
            assert torch.equal(g, v)


class DecayWindows(torch.nn.Module):
    """A window of a window of a float constant, both along fixed dims to symbolic bounds:
    MiniMax's diagonal_decay[:, :, :S, :S] (heads before the two windows), and windows from a
    symbolic start along a constant's first two dims ([S - 2, S) and [1, S + 1)), a dim of 3
    after them."""
    def __init__(self):
        super().__init__()
        slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625]).reshape(1, 4, 1, 1)
        i = torch.arange(48)
        d = (i[:, None] - i[None, :]).reshape(1, 1, 48, 48) * slopes
        self.register_buffer("decay", torch.exp(torch.where(d >= 0, -d, float("-inf"))))
        self.register_buffer("grid", torch.randn(48, 50, 3))

    def forward(self, q):
        s = q.shape[2]
        scores = q @ q.transpose(-1, -2)
        return scores * self.decay[:, :, :s, :s], self.grid[s - 2:s, 1:s + 1] * 2


def test_a_window_of_a_window_of_a_constant_is_one_embedding(cache_dir):
    q = torch.randn(2, 12, 8).reshape(2, 1, 12, 8).expand(2, 4, 12, 8).contiguous()
    dims = ({2: torch.export.Dim("S", min=2, max=40)},)
    module = DecayWindows()
    ep = torch.export.export(module, (q,), dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.partitions
    assert program.partitions[0].count("embedding(") == 2, program.partitions[0]
    for s in (12, 2, 40, 17):
        q = torch.randn(2, 4, s, 8)
        for got, want in zip(program(q), module(q)):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (got, want)
    # A first window from a start kiln does not take (S // 2) stays in PyTorch alone: the second
    # is an embedding of its result, as before the two were composed.
    class FloorWindow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("grid", torch.randn(48, 50, 3))

        def forward(self, q):
            s = q.shape[2]
            return self.grid[s // 2:s // 2 + 2, :s] * 2

    module = FloorWindow()
    ep = torch.export.export(module, (q,), dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.count) for f in program.fallbacks] == [("aten.slice.Tensor", 1)]
    assert "embedding(" in program.partitions[0], program.partitions
    for s in (12, 2, 40):
        q = torch.randn(2, 4, s, 8)
        assert torch.equal(program(q), module(q)), s


class Convolutions(torch.nn.Module):
    """conv2d and conv1d as patches times the weight: a vision transformer's patch embedding (a
    size no whole patch ends on, dropped), 3x3 padded, strided, dilated and 'same', an unbatched
    input, no bias, a Whisper-like conv1d pair, and bf16; and of several groups: depthwise 7x7
    (ConvNeXt's), two groups strided, a conv1d of four, patches of four, an unbatched input."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.patch = torch.nn.Conv2d(3, 16, 8, stride=8)
        self.pad = torch.nn.Conv2d(3, 5, 3, padding=1)
        self.step = torch.nn.Conv2d(3, 4, (3, 2), stride=(2, 3), padding=(1, 2), bias=False)
        self.wide = torch.nn.Conv2d(3, 4, 3, dilation=2, padding="same")
        self.c1 = torch.nn.Conv1d(6, 8, 3, padding=1)
        self.c2 = torch.nn.Conv1d(8, 8, 3, stride=2, padding=1)
        self.low = torch.nn.Conv1d(6, 4, 4, stride=4).to(torch.bfloat16)
        self.depthwise = torch.nn.Conv2d(3, 3, 7, padding=3, groups=3)
        self.halves = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2, bias=False)
        self.quarters = torch.nn.Conv1d(8, 4, 3, padding=1, groups=4)
        self.patches = torch.nn.Conv2d(4, 8, 2, stride=2, groups=4)

    def forward(self, x, a):
        y = torch.nn.functional.gelu(self.c1(a))
        z = self.pad(x)[:, :4]
        return (self.patch(x), self.pad(x), self.step(x), self.wide(x), self.pad(x[0]),
                self.c2(y), self.low(a.to(torch.bfloat16)), self.depthwise(x), self.halves(z),
                self.quarters(y), self.patches(z), self.depthwise(x[0]))


@pytest.mark.parametrize("target", ["cpu", "emulate:sm_90"])
def test_convolutions_are_one_matmul_of_patches_in_kiln(target, cache_dir):
    module = Convolutions()
    x, a = torch.randn(2, 3, 20, 27), torch.randn(2, 6, 17)
    dims = ({0: torch.export.Dim("B", max=8)}, {0: torch.export.Dim("N", max=8)})
    ep = torch.export.export(module, (x, a), dynamic_shapes=dims, strict=False)
    # As exported (conv2d, conv1d) and decomposed (aten.convolution).
    programs = [kiln.torch.compile_exported(e, target=target, precision="highest",
                                            cache_dir=cache_dir, fallbacks="allow")
                for e in (ep, ep.run_decompositions())]
    for program in programs:
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    assert "convolution" in str(ep.run_decompositions().graph)
    sizes = [(2, programs[0]), (1, programs[0]), (5, programs[1]), (3, programs[1])]
    if target != "cpu":  # the emulator runs the CUDA kernels: one size a program
        sizes = sizes[1:3]
    for b, program in sizes:
        x, a = torch.randn(b, 3, 20, 27), torch.randn(b, 6, 17)
        with torch.no_grad():
            want = module(x, a)
        for got, w in zip(program(x, a), want):
            assert got.dtype == w.dtype and got.shape == w.shape, (got.shape, w.shape)
            tol = 2e-2 if w.dtype == torch.bfloat16 else 1e-5
            assert torch.allclose(got.float(), w.float(), rtol=tol, atol=tol), (got, w)


class Convolutions3d(torch.nn.Module):
    """conv3d: a video model's tubelet embedding (stride its kernel, sizes no whole tubelet ends
    on dropped), 3x3x3 padded, strided with a padding per dim and no bias, dilated 'same', of
    two groups, an unbatched input, and bf16."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.tube = torch.nn.Conv3d(3, 8, (2, 4, 4), stride=(2, 4, 4))
        self.pad = torch.nn.Conv3d(3, 4, 3, padding=1)
        self.step = torch.nn.Conv3d(3, 4, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                                    bias=False)
        self.same = torch.nn.Conv3d(3, 2, 3, dilation=(1, 2, 1), padding="same")
        self.halves = torch.nn.Conv3d(4, 6, 3, stride=2, padding=1, groups=2)
        self.low = torch.nn.Conv3d(3, 4, 2, stride=2).to(torch.bfloat16)

    def forward(self, x):
        return (self.tube(x), self.pad(x), self.step(x), self.same(x), self.halves(self.pad(x)),
                self.tube(x[0]), self.low(x.to(torch.bfloat16)))


def test_3d_convolutions_are_one_matmul_of_patches_in_kiln(cache_dir):
    module = Convolutions3d()
    ep = torch.export.export(module, (torch.randn(2, 3, 5, 9, 10),),
                             dynamic_shapes=({0: torch.export.Dim("B", max=8)},), strict=False)
    # Before: "a convolution over 3 dims" left each of them in PyTorch.
    for e in (ep, ep.run_decompositions()):
        program = kiln.torch.compile_exported(e, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for b in (1, 3):
            x = torch.randn(b, 3, 5, 9, 10)
            with torch.no_grad():
                want = module(x)
            for got, w in zip(program(x), want):
                assert got.dtype == w.dtype and got.shape == w.shape, (got.shape, w.shape)
                tol = 2e-2 if w.dtype == torch.bfloat16 else 1e-5
                assert torch.allclose(got.float(), w.float(), rtol=tol, atol=tol), (got, w)


class LongConstantIndex(torch.nn.Module):
    """Swin's relative position bias: a table indexed by a constant of more than 64 runs of
    positions (some negative, counting from the end), and a constant index of a few runs."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.table = torch.nn.Parameter(torch.randn(25, 4))
        index = torch.randint(0, 25, (100,))
        index[::7] -= 25
        self.register_buffer("index", index)

    def forward(self, x):
        bias = self.table[self.index].view(10, 10, 4).permute(2, 0, 1)
        return x + bias, x[:, :, :, torch.tensor([0, 1, 2, 7])]


def test_a_constant_index_of_many_runs_is_an_embedding_of_the_table(cache_dir):
    module = LongConstantIndex()
    ep = torch.export.export(module, (torch.randn(2, 4, 10, 10),),
                             dynamic_shapes=({0: torch.export.Dim("B", max=8)},), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    # Before: "an index of more than 64 runs of positions" left the gather in PyTorch.
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    assert "embedding(" in program.partitions[0]
    for b in (1, 3):
        x = torch.randn(b, 4, 10, 10)
        with torch.no_grad():
            for got, want in zip(program(x), module(x)):
                assert torch.equal(got, want)


class TwoDimConstantIndex(torch.nn.Module):
    """LeViT's attention biases: a table [heads, offsets] by a constant index of 2 dims along
    dim 1 (more than 64 runs, some negative), and one of few runs; reshape_as and view_as."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.biases = torch.nn.Parameter(torch.randn(4, 25))
        index = torch.randint(0, 25, (10, 10))
        index[::3, ::2] -= 25
        self.register_buffer("index", index)
        self.register_buffer("few", torch.tensor([[0, 1], [2, 3], [3, 4]]))

    def forward(self, x):
        return (x + self.biases[:, self.index], self.biases[:, self.few],
                x.flatten(1).reshape_as(x), x.view(x.shape[0], -1).view_as(x) * 2)


def test_a_constant_index_of_two_dims_is_taken_in_order(cache_dir):
    module = TwoDimConstantIndex()
    ep = torch.export.export(module, (torch.randn(2, 4, 10, 10),),
                             dynamic_shapes=({0: torch.export.Dim("B", max=8)},), strict=False)
    program = one_kiln_graph(ep, cache_dir)  # before: in PyTorch ("advanced indexing", no op)
    for b in (1, 3):
        x = torch.randn(b, 4, 10, 10)
        with torch.no_grad():
            for k, (got, want) in enumerate(zip(program(x), module(x))):
                assert got.shape == want.shape and torch.equal(got, want), k


class Picks(torch.nn.Module):
    """A sequence classifier's head: the last non-pad position by argmax of positions times the
    mask, then x[arange(B), that] (also by a negative i32 id, and at rank 2; a -0.0 picked stays
    one), and argmax of floats
    (ties: the first; NaN: the first NaN, as PyTorch), of a computed and a given mask, along dim 0
    and kept, and of ids whose values nothing bounds."""
    def forward(self, h, ids, f, m):
        s = ids.shape[1]
        last = (torch.arange(s) * (ids != 0).to(torch.int32)).argmax(-1)
        rows = torch.arange(h.shape[0])
        return (h[rows, last], h[rows, (last * 0).to(torch.int32) - 2],
                f[torch.arange(f.shape[0]), last], f.argmax(-1), f.argmax(0, keepdim=True),
                (f > 0).long().argmax(1), (torch.arange(s) * m).argmax(-1), ids.argmax(-1))


def test_argmax_and_a_row_picked_per_batch_entry_run_in_kiln_as_in_eager(cache_dir):
    def inputs(b, s):
        ids = torch.randint(1, 50, (b, s))
        ids[0, -2:] = 0
        f = torch.randn(b, s)
        f[0, 1] = f[0, 3] = 9.0  # a tie
        if b > 1:
            f[1, 2], f[1, 4] = float("nan"), float("nan")
        h = torch.randn(b, s, 6)
        h[:, :, 0] = -0.0
        return h, ids, f, torch.rand(b, s) > 0.5
    batch, seq = torch.export.Dim("B", max=8), torch.export.Dim("S", min=5, max=64)
    dims = ({0: batch, 1: seq}, {0: batch, 1: seq}, {0: batch, 1: seq}, {0: batch, 1: seq})
    ep = torch.export.export(Picks(), inputs(2, 12), dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert program.fallbacks == [] and len(program.executables) == 1
    for b, s in [(2, 12), (3, 5), (1, 64)]:
        args = inputs(b, s)
        for got, want in zip(program(*args), Picks()(*args)):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
            assert torch.equal(torch.signbit(got), torch.signbit(want)), (got, want)


class SizesAsValues(torch.nn.Module):
    """Sizes used as values: `ids - S` (i64, and i32 as PyTorch keeps it), `x * x.shape[1]`,
    `x / (S + 1)`, `tanh + (2 S - 3)`, `ids * (S B - 1)`, a rank-0 sum plus S, a parameter
    times S (a graph no input of which has S but for the one kiln adds), `full` of S (i64,
    f32 and a rank-0 f16), sizes divided by whole numbers (`S // 2`, `S % 3`, `(S + 3) // 4 * B
    + S // 3 % 2`), and a float size (`sym_sqrt(S)`), which stays in PyTorch."""
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x, ids):
        s, b = ids.shape[1], ids.shape[0]
        return (ids - s, ids.to(torch.int32) - s, x * x.shape[1], x / (s + 1),
                torch.tanh(x) + (2 * s - 3), ids * (s * b - 1), x[0, 0, 0] + s, self.w * s,
                x / torch.sym_sqrt(x.shape[1]), ids - s // 2, ids - s % 3,
                ids + ((s + 3) // 4 * b + s // 3 % 2), torch.full((3,), s),
                x.new_full((2, 2), s * b), torch.full((), s, dtype=torch.half))


def test_a_size_used_as_a_value_is_computed_from_the_graphs_dims(cache_dir):
    x, ids = torch.randn(2, 6, 8), torch.randint(0, 9, (2, 6))
    dims = ({0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", min=2, max=10)},) * 2
    ep = torch.export.export(SizesAsValues(), (x, ids), dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.count) for f in program.fallbacks] == [("aten.div.Tensor", 1)]
    assert program.fallbacks[0].reason == "a value that is not a tensor (SymFloat)"
    assert len(program.executables) == 1
    module = ep.module()
    for b, s in [(2, 6), (3, 9), (1, 2), (8, 10)]:
        args = (torch.randn(b, s, 8), torch.randint(-9, 9, (b, s)))
        for got, want in zip(program(*args), module(*args)):
            assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


class IndexSelects(torch.nn.Module):
    """index_select of a table's rows by flattened ids (XGLM's positions), along a middle dim
    of a constant, along the last dim by two ids, by a 0-d id, in f16; and along a dim of a
    tensor whose other dims are a symbolic one and a fixed one (in PyTorch)."""
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(10, 6))
        self.register_buffer("cube", torch.randn(4, 5, 3))

    def forward(self, x, ids):
        rows = self.table.index_select(0, ids.reshape(-1)).reshape(ids.shape[0], ids.shape[1], 6)
        middle = self.cube.index_select(1, torch.tensor([4, 0, 2]))
        last = x[:, 0].index_select(-1, ids[0, :2])
        one = self.cube.index_select(-1, ids[0, 0])
        half = self.table.half().index_select(0, ids[:, 1])
        return rows, middle, last, one, half, x.index_select(1, ids[0])


def test_index_select_is_an_embedding_of_the_dim_moved_first(cache_dir):
    dims = ({0: torch.export.Dim("B", min=2, max=8), 1: torch.export.Dim("S", min=2, max=16)},) * 2
    ep = torch.export.export(IndexSelects(), (torch.randn(2, 5, 7), torch.randint(0, 5, (2, 5))),
                             dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.count, f.reason) for f in program.fallbacks] == [
        ("aten.index_select.default", 1,
         "an index_select of a tensor whose other dims hold a symbolic one and others")]
    assert len(program.executables) == 1
    module = ep.module()
    for b, s in [(3, 6), (2, 2), (8, 16)]:
        x, ids = torch.randn(b, s, 7), torch.randint(0, 2, (b, s))
        for got, want in zip(program(x, ids), module(x, ids)):
            assert got.dtype == want.dtype and torch.equal(got, want), (b, s)
    # An id past the dim: a row of zeros, where PyTorch raises.
    x, ids = torch.randn(2, 3, 7), torch.tensor([[0, 1, 2], [9, 10, 1]])
    rows = program(x, ids)[0]
    assert torch.equal(rows[1, 1], torch.zeros(6)) and torch.equal(rows[1, 0], module.table[9])


class NormsAndPools(torch.nn.Module):
    """A CNN's eval batch norms (with and without an affine), global average pools, and float
    reductions over several dims (ConvNeXt's mean over H and W), over all of them, kept or not,
    in f16 too."""
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(3)
        self.bn1 = torch.nn.BatchNorm1d(3, affine=False)
        for norm in (self.bn, self.bn1):
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.5, 2)
        self.bn.weight.data.uniform_(0.5, 1.5)
        self.bn.bias.data.uniform_(-1, 1)

    def forward(self, x):
        y = torch.relu(self.bn(x))
        return (y, self.bn1(x[:, :, 0]), torch.nn.functional.adaptive_avg_pool2d(y, 1),
                torch.nn.functional.adaptive_avg_pool1d(x[:, 0], (1,)), x.mean([-2, -1]),
                x.sum((1, 3), keepdim=True), x.amax([0, 2]), x.mean(), x.sum(),
                x.half().mean([2, 3]), x.sum(dim=(-1, 1, 0)))


class MaxPools(torch.nn.Module):
    """ResNet's stem pool (3x3, stride 2, padded), a 2x2 one, a conv1d-shaped one, a dilated
    one of a rectangular kernel, an unbatched input, and f16."""
    def forward(self, x):
        pool = torch.nn.functional.max_pool2d
        return (pool(x, 3, 2, 1), pool(x, 2), torch.nn.functional.max_pool1d(x[:, 0], 3, 1, 1),
                pool(x, (2, 3), (1, 2), (1, 0), dilation=(2, 1)), pool(x[0], 2),
                pool(x.half(), 3, 2, 1))


def test_a_max_pool_is_the_maximum_of_its_windows_nan_and_inf_included(cache_dir):
    ep = torch.export.export(MaxPools(), (torch.randn(2, 3, 9, 10),),
                             dynamic_shapes=({0: torch.export.Dim("B", max=8)},), strict=False)
    # As exported (max_pool2d) and decomposed (max_pool2d_with_indices, its values).
    for e in (ep, ep.run_decompositions()):
        program = one_kiln_graph(e, cache_dir)
        for b in (1, 3):
            x = torch.randn(b, 3, 9, 10)
            x[0, 0, 1, 1], x[0, 1, 2, 2] = float("nan"), -float("inf")
            for got, want in zip(program(x), MaxPools()(x)):
                assert got.dtype == want.dtype and torch.equal(got.isnan(), want.isnan())
                assert torch.equal(got.nan_to_num(0), want.nan_to_num(0))


class Pools3d(torch.nn.Module):
    """Pools over 3 dims (video models' stems and heads): max 3x3x3 stride 2 padded, 1x3x3
    dilated in ceil mode; average 2x2x2, 3x3x3 padded without counting the padding, in ceil
    mode, and with a divisor (eager has no half avg_pool3d on the CPU)."""
    def forward(self, x):
        mx, avg = torch.nn.functional.max_pool3d, torch.nn.functional.avg_pool3d
        return (mx(x, 3, 2, 1), mx(x, (1, 3, 3), (1, 2, 2), dilation=(1, 2, 1), ceil_mode=True),
                avg(x, 2), avg(x, 3, 2, 1, count_include_pad=False),
                avg(x, (2, 3, 3), 2, ceil_mode=True), avg(x, 2, divisor_override=3))


def test_pools_over_3_dims_run_in_kiln(cache_dir):
    dims = ({0: torch.export.Dim("B", max=8)},)
    ep = torch.export.export(Pools3d(), (torch.randn(2, 3, 5, 9, 10),), dynamic_shapes=dims,
                             strict=False)
    # As exported and decomposed (max_pool3d_with_indices, its values). Before: each in PyTorch.
    for e in (ep, ep.run_decompositions()):
        program = one_kiln_graph(e, cache_dir)
        for b in (1, 3):
            x = torch.randn(b, 3, 5, 9, 10)
            x[0, 0, 1, 1, 1], x[0, 1, 2, 2, 2] = float("nan"), -float("inf")
            for k, (got, want) in enumerate(zip(program(x), Pools3d()(x))):
                assert got.dtype == want.dtype and got.shape == want.shape, (k, got.shape)
                assert torch.equal(got.isnan(), want.isnan()), k
                # The same bits: maxima pick elements, sums add in PyTorch's order.
                assert torch.equal(got.nan_to_num(0), want.nan_to_num(0)), k


class InPyTorch(torch.nn.Module):
    """A batch norm in training mode, max and average pools of 81 kernel offsets: kiln takes none
    of them."""
    def forward(self, x, mean, var):
        return (torch.nn.functional.batch_norm(x, mean, var, training=True),
                torch.nn.functional.avg_pool2d(x, 9, 1, 4),
                torch.nn.functional.max_pool2d(x, 9, 1, 4))


def test_batch_norms_global_pools_and_reductions_over_several_dims_run_in_kiln(cache_dir):
    torch.manual_seed(0)
    model = NormsAndPools().eval()
    dims = ({0: torch.export.Dim("B", max=8)},)
    ep = torch.export.export(model, (torch.randn(2, 3, 4, 5),), dynamic_shapes=dims,
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    # Before: the batch norms, the pools and each reduction over several dims fell back.
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    for b in (1, 2, 5):
        x = torch.randn(b, 3, 4, 5)
        for got, want in zip(program(x), model(x)):
            assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # A model in f16 or bf16 (statistics too): taken in f32 and rounded once, as in eager.
    for dtype in (torch.float16, torch.bfloat16):
        norm = copy.deepcopy(model.bn).to(dtype)
        x = torch.randn(2, 3, 8, 8, dtype=dtype)
        half = kiln.torch.compile_exported(torch.export.export(norm, (x,), strict=False),
                                           target="cpu", precision="highest",
                                           cache_dir=cache_dir, fallbacks="allow")
        assert not half.fallbacks
        assert torch.equal(half(x), norm(x)), dtype
    ep = torch.export.export(InPyTorch(), (torch.randn(2, 3, 4, 4), torch.zeros(3),
                                           torch.ones(3)), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    reasons = sorted(f.reason for f in program.fallbacks)
    assert reasons == ["a batch norm in training (of the batch's statistics)",
                       "a max pool of 81 kernel offsets (kiln takes up to 64)",
                       "an average pool of 81 kernel offsets (kiln takes up to 64)"], reasons


class GroupAndWeightNorms(torch.nn.Module):
    """Group norms (of an image, of a conv1d's output with a group a channel as wav2vec2's, with
    no affine, in bf16), a weight norm's weight feeding a conv1d of 80 kernel offsets in two
    groups (wav2vec2's positional convolution, smaller), a weight norm along dim 0, and a
    concat of 100 slices."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.image = torch.nn.GroupNorm(2, 6)
        self.channels = torch.nn.GroupNorm(6, 6)
        self.plain = torch.nn.GroupNorm(3, 6, affine=False)
        self.low = torch.nn.GroupNorm(3, 6).to(torch.bfloat16)
        for norm in (self.image, self.channels, self.low):
            norm.weight.data.uniform_(0.5, 1.5)
            norm.bias.data.uniform_(-1, 1)
        conv = torch.nn.Conv1d(6, 6, 80, padding=40, groups=2)
        self.pos = torch.nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
        self.v = torch.nn.Parameter(torch.randn(5, 3, 2))
        self.g = torch.nn.Parameter(torch.rand(5, 1, 1) + 0.5)

    def forward(self, x):
        a = x[:, :, 0]
        return (self.image(x), self.channels(a), self.plain(x), self.low(x.to(torch.bfloat16)),
                self.pos(a)[:, :, :-1], torch._weight_norm(self.v, self.g, 0),
                torch.cat([a[:, :, i % 7:i % 7 + 1] for i in range(100)], dim=-1))


def test_group_norms_weight_norms_and_long_convolutions_run_in_kiln(cache_dir):
    model = GroupAndWeightNorms().eval()
    dims = ({0: torch.export.Dim("B", max=8)},)
    with torch.no_grad():
        ep = torch.export.export(model, (torch.randn(2, 6, 7, 5),), dynamic_shapes=dims,
                                 strict=False)
    assert "group_norm" in str(ep.graph) and "_weight_norm" in str(ep.graph)
    # As exported and decomposed (native_group_norm). Before: the group norms, the weight norm
    # and the convolution of more than 64 offsets fell back, and so did a concat of more than 64.
    for e in (ep, ep.run_decompositions()):
        program = one_kiln_graph(e, cache_dir)
        for b in (1, 3):
            x = torch.randn(b, 6, 7, 5)
            with torch.no_grad():
                want = model(x)
            for got, w in zip(program(x), want):
                assert got.dtype == w.dtype and got.shape == w.shape, (got.shape, w.shape)
                tol = 8e-3 if w.dtype == torch.bfloat16 else 1e-5  # bf16: 1 ulp
                torch.testing.assert_close(got, w, rtol=tol, atol=tol)


class Upsamples(torch.nn.Module):
    """F.interpolate: nearest by whole factors (2d by 2, 1d by 3, to a size); bilinear by 2, by
    4 and to a size (W doubled, H kept), in bf16, and to any size: up by 7/4 and 16/5, down, by
    1.5, by 3, to its own size (each position its own two sources), align_corners up and down,
    to one element; linear (1d) to a size and down with align_corners; nn.Upsample."""
    def forward(self, x):
        up = torch.nn.functional.interpolate
        return (up(x, scale_factor=2), up(x[:, 0], scale_factor=3), up(x, size=(8, 15)),
                up(x, scale_factor=2, mode="bilinear"), up(x, scale_factor=4.0, mode="bilinear"),
                up(x, size=(4, 10), mode="bilinear"),
                up(x.to(torch.bfloat16), scale_factor=2, mode="bilinear"),
                torch.nn.Upsample(scale_factor=2)(x),
                up(x, size=(7, 16), mode="bilinear"), up(x, size=(2, 3), mode="bilinear"),
                up(x, scale_factor=1.5, mode="bilinear"), up(x, scale_factor=3, mode="bilinear"),
                up(x, size=(4, 5), mode="bilinear"),
                up(x, scale_factor=2, mode="bilinear", align_corners=True),
                up(x, size=(9, 3), mode="bilinear", align_corners=True),
                up(x, size=(1, 1), mode="bilinear"), up(x[:, 0], size=11, mode="linear"),
                up(x[:, 0], scale_factor=0.5, mode="linear", align_corners=True))


class UpsamplesInPyTorch(torch.nn.Module):
    """'nearest-exact' and an antialiased bilinear resize."""
    def forward(self, x):
        up = torch.nn.functional.interpolate
        return (up(x, size=(6, 7), mode="nearest-exact"),
                up(x, size=(2, 3), mode="bilinear", antialias=True))


class NearestAndTrilinear(torch.nn.Module):
    """Nearest to sizes that are not multiples (up to 6 x 7, down to 3 x 2) and by 3.1 (4
    positions to 12 read 0, 0, 0, 0, 1, ...: PyTorch's step is 1 / 3.1, so not each one 3
    times) and 0.6; in 2-D by 1.1 and 2.2 (eager's 2-D kernel copies to the same size and
    reads j // 2 to twice it, whatever the factor), and 1-D by 1.1 (the step: 0, 0, 1, 2);
    nearest over 3 dims by 2 and to a size; trilinear up, down, with align_corners, and in
    bf16."""
    def forward(self, x):
        up = torch.nn.functional.interpolate
        v = x.reshape(x.shape[0], 3, 2, 2, 5)
        return (up(x, size=(6, 7)), up(x, size=(3, 2)), up(x, scale_factor=3.1),
                up(x, scale_factor=0.6), up(x, scale_factor=(1.1, 2.2)),
                up(x[:, 0], scale_factor=1.1), up(v, scale_factor=2), up(v, size=(3, 5, 2)),
                up(v, size=(3, 5, 7), mode="trilinear"),
                up(v, scale_factor=0.5, mode="trilinear"),
                up(v, size=(4, 3, 9), mode="trilinear", align_corners=True),
                up(v.to(torch.bfloat16), scale_factor=1.5, mode="trilinear"))


def test_nearest_to_any_size_and_trilinear_upsamples_run_in_kiln(cache_dir):
    dims = ({0: torch.export.Dim("B", max=8)},)
    ep = torch.export.export(NearestAndTrilinear(), (torch.randn(2, 3, 4, 5),),
                             dynamic_shapes=dims, strict=False)
    program = one_kiln_graph(ep, cache_dir)  # before: each in PyTorch
    for b in (1, 3):
        x = torch.randn(b, 3, 4, 5)
        for k, (got, want) in enumerate(zip(program(x), NearestAndTrilinear()(x))):
            assert got.dtype == want.dtype and got.shape == want.shape, (k, got.shape, want.shape)
            if k < 8:  # copies
                assert torch.equal(got, want), k
            else:
                tol = 8e-3 if want.dtype == torch.bfloat16 else 1e-6
                torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_an_upsample_runs_in_kiln_nearest_by_whole_factors_linear_to_any_size(cache_dir):
    dims = ({0: torch.export.Dim("B", max=8)},)
    ep = torch.export.export(Upsamples(), (torch.randn(2, 3, 4, 5),), dynamic_shapes=dims,
                             strict=False)
    # Before: each upsample fell back ("no kiln op"); then bilinear ones other than by powers
    # of two, or with align_corners.
    program = one_kiln_graph(ep, cache_dir)
    nearest = (0, 1, 2, 7)
    # Steps whose source index rounds alike once or twice: PyTorch's bilinear kernel for small
    # outputs rounds it once on an AVX2 CPU (a fused multiply-add), its generic one and kiln
    # twice, so by 3 a weight of 1.5e-8 there is 0 here, and where it meets an inf, inf is NaN.
    inexact = (8, 9, 10, 11)
    for b in (1, 3):
        x = torch.randn(b, 3, 4, 5)
        for k, (got, want) in enumerate(zip(program(x), Upsamples()(x))):
            assert got.dtype == want.dtype and got.shape == want.shape, (k, got.shape, want.shape)
            if k in nearest:  # copies
                assert torch.equal(got, want), k
            else:
                tol = 8e-3 if want.dtype == torch.bfloat16 else 1e-6
                torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        # Copied as they are by nearest; where a linear weight reaches an inf, inf, and where
        # a weight of 0 meets one, NaN, at PyTorch's positions.
        x[0, 0, 1, 2], x[-1, 1, 0, 0], x[0, 2, 3, 4] = float("inf"), float("nan"), -float("inf")
        for k, (got, want) in enumerate(zip(program(x), Upsamples()(x))):
            if k not in inexact:
                assert torch.equal(got.isnan(), want.isnan()), k
                assert torch.equal(got.isinf(), want.isinf()), k
            fine = want.isfinite() & got.isfinite()
            if k in nearest:
                assert torch.equal(got[fine], want[fine]), k
            elif want.dtype == torch.float32:
                torch.testing.assert_close(got[fine], want[fine], rtol=1e-6, atol=1e-6)
    ep = torch.export.export(UpsamplesInPyTorch(), (torch.randn(2, 3, 4, 5),), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert sorted(f.op for f in program.fallbacks) == [
        "aten._upsample_bilinear2d_aa.vec", "aten._upsample_nearest_exact2d.vec"], \
        program.fallbacks


class Bicubics(torch.nn.Module):
    """F.interpolate(mode="bicubic"): up to a size, by 2, by 1.7, down (to 3 x 2, where the
    taps reach past both edges), to its own size, to one element, align_corners, in bf16."""
    def forward(self, x):
        up = torch.nn.functional.interpolate
        return (up(x, size=(9, 13), mode="bicubic"), up(x, scale_factor=2, mode="bicubic"),
                up(x, scale_factor=1.7, mode="bicubic"), up(x, size=(3, 2), mode="bicubic"),
                up(x, size=(4, 5), mode="bicubic"), up(x, size=(1, 1), mode="bicubic"),
                up(x, size=(8, 11), mode="bicubic", align_corners=True),
                up(x.to(torch.bfloat16), size=(6, 6), mode="bicubic"))


def test_a_bicubic_upsample_runs_in_kiln_to_any_size(cache_dir):
    dims = ({0: torch.export.Dim("B", max=8)},)
    ep = torch.export.export(Bicubics(), (torch.randn(2, 3, 4, 5),), dynamic_shapes=dims,
                             strict=False)
    program = one_kiln_graph(ep, cache_dir)  # before: "no kiln op for it", each
    for b in (1, 3):
        x = torch.randn(b, 3, 4, 5)
        for k, (got, want) in enumerate(zip(program(x), Bicubics()(x))):
            assert got.dtype == want.dtype and got.shape == want.shape, (k, got.shape, want.shape)
            # The weights are the C++ source's f32 expressions; PyTorch's x86-64 builds fuse
            # some of their multiply-adds, so a weight can be ~1e-7 apart.
            tol = 8e-3 if want.dtype == torch.bfloat16 else 1e-5
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        # Every one of the 16 taps is kept where its weight is 0: inf and NaN where eager's are.
        x[0, 0, 1, 2], x[-1, 1, 0, 0], x[0, 2, 3, 4] = float("inf"), float("nan"), -float("inf")
        for k, (got, want) in enumerate(zip(program(x), Bicubics()(x))):
            assert torch.equal(got.isnan(), want.isnan()), k
            assert torch.equal(got.isinf(), want.isinf()), k


class SplitsAndNorms(torch.nn.Module):
    """tensor_split at indices (one negative, one past the end: an empty last piece, unused)
    and into sections; vector norms of ord 2 over two dims kept, 1 over one, inf, 3, over every
    dim, and of a bf16 tensor."""
    def forward(self, x):
        a, b, c, _ = torch.tensor_split(x, [2, -3, 99], dim=-1)
        d, e, f = torch.tensor_split(x, 3, dim=1)
        norm = torch.linalg.vector_norm
        return (a, b, c, d, e, f, norm(x, 2, dim=(1, 2), keepdim=True), norm(x, 1, dim=-1),
                norm(x, float("inf"), dim=1), norm(x, 3, dim=(0, 2)), norm(x),
                norm(x.to(torch.bfloat16), dim=-1))


def test_tensor_splits_and_vector_norms_run_in_kiln(cache_dir):
    ep = torch.export.export(SplitsAndNorms(), (torch.randn(2, 7, 9),), strict=False)
    program = one_kiln_graph(ep, cache_dir)  # before: "no kiln op for it", each
    x = torch.randn(2, 7, 9)
    x[1, 3, 4] = 40.0
    for k, (got, want) in enumerate(zip(program(x), SplitsAndNorms()(x))):
        assert got.dtype == want.dtype and got.shape == want.shape, (k, got.shape, want.shape)
        if k < 6:  # the pieces: copies
            assert torch.equal(got, want), k
        else:
            tol = 8e-3 if want.dtype == torch.bfloat16 else 1e-6
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)


class ScalarConstants(torch.nn.Module):
    """Ops of constants of shape [] alone: a product, an exp, a compare and an integer floor
    division of literals; an f16 constant holds its value rounded to f16 (0.1 is
    0.0999755859375)."""
    def forward(self, x):
        return (x * torch.full((), 2.0) * 4 + torch.full((), 0.5).exp() +
                (torch.full((), 3) < 4) - torch.full((), 7) // 2,
                torch.full((), 3) * torch.full((), 0.1, dtype=torch.float16))


def test_ops_of_constants_of_shape_nothing_alone_run_in_kiln(cache_dir):
    ep = torch.export.export(ScalarConstants(), (torch.randn(4, 3),), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    # Before: kiln refused each ("mul needs at least one tensor operand").
    assert not program.fallbacks, program.fallbacks
    x = torch.randn(4, 3)
    got, want = program(x), ScalarConstants()(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1].dtype == torch.float16 and torch.equal(got[1], want[1]), (got[1], want[1])


class DerivedDims(torch.nn.Module):
    """Inputs whose sizes torch.export derives from another's: y of 3 * L (read by kiln as
    [L, 3]), z of 2 * L + 1 (left to PyTorch)."""
    def forward(self, x, y, z):
        return x.reshape(-1) * 2 + y, torch.tanh(z).sum(0)


def test_a_derived_dim_is_checked_against_its_dims_before_anything_runs(cache_dir, tmp_path):
    length = torch.export.Dim("L", min=2, max=16)
    ep = torch.export.export(DerivedDims(), (torch.randn(4, 3), torch.randn(12), torch.randn(9)),
                             dynamic_shapes=({0: length}, {0: 3 * length}, {0: 2 * length + 1}),
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert "input y: f32[L, 3]" in program.partitions[0]
    program.save(tmp_path / "saved")
    loaded = kiln.torch.load(tmp_path / "saved", cache_dir=cache_dir, fallbacks="allow")
    for p in (program, loaded):
        args = (torch.randn(5, 3), torch.randn(15), torch.randn(11))
        for got, want in zip(p(*args), DerivedDims()(*args)):
            torch.testing.assert_close(got, want)
        # Before: a view of y as [5, 3] failed inside the kiln graph's call.
        with pytest.raises(kiln.RuntimeError,
                           match=r"^input 'y' dim 0 must be 3\*L = 15 \(L = 5\), got 14 "
                                 r"\(\[3\*L\]\)$"):
            p(torch.randn(5, 3), torch.randn(14), torch.randn(11))
        with pytest.raises(kiln.RuntimeError,
                           match=r"^input 'z' dim 0 must be 2\*L \+ 1 = 11 \(L = 5\), got 10"):
            p(torch.randn(5, 3), torch.randn(15), torch.randn(10))
    meta = json.loads((tmp_path / "saved" / "kiln.json").read_text())
    assert meta["input_dims"] == {"x": ["L", 3], "y": ["3*L"], "z": ["2*L + 1"]}
    for bad in ("3*Q", "3*L +", "L**2", "3*L; import os"):
        meta["input_dims"]["y"] = [bad]
        (tmp_path / "saved" / "kiln.json").write_text(json.dumps(meta))
        with pytest.raises(kiln.Error, match="malformed.*input 'y'"):
            kiln.torch.load(tmp_path / "saved", cache_dir=cache_dir, fallbacks="allow")


class PyTorchFirst(torch.nn.Module):
    """An input read first by an op kiln leaves to PyTorch (cumprod), so the first kiln graph's
    input is an intermediate; a second input sharing the batch dim."""
    def forward(self, x, y):
        return torch.tanh(x.cumprod(1)) + y[:, None, :]


def test_a_wrong_input_shape_is_named_by_the_users_input_before_anything_runs(cache_dir,
                                                                                 tmp_path):
    dims = ({0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", min=2, max=10)},
            {0: torch.export.Dim("B", max=8)})
    ep = torch.export.export(PyTorchFirst(), (torch.randn(2, 5, 4), torch.randn(2, 4)),
                             dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [f.op for f in program.fallbacks] == ["aten.cumprod.default"]
    assert "input _cumprod" in program.partitions[0]  # the graph's own input
    program.save(tmp_path / "saved")
    loaded = kiln.torch.load(tmp_path / "saved", cache_dir=cache_dir, fallbacks="allow")
    opened = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                         cache_dir=cache_dir, fallbacks="allow", max_dim=6)
    for p, x, y, message in [
            (program, torch.randn(2, 1, 4), torch.randn(2, 4),
             r"input 'x' dim 1: S = 1 is outside its range 2\.\.10$"),
            (loaded, torch.randn(2, 11, 4), torch.randn(2, 4),
             r"input 'x' dim 1: S = 11 is outside its range 2\.\.10$"),
            (program, torch.randn(2, 5, 3), torch.randn(2, 4),
             r"input 'x' dim 2 must be 4, got 3 \(\[B, S, 4\]\)$"),
            (loaded, torch.randn(5, 4), torch.randn(2, 4),
             r"input 'x' must have rank 3 \(\[B, S, 4\]\), got \[5, 4\]$"),
            (program, torch.randn(2, 5, 4), torch.randn(3, 4),
             r"input 'y' dim 0: B = 3, but input 'x' dim 0 has B = 2$"),
            (opened, torch.randn(2, 7, 4), torch.randn(2, 4),
             r"input 'x' dim 1: S = 7 is outside its range 2\.\.6 \(max_dim=6 capped "
             r"it: compile with a larger max_dim\)$")]:
        with pytest.raises(kiln.RuntimeError, match=message):
            p(x, y)
    x, y = torch.randn(3, 10, 4), torch.randn(3, 4)
    for p in (program, loaded):
        torch.testing.assert_close(p(x, y), PyTorchFirst()(x, y))
    meta = json.loads((tmp_path / "saved" / "kiln.json").read_text())
    meta["input_dims"]["x"][1] = "nowhere"
    (tmp_path / "saved" / "kiln.json").write_text(json.dumps(meta))
    with pytest.raises(kiln.Error, match="malformed.*input 'x'"):
        kiln.torch.load(tmp_path / "saved", cache_dir=cache_dir, fallbacks="allow")
    del meta["input_dims"], meta["dims"]  # as saved before these were kept: no check
    (tmp_path / "saved" / "kiln.json").write_text(json.dumps(meta))
    older = kiln.torch.load(tmp_path / "saved", cache_dir=cache_dir, fallbacks="allow")
    torch.testing.assert_close(older(x, y), PyTorchFirst()(x, y))
    # A dim no kiln graph reads binds nothing: PyTorch alone takes 1 (below torch's range, which
    # starts at 2) and sizes past max_dim, as ep.module() does.
    sort = torch.export.export(Sorted(), (torch.randn(4, 3),),
                               dynamic_shapes=({0: torch.export.Dim.AUTO},), strict=False)
    alone = kiln.torch.compile_exported(sort, target="cpu", cache_dir=cache_dir,
                                        fallbacks="allow", max_dim=64)
    assert alone.partitions == []
    for rows in (1, 65):
        x = torch.randn(rows, 3)
        assert torch.equal(alone(x), Sorted()(x))


class Sorted(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, 0).values


class SizeAsValue(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x) * (x.shape[1] // x.shape[0]), y + 1  # a size divided by a size


def test_dims_take_the_exports_dim_names_where_kiln_can(cache_dir, tmp_path):
    """kiln's dims take the torch.export.Dim names: in each graph, in the fallback reasons and in
    the input checks. A name kiln could confuse (an input's, an op's) and a program that
    torch.export.load made (its shape environment keeps no names) keep torch's symbols."""
    x, y = torch.randn(2, 6), torch.randn(2, 4)

    def program_of(batch, seq, ep=None):
        if ep is None:
            dims = {"x": {0: torch.export.Dim(batch, max=8), 1: torch.export.Dim(seq, max=64)},
                    "y": {0: torch.export.Dim(batch, max=8)}}
            ep = torch.export.export(SizeAsValue(), (x, y), dynamic_shapes=dims, strict=False)
        return ep, kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                               cache_dir=cache_dir, fallbacks="allow")

    ep, named = program_of("batch", "seq")
    dims = sorted(line for part in named.partitions for line in part.splitlines()
                  if line.startswith("  dim "))
    assert dims == ["  dim batch: 1..8", "  dim seq: 1..64"]
    assert [(f.op, f.reason) for f in named.fallbacks] == [
        ("aten.mul.Tensor", "a size (seq//batch) as a value (kiln divides sizes by a positive "
         "whole number)")]
    with pytest.raises(kiln.RuntimeError, match=r"input 'x' dim 1: seq = 65 is outside its "
                                                r"range 1\.\.64$"):
        named(torch.randn(2, 65), y)
    with pytest.raises(kiln.RuntimeError, match=r"input 'y' dim 0: batch = 3, but input 'x' "
                                                r"dim 0 has batch = 2$"):
        named(x, torch.randn(3, 4))
    for got, want in zip(named(x, y), SizeAsValue()(x, y)):
        torch.testing.assert_close(got, want)

    _, confusable = program_of("y", "roll")  # an input's name, an op's
    buffer = tmp_path / "ep.pt2"
    torch.export.save(ep, buffer)
    _, reloaded = program_of(None, None, torch.export.load(buffer))
    for program in (confusable, reloaded):
        text = "\n".join(program.partitions)
        assert re.findall(r"^  dim (\w+):", text, re.M) and all(
            re.fullmatch(r"s\d+", d) for d in re.findall(r"^  dim (\w+):", text, re.M)), text
        assert re.fullmatch(r"a size \(s\d+//s\d+\) as a value .*",
                            program.fallbacks[0].reason)
        for got, want in zip(program(x, y), SizeAsValue()(x, y)):
            torch.testing.assert_close(got, want)


def test_every_kiln_op_is_a_reserved_word():
    """A placeholder or dim named as an op (`roll`, `cumsum`) would be refused by kiln's parser:
    kiln_name gives it a `_`. The reserved words cover every op of ir/ops.def."""
    ops_def = (pathlib.Path(__file__).resolve().parents[2] / "ir" / "ops.def").read_text()
    ops = re.findall(r"^KILN_OP\((\w+),", ops_def, re.M)
    assert len(ops) > 50
    assert [op for op in ops if kiln.torch._lower.kiln_name(op) == op] == []


class HalfSizes(torch.nn.Module):
    """Half tensors with sizes, numbers and alpha, as PyTorch's CPU kernels compute them: in
    f32, rounded once; `mul` and `div` take a size as it is (B * S past 65504 is no inf in f16,
    2049 is not 2048), `add` and `sub` a size or a number rounded to the half type first, times
    `alpha` in f32."""
    def forward(self, h, b):
        rows, cols = h.shape
        return (h / (rows * cols), h * cols, b * cols, b / cols, h - (cols - 1), h + cols,
                b - cols, torch.add(h, cols, alpha=3), torch.sub(b, rows * cols, alpha=-2),
                h + 2049, b - 257, torch.add(h, 2049, alpha=3))


def test_a_half_tensor_with_a_size_rounds_once_as_in_eager(cache_dir):
    dims = ({0: torch.export.Dim("B", max=64), 1: torch.export.Dim("S", min=2, max=40000)},) * 2
    ep = torch.export.export(HalfSizes(), (torch.ones(2, 3, dtype=torch.float16),
                                           torch.ones(2, 3, dtype=torch.bfloat16)),
                             dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow", max_dim=40000)
    assert program.fallbacks == [] and len(program.executables) == 1
    g = torch.Generator().manual_seed(3)
    for rows, cols in [(32, 2049), (1, 257), (3, 5), (2, 32769)]:
        h = (torch.randn(rows, cols, generator=g) * 8).to(torch.float16)
        b = (torch.randn(rows, cols, generator=g) * 8).to(torch.bfloat16)
        for got, want in zip(program(h, b), HalfSizes()(h, b)):
            assert got.dtype == want.dtype and torch.equal(got, want), (rows, cols, got, want)


class OtherPicks(torch.nn.Module):
    """Index forms kiln leaves to PyTorch, each with its reason: a row picked per batch entry
    from integers, and ids of shape [B, 1]."""
    def __init__(self, form):
        super().__init__()
        self.form = form

    def forward(self, h, ids):
        rows = torch.arange(h.shape[0])
        return h.long()[rows, ids] if self.form == "int" else h[rows[:, None], ids[:, None]]


@pytest.mark.parametrize("form, reason", [
    ("int", "x[arange(B), ids] of i64 (kiln picks a row per batch entry from a float tensor)"),
    ("column", "advanced indexing other than kiln's four forms (x[arange, arange, ...]; "
               "constant positions along one dim; table[ids]; x[arange(B), ids] with ids of "
               "shape [B])")])
def test_an_index_kiln_leaves_to_pytorch_says_which_forms_it_takes(cache_dir, form, reason):
    h, ids = torch.randn(3, 5, 2), torch.tensor([0, 4, 2])
    module = OtherPicks(form)
    ep = torch.export.export(module, (h, ids), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.count, f.reason) for f in program.fallbacks] == \
        [("aten.index.Tensor", 1, reason)]
    assert torch.equal(program(h, ids), module(h, ids))


class SelectAtABuffer(torch.nn.Module):
    """t[:, buf] with buf a 0-d integer buffer: exported as buf's item() and a select at it."""
    def __init__(self):
        super().__init__()
        self.register_buffer("at", torch.tensor(2))

    def forward(self, t):
        return t[:, self.at] * 2


def test_a_select_at_a_position_computed_in_the_program_stays_in_pytorch(cache_dir):
    module, t = SelectAtABuffer(), torch.randn(3, 5)
    ep = torch.export.export(module, (t,), strict=False)
    # Before: a TypeError from the lowering (the position is a node, not a number).
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.reason) for f in program.fallbacks if "select" in f.op] == \
        [("aten.select.int", "a select at a position computed in the program")], \
        program.fallbacks
    assert torch.equal(program(t), module(t))


class IntegerArgmax(torch.nn.Module):
    """argmax and argmin of i32 and i64 along either dim, and of i32 that wrapped (`a * 3 - 7`);
    max and min along a dim (values and positions, kept or not)."""
    def forward(self, a, b):
        return (a.argmax(-1), b.argmax(-1), a.argmax(0, keepdim=True), b.argmax(0),
                (a * 3 - 7).argmax(1), a.argmin(-1), b.argmin(1), b.argmin(0, keepdim=True),
                (a * 3 - 7).argmin(1), *a.max(1), *b.min(-1, keepdim=True), *b.max(0),
                *a.min(0, keepdim=True))


def integer_argmax_inputs(b, s, seed):
    """Random i32 and i64 over their whole range; row 0 holds values next to the top that round
    to one float (2^31 - 1, 2^31 - 2, ...), row 1 the bottom of the range (its min, the first
    of many) with the max one above it, twice in i64 (the first wins), row 2 values around 2^24
    (i32) and 2^40 (i64) that differ by less than a float's spacing there."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-2**31, 2**31 - 1, (b, s), dtype=torch.int32, generator=g)
    x = torch.randint(-2**63, 2**63 - 1, (b, s), dtype=torch.int64, generator=g)
    a[0, :4] = torch.tensor([2**31 - 2, 2**31 - 1, 2**31 - 1, 2**31 - 100])
    x[0, :4] = torch.tensor([2**63 - 2, 2**63 - 1, 2**63 - 1, 2**63 - 100])
    if b > 1:
        a[1], x[1] = -2**31, -2**63
        a[1, 3], x[1, 5], x[1, 6] = -2**31 + 1, -2**63 + 1, -2**63 + 1
    if b > 2:
        a[2] = 2**24 + torch.randint(-3, 3, (s,), dtype=torch.int32, generator=g)
        x[2] = 2**40 + 12345 + torch.randint(-3, 3, (s,), generator=g)
    return a, x


@pytest.mark.parametrize("target", ["cpu", "emulate:sm_90"])
def test_argmax_argmin_max_and_min_of_integers_are_exact_over_their_whole_range(cache_dir,
                                                                                  target):
    dims = ({0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", min=8, max=64)},) * 2
    ep = torch.export.export(IntegerArgmax(), integer_argmax_inputs(3, 10, 0),
                             dynamic_shapes=dims, strict=False)
    program = kiln.torch.compile_exported(ep, target=target, precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert program.fallbacks == [] and len(program.executables) == 1
    # The first position of each extreme is found once (`neg(reshape(arange(`, the positions
    # negated): 9 for the argmaxes and argmins, 4 for the max and min, whose values and
    # positions read the same.
    assert program.partitions[0].count("neg(reshape(arange(") == 13, program.partitions[0]
    for seed, (b, s) in enumerate([(3, 10), (1, 8), (4, 33), (2, 64)]):
        args = integer_argmax_inputs(b, s, seed)
        for got, want in zip(program(*args), IntegerArgmax()(*args)):
            assert torch.equal(got, want), (b, s, got, want)


class BoundedByTheDivisor(torch.nn.Module):
    def forward(self, ids):
        return (ids % 7).argmin(-1), (ids % -5).argmax(-1)


def test_a_remainder_is_bounded_by_its_divisor_whatever_it_divides(cache_dir):
    """`ids % 7` lies in 0..6 whatever ids hold, so its argmin compares in one f32 round (two
    maxes: the values', the positions'), where ids' own would take three."""
    ids = torch.randint(-2**62, 2**62, (3, 9))
    _, program = compiled(BoundedByTheDivisor(), (ids,), cache_dir)
    assert not program.fallbacks and len(program.executables) == 1
    text = program.partitions[0]
    assert text.count("max(") == 4, text
    ids[0, 3] = ids[0, 5] = 7 * 2**40  # ties at 0, the first wins
    for got, want in zip(program(ids), BoundedByTheDivisor()(ids)):
        assert torch.equal(got, want), (got, want)


class Pads(torch.nn.Module):
    """F.pad with a constant: after, before, both, a crop (a negative pad), bool and integer
    values, bf16, all-zero pads mid-graph, a crop of integers by an infinite value (never
    written); a pad of the symbolic batch dim stays in PyTorch (its size is B + 1)."""
    def forward(self, x, m):
        return (F.pad(x, (1, 2)), F.pad(x, (0, 0, 3, 1), value=-1.5), F.pad(x, (-1, 2, 1, -2)),
                F.pad(m, (2, 0), value=True), F.pad(x.long(), (1, 1), value=7),
                F.pad(x.to(torch.bfloat16), (0, 1, 1, 0), value=2.0),
                F.pad(x, (0, 0, 0, 0, 1, 0)), F.pad(x * 2, (0, 0)) + 1,
                F.pad(x.long(), (-1, -2), value=float("-inf")))


def test_a_constant_pad_is_a_concat_in_kiln(cache_dir):
    x, m = torch.randn(2, 5, 6), torch.rand(2, 5) > 0.5
    dims = ({0: torch.export.Dim("B", max=8)}, {0: torch.export.Dim("B2", max=8)})
    ep = torch.export.export(Pads(), (x, m), dynamic_shapes=dims, strict=False)
    assert "constant_pad_nd" in str(ep.run_decompositions().graph)
    for e in (ep, ep.run_decompositions()):  # aten.pad, and constant_pad_nd decomposed
        program = kiln.torch.compile_exported(e, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert len(program.fallbacks) == 1 and program.fallbacks[0].count == 1, program.fallbacks
        assert "s" in program.fallbacks[0].reason and "+ 1" in program.fallbacks[0].reason
        for b in (2, 3):
            x, m = torch.randn(b, 5, 6), torch.rand(b, 5) > 0.5
            for got, want in zip(program(x, m), Pads()(x, m)):
                torch.testing.assert_close(got, want, rtol=0, atol=0)


class Scatters(torch.nn.Module):
    """Writes into a select or a slice, as functionalisation leaves them (select_scatter,
    slice_scatter): BART's shift of ids right (into a slice of size S - 1 from a window of
    size S - 1), a row at 0 and at -1 of a symbolic dim, a constant into the last two, a window
    moved along the sequence, and a slice of a fixed dim (a concat); from a start before the
    first position at every size (clamped at 0, as PyTorch does); x[:, -1] read along the
    symbolic dim too."""
    def forward(self, ids, x, v, w):
        shifted = ids.new_zeros(ids.shape)
        shifted[:, 1:] = ids[:, :-1].clone()
        shifted[:, 0] = 2
        shifted.masked_fill_(shifted == -100, 1)
        y = x * 2
        y[:, 0] = v
        y[:, -1] = 7.0
        y[:, -2:] = 3.0
        z = x + 1
        z[:, 2:] = x[:, 1:-1]
        u = torch.zeros_like(x)
        u[:, :-1] = z[:, 1:]
        h = x[:, 0] * 2
        h[:, 2:5] = w
        h[:, -1:] = -1.0
        c = x.clone()
        c[:, -100:-1] = 5.0
        d = x * 3
        d[:, -100:] = x[:, -100:]
        return shifted, y, z, u, h, x[:, -1] - x[:, -2], c, d


def scatter_inputs(b, s, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(-100, 100, (b, s), generator=g)
    return (ids, torch.randn(b, s, 8, generator=g), torch.randn(b, 8, generator=g),
            torch.randn(b, 3, generator=g))


def test_writes_into_selects_and_slices_run_in_kiln_as_in_eager(cache_dir):
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=4, max=40)
    dims = ({0: B, 1: S}, {0: B, 1: S}, {0: B}, {0: B})
    ep = torch.export.export(Scatters(), scatter_inputs(2, 10, 0), dynamic_shapes=dims,
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert program.fallbacks == [] and len(program.executables) == 1, program.fallbacks
    assert "roll(" in program.partitions[0]
    for seed, (b, s) in enumerate([(2, 10), (1, 4), (3, 40), (4, 5)]):
        args = scatter_inputs(b, s, seed)
        for got, want in zip(program(*args), Scatters()(*args)):
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=0, atol=0)


class TensorsIntoSlices(torch.nn.Module):
    """Tensors of their own written at fixed positions along a symbolic dim (`y[:, 1:3] = v`),
    of floats from the first position and of integers, and one kiln does not write (65
    positions: it writes up to 64 one by one)."""
    def forward(self, x, v, ids, new, wide):
        y = x * 2
        y[:, 1:3] = v
        y[:, 0:1] = v[:, 1:] * 3
        i = ids + 1
        i[:, 2:5] = new
        z = x - 1
        z[:, 1:66] = wide
        return y, i, z


def test_a_tensor_written_into_fixed_positions_of_a_symbolic_dim_runs_in_kiln(cache_dir):
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=66, max=100)

    def inputs(b, s):
        return (torch.randn(b, s, 4), torch.randn(b, 2, 4), torch.randint(-9, 9, (b, s)),
                torch.randint(100, 200, (b, 3)), torch.randn(b, 65, 4))

    ep = torch.export.export(TensorsIntoSlices(), inputs(2, 70), strict=False, dynamic_shapes=(
        {0: B, 1: S}, {0: B}, {0: B, 1: S}, {0: B}, {0: B}))
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.count) for f in program.fallbacks] == [("aten.slice_scatter.default", 1)]
    assert "positions 1..66 along a symbolic dim" in program.fallbacks[0].reason
    for b, s in [(2, 70), (1, 66), (3, 100)]:
        args = inputs(b, s)
        for got, want in zip(program(*args), TensorsIntoSlices()(*args)):
            assert got.dtype == want.dtype and got.shape == want.shape, (b, s)
            torch.testing.assert_close(got, want, rtol=0, atol=0)


class IntegerSums(torch.nn.Module):
    """Sums into integers (bool and i32 into i64, wrapping past 2^63 as PyTorch does) along one
    dim, two and with the dim kept; gathers of one position along a dim of i64, float and bool
    tensors (MBart's `ids.gather(1, last)`, each row's last token that is not padding)."""
    def forward(self, ids, x, m):
        last = (ids.ne(1).sum(dim=1) - 1).unsqueeze(-1)
        at = (x[..., 0] > 0).long().sum(1, keepdim=True)[..., None].expand(-1, 1, x.shape[2])
        return (m.sum(1), ids.sum(-1), ids.int().sum(dim=(0, 1)), m.int().sum(0, keepdim=True),
                ids.gather(1, last), x.gather(1, at.clamp(max=3)), m.gather(1, last), m.sum(),
                ids[0, 0].sum(0))


def integer_sum_inputs(b, s, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 100, (b, s), generator=g)
    ids[0, -1] = 2**62
    ids[0, :-1][:2] = 2**62  # three of them: the row's sum wraps
    ids[-1, s // 2:] = 1     # padding
    return ids, torch.randn(b, s, 5, generator=g), torch.rand(b, s, generator=g) > 0.5


def test_sums_into_integers_and_gathers_of_one_position_run_in_kiln_exactly(cache_dir):
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=4, max=40)
    dims = ({0: B, 1: S}, {0: B, 1: S}, {0: B, 1: S})
    ep = torch.export.export(IntegerSums(), integer_sum_inputs(2, 10, 0), dynamic_shapes=dims,
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert program.fallbacks == [] and len(program.executables) == 1, program.fallbacks
    for seed, (b, s) in enumerate([(2, 10), (1, 4), (3, 40), (4, 5)]):
        args = integer_sum_inputs(b, s, seed)
        for got, want in zip(program(*args), IntegerSums()(*args)):
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=0, atol=0)


class Router(torch.nn.Module):
    """A mixture of experts' routing as transformers' batched_mm experts write it: a topk of
    rows (flattened [B*S, E] too, largest and smallest, of bf16 too), each token repeated for
    its k experts (repeat_interleave along the flattened dim), the experts' weights picked by
    id as a table's rows ([E, O, I] at ids [B*S*k]), a bmm, a split of the merged rows."""
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 5, 4))

    def forward(self, x, h):
        v, i = torch.topk(x, 3)
        sv, si = torch.topk(x.reshape(-1, 6), 2, largest=False)
        bv, bi = torch.topk(x.to(torch.bfloat16), 1)
        rows = self.w[si.reshape(-1)]
        hh = h.reshape(-1, 4).repeat_interleave(2, dim=0)
        y = torch.bmm(rows, hh.unsqueeze(-1)).squeeze(-1)
        a, b = y.split([2, 3], dim=-1)
        return v, i, sv, si, bv, bi, (a.sum(-1, keepdim=True) * b).view(-1, 2, 3).sum(1)


def test_a_routers_topk_and_its_experts_picked_by_id_run_in_kiln(cache_dir):
    torch.manual_seed(0)
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=2, max=32)
    x, h = torch.randn(2, 5, 6), torch.randn(2, 5, 4)
    module = Router()
    ep = torch.export.export(module, (x, h), dynamic_shapes=({0: B, 1: S}, {0: B, 1: S}),
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    # Each topk's values and indices read one ranking of its rows (the comparisons of a row's
    # elements by position, `lt(reshape(arange(n)..`, once per topk, not once per output).
    assert program.partitions[0].count("lt(reshape(arange(") == 3, program.partitions[0]
    for b, s in [(2, 5), (3, 7), (1, 32)]:
        # Distinct in bf16 too: 6 steps of 0.37 in a random order along each row.
        x = torch.argsort(torch.rand(b, s, 6), -1).float() * 0.37 - 1
        h = torch.randn(b, s, 4)
        got, want = program(x, h), module(x, h)
        for g, w in zip(got[:6], want[:6]):  # no ties: the same values at the same positions
            assert g.dtype == w.dtype and torch.equal(g, w), (b, s, g, w)
        assert got[6].shape == want[6].shape == (b * s, 3)
        torch.testing.assert_close(got[6], want[6], rtol=1e-5, atol=1e-5)
    # NaN ranks above every number, as in PyTorch; infinities and signed zeros keep their place.
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[[0.5, nan, -inf, inf, -0.0, -2.0], [-inf, 1.0, nan, 0.0, -1.0, 3.0]]])
    for g, w in zip(program(x, torch.randn(1, 2, 4))[:6], module(x, torch.randn(1, 2, 4))[:6]):
        assert torch.equal(g.isnan(), w.isnan()) and torch.equal(g.nan_to_num(), w.nan_to_num())
        assert torch.equal(g.nan_to_num().signbit(), w.nan_to_num().signbit())
    # Equal values: the same values, their positions lowest first (PyTorch's order among them
    # follows its selection algorithm).
    x = torch.tensor([[[1.0, 3.0, 3.0, 2.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0]]])
    v, i = program(x, torch.randn(1, 2, 4))[:2]
    assert torch.equal(v, torch.topk(x, 3).values)
    assert i.tolist() == [[[1, 2, 4], [0, 1, 2]]]


def test_a_topk_kiln_cannot_rank_stays_in_pytorch(cache_dir):
    class Odd(torch.nn.Module):
        def forward(self, x, n, wide):
            return torch.topk(wide, 2, dim=0), torch.topk(n, 1), torch.topk(x * 2, 2)

    x, n = torch.randn(3, 5), torch.randint(0, 9, (3, 5))
    wide = torch.randn(1100, 2)
    _, program = compiled(Odd(), (x, n, wide), cache_dir)
    assert [(f.op, f.count, f.reason) for f in program.fallbacks] == [
        ("aten.topk.default", 2, "a topk of 1100 elements (kiln ranks up to 1024); a topk of "
         "i64 (kiln ranks float tensors)")], program.fallbacks
    assert len(program.executables) == 1  # the topk of x * 2
    for got, want in zip(program(x, n, wide), Odd()(x, n, wide)):
        assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_a_topk_along_another_dim_than_the_last_runs_in_kiln(cache_dir):
    """x permuted to rank along its last dim, the result permuted back: along the first dim,
    a middle one, a negative one, a dim after a merged one (rows of [B*S, 6, 4]) and one before
    it ([6, B*S, 4])."""
    class Along(torch.nn.Module):
        def forward(self, x):
            merged = x.reshape(-1, 6, 4)
            return (torch.topk(x, 2, dim=2), torch.topk(x, 3, dim=-2, largest=False),
                    torch.topk(merged, 4, dim=1), torch.topk(x[0, 0], 1, dim=0),
                    torch.topk(merged.transpose(0, 1), 2, dim=0))

    B, S = torch.export.Dim("B", min=2, max=8), torch.export.Dim("S", min=2, max=16)
    ep = torch.export.export(Along(), (torch.randn(2, 3, 6, 4),), dynamic_shapes=({0: B, 1: S},),
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    for b, s in [(2, 3), (3, 7), (8, 16)]:
        x = torch.randn(b, s, 6, 4)  # no ties: the same values at the same positions
        got, want = program(x), Along()(x)
        assert len(got) == len(want) == 5
        for g, w in zip(got, want):
            for gi, wi in zip(g, w):
                assert gi.dtype == wi.dtype and gi.shape == wi.shape, (b, s, gi.shape, wi.shape)
                assert torch.equal(gi, wi), (b, s, gi, wi)


class RouterPicks(torch.nn.Module):
    """DeepSeek-V3's routing pieces: gathers of several positions along a dim (of floats over
    merged rows, integers and bool), a scatter of a value at positions (its group mask), and a
    new_empty whose every element is then copied into."""
    def forward(self, x, at, n, m):
        rows = x.reshape(-1, 6)
        mask = torch.zeros_like(rows).scatter_(1, at.reshape(-1, 2), 1)
        keys = x.new_empty(*x.shape[:-1], 8)
        keys[..., :6].copy_(x)
        keys[..., 6:].copy_(x[..., :2] * 2)
        return (rows.gather(1, at.reshape(-1, 2)), n.gather(0, at[0, :3]), m.gather(2, at),
                mask, torch.ones(2, 6, dtype=torch.bool).scatter(1, at[0, :2], False), keys)


def test_gathers_and_scatters_of_several_positions_run_in_kiln(cache_dir):
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=3, max=32)
    args = (torch.randn(2, 5, 6), torch.randint(0, 6, (2, 5, 2)),
            torch.randint(-9, 9, (6, 2), dtype=torch.int32), torch.rand(2, 5, 6) > 0.5)
    ep = torch.export.export(RouterPicks(), args, dynamic_shapes=(
        {0: B, 1: S}, {0: B, 1: S}, None, {0: B, 1: S}), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    for b, s in [(2, 5), (3, 3), (1, 32)]:
        args = (torch.randn(b, s, 6), torch.randint(0, 6, (b, s, 2)),
                torch.randint(-9, 9, (6, 2), dtype=torch.int32), torch.rand(b, s, 6) > 0.5)
        args[0][0, 0, 1] = -0.0
        args[1][0, 0] = torch.tensor([1, 1])  # the same position twice
        for got, want in zip(program(*args), RouterPicks()(*args)):
            assert got.dtype == want.dtype and torch.equal(got, want), (b, s, got, want)
            assert torch.equal(got.signbit(), want.signbit())


def test_a_gather_or_scatter_kiln_cannot_hold_stays_in_pytorch(cache_dir):
    """Pairs of positions and elements past kiln's 2^31 - 1 elements at the dims' largest
    sizes, and a value its dtype cannot hold (PyTorch raises), leave the op in PyTorch."""
    class Big(torch.nn.Module):
        def forward(self, x, i, h):
            rows, at = (-x).reshape(-1, 256), i.reshape(-1, 8)
            return rows.gather(1, at), rows.scatter(1, at, 1.0), h.scatter(1, i[0, :2], 65519.0)

    B, S = torch.export.Dim("B", max=256), torch.export.Dim("S", min=3, max=4096)
    args = (torch.randn(2, 5, 256), torch.randint(0, 4, (2, 5, 8)),
            torch.randn(2, 8, dtype=torch.float16))
    ep = torch.export.export(Big(), args, dynamic_shapes=({0: B, 1: S}, {0: B, 1: S}, None),
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert sorted((f.op, f.count, f.reason) for f in program.fallbacks) == [
        ("aten.gather.default", 1, "a tensor of 2147483648 elements (kiln's limit is 2^31 - 1)"),
        ("aten.scatter.value", 2, "a tensor of 2147483648 elements (kiln's limit is 2^31 - 1); "
         "a scatter of 65519.0 into a f16 tensor (past its range)")], program.fallbacks
    with pytest.raises(RuntimeError, match="without overflow"):
        program(*args)


class Rounding(torch.nn.Module):
    """floor, ceil and trunc of floats, and divisions rounded down or toward zero by powers of
    two (DETR's sine positions, `torch.div(dim_t, 2, rounding_mode="floor")`), of f16 too."""
    def forward(self, x, h):
        return (x.floor(), x.ceil(), x.trunc(), torch.div(x, 2, rounding_mode="floor"),
                torch.div(x, -0.25, rounding_mode="trunc"), x // 4, h.floor(),
                torch.div(h, 2, rounding_mode="floor"), torch.div(x, -2, rounding_mode="floor"))


def test_floor_ceil_trunc_and_rounded_divisions_by_powers_of_two_run_in_kiln(cache_dir):
    nan, inf = float("nan"), float("inf")
    special = [0.0, -0.0, 0.3, -0.3, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 7.99, -7.99, 2.0**23 + 1,
               -(2.0**23) - 1, 2.0**40 + 0.5 * 2**18, 3e38, -3e38, inf, -inf, nan, 1e-45, -1e-45]
    x = torch.cat([torch.tensor(special), torch.randn(42) * 10, torch.randn(32) * 1e6])
    h = (torch.randn(96) * 100).half()
    _, program = compiled(Rounding(), (x, h), cache_dir)
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    for i, (got, want) in enumerate(zip(program(x, h), Rounding()(x, h))):
        assert got.dtype == want.dtype and torch.equal(got.isnan(), want.isnan()), i
        keep = ~want.isnan()
        assert torch.equal(got[keep], want[keep]), (i, got[keep], want[keep])
        assert torch.equal(got[keep].signbit(), want[keep].signbit()), i


POWERS = (0.5, -0.5, -1, 2, 3, -2, 1.7, -1.3, 4, 2.995, -2.005)  # the last two: 3 and -2 in bf16


class Powers(torch.nn.Module):
    def forward(self, x, b, h):
        return tuple(t ** e for t in (x, b, h) for e in POWERS)


def test_powers_by_a_number_are_computed_as_pytorchs_kernel_computes_them(cache_dir):
    """f32 and bf16: 0.5, -0.5 and -1 as sqrt, rsqrt and a reciprocal (-inf ** 0.5 is NaN,
    -0.0 ** -0.5 is -inf), 2, 3 and -2 as products rounded at each step; bf16 and f16 raise to
    the exponent rounded to their type (bf16 1000 ** 1.7 was 125952 where eager gives 128512),
    and in bf16 an exponent that rounds to 3 or -2 is the products too."""
    special = torch.tensor([-float("inf"), -0.0, 0.0, float("inf"), -2.5, 1000.0, 7.71875, 6.625])
    g = torch.Generator().manual_seed(3)
    x = torch.cat([special, torch.rand(200, generator=g) * 100, torch.randn(40, generator=g)])
    args = (x, x.bfloat16(), x.half())
    _, program = compiled(Powers(), args, cache_dir)
    assert not program.fallbacks, program.fallbacks
    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
    for i, (got, want) in enumerate(zip(program(*args), Powers()(*args))):
        assert got.dtype == want.dtype and torch.equal(got.isnan(), want.isnan()), i
        # Zeros, infinities and the special inputs exact; the rest within two units in the last
        # place: neither side's f32 sqrt rounds correctly on every machine (eager's of 10.556936
        # is 3.2491441 on some, where 3.2491438 is), and eager's bf16 rsqrt rounds twice in its
        # last elements. An f32 power by 1.7 is by f32's 1.7 in kiln and by the double in eager:
        # within 1e-6 of it here.
        exact = (want == 0) | want.isinf()
        exact[:len(special)] = True
        keep = ~want.isnan()
        got, want, exact = got[keep], want[keep], exact[keep]
        assert torch.equal(got.signbit(), want.signbit()), i
        assert torch.equal(got[exact], want[exact]), (i, got[exact], want[exact])
        e = POWERS[i % len(POWERS)]
        if e in (2, 3, -2) and got.dtype != torch.float16 or \
                e in (2.995, -2.005) and got.dtype == torch.bfloat16:  # products, as eager's
            assert torch.equal(got, want), (i, got[got != want], want[got != want])
            continue
        if got.dtype == torch.float32 and e in (1.7, -1.3, 2.995, -2.005):
            assert torch.allclose(got, want, rtol=1e-6, atol=0), i
            continue
        apart = (got.view(bits[got.dtype]).long() - want.view(bits[want.dtype]).long()).abs()
        assert int(apart.max()) <= 2, (i, got[apart > 2], want[apart > 2])


EQUATIONS = [("bhwc,hkc->bhwk", (2, 3, 4, 5), (3, 6, 5)),  # SAM's relative positions
             ("bnqd,bnkd->bnqk", (2, 3, 4, 5), (2, 3, 6, 5)),
             ("ibh,hnd->ibnd", (4, 2, 6), (6, 3, 5)),
             ("bqc, bchw -> bqhw", (2, 4, 5), (2, 5, 3, 6)),
             ("bd,dn->bn", (4, 5), (5, 6)),
             ("bsj,j->bs", (2, 4, 5), (5,)),
             ("blq,bhlk->bhlqk", (2, 3, 4), (2, 5, 3, 6)),  # an outer product per (b, l)
             ("...pd,...qd->...pq", (2, 3, 4, 5), (3, 6, 5)),
             ("bcxd,bcyd", (2, 3, 4, 5), (2, 3, 6, 5)),  # implicit output: b c x y sorted
             ("ijbn->bnij", (2, 3, 4, 5), None),
             ("bij,bjk->bi", (2, 3, 4), (2, 4, 5)),  # k summed in b first
             ("abcd,cd->ab", (2, 3, 4, 5), (4, 5)),  # two summed labels, merged
             ("bxy,bxy->b", (1, 3, 4), (2, 3, 4)),  # a batch of 1 broadcast
             ("ij->j", (3, 4), None)]


class Einsum(torch.nn.Module):
    def __init__(self, equation):
        super().__init__()
        self.equation = equation

    def forward(self, *xs):
        return torch.einsum(self.equation, *xs)


@pytest.mark.parametrize("equation, a, b", EQUATIONS)
def test_an_einsum_is_a_matmul_of_its_operands_arranged(equation, a, b, cache_dir):
    torch.manual_seed(0)
    args = (torch.randn(a),) if b is None else (torch.randn(a), torch.randn(b))
    _, program = compiled(Einsum(equation), args, cache_dir)
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    got, want = program(*args), Einsum(equation)(*args)
    got = got[0] if isinstance(got, (tuple, list)) else got
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_an_einsum_kiln_cannot_arrange_stays_in_pytorch(cache_dir):
    class Odd(torch.nn.Module):
        def forward(self, x, y):
            return torch.einsum("ii->i", x), torch.einsum("ij,jk,kl->il", x, x, x), \
                torch.einsum("abcdef,abcdeg->abcdefg", y, y)

    x, y = torch.randn(3, 3), torch.randn(2, 1, 2, 1, 2, 3)
    _, program = compiled(Odd(), (x, y), cache_dir)
    assert [(f.op, f.count, f.reason) for f in program.fallbacks] == [
        ("aten.einsum.default", 3, "an einsum with a repeated label ('ii->i'); an einsum of "
         "other than one or two tensors; an einsum of more than 4 batch dims")]
    for got, want in zip(program(x, y), Odd()(x, y)):
        torch.testing.assert_close(got, want)


class Sinks(torch.nn.Module):
    """GPT-OSS's attention sinks: each head's logit joins every row of scores, takes a share of
    the softmax and is dropped. The logits less their row's maximum (max.dim, as GPT-OSS writes
    it, or amax) or not, the sink dropped by [..., :-1] or [..., :S]; and a strided slice of a
    flattened batch and sequence (its gate and up of [B*S*k, 2I])."""
    def __init__(self):
        super().__init__()
        self.sinks = torch.nn.Parameter(torch.tensor([2.0, -1.0, 0.5]))

    def forward(self, q, k, x):
        scores = q @ k.transpose(-1, -2) * 0.5
        b, _, s, _ = scores.shape
        logits = torch.cat([scores, self.sinks.reshape(1, -1, 1, 1).expand(b, -1, s, -1)], -1)
        shifted = logits - logits.max(dim=-1, keepdim=True).values
        first = F.softmax(shifted, dim=-1, dtype=shifted.dtype)[..., :-1]
        second = torch.softmax(logits - logits.amax(-1, keepdim=True), -1)[..., :s]
        third = torch.softmax(logits, dim=-1)[..., :-1]
        rows = x.reshape(-1, x.shape[-1])
        return first @ k, second, third, rows[..., ::2] * rows[..., 1::2]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_sinks_run_in_one_kiln_graph(dtype, cache_dir):
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=2, max=40)
    module = Sinks().to(dtype)

    def args(b, s):
        return (torch.randn(b, 3, s, 4, dtype=dtype), torch.randn(b, 3, s, 4, dtype=dtype),
                torch.randn(b, s, 6, dtype=dtype))

    ep = torch.export.export(module, args(2, 5), dynamic_shapes=(
        {0: B, 2: S}, {0: B, 2: S}, {0: B, 1: S}), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    for b, s in [(2, 5), (3, 2), (1, 40)]:
        a = args(b, s)
        a[0][0, 0, 0, 0] = 30.0  # a row whose maximum is a score, far above its sink
        got, want = program(*a), module(*a)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            torch.testing.assert_close(g, w, rtol=tolerance, atol=tolerance)
        # The sinks take their share: the weights of a row add up to well under 1.
        assert (1 - got[2].float().sum(-1)).max() > 0.05


def test_a_sink_of_two_columns_stays_in_pytorch(cache_dir):
    class TwoSinks(torch.nn.Module):
        def forward(self, x, sink):
            return torch.softmax(torch.cat([x, sink.expand(x.shape[0], -1)], -1), -1)[..., :-2]

    S = torch.export.Dim("S", min=2, max=16)
    x, sink = torch.randn(3, 5), torch.randn(1, 2)
    ep = torch.export.export(TwoSinks(), (x, sink), dynamic_shapes=({1: S}, None), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert sorted(f.op for f in program.fallbacks) == ["aten.cat.default", "aten.slice.Tensor",
                                                       "aten.softmax.int"], program.fallbacks
    assert "S + 2" in program.fallbacks[0].reason
    torch.testing.assert_close(program(x, sink), TwoSinks()(x, sink), rtol=1e-6, atol=1e-6)



def test_a_sink_softmax_of_inputs_alone_runs_in_kiln(cache_dir):
    """The logits and the sink straight from the inputs (no kiln op but the views and the
    sink's slice): still one kiln graph, not left to PyTorch as a group of views."""
    class OfInputs(torch.nn.Module):
        def forward(self, x, s):
            logits = torch.cat([x, s.expand(x.shape[0], x.shape[1], 1)], -1)
            return torch.softmax(logits, -1)[..., :-1]

    S = torch.export.Dim("S", min=2, max=16)
    x, s = torch.randn(2, 5, 5), torch.randn(2, 1, 1)
    ep = torch.export.export(OfInputs(), (x, s), dynamic_shapes=({1: S, 2: S}, None),
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    x = torch.randn(2, 7, 7)
    torch.testing.assert_close(program(x, s), OfInputs()(x, s), rtol=1e-6, atol=1e-6)


class NotSinks(torch.nn.Module):
    """Near misses of the sink softmax, each left to PyTorch with its values eager's: logits
    whose last dim is a flattened batch and sequence (kiln holds it as two dims), a max over
    every dim, and _safe_softmax (a row of -inf, its sink too, is zeros there)."""
    def forward(self, a, s, x):
        flat = (a * 2).reshape(a.shape[0], -1)
        first = torch.softmax(torch.cat([flat, s], -1), -1)[..., :-1]
        logits = torch.cat([x * 2, s.reshape(1, 1, 1).expand(x.shape[0], x.shape[1], 1)], -1)
        second = torch.softmax(logits - logits.amax(), -1)[..., :-1]
        third = torch.ops.aten._safe_softmax(logits, -1)[..., :-1]
        return first, second, third


def test_a_near_miss_of_the_sink_softmax_stays_in_pytorch(cache_dir):
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=2, max=16)
    args = (torch.randn(1, 3, 5), torch.randn(1, 1), torch.randn(2, 5, 5))
    ep = torch.export.export(NotSinks(), args, dynamic_shapes=(
        {1: B, 2: S}, None, {1: S, 2: S}), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert {"aten.slice.Tensor", "aten.softmax.int", "aten._safe_softmax.default"} <= \
        {f.op for f in program.fallbacks}, program.fallbacks
    args = (torch.randn(1, 2, 7), torch.tensor([[float("-inf")]]), torch.randn(2, 7, 7))
    args[2][1, 0] = float("-inf")  # a row of -inf, its sink too
    for got, want in zip(program(*args), NotSinks()(*args)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


class Triangles(torch.nn.Module):
    """tril and triu at several diagonals (of floats holding NaN and inf, integers, bool), eye,
    max and min along a dim and argmin (values and positions, kept or not, of flattened rows
    too, of floats and integers), clamp to tensor bounds, rsub, torch's alias names (multiply,
    subtract, divide) and a cat of flattened rows along their last dim (Mamba-2's,
    Qwen3-Next's and PhiMoE's pieces)."""
    def forward(self, x, n, b, r):
        s = x.shape[-1]
        rows = r.reshape(-1, r.shape[-1])
        values, at = rows.max(dim=-1, keepdim=True)
        low, low_at = x.min(1)
        bounded = torch.clamp(rows.abs(), min=values * 0.5, max=values)
        scaled = torch.subtract(torch.multiply(rows, 2.0), torch.divide(rows, values))
        whole = torch.where(rows == rows, rows * 9, -3.0)  # no NaN: kiln casts one to 0
        return (x.tril(), x.triu(1), x.tril(-2), n.triu(-1), b.tril(2),
                x + torch.eye(s), torch.eye(3, s, dtype=torch.int32), values, at, low, low_at,
                bounded, torch.rsub(rows, 1.0), 1 - n, scaled, torch.cat([values, bounded], -1),
                x.argmin(-1), rows.argmin(-1, keepdim=True), whole.long().argmax(-1),
                *whole.int().min(-1))


def test_triangles_eye_max_along_a_dim_clamp_to_tensors_and_aliases_run_in_kiln(cache_dir):
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=2, max=32)

    def args(b, s):
        x = torch.randn(b, s, s)
        x[0, 0, 1], x[0, 1, 0], x[0, -1, -1] = float("nan"), float("inf"), -0.0
        return (x, torch.randint(-9, 9, (b, s, s)), torch.rand(b, s, s) > 0.5,
                torch.randn(b, s, 5))

    ep = torch.export.export(Triangles(), args(2, 5), dynamic_shapes=(
        {0: B, 1: S, 2: S}, {0: B, 1: S, 2: S}, {0: B, 1: S, 2: S}, {0: B, 1: S}), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    for b, s in [(2, 5), (1, 2), (3, 32)]:
        a = args(b, s)
        a[3][0, 0, 2] = float("nan")  # a row whose max and its position are the NaN's
        a[3][-1, -1] = torch.tensor([1.0, 3.0, 3.0, -2.0, 3.0])  # the first of equal maxima
        for i, (got, want) in enumerate(zip(program(*a), Triangles()(*a))):
            assert got.dtype == want.dtype and got.shape == want.shape, i
            assert torch.equal(got.isnan(), want.isnan()), i
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True,
                                       msg=lambda m: f"output {i}: {m}")


def test_a_max_or_min_along_a_dim_of_bool_runs_in_kiln(cache_dir):
    """Whether any element is true (max) or none is false (min), and the first position of the
    extreme: the first true (false for a min), 0 in a row of one value, as PyTorch."""
    class BoolMax(torch.nn.Module):
        def forward(self, n, x):
            hit = n > 4
            return hit.max(0), hit.min(1, keepdim=True), hit.max(-1), x.tril(-1) * 2

    S = torch.export.Dim("S", min=2, max=64)

    def args(s):
        n = torch.randint(0, 9, (4, s))
        n[0], n[1] = 0, 9  # a row all false, a row all true
        return n, torch.randn(4, 4)

    ep = torch.export.export(BoolMax(), args(6), dynamic_shapes=({1: S}, None), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    def leaves(outputs):  # (values, indices) pairs taken apart
        return [t for o in outputs for t in (o if isinstance(o, tuple) else (o,))]

    for s in (6, 2, 33):
        a = args(s)
        got, want = leaves(program(*a)), leaves(BoolMax()(*a))
        assert len(got) == len(want) == 7
        assert not want[4][0] and want[5][0] == 0  # row 0's max: false, at 0
        assert want[2][1].all() and want[3][1] == 0  # row 1's min: true, at 0
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, (s, i)
            assert torch.equal(g, w), (s, i, g, w)


def test_a_max_along_a_dim_kiln_cannot_reduce_stays_in_pytorch(cache_dir):
    class ScalarMax(torch.nn.Module):
        def forward(self, n, x):
            return n.sum().max(0), x.tril(-1) * 2

    n, x = torch.randint(0, 9, (3, 5)), torch.randn(4, 4)
    _, program = compiled(ScalarMax(), (n, x), cache_dir)
    assert [(f.op, f.reason) for f in program.fallbacks] == [
        ("aten.max.dim", "a max or min along a dim of a tensor of rank 0")]
    assert len(program.executables) == 1  # the sum and the tril
    (values, at), doubled = program(n, x)
    (want_values, want_at), want_doubled = ScalarMax()(n, x)
    assert torch.equal(values, want_values) and torch.equal(at, want_at)
    assert torch.equal(doubled, want_doubled)


class BareRmsNorm(torch.nn.Module):
    """rms_norm with no weight, with no eps (PyTorch's default: f32's epsilon), or neither
    (DiffLlama's head norm, no affine)."""
    def forward(self, x, w):
        return (F.rms_norm(x, (x.shape[-1],)), F.rms_norm(x, (x.shape[-1],), eps=1e-3),
                F.rms_norm(x, (x.shape[-1],), weight=w))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_rms_norm_without_a_weight_or_an_eps_runs_in_kiln(dtype, cache_dir):
    x, w = torch.randn(2, 3, 8, dtype=dtype), torch.randn(8, dtype=dtype)
    x[0, 0] = 1e-4  # a row whose mean square is under the default eps: eps decides it
    _, program = compiled(BareRmsNorm(), (x, w), cache_dir)
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    for got, want in zip(program(x, w), BareRmsNorm()(x, w)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)


def test_a_clamp_to_tensor_bounds_keeps_x_where_it_equals_a_bound(cache_dir):
    class Ties(torch.nn.Module):
        def forward(self, x, lo):
            return torch.clamp(x, min=lo), torch.clamp_max(x, lo), torch.clamp(x, lo, lo + 1)

    x, lo = torch.tensor([[0.0, -0.0, 2.0, float("nan")]]), torch.tensor([[-0.0, 0.0, 1.0, 0.0]])
    _, program = compiled(Ties(), (x, lo), cache_dir)
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    lo[0, 2] = float("nan")  # a NaN bound wins, as in PyTorch
    for got, want in zip(program(x, lo), Ties()(x, lo)):
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num())
        assert torch.equal(got.signbit(), want.signbit()), (got, want)


class Centres(torch.nn.Module):
    """DINOv3's pieces: aranges from a fraction or by one (patch centres), exact in f32, and
    tile (counts fewer than, as many as and more than the dims); SEW-D's sign (of floats, NaN
    and -0.0 among them, integers and bool); an arange by 0.1, whose values f32 rounds, stays
    in PyTorch."""
    def forward(self, x):
        centres = torch.arange(0.5, 4, dtype=torch.float32)
        quarters = torch.arange(-1, 2, 0.25)
        tenths = torch.arange(0.1, 1.0, 0.1)
        down = torch.arange(0, -2, -0.5)  # its first value +0.0, not 0 * -0.5
        return (x * centres, quarters * x[0, 0, 0], torch.arange(0, 5.5), down,
                torch.arange(0.5, 1.0, 2.0**100), x.tile((2,)), x.tile((2, 1, 3)),
                x[0].tile((3, 1)), tenths * 2, torch.sign(x), torch.sign(x.half()),
                torch.sign((x[1] * 4).int()), torch.sign(x > 0))


def test_fractional_aranges_and_tile_run_in_kiln(cache_dir):
    x = torch.randn(2, 3, 4)
    x[0, 0, :3] = torch.tensor([float("nan"), -0.0, 0.0])
    _, program = compiled(Centres(), (x,), cache_dir)
    assert [f.op for f in program.fallbacks] == ["aten.arange.start_step"], program.fallbacks
    assert "may round" in program.fallbacks[0].reason
    assert len(program.executables) == 1
    for got, want in zip(program(x), Centres()(x)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num()), (got, want)
        if got.is_floating_point():
            assert torch.equal(got.signbit(), want.signbit()), (got, want)


class AlongTheSequence(torch.nn.Module):
    """Convolutions along a symbolic sequence that keep its length: depthwise (ConvBERT's
    separable conv1d, kernel 9; Nystromformer's conv2d of kernel (k, 1), no bias, of 65
    offsets, past the sequence at its shortest), of one group (dilated, 'same'), unbatched, and
    bf16; and ConvBERT's unfold of [B, C, S, 1] by [k, 1]."""
    def __init__(self):
        super().__init__()
        self.dw = torch.nn.Conv1d(6, 6, 9, padding=4, groups=6)
        self.pw = torch.nn.Conv1d(6, 5, 3, padding=1)
        self.values = torch.nn.Conv2d(4, 4, (65, 1), padding=(32, 0), groups=4, bias=False)
        self.dilated = torch.nn.Conv1d(6, 3, 4, padding="same", dilation=2)
        self.narrow = torch.nn.Conv1d(6, 6, 3, padding=1, groups=6).to(torch.bfloat16)

    def forward(self, x, v):
        spans = F.unfold(x.unsqueeze(-1), kernel_size=[5, 1], padding=[2, 0])
        return (self.dw(x), self.pw(x), self.values(v), self.dilated(x),
                F.conv1d(x[0], self.pw.weight, padding=1), self.narrow(x.to(torch.bfloat16)),
                spans)


def test_a_convolution_along_a_symbolic_sequence_runs_in_kiln(cache_dir):
    torch.manual_seed(0)
    module = AlongTheSequence().eval()
    B, S = torch.export.Dim("B", max=4), torch.export.Dim("S", min=2, max=70)
    x, v = torch.randn(2, 6, 7), torch.randn(2, 4, 7, 3)
    ep = torch.export.export(module, (x, v), dynamic_shapes=({0: B, 2: S}, {0: B, 2: S}),
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    for b, s in [(2, 7), (1, 2), (3, 70), (1, 33)]:
        x, v = torch.randn(b, 6, s), torch.randn(b, 4, s, 3)
        for i, (got, want) in enumerate(zip(program(x, v), module(x, v))):
            assert got.dtype == want.dtype and got.shape == want.shape, i
            tolerance = 1e-2 if got.dtype == torch.bfloat16 else 1e-5
            torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance,
                                       msg=lambda m: f"output {i} at {(b, s)}: {m}")


def test_a_convolution_along_a_symbolic_dim_kiln_cannot_lower_says_why(cache_dir):
    """A strided or unpadded one (the length changes: no kiln dim holds it) and one with a
    kernel past 1 along a fixed dim stay in PyTorch."""
    class Odd(torch.nn.Module):
        def forward(self, x, w, y, u):
            return (F.conv1d(x, w, stride=3), F.conv1d(x, w), F.conv1d(x, w, padding=1) * 2,
                    F.conv2d(y, u, padding=(1, 0)))

    S = torch.export.Dim("S", min=7, max=32)
    args = (torch.randn(2, 3, 9), torch.randn(4, 3, 3), torch.randn(2, 3, 9, 5),
            torch.randn(4, 3, 3, 3))
    ep = torch.export.export(Odd(), args, dynamic_shapes=({2: S}, None, {2: S}, None),
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    reasons = {f.op: (f.count, f.reason) for f in program.fallbacks}
    assert set(reasons) == {"aten.conv1d.default", "aten.conv2d.default"}, reasons
    assert reasons["aten.conv1d.default"][0] == 2 and "S - 2" in reasons["aten.conv1d.default"][1]
    assert "a kernel past 1 along another dim" in reasons["aten.conv2d.default"][1]
    assert len(program.executables) == 1  # the padded conv1d
    for got, want in zip(program(*args), Odd()(*args)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class ComplexRotary(torch.nn.Module):
    """Llama 4's rotary as complex numbers (polar angles, view_as_complex of pairs, a product,
    view_as_real), and the rest of kiln's complex arithmetic and views: a product with a real
    tensor and a number, sums and differences with a complex and a real operand, a transpose,
    a slice and a select, a concat and a copy."""

    def forward(self, x, r):
        b, s, h, d = x.shape
        scalar = torch.view_as_complex(x[0, 0, 0, :2]).transpose(0, 0) * 2.0  # 0-d
        angles = torch.arange(s, dtype=torch.float32)[:, None] * \
            (torch.arange(d // 2, dtype=torch.float32) * 0.25 + 0.1)[None, :]
        freqs = torch.polar(torch.ones_like(angles), angles) * 1.5  # [S, D/2]
        z = torch.view_as_complex(x.float().reshape(b, s, h, -1, 2))  # [B, S, H, D/2]
        rotated = torch.view_as_real(z * freqs[None, :, None, :]).flatten(3)
        w = (z * r[..., None]) + 2.0 - z.transpose(1, 2).transpose(1, 2).clone()
        w = 1.0 - w + r[..., None]
        parts = torch.cat([w[:, :, :1], w[:, :, 1:].select(3, 0)[..., None].expand(
            b, s, h - 1, d // 2)], dim=2)
        return rotated, torch.view_as_real(parts * 0.5 + scalar)


def test_complex_rotary_and_arithmetic_run_in_one_kiln_graph(cache_dir):
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=2, max=40)
    module = ComplexRotary()

    def args(b, s):
        return torch.randn(b, s, 3, 8), torch.randn(b, s, 3)

    ep = torch.export.export(module, args(2, 5), dynamic_shapes=({0: B, 1: S}, {0: B, 1: S}),
                             strict=False)
    program = one_kiln_graph(ep, cache_dir)
    for b, s in [(2, 5), (1, 40), (3, 2)]:
        a = args(b, s)
        for got, want in zip(program(*a), module(*a)):
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class ComplexOut(torch.nn.Module):
    def forward(self, x):
        z = torch.view_as_complex(x.reshape(x.shape[0], -1, 2))
        return z * z, torch.view_as_real(z * 2.0).sum(-1)


def test_a_complex_tensor_leaving_kiln_stays_in_pytorch(cache_dir):
    """A complex output is PyTorch's to make (kiln's pairs never leave its graph): the nodes
    making it stay in PyTorch with that reason, and every output matches eager."""
    x = torch.randn(3, 8)
    _, program = compiled(ComplexOut(), (x,), cache_dir)
    assert any("complex" in f.reason for f in program.fallbacks), program.fallbacks
    for got, want in zip(program(x), ComplexOut()(x)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


class Quotients(torch.nn.Module):
    """Integer floor division, truncation, remainder and fmod of positions (arange less an
    offset: negative values too) by numbers of either sign, by a tensor whose values are never
    0 (bounded by the ops making it) and by the sequence's size; Llama 4's chunk of each
    position. And an argmax of positions less the size, whose values are bounded through the
    size (before, a crash)."""

    def forward(self, x):
        s = x.shape[1]
        p = torch.arange(s) - 20  # [-20, S - 21]
        q = torch.arange(s, dtype=torch.int32)[:, None] % 5 + 1  # 1..5, never 0
        chunk = (p[:, None] // 8) == (p[None, :] // 8)
        return (p // 3, torch.div(p, -4, rounding_mode="floor"),
                torch.div(p, 3, rounding_mode="trunc"), p % 7, p % -3, torch.fmod(p, 3),
                torch.remainder(p.to(torch.int32)[None, :], q), p.to(torch.int32) // q,
                chunk, x.masked_fill(~chunk[:2], 0.0), (torch.arange(s) * 3) // s,
                -(-p // 8), (torch.arange(s) - s).argmax(0), p // torch.arange(s).clamp(3, 9),
                p % torch.arange(s).clamp(70, 80), p // (torch.arange(s) - 100).clamp(max=-60))


def test_integer_quotients_and_remainders_are_exact_in_kiln(cache_dir):
    S = torch.export.Dim("S", min=2, max=60)
    module = Quotients()
    ep = torch.export.export(module, (torch.randn(2, 30),), dynamic_shapes=({1: S},),
                             strict=False)
    program = one_kiln_graph(ep, cache_dir)
    for s in (30, 2, 60, 41):
        x = torch.randn(2, s)
        for got, want in zip(program(x), module(x)):
            assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


class QuotientOfIds(torch.nn.Module):
    """CANINE's hash buckets of ids from the caller (any i64 values), truncation and fmod of
    them, numbers by ids clamped away from 0, and a quotient by a tensor that may hold 0
    (PyTorch raises there): that one stays in PyTorch."""
    def forward(self, ids, d):
        return ((ids + 1) * 31 % 16381, ids // 7, torch.div(ids, -3, rounding_mode="trunc"),
                torch.fmod(ids, 5), 1000 // ids[:, :1].clamp(1, 9), 7 % ids[:, :1].clamp(min=2),
                ids // d)


class BoolDivisor(torch.nn.Module):
    def forward(self, ids):
        return torch.div(ids, True, rounding_mode="trunc"), torch.fmod(ids, True), ids // True


class WrappingDivisor(torch.nn.Module):
    """A divisor whose bounds hold 0 once its i32 products wrap (4 * 2^30), and an i64 one
    past i32's range divided into i32 (2^32 as i32 is 0): PyTorch raises on both."""
    def __init__(self):
        super().__init__()
        self.register_buffer("big", torch.tensor(2**32))

    def forward(self, x):
        return x // ((torch.arange(5, dtype=torch.int32) + 1) * 2**30), x // self.big


def test_integer_quotients_of_any_values_are_exact_in_kiln(cache_dir):
    """Quotients and remainders of ids past what f32 or fp64 hold exactly are exact in kiln
    (its floor_divide and remainder); only the one whose divisor may be 0 stays in PyTorch."""
    ids = torch.tensor([[2**40 + 3, -(2**35) - 1, 5, -9, 2**62 + 1, -(2**62) - 7]])
    d = torch.tensor([[3, -2, 1, 4, -7, 9]])
    _, program = compiled(QuotientOfIds(), (ids, d), cache_dir)
    assert [(f.op, f.count) for f in program.fallbacks] == [("aten.floor_divide.default", 1)] \
        and "may be 0" in program.fallbacks[0].reason, program.fallbacks
    for got, want in zip(program(ids, d), QuotientOfIds()(ids, d)):
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    x = torch.arange(5, dtype=torch.int32)
    _, program = compiled(WrappingDivisor(), (x,), cache_dir)
    assert [(f.op, f.count) for f in program.fallbacks] == [("aten.floor_divide.default", 2)], \
        program.fallbacks
    for run in (program, WrappingDivisor()):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            run(x)
    # A bool divisor (before, a ValueError compiling): PyTorch's, exactly.
    ids = torch.tensor([7, -7, 0, 2**40])
    _, program = compiled(BoolDivisor(), (ids,), cache_dir)
    for got, want in zip(program(ids), BoolDivisor()(ids)):
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


class ScatterRows(torch.nn.Module):
    """Llama 4's router scores: -inf but at each row's top k experts (k = 1 and 2), those
    scores there; of a flattened batch and sequence, the experts first for a sum over them
    (before the merged dim) and a batched matmul of each expert's rows."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 6, 5))

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])  # [B*S, 6]
        logits = rows[:, :4] * 2.0
        top, at = torch.topk(logits, 2, dim=1)
        scores = torch.full_like(logits, float("-inf")).scatter(1, at, top)
        first = torch.zeros_like(logits).scatter(1, at[:, :1], top[:, :1] - 1.0)
        # Every row's positions 3, 1, 3: the last write at 3 wins, as PyTorch's CPU kernel.
        repeated = torch.full_like(logits, 7.0).scatter(
            1, torch.tensor([3, 1, 3]).expand(rows.shape[0], 3), rows[:, 3:])
        gates = torch.sigmoid(scores).t()  # [4, B*S]
        routed = rows.repeat(4, 1) * gates.reshape(-1, 1)  # [4*B*S, 6]
        out = torch.bmm(routed.view(4, -1, 6), self.w)  # [4, B*S, 5]
        return scores, first, repeated, out.sum(0), out.amax(dim=0), (at * 3).sum(1)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_a_scatter_add_adds_in_order_as_pytorch(cache_dir):
    """scatter_add, scatter_reduce's "sum" and scatter's reduce="add": x, then each position's
    value added in order, one at a time (positions repeated within a row, a -0.0 no position
    reaches kept); an "amax" stays in PyTorch, named."""
    class Adds(torch.nn.Module):
        def forward(self, x, i, s):
            return (x.scatter_add(1, i, s), x.scatter_reduce(1, i, s, "sum"),
                    x.scatter(1, i, s, reduce="add"), torch.zeros_like(x).scatter_add(-1, i, s * 3),
                    x.scatter_reduce(1, i, s, "amax"))

    B = torch.export.Dim("B", min=2, max=64)
    x, i, s = torch.randn(4, 6), torch.randint(0, 6, (4, 5)), torch.randn(4, 5)
    ep = torch.export.export(Adds(), (x, i, s), dynamic_shapes=({0: B}, {0: B}, {0: B}),
                             strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert [(f.op, f.reason) for f in program.fallbacks] == [
        ("aten.scatter_reduce.two", "a scatter_reduce of 'amax' (kiln adds: 'sum')")]
    for b in (2, 7, 64):
        # Values of many magnitudes, so that the order of the additions shows in the sums.
        x = torch.randn(b, 6) * 10.0 ** torch.randint(-3, 4, (b, 6))
        s = torch.randn(b, 5) * 10.0 ** torch.randint(-3, 4, (b, 5))
        i = torch.randint(0, 6, (b, 5))
        i[0] = torch.tensor([2, 2, 2, 4, 2])  # one position four times
        i[1] = 1  # every value to one position: positions 0 and 2..5 keep x
        x[1, 3] = -0.0
        got, want = program(x, i, s), Adds()(x, i, s)
        for n, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, (b, n)
            assert torch.equal(g, w), (b, n, (g - w).abs().max())
            assert torch.equal(g.signbit(), w.signbit()), (b, n)
        assert got[0][1, 3].item() == 0.0 and got[0][1, 3].signbit()


def test_a_scatter_of_integers_or_bool_from_a_tensor_runs_in_kiln(cache_dir):
    """scatter of an i64, i32 or bool tensor at positions along a dim (after a merged one, as
    dim -1, and along dim 0): src's value where a position is the element's, the last write where positions
    repeat, x elsewhere; i64 values past 2^53 exact."""
    class IntScatters(torch.nn.Module):
        def forward(self, x, i, s, m, n, f):
            rows, at = x.reshape(-1, 6), i.reshape(-1, 3)
            return (rows.scatter(-1, at, s.reshape(-1, 3)), m.scatter(1, i[0, :2], n),
                    f.scatter(1, i[0, :2], ~f[:, :3]),
                    m.scatter(0, i[0, :2, :2].repeat(1, 3).remainder(2), n.repeat(1, 2)))

    B, S = torch.export.Dim("B", max=16), torch.export.Dim("S", min=2, max=32)

    def inputs(b, s, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(-2**62, 2**62, (b, s, 6), generator=g)
        i = torch.randint(0, 6, (b, s, 3), generator=g)
        i[0, 0] = torch.tensor([4, 1, 4])  # position 4 twice: the last write wins
        src = torch.randint(-2**62, 2**62, (b, s, 3), generator=g) | 1  # odd: never x's zeros
        m = torch.randint(-9, 9, (2, 6), dtype=torch.int32, generator=g)
        n = torch.randint(100, 200, (2, 3), dtype=torch.int32, generator=g)
        f = torch.rand(2, 6, generator=g) > 0.5
        return x, i, src, m, n, f

    ep = torch.export.export(IntScatters(), inputs(2, 3, 0), strict=False, dynamic_shapes=(
        {0: B, 1: S}, {0: B, 1: S}, {0: B, 1: S}, None, None, None))
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    for b, s, seed in [(2, 3, 1), (1, 2, 2), (16, 32, 3)]:
        args = inputs(b, s, seed)
        for n, (got, want) in enumerate(zip(program(*args), IntScatters()(*args))):
            assert got.dtype == want.dtype and got.shape == want.shape, (b, s, n)
            assert torch.equal(got, want), (b, s, n, got, want)


def test_scatters_and_experts_over_merged_rows_run_in_one_kiln_graph(cache_dir):
    B, S = torch.export.Dim("B", max=8), torch.export.Dim("S", min=2, max=40)
    module = ScatterRows()
    ep = torch.export.export(module, (torch.randn(2, 5, 6),), dynamic_shapes=({0: B, 1: S},),
                             strict=False)
    program = one_kiln_graph(ep, cache_dir)
    for b, s in [(2, 5), (1, 40), (3, 2)]:
        x = torch.randn(b, s, 6)
        x[0, 0, :4] = torch.tensor([1.0, float("nan"), -2.0, 0.5])  # a NaN score kept
        for got, want in zip(program(x), module(x)):
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


class DynamicWeightConv(torch.nn.Module):
    def forward(self, x, w):
        return F.conv1d(x, w, padding=1)


def test_a_convolution_whose_weight_has_a_symbolic_size_stays_in_pytorch(cache_dir):
    O = torch.export.Dim("O", max=16)
    module = DynamicWeightConv()
    x, w = torch.randn(2, 3, 10), torch.randn(4, 3, 3)
    ep = torch.export.export(module, (x, w), dynamic_shapes=(None, {0: O}), strict=False)
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert any("weight has a symbolic size" in f.reason for f in program.fallbacks), \
        program.fallbacks
    for o in (4, 9):
        w = torch.randn(o, 3, 3)
        torch.testing.assert_close(program(x, w), module(x, w), rtol=1e-5, atol=1e-5)
