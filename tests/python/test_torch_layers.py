"""Layers of vision and audio models through kiln.torch, each against eager: average, adaptive
and ceil-mode pools, activations, transposed convolutions and edge pads."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from conftest import one_kiln_graph

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class Pools(torch.nn.Module):
    """Average pools with every option (ceil mode with and without the padding counted, a
    divisor, a kernel past the input: EfficientNet's pooler), adaptive average and max pools to
    sizes that divide the input's and to sizes that do not (PSP's), max pools in ceil mode, and
    half types."""
    def forward(self, x):
        avg, adaptive, adaptive_max = F.avg_pool2d, F.adaptive_avg_pool2d, F.adaptive_max_pool2d
        return (avg(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                avg(x, 3, 2, 1, ceil_mode=True), avg(x, 3, 1, 1, count_include_pad=False),
                F.avg_pool1d(x[:, 0], 3, 2, 1), avg(x, 2, divisor_override=3),
                avg(x, (2, 3), (2, 1), (1, 0), ceil_mode=True), adaptive(x, (3, 2)),
                adaptive(x, (3, 5)), F.adaptive_avg_pool1d(x[:, 0], 5), adaptive_max(x, (3, 5)),
                adaptive_max(x, (4, 3)), F.adaptive_max_pool1d(x[:, 0], 3),
                F.max_pool2d(x, 3, 2, ceil_mode=True), F.max_pool2d(x, 2, 2, 1, ceil_mode=True),
                avg(x.half(), 3, 2, 1, ceil_mode=True, count_include_pad=False),
                avg(x[:, :, :7, :7], 7), avg(x[:, :, 2:, 2:], (8, 9), ceil_mode=True),  # one window
                # Within rounding of eager's sums: a kernel past the input, uneven windows.
                avg(x, 40, ceil_mode=True), adaptive(x, (4, 7)), F.adaptive_avg_pool1d(x[:, 0], 4),
                adaptive(x.to(torch.bfloat16), (4, 7)),
                F.adaptive_avg_pool1d(x.reshape(-1, 1, 270), 100))  # windows of 3 and 4


def test_average_adaptive_and_ceil_mode_pools_run_in_kiln_as_in_eager(cache_dir):
    dims = ({0: torch.export.Dim("B", max=8)},)
    ep = torch.export.export(Pools(), (torch.randn(2, 3, 9, 10),), dynamic_shapes=dims,
                             strict=False)
    # As exported and decomposed (avg_pool1d as avg_pool2d, _adaptive_avg_pool2d). Before: every
    # one but the max pools out of ceil mode fell back.
    for e in (ep, ep.run_decompositions()):
        program = one_kiln_graph(e, cache_dir)
        for b in (1, 3):
            x = torch.randn(b, 3, 9, 10)
            x[0, 0, 1, 1], x[-1, 2, 8, 9] = float("nan"), -float("inf")
            for k, (got, want) in enumerate(zip(program(x), Pools()(x))):
                assert got.dtype == want.dtype and got.shape == want.shape, (k, got, want)
                assert torch.equal(got.isnan(), want.isnan()), k
                got, want = got.nan_to_num(0), want.nan_to_num(0)
                if k < 17:  # the windows summed in PyTorch's order: the same bits
                    assert torch.equal(got, want), (k, (got - want).abs().max())
                else:
                    tol = 8e-3 if want.dtype == torch.bfloat16 else 1e-6
                    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


class Activations(torch.nn.Module):
    """Activations kiln writes as its own ops (leaky relu, relu6, hardtanh, hardsigmoid,
    hardswish, softsign, prelu of a weight a channel, of one weight and of a 0-d one, clamps by
    numbers: outputs 0 to 11, the same bits as eager, signs of zeros too), and those through exp
    and log (elu, selu, celu, softplus, mish, log_softmax, logsigmoid, glu, log1p, expm1) and
    half types."""
    def __init__(self):
        super().__init__()
        self.channels, self.one = torch.nn.PReLU(4), torch.nn.PReLU()
        self.channels.weight.data.uniform_(-1, 1)
        self.scalar = torch.nn.Parameter(torch.tensor(-0.25))

    def forward(self, x):
        return (F.leaky_relu(x, 0.2), F.relu6(x), F.hardtanh(x, -2, 3), F.hardsigmoid(x),
                F.hardswish(x), F.softsign(x), self.channels(x), self.one(x),
                torch.nn.LeakyReLU(0.1, inplace=True)(x.clone()), F.prelu(x, self.scalar),
                x.clamp(0.0, 1.0), x.clamp(max=-0.0),
                F.elu(x, 0.5), F.selu(x), F.celu(x, 2.0), F.softplus(x, 2, 10), F.softplus(x),
                F.mish(x), F.log_softmax(x, -1), F.logsigmoid(x), F.glu(x, 1),
                torch.log1p(x.abs()), torch.expm1(x), F.log_softmax(x.half(), 1),
                F.log_softmax(x.half(), -1, dtype=torch.float32), F.hardswish(x.bfloat16()),
                F.elu(x.half()), F.log_softmax(x, -1, dtype=torch.float16),
                torch.ops.aten.log_sigmoid_forward(x)[0])


def test_activations_run_in_kiln_within_an_ulp_or_two_of_eager(cache_dir):
    model = Activations()
    dims = ({0: torch.export.Dim("B", max=8)},)
    ep = torch.export.export(model, (torch.randn(2, 4, 6),), dynamic_shapes=dims, strict=False)
    # As exported and decomposed (hardsigmoid as clamps, elu and softplus through expm1 and
    # log1p, log_softmax as _log_softmax). Before: each fell back ("no kiln op for it").
    for e in (ep, ep.run_decompositions()):
        program = one_kiln_graph(e, cache_dir)
        for b in (1, 3):
            x = torch.randn(b, 4, 6) * 4
            x[0, 0] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-6, -1e-6])
            x[-1, 1] = torch.tensor([100.0, -100.0, 1e-30, -1e-30, 30.0, -30.0])
            with torch.no_grad():
                outputs = list(zip(program(x), model(x)))
            for k, (got, want) in enumerate(outputs):
                assert got.dtype == want.dtype and got.shape == want.shape, (k, got, want)
                assert torch.equal(got.isnan(), want.isnan()), (k, got, want)
                got, want = got.nan_to_num(0), want.nan_to_num(0)
                if k in (23, 27):
                    # A half log_softmax: kiln's is the f32 one of the rounded input, rounded once;
                    # eager's CPU kernel rounds on the way too (within a few of its ulps).
                    rounded = F.log_softmax(x.half().float(), 1 if k == 23 else -1).half()
                    rounded = rounded.nan_to_num(0)
                    torch.testing.assert_close(got, rounded, rtol=9.8e-4, atol=1e-37)
                    torch.testing.assert_close(got, want, rtol=0, atol=0.04)
                elif k < 12:
                    assert torch.equal(got, want), (k, got, want)
                    assert torch.equal(got.signbit(), want.signbit()), (k, got, want)
                else:  # exp, log and tanh within an ulp of eager's: results within two
                    ulp = {torch.float32: 1.2e-7, torch.float16: 9.8e-4,
                           torch.bfloat16: 7.9e-3}[want.dtype]
                    torch.testing.assert_close(got, want, rtol=2 * ulp, atol=1e-37)


class TransposedConvolutions(torch.nn.Module):
    """Transposed convolutions: strided with output padding in groups, a kernel that is its
    stride (a U-Net's upsampling: the output's patches), dilated without a bias, depthwise, a
    stride past the kernel's reach; conv_transpose1d, of an unbatched input too."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        up = torch.nn.ConvTranspose2d
        self.two = torch.nn.ModuleList([
            up(4, 6, 3, 2, 1, output_padding=1, groups=2), up(4, 6, 2, 2),
            up(4, 3, (3, 2), (1, 2), (1, 0), dilation=(2, 1), bias=False),
            up(4, 4, 3, 1, 1, groups=4), up(4, 2, 4, 3, 0, output_padding=2)])
        self.one = torch.nn.ConvTranspose1d(4, 5, 4, 2, 1)
        self.patch = torch.nn.ConvTranspose1d(4, 5, 3, 3)

    def forward(self, x):
        return tuple(m(x) for m in self.two) + (self.one(x[:, :, 0]), self.patch(x[:, :, 1]),
                                                self.two[0](x[0]))


def test_transposed_convolutions_are_one_matmul_and_a_sum_of_shifted_offsets(cache_dir):
    model = TransposedConvolutions().eval()
    dims = ({0: torch.export.Dim("B", max=8)},)
    ep = torch.export.export(model, (torch.randn(2, 4, 5, 6),), dynamic_shapes=dims,
                             strict=False)
    # As exported (conv_transpose2d, conv_transpose1d) and decomposed (convolution with
    # transposed=True). Before: each fell back.
    for e in (ep, ep.run_decompositions()):
        program = one_kiln_graph(e, cache_dir)
        for b in (1, 3):
            x = torch.randn(b, 4, 5, 6)
            with torch.no_grad():
                outputs = list(zip(program(x), model(x)))
            for k, (got, want) in enumerate(outputs):
                assert got.shape == want.shape, (k, got.shape, want.shape)
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        half = copy.deepcopy(model.two[0]).to(torch.bfloat16)
        x = torch.randn(2, 4, 5, 6, dtype=torch.bfloat16)
        program = one_kiln_graph(torch.export.export(half, (x,), strict=False), cache_dir)
        torch.testing.assert_close(program(x), half(x), rtol=1.6e-2, atol=1.6e-2)


class EdgePads(torch.nn.Module):
    """F.pad in modes reflect, replicate and circular (nn.ReflectionPad2d, nn.ReplicationPad1d
    of an unbatched input), by amounts up to the dim's size, of f16 and bool too."""
    def forward(self, x):
        pad = F.pad
        return (pad(x[:, 0], (1, 2), mode="reflect"), pad(x, (1, 2, 2, 0), mode="replicate"),
                pad(x[:, 0], (2, 1), mode="circular"), torch.nn.ReflectionPad2d(1)(x),
                pad(x, (5, 5, 4, 0), mode="reflect"), pad(x.half()[:, 0], (0, 3), mode="replicate"),
                pad(x > 0, (6, 6, 5, 5), mode="circular"), torch.nn.ReplicationPad1d((0, 4))(x[0]))


def test_reflect_replicate_and_circular_pads_are_copies_in_kiln(cache_dir):
    dims = ({0: torch.export.Dim("B", max=8)},)
    ep = torch.export.export(EdgePads(), (torch.randn(2, 3, 5, 6),), dynamic_shapes=dims,
                             strict=False)
    program = one_kiln_graph(ep, cache_dir)  # before: each fell back ("a pad in mode ...")
    for b in (1, 3):
        x = torch.randn(b, 3, 5, 6)
        x[0, 0, 0, 0], x[-1, 2, 4, 5] = float("nan"), -float("inf")
        for k, (got, want) in enumerate(zip(program(x), EdgePads()(x))):
            assert got.dtype == want.dtype and got.shape == want.shape, (k, got, want)
            assert torch.equal(got.isnan(), want.isnan()), k
            assert torch.equal(got.nan_to_num(0), want.nan_to_num(0)), k
