"""Character-level models through the text path: CANINE (deep layers on 4-character molecules)
and ByT5 (an encoder-decoder: its encoder is analysed).

CANINE's streaming statistics against hidden states computed here one window at a time, with
every molecule state placed literally at the characters it covers (molecule j >= 1 at characters
[4(j-1), 4j), the last one also at the characters past its block); tiny CANINE and ByT5 folders
(config + weights + tokenizer, as a hub model comes) analysed end to end by the pipeline, which
loads them as it loads `google/canine-s` or `google/byt5-small` where the hub is reachable.
"""

import numpy as np
import pytest
import torch

from core.compute.extract import analysed_masks, extract_stats
from core.inputs.corpora import TokenWindows
from core.inputs.modalities.adapters import CanineAdapter, adapter_for
from core.stats import kernels as M

TOL = 1e-6
SEQ = 26  # [CLS] + 24 characters + [SEP]: not a multiple of the downsampling rate 4


def _tiny():
    from transformers import CanineConfig, CanineModel

    torch.manual_seed(0)
    cfg = CanineConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       num_hash_buckets=64, max_position_embeddings=256, local_transformer_stride=8)
    return CanineModel(cfg, add_pooling_layer=False).eval()


def _windows():
    from transformers import CanineTokenizer

    tok = CanineTokenizer()
    text = ("Anisotropy: the hidden states of a Transformer share a common direction; "
            "les états cachés partagent une direction commune — 各向异性。") * 2
    body = tok(text, add_special_tokens=False)["input_ids"]
    n = SEQ - 2
    ids = [np.asarray([tok.cls_token_id] + body[k:k + n] + [tok.sep_token_id]) for k in range(0, len(body) - n, n)]
    special = [np.isin(w, [tok.cls_token_id, tok.sep_token_id]) for w in ids]
    doc = np.arange(len(ids)) // 2
    return TokenWindows(ids, special, doc, len(set(doc.tolist())), SEQ * len(ids), (SEQ - 2) * len(ids))


def _at_characters(h: np.ndarray, T: int, rate: int) -> np.ndarray:
    """(M, d) molecule states -> (T, d): character t reads molecule min(t // rate + 1, M - 1)."""
    M_ = h.shape[0]
    return np.stack([h[min(t // rate + 1, M_ - 1)] for t in range(T)])


def test_canine_streaming_equals_naive():
    model, windows = _tiny(), _windows()
    adapter = adapter_for(model)
    assert isinstance(adapter, CanineAdapter)
    arrays, _ = extract_stats(model, windows, batch_size=3, sample_size=10**6, seed=1, adapter=adapter)
    masks = analysed_masks(windows, "exclude")
    per_window = []
    with torch.inference_mode():
        for ids in windows.ids:
            t = torch.as_tensor(ids)[None]
            hs = model(input_ids=t, attention_mask=torch.ones_like(t), output_hidden_states=True).hidden_states
            rows = [h[0].numpy() for h in hs]
            molecule = [r.shape[0] != SEQ for r in rows]
            assert molecule == [False] * 2 + [True] * 3 + [False] * 2  # chars, 2 deep layers + input, chars
            per_window.append(np.stack([_at_characters(r, SEQ, model.config.downsampling_rate) if m else r
                                        for r, m in zip(rows, molecule)]))
    L1 = per_window[0].shape[0]
    assert adapter.dims(model) == (L1, 32) and arrays["sum_abs"].shape == (L1, 32)
    X = [np.concatenate([p[l][m] for p, m in zip(per_window, masks)]).astype(np.float64) for l in range(L1)]
    S = arrays["group_sum_u"].sum(1)
    for l, Xl in enumerate(X):
        N = len(Xl)
        assert int(arrays["n"]) == N == (SEQ - 2) * len(windows.ids)
        U = Xl / np.linalg.norm(Xl, axis=1, keepdims=True)
        C = U @ U.T
        assert abs(M.mean_cosine(S[l], N) - C[~np.eye(N, dtype=bool)].mean()) < TOL
        assert abs(arrays["sum_norm"][l] / N - np.linalg.norm(Xl, axis=1).mean()) < 1e-5
        np.testing.assert_allclose(arrays["sample"][l], Xl, rtol=1e-5, atol=1e-5)
    # token ids are Unicode code points: self-similarity tracks characters
    assert len(arrays["id_list"]) > 0 and int(arrays["id_list"].max()) < 0x110000


def _byt5():
    from transformers import T5Config, T5Model

    torch.manual_seed(0)
    return T5Model(T5Config(vocab_size=384, d_model=32, d_kv=8, d_ff=64, num_layers=3, num_decoder_layers=1,
                            num_heads=2, feed_forward_proj="gated-gelu")).eval()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["canine", "byt5"])
def test_character_folder_analyzed_end_to_end(tmp_path, cache_dir, kind):
    from transformers import ByT5Tokenizer, CanineTokenizer

    from core.base.spec import RunSpec
    from core.compute.pipeline import analyze

    folder = tmp_path / kind
    (_tiny() if kind == "canine" else _byt5()).save_pretrained(folder)
    (CanineTokenizer() if kind == "canine" else ByT5Tokenizer()).save_pretrained(folder)
    res = analyze(RunSpec(model=str(folder), corpus="wiki-en", max_tokens=400, max_seq_len=64, batch_size=4,
                          sample=200, seed=0, device="cpu", dtype="float32"), cache_dir)
    model = res["manifest"]["model"]
    # CANINE: 2 character states, 2 + 1 molecule states, 2 character states; ByT5: its encoder (3 layers)
    expected = ("CanineModel", 6) if kind == "canine" else ("T5Stack", 3)
    assert (model["model_class"], model["n_layers"]) == expected
    rows = res["layers"]
    assert len(rows) == expected[1] + 1 and all(-1 <= r["mean_cosine"] <= 1 for r in rows)
    assert res["not_applicable"] == []  # characters and bytes have ids: the token-id metrics apply
    assert any(r["self_similarity"] is not None for r in rows)
