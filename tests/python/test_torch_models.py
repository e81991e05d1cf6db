"""More transformers language architectures through kiln.torch.compile_exported, built from
small configs (no download): each runs whole in one kiln graph, mask builder included, and
matches eager. Any op left in PyTorch, or a second kiln graph, fails the test. Vision and speech
models are in test_torch_vision_speech.py."""
from __future__ import annotations

import pytest
import torch

import kiln.torch
from conftest import TOLERANCE, rel_l2

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def _models():
    import transformers as t
    small = dict(vocab_size=100)
    return {
        "gpt2": lambda: t.GPT2Model(t.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64,
                                                 **small)),
        "gpt_neox": lambda: t.GPTNeoXModel(t.GPTNeoXConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64, **small)),
        "t5_encoder": lambda: t.T5EncoderModel(t.T5Config(
            num_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128, **small)),
        "opt": lambda: t.OPTModel(t.OPTConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
            max_position_embeddings=64, word_embed_proj_dim=64, **small)),
        "phi": lambda: t.PhiModel(t.PhiConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64, **small)),
        "falcon": lambda: t.FalconModel(t.FalconConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, **small)),
        "bloom": lambda: t.BloomModel(t.BloomConfig(n_layer=2, hidden_size=64, n_head=4,
                                                    **small)),
        "roberta": lambda: t.RobertaModel(t.RobertaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=80, **small)),
        "gptj": lambda: t.GPTJModel(t.GPTJConfig(n_layer=2, n_embd=64, n_head=4, rotary_dim=8,
                                                 n_positions=64, **small)),
        "mpt": lambda: t.MptModel(t.MptConfig(n_layers=2, d_model=64, n_heads=4,
                                               max_seq_len=80, **small)),
        "gpt_neo": lambda: t.GPTNeoModel(t.GPTNeoConfig(
            num_layers=2, hidden_size=64, num_heads=4, attention_types=[[["global", "local"], 1]],
            window_size=8, max_position_embeddings=80, **small)),
        "xglm": lambda: t.XGLMModel(t.XGLMConfig(
            num_layers=2, d_model=64, attention_heads=4, ffn_dim=128,
            max_position_embeddings=64, **small)),
        "llama": lambda: t.LlamaModel(t.LlamaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=64, **small)),
        # Its selective scan in PyTorch (no CUDA kernels): a loop over the sequence, the
        # projections' pieces by tensor_split.
        "mamba": lambda: t.MambaModel(t.MambaConfig(num_hidden_layers=2, hidden_size=32,
                                                    state_size=8, **small)),
        # Mamba-2 layers and an attention layer; the chunked scan in PyTorch: tril masks, a
        # segment sum, cumsum and exp.
        "bamba": lambda: t.BambaModel(t.BambaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16,
            mamba_chunk_size=8, attn_layer_indices=[1], max_position_embeddings=64, **small)),
        # Gated delta-net layers (a chunked delta rule: tril, triu and eye, a triangular solve
        # by rows) beside full attention, and a mixture of experts.
        "qwen3_next": lambda: t.Qwen3NextModel(t.Qwen3NextConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=128, layer_types=["linear_attention",
                                                            "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=64,
            experts_implementation="batched_mm", max_position_embeddings=64, **small)),
        # Characters hashed into buckets (ids times primes, a remainder: kiln's exact integer
        # remainder), downsampled by a strided conv1d, upsampled back.
        "canine": lambda: t.CanineModel(t.CanineConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64, num_hash_buckets=64)),
    }


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "t5_encoder", "opt", "phi", "falcon",
                                  "bloom", "gptj", "roberta", "mpt", "mamba", "bamba",
                                  "qwen3_next", "canine"])
def test_the_model_runs_in_kiln_and_matches_eager(arch, cache_dir):
    torch.manual_seed(0)
    model = _models()[arch]().eval()
    ids = torch.randint(0, 100, (2, 12))
    kwargs = {"input_ids": ids}
    if arch not in ("t5_encoder", "roberta", "canine"):
        kwargs["use_cache"] = False
    with torch.no_grad():
        want = model(**kwargs).last_hidden_state
        ep = torch.export.export(model, (), kwargs, strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        got = program(**kwargs)
    got = got["last_hidden_state"] if isinstance(got, dict) else got[0]
    assert isinstance(got, torch.Tensor)
    assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
    assert rel_l2(got, want) < TOLERANCE["highest"], rel_l2(got, want)




def _matches_eager_at_three_sizes(model, program):
    """The program's last hidden state within the `highest` tolerance of eager's, at three
    batch and sequence sizes."""
    for shape in [(2, 12), (3, 7), (1, 33)]:
        ids = torch.randint(0, 100, shape)
        want = model(input_ids=ids, use_cache=False).last_hidden_state
        got = program(input_ids=ids, use_cache=False)
        got = got["last_hidden_state"] if isinstance(got, dict) else got[0]
        assert rel_l2(got, want) < TOLERANCE["highest"], (shape, rel_l2(got, want))


@pytest.mark.parametrize("arch, target", [("gpt2", "cpu"), ("opt", "cpu"), ("bloom", "cpu"),
                                          ("falcon", "cpu"), ("gptj", "cpu"), ("mpt", "cpu"),
                                          ("gpt_neo", "cpu"), ("xglm", "cpu"),
                                          ("opt", "emulate:sm_90")])
def test_a_dynamic_batch_and_sequence_flattened_into_rows_stays_in_kiln(arch, target, cache_dir):
    """OPT's MLP, GPT-2's Conv1D and BLOOM's bmm flatten the dynamic batch and sequence (or
    batch and heads) into one dim: kiln runs them as the dims, and matches eager at each size
    (on the CPU target, and OPT through the CUDA kernels kiln makes for an H100, emulated).
    Falcon's mask builder, GPT-J's rotary pieces, MPT's alibi (its last S positions, sliced
    from Max(0, 80 - S)) and GPT-Neo's causal and local bool buffers (their first S rows and
    columns, compares of positions in kiln) and XGLM's sinusoidal positions (an index_select of
    the flattened position ids) run in kiln at every size too."""
    torch.manual_seed(0)
    model = _models()[arch]().eval()
    ids = torch.randint(0, 100, (2, 12))
    dims = {"input_ids": {0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", max=64)},
            "use_cache": None}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": ids, "use_cache": False},
                                 dynamic_shapes=dims, strict=False)
        program = kiln.torch.compile_exported(ep, target=target, precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert program.executables[0].arch.startswith(target)
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        _matches_eager_at_three_sizes(model, program)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_packed_sequences_stay_apart_in_one_kiln_graph(arch, cache_dir):
    """Given position_ids and no attention mask, transformers' mask builder finds packed
    sequences (positions that restart: a diff against the position before, then a running count)
    and confines attention to each. kiln runs that check with the model, at a dynamic batch and
    sequence, and matches eager where the packing changes the outputs."""
    torch.manual_seed(0)
    model = _models()[arch]().eval()
    batch, seq = torch.export.Dim("B", max=8), torch.export.Dim("S", max=64)
    kwargs = {"input_ids": torch.randint(0, 100, (2, 12)),
              "position_ids": torch.arange(12).repeat(2, 1), "use_cache": False}
    dims = {"input_ids": {0: batch, 1: seq}, "position_ids": {0: batch, 1: seq},
            "use_cache": None}
    with torch.no_grad():
        ep = torch.export.export(model, (), kwargs, dynamic_shapes=dims, strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for (b, s), cut in [((2, 12), 5), ((3, 7), 3), ((1, 33), 20)]:
            kwargs["input_ids"] = torch.randint(0, 100, (b, s))
            packed = torch.cat([torch.arange(cut), torch.arange(s - cut)])
            kwargs["position_ids"] = packed.repeat(b, 1)
            want = model(**kwargs).last_hidden_state
            unpacked = model(**{**kwargs, "position_ids": torch.arange(s).repeat(b, 1)})
            assert rel_l2(unpacked.last_hidden_state, want) > 0.1  # the packing matters
            got = program(**kwargs)
            got = got["last_hidden_state"] if isinstance(got, dict) else got[0]
            assert rel_l2(got, want) < TOLERANCE["highest"], ((b, s), rel_l2(got, want))


def test_clips_text_tower_pools_its_end_token_in_kiln(cache_dir):
    """CLIP's text tower with the legacy end-of-text id 2 pools the token at the argmax of the
    ids themselves (the largest id, nothing bounds it): found exactly and picked per batch
    entry in the one kiln graph, at a dynamic batch and sequence."""
    import transformers as t
    torch.manual_seed(0)
    model = t.CLIPTextModel(t.CLIPTextConfig(
        vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64, eos_token_id=2)).eval()
    dims = {"input_ids": {0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", max=64)}}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": torch.randint(3, 99, (2, 12))},
                                 dynamic_shapes=dims, strict=False)
        assert "argmax" in str(ep.graph)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for b, s in [(2, 12), (3, 7), (1, 33)]:
            ids = torch.randint(3, 99, (b, s))
            ids[torch.arange(b), torch.randint(0, s, (b,))] = 99  # the end token, anywhere
            want = model(input_ids=ids).pooler_output
            got = program(input_ids=ids)
            got = got["pooler_output"] if isinstance(got, dict) else got[1]
            assert rel_l2(got, want) < TOLERANCE["highest"], ((b, s), rel_l2(got, want))


@pytest.mark.parametrize("arch", ["Bart", "MBart"])
def test_bart_without_decoder_ids_shifts_its_input_ids_in_kiln(arch, cache_dir):
    """BartModel given input_ids alone feeds its decoder the ids shifted right
    (shift_tokens_right: `shifted[:, 1:] = ids[:, :-1]`, `shifted[:, 0] = start`, -100 read as
    the pad id): in-place writes into slices, one of size S - 1, which kiln reads as a roll of
    the ids and compares of positions. MBart's shift starts each row with its last token that
    is not padding (a sum of a bool mask into i64, then a gather). Either is one kiln graph at a
    dynamic batch and sequence, padded rows included."""
    import transformers as t
    torch.manual_seed(0)
    model = getattr(t, f"{arch}Model")(getattr(t, f"{arch}Config")(
        vocab_size=100, d_model=64, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=64, use_cache=False)).eval()
    dims = {"input_ids": {0: torch.export.Dim("B", max=8),
                          1: torch.export.Dim("S", min=3, max=60)}}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": torch.randint(3, 100, (2, 12))},
                                 dynamic_shapes=dims, strict=False)
        assert "slice_scatter" in str(ep.run_decompositions({}).graph)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for b, s in [(2, 12), (3, 7), (1, 3)]:
            ids = torch.randint(3, 100, (b, s))
            ids[-1, s - 1:] = model.config.pad_token_id
            ids[0, s // 2:] = model.config.pad_token_id
            want = model(input_ids=ids).last_hidden_state
            got = program(input_ids=ids)
            got = got["last_hidden_state"] if isinstance(got, dict) else got[0]
            assert rel_l2(got, want) < TOLERANCE["highest"], ((b, s), rel_l2(got, want))


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_sequence_classifier_reads_its_last_token_in_kiln(arch, cache_dir):
    """LlamaForSequenceClassification (a reward model's shape) and GPT-2's: the score of the last
    token before the padding, found by argmax and picked per batch entry, all in one kiln graph
    at a dynamic batch and sequence."""
    import transformers as t
    torch.manual_seed(0)
    small = dict(vocab_size=100, pad_token_id=0, num_labels=3)
    model = (t.LlamaForSequenceClassification(t.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, max_position_embeddings=64, **small)) if arch == "llama" else
        t.GPT2ForSequenceClassification(t.GPT2Config(n_layer=2, n_embd=64, n_head=4,
                                                     n_positions=64, **small))).eval()

    def padded(b, s):
        ids = torch.randint(1, 100, (b, s))
        for row in range(b):
            ids[row, s - row % 3:] = 0  # 0, 1 or 2 pads at the end
        return ids
    dims = {"input_ids": {0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", max=63)},
            "use_cache": None}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": padded(2, 12), "use_cache": False},
                                 dynamic_shapes=dims, strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for b, s in [(2, 12), (3, 7), (5, 33)]:
            ids = padded(b, s)
            want = model(input_ids=ids, use_cache=False).logits
            got = program(input_ids=ids, use_cache=False)
            got = got["logits"] if isinstance(got, dict) else got[0]
            assert got.shape == (b, 3)
            assert rel_l2(got, want) < TOLERANCE["highest"], ((b, s), rel_l2(got, want))


def _mixture_of_experts(arch: str, implementation: str):
    import transformers as t
    common = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                  vocab_size=100, experts_implementation=implementation)
    if arch == "mixtral":
        model = t.MixtralModel(t.MixtralConfig(num_local_experts=4, num_experts_per_tok=2,
                                               **common))
    elif arch == "llama4":
        # Chunked attention (chunks of 4) with rotary as complex numbers in layer 0; no rotary,
        # full attention and its temperature tuning (floor_scale 3) in layer 1; a sigmoid
        # router of top 1 over 4 experts and a shared expert in both.
        model = t.Llama4TextModel(t.Llama4TextConfig(
            num_local_experts=4, num_experts_per_tok=1, head_dim=16, attention_chunk_size=4,
            floor_scale=3, no_rope_layers=[1, 0], interleave_moe_layer_step=1,
            intermediate_size_mlp=96, **common))
    elif arch == "phimoe":
        model = t.PhimoeModel(t.PhimoeConfig(num_local_experts=4, num_experts_per_tok=2,
                                             **common))
    elif arch == "gpt_oss":
        model = t.GptOssModel(t.GptOssConfig(
            num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8,
            **{**common, "intermediate_size": 64}))
    elif arch == "deepseek_v3":
        model = t.DeepseekV3Model(t.DeepseekV3Config(
            n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
            moe_intermediate_size=32, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
            qk_nope_head_dim=8, v_head_dim=16, first_k_dense_replace=1, n_shared_experts=1,
            **{**common, "num_key_value_heads": 4}))
    else:
        model = t.Qwen2MoeModel(t.Qwen2MoeConfig(
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=64, **common))
    for p in model.parameters():
        p.data.normal_(0, 0.2)  # the experts' share of the output well above the tolerance
    return model.eval()


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe", "deepseek_v3", "gpt_oss", "phimoe",
                                  "llama4"])
def test_a_mixture_of_experts_runs_in_one_kiln_graph(arch, cache_dir):
    """Mixtral's, Qwen2-MoE's, DeepSeek-V3's, GPT-OSS's and PhiMoE's routers (a softmax, a topk,
    Qwen2-MoE's shared expert behind a sigmoid gate; DeepSeek-V3's sigmoid scores, a topk of
    expert groups scattered into a mask, the weights gathered at the topk's positions; its
    attention's keys a new_empty copied into; GPT-OSS's attention sinks, its gate and up
    interleaved; PhiMoE's sparse mixer, max along a dim, scores clamped to their row's max, the
    best expert's score scattered out for the second) and their experts as transformers'
    batched_mm writes them (each token repeated for its k experts, the experts' weights picked
    by id, a bmm) run in one kiln graph at a dynamic batch and sequence, and match eager. So
    does Llama 4 whole: its rotary as complex numbers, its chunked attention's mask (positions
    floor-divided), its router's top scores scattered into -inf, each token weighted for every
    expert and a bmm of each expert's rows, summed over the experts. The
    default grouped_mm experts (tokens sorted by expert, groups of data-dependent sizes) stay in
    PyTorch, their reason naming the implementation that runs in kiln."""
    torch.manual_seed(0)
    model = _mixture_of_experts(arch, "batched_mm")
    dims = {"input_ids": {0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", max=64)},
            "use_cache": None}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": torch.randint(0, 100, (2, 12)),
                                             "use_cache": False},
                                 dynamic_shapes=dims, strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        _matches_eager_at_three_sizes(model, program)
        if arch != "mixtral":
            return
        grouped = _mixture_of_experts(arch, "grouped_mm")
        ids = torch.randint(0, 100, (2, 12))
        ep = torch.export.export(grouped, (), {"input_ids": ids, "use_cache": False},
                                 strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        reasons = {f.op: f.reason for f in program.fallbacks}
        assert 'experts_implementation="batched_mm"' in \
            reasons["transformers.grouped_mm_fallback.default"], reasons
        got = program(input_ids=ids, use_cache=False)
        got = got["last_hidden_state"] if isinstance(got, dict) else got[0]
        want = grouped(input_ids=ids, use_cache=False).last_hidden_state
        assert rel_l2(got, want) < TOLERANCE["highest"]


def _encoders():
    import transformers as t
    common = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=64, vocab_size=100)
    return {
        "convbert": lambda: t.ConvBertModel(t.ConvBertConfig(embedding_size=64, **common)),
        "nystromformer": lambda: t.NystromformerModel(t.NystromformerConfig(**common)),
        "big_bird": lambda: t.BigBirdModel(t.BigBirdConfig(attention_type="original_full",
                                                           **common)),
    }


@pytest.mark.parametrize("arch", ["convbert", "nystromformer", "big_bird"])
def test_an_encoder_convolving_its_sequence_runs_in_one_kiln_graph(arch, cache_dir):
    """ConvBERT's separable conv1d and span unfold, and Nystromformer's depthwise conv of its
    values (65 offsets), along a dynamic sequence; BigBird's token_type_ids buffer sliced to
    it: each model one kiln graph at a dynamic batch and sequence, matching eager."""
    torch.manual_seed(0)
    model = _encoders()[arch]().eval()
    dims = {"input_ids": {0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", max=60)}}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": torch.randint(0, 100, (2, 12))},
                                 dynamic_shapes=dims, strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for shape in [(2, 12), (3, 7), (1, 60)]:
            ids = torch.randint(0, 100, shape)
            want = model(input_ids=ids).last_hidden_state
            got = program(input_ids=ids)
            got = got["last_hidden_state"] if isinstance(got, dict) else got[0]
            assert rel_l2(got, want) < TOLERANCE["highest"], (shape, rel_l2(got, want))


@pytest.mark.parametrize("arch", ["luke", "doge"])
def test_a_mask_sliced_to_its_dynamic_length_runs_in_one_kiln_graph(arch, cache_dir):
    """LUKE's and Doge's masks sliced to the sequence's own length (`mask[..., :S]` of a dim of
    size S, a slice with a symbolic end that is the whole dim): each model one kiln graph at a
    dynamic batch and sequence, matching eager."""
    import transformers as t
    torch.manual_seed(0)
    common = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=64, vocab_size=100)
    if arch == "luke":
        model = t.LukeModel(t.LukeConfig(entity_vocab_size=10, entity_emb_size=16, **common))
        extra = {}
    else:
        model = t.DogeModel(t.DogeConfig(num_key_value_heads=2, **common))
        extra = {"use_cache": False}
    model.eval()
    dims = {"input_ids": {0: torch.export.Dim("B", max=8), 1: torch.export.Dim("S", max=60)},
            **{k: None for k in extra}}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": torch.randint(0, 100, (2, 12)),
                                             **extra}, dynamic_shapes=dims, strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for shape in [(2, 12), (3, 7), (1, 60)]:
            ids = torch.randint(0, 100, shape)
            want = model(input_ids=ids, **extra).last_hidden_state
            got = program(input_ids=ids, **extra)
            got = got["last_hidden_state"] if isinstance(got, dict) else got[0]
            assert rel_l2(got, want) < TOLERANCE["highest"], (shape, rel_l2(got, want))
