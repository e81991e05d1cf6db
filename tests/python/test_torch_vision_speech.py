"""Vision and speech models of transformers through kiln.torch.compile_exported, built from
small configs (no download): each runs whole in one kiln graph, convolutions, norms and pools
included, and matches eager. Any op left in PyTorch, or a second kiln graph, fails the test."""
from __future__ import annotations

import pytest
import torch

import kiln.torch
from conftest import TOLERANCE, rel_l2

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.mark.parametrize("arch", ["vit", "clip_vision", "convnext", "swin", "segformer",
                                  "resnet", "poolformer", "efficientnet", "mobilenet_v2",
                                  "videomae", "convnextv2", "dpt", "mobilevit", "dinov2",
                                  "levit", "beit", "detr", "dinov3"])
def test_a_vision_model_is_one_kiln_graph_convolutions_included(arch, cache_dir):
    """ViT and CLIP's vision tower: the patch embedding (a conv2d whose stride is its kernel)
    runs in kiln as the image's patches times the weight, at a dynamic batch. ConvNeXt's and
    SegFormer's depthwise convolutions (a matmul batched over the groups), ConvNeXt's pool over
    H and W, and Swin's relative position bias (its table by a constant index of more than 64
    runs) run in kiln too, and so do ResNet's eval batch norms and stem max pool, PoolFormer's
    average pools (the padding not counted) and EfficientNet's pooler (an average pool in ceil
    mode whose kernel is past the input) and MobileNetV2's relu6s; so do VideoMAE's tubelet
    embedding (a conv3d whose stride is its kernel), ConvNeXt V2's global response norm (a
    vector norm), DPT's position embeddings resized bilinearly to their own size, and
    MobileViT's bilinear resizes down to its patches and back, and DINOv2's position embeddings
    resized bicubically to an image of another shape (40 x 24 where they are for 32 x 32: 4 x 4
    patches to 5 x 3); so do LeViT's attention biases (a table by a constant index of 2 dims)
    and its batch norms of [B * N, C], and Swin's window attention (shifted windows with their
    mask included), whose batch is the image batch times the windows; so do BEiT's relative
    position index (a meshgrid of the window's positions) and DETR's sine position embedding
    (a floor division by 2), its ResNet backbone's frozen batch norms, and its encoder and
    decoder; so do DINOv3's rotary patch centres (an arange from 0.5) and angles (a tile).
    Every output is compared (the pooled ones too), at a dynamic batch."""
    import transformers as t
    torch.manual_seed(0)
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, image_size=32, patch_size=8)
    model = {
        "vit": lambda: t.ViTModel(t.ViTConfig(**small)),
        "clip_vision": lambda: t.CLIPVisionModel(t.CLIPVisionConfig(**small)),
        "convnext": lambda: t.ConvNextModel(t.ConvNextConfig(
            hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)),
        "swin": lambda: t.SwinModel(t.SwinConfig(
            image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 2],
            window_size=4)),
        "segformer": lambda: t.SegformerModel(t.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
            num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])),
        "resnet": lambda: t.ResNetModel(t.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])),
        "poolformer": lambda: t.PoolFormerModel(t.PoolFormerConfig(
            hidden_sizes=[16, 32], depths=[1, 1], num_encoder_blocks=2, patch_sizes=[7, 3],
            strides=[4, 2], padding=[2, 1])),
        "efficientnet": lambda: t.EfficientNetModel(t.EfficientNetConfig(
            image_size=32, width_coefficient=0.25, depth_coefficient=0.2, hidden_dim=320)),
        "mobilenet_v2": lambda: t.MobileNetV2Model(t.MobileNetV2Config(
            image_size=32, depth_multiplier=0.25)),
        "videomae": lambda: t.VideoMAEModel(t.VideoMAEConfig(
            **small, num_frames=4, tubelet_size=2)),
        "convnextv2": lambda: t.ConvNextV2Model(t.ConvNextV2Config(
            hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)),
        "dpt": lambda: t.DPTModel(t.DPTConfig(**small)),
        "mobilevit": lambda: t.MobileViTModel(t.MobileViTConfig(
            image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64])),
        "dinov2": lambda: t.Dinov2Model(t.Dinov2Config(**small)),
        "dinov3": lambda: t.DINOv3ViTModel(t.DINOv3ViTConfig(**small, num_register_tokens=2)),
        "levit": lambda: t.LevitModel(t.LevitConfig(
            image_size=64, hidden_sizes=[16, 24, 32], num_attention_heads=[1, 2, 2],
            depths=[1, 1, 1], key_dim=[8, 8, 8], down_ops=[["Subsample", 8, 1, 4, 2, 2]] * 2)),
        "beit": lambda: t.BeitModel(t.BeitConfig(**small, use_relative_position_bias=True)),
        "detr": lambda: t.DetrModel(t.DetrConfig(
            use_timm_backbone=False, use_pretrained_backbone=False, num_queries=5,
            backbone_config=t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 16],
                                           depths=[1, 1, 1, 1], out_features=["stage4"]),
            d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64)),
    }[arch]().eval()
    # A video: [B, frames, C, H, W].
    pixel_shape = {"videomae": (4, 3, 32, 32), "dinov2": (3, 40, 24),
                   "levit": (3, 64, 64), "detr": (3, 64, 64)}.get(arch, (3, 32, 32))
    if arch in ("efficientnet", "mobilenet_v2", "mobilevit", "levit"):  # zeros out as initialised
        for norm in model.modules():
            if isinstance(norm, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                norm.weight.data.uniform_(0.5, 1.5)
                norm.bias.data.uniform_(-0.5, 0.5)
                norm.running_mean.uniform_(-0.5, 0.5)
                norm.running_var.uniform_(0.5, 2)
    if arch == "convnextv2":  # as initialised, its response norms add nothing
        for name, param in model.named_parameters():
            if ".grn." in name:
                param.data.uniform_(-1, 1)
    dims = {"pixel_values": {0: torch.export.Dim("B", max=8)}}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"pixel_values": torch.randn(2, *pixel_shape)},
                                 dynamic_shapes=dims, strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for b in (2, 1, 5):
            pixels = torch.randn(b, *pixel_shape)
            want = model(pixel_values=pixels)
            got = program(pixel_values=pixels)
            assert list(got.keys()) == list(want.keys()), (list(got.keys()), list(want.keys()))
            for key in want.keys():
                assert rel_l2(got[key], want[key]) < TOLERANCE["highest"], \
                    (b, key, rel_l2(got[key], want[key]))


def test_a_vocoder_is_one_kiln_graph_transposed_convolutions_included(cache_dir):
    """SpeechT5's HiFi-GAN vocoder, spectrogram to waveform: its upsampling transposed conv1d
    layers, leaky relus and residual blocks of dilated conv1d layers, in one kiln graph at a
    dynamic batch."""
    import transformers as t
    torch.manual_seed(0)
    model = t.SpeechT5HifiGan(t.SpeechT5HifiGanConfig(
        model_in_dim=16, upsample_initial_channel=32, upsample_rates=[4, 2],
        upsample_kernel_sizes=[8, 4], resblock_kernel_sizes=[3, 5],
        resblock_dilation_sizes=[[1, 3], [1, 3]], normalize_before=False)).eval()
    dims = ({0: torch.export.Dim("B", max=8)},)
    with torch.no_grad():
        ep = torch.export.export(model, (torch.randn(2, 20, 16),), dynamic_shapes=dims,
                                 strict=False)
        assert "conv_transpose1d" in str(ep.graph) and "leaky_relu" in str(ep.graph)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for b in (2, 3):
            spectrogram = torch.randn(b, 20, 16)
            want, got = model(spectrogram), program(spectrogram)
            got = got if torch.is_tensor(got) else got[0]
            assert got.shape == want.shape == (b, 160), (got.shape, want.shape)
            assert rel_l2(got, want) < TOLERANCE["highest"], (b, rel_l2(got, want))


def test_a_speech_encoder_is_one_kiln_graph_feature_extractor_included(cache_dir):
    """wav2vec2 from raw audio: its feature extractor's strided conv1d layers with a group norm of
    a group per channel, and its positional convolution of 128 kernel offsets in groups whose
    weight is a weight norm's (computed in the graph from its two parameters), all in one kiln
    graph with the encoder, at a dynamic batch. HuBERT's model is the same code."""
    import transformers as t
    torch.manual_seed(0)
    model = t.Wav2Vec2Model(t.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=128, num_conv_pos_embedding_groups=4,
        feat_extract_norm="group")).eval()
    dims = {"input_values": {0: torch.export.Dim("B", max=8)}}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_values": torch.randn(2, 400)},
                                 dynamic_shapes=dims, strict=False)
        assert "group_norm" in str(ep.graph) and "_weight_norm" in str(ep.graph)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for b in (2, 3):
            audio = torch.randn(b, 400)
            want = model(input_values=audio).last_hidden_state
            got = program(input_values=audio)
            got = got["last_hidden_state"] if isinstance(got, dict) else got[0]
            assert got.shape == want.shape
            assert rel_l2(got, want) < TOLERANCE["highest"], (b, rel_l2(got, want))


def test_whispers_encoder_is_one_kiln_graph_at_a_dynamic_batch(cache_dir):
    """Whisper's encoder from a log-mel spectrogram: its two conv1d layers (the second strided),
    gelus, fixed sinusoidal positions and pre-norm layers, one kiln graph at a dynamic batch."""
    import transformers as t
    torch.manual_seed(0)
    model = t.WhisperModel(t.WhisperConfig(
        d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
        max_source_positions=50, vocab_size=100, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1)).encoder.eval()
    dims = {"input_features": {0: torch.export.Dim("B", max=8)}}
    with torch.no_grad():
        ep = torch.export.export(model, (), {"input_features": torch.randn(2, 16, 100)},
                                 dynamic_shapes=dims, strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        for b in (2, 3, 1):
            features = torch.randn(b, 16, 100)
            want = model(input_features=features).last_hidden_state
            got = program(input_features=features)
            got = got["last_hidden_state"] if isinstance(got, dict) else got[0]
            assert got.shape == want.shape == (b, 50, 64)
            assert rel_l2(got, want) < TOLERANCE["highest"], (b, rel_l2(got, want))


def test_sams_image_encoder_at_a_dynamic_batch_matches_eager(cache_dir):
    """SAM's image encoder: its relative positions (einsums) run in kiln at a fixed batch; at
    a dynamic batch its windows multiply the batch (4*B, 8*B) and its einsums and an unbind of
    those merged dims stay in PyTorch (a permute of them runs in kiln). Its window sizes (4*B)
    are shape arithmetic kiln skips inside a graph where only views read them, but which
    PyTorch reads once those views are left to it: the plan computes them in PyTorch (before,
    a KeyError)."""
    import transformers as t
    torch.manual_seed(0)
    model = t.SamVisionModel(t.SamVisionConfig(
        image_size=64, patch_size=16, hidden_size=32, output_channels=16, num_hidden_layers=2,
        num_attention_heads=2, window_size=2, global_attn_indexes=[1], mlp_dim=64)).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.2)
    with torch.no_grad():
        pixels = torch.randn(2, 3, 64, 64)
        ep = torch.export.export(model, (), {"pixel_values": pixels}, strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert not program.fallbacks and len(program.executables) == 1, program.fallbacks
        want = model(pixel_values=pixels).last_hidden_state
        assert rel_l2(program(pixel_values=pixels)["last_hidden_state"], want) < \
            TOLERANCE["highest"]
        dims = {"pixel_values": {0: torch.export.Dim("B", max=8)}}
        ep = torch.export.export(model, (), {"pixel_values": pixels}, dynamic_shapes=dims,
                                 strict=False)
        program = kiln.torch.compile_exported(ep, target="cpu", precision="highest",
                                              cache_dir=cache_dir, fallbacks="allow")
        assert {f.op for f in program.fallbacks} == {
            "aten.einsum.default", "aten.unbind.int"}, program.fallbacks
        for b in (2, 3, 1):
            pixels = torch.randn(b, 3, 64, 64)
            want = model(pixel_values=pixels).last_hidden_state
            got = program(pixel_values=pixels)["last_hidden_state"]
            assert rel_l2(got, want) < TOLERANCE["highest"], (b, rel_l2(got, want))
