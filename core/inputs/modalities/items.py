"""Items of other modalities laid out like token windows, so one extraction path serves all.

An `Items` has, per item, one entry per position the model outputs (patches, audio frames, CNN
grid cells): `ids` (a pseudo token id 0: images and audio have no vocabulary), `special` (CLS and
register tokens, excluded by default like [CLS] in text), `valid` (positions that exist: audio
frames past the end of the clip are False and never analysed, whatever the policy) and `doc` (the
photograph or recording it comes from). `payload[i]` is what the adapter feeds the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .audio import SAMPLE_RATE, Clip
from .images import Picture

WHISPER_FRAMES = 1500  # encoder positions of one 30 s window (20 ms each)
WHISPER_SECONDS = 30.0
FRAME_SECONDS = WHISPER_SECONDS / WHISPER_FRAMES
CNN_GRID = 7  # CNN tokens: the 7x7 grid of image locations, read at every stage


@dataclass
class Items:
    modality: str  # "image" | "audio"
    ids: list[np.ndarray]
    special: list[np.ndarray]
    valid: list[np.ndarray]
    doc: np.ndarray
    payload: list
    names: list[str]
    n_documents: int
    n_tokens_total: int
    n_content_tokens: int
    has_token_ids: bool = False
    grid: tuple[int, int] | None = None  # image: patch rows, cols
    n_prefix: int = 0  # image: CLS/register positions before the patches
    unit: str = "patch"  # image: what a grid position is ("patch" of a ViT, "cell" of a CNN's 7x7 grid)
    offsets_s: list[float] = field(default_factory=list)  # audio: start of each window in its clip (s)
    next_position: int = 0


def _order(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n)


def image_items(pictures: list[Picture], positions: int, prefix: int, grid: tuple[int, int], max_tokens: int,
                seed: int, unit: str = "patch") -> Items:
    """Pictures in a seeded order until `max_tokens` analysed positions (prefix tokens excluded)."""
    chosen = []
    content = 0
    for i in _order(len(pictures), seed):
        if content >= max_tokens:
            break
        chosen.append(pictures[int(i)])
        content += positions - prefix
    ids = [np.zeros(positions, dtype=np.int64) for _ in chosen]
    special = [np.arange(positions) < prefix for _ in chosen]
    valid = [np.ones(positions, dtype=bool) for _ in chosen]
    return Items("image", ids, special, valid, np.asarray([p.source for p in chosen]), chosen,
                 [p.name for p in chosen], len({p.source for p in chosen}), positions * len(chosen), content,
                 grid=grid, n_prefix=prefix, unit=unit)


def audio_items(clips: list[Clip], max_tokens: int, seed: int) -> Items:
    """Clips in a seeded order until `max_tokens` analysed frames; a clip longer than 30 s becomes
    several windows (never crossing clips). Frames past the end of the audio are not valid.

    Clips are taken whole, except the one that reaches the budget: it ends with the window in which
    the budget is met (as a text document does), so a long clip is never decoded past the budget."""
    ids, special, valid, doc, payload, names, offs = [], [], [], [], [], [], []
    content = 0
    for i in _order(len(clips), seed):
        if content >= max_tokens:
            break
        c = clips[int(i)]
        n_win = max(1, math.ceil(c.seconds / WHISPER_SECONDS))
        for w in range(n_win):
            if content >= max_tokens:  # the budget is met inside this clip: its later windows are not read
                break
            start = w * WHISPER_SECONDS
            dur = min(WHISPER_SECONDS, c.seconds - start)
            n_valid = min(WHISPER_FRAMES, max(1, math.ceil(dur * SAMPLE_RATE / (SAMPLE_RATE * FRAME_SECONDS))))
            ids.append(np.zeros(WHISPER_FRAMES, dtype=np.int64))
            special.append(np.zeros(WHISPER_FRAMES, dtype=bool))
            valid.append(np.arange(WHISPER_FRAMES) < n_valid)
            doc.append(c.source)
            payload.append((c, start))
            names.append(c.name if n_win == 1 else f"{c.name} [{start:.0f}-{start + dur:.0f} s]")
            offs.append(start)
            content += n_valid
    return Items("audio", ids, special, valid, np.asarray(doc), payload, names, len(set(doc)),
                 WHISPER_FRAMES * len(ids), content, offsets_s=offs)


def position_meta(items: Items, window: np.ndarray, position: np.ndarray) -> dict:
    """Per sampled position: what it is, in words and as fields (hover text and colouring)."""
    window, position = np.asarray(window), np.asarray(position)
    names = [items.names[int(w)] for w in window]
    if items.modality == "image":
        rows, cols = items.grid
        p = position - items.n_prefix
        row = np.where(p >= 0, p // cols, -1)
        col = np.where(p >= 0, p % cols, -1)
        text = [f"{n} · CLS" if r < 0 else f"{n} · {items.unit} row {r}, col {c}" for n, r, c in zip(names, row, col)]
        return {"text": text, "row": row.tolist(), "col": col.tolist()}
    t = np.asarray([items.offsets_s[int(w)] for w in window]) + position * FRAME_SECONDS
    text = [f"{n} · {s:.2f} s" for n, s in zip(names, t)]
    return {"text": text, "time_s": np.round(t, 3).tolist()}
