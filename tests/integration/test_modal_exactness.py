"""Streaming statistics of image, audio and CNN items against an O(N^2) computation on hidden
states computed here one item at a time (tiny random ViT, Whisper encoder and ResNet).

As in test_exactness.py: the sample is larger than the corpus, so it must hold EVERY analysed
position; the reference runs the model itself and applies the definitions literally. Audio clips
are shorter than the 30 s window: the frames past their end must never reach a statistic.
"""

import numpy as np
import pytest
import torch

from core.compute.extract import analysed_masks, extract_stats
from core.inputs.modalities.adapters import CNNAdapter, ViTAdapter, WhisperEncoderAdapter
from core.inputs.modalities.audio import Clip
from core.inputs.modalities.items import audio_items, image_items
from core.stats import kernels as M
from tests.internals import load_pictures

TOL = 1e-6
pytestmark = pytest.mark.slow


def _vit():
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    return Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    patch_size=28, image_size=224)).eval()


def _whisper():
    from transformers import WhisperConfig, WhisperModel

    torch.manual_seed(0)
    cfg = WhisperConfig(d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    return WhisperModel(cfg).encoder.eval()


def _resnet():
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    return ResNetModel(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")).eval()


def _clips():
    rng = np.random.default_rng(0)
    sr = 16000
    lens = [1.3, 2.0, 0.7, 3.1, 1.0]
    return [Clip(f"noise{i}", i, s, data=(0.1 * rng.standard_normal(int(s * sr))).astype(np.float32))
            for i, s in enumerate(lens)]


def _case(kind):
    if kind == "vit":
        model = _vit()
        adapter = ViTAdapter()
        positions, prefix, grid = adapter.layout(model)
        items = image_items(load_pictures(6), positions, prefix, grid, 10**9, seed=1)
    elif kind == "whisper":
        model, adapter = _whisper(), WhisperEncoderAdapter()
        items = audio_items(_clips(), 10**9, seed=1)
    else:
        model = _resnet()
        adapter = CNNAdapter(model)
        positions, prefix, grid = adapter.layout(model)
        items = image_items(load_pictures(6), positions, prefix, grid, 10**9, seed=1)
    return model, adapter, items


@pytest.fixture(scope="module", params=["vit", "whisper", "cnn"])
def case(request):
    model, adapter, items = _case(request.param)
    arrays, _ = extract_stats(model, items, batch_size=4, sample_size=10**6, seed=2, adapter=adapter)
    masks = analysed_masks(items, "exclude")
    per_item = []
    with torch.inference_mode():
        for i in range(len(items.ids)):
            hs, _ = adapter.forward(model, items, np.array([i]), torch.device("cpu"))
            per_item.append(np.stack([h[0].float().numpy() for h in hs]))  # (L+1, T, d)
    L1 = per_item[0].shape[0]
    X = [np.concatenate([p[l][m] for p, m in zip(per_item, masks)]).astype(np.float64) for l in range(L1)]
    win = np.concatenate([np.full(int(m.sum()), i) for i, m in enumerate(masks)])
    return dict(kind=request.param, arrays=arrays, items=items, masks=masks, X=X, win=win, adapter=adapter)


def test_positions_analysed(case):
    items, masks, a = case["items"], case["masks"], case["arrays"]
    n = sum(int(m.sum()) for m in masks)
    assert int(a["n"]) == n == len(case["X"][0]) == items.n_content_tokens
    if case["kind"] == "whisper":
        # 1.3 s -> 65 frames of 20 ms, and so on; the other 1435+ frames of each window are padding
        assert sorted(int(m.sum()) for m in masks) == [35, 50, 65, 100, 155]
    if case["kind"] == "vit":
        assert all(not m[0] and m[1:].all() for m in masks)  # CLS excluded, 8x8 patches analysed
    if case["kind"] == "cnn":
        widths = case["adapter"].channels
        assert widths == [8, 8, 16]  # stem, two stages
        for l, w in enumerate(widths):
            assert case["X"][l].shape[1] == 16 and not case["X"][l][:, w:].any()  # padded with zeros only


def test_streaming_equals_naive(case):
    a, X, win = case["arrays"], case["X"], case["win"]
    S = a["group_sum_u"].sum(1)
    for l, Xl in enumerate(X):
        N = len(Xl)
        U = Xl / np.linalg.norm(Xl, axis=1, keepdims=True)
        C = U @ U.T
        off = ~np.eye(N, dtype=bool)
        assert abs(M.mean_cosine(S[l], N) - C[off].mean()) < TOL
        # pairs from different sources (photographs, recordings): crops of one photograph are one context
        doc = np.asarray(case["items"].doc)[win]
        cross = M.cross_sequence_cosine(S[l], N, float(a["sum_doc_sq"][l]), float(a["sum_doc_n_sq"]))
        assert abs(cross - C[doc[:, None] != doc[None, :]].mean()) < TOL
        assert abs(a["sum_norm"][l] / N - np.linalg.norm(Xl, axis=1).mean()) < TOL
        w = Xl.shape[1]
        # batched float32 convolutions differ from one-at-a-time ones in the last bits: relative tolerance
        np.testing.assert_allclose(a["sum_abs"][l][:w] / N, np.abs(Xl).mean(0), rtol=1e-5, atol=TOL)
        np.testing.assert_allclose(a["max_abs"][l][:w], np.abs(Xl).max(0), rtol=1e-5, atol=TOL)
        intra = np.mean([np.mean(U[win == i] @ (Xl[win == i].mean(0) / np.linalg.norm(Xl[win == i].mean(0))))
                         for i in np.unique(win)])
        assert abs(a["intra_sum"][l] / a["intra_n"][l] - intra) < TOL
        # the sample holds every analysed position, in corpus order, padding excluded
        np.testing.assert_allclose(a["sample"][l][:, :w], Xl, rtol=1e-5, atol=1e-5)
    assert len(a["id_list"]) == 0  # no token ids to track for self-similarity
