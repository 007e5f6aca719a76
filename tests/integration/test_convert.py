"""The converters in core/inputs/convert/ against independent references on real inputs:
DINOv2 vs the ONNX graph's own intermediate tensors, Whisper by transcribing a real recording,
MobileNetV2 by its published hash and by classifying sample photographs."""

import re

import numpy as np
import pytest

pytestmark = pytest.mark.slow

BECKETT = "ever tried ever failed no matter try again fail again fail better"


def _words(s: str) -> list[str]:
    return re.sub(r"[^a-z ]", " ", s.lower()).split()


def _images():
    from skimage import data

    return [data.astronaut(), data.coffee(), data.camera(), data.chelsea()]


def test_dinov2_hidden_states_equal_onnx_graph():
    import torch

    from core.inputs.convert.dinov2 import build_dinov2, onnx_hidden_states, preprocess
    from core.inputs.convert.sources import dinov2_onnx

    model = build_dinov2(dinov2_onnx())
    x = np.stack([preprocess(im) for im in _images()])
    ref = onnx_hidden_states(dinov2_onnx(), x)
    with torch.inference_mode():
        hs = model(pixel_values=torch.from_numpy(x), output_hidden_states=True).hidden_states
    assert len(hs) == len(ref) == 13  # embeddings + 12 blocks
    for layer, (h, r) in enumerate(zip(hs, ref)):
        assert h.shape == r.shape == (4, 257, 384)  # CLS + 16x16 patches
        np.testing.assert_allclose(h.numpy(), r, atol=1e-4, rtol=0, err_msg=f"layer {layer}")
    # Not trivially equal: the blocks change the states (and a zeroed model would fail above).
    assert np.abs(ref[-1] - ref[0]).max() > 1.0


def _beckett():
    import soundfile as sf

    from core.inputs.convert.sources import beckett_wav

    audio, sr = sf.read(beckett_wav(), dtype="float32")
    assert sr == 16000
    return audio


def test_whisper_tiny_en_transcribes_a_real_recording():
    from tokenizers import Tokenizer

    from core.inputs.convert.sources import whisper_tiny_en_dir
    from core.inputs.convert.whisper import build_whisper, greedy_transcribe

    d = whisper_tiny_en_dir()
    model = build_whisper(d / "model.bin")
    assert (model.config.encoder_layers, model.config.d_model, model.config.vocab_size) == (4, 384, 51864)
    text = greedy_transcribe(model, _beckett(), Tokenizer.from_file(str(d / "tokenizer.json")))
    assert _words(text) == _words(BECKETT), text


def test_whisper_base_transcribes_a_real_recording():
    from tokenizers import Tokenizer

    from core.inputs.convert.sources import whisper_base_parts, whisper_base_tokenizer
    from core.inputs.convert.whisper import build_whisper, greedy_transcribe

    model = build_whisper(whisper_base_parts())
    assert (model.config.encoder_layers, model.config.d_model, model.config.vocab_size) == (6, 512, 51865)
    words = _words(greedy_transcribe(model, _beckett(), Tokenizer.from_file(str(whisper_base_tokenizer()))))
    # base hears "Never tried" for "Ever tried" (greedy, no beam): every other word must match
    assert words[1:] == _words(BECKETT)[1:] and words[0] in ("ever", "never"), words


def test_ct2_reader_rejects_a_truncated_file(tmp_path):
    from core.inputs.convert.ct2 import read_ct2
    from core.inputs.convert.sources import whisper_tiny_en_dir

    p = tmp_path / "model.bin"
    p.write_bytes((whisper_tiny_en_dir() / "model.bin").read_bytes()[:4096])
    with pytest.raises(ValueError, match="truncated"):
        read_ct2(p)


def test_mobilenet_v2_hash_and_imagenet_classes(tmp_path):
    import torch

    from core.inputs.convert.dinov2 import preprocess
    from core.inputs.convert.mobilenet import build_mobilenet_v2, check_sha256_prefix
    from core.inputs.convert.sources import mobilenet_v2_pth

    p = mobilenet_v2_pth()
    assert check_sha256_prefix(p).startswith("b0353104")
    model = build_mobilenet_v2(p)
    from skimage import data

    x = torch.from_numpy(np.stack([preprocess(data.chelsea()), preprocess(data.coffee())]))
    with torch.inference_mode():
        top = model(x).argmax(-1).tolist()
        maps = model.stage_outputs(x)
    assert 281 <= top[0] <= 285, top  # a domestic cat class (tabby, tiger cat, Persian, Siamese, Egyptian)
    assert top[1] == 967, top  # espresso
    assert len(maps) == 19 and maps[-1].shape == (2, 1280, 7, 7)
    bad = tmp_path / p.name
    bad.write_bytes(p.read_bytes()[:-1] + b"\x00")
    with pytest.raises(ValueError, match="does not match"):
        check_sha256_prefix(bad)
