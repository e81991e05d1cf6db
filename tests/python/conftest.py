"""Fixtures of the Python package's tests: a fresh kiln cache per session, and transformers'
LlamaForCausalLM and BertModel built from configs (no download), exported with a dynamic batch
and sequence length."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = pathlib.Path(__file__).resolve().parents[2]
GRAPHS = ROOT / "examples" / "graphs"
# Relative-L2 tolerances of each mode against fp64 (reference/audit.h).
TOLERANCE = {"highest": 1e-5, "tf32x3": 2e-5, "high": 2e-3, "medium": 1.5e-2}


def rel_l2(a, b, keep=None) -> float:
    """||a - b|| / ||b|| of two torch tensors in float64, over the elements `keep` selects."""
    a, b = a.double(), b.double()
    if keep is not None:
        a, b = a[keep], b[keep]
    return float((a - b).norm() / b.norm())


def greedy(forward, ids, steps=16):
    """`ids` extended by `steps` tokens, each the argmax of `forward`'s last logits (no cache:
    the whole sequence runs again each step)."""
    import torch
    with torch.no_grad():
        for _ in range(steps):
            logits = forward(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
            ids = torch.cat([ids, logits[:, -1].argmax(-1)[:, None]], dim=1)
    return ids


def kiln_cli() -> str:
    return os.environ.get("KILN_CLI", str(ROOT / "build" / "tools" / "kiln"))


def cache_entries(cache_dir) -> list[dict]:
    """The entries of a kiln cache, as `kiln ls --json` lists them."""
    out = subprocess.run([kiln_cli(), "ls", "--json", "--cache-dir", str(cache_dir)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["entries"]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kiln-cache")


def llama_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, rms_norm_eps=1e-6, use_cache=False,
                         initializer_range=0.02)
    return LlamaForCausalLM(config).eval()


def bert_model():
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=512, initializer_range=0.1)
    return BertModel(config).eval()


def export(model):
    import torch
    from torch.export import Dim
    ids = torch.randint(0, 1024, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    batch, seq = Dim("B", min=1, max=16), Dim("S", min=1, max=256)
    dynamic = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    with torch.no_grad():
        return torch.export.export(model, (), kwargs={"input_ids": ids, "attention_mask": mask},
                                   dynamic_shapes=dynamic, strict=False)


@pytest.fixture(scope="session")
def llama():
    return llama_model()


@pytest.fixture(scope="session")
def bert():
    return bert_model()


@pytest.fixture(scope="session")
def llama_ep(llama):
    return export(llama)


@pytest.fixture(scope="session")
def bert_ep(bert):
    return export(bert)


def one_kiln_graph(ep, cache_dir):
    """The exported program compiled for the CPU target, asserted to be one kiln graph with
    nothing left in PyTorch."""
    import kiln.torch
    program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                          cache_dir=cache_dir, fallbacks="allow")
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    return program
