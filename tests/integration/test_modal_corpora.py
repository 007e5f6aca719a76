"""Image and speech corpora: real files read offline, resampled to 16 kHz, laid out as items."""

import io
import shutil
import zipfile

import numpy as np
import pytest

from core.base.errors import InputError
from core.inputs.modalities import audio as A
from core.inputs.modalities import corpus_modality, load_pictures
from core.inputs.modalities.items import WHISPER_FRAMES, audio_items, image_items, position_meta


def test_sample_photographs_and_crops_are_deterministic():
    pics = load_pictures("images-natural")
    assert len(pics) == 22 and len({p.source for p in pics}) == 22
    assert all(p.pixels.dtype == np.uint8 and p.pixels.ndim == 3 and p.pixels.shape[2] == 3 for p in pics)
    crops = load_pictures("images-crops")
    assert len(crops) == 22 * 24
    again = load_pictures("images-crops")
    assert all(np.array_equal(a.pixels, b.pixels) and a.name == b.name for a, b in zip(crops[:30], again[:30]))
    assert {c.source for c in crops} == {p.source for p in pics}  # a crop keeps its photograph as source
    assert all(c.pixels.shape[0] == c.pixels.shape[1] for c in crops)


def test_uploaded_images_zip_and_errors(tmp_path):
    from PIL import Image

    z = tmp_path / "imgs.zip"
    with zipfile.ZipFile(z, "w") as f:
        for i in range(3):
            buf = io.BytesIO()
            Image.fromarray(np.full((20, 30, 3), 40 * i, dtype=np.uint8)).save(buf, "PNG")
            f.writestr(f"d/{i}.png", buf.getvalue())
        f.writestr("notes.txt", "not an image")
    assert corpus_modality(str(z)) == "image"
    pics = load_pictures(str(z))
    assert [p.name for p in pics] == ["d/0.png", "d/1.png", "d/2.png"] and pics[2].pixels[0, 0, 0] == 80
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as f:
        f.writestr("x.png", b"garbage")
    with pytest.raises(InputError, match="not a readable image"):
        load_pictures(str(bad))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no images"):
        load_pictures(str(tmp_path / "empty"))


def test_image_items_layout_and_metadata():
    pics = load_pictures("images-natural")
    it = image_items(pics, positions=257, prefix=1, grid=(16, 16), max_tokens=600, seed=0)
    assert len(it.ids) == 3 and it.n_content_tokens == 768  # whole images until the budget is met
    assert it.special[0][0] and not it.special[0][1:].any()
    meta = position_meta(it, np.array([0, 1]), np.array([0, 1 + 16 * 2 + 5]))
    assert meta["row"] == [-1, 2] and meta["col"] == [-1, 5] and "CLS" in meta["text"][0]


def test_beckett_and_uploaded_audio_resampled(tmp_path):
    import soundfile as sf

    b = A.beckett_clip()
    a = b.load()
    assert a.dtype == np.float32 and abs(len(a) / 16000 - b.seconds) < 1e-3 and 9 < b.seconds < 11
    t = np.arange(44100) / 44100
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    z = tmp_path / "clips.zip"
    with zipfile.ZipFile(z, "w") as f:
        for fmt in ("WAV", "FLAC", "OGG"):
            buf = io.BytesIO()
            sf.write(buf, np.stack([tone, tone], 1), 44100, format=fmt)  # stereo, 44.1 kHz
            f.writestr(f"tone.{fmt.lower()}", buf.getvalue())
    assert corpus_modality(str(z)) == "audio"
    clips = A.read_audio_files(z)
    assert [c.name for c in clips] == ["tone.flac", "tone.ogg", "tone.wav"]
    for c in clips:
        x = c.load()
        assert abs(len(x) - 16000) <= 2 and abs(c.seconds - 1.0) < 1e-3
        spec = np.abs(np.fft.rfft(x[:16000]))
        assert abs(np.argmax(spec) * 16000 / len(x[:16000]) - 440) < 3  # the tone survives resampling
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF0000garbage")
    with pytest.raises(InputError, match="not readable audio"):
        A.read_audio_files(bad)


def test_audio_items_mask_frames_past_the_end():
    sr = 16000
    clips = [A.Clip("short", 0, 2.5, data=np.zeros(int(2.5 * sr), np.float32)),
             A.Clip("long", 1, 70.0, data=np.zeros(70 * sr, np.float32))]
    it = audio_items(clips, max_tokens=10**9, seed=0)
    by_name = dict(zip(it.names, it.valid))
    assert by_name["short"].sum() == 125 and len(by_name["short"]) == WHISPER_FRAMES  # 50 frames per second
    longs = [v.sum() for n, v in by_name.items() if n.startswith("long")]
    assert sorted(longs) == [500, 1500, 1500]  # 30 + 30 + 10 s, windows never cross clips
    assert it.n_content_tokens == 125 + 3500
    w = it.names.index("long [30-60 s]")
    assert position_meta(it, np.array([w]), np.array([100]))["time_s"] == [32.0]


@pytest.mark.slow
@pytest.mark.skipif(not A.ALSA_DIR.is_dir() or not A.KLETTRES_DIR.is_dir(),
                    reason="Debian's alsa-utils / klettres-data are not installed (./dev.sh installs them as root)")
def test_human_recordings_from_debian():
    clips = A.human_clips()
    assert len(clips) == 1836 + 8 + 1
    alsa = [c for c in clips if c.name.startswith("alsa:")]
    x = alsa[0].load()  # 48 kHz on disk
    assert abs(len(x) / 16000 - alsa[0].seconds) < 1e-3
    assert {c.source for c in clips} == set(range(len(clips)))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flite") is None, reason="Debian's flite is not installed (./dev.sh installs it as root)")
def test_synthetic_speech_is_labelled(tmp_path):
    clips = A.synthetic_clips(tmp_path, n=3)
    assert len(clips) == 3 and all(c.synthetic and c.name.startswith("synthetic (flite)") for c in clips)
    assert all(1.0 < c.seconds < 30 and np.abs(c.load()).max() > 0.05 for c in clips)
    again = A.synthetic_clips(tmp_path, n=3)  # reused from the cache folder, identical
    assert all(np.array_equal(a.load(), b.load()) for a, b in zip(clips, again))


def test_member_files_reads_folders_archives_and_single_files_alike(tmp_path):
    from core.inputs.modalities.files import member_files

    folder = tmp_path / "pics"
    (folder / "sub").mkdir(parents=True)
    for name in ("b.PNG", "sub/a.jpg", ".hidden.png", "notes.txt"):
        (folder / name).write_bytes(name.encode())
    z = tmp_path / "pics.zip"
    with zipfile.ZipFile(z, "w") as f:
        for name in ("b.PNG", "sub/a.jpg", "sub/.hidden.png", "notes.txt"):
            f.writestr(name, name.encode())
    suffixes = (".png", ".jpg")
    assert [n for n, _ in member_files(folder, suffixes, "images")] == ["b.PNG", "sub/a.jpg"]
    assert member_files(z, suffixes, "images") == [("b.PNG", b"b.PNG"), ("sub/a.jpg", b"sub/a.jpg")]
    assert member_files(folder / "b.PNG", suffixes, "images") == [("b.PNG", b"b.PNG")]
    with pytest.raises(InputError, match="holds no images"):
        member_files(folder / "notes.txt", suffixes, "images")
    (tmp_path / "broken.zip").write_bytes(b"PK not really")
    with pytest.raises(InputError, match="not a valid zip"):
        member_files(tmp_path / "broken.zip", suffixes, "images")


# ----------------------------------------------------------------------------- issue 27 item 6: the budget
def _wav(path, seconds: float, sr: int = 16000, seed: int = 0):
    """A quiet noise recording (PCM 16), written in pieces so the test itself stays small in memory."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    with sf.SoundFile(str(path), "w", sr, 1, "PCM_16") as f:
        left = int(seconds * sr)
        while left:
            n = min(left, 60 * sr)
            f.write((0.01 * rng.standard_normal(n)).astype(np.float32))
            left -= n
    return path


@pytest.fixture
def frames_read(monkeypatch):
    """Every frame soundfile decodes, counted."""
    import soundfile as sf

    count = {"frames": 0}
    orig = sf.SoundFile.read

    def read(self, frames=-1, *a, **k):
        out = orig(self, frames, *a, **k)
        count["frames"] += len(out)
        return out

    monkeypatch.setattr(sf.SoundFile, "read", read)
    return count


def _features_fed(monkeypatch, items) -> list[np.ndarray]:
    """The audio each window hands to the log-mel front end, through the Whisper adapter itself."""
    import types

    import torch

    import core.inputs.modalities.adapters as AD
    from core.inputs.modalities.adapters import WhisperEncoderAdapter

    fed = []  # the front end as the adapter calls it (its own name for core.inputs.convert.whisper.log_mel)
    monkeypatch.setattr(AD, "log_mel", lambda a, sr=16000: fed.append(np.array(a)) or np.zeros((80, 3000), np.float32))
    model = lambda **kw: types.SimpleNamespace(hidden_states=(torch.zeros(1, 1500, 4),))  # noqa: E731
    WhisperEncoderAdapter().forward(model, items, list(range(len(items.payload))), "cpu")
    return fed


def test_a_long_clip_is_read_only_as_far_as_the_budget(tmp_path, monkeypatch, frames_read):
    """A 10-minute recording with a budget of 100 frames: one 30 s window is decoded (not 20), and it
    gives the same items and samples as a 30 s clip of the same sound."""
    long_dir, short_dir = tmp_path / "long", tmp_path / "short"
    long_dir.mkdir(), short_dir.mkdir()
    _wav(long_dir / "talk.wav", 600)
    _wav(short_dir / "talk.wav", 30)  # the same noise: the first 30 s of the long one
    (long_clip,), (short_clip,) = A.read_audio_files(long_dir), A.read_audio_files(short_dir)
    assert long_clip.seconds == 600 and long_clip.data is None  # the header only
    assert frames_read["frames"] == 0
    it_long = audio_items([long_clip], max_tokens=100, seed=0)
    it_short = audio_items([short_clip], max_tokens=100, seed=0)
    assert len(it_long.payload) == 1 and it_long.n_content_tokens == 1500 == it_short.n_content_tokens
    assert [v.tolist() for v in it_long.valid] == [v.tolist() for v in it_short.valid]
    fed_long = _features_fed(monkeypatch, it_long)
    assert frames_read["frames"] == 30 * 16000  # one window's frames, out of 9.6 million
    fed_short = _features_fed(monkeypatch, it_short)
    assert len(fed_long) == 1 and np.array_equal(fed_long[0], fed_short[0])
    # with a larger budget, the windows read are those the budget needs, and equal slices of the whole clip
    it = audio_items([long_clip], max_tokens=3001, seed=0)
    assert [n.split("[")[-1] for n in it.names] == ["0-30 s]", "30-60 s]", "60-90 s]"]
    whole = long_clip.load()
    for (clip, start), got in zip(it.payload, _features_fed(monkeypatch, it)):
        lo = int(start * 16000)
        assert np.array_equal(got, whole[lo:lo + 30 * 16000])


def test_a_part_of_a_clip_at_another_rate_matches_the_whole(tmp_path):
    """At 44.1 kHz a window is resampled with a margin: the same samples as resampling the whole clip."""
    import soundfile as sf

    sr = 44100
    t = np.arange(int(95 * sr)) / sr
    sf.write(str(tmp_path / "tone.wav"), (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), sr, subtype="FLOAT")
    (clip,) = A.read_audio_files(tmp_path)
    whole = clip.load()
    for start in (0.0, 30.0, 60.0, 90.0):
        part = clip.load(start, 30.0)
        lo = int(start * 16000)
        ref = whole[lo:lo + 30 * 16000]
        assert part.shape == ref.shape and np.max(np.abs(part - ref)) < 1e-4, start


def test_clip_length_and_total_size_limits(tmp_path, monkeypatch, frames_read):
    _wav(tmp_path / "long.wav", 600)
    monkeypatch.setenv("ANISO_MAX_CLIP_SECONDS", "300")
    with pytest.raises(InputError, match=r"long.wav is 600 s long: at most 300 s per clip \(ANISO_MAX_CLIP_SECONDS\)"):
        A.read_audio_files(tmp_path)
    monkeypatch.delenv("ANISO_MAX_CLIP_SECONDS")
    monkeypatch.setenv("ANISO_MAX_UNPACKED_MB", "10")  # 600 s of 16-bit 16 kHz: 18 MiB
    with pytest.raises(InputError, match="unpacks to 18 MiB, more than the limit of 10 MiB"):
        A.read_audio_files(tmp_path)
    assert frames_read["frames"] == 0
