"""Models of other modalities: converted real weights and their random-init controls.

Converted models are rebuilt once and kept as safetensors under `<cache>/models/` (a reload takes
well under a second); controls are built from the same configuration with seeded random weights.
Everything here imports torch: the fingerprints (no torch) live in `core.inputs.models`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from ...base.settings import models_dir
from ..convert import sources
from ..convert.dinov2 import build_dinov2
from ..convert.whisper import build_whisper

UNTRAINED_SEED = 1234


def _converted(cache_dir: Path, name: str, fingerprint: str, build) -> Path:
    """A converted model folder under the cache (built once; concurrent processes wait)."""
    out = models_dir(cache_dir) / f"{name}-{fingerprint[:12]}"
    if (out / "DONE").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "DONE").exists():
            return out
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        build(tmp)
        (tmp / "DONE").write_text(name)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    return out


def dinov2_vits14(cache_dir: Path, fingerprint: str):
    # lazy: keeps transformers out of a cache hit
    from transformers import Dinov2Model

    folder = _converted(cache_dir, "dinov2-vits14", fingerprint,
                        lambda tmp: build_dinov2(sources.dinov2_onnx(), tmp))
    return Dinov2Model.from_pretrained(str(folder))


def dinov2_vits14_config():
    # lazy: keeps transformers out of a cache hit
    from transformers import Dinov2Config

    # the converted model's configuration (dinov2_state_dict derives the same from the graph)
    return Dinov2Config(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, mlp_ratio=4, patch_size=14,
                        image_size=518, layerscale_value=1.0, layer_norm_eps=1e-6)


def whisper_encoder(cache_dir: Path, fingerprint: str, which: str):
    """The encoder of Whisper tiny.en or base (converted from CTranslate2)."""
    # lazy: keeps transformers out of a cache hit
    from transformers import WhisperForConditionalGeneration

    src = sources.whisper_tiny_en_dir() / "model.bin" if which == "tiny.en" else sources.whisper_base_parts()
    folder = _converted(cache_dir, f"whisper-{which}", fingerprint, lambda tmp: build_whisper(src, tmp))
    return WhisperForConditionalGeneration.from_pretrained(str(folder)).model.encoder


def whisper_tiny_en_config():
    # lazy: keeps transformers out of a cache hit
    from transformers import WhisperConfig

    return WhisperConfig(vocab_size=51864, d_model=384, encoder_layers=4, decoder_layers=4,
                         encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
                         decoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=1500, max_target_positions=448)


def untrained(k: int, kind: str):
    """A random-init control of the same configuration as the trained model (seed UNTRAINED_SEED + k)."""
    # lazy: keeps torch and transformers out of a cache hit
    import torch
    import transformers as tf

    torch.manual_seed(UNTRAINED_SEED + k)
    if kind == "vit":
        return tf.Dinov2Model(dinov2_vits14_config())
    if kind == "whisper":
        return tf.WhisperModel(whisper_tiny_en_config()).encoder
    if kind == "resnet":
        return tf.ResNetModel(tf.ResNetConfig())  # ResNet-50
    if kind == "mobilenet":
        # lazy: keeps torch out of a cache hit
        from ..convert.mobilenet import MobileNetV2

        return MobileNetV2().eval()
    raise ValueError(kind)


def mobilenet_v2():
    # lazy: keeps torch out of a cache hit
    from ..convert.mobilenet import build_mobilenet_v2

    return build_mobilenet_v2(sources.mobilenet_v2_pth())


def model_channels(model) -> list[int]:
    """Channels of every hidden state of a CNN (stem first)."""
    # lazy: keeps torch out of a cache hit
    from ..convert.mobilenet import MobileNetV2

    if isinstance(model, MobileNetV2):
        out = []
        for f in model.features:
            convs = [m for m in f.modules() if isinstance(m, __import__("torch").nn.Conv2d)]
            out.append(convs[-1].out_channels)
        return out
    cfg = model.config  # transformers ResNet: embedder + one map per stage
    return [cfg.embedding_size] + list(cfg.hidden_sizes)
