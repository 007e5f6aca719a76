"""Speech corpora: human recordings shipped by Debian packages and a PyPI wheel, Wikipedia
sentences read by an offline synthesiser (labelled synthetic everywhere), or the user's own files.

Audio is read with soundfile (libsndfile: WAV, FLAC, OGG; no FFmpeg), mixed to mono and resampled
to 16 kHz with soxr (the maintained SoX resampler, "HQ" quality).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...base.errors import InputError
from ...base.settings import corpora_dir
from ...base.settings import current as current_settings
from ..convert.sources import beckett_wav
from ..corpora import load_documents
from .files import member_files

SAMPLE_RATE = 16_000
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga")
KLETTRES_DIR = Path("/usr/share/klettres")
ALSA_DIR = Path("/usr/share/sounds/alsa")
ALSA_SPEECH = ("Front_Center", "Front_Left", "Front_Right", "Rear_Center", "Rear_Left", "Rear_Right",
               "Side_Left", "Side_Right")  # Noise.wav is not speech
SYNTH_VOICES = ("slt", "rms", "awb")  # flite's 16 kHz voices (female US, male US, male Scottish)
SYNTH_SENTENCES = 120  # Wikipedia sentences read by flite for speech-synthetic
SYNTH_MAX_CHARS = 200  # one sentence per clip, a few seconds each


@dataclass(frozen=True)
class Clip:
    """One recording. `path` and `raw` clips are decoded only when used (`load`), and only the part
    asked for; `seconds` comes from the file header, so a budget picks clips and windows without
    decoding the whole corpus, or the whole of a long clip."""

    name: str
    source: int  # the recording it comes from (its "document")
    seconds: float
    path: Path | None = None
    data: np.ndarray | None = None  # (n,) float32 mono 16 kHz, when already decoded
    synthetic: bool = False
    raw: bytes | None = None  # the bytes of a file from a folder or an archive

    def load(self, start: float = 0.0, seconds: float | None = None) -> np.ndarray:
        """Mono float32 16 kHz samples from `start` (s) for `seconds` (None: to the end): the same
        samples as decoding the whole clip and slicing [int(start * 16000), + int(seconds * 16000)),
        but only those frames (and a short margin for the resampler) are read."""
        if self.data is not None:
            lo = int(start * SAMPLE_RATE)
            return self.data[lo:None if seconds is None else lo + int(seconds * SAMPLE_RATE)]
        return read_audio(self.name, self.raw if self.raw is not None else self.path, start, seconds)


def _file_clip(name: str, path: Path, source: int, synthetic: bool = False) -> Clip:
    import soundfile as sf

    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError) as e:
        raise InputError(f"{name} is not readable audio (WAV, FLAC or OGG): {str(e).splitlines()[0]}") from None
    return Clip(name, source, info.frames / info.samplerate, path=path, synthetic=synthetic)


def to_16k_mono(audio: np.ndarray, sr: int) -> np.ndarray:
    """Mono float32 at 16 kHz (channels averaged; soxr HQ resampling)."""
    a = np.asarray(audio, dtype=np.float32)
    if a.ndim == 2:
        a = a.mean(axis=1)
    if sr != SAMPLE_RATE:
        import soxr

        a = soxr.resample(a, sr, SAMPLE_RATE, quality="HQ").astype(np.float32)
    return np.ascontiguousarray(a)


RESAMPLE_MARGIN_S = 1.0  # read around a part of a clip, so the resampler's filter sees its real neighbours


def read_audio(name: str, raw: bytes | Path, start: float = 0.0, seconds: float | None = None) -> np.ndarray:
    """Mono float32 16 kHz samples of a file, from `start` for `seconds` (None: to the end).

    Only the frames needed are decoded (soundfile seeks). At 16 kHz the part is exact; at another rate
    it is resampled with a margin on each side that is then cut, aligned to the rates' common period."""
    import math

    import soundfile as sf

    try:
        with sf.SoundFile(io.BytesIO(raw) if isinstance(raw, bytes) else str(raw)) as f:
            sr, total = f.samplerate, f.frames
            lo = int(start * SAMPLE_RATE)  # in output samples, as slicing the whole clip would
            n_out = None if seconds is None else int(seconds * SAMPLE_RATE)
            if sr == SAMPLE_RATE:
                first, last, cut = lo, (total if n_out is None else min(total, lo + n_out)), 0
            else:
                period = sr // math.gcd(sr, SAMPLE_RATE)  # source frames per whole number of output samples
                margin = int(RESAMPLE_MARGIN_S * sr)
                first = max(0, (lo * sr // SAMPLE_RATE - margin) // period * period)
                last = total if n_out is None else min(total, (lo + n_out) * sr // SAMPLE_RATE + margin)
                cut = lo - first * SAMPLE_RATE // sr
            if first > 0:
                f.seek(first)
            a = f.read(max(0, last - first), dtype="float32", always_2d=False)
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise InputError(f"{name} is not readable audio (WAV, FLAC or OGG): {str(e).splitlines()[0]}") from None
    if len(a) == 0 and start == 0:
        raise InputError(f"{name} holds no audio samples.")
    a = to_16k_mono(a, sr)
    return a[cut:None if n_out is None else cut + n_out]


def _debian_missing(package: str, path: Path) -> InputError:
    return InputError(f"This corpus needs Debian's {package} package ({path} is missing): "
                      f"sudo apt-get install {package} (./dev.sh does it when run as root).")


def klettres_clips() -> list[Clip]:
    """1,836 human recordings (OGG) of letters and syllables in about 20 languages (klettres-data, GPL-2+)."""
    if not KLETTRES_DIR.is_dir():
        raise _debian_missing("klettres-data", KLETTRES_DIR)
    files = sorted(KLETTRES_DIR.rglob("*.ogg"))
    if not files:
        raise _debian_missing("klettres-data", KLETTRES_DIR)
    return [_file_clip(f"klettres:{p.relative_to(KLETTRES_DIR)}", p, i) for i, p in enumerate(files)]


def alsa_clips() -> list[Clip]:
    """The 8 spoken channel tests of alsa-utils ("Front Center"...; 48 kHz WAV, GPL-2+)."""
    files = [ALSA_DIR / f"{n}.wav" for n in ALSA_SPEECH]
    if not all(p.exists() for p in files):
        raise _debian_missing("alsa-utils", ALSA_DIR)
    return [_file_clip(f"alsa:{p.stem}", p, i) for i, p in enumerate(files)]


def beckett_clip(source: int = 0) -> Clip:
    p = beckett_wav()
    return _file_clip("moonshine:beckett.wav", p, source)


def human_clips() -> list[Clip]:
    """Every human recording available here: klettres-data, alsa-utils and the Beckett reading."""
    clips: list[Clip] = []
    for part in (klettres_clips, alsa_clips):
        try:
            got = part()
        except InputError:
            continue
        clips += [Clip(c.name, len(clips) + j, c.seconds, c.path) for j, c in enumerate(got)]
    clips.append(beckett_clip(len(clips)))
    return clips


def wiki_sentences(n: int = SYNTH_SENTENCES, seed: int = 0) -> list[str]:
    """n sentences of the English Wikipedia corpus (first sentence of seeded articles, <= 200 chars)."""

    docs = load_documents("wiki-en")
    out = []
    for i in np.random.default_rng([seed, 11]).permutation(len(docs)):
        s = docs[i].split(". ")[0].strip()
        if 40 <= len(s) <= SYNTH_MAX_CHARS and s.isascii():
            out.append(s if s.endswith(".") else s + ".")
        if len(out) == n:
            break
    return out


def synthesiser() -> str:
    """The command that reads text aloud here (flite, else espeak-ng)."""
    for cmd in ("flite", "espeak-ng"):
        if shutil.which(cmd):
            return cmd
    raise InputError("speech-synthetic needs an offline synthesiser: sudo apt-get install flite "
                     "(or espeak-ng); ./dev.sh installs it when run as root.")


def synth_version(cmd: str) -> str:
    r = subprocess.run([cmd, "--version"], capture_output=True, text=True, timeout=30)
    return (r.stdout + r.stderr).strip().splitlines()[-1] if (r.stdout + r.stderr).strip() else cmd


def synthesise(text: str, voice_index: int, cmd: str, tmp: Path) -> np.ndarray:
    out = tmp / "s.wav"
    if cmd == "flite":
        args = ["flite", "-voice", SYNTH_VOICES[voice_index % len(SYNTH_VOICES)], "-t", text, "-o", str(out)]
    else:
        args = ["espeak-ng", "-w", str(out), text]
    subprocess.run(args, check=True, capture_output=True, timeout=120)
    return read_audio(out.name, out.read_bytes())


def synthetic_clips(cache_dir: Path | None = None, n: int = SYNTH_SENTENCES) -> list[Clip]:
    """Wikipedia sentences read by flite (voices slt/rms/awb in turn): SYNTHETIC speech.

    Synthesised once and kept as 16 kHz WAV under the cache directory (keyed on the texts and the
    synthesiser's version)."""
    import tempfile

    import soundfile as sf

    cmd = synthesiser()
    texts = wiki_sentences(n)
    key = hashlib.sha256(("\n".join(texts) + synth_version(cmd)).encode()).hexdigest()[:16]
    folder = corpora_dir(cache_dir) / f"speech-synthetic-{key}"
    clips = []
    with tempfile.TemporaryDirectory() as td:
        for i, t in enumerate(texts):
            f = folder / f"{i:04d}.wav"
            if not f.exists():
                a = synthesise(t, i, cmd, Path(td))
                folder.mkdir(parents=True, exist_ok=True)
                tmp = f.with_suffix(".tmp.wav")
                sf.write(tmp, a, SAMPLE_RATE, subtype="PCM_16")
                tmp.replace(f)
            clips.append(_file_clip(f"synthetic ({cmd}): {t}", f, i, synthetic=True))
    return clips


def read_audio_files(path: Path, settings=None) -> list[Clip]:
    """Every WAV/FLAC/OGG file of a folder (recursively, sorted) or a zip archive.

    Sizes and headers are checked now (core.base.settings' limits: total size, seconds per clip), so a bad
    or too long file fails before the model loads; samples are decoded when used, as far as the budget goes."""
    import soundfile as sf

    st = settings or current_settings()
    items = member_files(path, AUDIO_SUFFIXES, "audio files", st.max_unpacked_bytes)
    out = []
    for i, (n, raw) in enumerate(items):
        try:
            info = sf.info(io.BytesIO(raw))
        except (sf.LibsndfileError, RuntimeError, TypeError) as e:
            raise InputError(f"{n} is not readable audio (WAV, FLAC or OGG): {str(e).splitlines()[0]}") from None
        if info.frames <= 0 or info.samplerate <= 0:
            raise InputError(f"{n} holds no audio samples.")
        seconds = info.frames / info.samplerate
        if seconds > st.max_clip_seconds:
            raise InputError(f"{n} is {seconds:,.0f} s long: at most {st.max_clip_seconds:,.0f} s per clip "
                             f"(ANISO_MAX_CLIP_SECONDS). Nothing was decoded; cut it into shorter clips.")
        out.append(Clip(n, i, seconds, raw=raw))
    return out


def clips_fingerprint(clips: list[Clip]) -> str:
    """sha256 over the clips' names, sources and bytes (the files' bytes: no decoding needed)."""
    h = hashlib.sha256()
    for c in clips:
        h.update(f"{c.name}|{c.source}|{c.synthetic}".encode())
        h.update(c.data.tobytes() if c.data is not None else hashlib.sha256(
            c.raw if c.raw is not None else c.path.read_bytes()).digest())
    return h.hexdigest()
