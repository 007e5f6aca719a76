"""Other modalities: image and speech corpora, their models, and the adapters that turn a batch
of items into hidden states (one module per concern: images, audio, items, adapters, zoo).

This package's registry is numpy-only to import; torch is imported where a model runs.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from pathlib import Path

from ...base.errors import InputError
from ...base.settings import current as current_settings
from . import audio, images
from .audio import AUDIO_SUFFIXES, clips_fingerprint
from .files import check_unpacked
from .images import IMAGE_SUFFIXES, pictures_fingerprint


@dataclass(frozen=True)
class ModalCorpus:
    id: str
    modality: str  # "image" | "audio"
    label: str
    description: str
    synthetic: bool = False


MODAL_CORPORA: dict[str, ModalCorpus] = {
    c.id: c
    for c in [
        ModalCorpus("images-natural", "image", "Sample photographs (22)",
                    "the 20 photographs and micrographs of scikit-image's data module and scikit-learn's 2 "
                    "sample images (china, flower), each resized to 224x224: a SMALL corpus (22 images)"),
        ModalCorpus("images-crops", "image", "Random crops of the sample photographs",
                    "24 seeded square crops (30-100% of the shorter side) of each of those 22 photographs, "
                    "528 images; crops of one photograph count as one source, not as different contexts"),
        ModalCorpus("speech-human", "audio", "Human speech recordings",
                    "1,836 recordings of letters and syllables in about 20 languages (Debian klettres-data), "
                    "8 spoken channel tests (alsa-utils) and 10 s of read English (Beckett, from the "
                    "useful-moonshine-onnx wheel); mostly 1-3 s clips"),
        ModalCorpus("speech-synthetic", "audio", "Wikipedia read by flite (SYNTHETIC)",
                    "120 sentences of the English Wikipedia corpus read by the offline synthesiser flite "
                    "(voices slt, rms, awb): SYNTHETIC speech, not human recordings", synthetic=True),
    ]
}


def corpus_modality(ident: str) -> str:
    """'text', 'image' or 'audio' for a corpus identifier or path (no decoding)."""
    if ident in MODAL_CORPORA:
        return MODAL_CORPORA[ident].modality
    p = Path(ident).expanduser()

    if p.suffix.lower() in IMAGE_SUFFIXES:
        return "image"
    if p.suffix.lower() in AUDIO_SUFFIXES:
        return "audio"
    if p.is_dir() or p.suffix.lower() == ".zip":
        names = _names(p)
        n_img = sum(1 for n in names if Path(n).suffix.lower() in IMAGE_SUFFIXES)
        n_aud = sum(1 for n in names if Path(n).suffix.lower() in AUDIO_SUFFIXES)
        if n_img or n_aud:
            return "image" if n_img >= n_aud else "audio"
    return "text"


def _names(p: Path) -> list[str]:
    if p.is_dir():
        return [str(q) for q in p.rglob("*") if q.is_file()]
    import zipfile

    try:
        with zipfile.ZipFile(p) as z:
            return z.namelist()
    except (zipfile.BadZipFile, OSError):
        return []


# Within `shared_decoding()`: the built-in corpora decoded (and fingerprinted) once, for runs that read the same
# corpus one after another (a paper's reproduction). A context variable: a job's thread sees its own.
_SHARED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("aniso_shared_decoding", default=None)


@contextlib.contextmanager
def shared_decoding():
    """Decode each built-in image or speech corpus once in this block (pictures, clips, fingerprints)."""
    token = _SHARED.set(_SHARED.get() if _SHARED.get() is not None else {})
    try:
        yield
    finally:
        _SHARED.reset(token)


def _shared(key: tuple, make):
    memo = _SHARED.get()
    if memo is None:
        return make()
    if key not in memo:
        memo[key] = make()
    return memo[key]


def load_pictures(ident: str, seed: int = 0):
    if ident == "images-natural":
        return _shared(("pictures", ident), images.sample_photographs)
    if ident == "images-crops":  # fixed seed: the corpus, not the run seed
        return _shared(("pictures", ident), lambda: images.random_crops(images.sample_photographs(), seed=0))
    p = Path(ident).expanduser()
    if not p.exists():
        raise InputError(f"Unknown corpus {ident!r}: no such file or folder.")
    return images.read_image_files(p)  # a folder, a zip or one image


def load_clips(ident: str, cache_dir=None):
    if ident == "speech-human":
        return _shared(("clips", ident), audio.human_clips)
    if ident == "speech-synthetic":
        return _shared(("clips", ident, str(cache_dir)), lambda: audio.synthetic_clips(cache_dir))
    p = Path(ident).expanduser()
    if not p.exists():
        raise InputError(f"Unknown corpus {ident!r}: no such file or folder.")
    return audio.read_audio_files(p)


def modal_fingerprint(ident: str, cache_dir=None) -> str:
    if ident in MODAL_CORPORA:
        return _shared(("fingerprint", ident, str(cache_dir)), lambda: _fingerprint(ident, cache_dir))
    return _fingerprint(ident, cache_dir)


def _fingerprint(ident: str, cache_dir=None) -> str:
    import hashlib

    if corpus_modality(ident) == "image":
        if ident in MODAL_CORPORA:  # the built-ins are deterministic: hash what they decode to
            return pictures_fingerprint(load_pictures(ident))
    elif ident == "speech-synthetic":
        return clips_fingerprint(load_clips(ident, cache_dir))
    elif ident == "speech-human":
        return clips_fingerprint(load_clips(ident))
    p = Path(ident).expanduser()
    h = hashlib.sha256()
    if p.is_dir():
        files = [q for q in sorted(p.rglob("*")) if q.is_file()]
        check_unpacked(sum(q.stat().st_size for q in files), p.name, current_settings().max_unpacked_bytes)
        for q in files:
            h.update(str(q.relative_to(p)).encode())
            h.update(hashlib.sha256(q.read_bytes()).digest())
    elif p.is_file():
        h.update(p.read_bytes())
    else:
        raise InputError(f"Unknown corpus {ident!r}: no such file or folder.")
    return h.hexdigest()


def list_modal_corpora() -> list[dict]:
    return [{"id": c.id, "label": c.label, "description": c.description, "modality": c.modality,
             "synthetic": c.synthetic} for c in MODAL_CORPORA.values()]
