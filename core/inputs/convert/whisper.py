"""CTranslate2 Whisper (faster-whisper format) -> transformers `WhisperForConditionalGeneration`.

CT2 fuses q, k, v of self-attention in `linear_0` (in that order; CT2 stores a zero k bias that
transformers does not have) and k, v of cross-attention in `attention/linear_1`; layer norms are
`gamma`/`beta`; the output projection is tied to the token embeddings. Weights are float16 in the
file and become float32 here (exact: every float16 is a float32).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import numpy as np

from .ct2 import read_ct2


def _ln(v: dict, src: str, dst: str, out: dict) -> None:
    out[f"{dst}.weight"] = v[f"{src}/gamma"]
    out[f"{dst}.bias"] = v[f"{src}/beta"]


def _lin(v: dict, src: str, dst: str, out: dict) -> None:
    out[f"{dst}.weight"] = v[f"{src}/weight"]
    if f"{src}/bias" in v:
        out[f"{dst}.bias"] = v[f"{src}/bias"]


def _split(v: dict, src: str, dsts: list[str], out: dict, d: int) -> None:
    w, b = v[f"{src}/weight"], v.get(f"{src}/bias")
    for j, dst in enumerate(dsts):
        out[f"{dst}.weight"] = w[j * d:(j + 1) * d]
        if b is not None and not dst.endswith("k_proj"):  # Whisper's k projections have no bias
            out[f"{dst}.bias"] = b[j * d:(j + 1) * d]


def _block(v: dict, s: str, t: str, out: dict, d: int) -> None:
    """Self-attention and feed-forward of one layer (the part encoder and decoder layers share)."""
    _split(v, f"{s}/self_attention/linear_0", [f"{t}.self_attn.{p}_proj" for p in "qkv"], out, d)
    _lin(v, f"{s}/self_attention/linear_1", f"{t}.self_attn.out_proj", out)
    _ln(v, f"{s}/self_attention/layer_norm", f"{t}.self_attn_layer_norm", out)
    _lin(v, f"{s}/ffn/linear_0", f"{t}.fc1", out)
    _lin(v, f"{s}/ffn/linear_1", f"{t}.fc2", out)
    _ln(v, f"{s}/ffn/layer_norm", f"{t}.final_layer_norm", out)


def whisper_state_dict(v: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """(transformers state dict as float32 numpy, WhisperConfig kwargs) from CT2 variables."""
    n_enc, n_dec = (1 + max(int(m.group(1)) for k in v if (m := re.match(rf"{s}/layer_(\d+)/", k)))
                    for s in ("encoder", "decoder"))
    vocab, d = v["decoder/embeddings/weight"].shape
    out: dict[str, np.ndarray] = {}
    e, dd = "model.encoder", "model.decoder"
    for c in ("conv1", "conv2"):
        _lin(v, f"encoder/{c}", f"{e}.{c}", out)
    out[f"{e}.embed_positions.weight"] = v["encoder/position_encodings/encodings"]
    _ln(v, "encoder/layer_norm", f"{e}.layer_norm", out)
    for i in range(n_enc):
        _block(v, f"encoder/layer_{i}", f"{e}.layers.{i}", out, d)
    out[f"{dd}.embed_tokens.weight"] = v["decoder/embeddings/weight"]
    out[f"{dd}.embed_positions.weight"] = v["decoder/position_encodings/encodings"]
    _ln(v, "decoder/layer_norm", f"{dd}.layer_norm", out)
    for i in range(n_dec):
        s, t = f"decoder/layer_{i}", f"{dd}.layers.{i}"
        _block(v, s, t, out, d)
        _lin(v, f"{s}/attention/linear_0", f"{t}.encoder_attn.q_proj", out)
        _split(v, f"{s}/attention/linear_1", [f"{t}.encoder_attn.{p}_proj" for p in "kv"], out, d)
        _lin(v, f"{s}/attention/linear_2", f"{t}.encoder_attn.out_proj", out)
        _ln(v, f"{s}/attention/layer_norm", f"{t}.encoder_attn_layer_norm", out)
    heads = int(v["encoder/num_heads"])
    cfg = dict(vocab_size=int(vocab), d_model=int(d), encoder_layers=n_enc, decoder_layers=n_dec,
               encoder_attention_heads=heads, decoder_attention_heads=int(v["decoder/num_heads"]),
               encoder_ffn_dim=int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
               decoder_ffn_dim=int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
               num_mel_bins=int(v["encoder/conv1/weight"].shape[1]),
               max_source_positions=int(v["encoder/position_encodings/encodings"].shape[0]),
               max_target_positions=int(v["decoder/position_encodings/encodings"].shape[0]))
    return {k: np.ascontiguousarray(a, dtype=np.float32) for k, a in out.items()}, cfg


def special_ids(vocab_size: int) -> dict:
    """Prompt and end ids: English-only models (vocab 51864) and multilingual ones (51865)."""
    if vocab_size == 51864:  # *.en
        return {"sot": 50257, "eot": 50256, "no_timestamps": 50362, "prompt": [50257, 50362]}
    # multilingual: <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
    return {"sot": 50258, "eot": 50257, "no_timestamps": 50363, "prompt": [50258, 50259, 50359, 50363]}


def build_whisper(model_bin: Path | list, out_dir: Path | None = None):
    """Rebuild `WhisperForConditionalGeneration` (float32) from a CT2 model; save it when out_dir."""
    # lazy: keeps torch and transformers out of a cache hit
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    spec, v = read_ct2(model_bin)
    if spec != "WhisperSpec":
        raise ValueError(f"not a CTranslate2 Whisper model (spec {spec!r})")
    sd, kw = whisper_state_dict(v)
    ids = special_ids(kw["vocab_size"])
    cfg = WhisperConfig(**kw, decoder_start_token_id=ids["sot"], eos_token_id=ids["eot"], pad_token_id=ids["eot"],
                        bos_token_id=ids["eot"], tie_word_embeddings=True)
    model = WhisperForConditionalGeneration(cfg)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(a) for k, a in sd.items()}, strict=False)
    missing = [k for k in missing if k != "proj_out.weight"]  # tied to embed_tokens
    if missing or unexpected:
        raise RuntimeError(f"Whisper conversion mismatch: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    model.eval()
    if out_dir is not None:
        model.save_pretrained(out_dir)
        (Path(out_dir) / "special_ids.json").write_text(json.dumps(ids))
    return model


@functools.lru_cache(maxsize=1)
def _fe():
    # lazy: keeps transformers out of a cache hit
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor()  # 80 log-mel bins, 16 kHz, 30 s windows: Whisper's defaults


def log_mel(audio: np.ndarray, sr: int = 16000) -> np.ndarray:
    """(80, 3000) log-mel features of up to 30 s of 16 kHz mono audio (zero padded)."""
    if sr != 16000:
        raise ValueError(f"Whisper features need 16 kHz audio, got {sr} Hz")
    return _fe()(audio, sampling_rate=16000, return_tensors="np")["input_features"][0]


